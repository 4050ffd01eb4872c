"""The HTML report: one self-contained page with our Tables 1-2 and timing beside the paper's.

Everything shown comes from files the workflow wrote (tables, histories, timing measurements,
the implicit-layer benchmark) plus the configuration that produced them; the paper's numbers
come from :mod:`inn.experiment.report.paper` and are labelled as the paper's. Figures are matplotlib PNGs
embedded as data URIs, so the page is one file that can be mailed or archived.
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import io
import json
import platform
import subprocess
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import jinja2  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import torch  # noqa: E402
import yaml  # noqa: E402
from matplotlib.ticker import MaxNLocator, NullFormatter  # noqa: E402

from inn.errors import InnError  # noqa: E402
from inn.experiment.config import validate_config  # noqa: E402
from inn.experiment.config_runs import paper_corpora, pos_corpora  # noqa: E402
from inn.experiment.report import paper  # noqa: E402
from inn.experiment.report.collect import run_key  # noqa: E402
from inn.experiment.report.cost import cost_figure  # noqa: E402
from inn.experiment.report.tables import (
    benchmark_quality,
    data_pos_view,
    data_walks_view,  # noqa: E402
    timing_view,
)
from inn.experiment.report.views import fmt, read_table, table1_models, views  # noqa: E402
from inn.io import atomic_open, refuse_inputs_as_outputs  # noqa: E402
from inn.models import MODELS, bidirectional_baselines, model_with_role, paper_task, task_spec  # noqa: E402
from inn.tables import read_tsv  # noqa: E402

TEMPLATES = Path(__file__).parent / "templates"
PACKAGES = ("torch", "numpy", "pandas", "snakemake", "nltk", "conllu", "matplotlib", "jinja2")


# --------------------------------------------------------------------------- provenance


def git_revision(repo: Path) -> str:
    """The checkout's commit, with ``-dirty`` when it has uncommitted changes."""
    try:
        rev = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        return rev + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"


def software_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def device_description() -> str:
    """The machine that renders the report (not the one that trained the runs: see
    :func:`training_devices`)."""
    if torch.cuda.is_available():
        return f"CUDA: {torch.cuda.get_device_name(0)} (and CPU {platform.processor() or platform.machine()})"
    return f"CPU only: {platform.processor() or platform.machine()}"


def _device_label(device, threads) -> str:
    """``cpu, 1 thread``, ``cpu, 2 threads`` or ``cuda NVIDIA H200`` (CPU threads matter little there)."""
    device = str(device)
    if device.startswith("cuda"):
        return device
    if pd.isna(threads):
        return f"{device}, threads not recorded"
    threads = int(threads)
    return f"{device}, {threads} thread{'s' if threads != 1 else ''}"


def training_devices(histories: pd.DataFrame, runs: pd.DataFrame) -> list[dict]:
    """Where the runs trained, read from their own files: one entry per device (``label``) with
    the number of runs that trained there (``runs``; a run that moved between machines counts
    under each), most runs first.

    Each history row records its epoch's device and threads. A history written before they were
    recorded (and the perceptron's) falls back on its run's metrics.json (the runs table), which
    holds the device of the last epoch only: ``from_metrics`` counts those runs.
    """
    counts: dict[str, dict] = {}
    recorded = set()
    keys = ["task", "dataset", "model", "seed"]

    def count(label: str, from_metrics: bool) -> None:
        entry = counts.setdefault(label, {"label": label, "runs": 0, "from_metrics": 0})
        entry["runs"] += 1
        entry["from_metrics"] += int(from_metrics)

    if not histories.empty and "device" in histories:
        for key, run in histories[histories.device.notna()].groupby(keys, sort=False):
            recorded.add(tuple(key))
            threads = run["threads"] if "threads" in run else pd.Series(np.nan, index=run.index)
            for label in dict.fromkeys(_device_label(d, t) for d, t in zip(run.device, threads)):
                count(label, False)
    if not runs.empty and "device" in runs:
        for row in runs.itertuples():
            if tuple(getattr(row, k) for k in keys) not in recorded and not pd.isna(row.device):
                count(_device_label(row.device, getattr(row, "threads", np.nan)), True)
    return sorted(counts.values(), key=lambda entry: -entry["runs"])


