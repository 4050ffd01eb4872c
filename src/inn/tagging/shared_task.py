"""The CoNLL 2018 shared task's side of running text: ``inn conllu-text``, the raw text of a
gold CoNLL-U file (what ``inn tag --input text`` tags), and ``inn score-text``, the task's
scores of the tagged result against that gold file.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from inn.errors import InnError
from inn.io import refuse_inputs_as_outputs, write_output
from inn.tagging.files import read_conllu_file

log = logging.getLogger(__name__)


def score_main(argv: list[str]) -> None:
    """``inn score-text GOLD SYSTEM``: the CoNLL 2018 shared task's scores (Tokens, Sentences,
    Words, UPOS, XPOS: precision, recall, F1 and the tags' accuracy on aligned words) of a
    system's CoNLL-U file against the gold one of the same text (:mod:`inn.tagging.conll18`), printed as
    the task's script prints them (``conll18_ud_eval.py -v``)."""
    from inn.tagging.conll18 import METRICS, evaluate, gives_tags, read_ud, unscored

    parser = argparse.ArgumentParser(
        prog="inn score-text", description=score_main.__doc__.split("\n\n")[0].replace("``", "")
    )
    parser.add_argument("gold", help="the gold CoNLL-U file (may be gzip-compressed)")
    parser.add_argument(
        "system",
        help="the system's CoNLL-U file of the same text, e.g. from inn tag --input text (may be gzip-compressed)",
    )
    parser.add_argument("--out", help="also write the scores to this JSON file")
    args = parser.parse_args(argv)
    refuse_inputs_as_outputs({"--out": args.out}, {"the gold file": args.gold, "the system file": args.system})
    gold = read_ud(read_conllu_file(args.gold, "gold"), args.gold)
    system = read_ud(read_conllu_file(args.system, "system"), args.system)
    scores = evaluate(gold, system)
    cannot = unscored(gold, system)
    for column, reason in cannot.items():
        swapped = gives_tags(system, column) and not gives_tags(gold, column)
        log.warning("%s: %s%s", column, reason, "; are the files in the order GOLD SYSTEM?" if swapped else "")
    lines = [
        "Metric     | Precision |    Recall |  F1 Score | AligndAcc",
        "-----------+-----------+-----------+-----------+-----------",
    ]
    for name in METRICS:
        score = scores[name]
        aligned = f"{score.aligned_accuracy:10.2f}" if score.aligned_accuracy is not None else ""
        lines.append(f"{name:<11}|{score.precision:10.2f} |{score.recall:10.2f} |{score.f1:10.2f} |{aligned}")
    write_output(None, "\n".join(lines) + "\n")
    if args.out:
        from inn.io import write_json

        write_json(
            args.out,
            {
                "gold": args.gold,
                "system": args.system,
                **{name: score.as_dict() for name, score in scores.items()},
                "unscored": cannot,
            },
        )


def conllu_text_main(argv: list[str]) -> None:
    """``inn conllu-text FILE``: the raw text of a CoNLL-U file, as a UD release's ``.txt``
    (:func:`inn.tagging.documents.conllu_to_text`): what ``inn tag --input text`` tags to be scored
    against the file."""
    from inn.tagging.documents import conllu_to_text, decode

    parser = argparse.ArgumentParser(
        prog="inn conllu-text",
        description="The raw text of a CoNLL-U file as UD's conllu_to_text.pl writes it: # text lines, a space "
        "between sentences, a blank line at # newpar and # newdoc, lines broken at 80 characters.",
    )
    parser.add_argument("conllu", help="the CoNLL-U file")
    parser.add_argument("--width", type=int, default=80, help="break lines at a space from this length (0: never)")
    parser.add_argument("--out", help="output file (default: stdout), written whole or not at all")
    args = parser.parse_args(argv)
    refuse_inputs_as_outputs({"--out": args.out}, {"the CoNLL-U file": args.conllu})
    try:
        data = Path(args.conllu).read_bytes()
    except OSError as exc:
        raise InnError(f"cannot read {args.conllu}: {exc.strerror or exc}") from None
    text = conllu_to_text(decode(data, args.conllu), args.conllu, args.width)
    write_output(args.out, text)
