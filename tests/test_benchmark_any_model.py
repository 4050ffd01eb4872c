"""``inn benchmark --model``: any implicit model of the registry, a cell from a user's file included,
fresh, harder and trained (a whole checkpoint read through its model config, or a state_dict)."""

import pytest
import torch
from conftest import TINY_BENCHMARK, benchmark_rows

#: a user's file: an implicit tanh RNN, h_t = tanh(W x_t + U h_{t-1} + V h_{t+1}), and a model on it
USER_CELL = """
import torch
from torch import nn

from inn.models import ModelSpec, register, register_cell


class TanhCell(nn.Module):
    def __init__(self, input_size, hidden_size):
        super().__init__()
        self.W = nn.Linear(input_size, hidden_size)
        self.U = nn.Linear(hidden_size, hidden_size, bias=False)
        self.V = nn.Linear(hidden_size, hidden_size, bias=False)

    def forward(self, x, h_prev, h_next):
        return torch.tanh(self.W(x) + self.U(h_prev) + self.V(h_next))


register_cell("tanhcell", TanhCell)
register(ModelSpec("mycell", "My tanh cell", "tanhcell", bidirectional=True, implicit=True, in_paper=False,
                   sizes={"walks": ("inn_hidden_size",)}))
"""


@pytest.fixture
def user_cell(tmp_path, imported):
    """The user's file; what importing it leaves is undone after the test."""
    path = tmp_path / "my_tanh_cell.py"
    path.write_text(USER_CELL)
    return path


def test_a_users_cell_is_timed_fresh_harder_and_trained(tmp_path, user_cell):
    """--import FILE --model NAME: every method solves the user's layer (cell column: its cell),
    the harder weights need more iterations, and a trained checkpoint of it (its recurrent
    matrices grown, as training grows them) is read through its own model config."""
    out = tmp_path / "bench.tsv"
    tiny = f"{TINY_BENCHMARK} --baselines gru --peers --dtype float64"
    rows = benchmark_rows(
        out, tiny, "--import", user_cell, "--model mycell --harder 0.9 --methods anderson newton_krylov"
    )
    assert {(r["weights"], r["method"], r["cell"]) for r in rows} == {
        (w, m, "tanhcell") for w in ("init", "harder0.9") for m in ("anderson", "newton_krylov")
    } | {(w, "bigru", "") for w in ("init", "harder0.9")}
    ours = {(r["weights"], r["method"]): r for r in rows if r["cell"]}
    assert all(int(r["failed"]) == 0 and float(r["forward_backward_s"]) > 0 for r in ours.values())
    assert float(ours["harder0.9", "anderson"]["newton_mean"]) > float(ours["init", "anderson"]["newton_mean"])

    from inn.checkpoints import neural_payload
    from inn.models import ModelConfig, build_model

    model = build_model(ModelConfig(task="walks", kind="mycell", hidden_size=5, num_classes=2, input_dim=3))
    with torch.no_grad():
        model.rnn.cell.U.weight.mul_(8)
    checkpoint = tmp_path / "checkpoint.pt"
    torch.save(neural_payload(model, {"task": "walks", "model": "mycell", "dataset": "b0.5"}), checkpoint)
    rows = benchmark_rows(out, tiny, "--import", user_cell, "--checkpoint", checkpoint, "--harder --methods anderson")
    trained = {r["weights"]: r for r in rows if r["cell"]}
    assert trained["checkpoint"]["cell"] == "tanhcell" and int(trained["checkpoint"]["hidden"]) == 5
    assert float(trained["checkpoint"]["grad_error"]) < 1e-2  # the trained layer's own exact gradient
    assert float(trained["checkpoint"]["newton_mean"]) > float(trained["init"]["newton_mean"])
    # the same layer as a plain state_dict: its sizes found from the weights' shapes
    plain = tmp_path / "layer.pt"
    torch.save({"state_dict": {f"rnn.{k}": v for k, v in model.rnn.state_dict().items()}}, plain)
    rows = benchmark_rows(
        out, tiny, "--import", user_cell, "--model mycell --checkpoint", plain, "--harder --methods anderson"
    )
    again = {r["weights"]: r for r in rows if r["cell"]}
    assert again["checkpoint"]["newton_mean"] == trained["checkpoint"]["newton_mean"]


def test_the_jvp_variants_time_a_users_cell(tmp_path, user_cell):
    rows = benchmark_rows(tmp_path / "jvp.tsv", "--import", user_cell, "--model mycell --jvp-only", TINY_BENCHMARK)
    assert {r["cell"] for r in rows} == {"tanhcell"} and {"F", "analytic_jvp", "torch_func_jvp"} <= {
        r["operation"] for r in rows
    }
