"""The data commands: outputs on success, one error line and no files on failure."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd

from inn.data.corpora import read_tagged
from inn.data.features import FeatureExtractor
from inn.experiment.cli import main
from inn.experiment.prepare import prepare_walks, split_seed

REPO = Path(__file__).resolve().parents[1]


def test_prepare_pos_writes_splits_features_and_summary(tmp_path, nltk_data):
    out = tmp_path / "ptb"
    status = main(
        [
            "prepare-pos",
            "--corpus",
            "ptb_sample",
            "--format",
            "nltk_treebank",
            "--nltk-data",
            str(nltk_data),
            "--out-dir",
            str(out),
            "--max-words",
            "1000",
        ]
    )
    assert status == 0
    assert len(read_tagged(out / "dev.tsv")) == 433
    features = FeatureExtractor.load(out / "features.json")
    assert len(features.words) == 1000 + 2 and features.feature_size == 448
    summary = pd.read_csv(out / "summary.tsv", sep="\t")
    assert summary.tokens.tolist() == [73_842, 10_627, 9_615]
    assert summary.oov_rate[0] > 0  # the vocabulary cap leaves rare training words unknown


def test_malformed_corpus_gives_one_line_and_no_outputs(tmp_path, ewt_dir):
    corpus = tmp_path / "ewt"
    corpus.mkdir()
    for split in ("train", "dev", "test"):
        (corpus / f"en_ewt-ud-{split}.conllu").write_text((ewt_dir / f"en_ewt-ud-{split}.conllu").read_text())
    with open(corpus / "en_ewt-ud-test.conllu", "a") as handle:
        handle.write("1\tbroken line\n\n")
    lines = (corpus / "en_ewt-ud-test.conllu").read_text().count("\n")
    out = tmp_path / "out"
    files = [f"--{split}={corpus}/en_ewt-ud-{split}.conllu" for split in ("train", "dev", "test")]
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "inn",
            "prepare-pos",
            "--corpus",
            "ewt",
            "--format",
            "conllu",
            *files,
            "--out-dir",
            str(out),
        ],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(REPO / "src")},
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: {corpus}/en_ewt-ud-test.conllu:{lines - 1}: malformed CoNLL-U line: "
        "expected 10 tab-separated fields, found 2"
    )
    assert "Traceback" not in result.stderr
    assert not out.exists() or not any(out.iterdir())


def test_walk_sets_use_distinct_reproducible_seeds(tmp_path):
    seeds = {split_seed(1, b, s) for b in (0.5, 1.0) for s in ("train", "dev", "test")}
    assert len(seeds) == 6 and split_seed(1, 0.5, "dev") == split_seed(1, 0.5, "dev")
    prepare_walks(0.5, 2, {"train": 30, "dev": 10, "test": 10}, seed=1, out=tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "dev.pt",
        "lengths.tsv",
        "prepared.json",
        "summary.tsv",
        "test.pt",
        "train.pt",
    ]
    assert not list(tmp_path.glob(".*.tmp"))


def test_tags_never_seen_in_training_are_counted_and_named(tmp_path, ewt_dir, caplog):
    """A test tag the training split lacks can never be predicted: the summary counts its tokens
    and a warning names it, so a score capped by the data is not mistaken for the model's."""
    sentences = (ewt_dir / "en_ewt-ud-train.conllu").read_text(encoding="utf-8").split("\n\n")[:30]
    text = "\n\n".join(sentences) + "\n\n"
    files = {}
    for split in ("train", "dev", "test"):
        files[split] = tmp_path / f"{split}.conllu"
        if split == "test":  # the first token's XPOS (5th column) becomes a tag no sentence has
            fields = text.split("\n1\t", 1)[1].split("\t")
            text = text.replace("\n1\t" + "\t".join(fields[:4]), "\n1\t" + "\t".join(fields[:3] + ["ZZZ"]), 1)
        files[split].write_text(text, encoding="utf-8")
    out = tmp_path / "out"
    status = main(
        [
            "prepare-pos",
            "--corpus",
            "mine",
            "--format",
            "conllu",
            "--out-dir",
            str(out),
            *[f"--{split}={path}" for split, path in files.items()],
        ]
    )
    assert status == 0
    summary = pd.read_csv(out / "summary.tsv", sep="\t")
    assert summary.unseen_tag_tokens.tolist() == [0, 0, 1]
    assert "mine test: 1 token(s) carry 1 tag(s) never seen in training (ZZZ x1)" in caplog.text
