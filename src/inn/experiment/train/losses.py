"""The training loss and the validation metrics: the summed token loss of a batch
(:func:`token_losses`), a model's loss, perplexity and accuracy or error on a split
(:func:`evaluate_loss`), and the paper's rule for halving the learning rate
(:func:`_perplexity_rose`)."""

from __future__ import annotations

import math
import warnings

import torch
import torch.nn.functional as Fn

from inn import batches as B
from inn.models import SequenceLabeler
from inn.solvers import ConvergenceWarning

#: the mean validation loss above which the reported perplexity is clamped (exp(700) < float max)
PERPLEXITY_CLAMP = 700.0


def token_losses(
    model: SequenceLabeler, batch: dict[str, torch.Tensor], start: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Summed loss over real positions, the number of scored positions, and the predictions
    (``start``: the INN's warm start)."""
    logits = model(batch, start)
    mask = batch["mask"]
    if model.config.task_spec.tags:
        gold = batch[model.config.task_spec.gold].masked_fill(~mask, B.UNSEEN_TAG)  # (B, n)
        loss = Fn.cross_entropy(logits.transpose(1, 2), gold, ignore_index=B.UNSEEN_TAG, reduction="sum")
        count = (gold != B.UNSEEN_TAG).sum()
        predicted = logits.argmax(-1)  # (B, n)
    else:
        gold = batch[model.config.task_spec.gold].to(logits.dtype)
        per_step = Fn.binary_cross_entropy_with_logits(logits, gold, reduction="none")
        loss = (per_step * mask).sum()
        count = mask.sum()
        predicted = (logits > 0).long()
    return loss, count, predicted


def correct_count(model: SequenceLabeler, batch, predicted) -> int:
    gold = batch[model.config.task_spec.gold]
    return int(((predicted == gold) & batch["mask"]).sum())


@torch.no_grad()
def evaluate_loss(
    model: SequenceLabeler, examples: list[B.Example], batch_size: int, device: torch.device
) -> dict[str, float]:
    """Mean per-token loss, perplexity, accuracy/error (and the INN's failed solves) on ``examples``."""
    was_training = model.training
    model.eval()
    total, count, correct, tokens, failed = 0.0, 0, 0, 0, 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # counted below
        for index in B.make_batches([B.length(e) for e in examples], batch_size):
            batch = B.to_device(B.collate([examples[i] for i in index]), device)
            loss, n, predicted = token_losses(model, batch)
            total += float(loss)
            count += int(n)
            correct += correct_count(model, batch, predicted)
            tokens += int(batch["mask"].sum())
            stats = getattr(model.rnn, "last_stats", None)
            failed += stats.num_failed if stats is not None else 0
    model.train(was_training)
    mean = total / max(count, 1)
    accuracy = correct / max(tokens, 1)
    out = {"loss": mean, "perplexity": math.exp(min(mean, PERPLEXITY_CLAMP))}
    out[model.config.task_spec.metric] = model.config.task_spec.score(accuracy)
    if model.config.implicit:
        out["nonconverged"] = failed
    return out


def _perplexity_rose(previous: dict, row: dict) -> bool:
    """Whether validation perplexity rose from the ``previous`` epoch's history row to ``row``:
    the paper's rule for halving the rate.

    Perplexity is reported clamped at exp(700) (:func:`evaluate_loss`), where every loss above
    700 would look the same and a diverging run would never have its rate halved. There the
    mean losses it is the exponential of are compared instead (exp is increasing: the same
    question, without the clamp); below it the perplexities, exactly as ever, so that runs the
    clamp never touched take the same decisions.
    """
    if max(previous["dev_loss"], row["dev_loss"]) < PERPLEXITY_CLAMP:
        return row["dev_perplexity"] > previous["dev_perplexity"]
    return row["dev_loss"] > previous["dev_loss"]
