"""Where every training run stands, read from its own files: ``inn runs``.

A long table (the paper-scale Table 1) is many runs that stop and resume on different
machines. What a run has done is recorded in the run itself, never in a note beside it:

- ``history.tsv`` has one row per finished epoch with its ``seconds``, the ``device`` it ran
  on, the ``threads`` it used and the source ``commit`` of the code that ran it
  (:func:`inn.experiment.provenance.source_commit`);
- ``last.pt`` (a run in progress) holds the same history in its ``train_state``, and its
  ``meta`` the commit that wrote it; a run resumed under another commit says so in its log;
- a finished run has ``checkpoint.pt`` and, once evaluated, ``metrics.json`` (whose ``commit``
  is the evaluation's and ``trained_at`` the training's).

``inn runs RESULTS [RESULTS ...]`` lists every run below the results folders given (the
workflow's ``results/`` layout: ``train/<task>/<dataset>/<model>/seed<N>/`` and
``eval/<task>/<dataset>/<model>/seed<N>/metrics.json``), one row each: finished or not,
epochs done and the best, the seconds and device of each stretch of epochs, and the commits.
A folder given twice, or a run found in two of them (an archive of finished runs and a folder
of resume states), is listed once, from the folder that has gone furthest.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from inn.errors import InnError

# their old place, kept for a release:
from inn.experiment.provenance import UNRECORDED, device_label, resumed_commit_note, source_commit  # noqa: F401
from inn.tables import read_tsv, write_tsv

log = logging.getLogger(__name__)

#: the state a run is in, from the files it has
FINISHED, EVALUATED, UNFINISHED, STOPPED = "finished", "evaluated", "unfinished", "stopped"


def _stretches(history: pd.DataFrame) -> str:
    """The epochs grouped into stretches of one device, thread count and commit, each with its
    seconds an epoch: ``1-5 cpu 250-360 s (6ebf96e); 6-8 cpu, 2 threads 180-190 s (6ebf96e);
    9-10 cuda NVIDIA H200 70-86 s (6ebf96e)`` (one thread, or none recorded, goes unsaid)."""
    if history.empty:
        return ""
    frame = history.copy()
    for column in ("device", "commit"):
        frame[column] = frame[column].fillna(UNRECORDED).astype(str) if column in frame else UNRECORDED
    threads = (
        pd.to_numeric(frame["threads"], errors="coerce") if "threads" in frame else pd.Series(float("nan"), frame.index)
    )
    frame["device"] = [
        f"{device}, {int(count)} threads" if count > 1 else device
        for device, count in zip(frame["device"], threads.fillna(1))
    ]
    parts, start = [], 0
    keys = list(zip(frame["device"], frame["commit"]))
    for i in range(1, len(frame) + 1):
        if i == len(frame) or keys[i] != keys[start]:
            rows = frame.iloc[start:i]
            epochs = f"{int(rows['epoch'].iloc[0])}" + (f"-{int(rows['epoch'].iloc[-1])}" if i - start > 1 else "")
            low, high = float(rows["seconds"].min()), float(rows["seconds"].max())
            seconds = f"{low:.0f}" if round(low) == round(high) else f"{low:.0f}-{high:.0f}"
            device, commit = keys[start]
            parts.append(f"{epochs} {device} {seconds} s ({commit})")
            start = i
    return "; ".join(parts)


def _devices_from_logs(folder: Path) -> dict[int, str]:
    """Each epoch's device as the run's training logs name it, for histories written before
    they recorded it: a log's start line says ``device cpu`` or ``device cuda`` and its epoch
    lines follow (``epoch 6: train loss ...``). Empty when there are no logs."""
    import re

    devices: dict[int, str] = {}
    for log_file in sorted([*folder.glob("*.log"), *folder.glob("logs/*.log")]):
        device = None
        for line in log_file.read_text(encoding="utf-8", errors="replace").splitlines():
            if started := re.search(r": \d+ parameters, .*, device (\w+)", line):
                device = started.group(1)
            elif (finished := re.search(r" epoch (\d+): train loss", line)) and device is not None:
                devices[int(finished.group(1))] = f"{device} (log)"
    return devices


def _read_state(path: Path) -> dict[str, Any] | None:
    """A resume state (``last.pt``) or checkpoint as data, or None with a warning when it
    cannot be read."""
    from inn.io import torch_load_data, torch_load_problem

    try:
        saved = torch_load_data(path, "listed from its history alone")
    except InnError as exc:  # it would run code to load: never loaded, said as it is
        log.warning("%s", exc)
        return None
    except Exception as exc:  # noqa: BLE001 - any unreadable state is reported, not fatal for the list
        log.warning("%s cannot be read (%s): listed from its history alone", path, torch_load_problem(path, exc))
        return None
    return saved if isinstance(saved, dict) else None


def _metrics(path: Path) -> dict[str, Any] | None:
    import json

    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        log.warning("%s cannot be read (%s): the run is listed as not evaluated", path, exc)
        return None


#: what ``--keep-states`` writes in place of a state too large to carry (``--max-state-mb``)
ELSEWHERE = "state_elsewhere.json"


def _elsewhere(folder: Path) -> dict[str, Any] | None:
    """The record of a kept run whose state stayed on its machine, or None."""
    import json

    path = folder / ELSEWHERE
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        log.warning("%s cannot be read (%s): the run is listed without it", path, exc)
        return None
    return record if isinstance(record, dict) else None


def _run_row(results: Path, folder: Path) -> dict[str, Any]:
    """One run's row from its training folder and, where it exists, its evaluation."""
    task, dataset, model, seed = folder.relative_to(results / "train").parts
    last = folder / "last.pt"
    state = _read_state(last) if last.is_file() else None
    elsewhere = _elsewhere(folder) if state is None else None
    history = pd.DataFrame((state or {}).get("train_state", {}).get("history") or [])
    if (folder / "history.tsv").is_file():
        written = read_tsv(folder / "history.tsv")
        if len(written) > len(history):
            history = written
    if len(history) and "device" not in history and (devices := _devices_from_logs(folder)):
        history["device"] = [devices.get(int(epoch)) for epoch in history["epoch"]]
    metrics_path = results / "eval" / task / dataset / model / seed / "metrics.json"
    metrics = _metrics(metrics_path) if metrics_path.is_file() else None
    if metrics is not None:
        status = EVALUATED
    elif (folder / "checkpoint.pt").is_file():
        status = FINISHED
    elif state is not None:
        status = UNFINISHED
    else:
        status = STOPPED
    metric = "dev_accuracy" if "dev_accuracy" in history else "dev_error"
    best = (history[metric].max() if metric == "dev_accuracy" else history[metric].min()) if len(history) else None
    best_epoch = int(history.loc[history[metric] == best, "epoch"].iloc[0]) if best is not None else None
    commits = sorted(set(history["commit"].dropna().astype(str))) if "commit" in history else []
    if state is not None and (state.get("meta") or {}).get("commit") and not commits:
        commits = [state["meta"]["commit"]]
    if status == FINISHED and state is None:
        state = _read_state(folder / "checkpoint.pt")  # its settings say what the run's limits were
    training = (
        (metrics or {}).get("training")
        or ((state or {}).get("settings") or {}).get("training")
        or (elsewhere or {}).get("training")
        or {}
    )
    ended_by = _ended_by(status, history, best_epoch, training)
    if status == UNFINISHED and (within := (state or {}).get("train_state", {}).get("within")):
        ended_by += f"; {within['batches']} batches of epoch {within['epoch']} saved"
    if status == STOPPED and elsewhere is not None:
        where = f"its state on {elsewhere.get('host', '?')}: {elsewhere.get('path', '?')}"
        ended_by = ended_by.replace("no resume state", where)
    return {
        "task": task,
        "dataset": dataset,
        "model": model,
        "seed": int(seed.removeprefix("seed")),
        "status": status,
        "epochs": int(history["epoch"].max()) if len(history) else 0,
        "max_epochs": training.get("max_epochs"),
        "best_epoch": (metrics or {}).get("best_epoch", best_epoch),
        "best_dev": None if best is None else round(float(best), 6),
        "ended_by": ended_by,
        "test": None if metrics is None else round(float(metrics[metrics["metric"]]), 4),
        "hours": round(float(history["seconds"].sum()) / 3600, 2) if len(history) else 0.0,
        "epochs_by_device": _stretches(history),
        "commits": ", ".join(commits) or UNRECORDED,
        "folder": str(folder),
    }


