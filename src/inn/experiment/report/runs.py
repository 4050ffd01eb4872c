"""The runs' files, found and read: which run a file belongs to (by its path), every finished
run's files in workflow ``results`` folders, and the runs' metrics, dev scores, predictions,
histories and the walks' floors as tables, each file checked to be what it claims (a run's
metrics are those of its folder, of the whole test split, and agree with its predictions).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from inn.errors import InnError
from inn.experiment.report.checks import check_seeds_alike
from inn.experiment.run_checks import check_predictions, read_metrics
from inn.models import paper_task, task_spec
from inn.tables import read_tsv

log = logging.getLogger(__name__)

RUN_PATH = re.compile(r"(?P<task>pos|walks)/(?P<dataset>[^/]+)/(?P<model>[^/]+)/seed(?P<seed>\d+)(?:/[^/]+|[._][^/]*)$")
SIZED = re.compile(r"^(?P<base>[a-z][a-z0-9_]*)-h(?P<size>\d+)$")
FLOOR_PATH = re.compile(r"walks/(?P<dataset>b[^/]+)/floor(?:_predictions)?\.tsv(?:\.gz)?$")


def run_key(path: str | Path) -> dict:
    """(task, dataset, model, seed) of a run from its file's path."""
    match = RUN_PATH.search(Path(path).as_posix())
    if not match:
        raise InnError(
            f"{path}: not a run file (expected .../<task>/<dataset>/<model>/seed<N>/<file> or .../seed<N>.<ext>)"
        )
    key = match.groupdict()
    key["seed"] = int(key["seed"])
    return key


def run_label(key) -> str:
    """``walks b0.5 inn seed 1``: a run as messages name it."""
    return " ".join(
        str(key[name]) if name != "seed" else f"seed {key[name]}"
        for name in ("task", "dataset", "model", "seed")
        if name in key
    )


def _ended_by(metrics: dict) -> str | None:
    """What ended a neural run's training: ``patience`` (that many epochs without a better dev
    score) or ``cap`` (``max_epochs`` reached first); None where the metrics do not say."""
    training = metrics.get("training") or {}
    epochs, best, patience = metrics.get("epochs"), metrics.get("best_epoch"), training.get("patience")
    if None in (epochs, best, patience) or "max_epochs" not in training:
        return None
    return "patience" if epochs - best >= patience else "cap"


def _best_dev(history: pd.DataFrame, task: str) -> float:
    spec = task_spec(task)
    if spec.dev_column not in history or history[spec.dev_column].isna().all():
        return float("nan")
    return spec.best(history[spec.dev_column])


def load_runs(
    metrics: Iterable[str | Path], histories: Iterable[str | Path] = (), predictions: Iterable[str | Path] = ()
) -> pd.DataFrame:
    """One row per run: its key, test metrics, sizes and timings, its best dev score, and where
    its test predictions are (for the paired comparisons)."""
    rows, seen, recorded_metrics = [], {}, {}
    for path in metrics:
        key = run_key(path)
        run = tuple(key.values())
        if run in seen:
            raise InnError(
                f"{path}: the same run as {seen[run]} ({key['task']} {key['dataset']} {key['model']} "
                f"seed {key['seed']}); give each run once, or its seeds would count twice"
            )
        seen[run] = path
        recorded_metrics[run] = data = read_metrics(path)
        rows.append(_run_row(path, key, data))
    runs = pd.DataFrame(rows)
    if runs.empty:
        return runs
    dev = {_run(path): _best_dev(pd.read_csv(path, sep="\t"), run_key(path)["task"]) for path in histories}
    runs["best_dev"] = [dev.get((r.task, r.dataset, r.model, r.seed), np.nan) for r in runs.itertuples()]
    paths = {_run(path): str(path) for path in predictions}
    runs["predictions_path"] = [paths.get((r.task, r.dataset, r.model, r.seed)) for r in runs.itertuples()]
    _check_run_predictions(runs, seen, recorded_metrics)
    check_seeds_alike(runs)
    return runs.sort_values(["task", "dataset", "model", "seed"], ignore_index=True)


def _run(path: str | Path) -> tuple:
    """(task, dataset, model, seed) of the run a file belongs to."""
    key = run_key(path)
    return key["task"], key["dataset"], key["model"], key["seed"]


def _run_row(path: str | Path, key: dict, data: dict) -> dict:
    """A run's row of the runs table from its ``metrics.json`` (``data``), once the metrics are
    checked to be those of the run its folder names, on the whole test split."""
    recorded = {name: data[name] for name in key if name in data}
    if recorded != {name: key[name] for name in recorded}:
        raise InnError(
            f"{path}: its folder says {run_label(key)} but the file says {run_label(recorded)} "
            "(a run copied into another's folder?); put it back, or evaluate it again"
        )
    if data.get("split", "test") != "test" or data.get("max_sequences"):
        raise InnError(
            f"{path}: scores the {data.get('split')} split"
            f"{' (first ' + str(data['max_sequences']) + ' sequences)' if data.get('max_sequences') else ''}"
            ", not the whole test split; the tables need test scores (inn evaluate without --split "
            "or --max-sequences)"
        )
    row = {**key, **{k: v for k, v in data.items() if not isinstance(v, (dict, list)) and k not in key}}
    sized = SIZED.match(key["model"])
    row["base_model"] = sized["base"] if sized else key["model"]
    row["size"] = int(sized["size"]) if sized else data.get("hidden_size")
    row["ended_by"] = _ended_by(data)
    return row


