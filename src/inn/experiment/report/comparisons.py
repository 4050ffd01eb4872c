"""What Tables 1 and 2 share: a model's seeds summarised (mean, spread, every seed's value),
its parameter count and test predictions, and the paired comparisons of ``comparisons.tsv``:
one model against another (or against the walks' floor) over the same test units, with the
difference's seed-aware interval (:func:`inn.experiment.report.stats.paired_bootstrap`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from inn.experiment.report.stats import UnitScores, paired_bootstrap
from inn.models import task_spec
from inn.tables import read_tsv

#: Seeds of the paired bootstrap's resampling (fixed: the intervals are reproducible).
BOOTSTRAP_SEED = 2017
#: The columns that name a comparison (a verdict names the comparison it reads by them).
COMPARED = ["task", "dataset", "scale", "model", "baseline", "metric"]
COMPARISON_COLUMNS = [
    *COMPARED,
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


def seed_summary(values: pd.Series, digits: int) -> dict:
    """Mean, sample standard deviation (NaN for one seed), seed count and the values themselves."""
    values = values.dropna()
    return {
        "mean": float(values.mean()) if len(values) else float("nan"),
        "std": float(values.std(ddof=1)) if len(values) > 1 else float("nan"),
        "seeds": len(values),
        "values": ",".join(f"{v:.{digits}f}" for v in values),
    }


def parameter_count(runs: pd.DataFrame) -> float:
    """The trainable parameter count of a model's runs (one size, so one count)."""
    counts = runs["parameters"].dropna().unique() if "parameters" in runs else []
    return float(counts[0]) if len(counts) else np.nan


def run_predictions(runs: pd.DataFrame) -> list[pd.DataFrame]:
    """The test predictions of every one of ``runs`` (none unless each has its own)."""
    paths = runs.get("predictions_path", pd.Series(dtype=object)).dropna()
    return [read_tsv(p) for p in paths] if len(paths) == len(runs) and len(runs) else []


def compare(
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


def scale_of(runs: pd.DataFrame) -> str | None:
    """The scale label(s) of some runs (``paper``, ``comparison``...), as their metrics name it."""
    labels = sorted(runs["scale"].dropna().astype(str).unique()) if "scale" in runs else []
    return ",".join(labels) or None
