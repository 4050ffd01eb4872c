"""One training epoch: a seeded pass over the training data in batches, each an SGD step
(:func:`_train_epoch`, :func:`_train_batch`), that returns the history row's training part.

Every epoch reseeds its own random streams (dropout, batch order, word dropout) from the run's
seed and its number (:func:`_epoch_seed`), so a resumed run draws what an uninterrupted one
would. An epoch longer than ``save_every`` seconds hands its place to ``save_within`` that often
(the batches done, the sums so far and the random streams' states: :func:`_within`), so that a
run stopped inside a long epoch (a session's or a scheduler's time limit) resumes after its last
saved batch rather than at the epoch's start, and ends where an uninterrupted run would. A
non-finite loss or gradient, or a solve that fails in strict mode, stops the run with one line
naming epoch and batch and what the stop leaves behind (:func:`_stop_note`).
"""

from __future__ import annotations

import logging
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tqdm import tqdm

from inn import batches as B
from inn.errors import InnError
from inn.experiment.train.losses import token_losses
from inn.experiment.train.settings import TrainConfig
from inn.experiment.train.tally import SolverTally
from inn.experiment.train.task_data import TaskData
from inn.experiment.train.warm_starts import WarmStarts
from inn.models import SequenceLabeler
from inn.solvers import ConvergenceWarning, ResultCode

#: ``inn train``'s one logger, whichever of its modules logs (its lines name it as they always have)
log = logging.getLogger("inn.experiment.train.loop")


def _epoch_seed(seed: int, epoch: int) -> int:
    return seed * 1_000_003 + epoch


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


def _stop_note(last_path: Path) -> str:
    """What a stopped run leaves behind, said truthfully."""
    if last_path.is_file():
        return f"stopped, the last good checkpoint ({last_path}, saved before this batch) is kept"
    return "stopped before any epoch finished, nothing is saved"


def _random_state(generator: torch.Generator, device: torch.device) -> dict:
    """The epoch's random streams where they stand: its generator (batch order, word dropout) and
    torch's own (dropout; on a GPU the device's)."""
    cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
    return {"generator": generator.get_state(), "torch": torch.get_rng_state(), "cuda": cuda}


def _set_random_state(saved: dict, generator: torch.Generator, device: torch.device) -> None:
    generator.set_state(saved["generator"])
    torch.set_rng_state(saved["torch"])
    if saved.get("cuda") is not None and device.type == "cuda":
        torch.cuda.set_rng_state(saved["cuda"], device)


@dataclass
class _Pass:
    """What every batch of one epoch's pass shares: the model and its optimiser, the settings,
    where the pass stands (for the line of a run that stops) and the INN's warm starts and solver
    statistics."""

    model: SequenceLabeler
    optimizer: torch.optim.Optimizer
    cfg: TrainConfig
    device: torch.device
    epoch: int
    batches: int  # in the epoch
    last_path: Path
    warm: WarmStarts | None
    warm_adjoint: WarmStarts | None
    tally: SolverTally = field(default_factory=SolverTally)


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
    within: dict | None = None,
    save_within: Callable[[dict], None] | None = None,
    save_every: float | None = None,
) -> dict:
    """One pass over the training data; returns the history row's training part. ``warm``:
    the INN's solutions from the previous epoch, updated batch by batch; ``warm_adjoint``
    the same for its backward pass's adjoints. ``within``: where a stopped pass of this epoch
    stood (what ``save_within`` was given), to go on after its last batch; ``save_within`` is
    called with that every ``save_every`` seconds of the pass, never after its last batch."""
    model.train()
    seed = _epoch_seed(cfg.seed, epoch)
    torch.manual_seed(seed)  # dropout: each epoch its own stream, so a resumed run matches
    generator = torch.Generator().manual_seed(seed)
    order = B.make_batches([B.length(e) for e in data.train], cfg.batch_size, generator)
    step = _Pass(model, optimizer, cfg, device, epoch, len(order), last_path, warm, warm_adjoint)
    done, total, count, seconds, cpu_seconds = 0, 0.0, 0, 0.0, 0.0
    if within is not None:
        done, total, count = within["batches"], within["total"], within["count"]
        seconds, cpu_seconds = within["seconds"], within["cpu_seconds"]
        step.tally.load_state_dict(within["tally"])
        _set_random_state(within["random"], generator, device)
        log.info("epoch %d: going on after batch %d of %d", epoch, done, len(order))
    start, cpu_start = time.perf_counter(), time.process_time()
    last_log = last_save = start
    interactive = sys.stderr.isatty()
    bar = tqdm(
        order[done:],
        desc=f"epoch {epoch}",
        unit="batch",
        initial=done,
        total=len(order),
        disable=not interactive,
        mininterval=1.0,
        leave=False,
    )
    with warnings.catch_warnings():
        # counted per epoch from the layer's stats instead of one warning per batch
        warnings.simplefilter("ignore", ConvergenceWarning)
        for number, index in enumerate(bar, start=done + 1):
            batch = B.collate([data.train[i] for i in index], cfg.word_dropout, generator)
            loss_sum, n = _train_batch(step, number, index, B.to_device(batch, device))
            total += loss_sum.item()
            count += int(n)
            now = time.perf_counter()
            if interactive:
                bar.set_postfix(loss=f"{total / max(count, 1):.4f}", refresh=False)
            elif now - last_log > 300:  # a line every five minutes in a rule's log
                log.info("epoch %d: batch %d of %d, train loss %.4f", epoch, number, len(order), total / max(count, 1))
                last_log = now
            if save_within is not None and save_every is not None and now - last_save >= save_every:
                if number < len(order):
                    save_within(
                        _within(
                            step,
                            number,
                            total,
                            count,
                            seconds + now - start,
                            cpu_seconds + time.process_time() - cpu_start,
                            generator,
                        )
                    )
                    last_save = time.perf_counter()
    bar.close()
    # process time beside wall time: on a shared machine the CPU seconds are the firmer figure
    row = {
        "epoch": epoch,
        "train_loss": total / max(count, 1),
        "lr": lr,
        "seconds": seconds + time.perf_counter() - start,
        "cpu_seconds": cpu_seconds + time.process_time() - cpu_start,
    }
    if model.config.implicit:
        row.update(step.tally.row())
    return row


