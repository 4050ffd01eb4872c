"""The training and evaluation rules end to end on a tiny config, and a restarted training job."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import zipfile
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml
from conftest import TEST_CONFIGS
from test_workflow import REPO, SNAKEMAKE, snakemake

from inn.data.corpora import EWT_FILES

UPOS = {
    "ADJ",
    "ADP",
    "ADV",
    "AUX",
    "CCONJ",
    "DET",
    "INTJ",
    "NOUN",
    "NUM",
    "PART",
    "PRON",
    "PROPN",
    "PUNCT",
    "SCONJ",
    "SYM",
    "VERB",
    "X",
}


def test_training_rules_in_the_full_dry_run():
    result = snakemake("-n", "--quiet", "rules")
    assert result.returncode == 0, result.stderr
    for rule in ("train_model", "train_perceptron", "evaluate_model"):
        assert rule in result.stdout + result.stderr


#: presets that are given with a corpus of one's own (README, "Your own corpus")
NEED_A_CORPUS = {"tagger.yaml"}


@pytest.mark.parametrize("preset", sorted(p.name for p in (REPO / "config").glob("*.yaml")))
def test_every_preset_is_valid(preset, tmp_path, ewt_dir):
    own = []
    if preset in NEED_A_CORPUS:
        alone = snakemake("-n", "--quiet", "rules", "--configfile", f"config/{preset}")
        assert alone.returncode != 0
        assert alone.stderr.strip().splitlines()[-1].startswith("error: config: models.pos.run: ")
        corpus = {
            "format": "conllu",
            "tags": "xpos",
            **{split: str(ewt_dir / name) for split, name in EWT_FILES.items()},
        }
        (tmp_path / "my.yaml").write_text(yaml.safe_dump({"corpora": {"mine": corpus}}))
        own = [str(tmp_path / "my.yaml")]
    result = snakemake("-n", "--quiet", "rules", "--configfile", f"config/{preset}", *own)
    assert result.returncode == 0, result.stderr
    assert "train_model" in result.stdout + result.stderr


@pytest.mark.workflow
def test_the_tagger_preset_trains_the_named_taggers_alone_in_a_folder_of_its_own(tmp_path, ewt_dir):
    """config/tagger.yaml as the README runs it, from a checkout that holds another run's results:
    the named taggers of a corpus of one's own trained, scored and exported under out/NAME, no
    walks, timing, benchmark or download, and nothing outside that folder written."""
    checkout = tmp_path / "checkout"
    (checkout / "results/tables").mkdir(parents=True)
    (checkout / "results/tables/table2.tsv").write_text("another run's table\n")
    small = {
        "corpora": {"my_tb": user_treebank(tmp_path / "treebank", ewt_dir)},
        "models": {"pos": {"run": ["bilstm", "perceptron"], "baseline_hidden_size": 6, "perceptron_iterations": 1}},
        "features": {"max_words": 5000, "max_affixes": 500, "word_dim": 16, "affix_dim": 4},
        "training": {"pos": {"max_epochs": 1, "max_train": 30, "max_dev": 10}},
        "segmenter": {"epochs": 1},
        "device": "cpu",
        "resources": {"threads": 1, "mem_mb": 1000, "runtime": 10},
    }
    (checkout / "my.yaml").write_text(yaml.safe_dump(small))
    command = SNAKEMAKE + [
        "--cores",
        "2",
        "--configfile",
        str(REPO / "config/tagger.yaml"),
        "my.yaml",
        "--directory",
        "out/my_tagger",
    ]
    result = subprocess.run(
        command,
        cwd=checkout,
        env={**os.environ, "PYTHONPATH": str(REPO / "src")},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    stats = result.stdout + result.stderr
    jobs = set(re.findall(r"^(\w+)\s+\d+$", stats[stats.index("Job stats:") : stats.index("total")], re.M))
    assert jobs == {
        "prepare_corpus",
        "train_model",
        "train_perceptron",
        "train_segmenter",  # the corpus has the text of its sentences: the tagger file reads running text
        "evaluate_model",
        "export_tagger",
        "summarize_data",
        "collect_tables",
        "render_report",
        "all",
    }
    run = checkout / "out/my_tagger/results"
    assert sorted(p.name for p in (run / "train/pos/my_tb").iterdir()) == ["bilstm", "perceptron"]
    for model in ("bilstm", "perceptron"):
        assert (run / f"taggers/pos/my_tb/{model}/seed1/tagger.pt").is_file()
    assert not (run / "data/walks").exists() and not (run / "timing").exists()
    written = sorted(
        str(p.relative_to(checkout))
        for p in checkout.rglob("*")
        if p.is_file() and not p.is_relative_to(checkout / "out")
    )
    assert written == ["my.yaml", "results/tables/table2.tsv"]
    assert (checkout / "results/tables/table2.tsv").read_text() == "another run's table\n"
    html = (run / "report/index.html").read_text()
    assert "Not the full reproduction (scale label: paper)" in html and "corpora.my_tb: a corpus of your own" in html


def _blank_xpos(line: str) -> str:
    fields = line.split("\t")
    return "\t".join(fields[:4] + ["_"] + fields[5:]) if len(fields) == 10 else line


def user_treebank(folder, ewt_dir, sentences=(120, 40, 40)):
    """A treebank of one's own: slices of EWT under other file names, UPOS tags only (the XPOS
    column blanked, so reading it would fail)."""
    folder.mkdir()
    files = {}
    for (split, name), count in zip(EWT_FILES.items(), sentences):
        blocks = (ewt_dir / name).read_text(encoding="utf-8").split("\n\n")[:count]
        files[split] = folder / f"part-{split[:2]}.txt"
        files[split].write_text(
            "\n\n".join("\n".join(_blank_xpos(line) for line in block.splitlines()) for block in blocks) + "\n\n",
            encoding="utf-8",
        )
    return {"format": "conllu", "tags": "upos", **{split: str(path) for split, path in files.items()}}


#: the config files of the whole workflow's tiny run, as Snakemake reads them (CONTRIBUTING.md)
QUICK = [str(TEST_CONFIGS / "config/config.yaml"), str(TEST_CONFIGS / "quick/config.yaml")]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, ewt_dir) -> tuple[Path, list[str], dict]:
    """The whole workflow run once, up to the report, on ``.test/quick`` with a user's corpus (its
    own name, file names and UPOS tags) in place of the free corpora: the run folder, the config
    files it read, and the corpus."""
    run, mine = tmp_path_factory.mktemp("run"), tmp_path_factory.mktemp("corpus")
    corpus = user_treebank(mine / "treebank", ewt_dir)
    own = mine / "config.yaml"
    own.write_text(yaml.safe_dump({"corpora": {"ptb_sample": {"enabled": False}, "my_tb": corpus}}))
    configs = [*QUICK, str(own)]
    result = snakemake("--configfile", *configs, workdir=run)
    assert result.returncode == 0, result.stderr[-3000:]
    return run, configs, corpus


@pytest.mark.workflow
def test_train_and_evaluate_end_to_end(tmp_path, finished_run):
    """The whole workflow on a user's corpus in place of the free corpora, up to the report."""
    run_folder, _, corpus = finished_run
    data = pd.read_csv(run_folder / "results/tables/data_pos.tsv", sep="\t")
    assert data.set_index("split").loc[:, ["corpus", "sentences"]].to_dict("list") == {
        "corpus": ["my_tb"] * 3,
        "sentences": [120, 40, 40],
    }
    runs = [("pos", "my_tb", m) for m in ("inn", "bilstm", "perceptron")]
    runs += [("walks", "b0.5", m) for m in ("inn", "bilstm-h4")]
    for task, dataset, model in runs:
        run = f"{task}/{dataset}/{model}/seed1"
        metrics = json.loads((run_folder / "results/eval" / run / "metrics.json").read_text())
        assert (metrics["task"], metrics["dataset"], metrics["model"], metrics["seed"]) == (task, dataset, model, 1)
        assert metrics["scale"] == "test" and metrics["epochs"] >= 1
        name = "accuracy" if task == "pos" else "error"
        assert metrics["metric"] == name and metrics[name] is not None
        assert metrics["tag_column"] == ("upos" if task == "pos" else None)  # what Table 2 scores
        history = pd.read_csv(run_folder / "results/train" / run / "history.tsv", sep="\t")
        assert len(history) >= 1
        assert (run_folder / "results/eval" / run / "predictions.tsv").is_file()
        rule = "train_perceptron" if model == "perceptron" else "train_model"
        log = f"{task}/{dataset}/seed1" if model == "perceptron" else run
        assert (run_folder / "logs" / rule / f"{log}.log").is_file()
        assert (run_folder / "benchmarks" / rule / f"{log}.tsv").is_file()
    inn = pd.read_csv(run_folder / "results/train/pos/my_tb/inn/seed1/history.tsv", sep="\t")
    assert {"newton_iters", "krylov_iters", "residual", "nonconverged"} <= set(inn.columns)
    metrics = json.loads((run_folder / "results/eval/pos/my_tb/inn/seed1/metrics.json").read_text())
    assert metrics["hidden_size"] == 48 and metrics["training"]["max_train"] == 30  # INN k = feature size
    # The default target is the report: tables, timing and benchmark filled from these runs.
    tables = run_folder / "results/tables"
    table2 = pd.read_csv(tables / "table2.tsv", sep="\t")
    ours = table2[table2.run == "ours"].set_index("model")
    assert list(ours.index) == ["bilstm", "inn", "perceptron"] and set(ours.corpus) == {"my_tb"}
    predicted = pd.read_csv(run_folder / "results/eval/pos/my_tb/inn/seed1/predictions.tsv", sep="\t")
    assert set(predicted.gold) | set(predicted.predicted) <= UPOS  # universal tags, not PTB's
    inn = json.loads((run_folder / "results/eval/pos/my_tb/inn/seed1/metrics.json").read_text())
    assert ours.loc["inn", "accuracy"] == pytest.approx(inn["accuracy"], rel=1e-5)  # TSVs keep 6 digits
    table1 = pd.read_csv(tables / "table1.tsv", sep="\t")
    assert table1.b.tolist() == [0.5] and table1.bilstm_best_size.tolist() == [4]
    timing = pd.read_csv(tables / "timing.tsv", sep="\t")
    assert {(t, m) for t, m in zip(timing.task, timing.model)} == {
        ("pos", "inn"),
        ("pos", "bilstm"),
        ("walks", "inn"),
        ("walks", "bilstm-h4"),
    }
    assert timing.n_min.eq(4).all() and timing.n_max.eq(8).all()
    html = (run_folder / "results/report/index.html").read_text()
    assert "Not the full reproduction (scale label: test)" in html and "Implicit-layer benchmark" in html
    parsed = pd.read_html(io.StringIO(html), attrs={"id": "table2"})[0]
    assert pd.to_numeric(parsed["accuracy"].iloc[:3]).tolist() == pytest.approx(ours.accuracy.round(2).tolist())
    # every POS model is also a tagger file: it fills the corpus's column (UPOS) as evaluate tags it
    from inn.experiment.cli import main

    test_file = corpus["test"]
    for model in ("inn", "perceptron"):
        tagger = run_folder / f"results/taggers/pos/my_tb/{model}/seed1/tagger.pt"
        metrics = json.loads((run_folder / f"results/eval/pos/my_tb/{model}/seed1/metrics.json").read_text())
        assert torch.load(tagger, weights_only=True)["meta"]["test"]["accuracy"] == metrics["accuracy"]
        out, scores = tmp_path / f"{model}.conllu", tmp_path / f"{model}.json"
        assert main(["tag", str(tagger), test_file, "--accuracy", "--metrics", str(scores), "--out", str(out)]) == 0
        assert json.loads(scores.read_text())["accuracy"] == metrics["accuracy"]
        words = [f for line in out.read_text().splitlines() if len(f := line.split("\t")) == 10 and f[0].isdigit()]
        predicted = pd.read_csv(run_folder / f"results/eval/pos/my_tb/{model}/seed1/predictions.tsv", sep="\t")
        assert [f[3] for f in words] == predicted.predicted.tolist() and {f[4] for f in words} == {"_"}
    assert parsed["corpus"].iloc[:3].tolist() == ["my_tb"] * 3


