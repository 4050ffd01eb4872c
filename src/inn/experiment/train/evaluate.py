"""Evaluation: score a trained model on a test split the same way for every model.

POS (paper 3.2): token accuracy over all tokens, punctuation included, in percent; also the
accuracy on tokens whose word never occurred in training ("unseen") and per gold tag.
Random walks (paper 3.1): per-step classification error, as a fraction.

The scores come from :mod:`inn.tagging.scoring` (plain gold/predicted sequences), so the neural
taggers and the classical peer (:mod:`inn.tagging.perceptron`) are scored by the same code; checkpoints
of both kinds load through :mod:`inn.checkpoints`. Outputs: ``metrics.json`` and
``predictions.tsv`` (one row per token or step), written as one unit (:func:`write_outputs`).
"""

from __future__ import annotations

import argparse
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from inn import batches as B
from inn.data.fingerprint import checked_fingerprint, read_record
from inn.device import set_threads
from inn.errors import InnError, positive_int
from inn.experiment.provenance import source_commit
from inn.experiment.run_checks import PREDICTIONS_DIGEST, sha256_hex
from inn.io import atomic_path, check_out_dir, prepared_files, refuse_inputs_as_outputs, write_json
from inn.models import predict
from inn.registry import TASKS
from inn.tables import read_tsv, write_tsv
from inn.tagging.scoring import score_pos, score_walks

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- neural models


def _check_features(model, meta: dict, features, checkpoint: str | os.PathLike) -> None:
    cfg = model.config
    vocab = (len(features.words), tuple(len(v) for v in features.affixes.values()), len(features.tags))
    if (cfg.word_vocab, tuple(cfg.affix_vocab), cfg.num_classes) != vocab or meta.get(
        "tags", list(features.tags.items)
    ) != list(features.tags.items):
        raise InnError(
            f"{checkpoint} was trained with other feature vocabularies than the prepared data "
            f"(words/affixes/tags {cfg.word_vocab}/{list(cfg.affix_vocab)}/{cfg.num_classes}, data "
            f"{vocab[0]}/{list(vocab[1])}/{vocab[2]}): retrain it on this data"
        )


def check_data(payload: dict, data_dir: str | os.PathLike, checkpoint: str | os.PathLike) -> str:
    """Refuse a model trained on other data than the prepared ``data_dir``; returns the folder's
    fingerprint.

    The check compares the fingerprint the checkpoint stores with the folder's (its splits
    and vocabularies): a corpus re-prepared from other files, with the same tag set and the
    same vocabulary sizes, is still other data, whose word indices mean other words. A
    checkpoint written before fingerprints (format 1) cannot be checked: a warning says so.
    A folder whose files are damaged, or changed since the data stage wrote them, is refused
    as such first (:func:`inn.data.fingerprint.checked_fingerprint`).
    """
    fingerprint = checked_fingerprint(data_dir)
    trained = (payload.get("data") or {}).get("fingerprint")
    if trained is None:
        log.warning(
            "%s was written before data fingerprints (format %s): cannot check that it was trained on %s",
            checkpoint,
            payload.get("format"),
            data_dir,
        )
    elif trained != fingerprint:
        corpus = (payload.get("data") or {}).get("corpus") or payload.get("meta", {}).get("dataset")
        raise InnError(
            f"{checkpoint} was trained on other data ({corpus}, fingerprint {trained}) than {data_dir} "
            f"(fingerprint {fingerprint}): evaluate it on the folder it was trained on; to score other "
            "text with the model's own vocabularies use `inn tag MODEL FILE.conllu --accuracy`"
        )
    return fingerprint


def _known_words(payload: dict, features) -> Callable[[str], bool]:
    """Whether a word occurred in what the model trained on: the checkpoint's own word counts
    (those of its first ``max_train`` training sentences where the run was limited to them,
    :func:`inn.checkpoints.describe_data`), else the prepared split's."""
    counts = ((payload.get("data") or {}).get("vocabularies") or {}).get("word_counts")
    if counts is None:
        return features.is_known
    return lambda word: word.lower() in counts


