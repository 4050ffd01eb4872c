"""No silent wrong result (issue 29): every case of the trial of bad inputs that used to give a
traceback, a late failure, a misleading line or, worst, a wrong result with exit status 0 now
stops with one line naming the cause and the fix. The corpus readers' and the config's cases
live beside their kind (tests/test_corpora.py, tests/test_config.py); these are the commands'.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import torch
import yaml
from conftest import REPO, one_line, tiny_walks, train_argv

import inn.experiment.train.loop as train_module
from inn.data.features import FeatureExtractor
from inn.errors import InnError
from inn.experiment.cli import main as cli
from inn.experiment.train import PERPLEXITY_CLAMP, TrainConfig, _perplexity_rose, train

MODEL = "bilstm-h4"


@pytest.fixture(scope="module")
def walk_dir(tmp_path_factory) -> Path:
    return tiny_walks(tmp_path_factory.mktemp("walks") / "b1", (30, 10, 10), max_len=8, settings=True)


# --------------------------------------------------------------------------- settings: one check, the schema's


def test_train_config_defaults_are_the_schemas():
    """TrainConfig and the schema's training definition describe the same settings with the same defaults."""
    schema = yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text())
    defaults = {k: v["default"] for k, v in schema["$defs"]["training"]["properties"].items()}
    ours = {f.name: f.default for f in dataclasses.fields(TrainConfig) if f.name != "seed"}
    assert ours == defaults


def test_misspelt_settings_section_is_refused_before_any_work(tmp_path, walk_dir, capsys):
    """The trial: `"trainig"` was ignored and the run trained 30 epochs on the whole corpus."""
    out = tmp_path / "run"
    assert (
        cli(train_argv("walks", walk_dir, MODEL, out, "--settings", '{"trainig": {"max_epochs": 1}, "model": {}}')) == 2
    )
    assert one_line(capsys) == "error: --settings: trainig: unknown key (allowed: meta, model, training)"
    assert not out.exists()


def test_infinite_settings_are_refused(tmp_path, walk_dir, capsys):
    """JSON's Infinity passes every minimum of a schema; a tolerance of infinity would converge at once."""
    assert (
        cli(
            train_argv(
                "walks", walk_dir, MODEL, tmp_path, "--settings", '{"model": {"solver_options": {"tol": Infinity}}}'
            )
        )
        == 2
    )
    assert one_line(capsys) == "error: --settings: model.solver_options.tol: inf is not a finite number"
    with pytest.raises(InnError, match=r"^training\.lr: nan is not a finite number$"):
        TrainConfig(lr=float("nan"))


def test_settings_file_is_checked_and_its_meta_kept(tmp_path, walk_dir):
    (tmp_path / "s.json").write_text('{"training": {"max_epochs": 1}, "meta": {"scale": "test"}}')
    assert (
        cli(
            train_argv(
                "walks", walk_dir, MODEL, tmp_path / "r", "--settings-file", str(tmp_path / "s.json"), "--device", "cpu"
            )
        )
        == 0
    )
    assert torch.load(tmp_path / "r" / "checkpoint.pt", weights_only=True)["meta"]["scale"] == "test"
    (tmp_path / "bad.json").write_text('{"model": {"solver_options": {"tol": -1}}}')
    with pytest.raises(
        InnError,
        match=rf"^--settings-file {tmp_path}/bad\.json: model\.solver_options\.tol: -1 is "
        r"less than or equal to the minimum of 0$",
    ):
        train_module.main(
            [
                "--task",
                "walks",
                "--data",
                str(walk_dir),
                "--model",
                MODEL,
                "--out-dir",
                str(tmp_path / "r"),
                "--settings-file",
                str(tmp_path / "bad.json"),
            ]
        )


@pytest.mark.parametrize(
    "settings, message",
    [
        (
            {"solver": {"options": {"tol": -1}}},
            r"^config: solver\.options\.tol: -1 is less than or equal to the minimum of 0$",
        ),
        ({"walks": {"max_len": 1}}, r"^config: walks\.max_len: 1 is less than the minimum of 2$"),
    ],
)
def test_config_ranges(settings, message):
    from inn.experiment.config import validate_config

    with pytest.raises(InnError, match=message):
        validate_config(settings, REPO / "workflow" / "schemas" / "config.schema.yaml")


# --------------------------------------------------------------------------- the learning-rate rule


