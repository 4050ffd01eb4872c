"""The CPU hours of Table 1's runs (inn.experiment.cost) follow from the measured cost per batch
and each archived epoch's history, computed here again by hand."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from inn.errors import InnError
from inn.experiment.cli import main as cli
from inn.experiment.cost import _below, cost_table, fit_line, own_cpu_seconds

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "archive" / "paper_walks" / "results"

#: a made-up measurement: the b-LSTM 100 at two points, the INN at three (iterations 20, 30, 50)
MEASURED = pd.DataFrame(
    [
        {
            "model": "bilstm-h100",
            "cpu_s_per_batch": 0.020,
            "newton_iters": np.nan,
            "backward_iters": np.nan,
            "dev_cpu_s_per_walk": 0.0004,
        },
        {
            "model": "bilstm-h100",
            "cpu_s_per_batch": 0.024,
            "newton_iters": np.nan,
            "backward_iters": np.nan,
            "dev_cpu_s_per_walk": 0.0006,
        },
        {
            "model": "inn",
            "cpu_s_per_batch": 0.30,
            "newton_iters": 10,
            "backward_iters": 10,
            "dev_cpu_s_per_walk": 0.002,
        },
        {
            "model": "inn",
            "cpu_s_per_batch": 0.40,
            "newton_iters": 12,
            "backward_iters": 18,
            "dev_cpu_s_per_walk": 0.003,
        },
        {
            "model": "inn",
            "cpu_s_per_batch": 0.60,
            "newton_iters": 20,
            "backward_iters": 30,
            "dev_cpu_s_per_walk": 0.004,
        },
    ]
)


def test_a_line_through_exact_points_is_found_with_r2_one():
    line = fit_line(np.array([20.0, 30.0, 50.0]), np.array([0.3, 0.4, 0.6]))
    assert line.slope == pytest.approx(0.01) and line.intercept == pytest.approx(0.1) and line.r2 == pytest.approx(1)
    constant = fit_line(None, np.array([0.02, 0.024]))
    assert constant(123.0) == pytest.approx(0.022) and constant.slope == 0


@pytest.mark.parametrize(
    "dev, first, stays",
    [
        ([0.3, 0.2, 0.1, 0.09], 2, 2),  # at the target in epoch 2, below from 3 on
        ([0.1, 0.3, 0.1, 0.05], 1, 3),  # below at 1, above at 2, below from 3 on
        ([0.1, 0.3, 0.1, 0.3], 1, None),  # ends above: never stays below
        ([0.3, 0.3], None, None),  # never below
        ([0.1, 0.1], 1, 1),
    ],
)
def test_first_epoch_at_or_below_and_the_epoch_it_stays_there_from(dev, first, stays):
    assert _below(np.array(dev), 0.2) == (first, stays)


def test_hours_of_an_archived_run_are_its_epochs_costs_summed():
    table = cost_table([RESULTS], MEASURED).set_index(["dataset", "model", "seed"])
    batches, dev_walks = 2500, 2500  # 50,000 training walks in batches of 20; 2,500 dev walks
    # a b-LSTM: the same cost every epoch, the mean of its points
    bilstm = table.loc[("b1.0", "bilstm-h100", 1)]
    epoch = batches * 0.022 + dev_walks * 0.0005
    assert bilstm.cpu_hours_to_best == pytest.approx(bilstm.best_epoch * epoch / 3600)
    # the INN: each epoch's cost from its own iterations (batch: 0.1 + 0.01 * iterations)
    history = pd.read_csv(RESULTS / "train/walks/b1.0/inn/seed2/history.tsv", sep="\t")
    dev_line = fit_line(np.array([10.0, 12.0, 20.0]), np.array([0.002, 0.003, 0.004]))
    seconds = [
        batches * (0.1 + 0.01 * (r.newton_iters + r.backward_iters)) + dev_walks * dev_line(r.newton_iters)
        for r in history.itertuples()
    ]
    inn = table.loc[("b1.0", "inn", 2)]
    best = int(history.dev_error.idxmin()) + 1
    assert inn.best_epoch == best and inn.cpu_hours_to_best == pytest.approx(sum(seconds[:best]) / 3600)
    # the target is the best dev error of the b-LSTM size with the lowest mean best dev error on
    # the seeds every size has, from the histories themselves
    best_dev = {
        (int(path.parent.parent.name.removeprefix("bilstm-h")), path.parent.name): pd.read_csv(
            path, sep="\t"
        ).dev_error.min()
        for path in (RESULTS / "train/walks/b1.0").glob("bilstm-h*/seed*/history.tsv")
    }
    sizes = {size for size, _ in best_dev}
    common = set.intersection(*({seed for s, seed in best_dev if s == size} for size in sizes))
    chosen = min(sizes, key=lambda size: np.mean([best_dev[size, seed] for seed in common]))
    assert inn.target_dev == pytest.approx(min(v for (size, _), v in best_dev.items() if size == chosen))
    first = int(np.argmax(history.dev_error.to_numpy() <= inn.target_dev)) + 1
    assert inn.first_below == first and inn.cpu_hours_first_below == pytest.approx(sum(seconds[:first]) / 3600)
    assert inn.fit_r2 == pytest.approx(1) and inn.fit_points == 3
    assert ("b1.0", "bilstm-h1000", 1) not in table.index  # not measured: no row, no made-up hours
    assert inn.hours_from == "measured per batch"  # its history records no CPU seconds


def test_a_run_whose_history_records_its_cpu_seconds_is_costed_from_them():
    """b = 2's INN (231d5d2) records each epoch's process CPU seconds: its hours are their sums,
    whatever the measurement says an INN's batch costs."""
    table = cost_table([RESULTS], MEASURED).set_index(["dataset", "model", "seed"])
    history = pd.read_csv(RESULTS / "train/walks/b2.0/inn/seed1/history.tsv", sep="\t")
    inn = table.loc[("b2.0", "inn", 1)]
    best = int(history.dev_error.idxmin()) + 1
    assert inn.hours_from == "its history" and np.isnan(inn.fit_r2)
    assert inn.cpu_hours_to_best == pytest.approx(history.cpu_seconds[:best].sum() / 3600)
    assert inn.cpu_hours_total == pytest.approx(history.cpu_seconds.sum() / 3600)
    assert inn.cpu_s_first_epoch == pytest.approx(history.cpu_seconds.iloc[0])