@pytest.mark.workflow
def test_snakemakes_own_report_of_a_finished_run(tmp_path, finished_run):
    """`snakemake --report report.zip` after a run: the outputs the rules mark with report(),
    the project's HTML report among them, with their captions and the workflow's description,
    and nothing run again."""
    run_folder, configs, _ = finished_run
    before = {path: path.stat().st_mtime_ns for path in (run_folder / "results").rglob("*") if path.is_file()}
    archive = tmp_path / "report.zip"
    result = snakemake("--configfile", *configs, "--report", str(archive), workdir=run_folder)
    assert result.returncode == 0, result.stderr[-3000:]
    with zipfile.ZipFile(archive) as report:
        names = report.namelist()
        html = report.read("report/report.html").decode()
    assert sorted(Path(name).name for name in names if name.startswith("report/data/raw/")) == [
        "comparisons.tsv",
        "data_pos.tsv",
        "data_walks.tsv",
        "index.html",
        "table1.tsv",
        "table2.tsv",
        "timing.tsv",
        "verdict.tsv",
    ]
    assert "Bayes-optimal floor of each test set" in html  # a caption (workflow/report/table1.rst)
    assert r"at scale <tt class=\"docutils literal\">test<" in html  # the description, its config filled in
    assert {path: path.stat().st_mtime_ns for path in (run_folder / "results").rglob("*") if path.is_file()} == before


