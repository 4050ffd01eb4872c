"""``inn tag``: tag text with a trained model. The other tagging commands have modules of their
own: :mod:`~inn.tagging.export` (``inn export-tagger``), :mod:`~inn.tagging.throughput`
(``inn benchmark-tagger``) and :mod:`~inn.tagging.shared_task` (``inn score-text``,
``inn conllu-text``).

``inn tag MODEL [FILE ...]`` reads every input (stdin when none) before it tags anything and
writes its output only when all of it is tagged (``--out`` atomically), so bad input stops it
with one line and nothing half-written. It ends with one line that is also the benchmark:
sentences, tokens, seconds, tokens per second (running text: tokenizing included), and the
implicit layer's non-converged solves. The tagging is :class:`inn.tagging.tagger.Tagger`'s.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

import torch

from inn.device import add_device_argument, add_threads_argument, set_threads
from inn.errors import InnError, positive_int
from inn.io import refuse_inputs_as_outputs, write_output
from inn.tagging.documents import INPUT_FORMATS, OUTPUT_FORMATS, TextSentence, write_text
from inn.tagging.export import export_main as export_main  # X as X: the other commands, found here for a release
from inn.tagging.files import input_bytes, read_conllu_file, read_inputs
from inn.tagging.shared_task import conllu_text_main as conllu_text_main
from inn.tagging.shared_task import score_main as score_main
from inn.tagging.throughput import benchmark_main as benchmark_main

log = logging.getLogger(__name__)


def _tag_texts(
    tagger, files: list[str], language: str | None, progress: bool, route: str = "auto"
) -> tuple[list[TextSentence], list[list[str]], list[str]]:
    """Running text of ``files`` (stdin for none or ``-``), each a document, read whole first,
    then split and tagged: its CoNLL-U sentences (numbered on across files), tags and sources."""
    from inn.tagging.documents import contradiction, decode, raw_to_conllu

    texts = []
    for data, source in input_bytes(files):
        texts.append((decode(data, source), source))
    sentences: list[TextSentence] = []
    tags: list[list[str]] = []
    sources: list[str] = []
    for text, source in texts:
        why = contradiction(text, "text")
        if why:
            log.warning("%s: %s", source, why)
        raw = tagger.tag_text(text, language, progress, route)
        sentences += raw_to_conllu(raw, first_id=len(sentences) + 1, doc_id=None if source == "<stdin>" else source)
        tags += [r.tags for r in raw]
        sources += [source] * len(raw)
    return sentences, tags, sources


def _log_accuracy(scores: dict) -> None:
    """The ``--accuracy`` lines: the scores, the unseen share beside the dev set's, and the gold
    tags no output can match."""
    dev = scores.get("dev_unseen_share")
    unseen = "n/a" if scores["unseen_accuracy"] is None else f"{scores['unseen_accuracy']:.4f}%"
    log.info(
        "accuracy %.4f%% on %d tokens, unseen-word accuracy %s on %d tokens",
        scores["accuracy"],
        scores["tokens"],
        unseen,
        scores["unseen_tokens"],
    )
    log.info(
        "%.1f%% of the tokens are unseen in training; its dev set: %s",
        100 * scores["unseen_share"],
        "not recorded" if dev is None else f"{dev:.1%}",
    )
    outside = scores["outside_tokens"]
    if outside:
        rest = scores["tokens"] - outside
        correct = scores["accuracy"] * scores["tokens"] / 100
        named = ", ".join(f"{tag} x{count}" for tag, count in list(scores["tags_outside"].items())[:8])
        log.warning(
            "%d gold tokens (%.2f%%) carry %d tag(s) outside the model's tag set (%s%s): no output can match "
            "them; accuracy on the other %d tokens %.4f%%",
            outside,
            100 * outside / scores["tokens"],
            len(scores["tags_outside"]),
            named,
            ", ..." if len(scores["tags_outside"]) > 8 else "",
            rest,
            100 * correct / rest if rest else 0.0,
        )


def tag_main(argv: list[str]) -> None:
    """``inn tag MODEL [FILE ...]``: tag running text, CoNLL-U, horizontal or vertical text."""
    parser = _tag_parser()
    args = parser.parse_intermixed_args(argv)  # MODEL --accuracy FILE: files after options too
    set_threads(args.threads)
    _check_tag_args(parser, args)
    gold_text = read_conllu_file(args.gold, "--gold") if args.gold else None
    tagger, column = _load_tagger(args)
    interactive = sys.stderr.isatty()
    if args.input == "text":
        tagger.tokenizer(args.language, args.tokenizer)  # an unknown language is refused before anything is read
    start = time.perf_counter()  # from here on timed: reading, tokenizing, tagging, writing
    sentences, predicted, sources = _tag_inputs(tagger, args, interactive)
    output = args.output or "conllu"
    words = sum(len(s.words) for s in sentences)
    foreign = tagger.foreign(tagger.unseen_share([s.words for s in sentences]), words)
    if foreign:
        log.warning("%s", foreign)
    scores = None
    if args.accuracy:
        if sentences:
            scores = tagger.accuracy(sentences, predicted, column, sources)
        else:
            log.warning("no tokens to score: the input is empty")
    text = write_text(sentences, predicted, output, column)
    seconds = time.perf_counter() - start
    write_output(args.out, text)
    speed = {
        "sentences": len(sentences),
        "tokens": words,
        "seconds": seconds,
        "tokens_per_second": words / seconds if seconds > 0 else None,
        "nonconverged": tagger.nonconverged,
        "device": str(tagger.device),
        "threads": torch.get_num_threads(),
    }
    results: dict = {}
    if scores is not None:
        _log_accuracy(scores)
        results.update(scores)
    if gold_text is not None:
        system = text if output == "conllu" else write_text(sentences, predicted, "conllu", column)
        results.update(_score_against_gold(gold_text, args.gold, system, column))
    if args.metrics:
        from inn.io import write_json

        write_json(
            args.metrics,
            {
                **results,
                **speed,
                "model": tagger.meta.get("model"),
                "dataset": tagger.meta.get("dataset"),
                "column": column,
                "input": args.input,
            },
        )
    _log_speed(tagger, speed, args.input == "text")


def _tag_parser() -> argparse.ArgumentParser:
    """The command line of ``inn tag``."""
    parser = argparse.ArgumentParser(
        prog="inn tag",
        description="Tag text with a trained model (a tagger.pt or a POS checkpoint.pt).",
        epilog="Running text (--input text) is split into sentences (blank lines always end one) and into the words "
        "of the tagger's corpus (UD English, or the Penn Treebank's escapes and quotes), each file a document; "
        "the CoNLL-U output keeps it recoverable (# text, SpaceAfter=No, multiword tokens such as 1-2 I'm). "
        "--gold scores the result as the CoNLL 2018 shared task does (inn score-text). "
        "Details: docs/tagging.md.",
    )
    parser.add_argument("model", help="the tagger file: results/taggers/pos/<corpus>/<model>/seed<N>/tagger.pt")
    parser.add_argument("files", nargs="*", help="input files (default: stdin; - is stdin)")
    parser.add_argument(
        "--input",
        default="auto",
        choices=("auto", *INPUT_FORMATS, "text"),
        help="input form: text (running text, tokenized here), conllu, horizontal (a sentence a line, "
        "words split at spaces) or vertical (a word a line); auto: CoNLL-U when the first line "
        "after any # comments is a token line, else horizontal",
    )
    parser.add_argument(
        "--language", help="with --input text: the text's language (default: the tagger's corpus's; tokenizers: en)"
    )
    parser.add_argument(
        "--tokenizer",
        default="auto",
        choices=("auto", "learned", "rules"),
        help="with --input text: who splits it: the tagger file's learned segmenter, the language's "
        "rules, or auto (the learned one where the file holds one, else the rules)",
    )
    parser.add_argument(
        "--output",
        choices=OUTPUT_FORMATS,
        help="output form (default: conllu; word_TAG lines for horizontal, word<TAB>TAG for vertical)",
    )
    parser.add_argument("--column", choices=("xpos", "upos"), help="the CoNLL-U column to fill (default: the model's)")
    parser.add_argument("--out", help="output file (default: stdout), written whole or not at all")
    parser.add_argument(
        "--accuracy",
        action="store_true",
        help="score against the gold tags of the CoNLL-U input (token and unseen-word accuracy, "
        "gold tags outside the model's tag set)",
    )
    parser.add_argument(
        "--gold",
        help="score the tagged text against this gold CoNLL-U file of the same text as the "
        "CoNLL 2018 shared task does: Tokens, Sentences, Words and tag F1",
    )
    parser.add_argument("--metrics", help="with --accuracy or --gold: write the scores and speed to this JSON file")
    add_device_argument(parser)
    add_threads_argument(parser)
    parser.add_argument(
        "--batch-size",
        type=positive_int,
        default=20,
        help="sentences per batch (20, evaluation's, gives its exact tags)",
    )
    return parser


def _check_tag_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse contradictory options and outputs that are folders or inputs, before the model
    is loaded."""
    if args.metrics and not (args.accuracy or args.gold):
        parser.error("--metrics needs --accuracy or --gold")
    if args.accuracy and args.input == "text":
        raise InnError(
            "--accuracy needs CoNLL-U input with gold tags; score running text (--input text) against its "
            "gold CoNLL-U file with --gold GOLD.conllu"
        )
    for flag, given in (("--language", args.language), ("--tokenizer", args.tokenizer != "auto")):
        if given and args.input != "text":
            parser.error(f"{flag} applies to running text (--input text) only")
    for flag, path, example in (("--out", args.out, "tagged.conllu"), ("--metrics", args.metrics, "metrics.json")):
        if path and Path(path).is_dir():  # found before the model is loaded and the text tagged
            raise InnError(f"{flag} {path} is a folder: give a file path, e.g. {Path(path) / example}")
    refuse_inputs_as_outputs(
        {"--out": args.out, "--metrics": args.metrics},
        {"the model": args.model, "an input file": args.files, "--gold": args.gold},
    )


