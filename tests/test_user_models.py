"""A cell of one's own, in a file of one's own, through the experiments with no edit of the
package: the cell registry (:func:`inn.models.register_cell`), the modules a config or a command
imports (:mod:`inn.user_modules`), and the workflow end to end on a user's cell.

The user's module is imported in subprocesses only (Snakemake, ``python -m inn``), or its
registrations undone, so that the registry the other tests see stays the package's."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import pandas as pd
import pytest
import torch
from conftest import export_argv, train_argv
from test_workflow import REPO, snakemake
from torch import nn

from inn.errors import InnError
from inn.experiment.config import load_schema, validate_config
from inn.models import (
    CELLS,
    MODELS,
    ModelConfig,
    ModelSpec,
    build_model,
    register,
    register_cell,
)
from inn.nn import ImplicitSequence
from inn.user_modules import import_module, split_import_options

#: the user's file: a non-causal gated cell, h = z h_prev + (1 - z) tanh(W x + U h_prev + V h_next),
#: and a model on it for both tasks
USER_CELLS = '''
import torch
from torch import nn

from inn.models import ModelSpec, register, register_cell


class NonCausalGatedCell(nn.Module):
    """h_t = z h_{t-1} + (1 - z) tanh(W x_t + U h_{t-1} + V h_{t+1}), z = sigmoid(Z x_t)."""

    def __init__(self, input_size, hidden_size):
        super().__init__()
        self.W = nn.Linear(input_size, hidden_size)
        self.Z = nn.Linear(input_size, hidden_size)
        self.U = nn.Linear(hidden_size, hidden_size, bias=False)
        self.V = nn.Linear(hidden_size, hidden_size, bias=False)

    def forward(self, x, h_prev, h_next):
        z = torch.sigmoid(self.Z(x))
        return z * h_prev + (1 - z) * torch.tanh(self.W(x) + self.U(h_prev) + self.V(h_next))


register_cell("ncgated", NonCausalGatedCell)
register(ModelSpec("ncgated", "Non-causal gated (mine)", "ncgated", bidirectional=True, implicit=True,
                   in_paper=False, sizes={"pos": ("baseline_hidden_size",), "walks": ("inn_hidden_size",)}))
'''


def test_a_model_on_an_unknown_cell_is_refused_when_registered(registry):
    with pytest.raises(InnError) as error:
        register(ModelSpec("mine", "Mine", "ncgated", implicit=True, sizes={"walks": ("inn_hidden_size",)}))
    assert str(error.value) == (
        "model mine: unknown cell 'ncgated'; register it first with inn.models.register_cell, "
        "or use one of implicit_gru, implicit_lstm, gru, lstm"
    )
    assert "mine" not in MODELS
    with pytest.raises(InnError, match="model mine: cell gru is explicit; set implicit=False in its ModelSpec"):
        register(ModelSpec("mine", "Mine", "gru", implicit=True, sizes={"walks": ("inn_hidden_size",)}))
    with pytest.raises(InnError, match="cell name 'My Cell'"):
        register_cell("My Cell", nn.RNN)


def test_a_registered_cell_builds_its_own_layer_with_no_fallback(registry, tmp_path):
    """An implicit cell is solved by ImplicitSequence (the anderson default), an explicit one is
    the cell itself (no GRU or LSTM in its place), and the model records its module."""
    namespace: dict = {"__name__": "my_cells"}
    exec(compile(USER_CELLS, "my_cells.py", "exec"), namespace)
    register_cell("rnn", lambda i, h: nn.RNN(i, h, batch_first=True), implicit=False)
    register(ModelSpec("birnn", "BiRNN", "rnn", bidirectional=True, sizes={"walks": ("inn_hidden_size",)}))
    cfg = ModelConfig(task="walks", kind="ncgated", hidden_size=5, num_classes=2, input_dim=3)
    model = build_model(cfg)
    assert type(model.rnn) is ImplicitSequence and type(model.rnn.cell).__name__ == "NonCausalGatedCell"
    assert model.rnn.solver == "anderson" and MODELS["ncgated"].module == "my_cells"
    explicit = build_model(ModelConfig(task="walks", kind="birnn", hidden_size=4, num_classes=2, input_dim=3))
    assert isinstance(explicit.rnn.forward_rnn, nn.RNN) and isinstance(explicit.rnn.backward_rnn, nn.RNN)
    batch = {"x": torch.randn(2, 6, 3), "mask": torch.tensor([[True] * 6, [True] * 4 + [False] * 2])}
    assert model(batch).shape == explicit(batch).shape == (2, 6)


def test_the_default_solver_is_the_workflows():
    """The library's layers, ModelConfig and the config's solver agree (anderson)."""
    from inn.nn import ImplicitGRU, ImplicitLSTM

    workflow = validate_config({}, load_schema(REPO / "workflow/schemas/config.schema.yaml"))["solver"]["name"]
    assert workflow == "anderson"
    layers = ImplicitGRU(3, 4), ImplicitLSTM(3, 4), ImplicitSequence(nn.Identity(), 4)
    assert [layer.solver for layer in layers] == [workflow] * 3
    assert ModelConfig(task="walks", kind="inn", hidden_size=4, num_classes=2, input_dim=3).solver == workflow


def test_an_old_checkpoint_keeps_its_recorded_solver(tmp_path):
    """Checkpoints store the solver; one written without the field was solved by the paper's method."""
    from inn.checkpoints import model_from_payload, neural_payload

    old = build_model(
        ModelConfig(task="walks", kind="inn", hidden_size=4, num_classes=2, input_dim=3, solver="newton_krylov")
    )
    payload = neural_payload(old, {})
    assert payload["model_config"]["solver"] == "newton_krylov" and "model_modules" not in payload
    assert model_from_payload(payload, "old.pt")[0].rnn.solver == "newton_krylov"
    del payload["model_config"]["solver"]
    assert model_from_payload(payload, "old.pt")[0].rnn.solver == "newton_krylov"


