"""``inn benchmark-tagger``: tokens per second of each tagger on one text, as ``inn tag`` tags it
(the same batches, tolerance and tags): the median of ``--repeats`` timed passes after an
untimed warm-up on the first sentences, one TSV row per tagger. Reading the text and writing
the output are not timed; encoding the words is. With gold tags in a model's column the row
carries its accuracy too.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time

import torch

from inn.device import add_device_argument, add_threads_argument, set_threads
from inn.errors import InnError, positive_int
from inn.io import refuse_inputs_as_outputs
from inn.tagging.documents import INPUT_FORMATS, TextSentence
from inn.tagging.files import read_inputs

log = logging.getLogger(__name__)


def benchmark_main(argv: list[str]) -> None:
    """``inn benchmark-tagger``: time every tagger on the text and write a row each."""
    import pandas as pd

    from inn.tables import write_tsv
    from inn.tagging.tagger import Tagger

    args = _benchmark_parser().parse_intermixed_args(argv)  # MODEL --text FILE MODEL: models after options too
    refuse_inputs_as_outputs({"--out": args.out}, {"a tagger file": args.models, "--text": args.text})
    set_threads(args.threads)
    pairs, forms = read_inputs([args.text], args.input)
    sentences = [s for s, _ in pairs]
    if not sum(len(s.words) for s in sentences):
        raise InnError(f"{args.text}: no tokens to tag")
    rows = [
        _time_tagger(Tagger.load(path, args.device, args.batch_size), path, sentences, forms == ["conllu"], args)
        for path in args.models
    ]
    write_tsv(args.out, pd.DataFrame(rows))
    log.info("wrote %s", args.out)


def _benchmark_parser() -> argparse.ArgumentParser:
    """The command line of ``inn benchmark-tagger``."""
    parser = argparse.ArgumentParser(
        prog="inn benchmark-tagger", description="Tokens per second of taggers on one text (a TSV row each)."
    )
    parser.add_argument("models", nargs="+", help="tagger files (tagger.pt or POS checkpoint.pt)")
    parser.add_argument("--text", required=True, help="the text to tag, e.g. a corpus's test .conllu")
    parser.add_argument("--input", default="auto", choices=("auto", *INPUT_FORMATS), help="its form (as inn tag)")
    parser.add_argument("--repeats", type=positive_int, default=3, help="timed passes over the text per tagger")
    add_device_argument(parser)
    add_threads_argument(parser)
    parser.add_argument("--batch-size", type=positive_int, default=20, help="sentences per batch (as inn tag)")
    parser.add_argument("--out", required=True, help="TSV: one row per tagger")
    return parser


def _time_tagger(tagger, path: str, sentences: list[TextSentence], conllu: bool, args: argparse.Namespace) -> dict:
    """One tagger's row: the median and fastest of ``--repeats`` passes over ``sentences``
    after a warm-up, and its accuracy where the ``conllu`` text gives gold tags in its column."""
    words = [s.words for s in sentences]
    tokens = sum(map(len, words))
    tagger.tag(words[:50])  # warm-up: the first products of each shape, oneDNN's kernels
    tagger.nonconverged = 0
    seconds = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        predicted = tagger.tag(words)
        seconds.append(time.perf_counter() - start)
    median = statistics.median(seconds)
    scores = {}
    if conllu and all("_" not in s.column(tagger.column) for s in sentences):
        scores = tagger.accuracy(sentences, predicted, tagger.column, [args.text] * len(sentences))
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
    meta = tagger.meta
    return {
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
