"""``inn train-perceptron``: NLTK's averaged perceptron (:mod:`inn.tagging.perceptron`) trained on a
prepared POS folder into the same output layout as the neural models (``checkpoint.pt``, a
one-row ``history.tsv``)."""

from __future__ import annotations

import argparse
import logging
import os
import time
from pathlib import Path
from typing import Any

import pandas as pd

from inn import batches as B
from inn.checkpoints import describe_data, save_perceptron
from inn.errors import positive_int
from inn.tables import write_tsv
from inn.tagging.perceptron import train_perceptron
from inn.tagging.scoring import score_pos

log = logging.getLogger(__name__)

#: NLTK's averaged perceptron is pure Python: it trains on one thread whatever torch is given
THREADS = 1


def run(
    data_dir: str | os.PathLike,
    out_dir: str | os.PathLike,
    iterations: int = 5,
    seed: int = 1,
    max_train: int | None = None,
    meta: dict[str, Any] | None = None,
) -> pd.DataFrame:
    """Train on ``data_dir``/train.tsv, score dev, write ``checkpoint.pt`` and ``history.tsv``."""
    out_dir = Path(out_dir)
    features = B.load_features(data_dir)
    trained_on = describe_data(data_dir, "pos", max_train=max_train)
    train = B.read_split(data_dir, "train")[:max_train]
    dev = B.read_split(data_dir, "dev")
    start = time.perf_counter()
    peer = train_perceptron(train, iterations, seed)
    seconds = time.perf_counter() - start
    dev_metrics, _ = score_pos(dev, peer.tag_sentences([[w for w, _ in s] for s in dev]), features.is_known)
    history = pd.DataFrame(
        [
            {
                "epoch": iterations,
                "train_loss": None,
                "dev_loss": None,
                "dev_perplexity": None,
                "dev_accuracy": dev_metrics["accuracy"],
                "lr": None,
                "seconds": seconds,
                "device": "cpu",
                "threads": THREADS,
            }
        ]
    )
    training = {"iterations": iterations, "seed": seed, "max_train": max_train}
    meta = {
        "task": "pos",
        "model": "perceptron",
        "seed": seed,
        **(meta or {}),
        "epochs": iterations,
        "best_epoch": iterations,
        "seconds_per_epoch": seconds / iterations,
        "device": "cpu",
        "threads": THREADS,
        "parameters": sum(len(w) for w in peer.tagger.model.weights.values()),
        "dev": {"accuracy": dev_metrics["accuracy"]},
        "settings": {"training": training},
    }
    save_perceptron(peer, out_dir / "checkpoint.pt", meta, trained_on)
    write_tsv(out_dir / "history.tsv", history)
    log.info(
        "perceptron: %d sentences, %d iterations, %.0f s, dev accuracy %.2f",
        len(train),
        iterations,
        seconds,
        dev_metrics["accuracy"],
    )
    return history


def main(argv: list[str]) -> None:
    """``inn train-perceptron``: train NLTK's averaged perceptron on a prepared POS folder."""
    parser = argparse.ArgumentParser(prog="inn train-perceptron", description=run.__doc__)
    parser.add_argument("--data", required=True, help="prepared POS folder (results/data/pos/ewt)")
    parser.add_argument("--out-dir", dest="out", required=True, help="output folder (checkpoint.pt, history.tsv)")
    parser.add_argument("--iterations", type=positive_int, default=5, help="training passes (NLTK's default: 5)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--max-train", type=positive_int, help="use only the first N training sentences")
    parser.add_argument("--scale", help="a label recorded in the metrics (paper, comparison, quick)")
    args = parser.parse_args(argv)
    meta = {"dataset": Path(args.data).name, "scale": args.scale}
    run(args.data, args.out, args.iterations, args.seed, args.max_train, meta)
