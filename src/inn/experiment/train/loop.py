"""Training: one model on one task, SGD with the paper's schedule, resumable after every epoch.

The paper (3.2): SGD, batch 20, initial learning rate 0.5, halved whenever validation
perplexity rises. Added here, each a setting: a maximum number of epochs and early-stopping
patience on the validation metric, gradient-norm clipping, the loss normalisation (which
decides what "learning rate 0.5" means), word dropout of training singletons (so the unknown
word's embedding is trained), data slices for small runs, and for the INN warm starts: each
training sentence's solve starts from its solution in the previous epoch (:class:`WarmStarts`).

Outputs in ``out_dir``:

- ``checkpoint.pt``: the epoch with the best validation metric (what evaluation reads);
- ``history.tsv``: one row per epoch (losses, validation perplexity and accuracy or error,
  learning rate, wall and CPU seconds, and for the INN its solver statistics: mean iterations,
  histograms, sequences above tol and at their limit, forward solves the homotopy finished,
  batches whose adjoint GMRES solved: ``backward_gmres``);
- while running, ``last.pt`` (the state after the last finished epoch, the INN's warm
  starts included) and ``best.pt``;
  a restarted run resumes from ``last.pt`` and ends exactly where an uninterrupted run
  would (CPU, same seed and threads: every epoch reseeds its own random streams). Both are
  removed when training finishes. A ``last.pt`` that cannot be resumed from (truncated,
  empty, a ``checkpoint.pt`` copied over it) is set aside as ``last.pt.damaged-<time>``, with
  a warning, and training starts afresh. Every checkpoint stores the fingerprint of the data
  it was trained on (:mod:`inn.data.fingerprint`); a ``last.pt`` of other data (the corpus
  prepared again from other files) stops the run.

A folder that holds a finished run (``checkpoint.pt`` and ``history.tsv``, no ``last.pt``) is
left as it is: a plain rerun says so; ``--retrain`` trains it again, its files set aside.

One run at a time per folder: a run holds ``.lock`` in it (:func:`inn.io.locked_folder`),
checks the folder writable before it reads any data, and removes the temporary files a killed
save left there.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import functools
import inspect
import itertools
import json
import logging
import math
import os
import sys
import time
import warnings
from dataclasses import MISSING, asdict, dataclass, fields
from pathlib import Path
from typing import Any

import pandas as pd
import torch
import torch.nn.functional as Fn
from torch import nn
from tqdm import tqdm

from inn import batches as B
from inn.checkpoints import READABLE_FORMATS, describe_data, neural_payload, sealed, weights_problem
from inn.data.features import UNK
from inn.device import resolve_device, set_threads
from inn.errors import InnError, positive_int
from inn.experiment.cli import LOG_FORMAT
from inn.experiment.config import check_model_solver, training_defaults
from inn.experiment.config_schema import check_settings
from inn.experiment.provenance import device_label, resumed_commit_note, source_commit
from inn.io import (
    check_out_dir,
    locked_folder,
    refuse_folders_at,
    remove_stale_temps,
    torch_load_data,
    torch_load_problem,
    torch_save,
)
from inn.models import FEATURES, MODELS, ModelConfig, SequenceLabeler, build_model, implicit_models, parse_model_name
from inn.registry import TASKS, task_spec
from inn.solvers import ConvergenceWarning, ResultCode
from inn.tables import read_tsv, write_tsv

log = logging.getLogger(__name__)

#: the files a run writes in its output folder
OUTPUTS = ("checkpoint.pt", "history.tsv", "last.pt", "best.pt")
#: what a resumable ``last.pt`` holds beyond a model checkpoint
RESUME_KEYS = ("optimizer", "train_state")


@dataclass
class TrainConfig:
    """Training settings (workflow config ``training.<task>``)."""

    batch_size: int = 20  # paper
    lr: float = 0.5  # paper: initial learning rate of plain SGD
    lr_decay: float = 0.5  # paper: multiply the rate by this when validation perplexity rises
    max_epochs: int = 30
    patience: int = 5  # stop after this many epochs without a better validation metric
    clip: float | None = 5.0  # max gradient norm (None: no clipping)
    # "sentence": summed token losses / sentences in the batch; "token": mean over tokens;
    # "sum": summed over the batch. With lr 0.5, "token" learns ~10x slower than "sentence".
    loss: str = "sentence"
    word_dropout: float = 0.25  # POS: chance that a training singleton is read as unknown
    dropout: float = 0.0  # on xi and H (the paper uses none)
    max_train: int | None = None  # use only the first N training sequences
    max_dev: int | None = None  # use only the first N validation sequences
    seed: int = 1
    # INN: start each training sentence's solve from its solution in the previous epoch
    warm_start: bool = True
    # INN: the same for the adjoint solve of the backward pass (its previous epoch's adjoint)
    warm_start_adjoint: bool = False
    # INN: Jacobian regularisation, weight * (Hutchinson estimate of ||dF/dH||_F^2 at the
    # solution per state entry) added to the loss every jacobian_every-th batch (0: off)
    jacobian_weight: float = 0.0
    jacobian_samples: int = 1
    jacobian_every: int = 1

    def __post_init__(self) -> None:
        """Check every setting against the config schema's ``training`` definition and the seed
        against ``seed``'s: one rule per setting, the same for a workflow config, ``inn train
        --settings`` and a caller of :func:`train`."""
        settings = asdict(self)
        seed = settings.pop("seed")
        check_settings(settings, "$defs/training", key="training")
        check_settings(seed, "properties/seed", key="training.seed")


#: the mean validation loss above which the reported perplexity is clamped (exp(700) < float max)
PERPLEXITY_CLAMP = 700.0

#: settings that may change between an interrupted run and its resumption: how long it trains,
#: where its solves start, and whether they run as CUDA graphs (which replay the same steps)
RESUMABLE_CHANGES = {f"training.{key}" for key in ("max_epochs", "patience", "warm_start", "warm_start_adjoint")} | {
    f"model.solver_options.{key}" for key in ("cuda_graph", "cuda_graph_steps", "backward_cuda_graph")
}


# --------------------------------------------------------------------------- data


@dataclass
class TaskData:
    """Training and validation examples of one task, and what the model needs to know of them."""

    task: str
    train: list[B.Example]
    dev: list[B.Example]
    model_fields: dict[str, Any]  # ModelConfig fields the data decides (vocabularies, widths)
    meta: dict[str, Any]


def load_task_data(task: str, data_dir: str | os.PathLike, cfg: TrainConfig) -> TaskData:
    """Read a prepared POS corpus folder or walk folder (the data stage's outputs)."""
    data_dir = Path(data_dir)
    if task_spec(task).tags:
        features = B.load_features(data_dir)
        _, train = B.load_pos(data_dir, "train", features, cfg.max_train)
        _, dev = B.load_pos(data_dir, "dev", features, cfg.max_dev)
        fields_ = {
            "num_classes": len(features.tags),
            "word_vocab": len(features.words),
            "affix_vocab": tuple(len(v) for v in features.affixes.values()),
            "word_dim": features.word_dim,
            "affix_dim": features.affix_dim,
        }
        return TaskData(task, train, dev, fields_, {"tags": list(features.tags.items)})
    train = B.load_walk_examples(data_dir / "train.pt", cfg.max_train)
    dev = B.load_walk_examples(data_dir / "dev.pt", cfg.max_dev)
    dim = int(train[0]["x"].shape[-1])
    return TaskData(task, train, dev, {"num_classes": 2, "input_dim": dim}, {})


# --------------------------------------------------------------------------- loss and metrics


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


# --------------------------------------------------------------------------- the trainer


class SolverTally:
    """Per-epoch sums of the implicit layer's solver statistics (means per batch, max, count)."""

    def __init__(self) -> None:
        self.batches = 0
        self.newton = 0.0
        self.krylov = 0.0
        self.residual = 0.0
        self.nonconverged = 0
        self.backward_nonconverged = 0
        self.backward = 0.0
        self.backward_gmres = 0  # batches whose adjoint ran GMRES (backward_solver auto past its mark, or gmres)
        self.jacobian: list[float] = []  # the regularised batches' ||dF/dH||_F^2 estimates
        # per-sequence iterations of the forward and adjoint solves, binned (HISTOGRAM_EDGES)
        self.histogram = {
            "newton": [0] * (len(self.HISTOGRAM_EDGES) + 1),
            "backward": [0] * (len(self.HISTOGRAM_EDGES) + 1),
        }
        self.limit = {"newton": 0, "backward": 0}  # sequences stopped at the iteration limit
        self.homotopy = 0  # forward solves no local solver finished, handed to the homotopy

    #: upper edges of the iteration histogram's bins: <= 10, 11-20, 21-40, 41-80, 81-160, > 160
    HISTOGRAM_EDGES = (10, 20, 40, 80, 160)

    def _count(self, kind: str, stats) -> None:
        """Bin one solve's per-sequence iterations and count its sequences at the limit."""
        from inn.solvers import ResultCode

        its = (stats.newton_iterations + stats.krylov_iterations).tolist()
        for value in its:
            self.histogram[kind][bisect.bisect_left(self.HISTOGRAM_EDGES, value)] += 1
        self.limit[kind] += int((stats.code == int(ResultCode.MAX_ITERATIONS)).sum())

    def add(self, layer) -> None:
        stats = getattr(layer, "last_stats", None)
        if stats is None:
            return
        self.batches += 1
        self.newton += float(stats.newton_iterations.float().mean())
        self.krylov += float(stats.krylov_iterations.float().mean())
        self.residual = max(self.residual, float(stats.residual.max()))
        self.nonconverged += stats.num_failed
        self.homotopy += int(stats.extra.get("homotopy", 0))
        self._count("newton", stats)
        back = getattr(layer, "last_backward_stats", None)
        if back is not None:
            self.backward_nonconverged += back.num_failed
            self._count("backward", back)
            self.backward += float((back.newton_iterations + back.krylov_iterations).float().mean())
            self.backward_gmres += getattr(layer, "last_adjoint_solver", None) == "gmres"
            layer.last_backward_stats = None

    def row(self) -> dict[str, float]:
        n = max(self.batches, 1)
        return {
            "newton_iters": self.newton / n,
            "krylov_iters": self.krylov / n,
            "residual": self.residual,
            "nonconverged": self.nonconverged,
            "backward_nonconverged": self.backward_nonconverged,
            "backward_iters": self.backward / n,
            "backward_gmres": self.backward_gmres,
            # "a/b/c/d/e/f": sequences with <= 10, 11-20, 21-40, 41-80, 81-160, > 160 iterations
            "newton_hist": "/".join(map(str, self.histogram["newton"])),
            "newton_limit": self.limit["newton"],
            "backward_hist": "/".join(map(str, self.histogram["backward"])),
            "backward_limit": self.limit["backward"],
            "homotopy": self.homotopy,
            **({"jacobian_fro2": sum(self.jacobian) / len(self.jacobian)} if self.jacobian else {}),
        }


class WarmStarts:
    """Every training sequence's last solution of the implicit layer, to start its next solve from.

    Between two epochs the weights move little, so a sentence's states under the new weights
    lie close to those under the old ones: on the paper-scale INN (k = 448, real sentences of
    40 tokens) the forward solve from the previous epoch's states took 6.0 iterations against
    10.0 from zero. The states are kept flat, one row per training token, in float16 (every
    |h| < 1, and the solve refines them to its tolerance anyway): 183 MB at the paper's size on
    EWT, about 410 MB for the paper's 50,000 training walks (k = 200). They are saved in
    ``last.pt``, so a resumed run starts its solves from the same points as an uninterrupted
    one. A batch none of whose sequences has been solved yet gets no start
    (the solver's own candidates, as without warm starts); in a mixed batch the unsolved ones
    start from zero. The adjoints of the backward pass are kept the same way
    (``warm_start_adjoint``), in bfloat16: gradients have no bound, and a starting point
    needs their range more than their digits.
    """

    def __init__(
        self, lengths: list[int], width: int, device: torch.device, dtype: torch.dtype = torch.float16
    ) -> None:
        """``width``: the layer's state width (``state_size``: k for the implicit GRU, 2k for
        the implicit LSTM's [h; c], whose |c| may exceed 1 but stays far inside float16)."""
        self.offsets = torch.tensor([0, *itertools.accumulate(lengths)], device=device)
        self.states = torch.zeros(int(self.offsets[-1]), width, dtype=dtype, device=device)
        self.solved = torch.zeros(len(lengths), dtype=torch.bool, device=device)

    def _rows(self, index: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The flat row of each position of the sequences ``index`` padded to n, and which are real."""
        first = self.offsets[index]
        t = torch.arange(n, device=first.device)
        real = t < (self.offsets[index + 1] - first).unsqueeze(1)
        return (first.unsqueeze(1) + t).masked_fill(~real, 0), real

    def gather(self, index: torch.Tensor, n: int) -> torch.Tensor | None:
        """Starting states (len(index), n, width) for a batch padded to n, zero at padding."""
        if not bool(self.solved[index].any()):
            return None
        rows, real = self._rows(index, n)
        return self.states[rows] * real.unsqueeze(-1)

    def update(self, index: torch.Tensor, H: torch.Tensor) -> None:
        """Keep the batch's solution H (len(index), n, width) for the next epoch."""
        rows, real = self._rows(index, H.shape[1])
        self.states[rows[real]] = H[real].to(self.states.dtype)
        self.solved[index] = True

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"offsets": self.offsets.cpu(), "states": self.states.cpu(), "solved": self.solved.cpu()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        if not torch.equal(state["offsets"], self.offsets.cpu()) or state["states"].shape != self.states.shape:
            raise InnError("the warm starts in last.pt belong to other training data; delete it to start afresh")
        self.states.copy_(state["states"])
        self.solved.copy_(state["solved"])


def _epoch_seed(seed: int, epoch: int) -> int:
    return seed * 1_000_003 + epoch


def _run_settings(model_cfg: ModelConfig, cfg: TrainConfig) -> dict[str, Any]:
    """What a resumed run must share with the run that wrote the checkpoint."""
    return {"model": asdict(model_cfg), "training": asdict(cfg)}


def _differences(old: dict, new: dict, prefix: str = "") -> list[str]:
    keys = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            keys += _differences(a, b, f"{prefix}{key}.")
        elif a != b and not (isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and list(a) == list(b)):
            keys.append(f"{prefix}{key}")
    return keys


def _check_resumable(path: Path, state: dict, settings: dict) -> None:
    # a model setting added since the checkpoint was written had its default there
    defaults = {f.name: f.default for f in fields(ModelConfig) if f.default is not MISSING}
    old = {**state["settings"], "model": {**defaults, **state["settings"]["model"]}}
    differ = [k for k in _differences(old, settings) if k not in RESUMABLE_CHANGES]
    if differ:
        raise InnError(
            f"{path} was written by a different configuration (differs in {', '.join(differ)}); "
            "delete it to start afresh, or restore the old settings to resume"
        )


def _check_same_data(path: Path, saved: dict, fingerprint: str) -> None:
    """Refuse to resume from a ``last.pt`` trained on other data than the folder holds now (a
    corpus re-prepared from other files: its word indices mean other words). One written
    before fingerprints resumes, with a warning that this could not be checked."""
    trained = (saved.get("data") or {}).get("fingerprint")
    if trained is None:
        log.warning(
            "%s was written before data fingerprints: resuming without checking that the data "
            "folder still holds the data it was trained on",
            path,
        )
    elif trained != fingerprint:
        raise InnError(
            f"{path} was trained on other data (fingerprint {trained}) than the data folder now holds "
            f"(fingerprint {fingerprint}; it was prepared again from other files): delete {path} to "
            "train afresh on the new data, or restore the old data to resume"
        )


def _resume_point(path: Path, device: torch.device, settings: dict, fingerprint: str) -> dict | None:
    """The state saved in ``path`` (``last.pt``) to resume from, or None to start afresh.

    ``last.pt`` is a resume aid, not a result: one that cannot be resumed from (unreadable,
    empty, not an inn resume state, e.g. a ``checkpoint.pt`` copied over it) is set aside
    as ``last.pt.damaged-<time>``, kept for inspection, with one warning, and training starts
    afresh. A sound one written by another configuration stops the run (:func:`_check_resumable`),
    and so does one that would run code to load: it is read as data only
    (``weights_only=True``) and never set aside as if it were merely damaged.
    """
    if not path.is_file():
        return None
    saved, problem = None, None
    try:
        saved = torch_load_data(
            path, "it is not a resume state inn wrote: remove it, then rerun to train afresh", device
        )
    except InnError:
        raise
    except Exception as exc:  # empty, truncated or foreign
        problem = torch_load_problem(path, exc)
    if problem is None:
        if not isinstance(saved, dict) or saved.get("format") not in READABLE_FORMATS or "settings" not in saved:
            problem = f"not a resume state of this inn (format {' or '.join(map(str, READABLE_FORMATS))})"
        elif missing := [key for key in RESUME_KEYS if key not in saved]:
            problem = f"no {' or '.join(missing)} in it: a model checkpoint, not a resume state"
        else:
            problem = weights_problem(saved, path, finite=False)
    if problem is None:
        # the data first: data prepared again also changes the settings it decides (vocabulary
        # sizes, tag count), and "a different configuration" would name the wrong cause
        _check_same_data(path, saved, fingerprint)
        _check_resumable(path, saved, settings)
        if note := resumed_commit_note(path, saved):
            log.warning(note)
        return saved
    aside = path.with_name(f"{path.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}")
    os.replace(path, aside)
    log.warning("cannot resume from %s (%s): set aside as %s, training starts afresh", path, problem, aside.name)
    return None


def _best_state(best_path: Path, last_path: Path, out_dir: Path) -> dict:
    """The best epoch's state (``best.pt``) that a finished run turns into ``checkpoint.pt``,
    read as data only. One that cannot be read stops the run with one line: the best epoch's
    weights are lost, so the run must be trained afresh."""
    fix = f"remove {last_path} and {best_path}, then rerun to train {out_dir} afresh"
    try:
        best = torch_load_data(best_path, f"it is not a state inn wrote: {fix}")
    except InnError:
        raise
    except Exception as exc:  # empty, truncated or foreign
        raise InnError(
            f"cannot finish {out_dir}: {best_path} is damaged ({torch_load_problem(best_path, exc)}); {fix}"
        ) from None
    if not isinstance(best, dict) or not isinstance(best.get("meta"), dict) or "state_dict" not in best:
        raise InnError(f"cannot finish {out_dir}: {best_path} is not a model state of this inn; {fix}")
    if problem := weights_problem(best, best_path):
        raise InnError(f"cannot finish {out_dir}: {best_path} is damaged ({problem}); {fix}")
    return best


def _holding_out_dir(function):
    """Run ``train`` as the only writer of its ``out_dir`` (:func:`inn.io.locked_folder`: a
    second run stops with a line naming the first, and an unwritable folder is found before any
    work), after removing the temporary files a killed save of an earlier run left there; a
    folder standing where one of its files goes is refused before any work too."""
    signature = inspect.signature(function)

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        out_dir = signature.bind(*args, **kwargs).arguments["out_dir"]
        with locked_folder(out_dir):
            for tmp in remove_stale_temps(out_dir, OUTPUTS):
                log.info("removed %s, left by an interrupted save", tmp)
            refuse_folders_at(out_dir, OUTPUTS)
            return function(*args, **kwargs)

    return wrapper


def _set_aside_finished_run(out_dir: Path) -> None:
    """Training afresh in the folder of a finished run: its ``checkpoint.pt`` and ``history.tsv``
    are moved aside (``*.replaced-<time>``, with a warning), so that the new run's history is
    never read beside the old run's model, and nothing is lost."""
    if not (out_dir / "checkpoint.pt").is_file():
        return  # no finished run: a history beside no model is the restarted run's own
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for name in ("checkpoint.pt", "history.tsv"):
        path = out_dir / name
        if path.is_file():
            aside = path.with_name(f"{name}.replaced-{stamp}")
            os.replace(path, aside)
            log.warning(
                "%s holds a finished run: training afresh, its %s is set aside as %s", out_dir, name, aside.name
            )


def _finished_history(out_dir: Path) -> pd.DataFrame | None:
    """The history of the finished run in ``out_dir`` (its ``checkpoint.pt`` and ``history.tsv``
    and no ``last.pt`` to resume from), or None where there is none."""
    if (out_dir / "last.pt").is_file() or not all(
        (out_dir / name).is_file() for name in ("checkpoint.pt", "history.tsv")
    ):
        return None
    return read_tsv(out_dir / "history.tsv")


def _nonfinite_solve(model: SequenceLabeler) -> str:
    """Why an implicit model's loss went non-finite, where its forward solve says: the states of
    some sequences grew without bound (the implicit LSTM's cell state c has no bound of its own,
    unlike h). Empty where every solve stayed finite."""
    stats = model.rnn.last_stats
    nonfinite = int((stats.code == int(ResultCode.NONFINITE)).sum()) if stats is not None else 0
    if not nonfinite:
        return ""
    cap = getattr(model.rnn.cell, "forget_max", None)
    remedy = (
        "; capping the implicit LSTM's forget gate (inn_lstm_forget_max below 1, e.g. 0.99) bounds its cell state"
        if cap == 1.0
        else ""
    )
    return (
        f": the implicit layer's forward solve went non-finite in {nonfinite} of {len(stats.code)} "
        "sequences (their states grew without bound; `nonconverged` in history.tsv counts the "
        f"solves that failed before){remedy}"
    )


def _stop_note(last_path: Path, epoch: int) -> str:
    """What a run stopped during ``epoch`` leaves behind, said truthfully."""
    if last_path.is_file():
        return f"stopped, the last good checkpoint ({last_path}, after epoch {epoch - 1}) is kept"
    return "stopped before any epoch finished, nothing is saved"


@_holding_out_dir
def train(
    task: str,
    data_dir: str | os.PathLike,
    model_name: str,
    out_dir: str | os.PathLike,
    cfg: TrainConfig,
    model_options: dict[str, Any] | None = None,
    device: str = "auto",
    meta: dict[str, Any] | None = None,
    stop_after: int | None = None,
    retrain: bool = False,
) -> pd.DataFrame:
    """Train ``model_name`` on a prepared ``task`` folder; write the outputs into ``out_dir``.

    A folder that holds a finished run is left as it is (one line says so, its history is
    returned) unless ``retrain``: then its model and history are set aside and it trains afresh.

    Args:
        model_options: ModelConfig fields that are not decided by the data: ``hidden_size``
            (default: the feature size for the INN on POS, else required), ``solver``,
            ``solver_options``, ``trainable_boundary``, ``forget_max`` (the implicit LSTM's).
        meta: free-form facts stored in the checkpoint and reported by evaluation (dataset,
            seed, scale ...).
        stop_after: finish at most this many epochs in this call, then return with
            ``last.pt`` in place (a time-limited job; the next call resumes).

    Returns:
        The history table (one row per finished epoch).

    Raises:
        InnError: missing data, a checkpoint from another configuration, a non-finite loss
            (the message names epoch and batch; the last good checkpoint is kept), a failed
            solve in strict mode, another run holding ``out_dir``, a failed write.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if not retrain and (finished := _finished_history(out_dir)) is not None:
        log.info(
            "%s holds a finished run (%d epoch(s)): nothing to do; give --retrain to train it again (its "
            "checkpoint.pt and history.tsv are then set aside)",
            out_dir,
            len(finished),
        )
        return finished
    dev_ = resolve_device(device)
    kind, size = parse_model_name(model_name)
    given = [key for key in ("solver", "solver_options", "trainable_boundary") if key in (model_options or {})]
    if given and not MODELS[kind].implicit:
        raise InnError(
            f"model {model_name} has no implicit layer: model.{', model.'.join(given)} apply to "
            f"{', '.join(implicit_models())} only; leave them out of its settings"
        )
    spec = task_spec(task)
    data = load_task_data(task, data_dir, cfg)
    # the fingerprint, and what a tagger file needs of the data (the words it trains on)
    trained_on = describe_data(data_dir, task, max_train=cfg.max_train)
    options = dict(model_options or {})
    if size is not None:
        options["hidden_size"] = size
    if options.get("hidden_size") is None:
        if FEATURES in MODELS[kind].sizes.get(task, ()) and spec.feature_size is not None:  # paper: k = 448
            options["hidden_size"] = spec.feature_size(data.model_fields)
        else:
            raise InnError(f"model {model_name}: no hidden size given")
    model_cfg = ModelConfig(task=task, kind=kind, dropout=cfg.dropout, **data.model_fields, **options)
    settings = _run_settings(model_cfg, cfg)
    meta = {"task": task, "model": model_name, **(meta or {}), **data.meta}

    torch.manual_seed(cfg.seed)
    model = build_model(model_cfg).to(dev_)
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    last_path, best_path = out_dir / "last.pt", out_dir / "best.pt"
    warm = (
        WarmStarts([B.length(e) for e in data.train], model.rnn.state_size, dev_)
        if model_cfg.implicit and cfg.warm_start
        else None
    )
    warm_adjoint = (
        WarmStarts([B.length(e) for e in data.train], model.rnn.state_size, dev_, torch.bfloat16)
        if model_cfg.implicit and cfg.warm_start_adjoint
        else None
    )
    state = {"epoch": 0, "lr": cfg.lr, "best": None, "best_epoch": 0, "bad_epochs": 0, "history": []}
    saved = _resume_point(last_path, dev_, settings, trained_on["fingerprint"])
    if saved is None:
        _set_aside_finished_run(out_dir)
    if saved is not None:
        model.load_state_dict(saved["state_dict"])
        optimizer.load_state_dict(saved["optimizer"])
        state = saved["train_state"]
        if warm is not None and "warm_starts" in saved:
            warm.load_state_dict(saved["warm_starts"])
        if warm_adjoint is not None and "warm_adjoints" in saved:
            warm_adjoint.load_state_dict(saved["warm_adjoints"])
        log.info("resuming %s from %s after epoch %d", model_name, last_path, state["epoch"])
    log.info(
        "%s on %s: %d parameters, hidden %d, %d train / %d dev sequences, device %s, %d threads",
        model_name,
        task,
        model.num_parameters(),
        model_cfg.hidden_size,
        len(data.train),
        len(data.dev),
        dev_,
        torch.get_num_threads(),
    )

    untrained = _never_trained(data, model)
    epochs_run = 0
    while not _finished(state, cfg):
        if stop_after is not None and epochs_run >= stop_after:
            log.info("stopping after %d epoch(s) in this call; %s resumes", epochs_run, last_path)
            return pd.DataFrame(state["history"])
        epoch = state["epoch"] + 1
        row = _train_epoch(model, optimizer, data, cfg, state["lr"], epoch, dev_, last_path, warm, warm_adjoint)
        _tie_to_unknown(untrained)
        dev_metrics = evaluate_loss(model, data.dev, cfg.batch_size, dev_)
        row.update({f"dev_{k}": v for k, v in dev_metrics.items()})
        row = _order(
            {**row, "device": device_label(dev_), "threads": torch.get_num_threads(), "commit": source_commit()}, task
        )
        state["history"].append(row)
        state["epoch"] = epoch
        if spec.better(dev_metrics[spec.metric], state["best"]):
            state["best"] = dev_metrics[spec.metric]
            state["best_epoch"], state["bad_epochs"] = epoch, 0
            torch_save(_payload(model, {**meta, "epoch": epoch, "dev": dev_metrics}, settings, trained_on), best_path)
        else:
            state["bad_epochs"] += 1
        # paper: halve the rate whenever validation perplexity rises
        if len(state["history"]) > 1 and _perplexity_rose(state["history"][-2], row):
            state["lr"] *= cfg.lr_decay
            for group in optimizer.param_groups:
                group["lr"] = state["lr"]
        payload = _payload(model, meta, settings, trained_on)
        payload.update(optimizer=optimizer.state_dict(), train_state=state)
        if warm is not None:
            payload["warm_starts"] = warm.state_dict()
        if warm_adjoint is not None:
            payload["warm_adjoints"] = warm_adjoint.state_dict()
        torch_save(payload, last_path)
        write_tsv(out_dir / "history.tsv", pd.DataFrame(state["history"]))
        metric = spec.dev_column
        log.info(
            "epoch %d: train loss %.4f, dev loss %.4f, %s %.4f, lr %.4g, %.0f s%s",
            epoch,
            row["train_loss"],
            row["dev_loss"],
            metric,
            row[metric],
            row["lr"],
            row["seconds"],
            ""
            if not model_cfg.implicit
            else f", newton {row['newton_iters']:.1f}, krylov "
            f"{row['krylov_iters']:.1f}, adjoint {row['backward_iters']:.1f}, nonconverged {row['nonconverged']}",
        )
        if model_cfg.implicit and row["nonconverged"]:
            log.warning(
                "epoch %d: %d sequence solve(s) did not converge (max residual %.3g)",
                epoch,
                row["nonconverged"],
                row["residual"],
            )
        epochs_run += 1

    history = pd.DataFrame(state["history"])
    if not best_path.is_file():
        raise InnError(
            f"{best_path} is missing after {state['epoch']} epoch(s): cannot finish {out_dir}; "
            f"move {last_path} aside to train afresh"
        )
    write_tsv(out_dir / "history.tsv", history)
    best = _best_state(best_path, last_path, out_dir)
    # The settings the run finished under: a resume may have changed its schedule (patience,
    # max_epochs), and best.pt holds the ones of the epoch it was written in.
    best["meta"].update(
        epochs=state["epoch"],
        best_epoch=state["best_epoch"],
        commit=source_commit(),
        seconds_per_epoch=float(history["seconds"].mean()),
        device=str(dev_),
        parameters=model.num_parameters(),
        threads=torch.get_num_threads(),
        settings=settings,
    )
    if "settings" in best:
        best["settings"] = settings
    torch_save(sealed(best), out_dir / "checkpoint.pt")
    last_path.unlink()  # first: a crash between the two restarts training rather than failing
    best_path.unlink()
    log.info("done: best epoch %d of %d (dev %s %.4f)", state["best_epoch"], state["epoch"], spec.metric, state["best"])
    return history


def _never_trained(data: TaskData, model: SequenceLabeler) -> list[tuple[nn.Embedding, torch.Tensor]]:
    """Per embedding table of a POS model, the rows that no training sentence uses. The
    vocabularies come from the whole training split, so with ``max_train`` the words (and
    affixes) only in the rest would keep their random initial vectors; :func:`_tie_to_unknown`
    makes them the unknown entry's instead, as a word outside the vocabulary is. Empty (nothing
    to do) when training sees the whole split."""
    if not task_spec(data.task).tags:
        return []
    encoder = model.encoder
    tables = [(encoder.words, torch.cat([e["words"] for e in data.train]))]
    tables += [
        (table, torch.cat([e["affixes"][:, kind] for e in data.train])) for kind, table in enumerate(encoder.affixes)
    ]
    untrained = []
    for table, used in tables:
        unused = torch.ones(table.num_embeddings, dtype=torch.bool)
        unused[used.unique()] = False
        unused[: UNK + 1] = False  # padding and the unknown entry itself
        if unused.any():
            untrained.append((table, unused.nonzero().squeeze(1).to(table.weight.device)))
    return untrained


def _tie_to_unknown(untrained: list[tuple[nn.Embedding, torch.Tensor]]) -> None:
    """Copy each table's unknown vector into its never-trained rows (they get no gradient, so
    this only changes what they say at evaluation and in the saved model)."""
    with torch.no_grad():
        for table, rows in untrained:
            table.weight[rows] = table.weight[UNK].clone()


def _finished(state: dict, cfg: TrainConfig) -> bool:
    return state["epoch"] >= cfg.max_epochs or state["bad_epochs"] >= cfg.patience


def _payload(model: SequenceLabeler, meta: dict, settings: dict, data: dict) -> dict:
    """A checkpoint or resume state; its ``meta`` names the source commit that wrote it."""
    return neural_payload(model, {**meta, "settings": settings, "commit": source_commit()}, data, settings=settings)


def _order(row: dict, task: str) -> dict:
    first = ["epoch", "train_loss", "dev_loss", "dev_perplexity", task_spec(task).dev_column, "lr", "seconds"]
    return {**{k: row[k] for k in first}, **{k: v for k, v in row.items() if k not in first}}


def _train_epoch(
    model,
    optimizer,
    data: TaskData,
    cfg: TrainConfig,
    lr: float,
    epoch: int,
    device: torch.device,
    last_path: Path,
    warm: WarmStarts | None = None,
    warm_adjoint: WarmStarts | None = None,
) -> dict:
    """One pass over the training data; returns the history row's training part. ``warm``:
    the INN's solutions from the previous epoch, updated batch by batch; ``warm_adjoint``
    the same for its backward pass's adjoints."""
    model.train()
    seed = _epoch_seed(cfg.seed, epoch)
    torch.manual_seed(seed)  # dropout: each epoch its own stream, so a resumed run matches
    generator = torch.Generator().manual_seed(seed)
    order = B.make_batches([B.length(e) for e in data.train], cfg.batch_size, generator)
    is_inn = model.config.implicit
    tally = SolverTally()
    total, count = 0.0, 0
    start, cpu_start = time.perf_counter(), time.process_time()
    last_log = start
    interactive = sys.stderr.isatty()
    bar = tqdm(order, desc=f"epoch {epoch}", unit="batch", disable=not interactive, mininterval=1.0, leave=False)
    with warnings.catch_warnings():
        # counted per epoch from the layer's stats instead of one warning per batch
        warnings.simplefilter("ignore", ConvergenceWarning)
        for number, index in enumerate(bar, start=1):
            batch = B.collate([data.train[i] for i in index], cfg.word_dropout, generator)
            batch = B.to_device(batch, device)
            rows = torch.tensor(index, device=device)
            warm_start = warm.gather(rows, batch["mask"].shape[1]) if warm is not None else None
            regularise = is_inn and cfg.jacobian_weight > 0 and (number - 1) % cfg.jacobian_every == 0
            if is_inn:
                model.rnn.jacobian_samples = cfg.jacobian_samples if regularise else 0
            try:
                loss_sum, n, _ = token_losses(model, batch, warm_start)
            except InnError as exc:
                raise InnError(f"epoch {epoch}, batch {number}: {exc}; {_stop_note(last_path, epoch)}") from None
            loss = loss_sum / {"sentence": len(index), "token": max(int(n), 1), "sum": 1}[cfg.loss]
            if regularise:
                penalty = model.rnn.last_jacobian_penalty
                tally.jacobian.append(float(penalty.detach()))
                loss = loss + cfg.jacobian_weight * penalty
            if not torch.isfinite(loss):
                raise InnError(
                    f"loss is {loss.item()} at epoch {epoch}, batch {number} of {len(order)}"
                    f"{_nonfinite_solve(model) if is_inn else ''}; {_stop_note(last_path, epoch)}; "
                    "lower training.lr or set training.clip"
                )
            if warm is not None:
                warm.update(rows, model.rnn.last_solution)
            optimizer.zero_grad(set_to_none=True)
            if warm_adjoint is not None:
                model.rnn.adjoint_start = warm_adjoint.gather(rows, batch["mask"].shape[1])
            try:
                loss.backward()
            except InnError as exc:
                raise InnError(f"epoch {epoch}, batch {number}: {exc}; {_stop_note(last_path, epoch)}") from None
            if warm_adjoint is not None and model.rnn.last_adjoint is not None:
                warm_adjoint.update(rows, model.rnn.last_adjoint)
            if cfg.clip is not None:
                norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip)
                if not torch.isfinite(norm):
                    raise InnError(
                        f"gradient norm is {float(norm)} at epoch {epoch}, batch {number}; "
                        f"{_stop_note(last_path, epoch)}; lower training.lr"
                    )
            optimizer.step()
            if is_inn:
                tally.add(model.rnn)
            total += loss_sum.item()
            count += int(n)
            now = time.perf_counter()
            if interactive:
                bar.set_postfix(loss=f"{total / max(count, 1):.4f}", refresh=False)
            elif now - last_log > 300:  # a line every five minutes in a rule's log
                log.info("epoch %d: batch %d of %d, train loss %.4f", epoch, number, len(order), total / max(count, 1))
                last_log = now
    bar.close()
    # process time beside wall time: on a shared machine the CPU seconds are the firmer figure
    row = {
        "epoch": epoch,
        "train_loss": total / max(count, 1),
        "lr": lr,
        "seconds": time.perf_counter() - start,
        "cpu_seconds": time.process_time() - cpu_start,
    }
    if is_inn:
        row.update(tally.row())
    return row


