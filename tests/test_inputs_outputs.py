"""Outputs that are inputs, failed writes, and inputs that are not what a command needs: each
is one line before any work, where they used to overwrite a user's file, give a traceback or
name the wrong cause.

- an output named as one of the command's inputs (``inn tag IN.conllu --out IN.conllu``, the
  tagger as ``--out``, ``--metrics IN.conllu``, ``inn score-text GOLD SYSTEM --out GOLD``,
  an ``--out-dir`` that holds the corpus read);
- a write that fails (``--out /dev/full``, standard output on a full device) and a closed
  standard input;
- a FIFO or device given as a corpus, one file given as two splits, a word with a space at an
  end, a hidden size whose weights would not fit, a setting of megabytes, ``--out-dir`` naming
  a file, ``--settings`` and ``--settings-file`` together;
- ``inn report`` on a tables folder that lost its table2.tsv.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import (
    REPO,
    TINY_CONLLU,
    TINY_TEXT,
    evaluate_argv,
    export_argv,
    one_line,
    prepare_argv,
    tiny_corpus,
    train_argv,
)

from inn.data.corpora import read_corpus, read_tagged
from inn.errors import InnError
from inn.experiment.cli import main as cli
from inn.models import ModelConfig, build_model
from inn.user_modules import environment_value, from_environment


@pytest.fixture(scope="module")
def model(gru_run) -> Path:
    """The POS checkpoint of ``gru_run``."""
    return gru_run / "checkpoint.pt"


@pytest.fixture
def gold(tmp_path) -> Path:
    path = tmp_path / "gold.conllu"
    path.write_text(TINY_CONLLU, encoding="utf-8")
    return path


# --------------------------------------------------------------------------- outputs that are inputs


def test_tag_refuses_to_write_over_its_input_file(model, gold, capsys):
    before = gold.read_bytes()
    assert cli(["tag", str(model), str(gold), "--out", str(gold)]) == 2
    assert one_line(capsys) == (
        f"error: --out {gold} is an input file, an input of this command: inn never "
        "writes over its inputs; give another output path"
    )
    assert gold.read_bytes() == before


def test_tag_refuses_to_write_over_the_tagger_or_the_gold_file(tmp_path, model, gold, capsys):
    before = model.read_bytes()
    assert cli(["tag", str(model), str(gold), "--out", str(model)]) == 2
    assert "is the model, an input of this command" in one_line(capsys)
    assert model.read_bytes() == before
    # another spelling of the same file: a link to it
    (tmp_path / "again.conllu").symlink_to(gold)
    assert cli(["tag", str(model), str(gold), "--accuracy", "--metrics", str(tmp_path / "again.conllu")]) == 2
    assert one_line(capsys).startswith(f"error: --metrics {tmp_path}/again.conllu is an input file")
    assert gold.read_text(encoding="utf-8") == TINY_CONLLU


def test_score_text_refuses_to_write_over_the_gold_file(tmp_path, gold, capsys):
    system = tmp_path / "system.conllu"
    system.write_text(TINY_CONLLU, encoding="utf-8")
    assert cli(["score-text", str(gold), str(system), "--out", str(gold)]) == 2
    assert one_line(capsys) == (
        f"error: --out {gold} is the gold file, an input of this command: inn never "
        "writes over its inputs; give another output path"
    )
    assert gold.read_text(encoding="utf-8") == TINY_CONLLU


def test_the_other_commands_refuse_an_output_that_is_an_input(tmp_path, model, gold, capsys):
    """export-tagger, conllu-text, concat-tables, prepare-pos and evaluate: the same line."""
    assert cli(export_argv(model, model)) == 2
    assert "is --checkpoint, an input" in one_line(capsys)
    assert cli(["conllu-text", str(gold), "--out", str(gold)]) == 2
    assert "is the CoNLL-U file, an input" in one_line(capsys)
    table = tmp_path / "t.tsv"
    table.write_text("a\n1\n")
    assert cli(["concat-tables", str(table), "--out", str(table)]) == 2
    assert "is an input table, an input" in one_line(capsys)
    files = tiny_corpus(tmp_path / "raw")
    assert cli(prepare_argv(files, tmp_path / "raw")) == 2
    assert one_line(capsys) == (
        f"error: --out-dir would write {tmp_path}/raw/train.tsv, which is --train, an "
        "input of this command: inn never writes over its inputs; give another output path"
    )
    assert files["train"].read_text() == TINY_TEXT * 3


def test_evaluate_refuses_an_out_dir_holding_its_checkpoint(tmp_path, model, pos_dir, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.json").symlink_to(model)
    assert cli(evaluate_argv(model, pos_dir, run)) == 2
    assert one_line(capsys).startswith(f"error: --out-dir would write {run}/metrics.json, which is --checkpoint")


# --------------------------------------------------------------------------- failed writes, closed input


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_failed_write_is_one_line(model, gold, capsys):
    assert cli(["tag", str(model), str(gold), "--out", "/dev/full"]) == 2
    assert one_line(capsys) == "error: cannot write /dev/full: No space left on device; free some space, then rerun"


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_standard_output_on_a_full_device_is_one_line(model, gold):
    """In a process of its own: Python flushes standard output again at exit."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    with open("/dev/full", "w") as full:
        result = subprocess.run(
            [sys.executable, "-m", "inn", "tag", str(model), str(gold)],
            env=env,
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=300,
            check=False,
        )
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines()[-1] == (
        "error: cannot write standard output: No space left on device; free some space, then rerun"
    )
    assert "Traceback" not in result.stderr and "Exception ignored" not in result.stderr


