"""Collect every run's metrics into the paper's tables (TSV), with the paper's numbers beside.

Inputs are the workflow's per-run files, found by their paths
(``results/eval/{task}/{dataset}/{model}/seed{seed}/{metrics.json,predictions.tsv}`` and
``results/train/{task}/{dataset}/{model}/seed{seed}/history.tsv``), and for the walks the
Bayes-optimal floor of each test set (``results/data/walks/b{b}/floor{,_predictions}.tsv``).
Outputs:

- ``table1.tsv``: per b, the floor, then for every implicit model of the registry (the INN, the
  implicit LSTM, any registered by a module of one's own: :func:`inn.models.implicit_models`)
  and the swept baseline, the b-LSTM (the size with the lowest dev error): mean error over
  seeds, its standard deviation, the per-seed errors, its parameter count, the excess over the
  floor with its seed-aware 95% interval; how many runs patience ended and how many the epoch
  cap; and the paper's two columns. The INN and the b-LSTM are found by their roles in the
  registry (:func:`inn.models.model_with_role`), and their columns are named by their names;
- ``table2.tsv``: corpus, model, accuracy (mean, sd, per seed), unseen-word accuracy, and the
  paper's WSJ figure, with the reported Stanford tagger and reference figures as rows that say
  they were not run;
- ``comparisons.tsv``: every paired comparison (each implicit model against each baseline, and on
  the walks every model against the floor): the pooled difference with its seed-aware interval
  (test set and seeds) and its test-set-only interval (:mod:`inn.experiment.report.stats`);
- ``verdict.tsv``: each of the paper's claims that the runs test, with its verdict;
- ``runs.tsv``: one row per run (every seed), for users who want more than the means.
"""

from __future__ import annotations

import argparse
import logging
import re
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from inn.errors import InnError
from inn.experiment.report import paper
from inn.experiment.report.stats import UnitScores, paired_bootstrap, unit_scores
from inn.experiment.run_checks import check_predictions, read_metrics
from inn.io import check_out_dir, refuse_inputs_as_outputs
from inn.models import MODELS, base_name, implicit_models, model_with_role, paper_baselines, paper_task, task_spec
from inn.tables import read_tsv, write_tsv

log = logging.getLogger(__name__)

RUN_PATH = re.compile(r"(?P<task>pos|walks)/(?P<dataset>[^/]+)/(?P<model>[^/]+)/seed(?P<seed>\d+)(?:/[^/]+|[._][^/]*)$")
SIZED = re.compile(r"^(?P<base>[a-z][a-z0-9_]*)-h(?P<size>\d+)$")
FLOOR_PATH = re.compile(r"walks/(?P<dataset>b[^/]+)/floor(?:_predictions)?\.tsv(?:\.gz)?$")
#: Seeds of the paired bootstrap's resampling (fixed: the intervals are reproducible).
BOOTSTRAP_SEED = 2017


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
        data = read_metrics(path)
        recorded_metrics[run] = data
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
        rows.append(row)
    runs = pd.DataFrame(rows)
    if runs.empty:
        return runs
    dev = {}
    for path in histories:
        key = run_key(path)
        dev[(key["task"], key["dataset"], key["model"], key["seed"])] = _best_dev(
            pd.read_csv(path, sep="\t"), key["task"]
        )
    runs["best_dev"] = [dev.get((r.task, r.dataset, r.model, r.seed), np.nan) for r in runs.itertuples()]
    paths = {}
    for path in predictions:
        key = run_key(path)
        paths[(key["task"], key["dataset"], key["model"], key["seed"])] = str(path)
    runs["predictions_path"] = [paths.get((r.task, r.dataset, r.model, r.seed)) for r in runs.itertuples()]
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
    _check_seeds_alike(runs)
    return runs.sort_values(["task", "dataset", "model", "seed"], ignore_index=True)