@pytest.mark.workflow
def test_a_restarted_training_job_resumes(tmp_path, tiny_workflow_config):
    """A job killed after its first epoch leaves last.pt; the rerun continues from it."""
    config = tiny_workflow_config
    config["training"]["walks"] = {**config["training"]["walks"], "max_epochs": 2, "patience": 5}
    config["models"]["walks"]["run"] = ["bilstm"]
    target = "results/train/walks/b0.5/bilstm-h4/seed1/checkpoint.pt"
    prepared = snakemake("results/data/walks/b0.5/train.pt", workdir=tmp_path, config=config)
    assert prepared.returncode == 0, prepared.stderr[-3000:]
    # The first epoch as if the job had been stopped there (the trainer's own resumable state).
    from inn.experiment.config import training_defaults
    from inn.experiment.train import TrainConfig, train

    train(
        "walks",
        tmp_path / "results/data/walks/b0.5",
        "bilstm-h4",
        tmp_path / "results/train/walks/b0.5/bilstm-h4/seed1",
        TrainConfig(**{**training_defaults("walks"), **config["training"]["walks"], "seed": 1}),
        device="cpu",
        meta={"scale": "test", "dataset": "b0.5", "seed": 1},
        stop_after=1,
    )
    result = snakemake(target, workdir=tmp_path, config=config)
    assert result.returncode == 0, result.stderr[-3000:]
    log = (tmp_path / "logs/train_model/walks/b0.5/bilstm-h4/seed1.log").read_text()
    assert "resuming bilstm-h4" in log and "after epoch 1" in log
    history = pd.read_csv(tmp_path / "results/train/walks/b0.5/bilstm-h4/seed1/history.tsv", sep="\t")
    assert history.epoch.tolist() == [1, 2]
