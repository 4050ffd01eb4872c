"""A run's output folder: its files (:data:`OUTPUTS`), one writer at a time
(:func:`_holding_out_dir`), a finished run found there and left alone or set aside
(:func:`_finished_history`, :func:`_set_aside_finished_run`), the checkpoints' contents
(:func:`_payload`) and the end of a run: ``history.tsv`` and ``checkpoint.pt`` written from the
best epoch's state, ``last.pt`` and ``best.pt`` removed (:func:`_finish`)."""

from __future__ import annotations

import functools
import inspect
import logging
import os
import time
from pathlib import Path

import pandas as pd
import torch

from inn.checkpoints import neural_payload, sealed, weights_problem
from inn.errors import InnError
from inn.experiment.provenance import source_commit
from inn.experiment.train.run import Run
from inn.io import locked_folder, refuse_folders_at, remove_stale_temps, torch_load_data, torch_load_problem, torch_save
from inn.models import SequenceLabeler
from inn.tables import read_tsv, write_tsv

#: ``inn train``'s one logger, whichever of its modules logs (its lines name it as they always have)
log = logging.getLogger("inn.experiment.train.loop")

#: the files a run writes in its output folder
OUTPUTS = ("checkpoint.pt", "history.tsv", "last.pt", "best.pt")


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


def _finished_run(out_dir: Path, retrain: bool) -> pd.DataFrame | None:
    """The history of the finished run in ``out_dir``, which this call leaves as it is (one line
    says so); None where there is none, or where ``retrain`` trains it again."""
    if retrain or (finished := _finished_history(out_dir)) is None:
        return None
    log.info(
        "%s holds a finished run (%d epoch(s)): nothing to do; give --retrain to train it again (its "
        "checkpoint.pt and history.tsv are then set aside)",
        out_dir,
        len(finished),
    )
    return finished


def _payload(model: SequenceLabeler, meta: dict, settings: dict, data: dict) -> dict:
    """A checkpoint or resume state; its ``meta`` names the source commit that wrote it."""
    return neural_payload(model, {**meta, "settings": settings, "commit": source_commit()}, data, settings=settings)


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


def _finish(run: Run) -> pd.DataFrame:
    """End a run whose epochs are done: its ``history.tsv``, and its ``checkpoint.pt`` from the best
    epoch's state with the facts of the whole run; then remove ``last.pt`` and ``best.pt``.
    Returns the history."""
    state, out_dir, best_path, last_path = run.state, run.out_dir, run.best_path, run.last_path
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
        device=str(run.device),
        parameters=run.model.num_parameters(),
        threads=torch.get_num_threads(),
        settings=run.settings,
    )
    if "settings" in best:
        best["settings"] = run.settings
    torch_save(sealed(best), out_dir / "checkpoint.pt")
    last_path.unlink()  # first: a crash between the two restarts training rather than failing
    best_path.unlink()
    log.info(
        "done: best epoch %d of %d (dev %s %.4f)", state["best_epoch"], state["epoch"], run.spec.metric, state["best"]
    )
    return history