def _check_seeds_alike(runs: pd.DataFrame) -> None:
    """The seeds of one model on one data set are pooled, and the models of one data set are
    compared: the seeds must be runs of one setup (one scale, one size), and every run of a data
    set must have learnt from the same data (walks of another ``dim`` or ``direction`` carry the
    same labels, so only the data's fingerprint tells them apart). Otherwise a table would
    average or compare unlike runs without a word. (Not the parameter count: the perceptron's
    grows with what its seed's passes saw.) A field an older run did not record is not compared."""
    swept = model_with_role("swept")
    for (task, dataset, base), group in runs.groupby(["task", "dataset", "base_model"]):
        names = sorted(group.model.unique())
        if len(names) > 1 and not (task == paper_task(1) and base == swept):  # only Table 1's b-LSTM is swept
            raise InnError(
                f"{task} {dataset}: runs of {', '.join(names)} would share the {base} row; only the "
                "walks' b-LSTM is a sweep of sizes: collect each size of the others separately"
            )
        for size, named in group.groupby("size"):
            if named.model.nunique() > 1:
                raise InnError(
                    f"{task} {dataset}: {', '.join(sorted(named.model.unique()))} are one size "
                    f"({size:g} units) under two names, so their seeds would be pooled twice over; "
                    "collect the runs of one name"
                )
    for (task, dataset, model), group in runs.groupby(["task", "dataset", "model"]):
        for column, what in (("scale", "scales"), ("size", "sizes"), ("data_fingerprint", "data (fingerprints)")):
            values = group[column].dropna().unique() if column in group else []
            if len(values) > 1:
                seeds = ", ".join(f"seed {r.seed}: {getattr(r, column)}" for r in group.itertuples())
                raise InnError(
                    f"{task} {dataset} {model}: its seeds come from different {what} ({seeds}); "
                    "collect the runs of each setup separately"
                )
    if "data_fingerprint" in runs:
        for (task, dataset), group in runs.dropna(subset=["data_fingerprint"]).groupby(["task", "dataset"]):
            if group.data_fingerprint.nunique() > 1:
                models = ", ".join(f"{m}: {f}" for m, f in group.groupby("model").data_fingerprint.first().items())
                raise InnError(
                    f"{task} {dataset}: its runs learnt from different data ({models}), so their "
                    "comparisons would pair unlike test sets; collect the runs of each data set separately"
                )


def _check_floors(runs: pd.DataFrame, floors: dict[str, tuple[dict, pd.DataFrame | None]]) -> None:
    """A walk set's floor must be that of the walks its runs learnt from (where both say which:
    floors written before ``data_fingerprint`` was recorded are not checked)."""
    if "data_fingerprint" not in runs:
        return
    walks = runs[runs.task == paper_task(1)].dropna(subset=["data_fingerprint"])
    for dataset, group in walks.groupby("dataset"):
        floor = (floors.get(dataset) or ({}, None))[0].get("data_fingerprint")
        if isinstance(floor, str) and floor not in set(group.data_fingerprint):
            raise InnError(
                f"walks {dataset}: its floor was computed on other walks (data {floor}) than its runs "
                f"learnt from ({group.data_fingerprint.iloc[0]}); compute the floor of the runs' walk "
                "set (inn walk-floor), or collect the runs of each walk set separately"
            )


def _seed_summary(values: pd.Series, digits: int) -> dict:
    """Mean, sample standard deviation (NaN for one seed), seed count and the values themselves."""
    values = values.dropna()
    return {
        "mean": float(values.mean()) if len(values) else float("nan"),
        "std": float(values.std(ddof=1)) if len(values) > 1 else float("nan"),
        "seeds": len(values),
        "values": ",".join(f"{v:.{digits}f}" for v in values),
    }


def _parameters(runs: pd.DataFrame) -> float:
    """The trainable parameter count of a model's runs (one size, so one count)."""
    counts = runs["parameters"].dropna().unique() if "parameters" in runs else []
    return float(counts[0]) if len(counts) else np.nan


def _size_label(size: float, parameters: float) -> str:
    """``128 units (143,617 parameters)``: a b-LSTM size of the sweep, as the tables name it."""
    count = "parameters unknown" if np.isnan(parameters) else f"{int(parameters):,} parameters"
    return f"{int(size)} units ({count})"


