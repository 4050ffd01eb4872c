"""``inn tag``: tag text with a trained model; ``inn export-tagger``: write a tagger file;
``inn benchmark-tagger``: the taggers' throughput; ``inn score-text``: the CoNLL 2018 shared
task's scores of a tagged text; ``inn conllu-text``: the raw text of a CoNLL-U file.

``inn tag MODEL [FILE ...]`` reads every input (stdin when none) before it tags anything and
writes its output only when all of it is tagged (``--out`` atomically), so bad input stops it
with one line and nothing half-written. It ends with one line that is also the benchmark:
sentences, tokens, seconds, tokens per second (running text: tokenizing included), and the
implicit layer's non-converged solves. The tagging is :class:`inn.tagging.tagger.Tagger`'s.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

import torch

from inn.device import set_threads
from inn.errors import InnError, positive_int
from inn.io import prepared_files, read_stdin, refuse_inputs_as_outputs, write_output
from inn.tagging.documents import INPUT_FORMATS, OUTPUT_FORMATS, TextSentence, read_text, write_text

log = logging.getLogger(__name__)


def _input_bytes(files: list[str]):
    """(bytes, source name) of each of ``files``, stdin for none or ``-``; an unreadable one is
    one line naming it."""
    for name in files or ["-"]:
        if name == "-":
            yield read_stdin(), "<stdin>"
            continue
        try:
            yield Path(name).read_bytes(), name
        except OSError as exc:
            raise InnError(f"cannot read {name}: {exc.strerror or exc}") from None


def _read_inputs(files: list[str], form: str) -> tuple[list[tuple[TextSentence, str]], list[str]]:
    """Every sentence of ``files`` (stdin for none or ``-``) with its source, and the form
    each file was read as."""
    sentences: list[tuple[TextSentence, str]] = []
    forms = []
    for data, source in _input_bytes(files):
        read, used = read_text(data, source, form)
        sentences += [(s, source) for s in read]
        forms.append(used)
    return sentences, forms


def _tag_texts(
    tagger, files: list[str], language: str | None, progress: bool, route: str = "auto"
) -> tuple[list[TextSentence], list[list[str]], list[str]]:
    """Running text of ``files`` (stdin for none or ``-``), each a document, read whole first,
    then split and tagged: its CoNLL-U sentences (numbered on across files), tags and sources."""
    from inn.tagging.documents import contradiction, decode, raw_to_conllu

    texts = []
    for data, source in _input_bytes(files):
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
    gold_text = _read_utf8(args.gold, "--gold") if args.gold else None
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
    parser.add_argument("--device", default="auto", help="auto (CUDA when present), cpu or cuda")
    parser.add_argument(
        "--threads",
        type=positive_int,
        help="torch CPU threads (default: the cores free of other work, at most 4; OMP_NUM_THREADS where set)",
    )
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
    pairs, forms = _read_inputs(args.files, args.input)
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


def export_main(argv: list[str]) -> None:
    """``inn export-tagger``: a self-contained tagger file from a POS checkpoint."""
    from inn.checkpoints import check_scores_bound, read_checkpoint, save_payload, self_contained, with_test_scores
    from inn.tagging.segmenter.io import with_segmenter

    parser = argparse.ArgumentParser(
        prog="inn export-tagger",
        description="Write a self-contained tagger file (weights, vocabularies, tag column, scores) from a POS "
        "checkpoint; a checkpoint from before tagger files needs --data, its prepared folder.",
    )
    parser.add_argument("--checkpoint", required=True, help="results/train/pos/<corpus>/<model>/seed<N>/checkpoint.pt")
    parser.add_argument("--data", help="the prepared folder it was trained on (results/data/pos/<corpus>)")
    parser.add_argument("--metrics", help="its metrics.json from inn evaluate (adds the test scores)")
    parser.add_argument(
        "--column",
        choices=("xpos", "upos"),
        help="the CoNLL-U column its tags came from (default: what the data recorded, else xpos)",
    )
    parser.add_argument(
        "--segmenter",
        help="a segmenter file (inn train-segmenter) to put beside the tagger, so that "
        "the file reads running text in its language",
    )
    parser.add_argument("--out", required=True, help="the tagger file to write")
    args = parser.parse_args(argv)
    refuse_inputs_as_outputs(
        {"--out": args.out},
        {"--checkpoint": args.checkpoint, "--metrics": args.metrics, "a file of --data": prepared_files(args.data)},
    )
    payload = self_contained(read_checkpoint(args.checkpoint), args.checkpoint, args.data, args.column)
    if args.segmenter:
        payload = with_segmenter(payload, args.segmenter)
    if args.metrics:
        try:
            metrics = json.loads(Path(args.metrics).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise InnError(f"cannot read --metrics {args.metrics}: {exc}") from None
        fingerprint = metrics.get("data_fingerprint")
        if fingerprint is not None and fingerprint != payload["data"]["fingerprint"]:
            raise InnError(
                f"{args.metrics} scores other data (fingerprint {fingerprint}) than {args.checkpoint} "
                f"was trained on ({payload['data']['fingerprint']})"
            )
        meta = payload["meta"]
        for key in ("model", "seed"):
            if metrics.get(key) is not None and meta.get(key) is not None and str(metrics[key]) != str(meta[key]):
                raise InnError(
                    f"{args.metrics} scores {key} {metrics[key]}, but {args.checkpoint} is {key} "
                    f"{meta[key]}: give this model's metrics.json"
                )
        check_scores_bound(payload, metrics, args.checkpoint, args.metrics)
        if metrics.get("split", "test") != "test" or metrics.get("max_sequences"):
            raise InnError(
                f"{args.metrics} scores the {metrics.get('split')} split, or part of it: a tagger "
                "file's test score comes from inn evaluate on the whole test split"
            )
        payload = with_test_scores(payload, metrics)
    save_payload(payload, args.out)
    log.info("wrote %s (%s, %s column)", args.out, payload["meta"].get("model"), payload["data"]["column"])


def benchmark_main(argv: list[str]) -> None:
    """``inn benchmark-tagger``: tokens per second of each tagger on one text, as ``inn tag``
    tags it (the same batches, tolerance and tags), the median of ``--repeats`` timed passes
    after an untimed warm-up on the first sentences. Reading the text and writing the output
    are not timed; encoding the words is. With gold tags in a model's column the row carries
    its accuracy too."""
    import statistics

    import pandas as pd

    from inn.tables import write_tsv
    from inn.tagging.tagger import Tagger

    parser = argparse.ArgumentParser(
        prog="inn benchmark-tagger", description="Tokens per second of taggers on one text (a TSV row each)."
    )
    parser.add_argument("models", nargs="+", help="tagger files (tagger.pt or POS checkpoint.pt)")
    parser.add_argument("--text", required=True, help="the text to tag, e.g. a corpus's test .conllu")
    parser.add_argument("--input", default="auto", choices=("auto", *INPUT_FORMATS), help="its form (as inn tag)")
    parser.add_argument("--repeats", type=positive_int, default=3, help="timed passes over the text per tagger")
    parser.add_argument("--device", default="auto", help="auto (CUDA when present), cpu or cuda")
    parser.add_argument(
        "--threads",
        type=positive_int,
        help="torch CPU threads (default: the cores free of other work, at most 4; OMP_NUM_THREADS where set)",
    )
    parser.add_argument("--batch-size", type=positive_int, default=20, help="sentences per batch (as inn tag)")
    parser.add_argument("--out", required=True, help="TSV: one row per tagger")
    args = parser.parse_intermixed_args(argv)  # MODEL --text FILE MODEL: models after options too
    refuse_inputs_as_outputs({"--out": args.out}, {"a tagger file": args.models, "--text": args.text})
    set_threads(args.threads)
    pairs, forms = _read_inputs([args.text], args.input)
    sentences = [s for s, _ in pairs]
    words = [s.words for s in sentences]
    tokens = sum(map(len, words))
    if not tokens:
        raise InnError(f"{args.text}: no tokens to tag")
    rows = []
    for path in args.models:
        tagger = Tagger.load(path, args.device, args.batch_size)
        tagger.tag(words[:50])  # warm-up: the first products of each shape, oneDNN's kernels
        tagger.nonconverged = 0
        seconds = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            predicted = tagger.tag(words)
            seconds.append(time.perf_counter() - start)
        median = statistics.median(seconds)
        scores = {}
        if forms == ["conllu"] and all("_" not in s.column(tagger.column) for s in sentences):
            scores = tagger.accuracy(sentences, predicted, tagger.column, [args.text] * len(sentences))
        meta = tagger.meta
        rows.append(
            {
                "model": meta.get("model"),
                "dataset": meta.get("dataset"),
                "seed": meta.get("seed"),
                "scale": meta.get("scale"),
                "file": path,
                "device": str(tagger.device),
                "threads": torch.get_num_threads(),
                "batch_size": args.batch_size,
                "sentences": len(sentences),
                "tokens": tokens,
                "repeats": args.repeats,
                "seconds_median": median,
                "seconds_min": min(seconds),
                "tokens_per_second": tokens / median,
                "nonconverged": tagger.nonconverged // args.repeats,
                "accuracy": scores.get("accuracy"),
            }
        )
        log.info(
            "%s: %.0f tokens/s (median of %d, %.2f s a pass) on %s, %d thread(s)%s",
            tagger.describe(),
            tokens / median,
            args.repeats,
            median,
            tagger.device,
            torch.get_num_threads(),
            f"; accuracy {scores['accuracy']:.2f}%" if scores else "",
        )
    write_tsv(args.out, pd.DataFrame(rows))
    log.info("wrote %s", args.out)


def _read_utf8(path: str, flag: str) -> str:
    """A CoNLL-U file to score, plain or gzip-compressed, as text (UTF-8, byte-order mark and
    ``\\r\\n`` handled by :func:`inn.tagging.documents.decode`)."""
    import gzip

    from inn.tagging.documents import decode

    try:
        data = Path(path).read_bytes()
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
    except (OSError, EOFError) as exc:
        raise InnError(f"cannot read {flag} {path}: {getattr(exc, 'strerror', None) or exc}") from None
    return decode(data, path)


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
    gold = read_ud(_read_utf8(args.gold, "gold"), args.gold)
    system = read_ud(_read_utf8(args.system, "system"), args.system)
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