def scale_differences(config: dict, schema: Path) -> list[str]:
    """Settings of ``config`` that differ from the full reproduction (the schema's defaults).

    Where a corpus's files are, job resources and the scale label itself are not a matter of
    scale and are left out (the data summary gives every corpus's size); which corpora run, and
    how they are read (format, tag column), are: a corpus left out, another tag column or a
    corpus of the user's own is not the paper's experiment.
    """
    defaults = validate_config({}, schema)
    differences: list[str] = []

    def walk(ours, theirs, path):
        if isinstance(ours, dict) and isinstance(theirs, dict):
            for key in ours:
                if (path == "" and key in ("resources", "scale")) or (path.startswith("corpora.") and key in LOCATIONS):
                    continue
                if path == "corpora" and key not in theirs:
                    differences.append(f"corpora.{key}: a corpus of your own (full reproduction: {', '.join(theirs)})")
                    continue
                walk(ours[key], theirs.get(key), f"{path}.{key}" if path else key)
        elif ours != theirs:
            differences.append(f"{path} = {ours} (full reproduction: {theirs})")

    walk(config, defaults, "")
    return differences


#: corpus keys that say where its files are, not what it is
LOCATIONS = ("train", "dev", "test", "path", "nltk_data")


# --------------------------------------------------------------------------- figures


def figure_uri(fig) -> str:
    """A matplotlib figure as a PNG data URI (then closed)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def load_histories(paths: Iterable[str | Path]) -> pd.DataFrame:
    """All runs' per-epoch rows, keyed by task, dataset, model and seed."""
    frames = []
    for path in paths:
        frame = pd.read_csv(path, sep="\t")
        for key, value in run_key(path).items():
            frame[key] = value
        frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


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
    fig = solver_figure(histories)
    return None if fig is None else figure_uri(fig)


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
    fig = timing_plot(measurements, fits)
    return None if fig is None else figure_uri(fig)


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


