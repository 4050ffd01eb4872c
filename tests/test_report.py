"""Collecting runs into Tables 1-2, the timing fits, and the HTML report built from them."""

from __future__ import annotations

import io
import json
from pathlib import Path

import lxml.html
import numpy as np
import pandas as pd
import pytest
from conftest import REPO, collect_tables

from inn.errors import InnError
from inn.experiment import paper
from inn.experiment.collect import main as collect_main
from inn.experiment.collect import verdicts as collect_verdicts
from inn.experiment.config import paper_corpora, validate_config
from inn.experiment.report import (
    learning_figure,
    render,
    scale_differences,
    solver_figure,
    timing_plot,
    training_devices,
)
from inn.experiment.timing import fit_power_law, fit_table
from inn.tables import read_tsv, write_tsv

SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"


UNITS, PER_UNIT = 40, 5  # test sentences (or walks) of fake runs, tokens (or steps) each


def fake_predictions(task: str, score: float) -> pd.DataFrame:
    """A predictions.tsv whose accuracy (POS, %) or error (walks) is ``score``: the first items wrong."""
    unit = "sentence" if task == "pos" else "sequence"
    total = UNITS * PER_UNIT
    wrong = round(total * (1 - score / 100) if task == "pos" else total * score)
    gold = np.zeros(total, dtype=int)
    predicted = np.where(np.arange(total) < wrong, 1, 0)
    return pd.DataFrame({unit: np.repeat(np.arange(UNITS), PER_UNIT), "gold": gold, "predicted": predicted})


def fake_run(root: Path, task: str, dataset: str, model: str, seed: int, test: float, dev: list[float], **extra):
    """The files a training and an evaluation job leave, with chosen numbers."""
    metric = "accuracy" if task == "pos" else "error"
    train = root / "train" / task / dataset / model / f"seed{seed}"
    train.mkdir(parents=True)
    history = pd.DataFrame(
        {"epoch": range(1, len(dev) + 1), "train_loss": np.linspace(2, 1, len(dev)), f"dev_{metric}": dev}
    )
    if model == "inn":
        history["newton_iters"], history["krylov_iters"], history["nonconverged"] = 3.0, 20.0, 0
    write_tsv(train / "history.tsv", history)
    evaluation = root / "eval" / task / dataset / model / f"seed{seed}"
    evaluation.mkdir(parents=True)
    (evaluation / "metrics.json").write_text(
        json.dumps(
            {
                "task": task,
                "dataset": dataset,
                "model": model,
                "seed": seed,
                metric: test,
                "per_tag": {"NN": 90.0},
                **extra,
            }
        )
    )
    write_tsv(evaluation / "predictions.tsv", fake_predictions(task, test))
    return evaluation / "metrics.json", train / "history.tsv"


def fake_floor(root: Path, dataset: str, error: float, **row) -> Path:
    """The folder of a walks data set with its floor (the Bayes error ``error``, the floor.tsv
    row's other columns ``row``) and the floor's predictions."""
    folder = root / "data" / "walks" / dataset
    folder.mkdir(parents=True)
    write_tsv(
        folder / "floor.tsv",
        pd.DataFrame([{**row, "sequences": UNITS, "steps": UNITS * PER_UNIT, "bayes_error": error}]),
    )
    write_tsv(folder / "floor_predictions.tsv", fake_predictions("walks", error))
    return folder


def collect_fake_runs(out: Path, files: list[tuple[Path, Path]], floors: list[Path]) -> Path:
    """``inn collect`` of fake runs (``fake_run``'s files) and floors (``fake_floor``'s folders)
    into ``out``."""
    return collect_tables(
        out,
        metrics=[m for m, _ in files],
        histories=[h for _, h in files],
        predictions=[m.parent / "predictions.tsv" for m, _ in files],
        floors=[f / "floor.tsv" for f in floors],
        floor_predictions=[f / "floor_predictions.tsv" for f in floors],
        corpora=["ewt"],
    )


WALK_TRAINING = {"max_epochs": 6, "patience": 3}


@pytest.fixture
def runs(tmp_path):
    files = [
        # patience 3, cap 6: the INN's seed 1 ended by patience (best epoch 2 of 5), seed 2 by the cap
        fake_run(
            tmp_path,
            "walks",
            "b0.5",
            "inn",
            1,
            0.12,
            [0.2, 0.15],
            parameters=24065,
            epochs=5,
            best_epoch=2,
            training=WALK_TRAINING,
        ),
        fake_run(
            tmp_path,
            "walks",
            "b0.5",
            "inn",
            2,
            0.14,
            [0.2, 0.16],
            parameters=24065,
            epochs=6,
            best_epoch=6,
            training=WALK_TRAINING,
        ),
        # the bigger b-LSTM is better on test but worse on dev: dev decides.
        fake_run(
            tmp_path,
            "walks",
            "b0.5",
            "bilstm-h100",
            1,
            0.15,
            [0.2, 0.14],
            parameters=89801,
            epochs=6,
            best_epoch=3,
            training=WALK_TRAINING,
        ),
        fake_run(tmp_path, "walks", "b0.5", "bilstm-h300", 1, 0.13, [0.2, 0.18], parameters=749401),
        fake_run(tmp_path, "walks", "b2", "inn", 1, 0.03, [0.05]),
        fake_run(tmp_path, "pos", "ewt", "bilstm", 1, 93.0, [90.0, 92.0], unseen_accuracy=80.0),
        fake_run(tmp_path, "pos", "ewt", "inn", 1, 93.5, [91.0, 92.5], unseen_accuracy=81.0),
        fake_run(tmp_path, "pos", "ewt", "perceptron", 1, 92.0, [92.0], unseen_accuracy=70.0),
    ]
    floors = [
        fake_floor(tmp_path, dataset, error, b=b, direction="gaussian", dim=10)
        for dataset, b, error in (("b0.5", 0.5, 0.1), ("b2", 2.0, 0.01))
    ]
    collect_fake_runs(tmp_path / "tables", files, floors)
    return tmp_path, [h for _, h in files]