def best_bilstm(group: pd.DataFrame) -> tuple[float, pd.DataFrame]:
    """The size of the swept baseline (the b-LSTM) with the lowest mean dev error (the paper's
    best of its sweep), and its runs. Sizes are compared on the seeds every size has (a size
    given more seeds, as the chosen one is, would otherwise be judged on other draws); without a
    common seed, on each size's own."""
    bilstm = group[group.base_model == model_with_role("swept")]
    if bilstm.empty:
        return np.nan, bilstm
    undecided = bilstm[bilstm.best_dev.isna()] if "best_dev" in bilstm else bilstm
    if len(undecided):
        raise InnError(
            f"no dev score for {run_label(undecided.iloc[0])} (its history.tsv): the b-LSTM size is "
            "chosen on dev error, never on test; give every run's history (--histories, or --results)"
        )
    common = set.intersection(*(set(runs.seed) for _, runs in bilstm.groupby("size")))
    compared = bilstm[bilstm.seed.isin(common)] if common else bilstm
    size = int(compared.groupby("size").best_dev.mean().idxmin())
    return size, bilstm[bilstm["size"] == size]


def matched_bilstm(group: pd.DataFrame) -> float:
    """The b-LSTM size of the sweep whose parameter count lies nearest the INN's (by ratio:
    the INN k = 200's 211,201 lie 2.4x above the 100-unit b-LSTM's 89,801 and 3.5x below the
    300-unit one's 749,401), the second baseline of Table 1's claim: a comparison at equal
    capacity beside the one against the size best on dev. NaN without INN runs or sizes. (The
    INN and the b-LSTM: the registry's claimed model and swept baseline.)"""
    inn = _parameters(group[group.base_model == model_with_role("claimed")])
    sweep = group[group.base_model == model_with_role("swept")]
    sizes = {size: _parameters(sweep[sweep["size"] == size]) for size in sweep["size"].dropna().unique()}
    sizes = {size: count for size, count in sizes.items() if not np.isnan(count)}
    if np.isnan(inn) or not sizes:
        return np.nan
    return float(min(sizes, key=lambda size: abs(np.log(sizes[size] / inn))))


def _predictions(runs: pd.DataFrame) -> list[pd.DataFrame]:
    paths = runs.get("predictions_path", pd.Series(dtype=object)).dropna()
    return [read_tsv(p) for p in paths] if len(paths) == len(runs) and len(runs) else []


def _compare(
    rows: list,
    task: str,
    dataset: str,
    model: str,
    baseline: str,
    a: UnitScores,
    b: UnitScores,
    scale: float,
    scale_label: str | None = None,
) -> dict:
    """One row of ``comparisons.tsv``: the difference with its seed-aware interval (``low``,
    ``high``: test set and seeds; the test set only where a side has one seed, as ``interval``
    says), which decides ``distinguishable``, and the test-set-only interval beside it."""
    result = paired_bootstrap(a, b, seed=BOOTSTRAP_SEED)
    row = {
        "task": task,
        "dataset": dataset,
        "scale": scale_label,
        "model": model,
        "baseline": baseline,
        "metric": task_spec(task).metric,
        "model_value": a.rate * scale,
        "baseline_value": b.rate * scale,
        "difference": result["difference"] * scale,
        "low": result["low"] * scale,
        "high": result["high"] * scale,
        "p_value": result["p_value"],
        "interval": "seeds and test set" if result["seed_aware"] else "test set only (one seed)",
        "test_low": result["test_low"] * scale,
        "test_high": result["test_high"] * scale,
        "test_p_value": result["test_p_value"],
        "units": result["units"],
        "model_seeds": a.seeds,
        "baseline_seeds": 0 if b.fixed else b.seeds,
        "distinguishable": bool(result["low"] > 0 or result["high"] < 0),
    }
    rows.append(row)
    return row


def _scale(runs: pd.DataFrame) -> str | None:
    """The scale label(s) of some runs (``paper``, ``comparison``...), as their metrics name it."""
    labels = sorted(runs["scale"].dropna().astype(str).unique()) if "scale" in runs else []
    return ",".join(labels) or None


