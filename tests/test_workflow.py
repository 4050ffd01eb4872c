"""The Snakemake workflow: lint, dry runs, and the data stage end to end on a tiny config."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile")]


def snakemake(*args: str, workdir: Path | None = None, config: dict | None = None):
    """Run Snakemake on the repository's workflow; returns the completed process."""
    command = SNAKEMAKE + list(args) + ["--cores", "2"]
    if workdir is not None:
        command += ["--directory", str(workdir)]
        if config is not None:
            (workdir / "config.yaml").write_text(yaml.safe_dump(config))
            command += ["--configfile", str(workdir / "config.yaml")]
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    return subprocess.run(command, cwd=workdir or REPO, env=env, capture_output=True, text=True, timeout=900)


def test_lint():
    result = snakemake("--lint")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Congratulations" in result.stdout + result.stderr


def test_snakemake_files_are_snakefmt_clean():
    """The Snakefile and every .smk file are formatted as snakefmt writes them (pyproject's
    [tool.snakefmt]); `python -m snakefmt Snakefile workflow` fixes them."""
    result = subprocess.run(
        [sys.executable, "-m", "snakefmt", "--check", "--diff", "Snakefile", "workflow"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


def test_dry_run_of_the_full_config():
    result = snakemake("-n", "--quiet", "rules")
    assert result.returncode == 0, result.stderr
    for rule in ("download_ewt", "download_treebank", "prepare_corpus", "generate_walks", "summarize_data"):
        assert rule in result.stdout + result.stderr


def test_only_the_walks_that_models_learn_are_generated(tmp_path, tiny_config):
    """A POS-only run generates no walks; models.walks.b picks which of walks.b are made."""
    tiny_config["models"]["walks"]["run"] = []
    dry = snakemake("-n", workdir=tmp_path, config=tiny_config)
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert "generate_walks" not in dry.stdout + dry.stderr and "train_model" in dry.stdout + dry.stderr
    tiny_config["models"]["walks"] = {**tiny_config["models"]["walks"], "run": ["inn"], "b": [0.5]}
    dry = snakemake("-n", "summarize_data", workdir=tmp_path, config=tiny_config)
    jobs = dry.stdout + dry.stderr
    assert "results/data/walks/b0.5/summary.tsv" in jobs and "results/data/walks/b1/" not in jobs


def test_a_walks_only_run_prepares_no_corpus(tmp_path, tiny_config):
    """models.pos.run empty: no POS corpus is prepared (or downloaded), walks are."""
    tiny_config["models"]["pos"]["run"] = []
    dry = snakemake("-n", workdir=tmp_path, config=tiny_config)
    jobs = dry.stdout + dry.stderr
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert "prepare_corpus" not in jobs and "download" not in jobs and "generate_walks" in jobs


def test_a_config_yaml_in_the_run_folder_is_read_only_when_named(tmp_path):
    """The project's config.yaml is the base whatever --directory says: a config.yaml that
    happens to lie in the run folder is not merged in (its seed 7), and --config alone works."""
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"seeds": [7]}))
    dry = snakemake("-n", "--config", "scale=test", workdir=tmp_path)
    jobs = dry.stdout + dry.stderr
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert "/seed1/" in jobs and "/seed7/" not in jobs


def test_the_workflow_runs_from_a_checkout_whose_path_holds_a_space(tmp_path):
    """Every path of the checkout reaches a job's shell as one word (the report's schema and
    repository)."""
    checkout = tmp_path / "my checkout"
    checkout.symlink_to(REPO)
    run = tmp_path / "run"
    run.mkdir()
    command = [
        sys.executable,
        "-m",
        "snakemake",
        "--snakefile",
        str(checkout / "Snakefile"),
        "-n",
        "-p",
        "--cores",
        "1",
        "render_report",
        "--configfile",
        str(checkout / "config.yaml"),
    ]
    dry = subprocess.run(command, cwd=run, capture_output=True, text=True, timeout=900, check=False)
    assert dry.returncode == 0, dry.stderr[-3000:]
    report = next(line for line in dry.stdout.splitlines() if "python -m inn report" in line)
    words = shlex.split(report)
    assert words[words.index("--schema") + 1] == f"{checkout}/workflow/schemas/config.schema.yaml"
    assert words[words.index("--repo") + 1] == str(checkout)


@pytest.mark.parametrize(
    "config, line",
    [
        ({"walks": {"dim": -3}}, "config: walks.dim: -3 is less than the minimum of 1"),
        # two biases that would share one folder, b0.5: one Table 1 row would disappear
        (
            {"walks": {"b": [0.5, 0.5000001]}},
            "config: walks.b.1: 0.5000001 would share the folder b0.5 with walks.b.0 "
            "(0.5), and one of them would be lost; give b with at most 6 significant digits",
        ),
    ],
)
def test_bad_config_stops_with_one_line_naming_the_key(tmp_path, config, line):
    """The line alone, after Snakemake's own notes on the config and profile it reads: no
    WorkflowError block naming common.smk around it."""
    result = snakemake("-n", workdir=tmp_path, config=config)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert lines[-1] == f"error: {line}"
    assert not [text for text in lines[:-1] if not text.startswith(("Config file ", "Using workflow specific profile"))]


