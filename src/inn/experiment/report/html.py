"""The HTML report: one self-contained page with our Tables 1-2 and timing beside the paper's.

Everything shown comes from files the workflow wrote (tables, histories, timing measurements,
the implicit-layer benchmark) plus the configuration that produced them; the paper's numbers
come from :mod:`inn.experiment.report.paper` and are labelled as the paper's. This module
assembles the page from its parts: the figures (:mod:`~inn.experiment.report.figures`, PNGs
embedded as data URIs, so the page is one file that can be mailed or archived), the tables
(:mod:`~inn.experiment.report.views`, :mod:`~inn.experiment.report.tables`) and the provenance
(:mod:`~inn.experiment.report.provenance`).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
from collections.abc import Iterable
from pathlib import Path

import jinja2
import yaml

from inn.errors import InnError
from inn.experiment.config_runs import paper_corpora, pos_corpora
from inn.experiment.report import paper
from inn.experiment.report.cost import cost_figure
from inn.experiment.report.figures import figure_uri as figure_uri
from inn.experiment.report.figures import (
    learning_curves,
    optional_uri,
    solver_curves,
    table1_figure,
    table2_figure,
    timing_figure,
    walk_lengths_figure,
)
from inn.experiment.report.figures import learning_figure as learning_figure  # the old names, still found here
from inn.experiment.report.figures import solver_figure as solver_figure
from inn.experiment.report.figures import timing_plot as timing_plot
from inn.experiment.report.figures import walk_lengths_plot as walk_lengths_plot
from inn.experiment.report.provenance import LOCATIONS as LOCATIONS  # the old names, still found here
from inn.experiment.report.provenance import PACKAGES as PACKAGES
from inn.experiment.report.provenance import (
    device_description,
    git_revision,
    scale_differences,
    software_versions,
    training_devices,
)
from inn.experiment.report.runs import load_histories
from inn.experiment.report.tables import benchmark_tables, data_pos_view, data_walks_view, timing_view
from inn.experiment.report.views import fmt, read_table, views
from inn.io import atomic_open, refuse_inputs_as_outputs
from inn.models import model_with_role, paper_task, task_spec

TEMPLATES = Path(__file__).parent / "templates"


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
        cost_figure=optional_uri(cost_figure(read_table(tables / "cost.tsv"))),
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