def _ended_by(status: str, history: pd.DataFrame, best_epoch: int | None, training: dict[str, Any]) -> str:
    """What ended a finished run (``patience`` or ``cap``, the epoch limit), or how far an
    unfinished one is from patience's end (``running, 2 of 5 epochs without a better dev``)."""
    epochs = int(history["epoch"].max()) if len(history) else 0
    patience, cap = training.get("patience"), training.get("max_epochs")
    if status in (FINISHED, EVALUATED):
        return "cap" if cap is not None and epochs >= cap else "patience"
    if best_epoch is None or patience is None:
        return "running" if status == UNFINISHED else "stopped (no resume state)"
    still = f"{epochs - best_epoch} of {patience} epochs without a better dev"
    return f"running, {still}" if status == UNFINISHED else f"stopped (no resume state), {still}"


def list_runs(folders: list[str | os.PathLike]) -> pd.DataFrame:
    """Every training run below the results ``folders``, one row each (see the module's doc).

    Raises:
        InnError: a folder that does not exist or holds no ``train/`` runs.
    """
    rows: dict[tuple, dict[str, Any]] = {}
    order = {STOPPED: 0, UNFINISHED: 1, FINISHED: 2, EVALUATED: 3}
    for given in folders:
        results = Path(given)
        if not results.is_dir():
            raise InnError(f"{results}: no such folder; give a results folder (it holds train/<task>/...)")
        runs = sorted(p.parent for p in (results / "train").glob("*/*/*/seed*/history.tsv"))
        runs += sorted(
            p.parent
            for p in (results / "train").glob("*/*/*/seed*/last.pt")
            if not (p.parent / "history.tsv").is_file()
        )
        if not runs:
            raise InnError(
                f"{results}: no training runs in it (expected train/<task>/<dataset>/<model>/seed<N>/ "
                "with a history.tsv or last.pt)"
            )
        for folder in runs:
            row = _run_row(results, folder)
            key = (row["task"], row["dataset"], row["model"], row["seed"])
            if key not in rows or (order[row["status"]], row["epochs"]) > (
                order[rows[key]["status"]],
                rows[key]["epochs"],
            ):
                rows[key] = row
    return pd.DataFrame([rows[k] for k in sorted(rows)])