def table1(
    runs: pd.DataFrame,
    floors: dict[str, tuple[dict, pd.DataFrame | None]] | None = None,
    comparisons: list | None = None,
) -> pd.DataFrame:
    """Paper Table 1: per-step error on the walks, beside the task's floor, with seeds and intervals.

    Args:
        runs: :func:`load_runs`' table (with ``predictions_path`` for paired intervals).
        floors: per data set (``b0.5``): the floor's row and its predictions (or None).
        comparisons: a list that receives the walks' rows of ``comparisons.tsv``.
    """
    floors = floors or {}
    comparisons = comparisons if comparisons is not None else []
    implicit = implicit_models()  # a column group each (the registry's: the INN, the implicit LSTM, one's own)
    claimed, swept = model_with_role("claimed"), model_with_role("swept")  # the INN, the b-LSTM
    walks = runs[runs.task == paper_task(1)] if not runs.empty else runs
    datasets = list(dict.fromkeys([*(walks.dataset if not walks.empty else []), *floors]))
    rows = []
    for dataset in datasets:
        group = walks[walks.dataset == dataset] if not walks.empty else walks
        b = float(dataset.removeprefix("b"))
        floor_row, floor_predictions = floors.get(dataset, ({}, None))
        floor_scores = (
            unit_scores([floor_predictions], "sequence", "wrong", fixed=True) if floor_predictions is not None else None
        )
        scale = _scale(group) if not group.empty else None
        best_size, bilstm = best_bilstm(group) if not group.empty else (np.nan, group)
        theirs = paper.TABLE1.get(b, {})
        row = {
            "b": b,
            "floor": floor_row.get("bayes_error", np.nan),
            "direction": floor_row.get("direction"),
            "dim": floor_row.get("dim"),
        }
        scored = {}
        for name in (*implicit, swept):
            model_runs = bilstm if name == swept else group[group.base_model == name] if not group.empty else group
            summary = _seed_summary(model_runs.get("error", pd.Series(dtype=float)), 4)
            row.update(
                {
                    f"{name}_error": summary["mean"],
                    f"{name}_error_std": summary["std"],
                    f"{name}_seeds": summary["seeds"],
                    f"{name}_errors": summary["values"],
                    f"{name}_parameters": _parameters(model_runs),
                }
            )
            row[f"{name}_excess"] = summary["mean"] - row["floor"]
            row[f"{name}_excess_low"] = row[f"{name}_excess_high"] = np.nan
            predictions = _predictions(model_runs)
            if predictions:
                scored[name] = unit_scores(predictions, "sequence", "wrong")
                if floor_scores is not None:
                    label = f"{swept}-h{best_size}" if name == swept else name
                    result = _compare(
                        comparisons, paper_task(1), dataset, label, "bayes", scored[name], floor_scores, 1.0, scale
                    )
                    row[f"{name}_excess_low"], row[f"{name}_excess_high"] = result["low"], result["high"]
        row[f"{swept}_best_size"] = best_size
        sweep = group[group.base_model == swept] if not group.empty else group
        row[f"{swept}_best_is_largest"] = bool(len(sweep) and best_size == sweep["size"].max())
        row[f"{swept}_matched_size"] = matched = matched_bilstm(group) if not group.empty else np.nan
        row[f"{swept}_sizes"] = (
            "; ".join(
                _size_label(size, _parameters(sweep[sweep["size"] == size]))
                for size in sorted(sweep["size"].dropna().unique())
            )
            if not sweep.empty
            else ""
        )
        ended = group["ended_by"].value_counts() if "ended_by" in group else pd.Series(dtype=int)
        row["ended_by_patience"], row["ended_by_cap"] = int(ended.get("patience", 0)), int(ended.get("cap", 0))
        for name in implicit:
            if name in scored and swept in scored:
                _compare(
                    comparisons,
                    paper_task(1),
                    dataset,
                    name,
                    f"{swept}-h{best_size}",
                    scored[name],
                    scored[swept],
                    1.0,
                    scale,
                )
        matched_predictions = _predictions(sweep[sweep["size"] == matched]) if matched != best_size else []
        if claimed in scored and matched_predictions:
            _compare(
                comparisons,
                paper_task(1),
                dataset,
                claimed,
                f"{swept}-h{int(matched)}",
                scored[claimed],
                unit_scores(matched_predictions, "sequence", "wrong"),
                1.0,
                scale,
            )
        # the paper's Table 1 is keyed by its models' names, which are the registry's
        row.update(
            {f"paper_{claimed}_error": theirs.get(claimed, np.nan), f"paper_{swept}_error": theirs.get(swept, np.nan)}
        )
        rows.append(row)
    columns = ["b", "floor", "direction", "dim"]
    for name in (*implicit, swept):
        columns += [
            f"{name}_error",
            f"{name}_error_std",
            f"{name}_seeds",
            f"{name}_errors",
            f"{name}_parameters",
            f"{name}_excess",
            f"{name}_excess_low",
            f"{name}_excess_high",
        ]
    columns += [
        f"{swept}_best_size",
        f"{swept}_best_is_largest",
        f"{swept}_matched_size",
        f"{swept}_sizes",
        "ended_by_patience",
        "ended_by_cap",
        f"paper_{claimed}_error",
        f"paper_{swept}_error",
    ]
    table = pd.DataFrame(rows, columns=columns)
    return table.sort_values("b", ascending=False, ignore_index=True)