def test_table1_means_seeds_and_picks_the_blstm_size_on_dev(runs):
    root, _ = runs
    t1 = pd.read_csv(root / "tables/table1.tsv", sep="\t").set_index("b")
    assert list(t1.index) == [2.0, 0.5]
    assert t1.loc[0.5, "inn_error"] == pytest.approx(0.13) and t1.loc[0.5, "inn_seeds"] == 2
    assert t1.loc[0.5, "bilstm_best_size"] == 100 and t1.loc[0.5, "bilstm_error"] == pytest.approx(0.15)
    assert t1.loc[0.5, "paper_inn_error"] == paper.TABLE1[0.5]["inn"]
    assert np.isnan(t1.loc[2.0, "bilstm_error"])
    assert t1.loc[0.5, "inn_errors"] == "0.1200,0.1400" and t1.loc[0.5, "inn_error_std"] == pytest.approx(
        0.02**0.5 / 10, rel=1e-5
    )
    # The floor and each model's excess over it, with a paired interval around the excess.
    assert t1.loc[0.5, "floor"] == 0.1 and t1.loc[0.5, "inn_excess"] == pytest.approx(0.03)
    assert t1.loc[0.5, "inn_excess_low"] <= 0.03 <= t1.loc[0.5, "inn_excess_high"]
    assert t1.loc[2.0, "bilstm_seeds"] == 0 and t1.loc[2.0, "inn_excess"] == pytest.approx(0.02)
    # Every model's size, and what ended its runs (the b-LSTM 300's metrics say nothing of it).
    assert t1.loc[0.5, "inn_parameters"] == 24065 and t1.loc[0.5, "bilstm_parameters"] == 89801
    assert t1.loc[0.5, "bilstm_sizes"] == "100 units (89,801 parameters); 300 units (749,401 parameters)"
    assert (t1.loc[0.5, "ended_by_patience"], t1.loc[0.5, "ended_by_cap"]) == (2, 1)


def test_paired_comparisons_cover_every_implicit_model_and_the_floor(runs):
    root, _ = runs
    c = pd.read_csv(root / "tables/comparisons.tsv", sep="\t")
    pairs = {(r.task, r.dataset, r.model, r.baseline) for r in c.itertuples()}
    assert pairs == {
        ("pos", "ewt", "inn", "bilstm"),
        ("pos", "ewt", "inn", "perceptron"),
        ("walks", "b0.5", "inn", "bayes"),
        ("walks", "b0.5", "bilstm-h100", "bayes"),
        ("walks", "b0.5", "inn", "bilstm-h100"),
        ("walks", "b2", "inn", "bayes"),
    }
    row = c.set_index(["dataset", "model", "baseline"]).loc[("ewt", "inn", "bilstm")]
    assert row.difference == pytest.approx(0.5) and row.metric == "accuracy" and row.units == 40
    assert row.low <= 0.5 <= row.high
    # Walks: INN seeds 0.12 and 0.14 pooled, against the b-LSTM 100's 0.15.
    row = c.set_index(["dataset", "model", "baseline"]).loc[("b0.5", "inn", "bilstm-h100")]
    assert row.difference == pytest.approx(-0.02) and row.model_seeds == 2 and row.baseline_seeds == 1
    # One seed on a side: the interval is the test set's, and says so.
    assert row.interval == "test set only (one seed)" and (row.low, row.high) == (row.test_low, row.test_high)
    # Against the floor (a fixed rule), the INN's two seeds (0.12, 0.14) widen the interval.
    row = c.set_index(["dataset", "model", "baseline"]).loc[("b0.5", "inn", "bayes")]
    assert row.interval == "seeds and test set" and row.baseline_seeds == 0
    assert row.low < row.test_low and row.high > row.test_high