def _check_run_predictions(runs: pd.DataFrame, seen: dict, recorded_metrics: dict) -> None:
    """Every run has its test predictions, and its metrics (``recorded_metrics``, by run; their
    files ``seen``) say what the predictions say (:func:`inn.experiment.run_checks.check_predictions`)."""
    missing = runs[runs.predictions_path.isna()]
    if len(missing):
        raise InnError(
            f"no predictions.tsv for {len(missing)} of {len(runs)} runs (first: "
            f"{run_label(missing.iloc[0])}); every comparison needs each run's test predictions: give "
            "them all (--predictions, or --results)"
        )
    keys = ["task", "dataset", "model", "seed"]
    older = [
        seen[run]
        for run, path in zip(runs[keys].itertuples(index=False, name=None), runs.predictions_path)
        if not check_predictions(run_label(dict(zip(keys, run))), recorded_metrics[run], path)
    ]
    if older:
        log.warning(
            "%d of %d runs' metrics.json were written before metrics named the digest of their predictions "
            "(first: %s): checked against their predictions by their metric alone",
            len(older),
            len(runs),
            older[0],
        )


def load_floors(floors: Iterable[str | Path], predictions: Iterable[str | Path] = ()) -> dict:
    """Per walk data set: the floor's row (``floor.tsv``) and its predictions table, if given."""
    found: dict[str, list] = {}
    for path in floors:
        match = FLOOR_PATH.search(Path(path).as_posix())
        if not match:
            raise InnError(f"{path}: not a floor file (expected .../walks/b<b>/floor.tsv)")
        row = read_tsv(path).iloc[0].to_dict()
        if match["dataset"] in found and found[match["dataset"]][0] != row:
            raise InnError(
                f"{path}: another floor of {match['dataset']} than the first one given (other walks); "
                "collect the runs of each walk set separately"
            )
        found[match["dataset"]] = [row, None]
    for path in predictions:
        match = FLOOR_PATH.search(Path(path).as_posix())
        if not match or match["dataset"] not in found:
            raise InnError(f"{path}: floor predictions without their floor.tsv")
        table = read_tsv(path)
        if found[match["dataset"]][1] is not None and not found[match["dataset"]][1].equals(table):
            raise InnError(
                f"{path}: other floor predictions of {match['dataset']} than the first ones given "
                "(other walks); collect the runs of each walk set separately"
            )
        found[match["dataset"]][1] = table
    return {dataset: tuple(value) for dataset, value in found.items()}


def _plain_or_gzipped(path: Path) -> Path:
    """``path``, or its gzip-compressed copy ``path.gz`` where only that exists (archived runs
    keep their large predictions compressed; pandas reads either)."""
    gzipped = path.with_name(path.name + ".gz")
    return gzipped if not path.is_file() and gzipped.is_file() else path


def find_run_files(results: Iterable[str | Path]) -> dict[str, list[str]]:
    """Every finished run's files in workflow ``results`` folders (one or several, such as
    parts of a run made on different machines): ``metrics``, ``histories``, ``predictions``,
    ``floors``, ``floor_predictions`` and the POS ``corpora`` found, for :func:`main`."""
    found: dict[str, list[str]] = {
        name: [] for name in ("metrics", "histories", "predictions", "floors", "floor_predictions")
    }
    corpora = set()
    for folder in map(Path, results):
        if not folder.is_dir():
            raise InnError(f"{folder}: no such folder; give the workflow's results folder (it holds eval/ and train/)")
        for metrics in sorted(folder.glob("eval/*/*/*/seed*/metrics.json")):
            predictions = _plain_or_gzipped(metrics.with_name("predictions.tsv"))
            if not predictions.is_file():
                raise InnError(f"{metrics}: its predictions.tsv is missing; evaluate the run again")
            history = folder / "train" / metrics.parent.relative_to(folder / "eval") / "history.tsv"
            if not history.is_file():
                raise InnError(
                    f"{metrics}: its run's {history} is missing (the dev scores that pick the b-LSTM "
                    "size, and the runs table, come from it)"
                )
            found["metrics"].append(str(metrics))
            found["predictions"].append(str(predictions))
            found["histories"].append(str(history))
            if run_key(metrics)["task"] == paper_task(2):
                corpora.add(run_key(metrics)["dataset"])
        for floor in sorted(folder.glob("data/walks/*/floor.tsv")):
            found["floors"].append(str(floor))
            predictions = _plain_or_gzipped(floor.with_name("floor_predictions.tsv"))
            if predictions.is_file():
                found["floor_predictions"].append(str(predictions))
    if not found["metrics"]:
        raise InnError(
            f"no finished runs (eval/<task>/<dataset>/<model>/seed<N>/metrics.json) under "
            f"{', '.join(map(str, results))}"
        )
    return {**found, "corpora": sorted(corpora)}


def load_histories(paths: Iterable[str | Path]) -> pd.DataFrame:
    """All runs' per-epoch rows, keyed by task, dataset, model and seed."""
    frames = []
    for path in paths:
        frame = pd.read_csv(path, sep="\t")
        for key, value in run_key(path).items():
            frame[key] = value
        frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
