"""What a model's error costs in CPU time: the hours each Table 1 run took to its best dev epoch,
and to reach the dev error of the best b-LSTM.

A run's recorded seconds per epoch are wall-clock times of machines shared with other work, so
they are not used. A run whose history records its own process CPU seconds for every epoch, each
on the CPU (``cpu_seconds``, written since 231d5d2), is costed from those (``hours_from``: its
history; an epoch on two threads counts both threads' time). The others are costed from a
measurement: each model's CPU seconds per training batch measured on one machine, one thread
(``archive/paper_walks/cost/measure.py``: a number of batches of the run's own training loop,
from fresh weights and from states kept late in training), and each epoch of an archived run is
costed from them:

- a b-LSTM's batch costs the same at every epoch (its arithmetic does not depend on the
  weights): the mean of its measured points;
- an INN's batch costs what its solves take: CPU seconds per batch are fitted as
  ``a + c * (forward + adjoint iterations per batch)`` over its measured points (least squares,
  r² reported), and each archived epoch's iterations (``newton_iters`` and ``backward_iters``
  in its history) give that epoch's cost.

An epoch is ``batches * cost per batch + dev walks * dev cost per walk`` (the dev pass, forward
only, fitted on the forward iterations for the INN). The target is the best dev error any seed
of the b-LSTM chosen on dev reached; a run's hours to it are those up to the end of the first
epoch below it, and of the epoch from which it stays below.

The measured line holds for the solver it was measured with: the archive's measurement (a9e4c60)
gives the INNs trained at 231d5d2, whose adjoint turns to GMRES, 0.8-3.4 times their own CPU
seconds to their best epochs, which is why a run's own come first.
"""

from __future__ import annotations

import argparse
import json
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from inn.errors import InnError
from inn.experiment.report.runs import find_run_files, load_runs, run_key, run_label
from inn.experiment.report.table1 import best_bilstm
from inn.registry import TASKS
from inn.tables import write_tsv

log = logging.getLogger(__name__)

#: the measurement's columns this module reads
MEASURED = ("model", "cpu_s_per_batch", "newton_iters", "backward_iters", "dev_cpu_s_per_walk")


@dataclass(frozen=True)
class Line:
    """``y = intercept + slope * x`` with its fit's r² over ``points`` measurements (slope 0: a mean)."""

    intercept: float
    slope: float
    r2: float
    points: int

    def __call__(self, x: float) -> float:
        return self.intercept + self.slope * x


def fit_line(x: np.ndarray, y: np.ndarray) -> Line:
    """Least-squares line; a constant (the mean) where x does not vary or is absent."""
    if len(y) == 0:
        raise InnError("no measured points to fit")
    if x is None or len(y) < 2 or np.ptp(x) == 0:
        return Line(float(np.mean(y)), 0.0, float("nan"), len(y))
    slope, intercept = np.polyfit(x, y, 1)
    residual = y - (intercept + slope * x)
    total = float(np.sum((y - y.mean()) ** 2))
    return Line(float(intercept), float(slope), 1.0 - float(np.sum(residual**2)) / total if total else 1.0, len(y))


@dataclass(frozen=True)
class ModelCost:
    """A model's fitted CPU seconds per training batch and per dev walk."""

    batch: Line
    dev: Line
    implicit: bool

    def epoch_seconds(self, row: pd.Series, batches: int, dev_walks: int) -> float:
        """CPU seconds of one archived epoch (``row``: its history row)."""
        if not self.implicit:
            return batches * self.batch(0.0) + dev_walks * self.dev(0.0)
        forward, adjoint = float(row["newton_iters"]), float(row["backward_iters"])
        return batches * self.batch(forward + adjoint) + dev_walks * self.dev(forward)


