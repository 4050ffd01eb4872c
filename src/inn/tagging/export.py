"""``inn export-tagger``: a self-contained tagger file (weights, vocabularies, tag column,
scores) from a POS checkpoint, with the test scores of its ``inn evaluate`` metrics and,
optionally, a learned segmenter beside it, so that the file reads running text.

A metrics file is taken only when it scores this checkpoint: the same data fingerprint, model,
seed and weights, on the whole test split.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from inn.errors import InnError
from inn.io import prepared_files, refuse_inputs_as_outputs

log = logging.getLogger(__name__)


def export_main(argv: list[str]) -> None:
    """``inn export-tagger``: a self-contained tagger file from a POS checkpoint."""
    from inn.checkpoints import read_checkpoint, save_payload, self_contained, with_test_scores
    from inn.tagging.segmenter.io import with_segmenter

    args = _export_parser().parse_args(argv)
    refuse_inputs_as_outputs(
        {"--out": args.out},
        {"--checkpoint": args.checkpoint, "--metrics": args.metrics, "a file of --data": prepared_files(args.data)},
    )
    payload = self_contained(read_checkpoint(args.checkpoint), args.checkpoint, args.data, args.column)
    if args.segmenter:
        payload = with_segmenter(payload, args.segmenter)
    if args.metrics:
        payload = with_test_scores(payload, _test_metrics(args, payload))
    save_payload(payload, args.out)
    log.info("wrote %s (%s, %s column)", args.out, payload["meta"].get("model"), payload["data"]["column"])


def _export_parser() -> argparse.ArgumentParser:
    """The command line of ``inn export-tagger``."""
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
    return parser


def _test_metrics(args: argparse.Namespace, payload: dict) -> dict:
    """The ``--metrics`` file, refused unless it scores this checkpoint (its data, model, seed
    and weights) on the whole test split."""
    from inn.checkpoints import check_scores_bound

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
    return metrics
