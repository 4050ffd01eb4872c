"""The report's figures: learning curves, solver iterations, timing against length, Tables 1
and 2 with every seed, and the training walks' lengths. Each ``*_figure``/``*_plot`` pair draws
a matplotlib figure (None where there is nothing to draw; the figure itself for the tests) and
gives it as a PNG data URI, so that the page is one file that can be mailed or archived.
"""

from __future__ import annotations

import base64
import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.ticker import MaxNLocator, NullFormatter  # noqa: E402

from inn.experiment.report import paper  # noqa: E402
from inn.experiment.report.views import table1_models  # noqa: E402
from inn.models import MODELS, model_with_role, task_spec  # noqa: E402


def figure_uri(fig) -> str:
    """A matplotlib figure as a PNG data URI (then closed)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def optional_uri(fig) -> str | None:
    """:func:`figure_uri` of ``fig``, None where there is no figure."""
    return None if fig is None else figure_uri(fig)


def learning_curves(histories: pd.DataFrame) -> list[dict]:
    """One figure per (task, dataset), :func:`learning_figure`, as PNG data URIs."""
    figures = []
    if histories.empty:
        return figures
    for (task, dataset), group in histories.groupby(["task", "dataset"], sort=False):
        fig = learning_figure(task, dataset, group)
        if fig is not None:
            figures.append({"title": f"{task} / {dataset}", "uri": figure_uri(fig)})
    return figures


def learning_figure(task: str, dataset: str, group: pd.DataFrame):
    """Training loss and dev score (accuracy for POS, error for the walks) against epoch for every
    model of one task and data set (its first seed); epochs ticked at whole numbers, since a
    run of three epochs would otherwise be ticked at 1.5 and 2.5. None without the dev score."""
    metric = task_spec(task).dev_column
    if metric not in group:
        return None
    label = metric.replace("_", " ")
    fig, (ax_loss, ax_metric) = plt.subplots(1, 2, figsize=(10, 3.6))
    for model, runs in group.groupby("model", sort=True):
        run = runs[runs.seed == runs.seed.min()]
        ax_loss.plot(run.epoch, run.train_loss, marker=".", label=model)
        ax_metric.plot(run.epoch, run[metric], marker=".", label=model)
    ax_loss.set(xlabel="epoch", ylabel="training loss", title=f"{task} {dataset}: training loss")
    ax_metric.set(xlabel="epoch", ylabel=label, title=f"{task} {dataset}: {label}")
    for ax in (ax_loss, ax_metric):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax_metric.legend(fontsize=8)
    return fig


def solver_curves(histories: pd.DataFrame) -> str | None:
    """:func:`solver_figure` as a PNG data URI (None without implicit runs)."""
    return optional_uri(solver_figure(histories))


def solver_figure(histories: pd.DataFrame):
    """Outer (Newton or Anderson) and Krylov iterations and non-converged sequences per epoch of
    the implicit runs; the Krylov panel only where a run has Krylov iterations (Newton-Krylov).
    One legend beside the panels, so that neither it nor a y label covers a neighbour."""
    if histories.empty or "newton_iters" not in histories:
        return None
    inn = histories[histories.newton_iters.notna()]
    if inn.empty:
        return None
    panels = [("newton_iters", "mean outer iterations per batch")]
    if "krylov_iters" in inn and (inn.krylov_iters.fillna(0) > 0).any():
        panels.append(("krylov_iters", "mean Krylov iterations per batch"))
    if "nonconverged" in inn:
        panels.append(("nonconverged", "sequences above tol per epoch"))
    fig, axes = plt.subplots(
        1, len(panels), figsize=(3.6 * len(panels) + 2.2, 3.4), squeeze=False, layout="constrained"
    )
    for (task, dataset, model, seed), run in inn.groupby(["task", "dataset", "model", "seed"], sort=False):
        for ax, (column, _) in zip(axes[0], panels):
            ax.plot(run.epoch, run[column], marker=".", label=f"{task} {dataset} {model} s{seed}")
    for ax, (column, label) in zip(axes[0], panels):
        ax.set(xlabel="epoch", ylabel=label)
        ax.set_ylim(bottom=0)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if column == "nonconverged":  # counts: whole numbers, and an axis to 1 when every count is 0
            ax.yaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_ylim(0, max(1.0, float(inn[column].max()) * 1.08))
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside right upper", fontsize=7)
    return fig


def _length_axis(ax, lengths) -> None:
    """A log x axis of sequence lengths ticked at the lengths measured, in plain numbers (the
    default minor labels, 2x10^1 3x10^1 4x10^1, print over each other)."""
    ax.set_xscale("log")
    ax.set_xticks(sorted(lengths), [f"{n:g}" for n in sorted(lengths)])
    ax.xaxis.set_minor_formatter(NullFormatter())


def timing_figure(measurements: pd.DataFrame, fits: pd.DataFrame) -> str | None:
    """:func:`timing_plot` as a PNG data URI (None without measurements)."""
    return optional_uri(timing_plot(measurements, fits))


def timing_plot(measurements: pd.DataFrame, fits: pd.DataFrame):
    """Seconds per batch against n (log-log) with the fitted power laws, and iterations vs n
    (Krylov iterations only where a solver has them). Each panel's legend sits below it, clear
    of the points and of its neighbours."""
    if measurements.empty:
        return None
    tasks = list(dict.fromkeys(measurements.task))
    implicit = "newton_iters" in measurements and measurements.newton_iters.notna().any()
    lengths = measurements.n.unique()
    panels = len(tasks) + int(implicit)
    fig, axes = plt.subplots(1, panels, figsize=(4.6 * panels, 4.6), squeeze=False, layout="constrained")
    for ax, task in zip(axes[0], tasks):
        for model, group in measurements[measurements.task == task].groupby("model", sort=False):
            per_n = group.groupby("n")["seconds"].min()
            fit = fits[(fits.task == task) & (fits.model == model)]
            (line,) = ax.plot(per_n.index, per_n.values, "o", label=None if not fit.empty else model)
            if not fit.empty:  # one legend entry per model: its fit
                a, p = float(fit.a.iloc[0]), float(fit.p.iloc[0])
                n = np.geomspace(per_n.index.min(), per_n.index.max(), 50)
                ax.plot(n, a * n**p, "-", color=line.get_color(), alpha=0.7, label=f"{model}: {a:.2g} n^{p:.2f}")
        ax.set_yscale("log")
        _length_axis(ax, lengths)
        theirs = paper.TIMING.get(task)
        title = f"{task} (paper: {theirs['a']} n^{theirs['p']} on a K40)" if theirs else task
        ax.set(xlabel="sequence length n", ylabel="seconds per batch of 20", title=title)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2)
    if implicit:
        ax = axes[0][-1]
        inn = measurements[measurements.newton_iters.notna()]
        for (task, model), group in inn.groupby(["task", "model"], sort=False):
            per_n = group.groupby("n")[["newton_iters", "krylov_iters"]].mean()
            ax.plot(per_n.index, per_n.newton_iters, "o-", label=f"{task} {model}: outer")
            if (per_n.krylov_iters.fillna(0) > 0).any():
                ax.plot(per_n.index, per_n.krylov_iters, "s--", label=f"{task} {model}: Krylov")
        _length_axis(ax, lengths)
        ax.set_ylim(bottom=0)
        ax.set(xlabel="sequence length n", ylabel="iterations per solve", title="implicit layer: solver iterations")
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2)
    return fig


def _per_seed(values) -> list[float]:
    if not isinstance(values, str) or not values:
        return [] if not isinstance(values, (int, float)) or np.isnan(values) else [float(values)]
    return [float(v) for v in values.split(",")]


def table1_figure(table1: pd.DataFrame) -> str | None:
    """Error against b: the floor, our models (mean and every seed) and the paper's two columns."""
    if table1.empty:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 4))
    b = table1.b.to_numpy()
    ax.plot(b, table1.floor, "k-", lw=2, label="Bayes-optimal floor (this task)")
    colours = {name: spec.colour for name, spec in MODELS.items() if spec.colour}
    others = iter(f"C{i}" for i in range(3, 100))  # the models of one's own
    for name, _ in table1_models(table1):
        colour = colours.get(name) or next(others)
        label = MODELS[name].display if name in MODELS else name
        if table1[f"{name}_error"].notna().any():
            ax.plot(b, table1[f"{name}_error"], "o-", color=colour, label=f"{label} (ours, mean over seeds)")
            for bias, values in zip(b, table1[f"{name}_errors"]):
                seeds = _per_seed(values)
                ax.plot([bias] * len(seeds), seeds, ".", color=colour, alpha=0.5)
    for name in (model_with_role("claimed"), model_with_role("swept")):  # the paper's INN and b-LSTM
        ax.plot(
            b,
            table1[f"paper_{name}_error"],
            "s--",
            color=colours.get(name),
            mfc="none",
            label=f"{MODELS[name].display} (paper)",
        )
    ax.set(xlabel="bias b", ylabel="per-step error", title="Table 1: error against bias (dots: seeds)")
    ax.legend(fontsize=7)
    return figure_uri(fig)