def table2(runs: pd.DataFrame, corpora: Iterable[str], comparisons: list | None = None) -> pd.DataFrame:
    """Paper Table 2: token accuracy per corpus and model (over seeds), with the paper's WSJ figures.

    ``comparisons`` receives a row per implicit model and other model of a corpus: the paired
    bootstrap difference in accuracy (points) over the test sentences, pooled over seeds.
    """
    comparisons = comparisons if comparisons is not None else []
    pos = runs[runs.task == paper_task(2)] if not runs.empty else runs
    corpora = list(corpora)
    unlisted = sorted(set(pos.dataset) - set(corpora)) if not pos.empty else []
    if unlisted:
        raise InnError(
            f"tagging runs of {', '.join(unlisted)} but --corpora names "
            f"{', '.join(corpora) or 'none'}: list every corpus to show (in report order)"
        )
    order = list(MODELS)
    implicit = implicit_models()
    rows = []
    for corpus in corpora:
        group = pos[pos.dataset == corpus] if not pos.empty else pos
        models = sorted(
            group.model.unique() if not group.empty else [], key=lambda m: order.index(m) if m in order else len(order)
        )
        scored = {}
        for model in models:
            runs_ = group[group.model == model]
            summary = _seed_summary(runs_["accuracy"], 2)
            unseen = runs_.get("unseen_accuracy", pd.Series(dtype=float)).dropna()
            rows.append(
                {
                    "corpus": corpus,
                    "model": model,
                    "name": MODELS[model].display if model in MODELS else model,
                    "accuracy": summary["mean"],
                    "accuracy_std": summary["std"],
                    "accuracies": summary["values"],
                    "unseen_accuracy": float(unseen.mean()) if len(unseen) else np.nan,
                    "seeds": summary["seeds"],
                    "run": "ours",
                    "paper_wsj_accuracy": paper.TABLE2_WSJ.get(model, np.nan),
                }
            )
            predictions = _predictions(runs_)
            if predictions:
                scored[model] = unit_scores(predictions, "sentence", "correct")
        for model in implicit:
            for baseline in scored:
                # Implicit models against each other once: the implicit LSTM against the INN.
                if (
                    model in scored
                    and baseline != model
                    and not (baseline in implicit and implicit.index(baseline) > implicit.index(model))
                ):
                    _compare(
                        comparisons,
                        paper_task(2),
                        corpus,
                        model,
                        baseline,
                        scored[model],
                        scored[baseline],
                        100.0,
                        _scale(group),
                    )
        column, references = paper.REFERENCES.get(corpus, (None, {}))
        # Only beside runs that score the reference's tag column (runs evaluated before the
        # column was recorded are taken to be of the corpus's default, XPOS).
        if set(group.get("tag_column", pd.Series(dtype=object)).fillna("xpos")) <= {column}:
            for name, value in references.items():
                rows.append(
                    {
                        "corpus": corpus,
                        "model": "reference",
                        "name": name,
                        "accuracy": value,
                        "seeds": 0,
                        "run": "reported, not run",
                    }
                )
    rows.append(
        {
            "corpus": "wsj",
            "model": "stanford",
            "name": "Stanford POS tagger",
            "seeds": 0,
            "run": "reported in the paper, not run",
            "paper_wsj_accuracy": paper.STANFORD_WSJ,
        }
    )
    columns = [
        "corpus",
        "model",
        "name",
        "accuracy",
        "accuracy_std",
        "accuracies",
        "unseen_accuracy",
        "seeds",
        "run",
        "paper_wsj_accuracy",
    ]
    return pd.DataFrame(rows, columns=columns)


