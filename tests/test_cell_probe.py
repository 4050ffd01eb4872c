"""A cell that misbehaves is refused when its implicit layer is built (:mod:`inn.nn.probe`),
in one line naming the cell, what it returned and what was expected; and the workflow's config
check builds the layer of each model it runs on a cell of one's own, before any data exists."""

from __future__ import annotations

import sys

import pytest
import torch
from test_workflow import REPO
from torch import nn

from inn.errors import CellError, InnError
from inn.experiment.config import load_schema, validate_config
from inn.models import CELLS, MODELS
from inn.nn import ImplicitSequence

SCHEMA = REPO / "workflow/schemas/config.schema.yaml"


class Tanh(nn.Module):
    """h = tanh(W x + U h_prev + V h_next), with what ``mistake`` does to it."""

    def __init__(self, input_size: int, state_size: int, mistake=lambda h: h) -> None:
        super().__init__()
        self.W = nn.Linear(input_size, state_size)
        self.U = nn.Linear(state_size, state_size, bias=False)
        self.V = nn.Linear(state_size, state_size, bias=False)
        self.mistake = mistake

    def forward(self, x, h_prev, h_next):
        return self.mistake(torch.tanh(self.W(x) + self.U(h_prev) + self.V(h_next)))


PROBE = "x (2, 3, 5), h_prev and h_next (2, 3, 4)"


@pytest.mark.parametrize(
    "mistake, returned",
    [
        (lambda h: h[..., :-1], "a float32 tensor of shape (2, 3, 3) on cpu"),
        (lambda h: h.double(), "a float64 tensor of shape (2, 3, 4) on cpu"),
        (lambda h: torch.empty(h.shape, device="meta"), "a float32 tensor of shape (2, 3, 4) on meta"),
        (lambda h: (h, None), "a tuple"),
    ],
)
def test_a_wrong_shape_dtype_or_device_is_one_line_naming_the_cell(mistake, returned):
    with pytest.raises(CellError) as error:
        ImplicitSequence(Tanh(5, 4, mistake), 4, input_size=5)
    assert str(error.value) == (
        f"cell Tanh returned {returned} for a probe ({PROBE}); expected a float32 tensor of "
        "shape (2, 3, 4) on cpu: forward(x, h_prev, h_next) gives the new state of every "
        "position"
    )


def test_a_non_finite_state_from_finite_input_is_one_line():
    with pytest.raises(CellError) as error:
        ImplicitSequence(Tanh(5, 4, lambda h: h / h.abs().sum(-1, keepdim=True).mul(0)), 4, input_size=5)
    assert str(error.value) == (
        f"cell Tanh returned 24 non-finite value(s) of 24 for a finite probe ({PROBE}) at its "
        "initial weights; expected finite states: look for a division, log or sqrt that "
        "needs guarding"
    )


def test_an_error_in_the_cells_forward_is_one_line():
    with pytest.raises(
        CellError,
        match=r"^cell Tanh failed on a probe \(x \(2, 3, 6\), h_prev and h_next \(2, 3, 4\), "
        r"float32 on cpu\): RuntimeError: mat1 and mat2 shapes cannot be multiplied",
    ):
        ImplicitSequence(Tanh(5, 4), 4, input_size=6)


def test_the_probe_leaves_the_random_state_and_a_sound_cell_alone():
    """A run's seeded initialisation is the same with the probe as without it."""
    cell = Tanh(5, 4)
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    layer = ImplicitSequence(cell, 4, input_size=5)
    assert torch.equal(torch.rand(3), expected) and layer.input_size == 5
    xi, mask = torch.randn(2, 3, 5), torch.ones(2, 3, dtype=torch.bool)
    assert layer(xi, mask).shape == (2, 3, 4)


@pytest.fixture
def user_module(tmp_path):
    """A user's module registering a model on a cell whose forward drops a unit; undone after."""
    models, cells, modules, path = dict(MODELS), dict(CELLS), set(sys.modules), list(sys.path)
    (tmp_path / "short_cell.py").write_text(
        "import torch\nfrom torch import nn\nfrom inn.models import ModelSpec, register, register_cell\n\n"
        "class ShortCell(nn.Module):\n"
        "    def __init__(self, input_size, hidden_size):\n"
        "        super().__init__()\n"
        "        self.W = nn.Linear(input_size + 2 * hidden_size, hidden_size - 1)\n\n"
        "    def forward(self, x, h_prev, h_next):\n"
        "        return torch.tanh(self.W(torch.cat([x, h_prev, h_next], -1)))\n\n"
        "register_cell('short', ShortCell)\n"
        "register(ModelSpec('short', 'Short', 'short', bidirectional=True, implicit=True, in_paper=False,\n"
        "                   sizes={'walks': ('inn_hidden_size',)}))\n"
    )
    yield tmp_path / "short_cell.py"
    MODELS.clear(), MODELS.update(models)
    CELLS.clear(), CELLS.update(cells)
    for name in set(sys.modules) - modules:
        del sys.modules[name]
    sys.path[:] = path


def test_the_config_check_probes_each_cell_it_runs(user_module):
    config = {"imports": [str(user_module)], "models": {"walks": {"run": ["inn", "short"]}}}
    with pytest.raises(InnError) as error:
        validate_config(config, load_schema(SCHEMA))
    assert str(error.value) == (
        "config: models.walks.run: model short: cell ShortCell returned a float32 tensor of shape (2, 3, 3) on cpu "
        "for a probe (x (2, 3, 3), h_prev and h_next (2, 3, 4)); expected a float32 tensor of shape (2, 3, 4) on cpu: "
        "forward(x, h_prev, h_next) gives the new state of every position"
    )
    assert validate_config({"imports": [str(user_module)], "models": {"walks": {"run": ["inn"]}}}, load_schema(SCHEMA))[
        "models"
    ]["walks"]["run"] == ["inn"]