def test_rate_is_halved_when_a_huge_validation_loss_rises(tmp_path, walk_dir, monkeypatch):
    """The trial: a BiGRU at lr 1000, dev loss 2604 -> 4241 -> 4528, and the rate was never
    halved, because both perplexities were clamped to exp(700) and compared equal."""
    losses = iter([2604.0, 4241.0, 4528.0, 4000.0])

    def rising(model, examples, batch_size, device):
        loss = next(losses)
        return {"loss": loss, "perplexity": math.exp(min(loss, PERPLEXITY_CLAMP)), "error": 0.5}

    monkeypatch.setattr(train_module, "evaluate_loss", rising)
    history = train("walks", walk_dir, MODEL, tmp_path, TrainConfig(max_epochs=4, patience=9, lr=8.0), device="cpu")
    assert list(history["lr"]) == [8.0, 8.0, 4.0, 2.0]  # halved after epochs 2 and 3, where the loss rose


@pytest.mark.parametrize(
    "previous, now, rose",
    [
        ((1.0, math.exp(1.0)), (1.5, math.exp(1.5)), True),
        ((1.5, math.exp(1.5)), (1.0, math.exp(1.0)), False),
        ((650.0, math.exp(650.0)), (800.0, math.exp(700.0)), True),  # into the clamp
        ((800.0, math.exp(700.0)), (900.0, math.exp(700.0)), True),  # inside it: the losses decide
        ((900.0, math.exp(700.0)), (800.0, math.exp(700.0)), False),
        ((800.0, math.exp(700.0)), (600.0, math.exp(600.0)), False),
    ],
)
def test_perplexity_rise(previous, now, rose):
    row = lambda loss, ppl: {"dev_loss": loss, "dev_perplexity": ppl}  # noqa: E731
    assert _perplexity_rose(row(*previous), row(*now)) is rose


def test_below_the_clamp_the_rule_compares_perplexities_as_before():
    """Runs the clamp never touched take exactly the decisions they took before: perplexity
    compared, even where exp rounds two different losses to one value."""
    loss = 3.0
    close = math.nextafter(loss, 4.0)
    same = math.exp(loss) == math.exp(close)
    assert _perplexity_rose(
        {"dev_loss": loss, "dev_perplexity": math.exp(loss)}, {"dev_loss": close, "dev_perplexity": math.exp(close)}
    ) is (not same)


# --------------------------------------------------------------------------- damaged files


@pytest.mark.parametrize(
    "content, problem",
    [
        ('{"sizes": {"max_words": 5', r"not JSON: Expecting .+"),
        ("", r"the file is empty"),
        ("just some text\n", r"not JSON: Expecting value: line 1 column 1 \(char 0\)"),
        ('{"sizes": {}}', r"no 'words' entry"),
        ("[1, 2]", r"unexpected content: .+"),
    ],
)
def test_damaged_features_json_is_one_line(tmp_path, pos_dir, capsys, content, problem):
    data = tmp_path / "data"
    data.mkdir()
    for name in ("train.tsv", "dev.tsv", "test.tsv"):
        (data / name).write_bytes((pos_dir / name).read_bytes())
    (data / "features.json").write_text(content)
    fix = r": delete it and prepare the corpus again \(the data stage rewrites it\)$"
    with pytest.raises(InnError, match=rf"^damaged feature vocabularies {data}/features\.json \({problem}\){fix}"):
        FeatureExtractor.load(data / "features.json")
    assert cli(train_argv("pos", data, "gru", tmp_path / "run", "--settings", '{"model": {"hidden_size": 3}}')) == 2
    assert one_line(capsys).startswith(f"error: damaged feature vocabularies {data}/features.json (")


def test_last_pt_that_is_a_folder_is_found_before_any_work(tmp_path, walk_dir, monkeypatch):
    (tmp_path / "last.pt").mkdir()
    monkeypatch.setattr(train_module, "load_task_data", lambda *a: pytest.fail("read the data"))
    with pytest.raises(
        InnError,
        match=rf"^{tmp_path}/last\.pt is a folder where the run keeps its file last\.pt: "
        r"move it aside, then rerun$",
    ):
        train("walks", walk_dir, MODEL, tmp_path, TrainConfig(max_epochs=1), device="cpu")


# --------------------------------------------------------------------------- command-line numbers


@pytest.mark.parametrize(
    "args, line",
    [
        (["--b", "-1"], "argument --b: must be a finite number above 0, not '-1'"),
        (["--b", "0"], "argument --b: must be a finite number above 0, not '0'"),
        (["--b", "nan"], "argument --b: must be a finite number above 0, not 'nan'"),
        (["--b", "inf"], "argument --b: must be a finite number above 0, not 'inf'"),
        (["--b", "1", "--max-len", "1"], "argument --max-len: must be a whole number of at least 2, not '1'"),
        (["--b", "1", "--train", "0"], "argument --train: must be a whole number of at least 1, not '0'"),
        (["--b", "1", "--dim", "0"], "argument --dim: must be a whole number of at least 1, not '0'"),
    ],
)
def test_generate_walks_numbers(tmp_path, capsys, args, line):
    base = ["generate-walks", "--dim", "2", "--seed", "1", "--out-dir", str(tmp_path / "w")]
    with pytest.raises(SystemExit, match="2"):
        cli(base + args)
    assert capsys.readouterr().err.splitlines()[-1] == f"inn generate-walks: error: {line}"
    assert not (tmp_path / "w").exists()