COMPARISON_COLUMNS = [
    "task",
    "dataset",
    "scale",
    "model",
    "baseline",
    "metric",
    "model_value",
    "baseline_value",
    "difference",
    "low",
    "high",
    "p_value",
    "interval",
    "test_low",
    "test_high",
    "test_p_value",
    "units",
    "model_seeds",
    "baseline_seeds",
    "distinguishable",
]
VERDICT_COLUMNS = [
    "claim",
    "task",
    "dataset",
    "scale",
    "model",
    "baseline",
    "metric",
    "paper_difference",
    "difference",
    "low",
    "high",
    "interval",
    "model_seeds",
    "baseline_seeds",
    "verdict",
]


def verdicts(
    comparisons: pd.DataFrame, table1: pd.DataFrame | None = None, paper_corpora: Iterable[str] | None = None
) -> pd.DataFrame:
    """The paper's claims tested by our runs, one row per comparison that tests one.

    Claims: the INN's per-step error lies below the b-LSTM's for b <= 1 (Table 1; against the
    size of our sweep best on dev, and, where ``table1`` names another, against the size nearest
    the INN's parameter count), and the INN's accuracy above the BiGRU's and the BiLSTM's
    (Table 2). The INN is the registry's claimed model, the b-LSTM its swept baseline, the BiGRU
    and BiLSTM the paper's bidirectional baselines (:func:`inn.models.paper_baselines`); other
    models' comparisons are in ``comparisons`` and test no claim of the paper. The verdict reads
    the interval that decides ``distinguishable``: *reproduced* where it excludes zero in the
    paper's direction, *not reproduced* where it excludes zero in the other, *inconclusive*
    otherwise; with one seed on either side it is the test-set interval, and the verdict says
    "on one seed". Table 1's claim is also judged as a whole (:func:`_whole_claim`), over the b
    it was tested at. Table 2's claims are tested only on ``paper_corpora``, the paper's data
    and its declared stand-ins (each corpus's ``paper`` key; default: the built-in corpora's,
    :func:`inn.experiment.config_runs.paper_corpora`): another corpus's comparisons carry no verdict.
    """
    if paper_corpora is None:
        paper_corpora = default_paper_corpora()
    claimed, swept = model_with_role("claimed"), model_with_role("swept")
    inn, blstm = MODELS[claimed].display, MODELS[swept].display  # "INN", "b-LSTM"
    best_size = f"{swept}_best_size"
    chosen = (
        {}
        if table1 is None or table1.empty
        else {f"b{r.b}": getattr(r, best_size) for r in table1.itertuples() if best_size in table1}
    )
    rows = []
    for r in comparisons.itertuples() if not comparisons.empty else []:
        if r.model != claimed:
            continue
        if r.task == paper_task(1) and base_name(str(r.baseline)) == swept:
            b = float(str(r.dataset).removeprefix("b"))
            if b > 1:
                continue
            claim, sign = f"{inn} error below the {blstm}'s (b = {b:g})", -1
            size = int(str(r.baseline).removeprefix(f"{swept}-h"))
            best = chosen.get(r.dataset, chosen.get(f"b{b}"))
            if best is not None and not pd.isna(best) and size != int(best):
                claim += f", against the size nearest its parameter count ({size} units)"
            theirs = paper.TABLE1.get(b, {})
            paper_difference = theirs.get(claimed, np.nan) - theirs.get(swept, np.nan)
        elif r.task == paper_task(2) and r.baseline in paper_baselines() and r.dataset in paper_corpora:
            claim, sign = f"{inn} accuracy above the {MODELS[r.baseline].display}'s ({r.dataset})", 1
            paper_difference = paper.TABLE2_WSJ.get(claimed, np.nan) - paper.TABLE2_WSJ.get(r.baseline, np.nan)
        else:
            continue
        # the interval's bounds in the paper's direction: both above zero where the claim holds
        near, far = sorted((sign * r.low, sign * r.high))
        if near > 0:
            verdict = "reproduced"
        elif far < 0:
            verdict = "not reproduced"
        else:
            verdict = "inconclusive"
        if r.interval != "seeds and test set":
            verdict += " on one seed (test-set interval)"
        rows.append(
            {
                "claim": claim,
                "task": r.task,
                "dataset": r.dataset,
                "scale": r.scale,
                "model": r.model,
                "baseline": r.baseline,
                "metric": r.metric,
                "paper_difference": paper_difference,
                "difference": r.difference,
                "low": r.low,
                "high": r.high,
                "interval": r.interval,
                "model_seeds": r.model_seeds,
                "baseline_seeds": r.baseline_seeds,
                "verdict": verdict,
                "p_value": getattr(r, "p_value", np.nan),
            }
        )
    rows += _whole_claim(rows)
    return pd.DataFrame(rows, columns=VERDICT_COLUMNS)


