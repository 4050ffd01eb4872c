"""Training: one model on one task, SGD with the paper's schedule, resumable after every epoch
and every half hour inside a long one.

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
  starts included; inside an epoch longer than ``save_every``, 30 minutes by default, the
  state after its last batch then, rewritten that often) and ``best.pt``;
  a restarted run resumes from ``last.pt`` and ends exactly where an uninterrupted run
  would (CPU, same seed and threads: every epoch reseeds its own random streams, and a state
  saved inside an epoch keeps where they stood). Both are
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

This module is the loop itself, ``train`` and the ``inn train`` command; its parts are modules of
this package: the settings (:mod:`~inn.experiment.train.settings`), the data
(:mod:`~inn.experiment.train.task_data`), the run's record and build
(:mod:`~inn.experiment.train.run`), the losses and metrics (:mod:`~inn.experiment.train.losses`),
one epoch (:mod:`~inn.experiment.train.epoch`), the solver tally
(:mod:`~inn.experiment.train.tally`), the warm starts (:mod:`~inn.experiment.train.warm_starts`),
``last.pt`` (:mod:`~inn.experiment.train.resume`) and the output folder
(:mod:`~inn.experiment.train.outputs`). Their names used elsewhere are importable from here too.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import time
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from inn.checkpoints import describe_data
from inn.device import add_device_argument, resolve_device, set_threads
from inn.errors import positive_int
from inn.experiment.cli import LOG_FORMAT
from inn.experiment.provenance import device_label, source_commit
from inn.experiment.train.epoch import _train_epoch as _train_epoch
from inn.experiment.train.losses import PERPLEXITY_CLAMP as PERPLEXITY_CLAMP
from inn.experiment.train.losses import _perplexity_rose as _perplexity_rose
from inn.experiment.train.losses import correct_count as correct_count
from inn.experiment.train.losses import evaluate_loss as evaluate_loss
from inn.experiment.train.losses import token_losses as token_losses
from inn.experiment.train.outputs import OUTPUTS as OUTPUTS
from inn.experiment.train.outputs import _finish, _finished_run, _holding_out_dir, _payload
from inn.experiment.train.resume import RESUMABLE_CHANGES as RESUMABLE_CHANGES
from inn.experiment.train.resume import RESUME_KEYS as RESUME_KEYS
from inn.experiment.train.resume import _resume, _save_resume_state
from inn.experiment.train.run import Run, _model_config, _model_kind, _start_run
from inn.experiment.train.settings import TrainConfig as TrainConfig
from inn.experiment.train.settings import _json_settings as _json_settings
from inn.experiment.train.settings import _settings_from as _settings_from
from inn.experiment.train.tally import SolverTally as SolverTally
from inn.experiment.train.task_data import TaskData as TaskData
from inn.experiment.train.task_data import _never_trained, _tie_to_unknown
from inn.experiment.train.task_data import load_task_data as load_task_data
from inn.experiment.train.warm_starts import WarmStarts as WarmStarts
from inn.io import check_out_dir, torch_save
from inn.registry import TASKS, task_spec
from inn.tables import write_tsv

log = logging.getLogger(__name__)


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
    save_every: float | None = 1800.0,
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
        save_every: inside an epoch, write ``last.pt`` this often (seconds of training), so a
            run stopped there (a time limit, a lost machine) goes on after its last saved batch;
            None: at the epochs' ends only.

    Returns:
        The history table (one row per finished epoch).

    Raises:
        InnError: missing data, a checkpoint from another configuration, a non-finite loss
            (the message names epoch and batch; the last good checkpoint is kept), a failed
            solve in strict mode, another run holding ``out_dir``, a failed write.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if (finished := _finished_run(out_dir, retrain)) is not None:
        return finished
    device_ = resolve_device(device)
    kind, size = _model_kind(model_name, model_options)
    data = load_task_data(task, data_dir, cfg)
    # the fingerprint, and what a tagger file needs of the data (the words it trains on)
    trained_on = describe_data(data_dir, task, max_train=cfg.max_train)
    model_cfg = _model_config(model_name, kind, size, data, cfg, model_options)
    run = _start_run(out_dir, data, trained_on, model_name, model_cfg, cfg, meta, device_)
    run.save_every = save_every
    _resume(run)
    _log_start(run)
    if _run_epochs(run, stop_after):
        return _finish(run)
    return pd.DataFrame(run.state["history"])


def _run_epochs(run: Run, stop_after: int | None) -> bool:
    """Train ``run``'s epochs until the schedule ends it (``max_epochs``, ``patience``), or until
    ``stop_after`` epochs have run in this call: then False, with ``last.pt`` left to resume from."""
    untrained = _never_trained(run.data, run.model)
    epochs_run = 0
    while not _finished(run.state, run.cfg):
        if stop_after is not None and epochs_run >= stop_after:
            log.info("stopping after %d epoch(s) in this call; %s resumes", epochs_run, run.last_path)
            return False
        _run_epoch(run, untrained)
        epochs_run += 1
    return True


def _log_start(run: Run) -> None:
    """The run's opening line: model, task, size, data and where it runs."""
    log.info(
        "%s on %s: %d parameters, hidden %d, %d train / %d dev sequences, device %s, %d threads",
        run.model_name,
        run.data.task,
        run.model.num_parameters(),
        run.model_cfg.hidden_size,
        len(run.data.train),
        len(run.data.dev),
        run.device,
        torch.get_num_threads(),
    )