def test_collect_finds_a_results_folders_runs_itself(runs, tmp_path):
    """``--results`` gives the tables the file lists give; a run given twice stops with one line."""
    root, _ = runs
    collect_main(["--results", str(root), "--corpora", "ewt", "--out-dir", str(tmp_path / "found")])
    for name in ("table1", "table2", "comparisons", "verdict", "runs"):
        expected = pd.read_csv(root / "tables" / f"{name}.tsv", sep="\t")
        pd.testing.assert_frame_equal(
            pd.read_csv(tmp_path / "found" / f"{name}.tsv", sep="\t"), expected, check_like=True
        )
    with pytest.raises(InnError, match="the same run as .* seeds would count twice"):
        collect_main(["--results", str(root), str(root), "--out-dir", str(tmp_path / "twice")])
    with pytest.raises(InnError, match="no finished runs"):
        collect_main(["--results", str(root / "data"), "--out-dir", str(tmp_path / "none")])
    # a seed of another scale in a second folder is not pooled with the first's
    other = tmp_path / "other"
    fake_run(other, "walks", "b0.5", "inn", 3, 0.12, [0.2, 0.15], hidden_size=200, scale="paper")
    fake_run(other, "walks", "b0.5", "inn", 4, 0.12, [0.2, 0.15], hidden_size=64, scale="comparison")
    with pytest.raises(InnError, match="walks b0.5 inn: its seeds come from different scales .*seed 3: paper"):
        collect_main(["--results", str(root), str(other), "--out-dir", str(tmp_path / "mixed")])
    # archived runs keep their predictions gzip-compressed: the same tables
    import gzip

    for path in [*root.glob("eval/*/*/*/seed*/predictions.tsv"), *root.glob("data/walks/*/floor_predictions.tsv")]:
        path.with_name(path.name + ".gz").write_bytes(gzip.compress(path.read_bytes()))
        path.unlink()
    collect_main(["--results", str(root), "--corpora", "ewt", "--out-dir", str(tmp_path / "gz")])
    for name in ("table1", "comparisons", "verdict"):
        pd.testing.assert_frame_equal(
            pd.read_csv(tmp_path / "gz" / f"{name}.tsv", sep="\t"),
            pd.read_csv(root / "tables" / f"{name}.tsv", sep="\t"),
            check_like=True,
        )
    (root / "eval/pos/ewt/inn/seed1/predictions.tsv.gz").unlink()
    with pytest.raises(InnError, match="inn/seed1/metrics.json: its predictions.tsv is missing"):
        collect_main(["--results", str(root), "--out-dir", str(tmp_path / "partial")])


def test_collect_refuses_runs_that_would_make_a_wrong_table(runs, tmp_path):
    """Every way of mixing runs that would average or compare unlike things stops with one line."""
    root, _ = runs
    out = str(tmp_path / "out")
    metrics = sorted(map(str, root.glob("eval/*/*/*/seed*/metrics.json")))
    histories = [m.replace("/eval/", "/train/").replace("metrics.json", "history.tsv") for m in metrics]
    predictions = [m.replace("metrics.json", "predictions.tsv") for m in metrics]
    floors = sorted(map(str, root.glob("data/walks/*/floor.tsv")))
    base = ["--histories", *histories, "--floors", *floors, "--corpora", "ewt", "--out-dir", out]

    def collect(*args):
        collect_main(["--metrics", *metrics, *args, *base])

    with pytest.raises(InnError, match=r"no predictions.tsv for 1 of 8 runs \(first: pos ewt bilstm seed 1\)"):
        collect("--predictions", *predictions[1:])
    with pytest.raises(InnError, match="tagging runs of ewt but --corpora names none"):
        collect_main(
            ["--metrics", *metrics, "--predictions", *predictions, "--histories", *histories, "--out-dir", out]
        )
    with pytest.raises(InnError, match="no dev score for walks b0.5 bilstm-h300 seed 1"):
        collect_main(
            [
                "--metrics",
                *metrics,
                "--predictions",
                *predictions,
                "--corpora",
                "ewt",
                "--histories",
                *[h for h in histories if "h300" not in h],
                "--out-dir",
                out,
            ]
        )
    # a second floor of b0.5 from other walks
    other = tmp_path / "other" / "walks" / "b0.5"
    other.mkdir(parents=True)
    write_tsv(other / "floor.tsv", pd.read_csv(floors[0], sep="\t").assign(bayes_error=0.3))
    with pytest.raises(InnError, match="another floor of b0.5"):
        collect_main(
            [
                "--metrics",
                *metrics,
                "--predictions",
                *predictions,
                "--histories",
                *histories,
                "--floors",
                *floors,
                str(other / "floor.tsv"),
                "--corpora",
                "ewt",
                "--out-dir",
                out,
            ]
        )
    # an evaluation of the dev split, and a run in another run's folder
    bilstm = root / "eval/pos/ewt/bilstm/seed1/metrics.json"
    record = json.loads(bilstm.read_text())
    bilstm.write_text(json.dumps({**record, "split": "dev"}))
    with pytest.raises(InnError, match="scores the dev split, not the whole test split"):
        collect("--predictions", *predictions)
    bilstm.write_text(json.dumps({**record, "seed": 2}))
    with pytest.raises(InnError, match="folder says pos ewt bilstm seed 1 but the file says pos ewt bilstm seed 2"):
        collect("--predictions", *predictions)
    bilstm.write_text(json.dumps(record))
    # two INN sizes would share one row
    fake_run(root, "walks", "b0.5", "inn-h64", 1, 0.12, [0.2, 0.15])
    with pytest.raises(InnError, match="runs of inn, inn-h64 would share the inn row"):
        collect_main(["--results", str(root), "--out-dir", out])