def default_paper_corpora() -> list[str]:
    """The built-in corpora that are the paper's data or its stand-ins, as the schema declares them."""
    from inn.experiment.config_schema import SCHEMA, load_schema

    corpora = load_schema(SCHEMA)["properties"]["corpora"]["properties"]
    return [
        name
        for name, record in corpora.items()
        if record.get("properties", {}).get("paper", {}).get("default", "none") != "none"
    ]


def _whole_claim(rows: list[dict]) -> list[dict]:
    """Table 1's claim as a whole, ``the INN's error below the b-LSTM's for b <= 1``, from its
    per-b rows against the size chosen on dev: how many b it was tested at (so how many tests it
    rests on), at how many each verdict fell, and at how many it holds once the tests are
    corrected for their number (Holm's step-down at 5% on the rows' two-sided p-values, each in
    the paper's direction). Nothing while fewer than two b were tested."""
    tested = [r for r in rows if r["task"] == paper_task(1) and "nearest its parameter count" not in r["claim"]]
    if len({r["dataset"] for r in tested}) < 2:
        return []
    counts = pd.Series([r["verdict"].split(" on one seed")[0] for r in tested]).value_counts()
    holding, order = 0, sorted(tested, key=lambda r: r["p_value"])
    for rank, r in enumerate(order):
        if r["p_value"] < 0.05 / (len(order) - rank) and r["difference"] < 0:
            holding += 1
        else:
            break
    b_values = ", ".join(str(r["dataset"]).removeprefix("b") for r in sorted(tested, key=lambda r: r["dataset"]))
    verdict = (
        f"{len(tested)} tests (b = {b_values}): "
        + ", ".join(
            f"{name} at {counts[name]}" for name in ("reproduced", "not reproduced", "inconclusive") if name in counts
        )
        + f"; {holding} of {len(tested)} hold after Holm's correction for {len(tested)} tests"
        + ("; some rest on one seed" if any("on one seed" in r["verdict"] for r in tested) else "")
    )
    claimed, swept = model_with_role("claimed"), model_with_role("swept")
    return [
        {
            "claim": f"{MODELS[claimed].display} error below the {MODELS[swept].display}'s for b <= 1, as a whole",
            "task": paper_task(1),
            "dataset": "all tested",
            "scale": ",".join(sorted({str(r["scale"]) for r in tested})),
            "model": claimed,
            "baseline": swept,
            "metric": "error",
            "paper_difference": np.nan,
            "difference": np.nan,
            "low": np.nan,
            "high": np.nan,
            "interval": "per b, above",
            "model_seeds": min(r["model_seeds"] for r in tested),
            "baseline_seeds": min(r["baseline_seeds"] for r in tested),
            "verdict": verdict,
            "p_value": np.nan,
        }
    ]


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


