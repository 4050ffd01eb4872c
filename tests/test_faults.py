"""Fault injection (issue 18): every fault a user can hit ends in one line that names the cause
and the fix, no traceback, nothing partial kept as complete, and a rerun after the fix finishes
with the same history and weights as an uninterrupted run.

All on a tiny walks task and a BiLSTM of 4 units (a fraction of a second per run); the signal
and kill tests run ``inn`` in a subprocess (a few seconds each, mostly importing torch).
"""

from __future__ import annotations

import errno
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
from conftest import REPO, evaluate_argv, tiny_walks, train_argv

import inn.experiment.train.loop
from inn.data.walk import generate_walks, save_walks
from inn.errors import InnError
from inn.experiment.cli import main as cli
from inn.experiment.config import training_defaults
from inn.experiment.train import OUTPUTS, TrainConfig, train
from inn.io import locked_folder, torch_save

MODEL = "bilstm-h4"
SETTINGS = {"max_epochs": 2, "patience": 5}


def _cfg(**kw) -> TrainConfig:
    """A walks run's settings, from the schema's walks defaults as `inn train --task walks` takes them."""
    return TrainConfig(**{**training_defaults("walks"), **SETTINGS, **kw})


@pytest.fixture(scope="module")
def walk_dir(tmp_path_factory) -> Path:
    return tiny_walks(tmp_path_factory.mktemp("walks") / "b1.0")


@pytest.fixture(scope="module")
def straight(walk_dir, tmp_path_factory) -> tuple[pd.DataFrame, dict]:
    """History and weights of an uninterrupted run: what every recovered run must end with."""
    out = tmp_path_factory.mktemp("straight")
    history = train("walks", walk_dir, MODEL, out, _cfg(), device="cpu")
    return history, torch.load(out / "checkpoint.pt", weights_only=True)["state_dict"]


def _assert_as_straight(out: Path, history: pd.DataFrame, straight) -> None:
    where = ["seconds", "cpu_seconds", "threads"]  # how long and on how many threads it ran, not what it computed
    pd.testing.assert_frame_equal(history.drop(columns=where), straight[0].drop(columns=where))
    weights = torch.load(out / "checkpoint.pt", weights_only=True)["state_dict"]
    assert weights.keys() == straight[1].keys() and all(torch.equal(weights[k], straight[1][k]) for k in weights)
    assert not _temporaries(out) and not (out / "last.pt").exists()


def _temporaries(out: Path) -> list[Path]:
    """Temporary files of the run's atomic writes (inn.io.atomic_path)."""
    return [tmp for name in OUTPUTS for tmp in out.glob(f".{name}.*.tmp")]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": "1"}


# --------------------------------------------------------------------------- 2: a damaged last.pt


@pytest.mark.parametrize("damage", ["truncated", "empty", "checkpoint.pt copied over it", "foreign"])
def test_damaged_last_pt_is_set_aside_and_training_starts_afresh(tmp_path, walk_dir, straight, damage, caplog):
    out = tmp_path / "run"
    last = out / "last.pt"
    if damage == "truncated":
        train("walks", walk_dir, MODEL, out, _cfg(), device="cpu", stop_after=1)
        last.write_bytes(last.read_bytes()[:2000])
    elif damage == "checkpoint.pt copied over it":
        train("walks", walk_dir, MODEL, tmp_path / "done", _cfg(max_epochs=1), device="cpu")
        out.mkdir()
        last.write_bytes((tmp_path / "done" / "checkpoint.pt").read_bytes())
    else:
        out.mkdir()
        last.write_bytes(b"") if damage == "empty" else torch.save({"weights": torch.zeros(3)}, last)
    damaged = last.read_bytes()
    with caplog.at_level(logging.WARNING, logger="inn.experiment.train.loop"):
        history = train("walks", walk_dir, MODEL, out, _cfg(), device="cpu")
    _assert_as_straight(out, history, straight)
    (aside,) = out.glob("last.pt.damaged-*")
    assert aside.read_bytes() == damaged  # set aside, not lost
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    reason = {
        "truncated": "truncated or damaged: PytorchStreamReader failed",
        "empty": "the file is empty",
        "foreign": "not a resume state",
        "checkpoint.pt copied over it": "no optimizer or train_state in it",
    }
    assert warning.startswith(f"cannot resume from {last} ({reason[damage]}")
    assert warning.endswith(f": set aside as {aside.name}, training starts afresh") and "\n" not in warning


