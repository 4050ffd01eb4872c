"""``last.pt``, the state a run resumes from: written after every epoch (:func:`_save_resume_state`:
the model, the optimiser, where the run stands and the INN's warm starts), and read back by a
restarted run (:func:`_resume`), which then ends exactly where an uninterrupted run would.

A ``last.pt`` that cannot be resumed from is set aside and training starts afresh; one of another
configuration or of other data stops the run (:func:`_resume_point`).
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import MISSING, fields
from pathlib import Path

import torch

from inn.checkpoints import READABLE_FORMATS, weights_problem
from inn.errors import InnError
from inn.experiment.provenance import resumed_commit_note
from inn.experiment.train.outputs import _payload, _set_aside_finished_run
from inn.experiment.train.run import Run
from inn.io import torch_load_data, torch_load_problem, torch_save
from inn.models import ModelConfig

#: ``inn train``'s one logger, whichever of its modules logs (its lines name it as they always have)
log = logging.getLogger("inn.experiment.train.loop")

#: what a resumable ``last.pt`` holds beyond a model checkpoint
RESUME_KEYS = ("optimizer", "train_state")

#: settings that may change between an interrupted run and its resumption: how long it trains,
#: where its solves start, and whether they run as CUDA graphs (which replay the same steps)
RESUMABLE_CHANGES = {f"training.{key}" for key in ("max_epochs", "patience", "warm_start", "warm_start_adjoint")} | {
    f"model.solver_options.{key}" for key in ("cuda_graph", "cuda_graph_steps", "backward_cuda_graph")
}


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


def _resume(run: Run) -> None:
    """Continue ``run`` from its ``last.pt`` where there is one to resume from; starting afresh
    instead, set aside the finished run the folder may hold."""
    saved = _resume_point(run.last_path, run.device, run.settings, run.trained_on["fingerprint"])
    if saved is None:
        _set_aside_finished_run(run.out_dir)
        return
    run.model.load_state_dict(saved["state_dict"])
    run.optimizer.load_state_dict(saved["optimizer"])
    run.state = saved["train_state"]
    if run.warm is not None and "warm_starts" in saved:
        run.warm.load_state_dict(saved["warm_starts"])
    if run.warm_adjoint is not None and "warm_adjoints" in saved:
        run.warm_adjoint.load_state_dict(saved["warm_adjoints"])
    within = run.state.get("within")
    log.info(
        "resuming %s from %s after epoch %d%s",
        run.model_name,
        run.last_path,
        run.state["epoch"],
        f" and batch {within['batches']} of epoch {within['epoch']}" if within else "",
    )


def _save_resume_state(run: Run, within: dict | None = None) -> None:
    """Write ``last.pt``: the model and its checkpoint facts, the optimiser, where the run stands and
    the INN's warm starts; inside an epoch, ``within`` too, where its pass stands
    (:func:`~inn.experiment.train.epoch._within`)."""
    payload = _payload(run.model, run.meta, run.settings, run.trained_on)
    state = run.state if within is None else {**run.state, "within": within}
    payload.update(optimizer=run.optimizer.state_dict(), train_state=state)
    if run.warm is not None:
        payload["warm_starts"] = run.warm.state_dict()
    if run.warm_adjoint is not None:
        payload["warm_adjoints"] = run.warm_adjoint.state_dict()
    torch_save(payload, run.last_path)