def test_collect_compares_only_runs_of_one_data_set(runs, tmp_path):
    """Walks of another dim or direction have the same labels: the data's fingerprint, of every
    model and of the floor, keeps them apart; one b-LSTM size under two names is not pooled."""
    root, _ = runs
    out = str(tmp_path / "out")
    for model in ("inn/seed1", "inn/seed2", "bilstm-h100/seed1", "bilstm-h300/seed1"):
        path = root / f"eval/walks/b0.5/{model}/metrics.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), "data_fingerprint": "aaaa"}))
    collect_main(["--results", str(root), "--out-dir", out])  # one data set: collected
    floor = root / "data/walks/b0.5/floor.tsv"
    write_tsv(floor, read_tsv(floor).assign(data_fingerprint="bbbb"))
    with pytest.raises(InnError, match=r"walks b0.5: its floor was computed on other walks \(data bbbb\)"):
        collect_main(["--results", str(root), "--out-dir", out])
    write_tsv(floor, read_tsv(floor).assign(data_fingerprint="aaaa"))
    collect_main(["--results", str(root), "--out-dir", out])
    path = root / "eval/walks/b0.5/bilstm-h300/seed1/metrics.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "data_fingerprint": "cccc"}))
    with pytest.raises(
        InnError,
        match=r"walks b0.5: its runs learnt from different data \(bilstm-h100: aaaa, "
        r"bilstm-h300: cccc, inn: aaaa\)",
    ):
        collect_main(["--results", str(root), "--out-dir", out])
    path.write_text(json.dumps({**json.loads(path.read_text()), "data_fingerprint": "aaaa"}))
    fake_run(root, "walks", "b0.5", "bilstm", 2, 0.15, [0.2, 0.14], hidden_size=100)
    with pytest.raises(InnError, match=r"walks b0.5: bilstm, bilstm-h100 are one size \(100 units\) under two names"):
        collect_main(["--results", str(root), "--out-dir", out])


def test_verdicts_follow_the_papers_direction(runs):
    root, _ = runs
    v = pd.read_csv(root / "tables/verdict.tsv", sep="\t").set_index(["dataset", "baseline"])
    # b = 2 is not a claim of the paper (its INN was behind there); the perceptron is not the paper's.
    assert set(v.index) == {("b0.5", "bilstm-h100"), ("ewt", "bilstm")}
    assert v.loc[("ewt", "bilstm"), "paper_difference"] == pytest.approx(97.37 - 97.25)
    assert v.loc[("b0.5", "bilstm-h100"), "verdict"].endswith("on one seed (test-set interval)")
    rows = [
        {
            "task": "walks",
            "dataset": "b0.5",
            "scale": "paper",
            "model": "inn",
            "baseline": "bilstm-h300",
            "metric": "error",
            "difference": d,
            "low": lo,
            "high": hi,
            "interval": "seeds and test set",
            "model_seeds": 3,
            "baseline_seeds": 3,
        }
        for d, lo, hi in ((-0.01, -0.02, -0.005), (0.01, 0.005, 0.02), (0.0, -0.01, 0.01))
    ]
    rows.append(
        {
            **rows[0],
            "task": "pos",
            "dataset": "ewt",
            "baseline": "bigru",
            "metric": "accuracy",
            "difference": -0.4,
            "low": -0.6,
            "high": -0.2,
        }
    )
    verdicts = collect_verdicts(pd.DataFrame(rows)).verdict.tolist()
    assert verdicts == ["reproduced", "not reproduced", "inconclusive", "not reproduced"]


def test_a_corpus_of_ones_own_gets_comparisons_but_no_verdict_against_the_paper():
    """A French UPOS corpus is not the paper's WSJ nor its declared stand-in: its INN-vs-baseline
    comparison carries no verdict row; the same comparison on a declared stand-in does."""
    row = {
        "task": "pos",
        "scale": "quick",
        "model": "inn",
        "baseline": "bilstm",
        "metric": "accuracy",
        "difference": -0.4,
        "low": -0.6,
        "high": -0.2,
        "interval": "seeds and test set",
        "model_seeds": 3,
        "baseline_seeds": 3,
    }
    comparisons = pd.DataFrame([{**row, "dataset": "fr_gsd"}, {**row, "dataset": "ewt"}])
    assert collect_verdicts(comparisons, paper_corpora=["ewt"]).dataset.tolist() == ["ewt"]
    assert collect_verdicts(comparisons).dataset.tolist() == ["ewt"]  # the schema's declared corpora
    assert collect_verdicts(comparisons, paper_corpora=[]).empty
    own = validate_config(
        {
            "corpora": {
                "fr_gsd": {"format": "tsv", "train": "a", "dev": "b", "test": "c"},
                "ewt": {"enabled": False},
                "ptb_sample": {"enabled": False},
            }
        },
        SCHEMA,
    )
    assert paper_corpora(own) == {}
    assert paper_corpora(validate_config({}, SCHEMA)) == {"ewt": "stand-in", "ptb_sample": "stand-in"}


def test_table2_orders_models_and_labels_reported_rows(runs):
    root, _ = runs
    t2 = pd.read_csv(root / "tables/table2.tsv", sep="\t")
    ours = t2[t2.run == "ours"]
    assert ours.model.tolist() == ["bilstm", "inn", "perceptron"]
    assert ours.set_index("model").loc["inn", "paper_wsj_accuracy"] == 97.37
    stanford = t2[t2.model == "stanford"].iloc[0]
    assert np.isnan(stanford.accuracy) and stanford.paper_wsj_accuracy == 97.33 and "not run" in stanford.run


@pytest.mark.parametrize("column, shown", [("xpos", True), (None, True), ("upos", False)])
def test_table2_shows_a_reported_reference_only_beside_runs_of_its_tag_column(tmp_path, column, shown):
    """UDPipe's EWT figure is XPOS accuracy: beside a UPOS run it would compare two tasks. Runs
    evaluated before the column was recorded (None) are of the corpus's default column, XPOS."""
    extra = {} if column is None else {"tag_column": column}
    fake_run(tmp_path, "pos", "ewt", "inn", 1, 93.5, [92.5], **extra)
    collect_main(["--results", str(tmp_path), "--out-dir", str(tmp_path / "t")])
    t2 = read_tsv(tmp_path / "t/table2.tsv")
    reference = t2[t2.model == "reference"]
    assert len(reference) == shown
    if shown:
        assert "XPOS" in reference.name.iloc[0] and reference.accuracy.iloc[0] == 97.1


