"""``inn train-segmenter CONLLU --out FILE``: a tokenizer, sentence splitter and multiword-token
splitter learned from a CoNLL-U training file with its text (:mod:`inn.tagging.segmenter`), written as
a segmenter file that ``inn export-tagger --segmenter FILE`` puts in a tagger file."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import torch

from inn.errors import InnError, positive_int

log = logging.getLogger(__name__)


def _read(path: str, flag: str) -> str:
    from inn.tagging.documents import decode

    try:
        return decode(Path(path).read_bytes(), path)
    except OSError as exc:
        raise InnError(f"cannot read {flag} {path}: {exc.strerror or exc}") from None


def train_segmenter_main(argv: list[str]) -> None:
    """``inn train-segmenter``: train a segmenter and write it (atomically)."""
    from inn.io import torch_save
    from inn.tagging.segmenter import TrainSettings, segmenter_data, train_segmenter
    from inn.tagging.segmenter.io import SEGMENTER_FORMAT

    defaults = TrainSettings()
    parser = argparse.ArgumentParser(
        prog="inn train-segmenter",
        description="Learn a tokenizer, sentence splitter and multiword-token splitter from a CoNLL-U training file "
        "with '# text' lines (a UD treebank's train file); put it in a tagger file with inn export-tagger "
        "--segmenter.",
    )
    parser.add_argument("conllu", help="the training file (CoNLL-U with # text and SpaceAfter=No)")
    parser.add_argument("--out", required=True, help="the segmenter file to write")
    parser.add_argument("--dev", help="a CoNLL-U dev file: the epoch that segments it best is kept")
    parser.add_argument("--language", help="the text's language (an ISO 639 code), recorded in the file")
    parser.add_argument("--epochs", type=positive_int, default=defaults.epochs, help="passes over the text")
    parser.add_argument("--hidden", type=positive_int, default=defaults.hidden, help="GRU units each way")
    parser.add_argument("--seed", type=int, default=defaults.seed, help="random seed")
    parser.add_argument("--threads", type=positive_int, help="torch CPU threads (default: torch's choice)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    data = segmenter_data(_read(args.conllu, "CONLLU"), args.conllu)
    if data.left_out:
        log.warning(
            "%s: %d sentences whose tokens do not spell their # text are left out of training",
            args.conllu,
            data.left_out,
        )
    dev = segmenter_data(_read(args.dev, "--dev"), args.dev) if args.dev else None
    settings = TrainSettings(epochs=args.epochs, hidden=args.hidden, seed=args.seed)
    meta = {"corpus": Path(args.conllu).name, "language": args.language}

    def save(segmenter) -> None:
        torch_save({"format": SEGMENTER_FORMAT, "segmenter": segmenter.to_dict()}, args.out)
        log.info("wrote %s (epoch %d, %.1f minutes)", args.out, segmenter.meta["epoch"], segmenter.meta["minutes"])

    train_segmenter(data, settings, dev, meta, progress=sys.stderr.isatty(), save=save)