# --------------------------------------------------------------------------- 3: unwritable folder, failed saves


def _deny_creation(monkeypatch, errno_: int, names: tuple[str, ...] = ("",)) -> None:
    """Fail the creation of files whose name starts with one of ``names`` as the kernel does for
    a read-only folder, for root too (which ignores permission bits)."""
    real_open = os.open

    def denying_open(path, flags, *args, **kwargs):
        if flags & os.O_CREAT and Path(path).name.startswith(names) and not os.path.exists(path):
            raise OSError(errno_, os.strerror(errno_), str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", denying_open)


def test_unwritable_folder_is_found_before_any_work(tmp_path, monkeypatch):
    out = tmp_path / "run"
    out.mkdir()
    (out / ".lock").touch()  # an earlier run's lock file: opening it still works, writing the folder not
    _deny_creation(monkeypatch, errno.EACCES)
    message = f"cannot write {out}: Permission denied; make the folder writable or choose another, then rerun"
    with pytest.raises(InnError, match=f"^{message}$"):  # before the (missing) data is read
        train("walks", tmp_path / "no-data", MODEL, out, _cfg(), device="cpu")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_read_only_folder(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    out.chmod(0o555)
    try:
        with pytest.raises(InnError, match=f"^cannot write {out}: Permission denied; make the folder writable"):
            train("walks", tmp_path / "no-data", MODEL, out, _cfg(), device="cpu")
    finally:
        out.chmod(0o755)


class _FullDisk:
    """A file on a disk that fills up after ``room`` bytes: writes then raise ENOSPC."""

    def __init__(self, handle, room: int = 100) -> None:
        self.handle, self.room = handle, room

    def write(self, data) -> int:
        if len(data) > self.room:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.room -= len(data)
        return self.handle.write(data)

    def __getattr__(self, name):
        return getattr(self.handle, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.handle.close()


def test_full_disk_save_through_torch_names_the_cause(tmp_path, monkeypatch):
    target = tmp_path / "x.pt"
    torch_save({"a": 1}, target)
    before = target.read_bytes()
    monkeypatch.setattr("inn.io.open", lambda *a, **k: _FullDisk(open(*a, **k)), raising=False)
    with pytest.raises(
        InnError,
        match=rf"^cannot write {target}: No space left on device; free some space, then "
        r"rerun \(the earlier x.pt is unchanged\)$",
    ):
        torch_save({"a": torch.zeros(10_000)}, target)
    assert target.read_bytes() == before and sorted(tmp_path.iterdir()) == [target]


@pytest.mark.parametrize("fault", ["no space", "no permission"])
def test_failed_save_keeps_the_last_good_checkpoint(tmp_path, walk_dir, straight, monkeypatch, fault):
    train("walks", walk_dir, MODEL, tmp_path, _cfg(), device="cpu", stop_after=1)
    saved = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    with monkeypatch.context() as patch:
        if fault == "no space":
            patch.setattr("inn.io.open", lambda *a, **k: _FullDisk(open(*a, **k)), raising=False)
            cause = "No space left on device; free some space"
        else:  # the folder became read-only during the run: its temporary files cannot be created
            _deny_creation(patch, errno.EACCES, (".best.pt.", ".last.pt.", ".history.tsv."))
            cause = "Permission denied; make the folder writable or choose another"
        with pytest.raises(
            InnError,
            match=rf"^cannot write {tmp_path}/(best|last).pt: {cause}, then rerun "
            r"\(the earlier (best|last).pt is unchanged\)$",
        ):
            train("walks", walk_dir, MODEL, tmp_path, _cfg(), device="cpu")
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == saved  # no temporary file, nothing changed
    _assert_as_straight(tmp_path, train("walks", walk_dir, MODEL, tmp_path, _cfg(), device="cpu"), straight)


# --------------------------------------------------------------------------- 4: messages that say what is true


def test_stop_in_the_first_epoch_does_not_claim_a_kept_checkpoint(tmp_path, walk_dir):
    bad = tmp_path / "bad"
    walks = generate_walks(60, b=1.0, dim=3, seed=1, max_len=12)
    walks[7][0][0, 0] = float("nan")
    save_walks(bad / "train.pt", walks)
    (bad / "dev.pt").write_bytes((walk_dir / "dev.pt").read_bytes())
    with pytest.raises(
        InnError,
        match=r"^loss is nan at epoch 1, batch \d+ of 3; stopped before any epoch "
        r"finished, nothing is saved; lower training.lr",
    ):
        train("walks", bad, MODEL, tmp_path / "run", _cfg(), device="cpu")
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == [".lock"]


def test_missing_best_pt_names_what_exists(tmp_path, walk_dir):
    train("walks", walk_dir, MODEL, tmp_path, _cfg(), device="cpu", stop_after=1)
    (tmp_path / "best.pt").unlink()
    with pytest.raises(
        InnError,
        match=rf"best.pt is missing after 1 epoch\(s\): cannot finish {tmp_path}; "
        rf"move {tmp_path}/last.pt aside to train afresh",
    ):
        train("walks", walk_dir, MODEL, tmp_path, _cfg(max_epochs=1), device="cpu")
    with pytest.raises(InnError, match=r"^training\.patience: 0 is less than the minimum of 1$"):  # no epoch would run
        _cfg(patience=0)


def test_damaged_checkpoint_says_what_to_do(tmp_path, walk_dir, capsys):
    run = tmp_path / "run"
    train("walks", walk_dir, MODEL, run, _cfg(max_epochs=1), device="cpu")
    ckpt = run / "checkpoint.pt"
    ckpt.write_bytes(ckpt.read_bytes()[:500])
    assert cli(evaluate_argv(ckpt, walk_dir, run)) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith(
        f"error: cannot read checkpoint {ckpt} (truncated or damaged: PytorchStreamReader failed reading zip archive"
    )
    assert err.endswith("): give a model file inn wrote (checkpoint.pt or tagger.pt), or train the model again\n")


# --------------------------------------------------------------------------- 5: bad command-line input


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["--settings", "{bad"],
            "--settings is not valid JSON: Expecting property name enclosed in double quotes at line 1 column 2",
        ),
        (
            ["--settings", '{"training": {"max_epochs": "3"}}'],
            "--settings: training.max_epochs: '3' is not of type 'integer'",
        ),
        (
            ["--settings", '{"training": {"clip": true}}'],
            "--settings: training.clip: True is not of type 'number', 'null'",
        ),
        (["--settings", '{"model": {"solver": 1}}'], "--settings: model.solver: 1 is not of type 'string'"),
        (
            ["--settings", '{"model": {"solver": "andersn"}}'],
            "--settings: model.solver: unknown solver 'andersn' (did you "
            "mean 'anderson'?); choose one of newton_krylov, newton_direct, "
            "anderson, fixed_point",
        ),
        (["--settings", "[1]"], "--settings: <top level>: [1] is not of type 'object'"),
        (["--settings", '{"training": [1]}'], "--settings: training: [1] is not of type 'object'"),
        (["--settings-file", "missing.json"], "cannot read --settings-file missing.json: No such file or directory"),
        (
            ["--settings", '{"training": {"max_train": 0}}'],
            "--settings: training.max_train: 0 is less than the minimum of 1",
        ),
        (
            ["--settings", '{"training": {"max_dev": -2}}'],
            "--settings: training.max_dev: -2 is less than the minimum of 1",
        ),
        # issue 29: a misspelt section or key is refused, not ignored (the run trained 30 epochs on everything)
        (
            ["--settings", '{"trainig": {"max_epochs": 1}, "model": {}}'],
            "--settings: trainig: unknown key (allowed: meta, model, training)",
        ),
        (
            ["--settings", '{"training": {"max_epoch": 1}}'],
            "--settings: training.max_epoch: unknown key (allowed: batch_size, "
            "clip, dropout, jacobian_every, jacobian_samples, jacobian_weight, "
            "loss, lr, lr_decay, max_dev, max_epochs, max_train, patience, "
            "warm_start, warm_start_adjoint, word_dropout)",
        ),
        (
            ["--settings", '{"model": {"solver_options": {"tol": -1}}}'],
            "--settings: model.solver_options.tol: -1 is less than or equal to the minimum of 0",
        ),
        (
            ["--settings", '{"model": {"hidden_size": 0}}'],
            "--settings: model.hidden_size: 0 is less than the minimum of 1",
        ),
        (
            ["--settings", '{"training": {"lr_decay": 1.5}}'],
            "--settings: training.lr_decay: 1.5 is greater than the maximum of 1",
        ),
        (["--seed", "-1"], "training.seed: -1 is less than the minimum of 0"),
    ],
)
def test_bad_train_input_gives_one_line(tmp_path, walk_dir, capsys, args, line):
    base = ["train", "--task", "walks", "--data", str(walk_dir), "--model", MODEL, "--out-dir", str(tmp_path)]
    assert cli(base + args) == 2
    assert capsys.readouterr().err == f"error: {line}\n"


