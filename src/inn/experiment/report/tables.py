"""The report's tables of data and measurements: the corpora and walk sets, the timing fits
beside the paper's, and the implicit-layer benchmark.

Each is a :class:`inn.experiment.report.views.TableView` with headers a reader understands (what a
column measures and in which unit, not the TSV's column name), numbers to significant figures,
and for measurements their quality: r² of a fit, repeats, the machine's load while timing and
a note where they cannot be trusted (:func:`inn.experiment.timing.fits.trust_notes`). The
implicit-layer benchmark's tables (:func:`benchmark_tables`) are data frames, one per weight set.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from inn.experiment.report import paper
from inn.experiment.report.runs import run_key
from inn.experiment.report.views import Cell, TableView, fmt, sig
from inn.experiment.timing.fits import trust_notes
from inn.models import MODELS, bidirectional_baselines, model_with_role
from inn.tables import read_tsv


def _percent(rate) -> str:
    return "–" if pd.isna(rate) else f"{100 * float(rate):.2f}"


def _count(value) -> str:
    return "–" if pd.isna(value) else f"{int(value):,}"


def _used(total, split: str, limits: dict) -> str:
    """The sequences of a split a run trains or validates on: its ``max_train`` / ``max_dev``
    where that is below the split's size, else all of them."""
    limit = limits.get(split)
    if pd.isna(total) or limit is None or limit >= total:
        return _count(total)
    return f"{int(limit):,} (max_{split})"


def limits(training: dict) -> dict:
    """``{"train": max_train, "dev": max_dev}`` of one task's training settings (None: all)."""
    return {"train": training.get("max_train"), "dev": training.get("max_dev")}


def data_pos_view(data: pd.DataFrame, training: dict) -> TableView:
    """The POS corpora: sentences per split and how many a run uses, tokens, tag types, and the
    shares of tokens a model has not seen in training."""
    view = TableView(
        "data-pos",
        "POS corpora",
        [
            ("corpus", "text"),
            ("split", "text"),
            ("sentences", ""),
            ("sentences used", ""),
            ("tokens", ""),
            ("tag types", ""),
            ("out of the word vocabulary (% of tokens)", ""),
            ("word unseen in training (% of tokens)", ""),
            ("tokens whose tag is unseen in training", ""),
        ],
    )
    for r in data.to_dict("records"):
        view.add(
            [
                str(r["corpus"]),
                str(r["split"]),
                _count(r.get("sentences")),
                _used(r.get("sentences"), r["split"], limits(training)),
                _count(r.get("tokens")),
                _count(r.get("tag_types")),
                _percent(r.get("oov_rate")),
                _percent(r.get("unseen_rate")),
                _count(r.get("unseen_tag_tokens")),
            ]
        )
    return view


def data_walks_view(data: pd.DataFrame, training: dict) -> TableView:
    """The walk sets: walks per split and how many a run uses, steps, mean length, and the share
    of steps past the change point (label 1)."""
    view = TableView(
        "data-walks",
        "Random walks",
        [
            ("bias b", ""),
            ("split", "text"),
            ("walks", ""),
            ("walks used", ""),
            ("steps", ""),
            ("mean length (steps)", ""),
            ("steps labelled 1 (%)", ""),
        ],
    )
    for r in data.to_dict("records"):
        view.add(
            [
                sig(r["b"]),
                str(r["split"]),
                _count(r.get("sequences")),
                _used(r.get("sequences"), r["split"], limits(training)),
                _count(r.get("steps")),
                sig(r.get("mean_length")),
                _percent(r.get("label1_fraction")),
            ]
        )
    return view


def timing_view(fits: pd.DataFrame, measurements: pd.DataFrame) -> TableView:
    """One row per timed model: its fit t = a n^p (a in seconds per batch of 20), r², the
    lengths and repeats it rests on, the highest load average while timing, the paper's fit
    beside it (the claimed model's rows), and why it cannot be trusted where that applies."""
    view = TableView(
        "timing-table",
        "Runtime scaling fits",
        [
            ("task", "text"),
            ("data", "text"),
            ("model", "text"),
            ("a (s per batch)", ""),
            ("p", ""),
            ("r²", ""),
            ("lengths n", ""),
            ("repeats per n", ""),
            ("load (1-min average, cores busy)", ""),
            ("paper: a (s per batch, K40)", "paper"),
            ("paper: p", "paper"),
            ("paper: r²", "paper"),
            ("can it be trusted?", "text"),
        ],
    )
    for r in fits.to_dict("records"):
        group = measurements
        for key in ("task", "dataset", "model"):
            if key in group and key in r:
                group = group[group[key] == r[key]]
        per_n = group.groupby("n")["seconds"].min() if not group.empty else pd.Series(dtype=float)
        repeats = r.get("repeats", group.groupby("n").size().min() if not group.empty else np.nan)
        load = r.get("load", np.nan)
        note = r.get("note") if isinstance(r.get("note"), str) else trust_notes(per_n, r["r2"], repeats, load)
        theirs = paper.TIMING.get(r["task"], {}) if not pd.isna(r.get("paper_a", np.nan)) else {}
        points = r.get("points")
        lengths = (
            "none timed"
            if points == 0
            else f"{fmt(r['n_min'], 0)}–{fmt(r['n_max'], 0)}" + (f" ({points} lengths)" if points else "")
        )
        view.add(
            [
                str(r["task"]),
                str(r.get("dataset", "")),
                str(r["model"]),
                sig(r["a"]),
                sig(r["p"]),
                sig(r["r2"]),
                lengths,
                "–" if pd.isna(repeats) else str(int(repeats)),
                sig(load, 2),
                sig(theirs.get("a")),
                sig(theirs.get("p")),
                sig(theirs.get("r2")),
                Cell(note, bold=True) if note else Cell("no warning"),
            ]
        )
    return view