def _within(
    step: _Pass, batches: int, total: float, count: int, seconds: float, cpu_seconds: float, generator: torch.Generator
) -> dict:
    """Where a pass stands after ``batches`` batches: what a stopped run needs, beside the weights,
    the optimiser and the warm starts, to go on with the next batch as if it had not stopped."""
    return {
        "epoch": step.epoch,
        "batches": batches,
        "total": total,
        "count": count,
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
        "tally": step.tally.state_dict(),
        "random": _random_state(generator, step.device),
    }


def _train_batch(
    step: _Pass, number: int, index: list[int], batch: dict[str, torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor]:
    """One SGD step on the training sequences ``index``, the epoch's ``number``-th batch: the loss
    (:func:`_batch_loss`), its gradient (the INN's adjoint solve started from the warm adjoints),
    clipped, and the step. Returns the summed token loss and the number of scored positions."""
    model, cfg = step.model, step.cfg
    rows = torch.tensor(index, device=step.device)
    loss_sum, n, loss = _batch_loss(step, number, index, batch, rows)
    if step.warm is not None:
        step.warm.update(rows, model.rnn.last_solution)
    step.optimizer.zero_grad(set_to_none=True)
    if step.warm_adjoint is not None:
        model.rnn.adjoint_start = step.warm_adjoint.gather(rows, batch["mask"].shape[1])
    try:
        loss.backward()
    except InnError as exc:
        raise InnError(f"epoch {step.epoch}, batch {number}: {exc}; {_stop_note(step.last_path)}") from None
    if step.warm_adjoint is not None and model.rnn.last_adjoint is not None:
        step.warm_adjoint.update(rows, model.rnn.last_adjoint)
    if cfg.clip is not None:
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip)
        if not torch.isfinite(norm):
            raise InnError(
                f"gradient norm is {float(norm)} at epoch {step.epoch}, batch {number}; "
                f"{_stop_note(step.last_path)}; lower training.lr"
            )
    step.optimizer.step()
    if model.config.implicit:
        step.tally.add(model.rnn)
    return loss_sum, n


def _batch_loss(
    step: _Pass, number: int, index: list[int], batch: dict[str, torch.Tensor], rows: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The batch's summed token loss, its number of scored positions, and the loss to step on:
    normalised as ``training.loss`` says, plus the Jacobian penalty on the batches it
    regularises. The INN's solve starts from the warm starts; a non-finite loss stops the run."""
    model, cfg, is_inn = step.model, step.cfg, step.model.config.implicit
    warm_start = step.warm.gather(rows, batch["mask"].shape[1]) if step.warm is not None else None
    regularise = is_inn and cfg.jacobian_weight > 0 and (number - 1) % cfg.jacobian_every == 0
    if is_inn:
        model.rnn.jacobian_samples = cfg.jacobian_samples if regularise else 0
    try:
        loss_sum, n, _ = token_losses(model, batch, warm_start)
    except InnError as exc:
        raise InnError(f"epoch {step.epoch}, batch {number}: {exc}; {_stop_note(step.last_path)}") from None
    loss = loss_sum / {"sentence": len(index), "token": max(int(n), 1), "sum": 1}[cfg.loss]
    if regularise:
        penalty = model.rnn.last_jacobian_penalty
        step.tally.jacobian.append(float(penalty.detach()))
        loss = loss + cfg.jacobian_weight * penalty
    if not torch.isfinite(loss):
        raise InnError(
            f"loss is {loss.item()} at epoch {step.epoch}, batch {number} of {step.batches}"
            f"{_nonfinite_solve(model) if is_inn else ''}; {_stop_note(step.last_path)}; "
            "lower training.lr or set training.clip"
        )
    return loss_sum, n, loss
