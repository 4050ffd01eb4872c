"""The archived runs under archive/ give the tables they gave when archived, byte for byte.

``tests/fixtures/collected/<archive>/`` holds what ``inn collect --results
archive/<archive>/results`` wrote at commit 5b33d50, before the tables, verdicts and
report read the model registry's roles instead of fixed model names. The paper-scale walks
archive grows as Table 1's runs finish, so each test collects exactly the runs (and the floors
of the b) that the fixture's tables hold: a run added later changes no fixture. An archive that
keeps collected tables but not its runs (comparison_walks_136e5c0) is checked through the
verdicts, which the tables it keeps determine."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conftest import REPO, collect_tables

from inn.experiment.collect import FLOOR_PATH, find_run_files, run_key, verdicts
from inn.experiment.views import views
from inn.tables import read_tsv, write_tsv

ARCHIVES = REPO / "archive"
COLLECTED = Path(__file__).parent / "fixtures" / "collected"
TABLES = ("runs.tsv", "table1.tsv", "table2.tsv", "comparisons.tsv", "verdict.tsv")


@pytest.mark.parametrize("archive", ["paper_walks", "paper_ewt_6ebf96e"])
def test_inn_collect_gives_an_archives_tables_byte_for_byte(archive, tmp_path):
    expected = COLLECTED / archive
    runs = read_tsv(expected / "runs.tsv")
    keys = {(r.task, r.dataset, r.model, int(r.seed)) for r in runs.itertuples()}
    b_values = set(read_tsv(expected / "table1.tsv").get("b", []))
    found = find_run_files([ARCHIVES / archive / "results"])

    def of_the_fixture(paths: list[str]) -> list[str]:
        return [path for path in paths if tuple(run_key(path).values()) in keys]

    def of_its_b(paths: list[str]) -> list[str]:
        return [path for path in paths if float(FLOOR_PATH.search(path)["dataset"][1:]) in b_values]

    metrics = of_the_fixture(found["metrics"])
    assert len(metrics) == len(keys), "a run of the fixture is missing from the archive"
    collect_tables(
        tmp_path,
        metrics=metrics,
        histories=of_the_fixture(found["histories"]),
        predictions=of_the_fixture(found["predictions"]),
        floors=of_its_b(found["floors"]),
        floor_predictions=of_its_b(found["floor_predictions"]),
        corpora=found["corpora"],
    )
    for name in TABLES:
        assert (tmp_path / name).read_text(encoding="utf-8") == (expected / name).read_text(encoding="utf-8"), name
    assert set(views(tmp_path)) >= {"verdict", "comparisons", "runs"}


def test_the_comparison_archives_verdicts_follow_from_its_tables(tmp_path):
    """comparison_walks_136e5c0 keeps its tables, not its runs. Its verdict rows, one per b, come
    back byte for byte from its comparisons and Table 1; the claim as a whole (Holm's correction
    over the b), added after the archive was collected at 6ebf96e, is the one row more."""
    archive = ARCHIVES / "comparison_walks_136e5c0"
    write_tsv(
        tmp_path / "verdict.tsv", verdicts(read_tsv(archive / "comparisons.tsv"), read_tsv(archive / "table1.tsv"))
    )
    *per_b, whole = (tmp_path / "verdict.tsv").read_text(encoding="utf-8").splitlines(keepends=True)
    assert "".join(per_b) == (archive / "verdict.tsv").read_text(encoding="utf-8")
    assert whole.startswith(
        "INN error below the b-LSTM's for b <= 1, as a whole\twalks\tall tested\tcomparison\tinn\tbilstm\t"
    )
    assert whole.rstrip("\n").endswith(
        "4 tests (b = 0.25, 0.5, 0.75, 1): not reproduced at 1, inconclusive at 3; "
        "0 of 4 hold after Holm's correction for 4 tests"
    )
    assert set(views(archive)) == {"verdict", "table1", "comparisons", "runs"}


def test_an_archived_run_logs_each_stretch_once():
    """A run's ``logs/`` holds one log a stretch of training: two logs with the same first line
    are two copies of one stretch, a shorter one kept before the stretch ended among them."""
    folders = [*ARCHIVES.glob("*/results/train/*/*/*/seed*/logs"), *ARCHIVES.glob("*/unfinished/train/*/*/*/*/logs")]
    assert folders
    for logs in folders:
        firsts = [path.open(encoding="utf-8", errors="replace").readline() for path in sorted(logs.glob("*.log"))]
        assert len(firsts) == len(set(firsts)), f"{logs}: a stretch logged twice"


def _run_queue(monkeypatch, tmp_path):
    """``archive/paper_walks/run_queue.py`` (a script, not a module of the package) with its
    archive and worktrees moved under ``tmp_path``."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("run_queue", ARCHIVES / "paper_walks" / "run_queue.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "run_queue", module)  # its dataclass looks itself up there
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "HERE", tmp_path / "archive")
    monkeypatch.setattr(module, "PINNED", tmp_path / "pinned")
    return module