def model_costs(measured: pd.DataFrame) -> dict[str, ModelCost]:
    """One :class:`ModelCost` per model of the measurement (points pooled over b: a model's
    arithmetic per batch does not depend on the walks' bias)."""
    missing = [name for name in MEASURED if name not in measured]
    if missing:
        raise InnError(
            f"the cost measurement lacks the column(s) {', '.join(missing)}: write it with "
            "archive/paper_walks/cost/measure.py"
        )
    costs = {}
    for model, points in measured.groupby("model"):
        implicit = points["newton_iters"].notna().all() and model == "inn"
        if implicit:
            iterations = (points["newton_iters"] + points["backward_iters"]).to_numpy(float)
            batch = fit_line(iterations, points["cpu_s_per_batch"].to_numpy(float))
            dev = fit_line(points["newton_iters"].to_numpy(float), points["dev_cpu_s_per_walk"].to_numpy(float))
        else:
            batch = fit_line(None, points["cpu_s_per_batch"].to_numpy(float))
            dev = fit_line(None, points["dev_cpu_s_per_walk"].to_numpy(float))
        costs[str(model)] = ModelCost(batch, dev, bool(implicit))
    return costs


def own_cpu_seconds(history: pd.DataFrame) -> np.ndarray | None:
    """A run's own CPU seconds per epoch, where its history records them for every epoch and each
    epoch trained on the CPU (a GPU epoch's CPU time is not its cost); None otherwise."""
    if "cpu_seconds" not in history or history["cpu_seconds"].isna().any():
        return None
    if "device" in history and not history["device"].astype(str).str.startswith("cpu").all():
        return None
    return history["cpu_seconds"].to_numpy(float)


def _hours_until(cumulative: np.ndarray, epoch: int | None) -> float:
    return float(cumulative[epoch - 1]) / 3600 if epoch else float("nan")


def _below(dev: np.ndarray, target: float) -> tuple[int | None, int | None]:
    """The first epoch whose dev error reaches ``target`` (at or below it), and the epoch from
    which every later one does."""
    below = dev <= target  # the chosen b-LSTM reaches its own best
    first = int(np.argmax(below)) + 1 if below.any() else None
    if not below[-1]:
        return first, None
    above = np.flatnonzero(~below)
    return first, int(above[-1]) + 2 if len(above) else 1