def _finished(state: dict, cfg: TrainConfig) -> bool:
    return state["epoch"] >= cfg.max_epochs or state["bad_epochs"] >= cfg.patience


def _run_epoch(run: Run, untrained: list) -> None:
    """One epoch of ``run``: train, validate, record its history row, keep the best epoch's state
    (``best.pt``), halve the rate where validation perplexity rose (the paper's rule), and save
    the state to resume from (``last.pt``) and the history so far."""
    state, cfg, spec = run.state, run.cfg, run.spec
    epoch = state["epoch"] + 1
    row = _train_epoch(
        run.model,
        run.optimizer,
        run.data,
        cfg,
        state["lr"],
        epoch,
        run.device,
        run.last_path,
        run.warm,
        run.warm_adjoint,
        within=state.pop("within", None),
        save_within=lambda within: _save_resume_state(run, within),
        save_every=run.save_every,
    )
    _tie_to_unknown(untrained)
    dev_metrics = evaluate_loss(run.model, run.data.dev, cfg.batch_size, run.device)
    row.update({f"dev_{k}": v for k, v in dev_metrics.items()})
    row = _order(
        {**row, "device": device_label(run.device), "threads": torch.get_num_threads(), "commit": source_commit()},
        run.data.task,
    )
    state["history"].append(row)
    state["epoch"] = epoch
    if spec.better(dev_metrics[spec.metric], state["best"]):
        state["best"] = dev_metrics[spec.metric]
        state["best_epoch"], state["bad_epochs"] = epoch, 0
        meta = {**run.meta, "epoch": epoch, "dev": dev_metrics}
        torch_save(_payload(run.model, meta, run.settings, run.trained_on), run.best_path)
    else:
        state["bad_epochs"] += 1
    # paper: halve the rate whenever validation perplexity rises
    if len(state["history"]) > 1 and _perplexity_rose(state["history"][-2], row):
        state["lr"] *= cfg.lr_decay
        for group in run.optimizer.param_groups:
            group["lr"] = state["lr"]
    _save_resume_state(run)
    write_tsv(run.out_dir / "history.tsv", pd.DataFrame(state["history"]))
    _log_epoch(run, row)


def _order(row: dict, task: str) -> dict:
    first = ["epoch", "train_loss", "dev_loss", "dev_perplexity", task_spec(task).dev_column, "lr", "seconds"]
    return {**{k: row[k] for k in first}, **{k: v for k, v in row.items() if k not in first}}


def _log_epoch(run: Run, row: dict) -> None:
    """The epoch's line in the log (for the INN with its solver statistics), and a warning where
    some of its solves did not converge."""
    epoch, implicit, metric = row["epoch"], run.model_cfg.implicit, run.spec.dev_column
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
        if not implicit
        else f", newton {row['newton_iters']:.1f}, krylov "
        f"{row['krylov_iters']:.1f}, adjoint {row['backward_iters']:.1f}, nonconverged {row['nonconverged']}",
    )
    if implicit and row["nonconverged"]:
        log.warning(
            "epoch %d: %d sequence solve(s) did not converge (max residual %.3g)",
            epoch,
            row["nonconverged"],
            row["residual"],
        )


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
    add_device_argument(parser)
    parser.add_argument(
        "--threads",
        type=positive_int,
        help="torch CPU threads (default: the cores this process may use, at most 4, whatever else runs, so that "
        "a rerun gives the same numbers; OMP_NUM_THREADS where set)",
    )
    parser.add_argument(
        "--stop-after", type=positive_int, help="finish at most this many epochs, then exit (resumable)"
    )
    parser.add_argument(
        "--save-every",
        type=float,
        default=30.0,
        metavar="MINUTES",
        help="inside a longer epoch, save the state to resume from (last.pt) this often, so a run stopped "
        "there goes on after its last saved batch (default 30; 0: at the epochs' ends only)",
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
                save_every=args.save_every * 60 if args.save_every > 0 else None,
            )
        except KeyboardInterrupt:  # inn.experiment.cli reports it in one line, with this note
            last = Path(args.out) / "last.pt"
            note = f"resume from {last}" if last.is_file() else "start again (nothing was saved yet)"
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