def test_power_law_fit_recovers_exponent():
    n = np.array([10, 20, 40, 80, 160])
    a, p, r2 = fit_power_law(n, 0.003 * n**1.1)
    assert a == pytest.approx(0.003) and p == pytest.approx(1.1) and r2 == pytest.approx(1.0)
    rng = np.random.default_rng(0)
    noisy = pd.DataFrame(
        {
            "task": "pos",
            "model": "inn",
            "n": np.repeat(n, 3),
            "seconds": np.repeat(0.01 * n**1.3, 3) * rng.lognormal(0, 0.05, 15),
        }
    )
    fit = fit_table(noisy, ["task", "model"]).iloc[0]
    assert fit.p == pytest.approx(1.3, abs=0.05) and 0.99 < fit.r2 <= 1 and (fit.n_min, fit.n_max) == (10, 160)


def test_scale_differences_name_reduced_settings():
    config = validate_config({"walks": {"dim": 4, "sizes": {"train": 100}}, "corpora": {"wsj": {"path": "/x"}}}, SCHEMA)
    differences = scale_differences(config, SCHEMA)
    assert "walks.dim = 4 (full reproduction: 10)" in differences
    assert "walks.sizes.train = 100 (full reproduction: 50000)" in differences
    assert not any(d.startswith("corpora") for d in differences)  # where WSJ lies is no matter of scale
    assert scale_differences(validate_config({}, SCHEMA), SCHEMA) == []
    # another tag column, a corpus left out, a corpus of one's own: not the paper's experiment
    own = {
        "ewt": {"tags": "upos", "train": "/x/train.conllu"},
        "ptb_sample": {"enabled": False},
        "fr_gsd": {"format": "conllu", "tags": "upos", "train": "/t", "dev": "/d", "test": "/e"},
    }
    differences = scale_differences(validate_config({"corpora": own}, SCHEMA), SCHEMA)
    assert "corpora.ewt.tags = upos (full reproduction: xpos)" in differences
    assert "corpora.ptb_sample.enabled = False (full reproduction: True)" in differences
    assert "corpora.fr_gsd: a corpus of your own (full reproduction: ewt, ptb_sample, wsj)" in differences
    assert not any("/x/train.conllu" in d or "/t" in d for d in differences)


def test_report_tables_parse_back_equal_to_the_tsvs(runs):
    root, histories = runs
    tables = root / "tables"
    write_tsv(tables / "data_pos.tsv", pd.DataFrame({"corpus": ["ewt"], "split": ["train"], "sentences": [10]}))
    config = validate_config({"walks": {"dim": 4}}, SCHEMA)
    html = render(config=config, schema=SCHEMA, tables=tables, histories=histories, repo=REPO)
    assert "Not the full reproduction (scale label: " in html and "walks.dim = 4" in html
    parsed = {t: pd.read_html(io.StringIO(html), attrs={"id": t})[0] for t in ("table1", "table2", "data-pos")}
    t1 = pd.read_csv(tables / "table1.tsv", sep="\t")
    means = parsed["table1"]["INN error"].str.extract(r"^([0-9.]+)")[0].astype(float)
    assert means.tolist() == pytest.approx(t1.inn_error.round(4).tolist())
    # b = 2 rests on one INN seed of the table's two, and has no b-LSTM run: the cells say so
    assert parsed["table1"]["INN error"].tolist() == ["0.0300 (1 seed)", "0.1300 ± 0.0141"]
    assert parsed["table1"]["b-LSTM error"].tolist() == ["no finished run", "0.1500 (1 seed)"]
    note = " ".join(html.split())
    assert "Walks: v gaussian (v ~ N(0, I<sub>d</sub>)), d = 10. b-LSTM sizes tried: 100 units" in note
    assert parsed["table1"]["floor"].tolist() == pytest.approx(t1.floor.tolist())
    assert parsed["table1"]["paper: b-LSTM"].tolist() == pytest.approx(t1.paper_bilstm_error.tolist())
    t2 = pd.read_csv(tables / "table2.tsv", sep="\t")
    got = pd.to_numeric(parsed["table2"]["accuracy"], errors="coerce")
    assert got.tolist() == pytest.approx(t2.accuracy.round(2).tolist(), nan_ok=True)
    assert parsed["table2"]["model"].tolist() == t2.name.tolist()
    assert parsed["data-pos"].sentences.tolist() == [10]
    assert html.count("data:image/png;base64,") >= 5  # Tables 1-2, learning curves, solver statistics
    comparisons = pd.read_html(io.StringIO(html), attrs={"id": "comparisons-table"})[0]
    assert len(comparisons) == len(pd.read_csv(tables / "comparisons.tsv", sep="\t"))
    assert "Bayes floor" in comparisons.baseline.tolist()
    verdict = pd.read_html(io.StringIO(html), attrs={"id": "verdict-table"})[0]
    assert len(verdict) == 2 and all("on one seed" in text for text in verdict.verdict)
    assert 'src="http' not in html and "<link" not in html  # self-contained: nothing fetched