@pytest.mark.parametrize("training_ended", [False, True])
def test_the_queue_brings_a_kept_state_only_to_a_run_whose_training_goes_on(monkeypatch, tmp_path, training_ended):
    """On a new machine the state kept in git resumes the run; where the run's training ended
    (its checkpoint.pt written, its last.pt removed, its history one epoch on) the kept state,
    saved inside that epoch, must not overwrite the history the evaluation checks."""
    import torch

    queue = _run_queue(monkeypatch, tmp_path)
    run = queue.Run("0.75", "inn", 1, "abc1234")
    kept = tmp_path / "archive" / "unfinished" / "train" / run.folder
    kept.mkdir(parents=True)
    torch.save({"train_state": {"epoch": 24, "within": {"batches": 1561}}}, kept / "last.pt")
    (kept / "history.tsv").write_text("epoch\n" + "".join(f"{e}\n" for e in range(1, 25)), encoding="utf-8")
    here = queue.results(run) / "train" / run.folder
    here.mkdir(parents=True)
    if training_ended:
        (here / "checkpoint.pt").write_bytes(b"the finished run's")
        (here / "history.tsv").write_text("epoch\n" + "".join(f"{e}\n" for e in range(1, 26)), encoding="utf-8")
    queue.bring_kept_state(run)
    assert (here / "last.pt").exists() is not training_ended
    assert len((here / "history.tsv").read_text(encoding="utf-8").splitlines()) == (26 if training_ended else 25)


def test_the_queue_gives_the_last_portable_run_every_thread_and_a_large_run_only_an_idle_machine(monkeypatch, tmp_path):
    """Runs git keeps go first, one thread each while another goes or waits beside them; the last
    of them alone gets every thread; a large b-LSTM (its state only on this machine) starts only
    once nothing else goes or waits, on every thread."""
    queue = _run_queue(monkeypatch, tmp_path)
    inn, other_inn = queue.Run("0.75", "inn", 3, "c"), queue.Run("2.0", "inn", 1, "c")
    small, large = queue.Run("2.0", "bilstm-h300", 1, "c"), queue.Run("1.0", "bilstm-h1500", 3, "c")
    assert queue.next_run([inn, small, large], {}, 2) == (inn, 1)
    assert queue.next_run([inn, small, large], {other_inn: None}, 2) == (small, 1)  # the free lane first
    assert queue.next_run([inn, large], {small: None}, 2) == (inn, 1)
    assert queue.next_run([inn, large], {}, 2) == (inn, 2)
    assert queue.next_run([large], {inn: None}, 2) is None
    assert queue.next_run([large, large], {}, 2) == (large, 2)
    assert queue.next_run([], {}, 2) is None
    assert queue._pid_threads(1903) == (1903, 1)  # a queue's running.json from before it kept threads
    assert queue._pid_threads([1903, 2]) == (1903, 2)
