"""The report says what its measurements can and cannot claim, in units and words a reader
understands: fit quality and trust notes, readable data tables, numbers to significant figures."""

from __future__ import annotations

import io
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from inn.experiment.config import validate_config
from inn.experiment.report import render, walk_lengths_plot
from inn.experiment.report_tables import benchmark_quality, data_pos_view, data_walks_view, timing_view
from inn.experiment.timing import fit_table, measure, trust_notes
from inn.experiment.views import runs_view, sig
from inn.tables import write_tsv

REPO = Path(__file__).resolve().parents[1]
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"


def test_trust_notes_name_each_reason_a_timing_cannot_be_trusted():
    rising = pd.Series([0.1, 0.2, 0.4], index=[10, 20, 40])
    assert trust_notes(rising, r2=0.99, repeats=3, load=0.5, cores=2) == ""
    falling = pd.Series([0.3, 0.2, 0.4], index=[10, 20, 40])
    notes = trust_notes(falling, r2=0.15, repeats=1, load=3.7, cores=2)
    assert "r² 0.15 < 0.9" in notes and "one repeat per length" in notes
    assert "time falls as n grows (at n = 20)" in notes and "machine busy (load 3.7 on 2 cores)" in notes


def test_measure_records_the_load_and_fits_carry_their_quality():
    frame = measure(lambda xi, mask: xi * 2, lambda n: (np.ones(n), None), [4, 8, 16], repeats=1)
    assert "load" in frame and frame["load"].notna().all()
    frame["task"], frame["model"] = "pos", "inn"
    frame["seconds"] = [0.3, 0.2, 0.4]  # noise above the effect: a time that falls as n grows
    fit = fit_table(frame, ["task", "model"]).iloc[0]
    assert fit.repeats == 1 and fit.load == frame["load"].max()
    assert "one repeat per length" in fit.note and "time falls as n grows" in fit.note


def test_timing_table_gives_units_the_papers_fit_and_a_warning_for_a_poor_fit():
    fits = pd.DataFrame(
        [
            {
                "task": "pos",
                "dataset": "ewt",
                "model": "inn",
                "a": 0.0012345,
                "p": 1.5,
                "r2": 0.48,
                "points": 3,
                "n_min": 10,
                "n_max": 40,
                "repeats": 1,
                "load": 2.5,
                "note": "r² 0.48 < 0.9: the power law fits poorly",
                "paper_a": 0.29,
                "paper_p": 1.3,
            }
        ]
    )
    view = timing_view(fits, pd.DataFrame())
    headers = [h for h, _ in view.columns]
    assert "a (s per batch)" in headers and "paper: a (s per batch, K40)" in headers
    row = dict(zip(headers, (c.text for c in view.rows[0])))
    assert (row["a (s per batch)"], row["p"], row["r²"]) == ("0.00123", "1.5", "0.48")
    assert (row["paper: a (s per batch, K40)"], row["paper: p"], row["paper: r²"]) == ("0.29", "1.3", "0.91")
    assert row["repeats per n"] == "1" and row["can it be trusted?"].startswith("r² 0.48")


def test_benchmark_quality_flags_one_repeat_and_falling_times():
    group = pd.DataFrame(
        {
            "method": ["anderson"] * 3 + ["bigru"] * 3,
            "n": [10, 20, 40] * 2,
            "forward_backward_s": [0.3, 0.2, 0.5, 0.01, 0.02, 0.04],
            "repeats": [1, 1, 1, 5, 5, 5],
            "load": [0.1] * 6,
        }
    )
    quality = benchmark_quality(group)
    assert "one repeat" in quality.loc["anderson", "note"] and "falls" in quality.loc["anderson", "note"]
    assert quality.loc["bigru", "note"] == "" and quality.loc["bigru", "repeats"] == 5