def cost_table(results: list[str | Path], measured: pd.DataFrame) -> pd.DataFrame:
    """One row per walks run of ``results`` whose history records its CPU seconds or whose model
    was measured: CPU hours to its best dev epoch and to the chosen b-LSTM's best dev error,
    beside its test error."""
    found = find_run_files(results)
    runs = load_runs(found["metrics"], found["histories"], found["predictions"])
    runs = runs[runs.task.isin([name for name, spec in TASKS.items() if spec.metric == "error"])]
    histories = {tuple(run_key(path).values()): pd.read_csv(path, sep="\t") for path in found["histories"]}
    batch_size = {
        tuple(run_key(path).values()): json.loads(Path(path).read_text(encoding="utf-8"))
        .get("training", {})
        .get("batch_size")
        for path in found["metrics"]
    }
    costs = model_costs(measured)
    rows = []
    for dataset, group in runs.groupby("dataset"):
        _, chosen = best_bilstm(group)
        target = float(chosen.best_dev.min()) if len(chosen) else float("nan")
        sizes = _sizes(results, dataset)
        for run in group.itertuples():
            history = histories[(run.task, run.dataset, run.model, run.seed)].sort_values("epoch")
            seconds = own_cpu_seconds(history)
            measured_cost = None
            if seconds is None:
                measured_cost = costs.get(run.model)
                if measured_cost is None:
                    continue
                size = batch_size[(run.task, run.dataset, run.model, run.seed)]
                if not size:
                    raise InnError(f"{run_label(run._asdict())}: its metrics.json records no training.batch_size")
                batches = -(-sizes["train"] // int(size))
                seconds = np.array(
                    [measured_cost.epoch_seconds(row, batches, sizes["dev"]) for _, row in history.iterrows()]
                )
            cumulative = np.cumsum(seconds)
            dev = history["dev_error"].to_numpy(float)
            best = int(history.loc[history["dev_error"].idxmin(), "epoch"])
            first, stays = _below(dev, target)
            rows.append(
                {
                    "dataset": dataset,
                    "model": run.model,
                    "seed": run.seed,
                    "epochs": len(history),
                    "best_epoch": best,
                    "best_dev": float(dev.min()),
                    "test_error": run.error,
                    "cpu_s_first_epoch": float(seconds[0]),
                    "cpu_s_last_epoch": float(seconds[-1]),
                    "cpu_hours_to_best": _hours_until(cumulative, best),
                    "cpu_hours_total": float(cumulative[-1]) / 3600,
                    "target_dev": target,
                    "first_below": first,
                    "cpu_hours_first_below": _hours_until(cumulative, first),
                    "stays_below": stays,
                    "cpu_hours_stays_below": _hours_until(cumulative, stays),
                    "hours_from": "measured per batch" if measured_cost else "its history",
                    "fit_r2": measured_cost.batch.r2 if measured_cost else float("nan"),
                    "fit_points": measured_cost.batch.points if measured_cost else 0,
                }
            )
    if not rows:
        raise InnError(
            "no walks run of the results records its CPU seconds or has a measured model: measure it first "
            "(archive/paper_walks/cost/measure.py)"
        )
    return pd.DataFrame(rows)


def cost_figure(cost: pd.DataFrame):
    """Test error against CPU hours to the best dev epoch, one panel per data set, a marker per
    seed; None without a cost table. (matplotlib is imported here: the report's extra.)"""
    if cost.empty:
        return None
    import matplotlib.pyplot as plt

    datasets = list(dict.fromkeys(cost.dataset))
    fig, axes = plt.subplots(1, len(datasets), figsize=(3.6 * len(datasets), 3.4), squeeze=False)
    for ax, dataset in zip(axes[0], datasets):
        group = cost[cost.dataset == dataset]
        for number, (model, runs) in enumerate(group.groupby("model", sort=False)):
            ax.plot(runs.cpu_hours_to_best, runs.test_error, "o", color=f"C{number}", label=model)
        ax.set(xscale="log", xlabel="CPU hours to best dev epoch", ylabel="test error", title=dataset)
    axes[0][0].legend(fontsize=6)
    fig.tight_layout()
    return fig


def _sizes(results: list[str | Path], dataset: str) -> dict[str, int]:
    """The train and dev walk counts of a walks folder (its ``summary.tsv``)."""
    for folder in results:
        summary = Path(folder) / "data" / "walks" / dataset / "summary.tsv"
        if summary.is_file():
            counts = pd.read_csv(summary, sep="\t").set_index("split")["sequences"]
            return {"train": int(counts["train"]), "dev": int(counts["dev"])}
    raise InnError(
        f"no data/walks/{dataset}/summary.tsv under {', '.join(map(str, results))}: give the results "
        "folder that holds the runs' walks"
    )


def main(argv: list[str]) -> None:
    """``inn cost``: CPU hours of every measured walks run (cost.tsv)."""
    parser = argparse.ArgumentParser(prog="inn cost", description=main.__doc__)
    parser.add_argument("--results", nargs="+", required=True, help="workflow results folders")
    parser.add_argument("--measured", required=True, help="the measurement (measure.py's TSV)")
    parser.add_argument("--out", required=True, help="cost.tsv to write")
    args = parser.parse_args(argv)
    path = Path(args.measured)
    if not path.is_file():
        raise InnError(f"{path}: no such file; measure with archive/paper_walks/cost/measure.py")
    table = cost_table(args.results, pd.read_csv(path, sep="\t"))
    write_tsv(args.out, table)
    log.info("wrote %s (%d runs)", args.out, len(table))