def table2_figure(table2: pd.DataFrame) -> str | None:
    """Per corpus, every tagger's test accuracy per seed (dots) and mean (bar), to see the spread."""
    ours = table2[table2.run == "ours"] if not table2.empty else table2
    if ours.empty:
        return None
    corpora = list(dict.fromkeys(ours.corpus))
    fig, axes = plt.subplots(1, len(corpora), figsize=(5.2 * len(corpora), 3.6), squeeze=False)
    for ax, corpus in zip(axes[0], corpora):
        group = ours[ours.corpus == corpus].reset_index(drop=True)
        for i, r in group.iterrows():
            seeds = _per_seed(r.accuracies)
            ax.plot(seeds, [i] * len(seeds), "o", color="C0", alpha=0.6)
            ax.plot([r.accuracy] * 2, [i - 0.3, i + 0.3], "k-", lw=2)
        ax.set_yticks(range(len(group)), group.name, fontsize=8)
        ax.set(xlabel="test accuracy % (dots: seeds; bar: mean)", title=corpus)
        ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return figure_uri(fig)


def walk_lengths_figure(lengths: pd.DataFrame) -> str | None:
    """:func:`walk_lengths_plot` as a PNG data URI (None without lengths)."""
    return optional_uri(walk_lengths_plot(lengths))


def walk_lengths_plot(lengths: pd.DataFrame):
    """The training walks' length histogram as bars, a count per whole length, the b side by side."""
    if lengths.empty:
        return None
    fig, ax = plt.subplots(figsize=(5, 3))
    groups = list(lengths[lengths.split == "train"].groupby("b"))
    width = 0.8 / max(len(groups), 1)
    for i, (b, group) in enumerate(groups):
        ax.bar(group.length + (i - (len(groups) - 1) / 2) * width, group["count"], width=width, label=f"b = {b:g}")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set(xlabel="walk length N (steps)", ylabel="training walks", title="walk lengths (uniform on 1..40)")
    ax.legend(fontsize=7)
    return fig
