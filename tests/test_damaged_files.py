"""Damaged or altered files are never used (issue 68): model files checked against the digest
of their own weights, prepared folders against their fingerprint, evaluation's outputs written
as one unit and checked against each other by ``inn collect``, ``prepare-pos`` whole or not at
all, and a finished run never trained again by a plain rerun."""

from __future__ import annotations

import json
import logging
import struct
import zipfile
from pathlib import Path

import pytest
import torch
from conftest import TINY_FEATURES, TINY_TEXT, evaluate_argv, export_argv, one_line, tiny_corpus, train_argv

from inn.checkpoints import OWN_DIGEST, read_checkpoint, save_payload
from inn.errors import InnError
from inn.experiment.cli import main as cli
from inn.experiment.prepare import prepare_pos
from inn.experiment.train import TrainConfig, train


def _copy(folder: Path, to: Path) -> Path:
    to.mkdir(parents=True)
    for path in folder.iterdir():
        if path.is_file():
            (to / path.name).write_bytes(path.read_bytes())
    return to


def _flip_weights(path: Path, out: Path) -> Path:
    """``path`` with 64 bytes flipped in the middle of its largest tensor's storage."""
    with zipfile.ZipFile(path) as archive:
        info = max((i for i in archive.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
    data = bytearray(path.read_bytes())
    name, extra = struct.unpack("<HH", data[info.header_offset + 26 : info.header_offset + 30])
    middle = info.header_offset + 30 + name + extra + info.file_size // 2 - 32
    for i in range(middle, middle + 64):
        data[i] ^= 0xFF
    out.write_bytes(bytes(data))
    return out


# --------------------------------------------------------------------------- model files


def test_model_files_carry_the_digest_of_their_weights(gru_run):
    assert read_checkpoint(gru_run / "checkpoint.pt")[OWN_DIGEST]


@pytest.mark.parametrize("command", ["evaluate", "tag"])
def test_a_checkpoint_with_flipped_bytes_is_refused(tmp_path, gru_run, pos_dir, command, capsys):
    damaged = _flip_weights(gru_run / "checkpoint.pt", tmp_path / "checkpoint.pt")
    if command == "evaluate":
        argv = evaluate_argv(damaged, pos_dir, tmp_path / "e")
    else:
        text = tmp_path / "in.txt"
        text.write_text("The cat sat .\n")
        argv = ["tag", str(damaged), str(text), "--input", "text", "--out", str(tmp_path / "out.txt")]
    assert cli(argv) == 2
    line = one_line(capsys)
    assert line.startswith(f"error: {damaged}: its weights are damaged or were altered (they hash to sha256 ")
    assert line.endswith("; use an intact copy, or train (or export) the model again")
    assert not (tmp_path / "e").exists() and not (tmp_path / "out.txt").exists()


def test_a_tagger_file_with_flipped_bytes_is_refused(tmp_path, gru_run, pos_dir, capsys):
    tagger = tmp_path / "tagger.pt"
    assert cli(export_argv(gru_run / "checkpoint.pt", tagger)) == 0
    damaged = _flip_weights(tagger, tmp_path / "damaged.pt")
    text = tmp_path / "in.txt"
    text.write_text("The cat sat .\n")
    capsys.readouterr()
    assert cli(["tag", str(damaged), str(text), "--input", "text"]) == 2
    assert one_line(capsys).startswith(f"error: {damaged}: its weights are damaged or were altered")


def test_nan_weights_are_refused_even_with_a_matching_digest(tmp_path, gru_run):
    payload = read_checkpoint(gru_run / "checkpoint.pt")
    payload["state_dict"] = {
        k: torch.full_like(v, float("nan")) if v.is_floating_point() else v for k, v in payload["state_dict"].items()
    }
    save_payload(payload, tmp_path / "nan.pt")  # sealed with the digest of its NaN weights
    with pytest.raises(
        InnError,
        match=r"^.*nan\.pt: its weights are not finite \(\d+ of \d+ tensors hold NaN or "
        r"inf values, first [\w.]+\): a model that cannot tag; use an intact copy",
    ):
        read_checkpoint(tmp_path / "nan.pt")


def test_a_model_file_from_before_the_digest_loads_with_a_warning(tmp_path, gru_run, caplog):
    payload = read_checkpoint(gru_run / "checkpoint.pt")
    del payload[OWN_DIGEST]
    torch.save(payload, tmp_path / "old.pt")
    with caplog.at_level(logging.WARNING):
        assert read_checkpoint(tmp_path / "old.pt")["state_dict"]
    assert "old.pt was written before model files carried the digest of their own weights" in caplog.text


def test_a_resume_state_with_flipped_bytes_is_set_aside(tmp_path, pos_dir, caplog):
    out = tmp_path / "run"
    cfg = TrainConfig(max_epochs=2)
    train("pos", pos_dir, "gru", out, cfg, {"hidden_size": 3}, device="cpu", stop_after=1)
    _flip_weights(out / "last.pt", out / "last.pt")
    with caplog.at_level(logging.WARNING):
        history = train("pos", pos_dir, "gru", out, cfg, {"hidden_size": 3}, device="cpu")
    assert len(list(out.glob("last.pt.damaged-*"))) == 1 and len(history) == 2
    assert "its weights are damaged or were altered" in caplog.text


# --------------------------------------------------------------------------- prepared folders


def _edit_tags(folder: Path) -> None:
    path = folder / "train.tsv"
    path.write_text(path.read_text().replace("\tNN\n", "\tVBD\n", 1))


def _reorder_tags(folder: Path) -> None:
    features = json.loads((folder / "features.json").read_text())
    features["tags"] = list(reversed(features["tags"]))
    (folder / "features.json").write_text(json.dumps(features))


def _cut_at_a_sentence(folder: Path) -> None:
    path = folder / "train.tsv"
    sentences = path.read_text().split("\n\n")
    path.write_text("\n\n".join(sentences[:2]) + "\n\n")


@pytest.mark.parametrize("damage", [_edit_tags, _reorder_tags, _cut_at_a_sentence])
@pytest.mark.parametrize("command", ["train", "evaluate"])
def test_a_prepared_folder_changed_since_is_refused(tmp_path, pos_dir, gru_run, damage, command, capsys):
    data = _copy(pos_dir, tmp_path / "data")
    damage(data)
    if command == "train":
        argv = ["train", "--task", "pos", "--data", str(data), "--model", "gru-h3", "--out-dir", str(tmp_path / "r")]
    else:
        argv = evaluate_argv(gru_run / "checkpoint.pt", data, tmp_path / "r")
    assert cli(argv) == 2
    line = one_line(capsys)
    assert line.startswith(f"error: {data} changed since the data stage prepared it (fingerprint ")
    assert line.endswith("a split or features.json was edited or damaged; prepare the data again")
    assert not (tmp_path / "r" / "checkpoint.pt").exists() and not (tmp_path / "r" / "metrics.json").exists()


# --------------------------------------------------------------------------- finished runs


def test_a_plain_rerun_of_a_finished_run_changes_nothing(tmp_path, pos_dir, capsys, caplog):
    out = tmp_path / "run"
    argv = train_argv("pos", pos_dir, "gru-h3", out, "--settings", '{"training": {"max_epochs": 1}}')
    assert cli(argv) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    caplog.clear()
    with caplog.at_level(logging.INFO):
        assert cli(argv) == 0
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    said = [r.getMessage() for r in caplog.records if "finished run" in r.getMessage()]
    assert said == [
        f"{out} holds a finished run (1 epoch(s)): nothing to do; give --retrain to train it again "
        "(its checkpoint.pt and history.tsv are then set aside)"
    ]
    assert cli(argv + ["--retrain"]) == 0
    assert len(list(out.glob("checkpoint.pt.replaced-*"))) == 1


# --------------------------------------------------------------------------- evaluation's outputs


def test_a_failed_metrics_write_leaves_the_predictions_as_they_were(tmp_path, gru_run, pos_dir, monkeypatch, capsys):
    import errno

    import inn.experiment.evaluate as evaluate

    out = tmp_path / "eval"
    out.mkdir()
    (out / "predictions.tsv").write_text("earlier\n")
    (out / "metrics.json").write_text("{}\n")

    def full(path, obj):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(evaluate, "write_json", full)
    assert cli(evaluate_argv(gru_run / "checkpoint.pt", pos_dir, out)) == 2
    assert one_line(capsys).startswith(f"error: cannot write {out}/metrics.json: No space left on device")
    assert (out / "predictions.tsv").read_text() == "earlier\n" and (out / "metrics.json").read_text() == "{}\n"
    assert sorted(p.name for p in out.iterdir()) == ["metrics.json", "predictions.tsv"]  # no temporary file left


# --------------------------------------------------------------------------- inn collect


@pytest.fixture
def results(tmp_path, gru_run, pos_dir) -> Path:
    """A results folder of one evaluated run."""
    results = tmp_path / "results"
    train_dir = results / "train" / "pos" / "mine" / "gru" / "seed1"
    train_dir.mkdir(parents=True)
    (train_dir / "history.tsv").write_bytes((gru_run / "history.tsv").read_bytes())
    assert (
        cli(evaluate_argv(gru_run / "checkpoint.pt", pos_dir, results / "eval" / "pos" / "mine" / "gru" / "seed1")) == 0
    )
    return results


def _metrics(results: Path) -> Path:
    return results / "eval" / "pos" / "mine" / "gru" / "seed1" / "metrics.json"


def _collect(results: Path, tmp_path: Path) -> int:
    return cli(["collect", "--results", str(results), "--out-dir", str(tmp_path / "tables")])


def test_collect_takes_metrics_that_agree_with_their_predictions(tmp_path, results, capsys):
    assert json.loads(_metrics(results).read_text())["predictions_sha256"]
    assert _collect(results, tmp_path) == 0


def test_collect_refuses_a_score_set_by_hand(tmp_path, results, capsys):
    metrics = json.loads(_metrics(results).read_text())
    metrics["accuracy"] = 99.9
    _metrics(results).write_text(json.dumps(metrics))
    capsys.readouterr()
    assert _collect(results, tmp_path) == 2
    line = one_line(capsys)
    assert line.startswith("error: pos mine gru seed 1: its metrics.json says accuracy 99.9 but its predictions (")
    assert line.endswith(
        "the two files contradict each other; evaluate the run again (inn evaluate, or rerun its workflow job)"
    )
    assert not (tmp_path / "tables").exists()


def test_collect_refuses_predictions_other_than_the_metrics_were_computed_from(tmp_path, results, capsys):
    predictions = _metrics(results).with_name("predictions.tsv")
    predictions.write_text(predictions.read_text().replace("\tThe\t", "\tthe\t"))  # same accuracy, other file
    capsys.readouterr()
    assert _collect(results, tmp_path) == 2
    assert one_line(capsys).startswith(
        f"error: pos mine gru seed 1: its metrics.json was computed from other predictions than {predictions} (sha256 "
    )


def test_collect_takes_older_metrics_with_a_warning(tmp_path, results, caplog):
    metrics = json.loads(_metrics(results).read_text())
    del metrics["predictions_sha256"]
    _metrics(results).write_text(json.dumps(metrics))
    with caplog.at_level(logging.WARNING):
        assert _collect(results, tmp_path) == 0
    assert "1 of 1 runs' metrics.json were written before metrics named the digest of their predictions" in caplog.text


@pytest.mark.parametrize(
    "text, said",
    [
        ("", "is empty, not the metrics inn evaluate writes"),
        ("{accuracy: 1", "is not JSON (Expecting property name enclosed in double quotes at line 1 column 2)"),
        ("[1, 2]", "holds a JSON list, not the object of metrics inn evaluate writes"),
    ],
)
def test_collect_names_a_metrics_file_that_is_no_metrics(tmp_path, results, text, said, capsys):
    _metrics(results).write_text(text)
    capsys.readouterr()
    assert _collect(results, tmp_path) == 2
    assert one_line(capsys) == (
        f"error: {_metrics(results)} {said}; evaluate the run again (inn evaluate, or rerun its workflow job)"
    )


# --------------------------------------------------------------------------- prepare-pos


def test_a_preparation_that_fails_half_way_leaves_the_folder_as_it_was(tmp_path, pos_dir, monkeypatch):
    from inn.data.features import FeatureExtractor

    data = _copy(pos_dir, tmp_path / "data")
    (data / "notes.txt").write_text("mine\n")
    before = {p.name: p.read_bytes() for p in data.iterdir() if p.name != ".lock"}
    raw = tiny_corpus(tmp_path / "raw")
    raw["train"].write_text(TINY_TEXT.replace("cat", "cow") * 3)

    def full(self, path):
        raise InnError(f"cannot write {path}: No space left on device")

    monkeypatch.setattr(FeatureExtractor, "save", full)
    with pytest.raises(InnError, match="No space left on device"):
        prepare_pos("tsv", raw, data, "mine", **TINY_FEATURES)
    assert {p.name: p.read_bytes() for p in data.iterdir() if p.name != ".lock"} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "raw"]  # no temporary folder left
    monkeypatch.undo()
    prepare_pos("tsv", raw, data, "mine", **TINY_FEATURES)
    assert "cow" in (data / "train.tsv").read_text() and (data / "notes.txt").read_text() == "mine\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "raw"]


def test_a_second_preparation_into_a_folder_in_use_is_refused(tmp_path, pos_dir):
    from inn.io import locked_folder

    data = _copy(pos_dir, tmp_path / "data")
    before = {p.name: p.read_bytes() for p in data.iterdir()}
    with locked_folder(data), pytest.raises(InnError, match=rf"^{data} is in use by another run \(pid \d+ on "):
        prepare_pos("tsv", tiny_corpus(tmp_path / "raw"), data, "mine", **TINY_FEATURES)
    assert {p.name: p.read_bytes() for p in data.iterdir() if p.name != ".lock"} == {
        k: v for k, v in before.items() if k != ".lock"
    }
