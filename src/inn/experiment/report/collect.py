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

The tables are made by a module each (:mod:`~inn.experiment.report.table1`,
:mod:`~inn.experiment.report.table2`, :mod:`~inn.experiment.report.verdicts`), from the runs
that :mod:`~inn.experiment.report.runs` finds and reads; this module is the command.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

# The `X as X` imports keep the old module's names found here for a release (CHANGELOG.md).
from inn.experiment.report.checks import check_floors
from inn.experiment.report.comparisons import BOOTSTRAP_SEED as BOOTSTRAP_SEED
from inn.experiment.report.comparisons import COMPARISON_COLUMNS
from inn.experiment.report.runs import FLOOR_PATH as FLOOR_PATH
from inn.experiment.report.runs import RUN_PATH as RUN_PATH
from inn.experiment.report.runs import SIZED as SIZED
from inn.experiment.report.runs import find_run_files, load_floors, load_runs
from inn.experiment.report.runs import run_key as run_key
from inn.experiment.report.runs import run_label as run_label
from inn.experiment.report.table1 import best_bilstm as best_bilstm
from inn.experiment.report.table1 import matched_bilstm as matched_bilstm
from inn.experiment.report.table1 import table1
from inn.experiment.report.table2 import table2
from inn.experiment.report.verdicts import VERDICT_COLUMNS as VERDICT_COLUMNS
from inn.experiment.report.verdicts import default_paper_corpora as default_paper_corpora
from inn.experiment.report.verdicts import verdicts
from inn.io import check_out_dir, refuse_inputs_as_outputs
from inn.tables import read_tsv, write_tsv


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
    check_floors(runs, floors)
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