def _markdown_tables(text: str) -> dict[str, list[list[str]]]:
    """The tables of ``inn markdown``'s output by title, each row as its cells."""
    tables, title = {}, None
    for line in text.splitlines():
        if line.startswith("### "):
            title = line[4:]
            tables[title] = []
        elif line.startswith("| ") and not line.startswith("| ---"):
            tables[title].append([cell.strip() for cell in line.strip("| ").split(" | ")])
    return tables


def test_markdown_shows_the_reports_cells(runs, tmp_path, capsys):
    """``inn markdown`` renders the same cells as the report's tables, bold where the report is."""
    from inn.experiment.views import main as markdown_main

    root, histories = runs
    tables = root / "tables"
    html = render(config=validate_config({}, SCHEMA), schema=SCHEMA, tables=tables, histories=histories, repo=REPO)
    markdown_main([str(tables), "--out", str(tmp_path / "tables.md")])
    shown = _markdown_tables((tmp_path / "tables.md").read_text(encoding="utf-8"))
    assert list(shown) == [
        "Verdict: the paper's claims, as measured",
        "Table 1: biased random walks (per-step error)",
        "Table 2: part-of-speech tagging (token accuracy, %)",
        "Paired comparisons",
        "Training runs",
    ]
    page = lxml.html.fromstring(html)
    for title, table_id in zip(shown, ("verdict-table", "table1", "table2", "comparisons-table", "runs-table")):
        rows = list(page.get_element_by_id(table_id).iter("tr"))
        assert [[cell.strip("*") for cell in row] for row in shown[title]] == [
            [cell.text_content() for cell in row.xpath("th|td")] for row in rows
        ]
        assert [[cell.startswith("**") for cell in row] for row in shown[title]] == [
            [bool(cell.xpath("strong")) for cell in row.xpath("th|td")] for row in rows
        ]
    assert all(row[-1].startswith("**") for row in shown["Verdict: the paper's claims, as measured"][1:])
    comparisons = pd.read_csv(tables / "comparisons.tsv", sep="\t")
    bold = [row[6].startswith("**") for row in shown["Paired comparisons"][1:]]
    assert bold == comparisons.distinguishable.tolist()
    # the INN's seeds at b = 0.5: one ended by patience (epoch 2 of 5), one by the cap (6 of 6)
    inn = next(row for row in shown["Training runs"] if row[1:3] == ["b0.5", "inn"])
    assert inn[3:8] == ["2", "24,065", "5, 6", "2, 6", "1 / 1"]
    differences = [float(row[6].strip("*")) for row in shown["Paired comparisons"][1:]]
    assert differences == pytest.approx(comparisons.difference.round(4).tolist(), abs=0.006)
    # to standard output without --out; one line for a folder without tables
    markdown_main([str(tables)])
    assert capsys.readouterr().out == (tmp_path / "tables.md").read_text(encoding="utf-8")
    with pytest.raises(InnError, match="run inn collect"):
        markdown_main([str(tmp_path / "train")])
    old = pd.read_csv(tables / "table1.tsv", sep="\t").drop(columns="ended_by_cap")
    write_tsv(tables / "table1.tsv", old)
    with pytest.raises(InnError, match="table1.tsv has no column 'ended_by_cap': an older inn collect"):
        markdown_main([str(tables)])


def test_benchmark_tables_show_torchdeq_peers_beside_ours(tmp_path):
    """Forward-only TorchDEQ rows get a forward table of their own, with each row's time over
    our fastest solver's at the longest n."""
    from inn.experiment.benchmark import Row, write_rows
    from inn.experiment.report import benchmark_tables

    common = dict(weights="init", hidden=8, batch=2, device="cpu", dtype="float32")
    rows = []
    for n in (10, 20):
        rows += [
            Row(method="anderson", n=n, forward_s=0.01 * n, forward_backward_s=0.02 * n, function_evals=9, **common),
            Row(method="fixed_point", n=n, forward_s=0.02 * n, forward_backward_s=0.03 * n, **common),
            Row(method="torchdeq_anderson", n=n, forward_s=0.03 * n, function_evals=20, residual_max=5e-5, **common),
            Row(method="bigru", n=n, forward_s=0.001 * n, forward_backward_s=0.004 * n, **common),
        ]
    path = tmp_path / "benchmark" / "pos" / "ewt" / "inn" / "seed1.tsv"
    path.parent.mkdir(parents=True)
    write_rows(path, rows)
    tables = benchmark_tables([path])
    assert [t["title"] for t in tables] == [
        "pos ewt: init weights, k = 8",
        "pos ewt: init weights, k = 8: forward, ours and TorchDEQ's",
    ]
    forward = tables[1]["table"].set_index("method")
    assert list(forward.index) == ["anderson", "fixed_point", "torchdeq_anderson"]
    assert forward.loc["torchdeq_anderson", "x our best at n=20"] == pytest.approx(3.0)
    assert forward.loc["torchdeq_anderson", "F at n=20"] == 20
    assert np.isnan(tables[0]["table"].set_index("method").loc["torchdeq_anderson", "n=20"])