def test_a_closed_standard_input_is_one_line(model, monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", None)  # what Python makes of `<&-`
    assert cli(["tag", str(model), "--input", "text", "--language", "en", "-"]) == 2
    assert one_line(capsys) == (
        "error: standard input is closed: give the input as a file, or pipe it in (... | inn ...)"
    )


# --------------------------------------------------------------------------- inputs


def test_a_fifo_or_device_as_a_corpus_is_named_as_such(tmp_path):
    files = tiny_corpus(tmp_path / "raw")
    fifo = tmp_path / "train.fifo"
    os.mkfifo(fifo)
    with pytest.raises(InnError) as error:
        read_corpus("tsv", {**files, "train": fifo})
    assert str(error.value) == (
        f"{fifo} is a named pipe (FIFO), not a regular file: a tagged corpus file is read "
        "more than once, so copy it into a file and name that"
    )
    with pytest.raises(InnError, match=r"^/dev/null is a device, not a regular file"):
        read_tagged("/dev/null")


def test_one_file_as_two_splits_is_refused(tmp_path, capsys):
    files = tiny_corpus(tmp_path / "raw")
    with pytest.raises(InnError) as error:
        read_corpus("tsv", {**files, "dev": files["train"], "test": files["train"]}, "mine")
    assert str(error.value) == (
        f"corpora.mine.train and corpora.mine.dev are the same file ({files['train']}): a "
        "score on it would not measure a held-out split; give each split its own file"
    )
    assert cli(prepare_argv({**files, "test": files["train"]}, tmp_path / "out")) == 2
    assert one_line(capsys).startswith("error: corpora.c.train and corpora.c.test are the same file")
    assert not (tmp_path / "out").exists()


def _config_of(train: Path, dev: Path, test: Path) -> dict:
    """A workflow config of one word<TAB>tag corpus, ``mine``, of these split files, and a GRU to train on it."""
    corpus = {"enabled": True, "format": "tsv", "train": str(train), "dev": str(dev), "test": str(test)}
    return {"corpora": {"mine": corpus}, "models": {"pos": {"run": ["gru"]}, "walks": {"run": []}}}


def test_the_config_check_refuses_one_file_as_two_splits(tmp_path):
    from inn.experiment.config import check_inputs

    files = tiny_corpus(tmp_path / "raw")
    config = _config_of(files["train"], files["dev"], files["dev"])
    with pytest.raises(InnError, match=r"^config: corpora\.mine\.dev and corpora\.mine\.test are the same file"):
        check_inputs(config)


@pytest.mark.parametrize("word", ["cat ", " cat", "cat\u00a0"])
def test_a_tsv_word_with_whitespace_at_an_end_is_refused(tmp_path, word):
    path = tmp_path / "t.tsv"
    path.write_text(f"a\tDT\n{word}\tNN\n\n", encoding="utf-8")
    with pytest.raises(InnError) as error:
        read_tagged(path)
    assert str(error.value) == (
        f"{path}:2: word {word!r} has whitespace at its start or end: remove it (as it is, "
        "it would be a word of its own)"
    )


def test_a_hidden_size_that_cannot_fit_is_one_line_before_allocation():
    cfg = ModelConfig(task="walks", kind="gru", hidden_size=10**7, num_classes=2, input_dim=4)
    with pytest.raises(
        InnError,
        match=r"^model gru with hidden_size 10000000: its weights alone take [\d,.]+ GiB, "
        r"more than the [\d,.]+ GiB of memory available; choose a smaller hidden_size$",
    ):
        build_model(cfg)


def test_a_huge_setting_is_not_echoed_whole(tmp_path, pos_dir, capsys):
    value = "x" * 3_000_000
    settings = json.dumps({"training": {"lr": value}})
    assert cli(train_argv("pos", pos_dir, "gru", tmp_path / "run", "--settings", settings)) == 2
    line = one_line(capsys)
    assert len(line) < 600, line[:300]
    assert line.startswith("error: --settings: training.lr: 'xxx") and "characters left out of 3,000,002" in line
    assert line.endswith("xxx' is not of type 'number'")


def test_an_out_dir_that_is_a_file_is_named_before_the_corpus_is_read(tmp_path, capsys):
    files = tiny_corpus(tmp_path / "raw")
    files["dev"].write_text("not a corpus line\n")  # read first, it would be the error named
    afile = tmp_path / "afile"
    afile.write_text("mine\n")
    assert cli(prepare_argv(files, afile)) == 2
    assert one_line(capsys) == (
        f"error: --out-dir {afile} is a file, not a folder: name a folder (it is created if missing)"
    )
    assert afile.read_text() == "mine\n"


def test_settings_and_a_settings_file_together_are_refused(tmp_path, pos_dir, capsys):
    (tmp_path / "s.json").write_text(json.dumps({"training": {"max_epochs": 1}}))
    assert (
        cli(
            train_argv(
                "pos",
                pos_dir,
                "gru",
                tmp_path / "run",
                "--settings",
                '{"training": {"max_epochs": 2}}',
                "--settings-file",
                str(tmp_path / "s.json"),
            )
        )
        == 2
    )
    assert one_line(capsys) == "error: --settings and --settings-file both given: give the settings in one of them"
    assert not (tmp_path / "run" / "checkpoint.pt").exists()


def test_a_module_path_with_a_colon_reaches_every_job(tmp_path, monkeypatch):
    """The workflow passes the config's imports in INN_IMPORTS: a folder named ``lab:v2`` is one
    path, not two modules."""
    folder = tmp_path / "lab:v2"
    folder.mkdir()
    (folder / "colon_cells_mod.py").write_text("MARK = 42\n")
    value = environment_value([str(folder / "colon_cells_mod.py")])
    modules = from_environment({"INN_IMPORTS": value})
    assert [module.MARK for module in modules] == [42]
    assert from_environment({"INN_IMPORTS": ""}) == []


# --------------------------------------------------------------------------- the report's tables


def test_report_names_a_missing_table2_that_runs_tsv_lists(tmp_path, capsys):
    tables = tmp_path / "tables"
    tables.mkdir()
    (tables / "runs.tsv").write_text("task\tdataset\tmodel\tseed\npos\tmine\tgru\t1\npos\tmine\tinn\t1\n")
    assert (
        cli(
            [
                "report",
                "--config-json",
                "{}",
                "--schema",
                str(REPO / "workflow/schemas/config.schema.yaml"),
                "--tables",
                str(tables),
                "--out",
                str(tmp_path / "index.html"),
            ]
        )
        == 2
    )
    assert one_line(capsys) == (
        f"error: {tables}/table2.tsv is missing, though {tables}/runs.tsv lists 2 tagging "
        f"run(s): give the folder inn collect wrote, or rerun inn collect into {tables}"
    )
    assert not (tmp_path / "index.html").exists()


def test_the_config_check_names_a_fifo_without_reading_it(tmp_path):
    from inn.experiment.config import check_inputs

    files = tiny_corpus(tmp_path / "raw")
    os.mkfifo(tmp_path / "dev.fifo")
    config = _config_of(files["train"], tmp_path / "dev.fifo", files["test"])
    with pytest.raises(
        InnError,
        match=r"^config: corpora\.mine\.dev: .*dev\.fifo: .*dev\.fifo is a named pipe \(FIFO\), "
        r"not a regular file",
    ):
        check_inputs(config)
