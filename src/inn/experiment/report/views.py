"""The result tables as they are shown: the verdict, Tables 1-2, the paired comparisons, the runs.

:func:`inn.experiment.report.collect.main` writes these tables as TSVs with every column at full
precision. A view picks the columns a reader needs, formats each cell once (digits, "mean ±
sd", "[low, high]", bold where an interval excludes zero) and is rendered twice from the same
cells: as HTML in the report (``report.html.j2``) and as Markdown by ``inn markdown``, for
documents such as docs/results.md. Documents therefore quote the workflow's numbers instead of
retyping them.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from inn.errors import InnError
from inn.io import atomic_open
from inn.tables import read_tsv


@dataclass(frozen=True)
class Cell:
    """One formatted cell; ``bold`` marks an interval that excludes zero or a verdict."""

    text: str
    bold: bool = False


@dataclass
class TableView:
    """A table ready to show: headers with their alignment class ("" right-aligned numbers,
    "text", "paper" for the paper's numbers), and rows of cells; ``reported`` rows are numbers
    others reported (shown in italics in the report)."""

    id: str
    title: str
    columns: list[tuple[str, str]]
    rows: list[list[Cell]] = field(default_factory=list)
    reported: list[bool] = field(default_factory=list)

    def add(self, cells: list[Cell | str], reported: bool = False) -> None:
        self.rows.append([cell if isinstance(cell, Cell) else Cell(cell) for cell in cells])
        self.reported.append(reported)


def fmt(value, digits: int = 4, signed: bool = False) -> str:
    """A number with ``digits`` decimals (and its sign, for a difference); "–" for a missing
    one, "yes"/"no" for a flag."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return "–"
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if isinstance(value, (float, np.floating)):
        return f"{value:{'+' if signed else ''}.{digits}f}"
    return str(value)


def sig(value, figures: int = 3) -> str:
    """A measurement to ``figures`` significant figures in plain notation, trailing zeros
    dropped (0.5, 0.0123, 250, 12300); "–" for a missing one. For times and rates whose size
    varies over decades, where fixed decimals print 0 or spurious digits."""
    if value is None or pd.isna(value):
        return "–"
    return np.format_float_positional(float(value), precision=figures, unique=True, fractional=False, trim="-")


def _difference(value, digits: int) -> str:
    return fmt(value, digits, signed=True)


def _interval(low, high, digits: int = 4, signed: bool = False) -> str:
    if pd.isna(low) and pd.isna(high):
        return "–"
    return f"[{fmt(low, digits, signed)}, {fmt(high, digits, signed)}]"


def _count(value) -> str:
    return fmt(value) if pd.isna(value) else f"{int(value):,}"


def _excess(value, low, high) -> str:
    return "–" if pd.isna(value) else f"{fmt(value)} {_interval(low, high)}"


def _mean_sd(mean, sd, seeds, most: int) -> str:
    """ "mean ± sd" over the seeds; a cell that rests on fewer seeds than the table's most says
    how many (a diverged or unfinished seed must not pass for a whole row), one with none says so."""
    if not seeds or pd.isna(mean):
        return "no finished run"
    text = f"{fmt(mean)} ± {fmt(sd)}" if seeds > 1 else fmt(mean)
    return text if seeds >= most else f"{text} ({int(seeds)} seed{'s' if seeds > 1 else ''})"


def _digits(metric: str) -> int:
    return 2 if metric == "accuracy" else 4


def verdict_view(verdict: pd.DataFrame) -> TableView:
    view = TableView(
        "verdict-table",
        "Verdict: the paper's claims, as measured",
        [
            ("claim", "text"),
            ("scale", "text"),
            ("seeds", ""),
            ("difference", ""),
            ("95% interval", ""),
            ("interval covers", "text"),
            ("paper's difference", "paper"),
            ("verdict", "text"),
        ],
    )
    for r in verdict.itertuples():
        digits = _digits(r.metric)
        view.add(
            [
                r.claim,
                fmt(r.scale),
                f"{r.model_seeds} / {r.baseline_seeds}",
                _difference(r.difference, digits),
                _interval(r.low, r.high, digits, signed=True),
                r.interval,
                _difference(r.paper_difference, digits),
                Cell(r.verdict, bold=True),
            ]
        )
    return view


def model_label(name: str) -> str:
    """A model's name in a table's header (:attr:`inn.models.ModelSpec.label`); a model whose
    module is not imported here shows its registry name."""
    from inn.models import MODELS

    return MODELS[name].label if name in MODELS else name


def table1_models(table1: pd.DataFrame) -> list[tuple[str, str]]:
    """(model, name) of Table 1's column groups, read from the table itself (its ``<model>_error``
    columns, so that a table of a model registered by a module of one's own shows it without
    that module): the registry's claimed model (the INN) always, every other implicit model that
    has a run, the swept baseline (the b-LSTM) last."""
    from inn.models import model_with_role

    claimed, swept = model_with_role("claimed"), model_with_role("swept")
    names = [
        c.removesuffix("_error")
        for c in table1.columns
        if c.endswith("_error") and not c.startswith("paper_") and c not in (f"{claimed}_error", f"{swept}_error")
    ]
    shown = [name for name in names if table1[f"{name}_error"].notna().any()]
    return [(name, model_label(name)) for name in (claimed, *shown, swept)]


def table1_view(table1: pd.DataFrame) -> TableView:
    models = table1_models(table1)
    (claimed, inn), (swept, blstm) = models[0], models[-1]
    columns = [("b", ""), ("floor", "")]
    for _, name in models:
        columns += [(f"{name} error", ""), (f"{name} excess [95% CI]", "")]
    columns += [
        (f"{blstm} size (best on dev)", ""),
        ("parameters: " + " / ".join(name for _, name in models), ""),
        ("ended by patience / cap", ""),
        (f"paper: {inn}", "paper"),
        (f"paper: {blstm}", "paper"),
    ]
    view = TableView("table1", "Table 1: biased random walks (per-step error)", columns)
    most = int(max(table1[f"{model}_seeds"].max() for model, _ in models)) if len(table1) else 0
    for r in table1.to_dict("records"):
        cells = [str(r["b"]), fmt(r["floor"])]
        for model, _ in models:
            cells += [
                _mean_sd(r[f"{model}_error"], r[f"{model}_error_std"], r[f"{model}_seeds"], most),
                _excess(r[f"{model}_excess"], r[f"{model}_excess_low"], r[f"{model}_excess_high"]),
            ]
        largest = " (largest tried)" if r.get(f"{swept}_best_is_largest") is True else ""
        cells += [
            fmt(r[f"{swept}_best_size"], 0) + largest,
            " / ".join(_count(r[f"{model}_parameters"]) for model, _ in models),
            f"{r['ended_by_patience']} / {r['ended_by_cap']}",
            fmt(r[f"paper_{claimed}_error"]),
            fmt(r[f"paper_{swept}_error"]),
        ]
        view.add(cells)
    return view


def table2_view(table2: pd.DataFrame) -> TableView:
    view = TableView(
        "table2",
        "Table 2: part-of-speech tagging (token accuracy, %)",
        [
            ("corpus", "text"),
            ("model", "text"),
            ("accuracy", ""),
            ("sd over seeds", ""),
            ("per seed", "text"),
            ("unseen-word accuracy", ""),
            ("seeds", ""),
            ("run", "text"),
            ("paper (WSJ)", "paper"),
        ],
    )
    for r in table2.itertuples():
        view.add(
            [
                r.corpus,
                r.name,
                fmt(r.accuracy, 2),
                fmt(r.accuracy_std, 2),
                fmt(r.accuracies, 2),
                fmt(r.unseen_accuracy, 2),
                fmt(r.seeds),
                r.run,
                fmt(r.paper_wsj_accuracy, 2),
            ],
            reported=r.run != "ours",
        )
    return view


def comparisons_view(comparisons: pd.DataFrame) -> TableView:
    view = TableView(
        "comparisons-table",
        "Paired comparisons",
        [
            ("task", "text"),
            ("data", "text"),
            ("model", "text"),
            ("baseline", "text"),
            ("model", ""),
            ("baseline", ""),
            ("difference", ""),
            ("95% interval", ""),
            ("interval covers", "text"),
            ("test set only", ""),
            ("seeds", ""),
            ("distinguishable", ""),
        ],
    )
    for r in comparisons.itertuples():
        digits = _digits(r.metric)
        view.add(
            [
                r.task,
                r.dataset,
                r.model,
                "Bayes floor" if r.baseline == "bayes" else r.baseline,
                fmt(r.model_value, digits),
                fmt(r.baseline_value, digits),
                Cell(_difference(r.difference, digits), bold=bool(r.distinguishable)),
                _interval(r.low, r.high, digits, signed=True),
                r.interval,
                _interval(r.test_low, r.test_high, digits, signed=True),
                f"{r.model_seeds} / {r.baseline_seeds}",
                fmt(bool(r.distinguishable)),
            ]
        )
    return view


def _per_seed(values: pd.Series) -> str:
    return ", ".join(fmt(v) if pd.isna(v) else f"{int(v)}" for v in values)


def runs_view(runs: pd.DataFrame) -> TableView:
    """One row per model and data set: how its seeds trained (epochs, best epoch, what ended
    them, seconds per epoch) and the test solves that missed tol, so that a reader sees whether
    the budget let every model finish. runs.tsv holds what each run's metrics.json holds, so a
    column may be missing (a run from before it was recorded): its cell is "–"."""
    view = TableView(
        "runs-table",
        "Training runs",
        [
            ("task", "text"),
            ("data", "text"),
            ("model", "text"),
            ("seeds", ""),
            ("parameters", ""),
            ("epochs, per seed", ""),
            ("best epoch, per seed", ""),
            ("ended by patience / cap", ""),
            ("s per epoch", ""),
            ("test solves missing tol", ""),
            ("device", "text"),
        ],
    )
    for (task, dataset, model), group in runs.groupby(["task", "dataset", "model"], sort=False):

        def column(name: str) -> pd.Series:
            return group[name] if name in group else pd.Series(np.nan, index=group.index)

        ended, seconds, missed = (
            column("ended_by"),
            column("seconds_per_epoch").dropna(),
            column("nonconverged").dropna(),
        )
        if seconds.empty:
            spent = "–"
        elif sig(seconds.min(), 2) == sig(seconds.max(), 2):
            spent = sig(seconds.min(), 2)
        else:
            spent = f"{sig(seconds.min(), 2)}-{sig(seconds.max(), 2)}"
        view.add(
            [
                task,
                dataset,
                model,
                str(len(group)),
                _count(column("parameters").iloc[0]),
                _per_seed(column("epochs")),
                _per_seed(column("best_epoch")),
                f"{(ended == 'patience').sum()} / {(ended == 'cap').sum()}" if ended.notna().any() else "–",
                spent,
                _count(missed.sum()) if not missed.empty else "–",
                ", ".join(sorted(set(column("device").dropna().astype(str)))) or "–",
            ]
        )
    return view


def _hours(values: pd.Series) -> str:
    """Per seed, two significant figures; "never" where a run did not get there."""
    return ", ".join("never" if pd.isna(v) else sig(v, 2) for v in values)


def cost_view(cost: pd.DataFrame) -> TableView:
    """One row per data set and model (``inn cost``): CPU hours to the best dev epoch and to the
    dev error of the best b-LSTM (the first epoch below it, and the epoch from which it stays
    below), beside the test error, per seed, and where the hours come from (the run's own
    history or the measured cost per batch)."""
    view = TableView(
        "cost-table",
        "What the error costs: CPU hours (one thread)",
        [
            ("data", "text"),
            ("model", "text"),
            ("test error, mean", ""),
            ("CPU s / epoch, first-last", ""),
            ("CPU h to best dev epoch, per seed", ""),
            ("best b-LSTM dev error", ""),
            ("CPU h to first below it", ""),
            ("CPU h from which it stays below", ""),
            ("hours from", "text"),
        ],
    )
    for (dataset, model), group in cost.groupby(["dataset", "model"], sort=False):
        view.add(
            [
                dataset,
                model,
                fmt(group.test_error.mean()),
                f"{sig(group.cpu_s_first_epoch.min(), 2)}-{sig(group.cpu_s_last_epoch.max(), 2)}",
                _hours(group.cpu_hours_to_best),
                fmt(group.target_dev.iloc[0]),
                _hours(group.cpu_hours_first_below),
                _hours(group.cpu_hours_stays_below),
                ", ".join(dict.fromkeys(group.get("hours_from", pd.Series(["measured per batch"])))),
            ]
        )
    return view


VIEWS = {
    "verdict": verdict_view,
    "table1": table1_view,
    "table2": table2_view,
    "comparisons": comparisons_view,
    "runs": runs_view,
    "cost": cost_view,
}


def read_table(path: str | Path | None) -> pd.DataFrame:
    """A collected table, or an empty frame where the run had none (no path, an empty or missing file)."""
    if not path or not Path(path).is_file() or Path(path).stat().st_size <= 1:
        return pd.DataFrame()
    return read_tsv(path)


def views(tables: str | Path) -> dict[str, TableView]:
    """The views of the tables in a folder written by ``inn collect``, for those it holds rows of
    (Table 2 only where it holds our runs, not the reported rows alone)."""
    found = {name: read_table(Path(tables) / f"{name}.tsv") for name in VIEWS}
    if not found["table2"].empty and not (found["table2"].run == "ours").any():
        found["table2"] = pd.DataFrame()  # only others' reported numbers: no tagging runs here
    shown = {}
    for name, frame in found.items():
        if frame.empty:
            continue
        try:
            shown[name] = VIEWS[name](frame)
        except (KeyError, AttributeError) as error:  # a row lacks a column: r["x"] or r.x
            column = error.args[0] if isinstance(error, KeyError) else getattr(error, "name", error)
            raise InnError(
                f"{Path(tables) / name}.tsv has no column {column!r}: an older inn collect wrote it; "
                "collect the runs again (inn collect --results ...)"
            ) from None
    return shown


def markdown(view: TableView) -> str:
    """The view as a Markdown (GitHub) table; bold cells in ``**``, pipes escaped."""

    def text(cell: Cell) -> str:
        value = cell.text.replace("|", "\\|")
        return f"**{value}**" if cell.bold and value else value

    lines = [
        "| " + " | ".join(header for header, _ in view.columns) + " |",
        "| " + " | ".join("---" for _ in view.columns) + " |",
    ]
    lines += ["| " + " | ".join(text(cell) for cell in row) + " |" for row in view.rows]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> None:
    """``inn markdown``: the verdict, Table 1, Table 2, the paired comparisons and the training
    runs of a tables folder (``results/tables``, or ``inn collect --out-dir``) as Markdown,
    formatted as in the report."""
    parser = argparse.ArgumentParser(prog="inn markdown", description=main.__doc__)
    parser.add_argument("tables", help="folder with verdict.tsv, table1.tsv, table2.tsv, comparisons.tsv, runs.tsv")
    parser.add_argument("--out", help="the Markdown file to write (default: standard output)")
    args = parser.parse_args(argv)
    if not Path(args.tables).is_dir():
        raise InnError(
            f"{args.tables}: no such folder; give the folder inn collect wrote (results/tables in a workflow run)"
        )
    shown = views(args.tables)
    if not shown:
        raise InnError(
            f"{args.tables}: holds none of verdict.tsv, table1.tsv, table2.tsv, comparisons.tsv, "
            "runs.tsv with rows; run inn collect (or the workflow's collect_tables) first"
        )
    text = "\n".join(f"### {view.title}\n\n{markdown(view)}" for view in shown.values())
    if args.out:
        with atomic_open(args.out, encoding="utf-8") as handle:
            handle.write(text)
    else:
        sys.stdout.write(text)
