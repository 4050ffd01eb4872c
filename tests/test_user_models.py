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
from torch import nn

from inn.errors import InnError
from inn.experiment.config import load_schema, validate_config
from inn.models import CELLS, MODELS, ModelConfig, ModelSpec, build_model, register, register_cell
from inn.nn import ImplicitSequence
from inn.user_modules import import_module, split_import_options
from test_workflow import REPO, snakemake

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


@pytest.fixture
def registry():
    """Undo what a test registers."""
    models, cells = dict(MODELS), dict(CELLS)
    yield
    MODELS.clear(), MODELS.update(models)
    CELLS.clear(), CELLS.update(cells)


def test_a_model_on_an_unknown_cell_is_refused_when_registered(registry):
    with pytest.raises(InnError) as error:
        register(ModelSpec("mine", "Mine", "ncgated", implicit=True, sizes={"walks": ("inn_hidden_size",)}))
    assert str(error.value) == ("model mine: unknown cell 'ncgated'; register it first with inn.models.register_cell, "
                                "or use one of implicit_gru, implicit_lstm, gru, lstm")
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

    old = build_model(ModelConfig(task="walks", kind="inn", hidden_size=4, num_classes=2, input_dim=3,
                                  solver="newton_krylov"))
    payload = neural_payload(old, {})
    assert payload["model_config"]["solver"] == "newton_krylov" and "model_module" not in payload
    assert model_from_payload(payload, "old.pt")[0].rnn.solver == "newton_krylov"
    del payload["model_config"]["solver"]
    assert model_from_payload(payload, "old.pt")[0].rnn.solver == "newton_krylov"


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
        ["m", "f.py"], ["a.pt", "--out", "x"])
    with pytest.raises(InnError, match="--import needs a module after it"):
        split_import_options(["a.pt", "--import"])


def test_every_command_names_a_module_it_cannot_import(tmp_path, monkeypatch, capsys):
    """``--import`` and ``INN_IMPORTS`` before any command: one line naming the module."""
    from inn.experiment.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["runs", str(tmp_path), "--import", "no_such_cells_here"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: --import: no module named 'no_such_cells_here' (searched {tmp_path.resolve()} and sys.path); "
        "name a module that Python can import, or its file (path/to/module.py)")
    (tmp_path / "broken.py").write_text("raise ImportError('needs torch 3')\n")
    monkeypatch.setenv("INN_IMPORTS", "broken.py")
    assert main(["runs", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: INN_IMPORTS: module broken.py failed to import: ImportError: needs torch 3")


def _inn(*args, cwd, env=None):
    environ = {**os.environ, "PYTHONPATH": str(REPO / "src"), **(env or {})}
    return subprocess.run([sys.executable, "-m", "inn", *args], cwd=cwd, env=environ, capture_output=True,
                          text=True, timeout=300)


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
        "error: config: imports.0: module file cells/missing.py does not exist")


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
        (t, b) for t, m, b in zip(comparisons.task, comparisons.model, comparisons.baseline) if m == "ncgated"}
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
    file = work / "cells/my_cells.py"
    assert bare.returncode == 2 and bare.stderr.strip().splitlines()[-1] == (
        f"error: {tagger}: its model ncgated is registered by the module my_cells ({file} when trained), which is "
        f"not imported (a model file never imports code by itself): give --import my_cells or --import {file}")
    tagged = _inn("tag", "--import", str(work / "cells/my_cells.py"), str(tagger), str(text), cwd=tmp_path)
    assert tagged.returncode == 0, tagged.stderr[-2000:]
    assert len(tagged.stdout.split()) >= 7