def test_data_tables_have_readable_headers_and_honour_max_train():
    pos = pd.DataFrame(
        [
            {
                "corpus": "fr",
                "split": "train",
                "sentences": 14450,
                "tokens": 350000,
                "tag_types": 17,
                "oov_rate": 0.0123,
                "unseen_rate": 0.0456,
                "unseen_tag_tokens": 0,
            },
            {
                "corpus": "fr",
                "split": "test",
                "sentences": 416,
                "tokens": 10000,
                "tag_types": 17,
                "oov_rate": 0.05,
                "unseen_rate": 0.07,
                "unseen_tag_tokens": 2,
            },
        ]
    )
    view = data_pos_view(pos, {"max_train": 1500, "max_dev": None})
    headers = [h for h, _ in view.columns]
    assert not any("_" in h for h in headers)
    assert [c.text for c in view.rows[0]][2:4] == ["14,450", "1,500 (max_train)"]
    assert [c.text for c in view.rows[1]][3] == "416"  # the test split is always whole
    assert [c.text for c in view.rows[0]][6] == "1.23"  # per cent
    walks = pd.DataFrame(
        [
            {
                "b": 0.5,
                "split": "train",
                "sequences": 10000,
                "steps": 205000,
                "mean_length": 20.5,
                "label1_fraction": 0.42,
            }
        ]
    )
    row = [c.text for c in data_walks_view(walks, {"max_train": 30}).rows[0]]
    assert row[0] == "0.5" and row[3] == "30 (max_train)" and row[6] == "42.00"


def test_rendered_report_has_no_raw_column_names(tmp_path):
    tables = tmp_path / "tables"
    tables.mkdir()
    write_tsv(
        tables / "data_walks.tsv",
        pd.DataFrame(
            [
                {
                    "b": 0.5,
                    "split": "train",
                    "sequences": 100,
                    "steps": 2050,
                    "mean_length": 20.5,
                    "label1_fraction": 0.42,
                }
            ]
        ),
    )
    write_tsv(
        tables / "data_pos.tsv",
        pd.DataFrame(
            [
                {
                    "corpus": "ewt",
                    "split": "train",
                    "sentences": 100,
                    "tokens": 1000,
                    "tag_types": 40,
                    "oov_rate": 0.01,
                    "unseen_rate": 0.02,
                    "unseen_tag_tokens": 0,
                }
            ]
        ),
    )
    config = validate_config({"training": {"pos": {"max_train": 30}}}, SCHEMA)
    html = render(config=config, schema=SCHEMA, tables=tables, repo=REPO)
    for raw in ("oov_rate", "unseen_rate", "label1_fraction", "mean_length", "0.5000"):
        assert raw not in html.split("<h3>Configuration</h3>")[0], raw
    walks = pd.read_html(io.StringIO(html), attrs={"id": "data-walks"})[0]
    assert walks["bias b"].tolist() == [0.5]
    pos = pd.read_html(io.StringIO(html), attrs={"id": "data-pos"})[0]
    assert pos["sentences used"].tolist() == ["30 (max_train)"]
    assert "t = 0.29 s &middot; n<sup>1.3</sup>" in html


def test_walk_length_histogram_is_bars():
    lengths = pd.DataFrame(
        {"b": [0.5] * 3 + [2.0] * 3, "split": "train", "length": [1, 2, 3] * 2, "count": [5, 7, 6, 4, 8, 5]}
    )
    fig = walk_lengths_plot(lengths)
    ax = fig.axes[0]
    assert len(ax.patches) == 6 and not ax.lines
    plt.close(fig)


@pytest.mark.parametrize("value, text", [(0.5, "0.5"), (0.0123456, "0.0123"), (250.4, "250"), (2.0, "2")])
def test_significant_figures(value, text):
    assert sig(value) == text


def test_seconds_per_epoch_are_not_rounded_to_zero():
    runs = pd.DataFrame(
        {"task": "pos", "dataset": "ewt", "model": "perceptron", "seed": [1, 2], "seconds_per_epoch": [0.31, 0.34]}
    )
    row = dict(zip((h for h, _ in runs_view(runs).columns), (c.text for c in runs_view(runs).rows[0])))
    assert row["s per epoch"] == "0.31-0.34"