#: what a resume state keeps when it moves between machines: everything but the warm starts
#: (the solves' starting points, 411 MB for the paper's walks; a resumed run's first epoch
#: starts its solves from zero instead, which changes where they begin, not where they end)
WARM_KEYS = ("warm_starts", "warm_adjoints")


def _keep_log(results: Path, run: Path, target: Path) -> None:
    """Copy the workflow's training log of ``run`` (``logs/train_model/...`` beside the results
    folder; each resume rewrites it) into ``target/logs/``, named by the time its stretch began,
    so that the logs of every stretch of a run add up in the kept folder."""
    import shutil

    task, dataset, model, seed = run.relative_to(results / "train").parts
    source = results.parent / "logs" / "train_model" / task / dataset / model / f"{seed}.log"
    if not source.is_file():
        return
    first = _first_line(source)
    if any(_first_line(own) == first for own in (run / "logs").glob("*.log")):
        return  # the run logged this stretch itself (inn.experiment.train.loop.stretch_log)
    began = "".join(ch for ch in first[:19] if ch.isdigit()) or "unknown"
    (target / "logs").mkdir(exist_ok=True)
    shutil.copyfile(source, target / "logs" / f"train_{began}.log")


def _first_line(path: Path) -> str:
    with path.open(encoding="utf-8", errors="replace") as handle:
        return handle.readline()


