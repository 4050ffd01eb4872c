"""Scores of predicted against gold sequences, the same for every model (:mod:`inn.experiment.train.evaluate`
and the perceptron's own dev score use them).

POS (paper 3.2): token accuracy over all tokens, punctuation included, in percent; also the
accuracy on tokens whose word never occurred in training ("unseen") and per gold tag.
Random walks (paper 3.1): per-step classification error, as a fraction.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pandas as pd
import torch

from inn.errors import InnError


def score_pos(
    sentences: Sequence[Sequence[tuple[str, str]]], predicted: Sequence[Sequence[str]], is_known: Callable[[str], bool]
) -> tuple[dict[str, Any], pd.DataFrame]:
    """Accuracy (%) over all tokens, on unseen words, and per gold tag; and the predictions table.

    Args:
        sentences: gold ``[(word, tag), ...]`` per sentence.
        predicted: one predicted tag per token of each sentence.
        is_known: whether a word occurred in the training split (unseen tokens are the rest).
    """
    if len(predicted) != len(sentences):
        raise InnError(f"{len(predicted)} predicted sentences for {len(sentences)} gold sentences")
    rows = []
    for s, (gold, guess) in enumerate(zip(sentences, predicted)):
        if len(guess) != len(gold):
            raise InnError(f"sentence {s + 1}: {len(guess)} predicted tags for {len(gold)} tokens")
        for t, ((word, tag), pred) in enumerate(zip(gold, guess)):
            rows.append((s, t, word, tag, pred, not is_known(word)))
    table = pd.DataFrame(rows, columns=["sentence", "position", "word", "gold", "predicted", "unseen"])
    if table.empty:
        raise InnError("nothing to score: no tokens")
    correct = table.gold == table.predicted
    unseen = table.unseen
    per_tag = {}
    for tag, group in correct.groupby(table.gold):
        per_tag[str(tag)] = {"tokens": int(group.size), "accuracy": 100.0 * float(group.mean())}
    metrics = {
        "metric": "accuracy",
        "accuracy": 100.0 * float(correct.mean()),
        "unseen_accuracy": 100.0 * float(correct[unseen].mean()) if unseen.any() else None,
        "tokens": int(table.shape[0]),
        "unseen_tokens": int(unseen.sum()),
        "sentences": len(sentences),
        "per_tag": dict(sorted(per_tag.items())),
    }
    return metrics, table


def score_walks(
    gold: Sequence[torch.Tensor], predicted: Sequence[torch.Tensor], probability: Sequence[torch.Tensor] | None = None
) -> tuple[dict[str, Any], pd.DataFrame]:
    """Per-step error (a fraction) over all steps of all walks; and the predictions table."""
    if len(predicted) != len(gold):
        raise InnError(f"{len(predicted)} predicted walks for {len(gold)} gold walks")
    frames = []
    for s, (y, p) in enumerate(zip(gold, predicted)):
        if len(y) != len(p):
            raise InnError(f"walk {s + 1}: {len(p)} predictions for {len(y)} steps")
        frame = {"sequence": s, "step": range(1, len(y) + 1), "gold": y.tolist(), "predicted": p.tolist()}
        if probability is not None:
            frame["probability"] = [round(v, 6) for v in probability[s].tolist()]
        frames.append(pd.DataFrame(frame))
    table = pd.concat(frames, ignore_index=True)
    errors = table.gold != table.predicted
    return {
        "metric": "error",
        "error": float(errors.mean()),
        "steps": int(table.shape[0]),
        "sequences": len(gold),
    }, table