def _load_tagger(args: argparse.Namespace):
    """The tagger of ``args.model`` and the CoNLL-U column its tags fill, logged."""
    from inn.tagging.tagger import Tagger

    loaded = time.perf_counter()
    tagger = Tagger.load(args.model, args.device, args.batch_size)
    column = args.column or tagger.column
    log.info("%s (loaded in %.1f s)", tagger.describe(), time.perf_counter() - loaded)
    if column != tagger.column:
        log.warning(
            "the model predicts %s tags but --column %s fills %s with them (and --accuracy scores them "
            "against its gold tags)",
            tagger.column.upper(),
            column,
            column.upper(),
        )
    return tagger, column


def _tag_inputs(
    tagger, args: argparse.Namespace, interactive: bool
) -> tuple[list[TextSentence], list[list[str]], list[str]]:
    """Read and tag the input files (running text or tokenized text): the sentences, their
    tags and sources."""
    if args.input == "text":
        return _tag_texts(tagger, args.files, args.language, interactive, args.tokenizer)
    pairs, forms = read_inputs(args.files, args.input)
    sentences, sources = [s for s, _ in pairs], [source for _, source in pairs]
    if args.accuracy and any(form != "conllu" for form in forms):
        raise InnError("--accuracy needs CoNLL-U input with gold tags (give --input conllu, or a .conllu file)")
    predicted = tagger.tag([s.words for s in sentences], progress=interactive and len(sentences) > 200)
    return sentences, predicted, sources