def test_a_file_from_before_the_module_list_names_its_one_module(tmp_path):
    """Files written before ``model_modules`` recorded the registering module alone; one whose
    file is gone is named by its module name."""
    from inn.checkpoints import model_from_payload

    payload = {
        "model_config": {"task": "walks", "kind": "ghost", "hidden_size": 4, "num_classes": 2},
        "model_module": "old_cells",
        "model_module_file": str(tmp_path / "gone/old_cells.py"),
    }
    with pytest.raises(InnError) as error:
        model_from_payload(payload, "old.pt")
    assert str(error.value) == (
        "old.pt: its model ghost needs the module old_cells, not imported (a model file never "
        "imports code by itself): add --import old_cells to the command"
    )


def test_a_user_module_that_is_missing_or_fails_is_one_line(tmp_path):
    with pytest.raises(InnError) as error:
        import_module("no_such_cells_here", "config: imports.0", root=tmp_path)
    assert str(error.value).startswith("config: imports.0: no module named 'no_such_cells_here' (searched ")
    with pytest.raises(InnError, match=r"^--import: module file cells/none\.py does not exist"):
        import_module("cells/none.py", "--import", root=tmp_path)
    (tmp_path / "broken_cells.py").write_text("import torch\nraise ValueError('W has the wrong shape')\n")
    for name in ("broken_cells", "broken_cells.py"):
        with pytest.raises(InnError) as error:
            import_module(name, "INN_IMPORTS", root=tmp_path)
        assert str(error.value) == f"INN_IMPORTS: module {name} failed to import: ValueError: W has the wrong shape"
    assert split_import_options(["a.pt", "--import", "m", "--out", "x", "--import=f.py"]) == (
        ["m", "f.py"],
        ["a.pt", "--out", "x"],
    )
    with pytest.raises(InnError, match="--import needs a module after it"):
        split_import_options(["a.pt", "--import"])


def test_every_command_names_a_module_it_cannot_import(tmp_path, monkeypatch, capsys):
    """``--import`` and ``INN_IMPORTS`` before any command: one line naming the module."""
    from inn.experiment.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["runs", str(tmp_path), "--import", "no_such_cells_here"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: --import: no module named 'no_such_cells_here' (searched {tmp_path.resolve()} and sys.path); "
        "name a module that Python can import, or its file (path/to/module.py)"
    )
    (tmp_path / "broken.py").write_text("raise ImportError('needs torch 3')\n")
    monkeypatch.setenv("INN_IMPORTS", "broken.py")
    assert main(["runs", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: INN_IMPORTS: module broken.py failed to import: ImportError: needs torch 3"
    )


def _inn(*args, cwd, env=None):
    environ = {**os.environ, "PYTHONPATH": str(REPO / "src"), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "inn", *args], cwd=cwd, env=environ, capture_output=True, text=True, timeout=300
    )


