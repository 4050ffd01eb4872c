"""Data fingerprints (issue #29, item 1): a model knows the data it was trained on.

The trial cases: a run resumed after its corpus was prepared again from other files with the
same tag set and vocabulary sizes; a tagger of corpus A evaluated on corpus B; the perceptron
evaluated on another corpus. Corpus B is A with every word spelt backwards: the same tags, the
same vocabulary sizes (the vocabularies are capped), other words behind every index.
"""

from __future__ import annotations

import json
import logging

import pytest
import torch
from conftest import evaluate_argv

from inn.checkpoints import read_checkpoint
from inn.data.corpora import read_conllu, write_tagged
from inn.data.fingerprint import RECORD_NAME, data_fingerprint, read_record
from inn.errors import InnError
from inn.experiment.cli import main
from inn.experiment.evaluate import evaluate_checkpoint
from inn.experiment.prepare import prepare_pos
from inn.experiment.train import TrainConfig, train

# capped so that corpus A and its reversed twin B fill them alike
FEATURES = dict(max_words=150, max_affixes=20, word_dim=8, affix_dim=2)
CFG = TrainConfig(max_epochs=2, max_dev=30)


def _slice(src, first, count, path):
    blocks = src.read_text(encoding="utf-8").split("\n\n")[first : first + count]
    path.write_text("\n\n".join(blocks) + "\n\n", encoding="utf-8")
    return read_conllu(path)


@pytest.fixture(scope="module")
def corpora(tmp_path_factory, ewt_dir):
    """Two tsv corpora, ``a`` (EWT slices) and ``b`` (the same, every word reversed)."""
    root = tmp_path_factory.mktemp("corpora")
    src = ewt_dir / "en_ewt-ud-train.conllu"
    splits = {
        name: _slice(src, first, count, root / f"{name}.conllu")
        for name, first, count in (("train", 0, 200), ("dev", 200, 40), ("test", 240, 40))
    }
    sources = {}
    for corpus, spell in (("a", lambda w: w), ("b", lambda w: w[::-1])):
        for split, sentences in splits.items():
            write_tagged(root / corpus / f"{split}.tsv", [[(spell(w), t) for w, t in s] for s in sentences])
        sources[corpus] = {split: str(root / corpus / f"{split}.tsv") for split in splits}
    return sources


def _prepare(corpora, corpus, out):
    prepare_pos("tsv", corpora[corpus], out, corpus, **FEATURES)
    return out


def _sizes(folder):
    features = json.loads((folder / "features.json").read_text())
    return features["tags"], len(features["words"]), [len(v) for v in features["affixes"].values()]


def test_same_tags_and_sizes_but_other_data_have_other_fingerprints(tmp_path, corpora):
    a, b = _prepare(corpora, "a", tmp_path / "a"), _prepare(corpora, "b", tmp_path / "b")
    assert _sizes(a) == _sizes(b)  # what the checks before fingerprints compared
    assert data_fingerprint(a) != data_fingerprint(b)
    again = _prepare(corpora, "a", tmp_path / "elsewhere" / "a2")  # the same data: the same print
    assert data_fingerprint(again) == data_fingerprint(a) == read_record(a)["fingerprint"]
    assert read_record(a) == {
        "fingerprint": data_fingerprint(a),
        "corpus": "a",
        "format": "tsv",
        "column": "xpos",
        "language": None,
    }  # a tsv corpus names no language


def test_resuming_on_a_corpus_prepared_again_from_other_files_is_refused(tmp_path, corpora):
    data = _prepare(corpora, "a", tmp_path / "data")
    run = tmp_path / "run"
    train("pos", data, "gru", run, CFG, {"hidden_size": 6}, device="cpu", stop_after=1)
    _prepare(corpora, "b", data)  # the same folder, prepared again from other files
    with pytest.raises(InnError) as error:
        train("pos", data, "gru", run, CFG, {"hidden_size": 6}, device="cpu")
    trained = read_checkpoint(run / "last.pt")["data"]["fingerprint"]
    assert str(error.value) == (
        f"{run / 'last.pt'} was trained on other data (fingerprint {trained}) than the data folder now holds "
        f"(fingerprint {data_fingerprint(data)}; it was prepared again from other files): delete {run / 'last.pt'} "
        "to train afresh on the new data, or restore the old data to resume"
    )
    _prepare(corpora, "a", data)  # the old data back: it resumes
    assert train("pos", data, "gru", run, CFG, {"hidden_size": 6}, device="cpu").epoch.tolist() == [1, 2]