def _score_against_gold(gold_text: str, gold: str, system: str, column: str) -> dict:
    """``--gold``: the CoNLL 2018 shared task's scores of the tagged CoNLL-U ``system`` against
    the gold file ``gold`` (its text ``gold_text``), logged and returned for the metrics file."""
    from inn.tagging.conll18 import evaluate, read_ud, unscored

    gold_ud, system_ud = read_ud(gold_text, gold), read_ud(system, "the tagged text")
    shared = evaluate(gold_ud, system_ud)
    tag = column.upper()
    if tag in (cannot := unscored(gold_ud, system_ud)):
        log.warning("%s F1 below measures nothing: %s", tag, cannot[tag])
    log.info(
        "against %s (CoNLL 2018 shared task scores): Tokens F1 %.2f, Sentences F1 %.2f, Words F1 %.2f, %s F1 "
        "%.2f (%.2f%% of the aligned words)",
        gold,
        shared["Tokens"].f1,
        shared["Sentences"].f1,
        shared["Words"].f1,
        tag,
        shared[tag].f1,
        shared[tag].aligned_accuracy or 0.0,
    )
    return {"conll18": {name: score.as_dict() for name, score in shared.items()}, "gold": gold}


def _log_speed(tagger, speed: dict, running_text: bool) -> None:
    """The closing line, which is also the benchmark, and the warning for missed tolerances."""
    log.info(
        "tagged %d sentences, %d words in %.2f s (%.0f words/s%s) on %s, %d thread(s); %d non-converged solve(s)",
        speed["sentences"],
        speed["tokens"],
        speed["seconds"],
        speed["tokens_per_second"] or 0.0,
        ", tokenizing included" if running_text else "",
        tagger.device,
        torch.get_num_threads(),
        tagger.nonconverged,
    )
    if tagger.nonconverged:
        log.warning(
            "%d sentence solve(s) of the implicit layer missed their tolerance: their tags may differ "
            "from a converged solve's",
            tagger.nonconverged,
        )