@pytest.mark.parametrize(
    "columns, own",
    [
        ({"cpu_seconds": [10.0, 12.0], "device": ["cpu", "cpu"]}, [10.0, 12.0]),
        ({"cpu_seconds": [10.0, 12.0]}, [10.0, 12.0]),
        ({"cpu_seconds": [10.0, 12.0], "device": ["cpu", "cuda"]}, None),  # a GPU epoch's CPU time is not its cost
        ({"cpu_seconds": [10.0, np.nan], "device": ["cpu", "cpu"]}, None),  # an epoch without
        ({"device": ["cpu", "cpu"]}, None),
    ],
)
def test_a_runs_own_cpu_seconds_count_only_where_every_epoch_has_them_on_the_cpu(columns, own):
    seconds = own_cpu_seconds(pd.DataFrame({"epoch": [1, 2], **columns}))
    assert (seconds is None) if own is None else list(seconds) == own


def test_inn_cost_writes_the_table_and_names_a_missing_measurement(tmp_path, capsys):
    measured = tmp_path / "measured.tsv"
    MEASURED.to_csv(measured, sep="\t", index=False)
    assert cli(["cost", "--results", str(RESULTS), "--measured", str(measured), "--out", str(tmp_path / "c.tsv")]) == 0
    assert len(pd.read_csv(tmp_path / "c.tsv", sep="\t")) > 10
    assert cli(["cost", "--results", str(RESULTS), "--measured", str(tmp_path / "no.tsv"), "--out", "x"]) == 2
    assert "no such file" in capsys.readouterr().err
    with pytest.raises(InnError, match="lacks the column"):
        cost_table([RESULTS], MEASURED.drop(columns="dev_cpu_s_per_walk"))


def test_the_cost_table_is_a_view_of_the_report_and_a_figure(tmp_path):
    from inn.experiment.cost import cost_figure
    from inn.experiment.views import markdown, views
    from inn.tables import write_tsv

    table = cost_table([RESULTS], MEASURED)
    write_tsv(tmp_path / "cost.tsv", table)
    shown = views(tmp_path)["cost"]
    inn = next(row for row in shown.rows if row[0].text == "b1.0" and row[1].text == "inn")
    seeds = len(list((RESULTS / "eval/walks/b1.0/inn").glob("seed*/metrics.json")))  # the archive grows
    assert "never" not in inn[6].text and len(inn[4].text.split(", ")) == seeds >= 2  # every seed below the b-LSTM
    assert "CPU h to best dev epoch" in markdown(shown)
    assert cost_figure(table) is not None and cost_figure(table.iloc[:0]) is None