def test_empty_data_gives_one_line(tmp_path, walk_dir, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    torch.save(
        {
            "x": torch.zeros(0, 1, 3),
            "y": torch.zeros(0, 1, dtype=torch.long),
            "lengths": torch.zeros(0, dtype=torch.long),
        },
        empty / "train.pt",
    )
    assert (
        cli(["train", "--task", "walks", "--data", str(empty), "--model", MODEL, "--out-dir", str(tmp_path / "r")]) == 2
    )
    assert capsys.readouterr().err == f"error: {empty}/train.pt holds no walks\n"
    train("walks", walk_dir, MODEL, tmp_path / "run", _cfg(max_epochs=1), device="cpu")
    with pytest.raises(SystemExit, match="2"):  # argparse: usage, then the line naming the argument
        cli(evaluate_argv(tmp_path / "run" / "checkpoint.pt", walk_dir, tmp_path / "run", "--max-sequences", "0"))
    assert capsys.readouterr().err.splitlines()[-1] == (
        "inn evaluate: error: argument --max-sequences: must be a whole number of at least 1, not '0'"
    )


# --------------------------------------------------------------------------- 6 and 8: concurrent runs, kill -9


def test_second_run_is_refused_and_a_killed_save_is_cleaned_up(tmp_path, walk_dir, straight):
    """A run killed (-9) inside a save holds the folder until it dies and leaves its temporary
    file; the next run clears only that run's temporaries and ends as an uninterrupted run."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\nfrom inn.io import atomic_path, locked_folder\n"
            "with locked_folder(sys.argv[1]), atomic_path(sys.argv[1] + '/last.pt') as tmp:\n"
            "    tmp.write_bytes(b'half a checkpoint'); print('saving', flush=True); time.sleep(60)",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    try:
        assert holder.stdout.readline() == "saving\n"
        with pytest.raises(
            InnError,
            match=rf"^{tmp_path} is in use by another run \(pid {holder.pid} on .+\); "
            "wait for it to finish or stop it, or choose another output folder$",
        ):
            train("walks", walk_dir, MODEL, tmp_path, _cfg(), device="cpu")
    finally:
        holder.kill()
        holder.wait()
    (stale,) = tmp_path.glob(".last.pt.*.tmp")
    others = [tmp_path / ".notes.tmp", tmp_path / ".last.pt.keep"]
    for other in others:
        other.touch()
    _assert_as_straight(tmp_path, train("walks", walk_dir, MODEL, tmp_path, _cfg(), device="cpu"), straight)
    assert not stale.exists() and all(other.exists() for other in others)
    with locked_folder(tmp_path), pytest.raises(InnError, match=rf"in use by another run \(pid {os.getpid()} "):
        train("walks", walk_dir, MODEL, tmp_path, _cfg(), device="cpu")  # a second lock in one process too


# --------------------------------------------------------------------------- 7: Ctrl-C and SIGTERM


#: ``inn`` whose epochs after the first saved one announce themselves and wait to be interrupted
SLOW_INN = """\
import sys, time
from pathlib import Path
import inn.experiment.cli, inn.experiment.train.loop
run_epoch, last = inn.experiment.train.loop._train_epoch, Path(sys.argv[sys.argv.index("--out-dir") + 1]) / "last.pt"
def slow_epoch(*args, **kwargs):
    if last.is_file():
        print("epoch started", flush=True)
        time.sleep(60)
    return run_epoch(*args, **kwargs)
inn.experiment.train.loop._train_epoch = slow_epoch
sys.exit(inn.experiment.cli.main(sys.argv[1:]))
"""


def test_interrupted_run_says_so_in_one_line_and_a_rerun_resumes(tmp_path, walk_dir, straight, monkeypatch, capsys):
    args = train_argv(
        "walks",
        walk_dir,
        MODEL,
        tmp_path,
        "--device",
        "cpu",
        "--threads",
        "1",
        "--settings",
        '{"training": {"max_epochs": 2}}',
    )
    resume = f"rerun the same command to resume from {tmp_path}/last.pt"
    # SIGTERM (a scheduler's stop), in this process: delivered during epoch 2
    run_epoch = inn.experiment.train.loop._train_epoch

    def terminated_epoch(*a, **kw):
        if (tmp_path / "last.pt").is_file():
            os.kill(os.getpid(), signal.SIGTERM)
        return run_epoch(*a, **kw)

    before = signal.getsignal(signal.SIGTERM)
    with monkeypatch.context() as patch:
        patch.setattr(inn.experiment.train.loop, "_train_epoch", terminated_epoch)
        assert cli(args) == 128 + signal.SIGTERM
    assert capsys.readouterr().err.splitlines()[-1] == f"interrupted (SIGTERM): {resume}"
    assert signal.getsignal(signal.SIGTERM) == before  # the command's handler is gone
    # Ctrl-C, to a real process resuming that run: it stops in epoch 2 again
    run = subprocess.Popen(
        [sys.executable, "-c", SLOW_INN, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env()
    )
    assert run.stdout.readline() == "epoch started\n"  # epoch 1 is saved, epoch 2 has begun
    run.send_signal(signal.SIGINT)
    _, err = run.communicate(timeout=30)
    assert run.returncode == 128 + signal.SIGINT and "Traceback" not in err
    assert err.splitlines()[-1] == f"interrupted (SIGINT): {resume}"
    assert torch.load(tmp_path / "last.pt", weights_only=True)["train_state"]["epoch"] == 1
    assert not _temporaries(tmp_path)
    _assert_as_straight(tmp_path, train("walks", walk_dir, MODEL, tmp_path, _cfg(), device="cpu"), straight)


def test_any_interrupted_command_ends_in_one_line(monkeypatch, capsys):
    monkeypatch.setattr("inn.experiment.collect.concat_main", lambda argv: os.kill(os.getpid(), signal.SIGINT))
    assert cli(["concat-tables", "--out", "unused.tsv"]) == 128 + signal.SIGINT
    assert capsys.readouterr().err == "interrupted (SIGINT): rerun the same command to start again\n"