def test_missing_corpus_path_is_named(tmp_path, tiny_config):
    tiny_config["corpora"]["ewt"]["train"] = str(tmp_path / "no-such-ewt/en_ewt-ud-train.conllu")
    result = snakemake("-n", workdir=tmp_path, config=tiny_config)
    assert result.returncode != 0
    assert (
        f"config: corpora.ewt.train: {tmp_path}/no-such-ewt/en_ewt-ud-train.conllu does not exist; correct the "
        "path, or set corpora.ewt.enabled: false"
    ) in result.stdout + result.stderr


@pytest.mark.workflow
def test_data_stage_end_to_end(tmp_path, tiny_config):
    result = snakemake("summarize_data", workdir=tmp_path, config=tiny_config)
    assert result.returncode == 0, result.stderr[-3000:]
    pos = pd.read_csv(tmp_path / "results/tables/data_pos.tsv", sep="\t")
    assert pos.set_index(["corpus", "split"])["sentences"].to_dict() == {
        ("ewt", "train"): 12_544,
        ("ewt", "dev"): 2_001,
        ("ewt", "test"): 2_077,
        ("ptb_sample", "train"): 3_068,
        ("ptb_sample", "dev"): 433,
        ("ptb_sample", "test"): 413,
    }
    assert (pos.loc[pos.split == "train", "unseen_rate"] == 0).all()
    assert (pos.loc[pos.split != "train", "oov_rate"] > 0).all()
    walks = pd.read_csv(tmp_path / "results/tables/data_walks.tsv", sep="\t")
    assert sorted(walks.b.unique()) == [0.5, 1.0] and set(walks.sequences) == {60, 20}
    assert walks.label1_fraction.between(0.3, 0.7).all()
    lengths = pd.read_csv(tmp_path / "results/tables/data_walk_lengths.tsv", sep="\t")
    assert lengths.groupby(["b", "split"])["count"].sum().tolist() == [60, 20, 20] * 2 or sorted(
        lengths.groupby(["b", "split"])["count"].sum().tolist()
    ) == [20, 20, 20, 20, 60, 60]
    for name in ("prepare_corpus/ewt", "prepare_corpus/ptb_sample", "generate_walks/b0.5"):
        assert (tmp_path / "logs" / f"{name}.log").exists()
        assert (tmp_path / "benchmarks" / f"{name}.tsv").exists()
    # Nothing left to do: a second run is a no-op.
    again = snakemake("-n", "summarize_data", workdir=tmp_path, config=tiny_config)
    assert "Nothing to be done" in again.stdout + again.stderr


@pytest.mark.workflow
def test_changed_config_value_reruns_only_what_depends_on_it(tmp_path, tiny_config):
    tiny_config["corpora"]["ewt"]["enabled"] = False
    assert snakemake("summarize_data", workdir=tmp_path, config=tiny_config).returncode == 0
    tiny_config["walks"]["dim"] = 5
    dry = snakemake("-n", "summarize_data", workdir=tmp_path, config=tiny_config)
    jobs = dry.stdout + dry.stderr
    assert "generate_walks" in jobs and "summarize_data" in jobs
    assert "prepare_corpus" not in jobs  # the corpus does not depend on the walk dimension


@pytest.mark.workflow
def test_corpora_with_fresh_modification_times_retrain_nothing(tmp_path, tiny_config, ewt_dir):
    """A corpus copied again, or a data folder remounted, gets new modification times but the
    same content: Snakemake compares checksums (the default profile raises the size up to which
    it records them), so no finished run is prepared or trained again."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for split, sentences in (("train", 1500), ("dev", 60), ("test", 60)):
        text = (ewt_dir / f"en_ewt-ud-{split}.conllu").read_text(encoding="utf-8").split("\n\n")
        (corpus / f"{split}.conllu").write_text("\n\n".join(text[:sentences]) + "\n\n", encoding="utf-8")
        tiny_config["corpora"]["ewt"][split] = str(corpus / f"{split}.conllu")
    # above Snakemake's own limit for checksums (1 MB), as real training corpora are
    assert (corpus / "train.conllu").stat().st_size > 1_500_000
    tiny_config["corpora"]["ptb_sample"]["enabled"] = False
    work = tmp_path / "work"
    work.mkdir()
    first = snakemake("summarize_data", workdir=work, config=tiny_config)
    assert first.returncode == 0, first.stderr[-3000:]
    later = time.time() + 60
    for path in corpus.iterdir():
        os.utime(path, (later, later))
    again = snakemake("-n", "summarize_data", workdir=work, config=tiny_config)
    assert "Nothing to be done" in again.stdout + again.stderr, again.stdout[-3000:]


def test_a_conllu_corpus_with_text_gets_a_segmenter_in_its_tagger_files(tmp_path, tiny_config):
    """segmenter.enabled: the tagger files of a CoNLL-U corpus with '# text' hold its learned segmenter."""
    target = "results/taggers/pos/ewt/bilstm/seed1/tagger.pt"
    dry = snakemake(
        "-n", "-p", target, workdir=tmp_path, config={**tiny_config, "segmenter": {"enabled": True, "epochs": 2}}
    )
    assert dry.returncode == 0, dry.stderr[-3000:]
    jobs = dry.stdout + dry.stderr
    assert "inn train-segmenter" in jobs and "--epochs 2" in jobs
    assert "--segmenter results/segmenters/ewt/segmenter.pt" in jobs
    dry = snakemake("-n", "-p", target, workdir=tmp_path, config=tiny_config)
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert "train-segmenter" not in dry.stdout + dry.stderr