def test_the_config_check_sees_a_model_its_imports_register(tmp_path, tiny_config):
    """The config names the module; without it the model is refused, naming the key."""
    (tmp_path / "my_cells.py").write_text(USER_CELLS)
    tiny_config["models"]["walks"]["run"] = ["ncgated"]
    tiny_config["corpora"]["ewt"]["enabled"] = False
    refused = snakemake("-n", workdir=tmp_path, config=tiny_config)
    assert refused.returncode != 0
    assert "error: config: models.walks.run.0: 'ncgated' is not one of" in refused.stderr
    tiny_config["imports"] = ["my_cells"]
    planned = snakemake("-n", workdir=tmp_path, config=tiny_config)
    assert planned.returncode == 0, planned.stderr[-3000:]
    assert "results/train/walks/b0.5/ncgated/seed1/checkpoint.pt" in planned.stdout
    tiny_config["imports"] = ["cells/missing.py"]
    missing = snakemake("-n", workdir=tmp_path, config=tiny_config)
    assert missing.returncode != 0 and missing.stderr.strip().splitlines()[-1].startswith(
        "error: config: imports.0: module file cells/missing.py does not exist"
    )


@pytest.mark.workflow
def test_a_users_cell_from_a_users_file_reaches_the_tables(tmp_path, tiny_workflow_config):
    """The user's file outside the package, named in the config: trained on POS and the walks,
    evaluated, timed, exported as a tagger, in every table and the report."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "cells").mkdir()
    (work / "cells" / "my_cells.py").write_text(USER_CELLS)
    config = tiny_workflow_config
    config["imports"] = ["cells/my_cells.py"]
    config["models"]["pos"]["run"] = ["ncgated", "perceptron"]
    config["models"]["walks"]["run"] = ["ncgated", "bilstm"]
    result = snakemake(workdir=work, config=config)
    assert result.returncode == 0, result.stderr[-3000:]
    tables = work / "results/tables"
    for task, dataset in (("pos", "ptb_sample"), ("walks", "b0.5")):
        metrics = json.loads((work / f"results/eval/{task}/{dataset}/ncgated/seed1/metrics.json").read_text())
        assert metrics["model"] == "ncgated" and metrics["epochs"] >= 1
    table1 = pd.read_csv(tables / "table1.tsv", sep="\t")
    assert table1.ncgated_seeds.tolist() == [1] and table1.ncgated_error.notna().all()
    table2 = pd.read_csv(tables / "table2.tsv", sep="\t")
    ours = table2[table2.run == "ours"].set_index("model")
    assert ours.loc["ncgated", "name"] == "Non-causal gated (mine)" and ours.loc["ncgated", "seeds"] == 1
    comparisons = pd.read_csv(tables / "comparisons.tsv", sep="\t")
    assert {("pos", "perceptron"), ("walks", "bayes"), ("walks", "bilstm-h4")} <= {
        (t, b) for t, m, b in zip(comparisons.task, comparisons.model, comparisons.baseline) if m == "ncgated"
    }
    runs = pd.read_csv(tables / "runs.tsv", sep="\t")
    assert (runs.model == "ncgated").sum() == 2
    timing = pd.read_csv(tables / "timing.tsv", sep="\t")
    assert "ncgated" in set(timing.model)
    html = (work / "results/report/index.html").read_text()
    parsed = pd.read_html(io.StringIO(html), attrs={"id": "table2"})[0]
    assert "Non-causal gated (mine)" in parsed.to_string()
    # A tagger file of the user's cell runs nothing by itself: the command names the module.
    tagger = work / "results/taggers/pos/ptb_sample/ncgated/seed1/tagger.pt"
    text = tmp_path / "text.txt"
    text.write_text("The cat sat on the mat .\n")
    bare = _inn("tag", str(tagger), str(text), cwd=tmp_path)
    file = (work / "cells/my_cells.py").resolve()
    assert bare.returncode == 2 and bare.stderr.strip().splitlines()[-1] == (
        f"error: {tagger}: its model ncgated needs the module my_cells, not imported (a model file never imports "
        f"code by itself): add --import {file} to the command"
    )
    tagged = _inn("tag", "--import", str(work / "cells/my_cells.py"), str(tagger), str(text), cwd=tmp_path)
    assert tagged.returncode == 0, tagged.stderr[-2000:]
    assert len(tagged.stdout.split()) >= 7


#: the user's cell and its registration in two files; the registration imports the cell by name
CELL_FILE = USER_CELLS.split("\n\nregister_cell(")[0].replace(
    "from inn.models import ModelSpec, register, register_cell\n", ""
)
REGISTRATION_FILE = """
from inn.models import ModelSpec, register, register_cell
from ncgated_cell import NonCausalGatedCell