def benchmark_quality(group: pd.DataFrame) -> pd.DataFrame:
    """Per method of one benchmark table: its repeats (fewest), the highest load average while
    timing, and :func:`trust_notes` of its forward+backward times over n."""
    rows = {}
    for method, runs in group.groupby("method", sort=False):
        times = runs.groupby("n")["forward_backward_s"].min()
        repeats = runs["repeats"].min() if "repeats" in runs else np.nan
        load = runs["load"].max() if "load" in runs else np.nan
        rows[method] = {"repeats": repeats, "load": load, "note": trust_notes(times, repeats=repeats, load=load)}
    return pd.DataFrame.from_dict(rows, orient="index")


def benchmark_tables(paths: Iterable[str | Path]) -> list[dict]:
    """Forward+backward seconds per method (rows) and length (columns), one table per weight set.

    A column gives each method's time over the bidirectional GRU's at the longest n, the figure
    the implicit layer's speed is judged by; the last ones its repeats, the machine's load while
    timing and why its times cannot be trusted (:func:`benchmark_quality`).
    """
    tables = []
    for path in paths:
        frame = read_tsv(path)
        key = run_key(path)
        for (weights, hidden), group in frame.groupby(["weights", "hidden"], sort=False):
            pivot = group.pivot_table(index="method", columns="n", values="forward_backward_s", aggfunc="min")
            pivot = pivot.reindex(list(dict.fromkeys(group.method)))
            longest = pivot.columns.max()
            reference = model_with_role("timing_reference")  # the BiGRU
            if reference in pivot.index:
                pivot[f"x {MODELS[reference].label} at n={longest}"] = pivot[longest] / pivot.loc[reference, longest]
            pivot.columns = [f"n={c}" if not isinstance(c, str) else c for c in pivot.columns]
            quality = benchmark_quality(group).reindex(pivot.index)
            pivot["repeats"], pivot["load"] = quality["repeats"], quality["load"]
            pivot["can it be trusted?"] = quality["note"].replace("", "no warning")
            title = f"{key['task']} {key['dataset']}: {weights} weights, k = {hidden}"
            tables.append({"title": title, "table": pivot.reset_index()})
            peers = group[group.method.str.startswith("torchdeq")]
            if not peers.empty:
                tables.append({"title": f"{title}: forward, ours and TorchDEQ's", "table": _forward_table(group)})
    return tables


def _forward_table(group: pd.DataFrame) -> pd.DataFrame:
    """Forward seconds of our solvers and TorchDEQ's on the same systems (its solvers have no
    backward of their own), with F evaluations, the final residual in our definition and the
    failed sequences at the longest n, and each row's time over our fastest there."""
    # the implicit GRU's systems: not the baselines' rows, nor another cell's (the implicit LSTM's)
    implicit = group[
        ~group.method.isin(bidirectional_baselines().values())
        & (group.get("cell", pd.Series("", index=group.index)).astype(str) != "lstm")
    ]
    pivot = implicit.pivot_table(index="method", columns="n", values="forward_s", aggfunc="min")
    pivot = pivot.reindex(list(dict.fromkeys(implicit.method)))
    longest = pivot.columns.max()
    last = implicit[implicit.n == longest].groupby("method", sort=False)
    pivot.columns = [f"n={c}" for c in pivot.columns]
    for column, name in (("function_evals", "F"), ("residual_max", "residual"), ("failed", "failed")):
        pivot[f"{name} at n={longest}"] = last[column].max()
    ours = pivot.loc[[m for m in pivot.index if not m.startswith("torchdeq")], f"n={longest}"].min()
    pivot[f"x our best at n={longest}"] = pivot[f"n={longest}"] / ours
    return pivot.reset_index()