def test_a_last_pt_from_before_fingerprints_resumes_with_one_warning(tmp_path, corpora, caplog):
    data = _prepare(corpora, "a", tmp_path / "data")
    straight = train("pos", data, "gru", tmp_path / "straight", CFG, {"hidden_size": 6}, device="cpu")
    run = tmp_path / "run"
    train("pos", data, "gru", run, CFG, {"hidden_size": 6}, device="cpu", stop_after=1)
    saved = read_checkpoint(run / "last.pt")
    torch.save({k: v for k, v in saved.items() if k not in ("data", "inn_version")} | {"format": 1}, run / "last.pt")
    with caplog.at_level(logging.WARNING, logger="inn.experiment.train.loop"):
        history = train("pos", data, "gru", run, CFG, {"hidden_size": 6}, device="cpu")
    warnings = [
        r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and r.name == "inn.experiment.train.loop"
    ]
    assert warnings == [
        f"{run / 'last.pt'} was written before data fingerprints: resuming without checking that "
        "the data folder still holds the data it was trained on"
    ]
    timing = ["seconds", "cpu_seconds"]
    assert history.drop(columns=timing).equals(straight.drop(columns=timing))
    assert read_checkpoint(run / "checkpoint.pt")["data"]["fingerprint"] == data_fingerprint(data)


@pytest.mark.parametrize("model", ["bigru", "perceptron"])
def test_evaluate_refuses_a_model_of_other_data(tmp_path, corpora, model, capsys):
    a, b = _prepare(corpora, "a", tmp_path / "a"), _prepare(corpora, "b", tmp_path / "b")
    run = tmp_path / "run"
    if model == "perceptron":
        assert main(["train-perceptron", "--data", str(a), "--out-dir", str(run), "--iterations", "1"]) == 0
    else:
        train("pos", a, model, run, TrainConfig(max_epochs=1), {"hidden_size": 6}, device="cpu", meta={"dataset": "a"})
    status = main(evaluate_argv(run / "checkpoint.pt", b, tmp_path / "eval"))
    assert (status, capsys.readouterr().err) == (
        2,
        (
            f"error: {run / 'checkpoint.pt'} was trained on other data (a, fingerprint {data_fingerprint(a)}) than {b} "
            f"(fingerprint {data_fingerprint(b)}): evaluate it on the folder it was trained on; to score other text "
            "with the model's own vocabularies use `inn tag MODEL FILE.conllu --accuracy`\n"
        ),
    )
    assert not (tmp_path / "eval" / "metrics.json").exists()
    # on its own data: the metrics name the data scored, and its fingerprint
    assert main(evaluate_argv(run / "checkpoint.pt", a, tmp_path / "eval")) == 0
    metrics = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    assert (metrics["dataset"], metrics["data"], metrics["data_fingerprint"]) == ("a", str(a), data_fingerprint(a))


def test_a_folder_prepared_before_fingerprints_gets_one_from_its_contents(tmp_path, corpora):
    data = _prepare(corpora, "a", tmp_path / "a")
    recorded = read_record(data)["fingerprint"]
    (data / RECORD_NAME).unlink()  # as the data stage wrote folders before this change
    assert read_record(data) == {} and data_fingerprint(data) == recorded
    train("pos", data, "gru", tmp_path / "run", TrainConfig(max_epochs=1), {"hidden_size": 6}, device="cpu")
    trained = read_checkpoint(tmp_path / "run" / "checkpoint.pt")["data"]
    assert (trained["fingerprint"], trained["corpus"], trained["column"]) == (recorded, "a", "xpos")


def test_evaluate_reads_a_checkpoint_from_before_fingerprints_and_says_it_could_not_check(tmp_path, corpora, caplog):
    data = _prepare(corpora, "a", tmp_path / "a")
    run = tmp_path / "run"
    train("pos", data, "gru", run, TrainConfig(max_epochs=1), {"hidden_size": 6}, device="cpu")
    new, _ = evaluate_checkpoint(run / "checkpoint.pt", data, device="cpu")
    saved = read_checkpoint(run / "checkpoint.pt")  # as inn wrote it before (format 1: no data section)
    torch.save(
        {k: v for k, v in saved.items() if k not in ("data", "inn_version")} | {"format": 1}, tmp_path / "old.pt"
    )
    with caplog.at_level(logging.WARNING, logger="inn.experiment.train.evaluate"):
        old, _ = evaluate_checkpoint(tmp_path / "old.pt", data, device="cpu")
    assert [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.WARNING and r.name == "inn.experiment.train.evaluate"
    ] == [
        f"{tmp_path / 'old.pt'} was written before data fingerprints (format 1): cannot check that it was trained "
        f"on {data}"
    ]
    assert old["accuracy"] == new["accuracy"] and old["dataset"] == "a"