def test_table1_claim_against_the_matched_size_and_as_a_whole(tmp_path):
    """Where the size best on dev is not the one nearest the INN's parameter count, the claim
    gets a second row against that one; with two b tested, a row judges the claim as a whole."""
    for b, inn, best, matched in (("b0.5", 0.10, 0.30, 0.40), ("b0.25", 0.20, 0.20, 0.40)):
        for seed in (1, 2):
            fake_run(tmp_path, "walks", b, "inn", seed, inn, [0.3, 0.2], parameters=211201)
            fake_run(tmp_path, "walks", b, "bilstm-h100", seed, matched, [0.3, 0.25], parameters=89801)
            fake_run(tmp_path, "walks", b, "bilstm-h300", seed, best, [0.3, 0.2], parameters=749401)
    collect_main(["--results", str(tmp_path), "--out-dir", str(tmp_path / "tables")])
    t1 = pd.read_csv(tmp_path / "tables/table1.tsv", sep="\t").set_index("b")
    assert t1.loc[0.5, "bilstm_best_size"] == 300 and t1.loc[0.5, "bilstm_matched_size"] == 100
    assert bool(t1.loc[0.5, "bilstm_best_is_largest"])
    v = pd.read_csv(tmp_path / "tables/verdict.tsv", sep="\t")
    assert v.claim.tolist() == [
        "INN error below the b-LSTM's (b = 0.25)",
        "INN error below the b-LSTM's (b = 0.25), against the size nearest its parameter count (100 units)",
        "INN error below the b-LSTM's (b = 0.5)",
        "INN error below the b-LSTM's (b = 0.5), against the size nearest its parameter count (100 units)",
        "INN error below the b-LSTM's for b <= 1, as a whole",
    ]
    assert v.verdict.tolist()[:4] == ["inconclusive", "reproduced", "reproduced", "reproduced"]
    assert v.verdict.iloc[4] == (
        "2 tests (b = 0.25, 0.5): reproduced at 1, inconclusive at 1; 1 of 2 hold after Holm's correction for 2 tests"
    )


def test_report_names_the_sizes_tried_at_each_b_where_they_differ(runs):
    root, histories = runs
    tables = root / "tables"
    t1 = pd.read_csv(tables / "table1.tsv", sep="\t")
    t1["bilstm_sizes"] = [
        "100 units (89,801 parameters)",
        "100 units (89,801 parameters); 300 units (749,401 parameters)",
    ]
    write_tsv(tables / "table1.tsv", t1)
    html = render(config=validate_config({}, SCHEMA), schema=SCHEMA, tables=tables, histories=histories, repo=REPO)
    note = " ".join(html.split())
    b = t1.b.tolist()
    assert (
        f"b-LSTM sizes tried: at b = {b[0]}: 100 units (89,801 parameters); at b = {b[1]}: 100 units "
        "(89,801 parameters); 300 units (749,401 parameters);"
    ) in note


def test_blstm_sizes_are_compared_on_the_seeds_they_share(tmp_path):
    """The 300-unit b-LSTM is better on seed 1, the one both sizes have; the 500's mean over its
    three seeds is lower only through seeds the 300 never drew: 300 is chosen."""
    fake_run(tmp_path, "walks", "b0.5", "inn", 1, 0.10, [0.3, 0.2], parameters=211201)
    fake_run(tmp_path, "walks", "b0.5", "bilstm-h300", 1, 0.12, [0.3, 0.15], parameters=749401)
    for seed, dev in ((1, 0.16), (2, 0.10), (3, 0.10)):
        fake_run(tmp_path, "walks", "b0.5", "bilstm-h500", seed, 0.12, [0.3, dev], parameters=2049001)
    collect_main(["--results", str(tmp_path), "--out-dir", str(tmp_path / "tables")])
    t1 = pd.read_csv(tmp_path / "tables/table1.tsv", sep="\t").set_index("b")
    assert t1.loc[0.5, "bilstm_best_size"] == 300 and t1.loc[0.5, "bilstm_seeds"] == 1