def benchmark_tables(paths: Iterable[str | Path]) -> list[dict]:
    """Forward+backward seconds per method (rows) and length (columns), one table per weight set.

    A column gives each method's time over the bidirectional GRU's at the longest n, the figure
    the implicit layer's speed is judged by; the last ones its repeats, the machine's load while
    timing and why its times cannot be trusted (:func:`inn.experiment.report.tables.benchmark_quality`).
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


def _per_seed(values) -> list[float]:
    if not isinstance(values, str) or not values:
        return [] if not isinstance(values, (int, float)) or np.isnan(values) else [float(values)]
    return [float(v) for v in values.split(",")]


def _uri(fig) -> str | None:
    return None if fig is None else figure_uri(fig)


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


def walk_lengths_figure(lengths: pd.DataFrame) -> str | None:
    """:func:`walk_lengths_plot` as a PNG data URI (None without lengths)."""
    fig = walk_lengths_plot(lengths)
    return None if fig is None else figure_uri(fig)


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


# --------------------------------------------------------------------------- page


def data_view(view, path: Path, training: dict):
    """``view`` of the data summary at ``path`` (None where the run has none)."""
    frame = read_table(path)
    return None if frame.empty else view(frame, training)


def render(
    *,
    config: dict,
    schema: Path,
    tables: Path,
    histories: Iterable[str | Path] = (),
    timing: str | Path | None = None,
    timing_fits: str | Path | None = None,
    benchmarks: Iterable[str | Path] = (),
    repo: Path | None = None,
) -> str:
    """The report page as a string (see :func:`main` for the files it reads)."""
    histories = load_histories(histories)
    measurements, fits = read_table(timing), read_table(timing_fits)
    training = config.get("training", {})
    table1, table2 = read_table(tables / "table1.tsv"), read_table(tables / "table2.tsv")
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True, trim_blocks=True, lstrip_blocks=True
    )
    env.filters["fmt"] = fmt
    env.globals["swept"] = model_with_role("swept")  # Table 1's b-LSTM columns are named by it
    template = env.get_template("report.html.j2")
    return template.render(
        title="Implicitly-defined neural networks for sequence labeling: reproduction report",
        generated=dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        scale=config.get("scale", ""),
        differences=scale_differences(config, schema),
        paper_corpora=paper_corpora(config),
        other_corpora=[name for name in pos_corpora(config) if name not in paper_corpora(config)],
        wsj_given=any(config["corpora"][name]["format"] == "ptb" for name in pos_corpora(config)),
        table1=table1,
        table1_figure=table1_figure(table1),
        cost_figure=_uri(cost_figure(read_table(tables / "cost.tsv"))),
        table2=table2,
        table2_figure=table2_figure(table2),
        views=views(tables),
        data_pos=data_view(data_pos_view, tables / "data_pos.tsv", training.get("pos", {})),
        data_walks=data_view(data_walks_view, tables / "data_walks.tsv", training.get("walks", {})),
        walk_lengths=walk_lengths_figure(read_table(tables / "data_walk_lengths.tsv")),
        curves=learning_curves(histories),
        solver_curves=solver_curves(histories),
        timing_figure=timing_figure(measurements, fits),
        fits=fits,
        timing_table=None if fits.empty else timing_view(fits, measurements),
        paper_timing=paper.TIMING,
        paper_wall_clock=paper.PAPER_WALL_CLOCK,
        benchmarks=benchmark_tables(benchmarks),
        config_yaml=yaml.safe_dump(config, sort_keys=False),
        versions=software_versions(),
        device=device_description(),
        trained_on=training_devices(histories, read_table(tables / "runs.tsv")),
        revision=git_revision(repo or Path.cwd()),
    )


def check_tables(tables: Path) -> None:
    """Raise an InnError where a table of the runs that ``runs.tsv`` lists is missing from the
    folder: the report would say the configuration has no such runs."""
    runs = read_table(tables / "runs.tsv")
    for name, task in ((f"table{number}", task_spec(paper_task(number))) for number in (1, 2)):
        listed = int((runs["task"] == task.name).sum()) if "task" in runs else 0
        if listed and not (tables / f"{name}.tsv").is_file():
            raise InnError(
                f"{tables / name}.tsv is missing, though {tables / 'runs.tsv'} lists {listed} {task.noun} "
                f"run(s): give the folder inn collect wrote, or rerun inn collect into {tables}"
            )


def main(argv: list[str]) -> None:
    """``inn report``: write the HTML report from the workflow's tables and measurements."""
    parser = argparse.ArgumentParser(prog="inn report", description=main.__doc__)
    parser.add_argument("--config-json", required=True, help="the run's validated config, as JSON")
    parser.add_argument("--schema", required=True, help="the config schema (for the scale statement)")
    parser.add_argument("--tables", required=True, help="folder with table1/table2/data_*.tsv")
    parser.add_argument("--histories", nargs="*", default=[], help="training history.tsv files")
    parser.add_argument("--timing", help="timing measurements (TSV)")
    parser.add_argument("--timing-fits", help="fitted power laws (TSV)")
    parser.add_argument("--benchmarks", nargs="*", default=[], help="implicit-layer benchmark CSVs")
    parser.add_argument("--repo", default=".", help="the checkout (for its git revision)")
    parser.add_argument("--out", required=True, help="the HTML file to write")
    args = parser.parse_args(argv)
    refuse_inputs_as_outputs(
        {"--out": args.out},
        {
            "a table of --tables": list(Path(args.tables).glob("*.tsv")),
            "--timing": args.timing,
            "--timing-fits": args.timing_fits,
            "a history": args.histories,
            "a benchmark": args.benchmarks,
        },
    )
    check_tables(Path(args.tables))
    config = json.loads(args.config_json)
    html = render(
        config=config,
        schema=Path(args.schema),
        tables=Path(args.tables),
        histories=args.histories,
        timing=args.timing,
        timing_fits=args.timing_fits,
        benchmarks=args.benchmarks,
        repo=Path(args.repo),
    )
    with atomic_open(args.out, encoding="utf-8") as handle:
        handle.write(html)