register_cell("ncgated", NonCausalGatedCell)
register(ModelSpec("ncgated", "Non-causal gated (mine)", "ncgated", bidirectional=True, implicit=True,
                   in_paper=False, sizes={"pos": ("baseline_hidden_size",), "walks": ("inn_hidden_size",)}))
"""


def _two_files(folder):
    folder.mkdir()
    (folder / "ncgated_cell.py").write_text(CELL_FILE)
    (folder / "my_models.py").write_text(REGISTRATION_FILE)
    return folder / "my_models.py"


def test_a_tagger_of_a_cell_in_two_files_tags_in_a_fresh_shell_with_what_the_error_says(
    tmp_path, ewt_dir, imported, monkeypatch
):
    """The registration imports the cell file beside it; the tagger file records both modules, in
    order, and the line for a shell without them gives --import options that work from anywhere."""
    from inn.experiment.cli import main
    from inn.experiment.prepare import prepare_pos
    from inn.experiment.train import TrainConfig, train

    registration = _two_files(tmp_path / "cells")
    monkeypatch.chdir(tmp_path)
    import_module("cells/my_models.py", "--import")
    sentences = (ewt_dir / "en_ewt-ud-dev.conllu").read_text(encoding="utf-8").split("\n\n")
    for split, part in (("train", sentences[:30]), ("dev", sentences[30:40]), ("test", sentences[40:50])):
        (tmp_path / f"{split}.conllu").write_text("\n\n".join(part) + "\n\n", encoding="utf-8")
    data = tmp_path / "data"
    prepare_pos(
        "conllu",
        {"tags": "xpos", **{s: str(tmp_path / f"{s}.conllu") for s in ("train", "dev", "test")}},
        data,
        "tiny",
        max_words=500,
        max_affixes=100,
        word_dim=4,
        affix_dim=2,
    )
    train("pos", data, "ncgated", tmp_path / "run", TrainConfig(max_epochs=1), {"hidden_size": 4}, device="cpu")
    tagger = tmp_path / "tagger.pt"
    assert main(export_argv(tmp_path / "run/checkpoint.pt", tagger)) == 0
    cell_file = tmp_path / "cells/ncgated_cell.py"
    assert torch.load(tagger, weights_only=True)["model_modules"] == [
        {"module": "my_models", "file": str(registration)},
        {"module": "ncgated_cell", "file": str(cell_file)},
    ]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "text.txt").write_text("The cat sat on the mat .\n")
    bare = _inn("tag", str(tagger), "text.txt", cwd=elsewhere)
    line = bare.stderr.strip().splitlines()[-1]
    assert bare.returncode == 2 and line == (
        f"error: {tagger}: its model ncgated needs the modules my_models, ncgated_cell, not imported (a model file "
        f"never imports code by itself): add --import {registration} --import {cell_file} to the command"
    )
    options = line.split("add ")[1].removesuffix(" to the command").split()
    tagged = _inn("tag", *options, str(tagger), "text.txt", cwd=elsewhere)
    assert tagged.returncode == 0, tagged.stderr[-2000:]
    assert len(tagged.stdout.strip().splitlines()) == 7  # CoNLL-U, a line per word


def test_the_config_imports_a_registration_that_imports_the_cell_beside_it(tmp_path, imported, monkeypatch):
    _two_files(tmp_path / "cells")
    monkeypatch.chdir(tmp_path)
    config = validate_config(
        {"imports": ["cells/my_models.py"], "models": {"walks": {"run": ["ncgated"]}}},
        load_schema(REPO / "workflow/schemas/config.schema.yaml"),
    )
    assert config["models"]["walks"]["run"] == ["ncgated"]
    assert sys.path.index(str(tmp_path / "cells")) > sys.path.index(os.path.dirname(os.path.dirname(json.__file__)))


def test_a_module_named_as_the_standard_library_or_an_installed_package_is_refused(tmp_path, monkeypatch):
    """A user's json.py or torch.py would replace that module for everyone; a folder on the path
    after them cannot shadow them either."""
    import json as standard_json

    (tmp_path / "json.py").write_text("raise RuntimeError('the user json ran')\n")
    (tmp_path / "torch.py").write_text("raise RuntimeError('the user torch ran')\n")
    for name in ("json.py", "json"):
        with pytest.raises(InnError) as error:
            import_module(name, "--import", root=tmp_path)
        assert str(error.value) == (
            f"--import: module {name} has the name of the standard library's json and would "
            "replace it wherever it is imported; rename your file (e.g. my_json.py)"
        )
    with pytest.raises(InnError, match=r"^config: imports.0: module torch.py has the name of the module torch \("):
        import_module("torch.py", "config: imports.0", root=tmp_path)
    assert sys.modules["json"] is standard_json and sys.modules["torch"] is torch


def test_a_module_that_exits_or_raises_at_import_is_one_line(tmp_path):
    (tmp_path / "exits.py").write_text("import sys\nsys.exit(3)\n")
    for name in ("exits", "exits.py"):
        with pytest.raises(InnError) as error:
            import_module(name, "--import", root=tmp_path)
        assert str(error.value) == (
            f"--import: module {name} called sys.exit(3) while it was imported; a module "
            "that registers cells and models must not end the program"
        )
    assert "exits" not in sys.modules


def test_a_module_imported_twice_re_registers_its_own_names(registry, tmp_path):
    namespace: dict = {"__name__": "my_cells"}
    for _ in range(2):
        exec(compile(USER_CELLS, "my_cells.py", "exec"), namespace)
    assert MODELS["ncgated"].cell == "ncgated"


def test_a_module_may_not_replace_a_builtin_cell_or_model(registry, tmp_path):
    """A GRU model on an LSTM cell would be labelled GRU in every table: refused, naming the name."""
    gru, cell = MODELS["gru"], CELLS["gru"]
    with pytest.raises(InnError) as error:
        register(ModelSpec("gru", "GRU", "lstm", sizes={"pos": ("baseline_hidden_size",)}))
    assert str(error.value) == (
        "model gru is the package's own and cannot be replaced: register yours under another name (e.g. my_gru)"
    )
    with pytest.raises(InnError, match=r"^cell implicit_gru is the package's own and cannot be replaced"):
        register_cell("implicit_gru", nn.GRU)
    (tmp_path / "replaces_gru.py").write_text(
        "from torch import nn\nfrom inn.models import register_cell\nregister_cell('gru', nn.LSTM, implicit=False)\n"
    )
    with pytest.raises(InnError, match=r"^--import: module replaces_gru.py failed to import: InnError: cell gru is "):
        import_module("replaces_gru.py", "--import", root=tmp_path)
    assert MODELS["gru"] is gru and CELLS["gru"] is cell


def test_solver_options_for_a_model_without_an_implicit_layer_are_refused(tmp_path, capsys):
    """A GRU baseline has nothing to solve: its solver options are refused, not ignored."""
    from inn.experiment.cli import main

    with pytest.raises(InnError) as error:
        ModelConfig(task="walks", kind="gru", hidden_size=4, num_classes=2, input_dim=3, solver_options={"tol": 1e-3})
    assert str(error.value) == (
        "model gru has no implicit layer: solver_options and trainable_boundary apply to inn, "
        "inn_lstm only; leave them out"
    )
    settings = json.dumps({"model": {"hidden_size": 4, "solver": "newton_krylov", "solver_options": {"tol": 1e-3}}})
    assert main(train_argv("walks", tmp_path / "none", "gru", tmp_path / "run", "--settings", settings)) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "error: model gru has no implicit layer: model.solver, model.solver_options apply to inn, inn_lstm only; "
        "leave them out of its settings"
    )