def save_states(
    folders: list[str | os.PathLike], dest: str | os.PathLike, max_state_mb: float | None = None
) -> list[Path]:
    """Copy every unfinished run's resume state below the results ``folders`` into ``dest``,
    in the same ``train/<task>/<dataset>/<model>/seed<N>/`` layout, so that a folder kept in
    git carries the runs to the next machine: ``last.pt`` without its warm starts, ``best.pt``,
    ``history.tsv`` (written from the state's own history, so the two always agree) and the
    training logs: every stretch's in the run's ``logs/`` (``inn train`` writes them), and the
    workflow's log of the last stretch where the run did not log it itself (older code). A run
    is resumed there by copying its folder back into a results folder and running the same
    command (``inn train`` resumes from ``last.pt``).

    ``max_state_mb``: a run whose state without warm starts (``last.pt`` and ``best.pt``) is
    larger keeps only its history and logs there, and :data:`ELSEWHERE`, which names this
    machine, the state's path and the run's training settings: ``inn runs`` then lists it as
    stopped, its state on that machine (a new machine starts it again).

    Returns:
        The run folders written.
    """
    import shutil
    import socket

    from inn.io import torch_save, write_json

    written = []
    for given in folders:
        results = Path(given)
        for last in sorted((results / "train").glob("*/*/*/seed*/last.pt")):
            state = _read_state(last)
            if state is None:
                raise InnError(f"{last} cannot be read as a resume state; nothing of it is kept in {dest}")
            target = Path(dest) / last.parent.relative_to(results)
            target.mkdir(parents=True, exist_ok=True)
            kept = {k: v for k, v in state.items() if k not in WARM_KEYS}
            size = _state_mb(kept, last.parent / "best.pt")
            if max_state_mb is not None and size > max_state_mb:
                for stale in ("last.pt", "best.pt"):  # an earlier, smaller keep of the same run
                    (target / stale).unlink(missing_ok=True)
                record = {
                    "host": socket.gethostname(),
                    "path": str(last.resolve()),
                    "epoch": state["train_state"]["epoch"],
                    "training": (state.get("settings") or {}).get("training") or {},
                }
                write_json(target / ELSEWHERE, record)
                log.warning(
                    "%s: its state (%.0f MB) is over --max-state-mb %g; only its history and logs are kept in %s",
                    last,
                    size,
                    max_state_mb,
                    target,
                )
            else:
                (target / ELSEWHERE).unlink(missing_ok=True)
                torch_save(kept, target / "last.pt")
            if (target / "last.pt").is_file() and (last.parent / "best.pt").is_file():
                best = _read_state(last.parent / "best.pt")
                if best is None:
                    raise InnError(
                        f"{last.parent / 'best.pt'} cannot be read as a state; nothing of it is kept in {dest}"
                    )
                torch_save(best, target / "best.pt")
            # the history of the state kept, not the file beside it: a workflow job that resumes
            # removes its outputs (history.tsv among them) until its first epoch writes them again
            write_tsv(target / "history.tsv", pd.DataFrame(state["train_state"]["history"]))
            for stretch in sorted((last.parent / "logs").glob("*.log")):  # logs of earlier stretches
                (target / "logs").mkdir(exist_ok=True)
                shutil.copyfile(stretch, target / "logs" / stretch.name)
            _keep_log(results, last.parent, target)
            written.append(target)
            log.info("kept %s (epoch %d) in %s", last, state["train_state"]["epoch"], target)
    return written


def _state_mb(state: dict[str, Any], best: Path) -> float:
    """Megabytes of a kept state (its tensors) and of ``best.pt`` beside it."""
    import torch

    tensors = (v for v in _leaves(state) if isinstance(v, torch.Tensor))
    size = sum(t.numel() * t.element_size() for t in tensors)
    return (size + (best.stat().st_size if best.is_file() else 0)) / 1e6


def _leaves(value: Any):
    """Every leaf of nested dicts, lists and tuples."""
    if isinstance(value, dict):
        for item in value.values():
            yield from _leaves(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _leaves(item)
    else:
        yield value


def main(argv: list[str]) -> None:
    """``inn runs``: list every run below results folders, with its state, epochs and provenance."""
    parser = argparse.ArgumentParser(prog="inn runs", description=list_runs.__doc__)
    parser.add_argument("results", nargs="+", help="results folders (the workflow's results/, or an archive of runs)")
    parser.add_argument("--out", help="write the table as TSV here (default: print it as Markdown)")
    parser.add_argument(
        "--keep-states",
        metavar="DEST",
        help="also copy every unfinished run's resume state (without warm starts), best.pt, history "
        "and logs into DEST, to carry the runs to another machine (see save_states)",
    )
    parser.add_argument(
        "--max-state-mb",
        type=float,
        metavar="MB",
        help="with --keep-states: a run whose state is larger keeps only its history, logs and where "
        "its state is (this machine and path)",
    )
    args = parser.parse_args(argv)
    if args.max_state_mb is not None and not args.keep_states:
        raise InnError("--max-state-mb goes with --keep-states DEST")
    if args.keep_states:
        save_states(args.results, args.keep_states, args.max_state_mb)
    table = list_runs(args.results)
    if args.out:
        write_tsv(args.out, table)
        return
    shown = table.drop(columns=["folder"]).astype(object).where(table.drop(columns=["folder"]).notna(), "")
    lines = ["| " + " | ".join(shown.columns) + " |", "|" + " --- |" * len(shown.columns)]
    lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in shown.itertuples(index=False)]
    sys.stdout.write("\n".join(lines) + "\n")
