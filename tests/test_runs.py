"""Runs that outlive their machine: provenance in histories and states, ``inn runs``, kept states."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
from conftest import tiny_walks, train_argv

from inn.errors import InnError
from inn.experiment import provenance, runs
from inn.experiment.runs import list_runs, resumed_commit_note, save_states, source_commit
from inn.experiment.train import TrainConfig, train
from inn.tables import read_tsv

INN_FAST = {
    "hidden_size": 6,
    "solver": "newton_krylov",
    "solver_options": {"tol": 1e-4, "max_iter": 20, "krylov_max_iter": 20},
}


@pytest.fixture(scope="module")
def walks(tmp_path_factory) -> Path:
    return tiny_walks(tmp_path_factory.mktemp("walks") / "b0.5", (30, 10, 10), max_len=8)


def _cfg(**kw) -> TrainConfig:
    return TrainConfig(**{"max_epochs": 3, "patience": 5, "lr": 0.5, "word_dropout": 0.0, "loss": "token", **kw})


def _run(results: Path, model: str = "inn", seed: int = 1) -> Path:
    return results / "train" / "walks" / "b0.5" / model / f"seed{seed}"


def test_source_commit_names_the_checkout_or_the_version():
    import inn

    commit = source_commit()
    package = Path(inn.__file__).resolve().parent
    head = subprocess.run(["git", "-C", str(package), "rev-parse", "--short=7", "HEAD"], capture_output=True, text=True)
    if head.returncode == 0 and commit != f"inn {inn.__version__}":
        assert commit.removesuffix("-dirty") == head.stdout.strip()
    else:
        assert commit == f"inn {inn.__version__}"


def test_a_source_tree_git_archive_exported_names_its_commit(tmp_path):
    """The source shipped without its repository (``git archive``, as to a lent GPU machine)
    records the commit it was archived from, not ``inn <version>``."""
    import inn

    package = Path(inn.__file__).resolve().parent
    git = ["git", "-C", str(package)]
    if subprocess.run([*git, "ls-files", "--error-unmatch", "COMMIT"], capture_output=True).returncode:
        pytest.skip("not a git checkout with inn/COMMIT committed")
    head = subprocess.run([*git, "rev-parse", "--short=7", "HEAD"], capture_output=True, text=True).stdout.strip()
    top = subprocess.run([*git, "rev-parse", "--show-toplevel"], capture_output=True, text=True).stdout.strip()
    archive = subprocess.run(["git", "-C", top, "archive", "HEAD", "src/inn"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(tmp_path)], input=archive.stdout, check=True)
    shown = subprocess.run(
        [sys.executable, "-c", "from inn.experiment.runs import source_commit; print(source_commit())"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(tmp_path / "src")},
        cwd=tmp_path,
        check=True,
    )
    assert shown.stdout.strip() == head


def test_an_unfilled_commit_file_is_no_commit(tmp_path):
    (tmp_path / "COMMIT").write_text("$Format:%H$\n")
    assert provenance._archived_commit(tmp_path) is None
    assert provenance._archived_commit(tmp_path / "absent") is None
    (tmp_path / "COMMIT").write_text("5e7c7e5a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e\n")
    assert provenance._archived_commit(tmp_path) == "5e7c7e5"


def test_history_and_state_record_device_threads_and_commit(tmp_path, walks):
    out = _run(tmp_path / "results")
    train("walks", walks, "inn", out, _cfg(), INN_FAST, device="cpu", stop_after=2)
    saved = torch.load(out / "last.pt", weights_only=True)
    assert saved["meta"]["commit"] == source_commit()
    history = read_tsv(out / "history.tsv")  # (a commit of digits alone stays text)
    assert list(history["device"]) == ["cpu", "cpu"]
    assert list(history["commit"]) == [source_commit()] * 2
    assert (history["threads"] == torch.get_num_threads()).all()
    assert [row["commit"] for row in saved["train_state"]["history"]] == [source_commit()] * 2


def test_inn_runs_says_how_far_into_an_epoch_a_stopped_run_was_saved(tmp_path, walks, monkeypatch):
    import inn.experiment.train.epoch as epoch_module

    real, calls = epoch_module._train_batch, []

    def stopping(*args, **kwargs):
        calls.append(1)
        if len(calls) == 6 + 3:  # 30 walks in batches of 5: the third batch of epoch 2
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(epoch_module, "_train_batch", stopping)
    results = tmp_path / "results"
    with pytest.raises(KeyboardInterrupt):
        train("walks", walks, "inn", _run(results), _cfg(batch_size=5), INN_FAST, device="cpu", save_every=0.0)
    row = list_runs([results]).iloc[0]
    assert row["status"] == "unfinished" and row["epochs"] == 1
    assert row["ended_by"] == "running, 0 of 5 epochs without a better dev; 2 batches of epoch 2 saved"


def test_inn_runs_lists_unfinished_and_finished_runs(tmp_path, walks, capsys):
    results = tmp_path / "results"
    train("walks", walks, "inn", _run(results), _cfg(), INN_FAST, device="cpu", stop_after=1)
    train("walks", walks, "bilstm-h4", _run(results, "bilstm-h4"), _cfg(max_epochs=2), device="cpu")
    table = list_runs([results]).set_index("model")
    assert table.loc["inn", "status"] == "unfinished" and table.loc["inn", "epochs"] == 1
    assert table.loc["inn", "ended_by"] == "running, 0 of 5 epochs without a better dev"
    cpu = "cpu" if torch.get_num_threads() == 1 else f"cpu, {torch.get_num_threads()} threads"
    assert (
        table.loc["inn", "epochs_by_device"].startswith(f"1 {cpu} ") and source_commit() in table.loc["inn", "commits"]
    )
    assert table.loc["bilstm-h4", "status"] == "finished" and table.loc["bilstm-h4", "ended_by"] == "cap"
    assert table.loc["bilstm-h4", "epochs_by_device"].startswith(f"1-2 {cpu} ")
    runs.main([str(results)])
    shown = capsys.readouterr().out
    assert "| walks | b0.5 | inn | 1 | unfinished | 1 |" in shown


def test_a_state_over_the_size_limit_stays_and_its_history_travels(tmp_path, walks, capsys):
    import json
    import socket

    here, kept = tmp_path / "here" / "results", tmp_path / "kept"
    train("walks", walks, "bilstm-h8", _run(here, "bilstm-h8"), _cfg(), device="cpu", stop_after=1)
    save_states([here], kept)  # first within any limit: its state travels
    target = kept / _run(here, "bilstm-h8").relative_to(here)
    assert (target / "last.pt").is_file() and (target / "best.pt").is_file()
    runs.main([str(here), "--keep-states", str(kept), "--max-state-mb", "0.001"])  # then over it
    assert not (target / "last.pt").exists() and not (target / "best.pt").exists()
    record = json.loads((target / runs.ELSEWHERE).read_text())
    state_path = str((_run(here, "bilstm-h8") / "last.pt").resolve())
    assert record["host"] == socket.gethostname() and record["path"] == state_path
    assert record["epoch"] == 1 and record["training"]["patience"] == 5
    assert read_tsv(target / "history.tsv")["epoch"].tolist() == [1]
    row = list_runs([kept]).iloc[0]
    assert row["status"] == "stopped" and row["epochs"] == 1
    assert row["ended_by"] == (
        f"stopped (its state on {record['host']}: {state_path}), 0 of 5 epochs without a better dev"
    )
    save_states([here], kept)  # no limit again: the state replaces the record
    assert (target / "last.pt").is_file() and not (target / runs.ELSEWHERE).exists()
    assert list_runs([kept]).iloc[0]["status"] == "unfinished"
    with pytest.raises(InnError, match="--max-state-mb goes with --keep-states"):
        runs.main([str(here), "--max-state-mb", "10"])


def test_kept_state_resumes_on_another_machine(tmp_path, walks, caplog):
    """A kept state (no warm starts) copied into a fresh results folder resumes after its epoch."""
    here, kept, there = tmp_path / "here" / "results", tmp_path / "kept", tmp_path / "there" / "results"
    train("walks", walks, "inn", _run(here), _cfg(), INN_FAST, device="cpu", stop_after=1)
    assert "warm_starts" in torch.load(_run(here) / "last.pt", weights_only=True)
    history_file = _run(here) / "history.tsv"
    written_history = history_file.read_text()
    # a workflow job that resumes removes its outputs until its next epoch: the state's history is kept
    history_file.unlink()
    (_run(here) / "logs").mkdir()
    (_run(here) / "logs" / "train_20261127094711_gpu.log").write_text("an earlier stretch\n")
    (written,) = save_states([here], kept)
    state = torch.load(written / "last.pt", weights_only=True)
    assert "warm_starts" not in state and state["train_state"]["epoch"] == 1
    assert (written / "best.pt").is_file() and (written / "history.tsv").read_text() == written_history
    assert (written / "logs" / "train_20261127094711_gpu.log").read_text() == "an earlier stretch\n"
    assert list_runs([kept]).loc[0, "status"] == "unfinished"
    shutil.copytree(kept / "train", there / "train")
    with caplog.at_level(logging.INFO):
        history = train("walks", walks, "inn", _run(there), _cfg(), INN_FAST, device="cpu")
    assert "resuming inn from" in caplog.text and "after epoch 1" in caplog.text
    assert list(history["epoch"]) == [1, 2, 3]


def test_every_stretch_logs_into_the_run_and_is_kept_once(tmp_path, walks, caplog):
    """``inn train`` logs each stretch into the run's logs/ (a workflow job that resumes empties
    its own log first); keeping the states carries them, and the workflow's copy of a stretch
    the run logged itself is not kept twice."""
    import json
    import time as clock

    from inn.experiment.cli import main

    results = tmp_path / "results"
    run = _run(results)
    settings = json.dumps(
        {
            "training": {"max_epochs": 3, "patience": 5, "lr": 0.5, "word_dropout": 0.0, "loss": "token"},
            "model": INN_FAST,
        }
    )
    command = train_argv("walks", walks, "inn", run, "--device", "cpu", "--settings", settings, "--stop-after", "1")
    with caplog.at_level(logging.INFO):  # as the command line has it (pytest's root logger takes warnings)
        assert main(command) == 0
        clock.sleep(1.1)  # stretches are named by the second they began
        assert main(command) == 0
    stretches = sorted((run / "logs").glob("train_*.log"))
    assert len(stretches) == 2
    assert "epoch 1:" in stretches[0].read_text() and "resuming" not in stretches[0].read_text()
    assert "resuming inn from" in stretches[1].read_text() and "epoch 2:" in stretches[1].read_text()
    # the workflow's log of the last stretch (its stderr), beside the results folder
    workflow_log = results.parent / "logs" / "train_model" / "walks" / "b0.5" / "inn" / "seed1.log"
    workflow_log.parent.mkdir(parents=True)
    workflow_log.write_text(stretches[1].read_text() + "interrupted (SIGINT): ...\n")
    (written,) = save_states([results], tmp_path / "kept")
    assert sorted(p.name for p in (written / "logs").iterdir()) == [p.name for p in stretches]


def test_a_state_of_other_code_says_so():
    now = source_commit()
    assert resumed_commit_note("last.pt", {"meta": {"commit": now}}) is None
    note = resumed_commit_note("r/last.pt", {"meta": {"commit": "abc1234"}})
    assert note.startswith("r/last.pt was written at commit abc1234; resuming at ") and "git diff abc1234" in note
    assert "before resume states recorded their commit" in resumed_commit_note("r/last.pt", {"meta": {}})


def test_resuming_under_another_commit_warns(tmp_path, walks, caplog):
    out = _run(tmp_path / "results")
    train("walks", walks, "inn", out, _cfg(), INN_FAST, device="cpu", stop_after=1)
    state = torch.load(out / "last.pt", weights_only=True)
    state["meta"]["commit"] = "0000000"
    torch.save(state, out / "last.pt")
    with caplog.at_level(logging.WARNING):
        train("walks", walks, "inn", out, _cfg(), INN_FAST, device="cpu", stop_after=1)
    assert "was written at commit 0000000; resuming at" in caplog.text


def test_devices_of_older_histories_come_from_their_logs(tmp_path):
    run = _run(tmp_path / "results")
    (run / "logs").mkdir(parents=True)
    pd.DataFrame({"epoch": [1, 2, 3], "dev_error": [0.3, 0.2, 0.25], "seconds": [100.0, 110.0, 1500.0]}).to_csv(
        run / "history.tsv", sep="\t", index=False
    )
    (run / "logs" / "a.log").write_text(
        "t INFO inn.experiment.train: inn on walks: 9 parameters, hidden 2, 3 train / 1 dev sequences, "
        "device cuda, 1 threads\n"
        "t INFO inn.experiment.train: epoch 1: train loss 0.4, dev loss\n"
        "t INFO inn.experiment.train: epoch 2: train loss 0.3, dev loss\n"
        "t INFO inn.experiment.train: inn on walks: 9 parameters, hidden 2, 3 train / 1 dev sequences, "
        "device cpu, 1 threads\n"
        "t INFO inn.experiment.train: epoch 3: train loss 0.3, dev loss\n",
        encoding="utf-8",
    )
    row = list_runs([tmp_path / "results"]).iloc[0]
    assert row["epochs_by_device"] == "1-2 cuda (log) 100-110 s (unrecorded); 3 cpu (log) 1500 s (unrecorded)"
    assert row["status"] == "stopped" and row["best_epoch"] == 2


def test_a_change_of_threads_starts_a_new_stretch(tmp_path):
    run = _run(tmp_path / "results")
    run.mkdir(parents=True)
    pd.DataFrame(
        {
            "epoch": [1, 2, 3, 4],
            "dev_error": [0.3, 0.2, 0.25, 0.24],
            "seconds": [964.0, 1019.0, 758.0, 160.0],
            "device": ["cpu", "cpu", "cpu", "cuda NVIDIA H200"],
            "threads": [1, 2, 2, 1],
            "commit": ["a9e4c60"] * 4,
        }
    ).to_csv(run / "history.tsv", sep="\t", index=False)
    row = list_runs([tmp_path / "results"]).iloc[0]
    assert row["epochs_by_device"] == (
        "1 cpu 964 s (a9e4c60); 2-3 cpu, 2 threads 758-1019 s (a9e4c60); 4 cuda NVIDIA H200 160 s (a9e4c60)"
    )


def test_a_folder_without_runs_is_one_line(tmp_path):
    with pytest.raises(InnError, match="no such folder"):
        list_runs([tmp_path / "missing"])
    with pytest.raises(InnError, match=r"no training runs in it \(expected train/<task>/"):
        list_runs([tmp_path])