def _boxes_apart(fig) -> None:
    """No two panels' extents (axes, tick labels, axis labels, titles, their legends) overlap,
    no panel's legend lies on its plotting area, and no figure legend on a panel; within a
    panel no two tick labels overlap."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    axes = fig.axes
    for i, a in enumerate(axes):
        for b in axes[i + 1 :]:
            assert not a.get_tightbbox(renderer).overlaps(b.get_tightbbox(renderer)), (a.get_ylabel(), b.get_ylabel())
        if a.get_legend() is not None:
            assert not a.get_legend().get_window_extent(renderer).overlaps(a.get_window_extent(renderer))
        for axis in (a.xaxis, a.yaxis):
            labels = [t for t in axis.get_ticklabels(which="both") if t.get_visible() and t.get_text()]
            boxes = [t.get_window_extent(renderer) for t in labels]
            for j, box in enumerate(boxes):
                for other, text in zip(boxes[j + 1 :], labels[j + 1 :]):
                    assert not box.overlaps(other), (labels[j].get_text(), text.get_text())
    for legend in fig.legends:
        for a in axes:
            assert not legend.get_window_extent(renderer).overlaps(a.get_tightbbox(renderer))


def test_solver_figure_keeps_labels_and_legend_off_the_neighbours():
    """Ten implicit runs (the paper scale's count), one of them Newton-Krylov: three panels whose
    y labels and legend stay clear of each other; Anderson-only runs get no empty Krylov panel."""
    rows = []
    for r in range(10):
        for epoch in range(1, 31):
            rows.append(
                {
                    "task": "walks",
                    "dataset": f"b0.{r}",
                    "model": "inn",
                    "seed": r % 3 + 1,
                    "epoch": epoch,
                    "newton_iters": 5.0 + r + epoch % 7,
                    "krylov_iters": 30.0 if r == 0 else 0.0,
                    "nonconverged": (epoch * r) % 23,
                }
            )
    histories = pd.DataFrame(rows)
    fig = solver_figure(histories)
    assert [a.get_ylabel() for a in fig.axes] == [
        "mean outer iterations per batch",
        "mean Krylov iterations per batch",
        "sequences above tol per epoch",
    ]
    assert len(fig.legends[0].get_texts()) == 10
    _boxes_apart(fig)
    anderson = solver_figure(histories.assign(krylov_iters=0.0, nonconverged=0))
    assert [a.get_ylabel() for a in anderson.axes] == [
        "mean outer iterations per batch",
        "sequences above tol per epoch",
    ]
    assert anderson.axes[1].get_ylim() == (0, 1)  # counts of zero: an axis to 1, not +-0.05
    _boxes_apart(anderson)


@pytest.mark.parametrize("epochs", [3, 30])
def test_learning_curves_tick_whole_epochs(epochs):
    """The quick preset's three epochs were ticked 1.0, 1.5, 2.0, 2.5, 3.0: an epoch count is a
    whole number at every scale, and the dev score's title reads as its axis label does."""
    histories = pd.DataFrame(
        [
            {
                "task": "pos",
                "dataset": "ptb_sample",
                "model": model,
                "seed": 1,
                "epoch": epoch,
                "train_loss": 1.0 / epoch,
                "dev_accuracy": 90.0 - 5.0 / epoch,
            }
            for model in ("inn", "bilstm")
            for epoch in range(1, epochs + 1)
        ]
    )
    fig = learning_figure("pos", "ptb_sample", histories)
    fig.canvas.draw()
    for ax in fig.axes:
        ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
        assert len(ticks) >= 2 and all(float(t).is_integer() for t in ticks), ticks
    assert [ax.get_title() for ax in fig.axes] == ["pos ptb_sample: training loss", "pos ptb_sample: dev accuracy"]
    assert learning_figure("pos", "ptb_sample", histories.drop(columns="dev_accuracy")) is None


def test_timing_figure_ticks_the_lengths_measured_in_plain_numbers():
    rows = []
    for task, models in (("pos", ["bigru", "bilstm", "gru", "inn", "lstm"]), ("walks", ["bilstm-h16", "inn"])):
        for model in models:
            for n in (10, 20, 40, 80, 160):
                rows.append(
                    {
                        "task": task,
                        "model": model,
                        "n": n,
                        "seconds": 1e-4 * n**1.5,
                        "newton_iters": 7.0 if model == "inn" else np.nan,
                        "krylov_iters": 0.0 if model == "inn" else np.nan,
                    }
                )
    measurements = pd.DataFrame(rows)
    fits = pd.DataFrame(
        [
            {"task": t, "model": m, "a": 1e-4, "p": 1.5}
            for t, m in measurements[["task", "model"]].drop_duplicates().itertuples(index=False)
        ]
    )
    fig = timing_plot(measurements, fits)
    _boxes_apart(fig)
    for ax in fig.axes:
        assert [t.get_text() for t in ax.get_xticklabels()] == ["10", "20", "40", "80", "160"]
    # one legend entry per model (its fit); no Krylov line for Anderson's solves
    assert len(fig.axes[0].get_legend().get_texts()) == 5
    assert [t.get_text() for t in fig.axes[2].get_legend().get_texts()] == ["pos inn: outer", "walks inn: outer"]


def test_training_devices_come_from_the_runs_not_the_renderer():
    """Each epoch's device and threads from history.tsv (a run that moved counts under each);
    histories without them fall back on the runs table (metrics.json: the last epoch's), said so."""
    histories = pd.DataFrame(
        [
            # a run that moved from one CPU core to a GPU and back
            {"task": "walks", "dataset": "b0.5", "model": "inn", "seed": 1, "epoch": 1, "device": "cpu", "threads": 1},
            {
                "task": "walks",
                "dataset": "b0.5",
                "model": "inn",
                "seed": 1,
                "epoch": 2,
                "device": "cuda NVIDIA H200",
                "threads": 16,
            },
            {"task": "walks", "dataset": "b0.5", "model": "inn", "seed": 1, "epoch": 3, "device": "cpu", "threads": 1},
            {"task": "pos", "dataset": "ewt", "model": "bilstm", "seed": 1, "epoch": 1, "device": "cpu", "threads": 2},
            # written before devices were recorded
            {
                "task": "pos",
                "dataset": "ewt",
                "model": "inn",
                "seed": 1,
                "epoch": 1,
                "device": np.nan,
                "threads": np.nan,
            },
        ]
    )
    runs = pd.DataFrame(
        [
            {"task": "walks", "dataset": "b0.5", "model": "inn", "seed": 1, "device": "cpu", "threads": 1},
            {"task": "pos", "dataset": "ewt", "model": "bilstm", "seed": 1, "device": "cpu", "threads": 2},
            {"task": "pos", "dataset": "ewt", "model": "inn", "seed": 1, "device": "cpu", "threads": 1},
            {"task": "pos", "dataset": "ewt", "model": "perceptron", "seed": 1, "device": "cpu", "threads": np.nan},
        ]
    )
    assert training_devices(histories, runs) == [
        {"label": "cpu, 1 thread", "runs": 2, "from_metrics": 1},
        {"label": "cuda NVIDIA H200", "runs": 1, "from_metrics": 0},
        {"label": "cpu, 2 threads", "runs": 1, "from_metrics": 0},
        {"label": "cpu, threads not recorded", "runs": 1, "from_metrics": 1},
    ]
    assert training_devices(pd.DataFrame(), pd.DataFrame()) == []