def evaluate_checkpoint(
    checkpoint: str | os.PathLike,
    data_dir: str | os.PathLike,
    split: str = "test",
    device: str = "auto",
    max_sequences: int | None = None,
) -> tuple[dict, pd.DataFrame]:
    """Score a training checkpoint (neural or perceptron) on ``split`` of a prepared folder,
    with that folder's vocabularies; a model trained on other data is refused (:func:`check_data`)."""
    from inn.checkpoints import OWN_DIGEST, model_from_payload, read_checkpoint, weights_digest
    from inn.device import resolve_device

    dev = resolve_device(device)
    payload = read_checkpoint(checkpoint, device=dev)
    fingerprint = check_data(payload, data_dir, checkpoint)
    model, meta = model_from_payload(payload, checkpoint, device=dev)
    task = meta.get("task", getattr(getattr(model, "config", None), "task", None))
    spec = TASKS.get(task)
    if spec is None:
        raise InnError(f"{checkpoint}: unknown task {task!r} in its metadata")
    start = time.perf_counter()
    failed = 0
    if spec.tags:
        features = B.load_features(data_dir)
        sentences = B.read_split(data_dir, split)[:max_sequences]
        if getattr(model, "is_perceptron", False):
            predicted = model.tag_sentences([[w for w, _ in s] for s in sentences])
        else:
            _check_features(model, meta, features, checkpoint)
            labels, _, failed = predict(model, B.encode_pos(sentences, features), device=dev)
            predicted = [[features.tags.items[i] for i in row.tolist()] for row in labels]
        metrics, table = score_pos(sentences, predicted, _known_words(payload, features))
    else:
        examples = B.load_walk_examples(Path(data_dir) / f"{split}.pt", max_sequences)
        if model.config.input_dim != examples[0]["x"].shape[-1]:
            raise InnError(
                f"{checkpoint} was trained on walks of dimension {model.config.input_dim}, "
                f"the data has {examples[0]['x'].shape[-1]}"
            )
        labels, probs, failed = predict(model, examples, device=dev)
        metrics, table = score_walks([e["y"] for e in examples], labels, probs)
    seconds = time.perf_counter() - start
    settings = meta.get("settings", {})
    config = getattr(model, "config", None)
    record = read_record(data_dir)
    out = {
        "task": task,
        # the data scored: the folder's corpus (what the model was trained on, checked above)
        "dataset": record.get("corpus") or Path(data_dir).name,
        "data": str(data_dir),
        "data_fingerprint": fingerprint,
        "tag_column": record.get("column"),  # POS: the CoNLL-U column scored (xpos, upos); None for walks
        "model": meta.get("model"),
        # the weights scored (their digest as checked when read): binds the score to this model
        "weights_sha256": payload.get(OWN_DIGEST) or weights_digest(payload),
        "seed": meta.get("seed"),
        "scale": meta.get("scale"),
        "split": split,
        "max_sequences": max_sequences,  # None: the whole split
        **metrics,
        "parameters": meta.get("parameters", model.num_parameters() if hasattr(model, "num_parameters") else None),
        "hidden_size": config.hidden_size if config is not None else None,
        "epochs": meta.get("epochs"),
        "best_epoch": meta.get("best_epoch", meta.get("epoch")),
        "seconds_per_epoch": meta.get("seconds_per_epoch"),
        "dev": meta.get("dev"),
        "device": meta.get("device"),
        "threads": meta.get("threads"),
        "trained_at": meta.get("commit"),  # the source commit that finished the training (None: unrecorded)
        "commit": source_commit(),  # the one that scored it
        "evaluation_seconds": seconds,
        "nonconverged": failed if getattr(config, "implicit", False) else None,
        "training": settings.get("training", meta.get("training")),
        "model_config": {
            k: v for k, v in (settings.get("model") or {}).items() if k not in ("word_vocab", "affix_vocab")
        }
        or None,
    }
    return out, table


def write_outputs(out: Path, metrics: dict, table: pd.DataFrame) -> None:
    """Write ``predictions.tsv`` and ``metrics.json`` into ``out`` as one unit: both to
    temporary files first, so that a failed write (of either) replaces neither; the metrics
    name the digest of the predictions they were computed from (``predictions_sha256``, which
    ``inn collect`` checks), and go into place first: were the last rename to fail, the
    metrics would name predictions that are not beside them, never silently other ones."""
    with atomic_path(out / "predictions.tsv") as predictions, atomic_path(out / "metrics.json") as scores:
        write_tsv(predictions, table)
        metrics[PREDICTIONS_DIGEST] = sha256_hex(predictions.read_bytes())
        write_json(scores, metrics)


# --------------------------------------------------------------------------- CLI


def main(argv: list[str]) -> None:
    """``inn evaluate``: score a trained model; write metrics.json and predictions.tsv."""
    parser = argparse.ArgumentParser(prog="inn evaluate", description=evaluate_checkpoint.__doc__)
    parser.add_argument("--checkpoint", required=True, help="results/train/.../checkpoint.pt")
    parser.add_argument("--data", required=True, help="the prepared data folder the model was trained on")
    parser.add_argument("--split", default="test", choices=["train", "dev", "test"])
    parser.add_argument("--history", help="history.tsv of the run (adds its epoch count and times)")
    parser.add_argument("--out-dir", dest="out", required=True, help="output folder (metrics.json, predictions.tsv)")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--threads", type=positive_int)
    parser.add_argument("--max-sequences", type=positive_int, help="score only the first N sequences")
    args = parser.parse_args(argv)
    check_out_dir(args.out)
    refuse_inputs_as_outputs(
        {"--out-dir": [Path(args.out) / "predictions.tsv", Path(args.out) / "metrics.json"]},
        {"--checkpoint": args.checkpoint, "--history": args.history, "a file of --data": prepared_files(args.data)},
    )
    set_threads(args.threads)
    metrics, table = evaluate_checkpoint(args.checkpoint, args.data, args.split, args.device, args.max_sequences)
    if args.history:
        history = read_tsv(args.history)
        epochs = int(history["epoch"].max())
        if metrics.get("epochs") is not None and metrics["epochs"] != epochs:
            raise InnError(
                f"{args.history} has {epochs} epoch(s) but {args.checkpoint} finished after "
                f"{metrics['epochs']}: they are of different runs (a run started again in its folder?); "
                "give the history of this checkpoint's run, or finish the new run"
            )
        metrics["epochs"] = epochs
        # (the perceptron's one row holds all its passes)
        metrics["seconds_per_epoch"] = float(history["seconds"].sum()) / max(metrics["epochs"], 1)
    write_outputs(Path(args.out), metrics, table)
    name = metrics["metric"]
    log.info(
        "%s %s on %s/%s: %s %.4f",
        metrics["model"],
        metrics["task"],
        metrics["dataset"],
        args.split,
        name,
        metrics[name],
    )