def main(argv: list[str]) -> None:
    """``inn collect``: write table1.tsv, table2.tsv, comparisons.tsv, verdict.tsv and runs.tsv from the runs' files."""
    parser = argparse.ArgumentParser(prog="inn collect", description=main.__doc__)
    parser.add_argument(
        "--results",
        nargs="+",
        default=[],
        help="workflow results folders: collect every finished "
        "run in them, besides any files listed below (POS corpora in name order unless --corpora)",
    )
    parser.add_argument("--metrics", nargs="*", default=[], help="metrics.json files")
    parser.add_argument("--histories", nargs="*", default=[], help="history.tsv files")
    parser.add_argument("--predictions", nargs="*", default=[], help="predictions.tsv files (paired intervals)")
    parser.add_argument("--floors", nargs="*", default=[], help="the walks' floor.tsv files")
    parser.add_argument("--floor-predictions", nargs="*", default=[], help="the walks' floor_predictions.tsv")
    parser.add_argument("--corpora", nargs="*", default=[], help="POS corpora, in report order")
    parser.add_argument(
        "--paper-corpora",
        nargs="*",
        help="the POS corpora that are the paper's data or its "
        "declared stand-ins (their verdicts test its claims; default: the built-in ones the "
        "config schema declares so)",
    )
    parser.add_argument("--out-dir", dest="out", required=True, help="output folder")
    args = parser.parse_args(argv)
    check_out_dir(args.out)
    if args.results:
        found = find_run_files(args.results)
        corpora = found.pop("corpora")
        args.corpora = args.corpora or corpora
        for name, paths in found.items():
            setattr(args, name, getattr(args, name) + paths)
    written = [Path(args.out) / f"{name}.tsv" for name in ("runs", "table1", "table2", "comparisons", "verdict")]
    refuse_inputs_as_outputs(
        {"--out-dir": written},
        {
            f"--{name.replace('_', '-')}": getattr(args, name)
            for name in ("metrics", "histories", "predictions", "floors", "floor_predictions")
        },
    )
    runs = load_runs(args.metrics, args.histories, args.predictions)
    floors = load_floors(args.floors, args.floor_predictions)
    _check_floors(runs, floors)
    comparisons: list[dict] = []
    first, second = table1(runs, floors, comparisons), table2(runs, args.corpora, comparisons)
    out = Path(args.out)
    write_tsv(out / "runs.tsv", runs.drop(columns="predictions_path", errors="ignore"))
    write_tsv(out / "table1.tsv", first)
    write_tsv(out / "table2.tsv", second)
    comparisons_table = pd.DataFrame(comparisons, columns=COMPARISON_COLUMNS)
    write_tsv(out / "comparisons.tsv", comparisons_table)
    write_tsv(out / "verdict.tsv", verdicts(comparisons_table, first, args.paper_corpora))


def concat_main(argv: list[str]) -> None:
    """``inn concat-tables --out OUT IN...``: stack TSVs with the same columns into one."""
    parser = argparse.ArgumentParser(prog="inn concat-tables", description=concat_main.__doc__)
    parser.add_argument("--out", required=True)
    parser.add_argument("inputs", nargs="*")
    args = parser.parse_intermixed_args(argv)  # IN --out OUT IN: inputs after the option too
    refuse_inputs_as_outputs({"--out": args.out}, {"an input table": args.inputs})
    frames = [read_tsv(p) for p in args.inputs]
    write_tsv(args.out, pd.concat(frames, ignore_index=True) if frames else pd.DataFrame())