# --------------------------------------------------------------------------- CLI


def _json_settings(text: str, where: str) -> dict:
    """The settings object in ``text`` (from ``where``), checked against the config schema's
    ``run_settings``: an unknown section or key, a wrong type or a value out of range is one
    line naming it (a misspelt ``"trainig"`` is refused, not ignored)."""
    try:
        settings = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InnError(f"{where} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    check_settings(settings, "$defs/run_settings", where=where)
    check_model_solver(settings.get("model", {}), where)  # the solver registry's keys, types and ranges
    return settings


def _settings_from(args) -> tuple[TrainConfig, dict, dict]:
    """The training settings, model options and meta facts of ``--settings`` or ``--settings-file``
    (one source: given both, neither would be what the run used as a whole) and ``--seed``."""
    if args.settings and args.settings_file:
        raise InnError("--settings and --settings-file both given: give the settings in one of them")
    settings = _json_settings(args.settings, "--settings") if args.settings else {}
    if args.settings_file:
        try:
            text = Path(args.settings_file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InnError(
                f"cannot read --settings-file {args.settings_file}: {getattr(exc, 'strerror', None) or exc}"
            ) from None
        settings = {**_json_settings(text, f"--settings-file {args.settings_file}"), **settings}
    training = {**training_defaults(args.task), **settings.get("training", {})}  # the schema's defaults of the task
    if args.seed is not None:
        training["seed"] = args.seed
    return TrainConfig(**training), settings.get("model", {}), dict(settings.get("meta", {}))


def main(argv: list[str]) -> None:
    """``inn train``: train one model on one prepared task folder."""
    parser = argparse.ArgumentParser(prog="inn train", description=train.__doc__.splitlines()[0])
    parser.add_argument("--task", required=True, choices=list(TASKS))
    parser.add_argument("--data", required=True, help="prepared data folder (results/data/pos/ewt, .../walks/b0.5)")
    parser.add_argument(
        "--model",
        required=True,
        help="a neural model of inn.models.MODELS (inn, inn_lstm, gru, lstm, "
        "bigru, bilstm), optionally with a size: bilstm-h300",
    )
    parser.add_argument("--out-dir", dest="out", required=True, help="output folder (checkpoint.pt, history.tsv)")
    parser.add_argument(
        "--settings", help='JSON: {"training": {...TrainConfig}, "model": {hidden_size, solver, ...}, "meta": {...}}'
    )
    parser.add_argument("--settings-file", help="the same JSON in a file")
    parser.add_argument("--seed", type=int)
    parser.add_argument("--device", default="auto", help="auto (CUDA when present), cpu or cuda")
    parser.add_argument(
        "--threads",
        type=positive_int,
        help="torch CPU threads (default: the cores free of other work, at most 4; OMP_NUM_THREADS where set)",
    )
    parser.add_argument(
        "--stop-after", type=positive_int, help="finish at most this many epochs, then exit (resumable)"
    )
    parser.add_argument(
        "--retrain",
        action="store_true",
        help="train afresh over a finished run in the output folder "
        "(its checkpoint.pt and history.tsv are set aside); without it a finished run is left as it is",
    )
    args = parser.parse_args(argv)
    check_out_dir(args.out)
    set_threads(args.threads, follow_load=False)  # a rerun on this machine gives the same numbers
    cfg, model_options, meta = _settings_from(args)
    meta.setdefault("seed", cfg.seed)
    meta.setdefault("dataset", Path(args.data).name)
    with stretch_log(Path(args.out)):
        try:
            train(
                args.task,
                args.data,
                args.model,
                args.out,
                cfg,
                model_options,
                device=args.device,
                meta=meta,
                stop_after=args.stop_after,
                retrain=args.retrain,
            )
        except KeyboardInterrupt:  # inn.experiment.cli reports it in one line, with this note
            last = Path(args.out) / "last.pt"
            note = f"resume from {last}" if last.is_file() else "start again (no epoch had finished)"
            log.info("interrupted: rerun the same command to %s", note)
            raise KeyboardInterrupt(f"rerun the same command to {note}") from None


@contextlib.contextmanager
def stretch_log(out_dir: Path):
    """Log this stretch of training into the run's own folder as well,
    ``<out_dir>/logs/train_<began>.log`` (``began`` as YYYYmmddHHMMSS), one file per stretch.
    A workflow job that resumes rewrites its ``log:`` file (Snakemake empties it first), so
    these are what keeps every stretch's log; ``inn runs --keep-states`` carries them. A folder
    that cannot take the file costs a warning, never the training."""
    folder = out_dir / "logs"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(folder / f"train_{time.strftime('%Y%m%d%H%M%S')}.log", encoding="utf-8")
    except OSError as exc:
        log.warning("cannot write this stretch's log into %s (%s); it goes to stderr alone", folder, exc)
        yield
        return
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield
    finally:
        root.removeHandler(handler)
        handler.close()