@pytest.mark.parametrize(
    "args, line",
    [
        (["--lengths", "-5"], "argument --lengths: must be a whole number of at least 1, not '-5'"),
        (["--lengths", "0", "4"], "argument --lengths: must be a whole number of at least 1, not '0'"),
        (["--batch-size", "0"], "argument --batch-size: must be a whole number of at least 1, not '0'"),
        (["--hidden", "0"], "argument --hidden: must be a whole number of at least 1, not '0'"),
        (["--repeats", "0"], "argument --repeats: must be a whole number of at least 1, not '0'"),
        (["--tol", "-1"], "argument --tol: must be a finite number above 0, not '-1'"),
    ],
)
def test_benchmark_numbers(tmp_path, capsys, args, line):
    with pytest.raises(SystemExit, match="2"):
        cli(["benchmark", "--out", str(tmp_path / "b.tsv")] + args)
    assert capsys.readouterr().err.splitlines()[-1] == f"inn benchmark: error: {line}"


def test_benchmark_text_file_as_checkpoint(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("not weights\n")
    assert (
        cli(
            [
                "benchmark",
                "--checkpoint",
                str(tmp_path / "notes.txt"),
                "--hidden",
                "4",
                "--lengths",
                "3",
                "--repeats",
                "1",
                "--out",
                str(tmp_path / "b.tsv"),
            ]
        )
        == 2
    )
    assert one_line(capsys) == (
        f"error: cannot read checkpoint {tmp_path}/notes.txt (not a torch file): give a "
        "checkpoint.pt of a trained implicit model, or a state_dict of an implicit layer"
    )


@pytest.mark.parametrize("kind", ["tsv", "empty", "checkpoint", "folder"])
def test_walk_floor_on_what_is_not_a_walk_file(tmp_path, walk_dir, capsys, kind):
    path = tmp_path / "input"
    if kind == "tsv":
        path.write_text("a\tDT\n")
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "checkpoint":
        train("walks", walk_dir, MODEL, tmp_path / "run", TrainConfig(max_epochs=1), device="cpu")
        path = tmp_path / "run" / "checkpoint.pt"
    else:
        path.mkdir()
    assert (
        cli(["walk-floor", str(path), "--out", str(tmp_path / "f.tsv"), "--predictions", str(tmp_path / "p.tsv")]) == 2
    )
    line = one_line(capsys)
    expected = {
        "folder": f"error: {path} is a folder, not a walk file: give one of its files",
        "checkpoint": f"error: {path} is not a walk file (no x, y and lengths; a model checkpoint?)",
        "tsv": f"error: cannot read walk file {path} (not a torch file)",
        "empty": f"error: cannot read walk file {path} (the file is empty)",
    }[kind]
    assert line.startswith(expected)
    assert (
        line.endswith("give a file written by `inn generate-walks` (train.pt, dev.pt or test.pt)") or kind == "folder"
    )
    assert not (tmp_path / "f.tsv").exists()


@pytest.mark.parametrize(
    "command, args, line",
    [
        ("time-model", ["--lengths", "4", "0"], "argument --lengths: must be a whole number of at least 1, not '0'"),
        (
            "time-model",
            ["--lengths", "4", "--repeats", "0"],
            "argument --repeats: must be a whole number of at least 1, not '0'",
        ),
        (
            "time-model",
            ["--lengths", "4", "--batch-size", "-2"],
            "argument --batch-size: must be a whole number of at least 1, not '-2'",
        ),
        ("walk-floor-survey", ["--b", "nan"], "argument --b: must be a finite number above 0, not 'nan'"),
        ("walk-floor-survey", ["--walks", "0"], "argument --walks: must be a whole number of at least 1, not '0'"),
        ("walk-floor-survey", ["--dims", "0"], "argument --dims: must be a whole number of at least 1, not '0'"),
    ],
)
def test_timing_and_survey_numbers(tmp_path, capsys, command, args, line):
    required = {
        "time-model": ["--checkpoint", "c.pt", "--data", "d", "--out", str(tmp_path / "t.tsv")],
        "walk-floor-survey": ["--out", str(tmp_path / "s.tsv")],
    }[command]
    with pytest.raises(SystemExit, match="2"):
        cli([command] + required + args)
    assert capsys.readouterr().err.splitlines()[-1] == f"inn {command}: error: {line}"
