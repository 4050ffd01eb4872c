"""The stored states and gradients of the implicit GRU and LSTM (``fixtures/cells_*.pt``).

Run once, before the cells moved onto :class:`inn.nn.ImplicitSequence` (issue #28), from the
code as it was then (commit 136e5c0); ``tests/test_cell_fixtures.py`` runs :func:`record` on
the stored weights and checks that every solver and every backward still gives these numbers.
Rerunning this script overwrites the reference with whatever the current code computes, which
defeats its purpose: only for a deliberate change of the numbers.

    PYTHONPATH=src python tests/cell_fixtures.py
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch

from inn.nn import ImplicitGRU, ImplicitLSTM
from inn.solvers import ADJOINT_SOLVERS, APPROXIMATE_ADJOINTS, PAPER_OPTIONS, SOLVERS

FIXTURES = Path(__file__).resolve().parent / "fixtures"

#: forward runs: name -> (solver, options); float64 unless the name says float32
FORWARD = {
    **{name: (name, {}) for name in SOLVERS},
    "anderson_red_black": ("anderson", {"sweep": "red_black"}),
    "anderson_jacobi": ("anderson", {"sweep": "jacobi"}),
    "anderson_one_step": ("anderson", {"candidates": ("one_step",)}),
    "anderson_random": ("anderson", {"candidates": ("random",)}),
    "newton_krylov_paper": ("newton_krylov", {**PAPER_OPTIONS, "forcing": 1e-8}),
    "anderson_float32": ("anderson", {"low_precision": False}),
}
#: backward runs (all after the default anderson forward)
BACKWARD = [*ADJOINT_SOLVERS, *APPROXIMATE_ADJOINTS]


def layer_of(cell: str, **options) -> torch.nn.Module:
    torch.manual_seed(0)
    if cell == "gru":
        layer = ImplicitGRU(5, 6, trainable_boundary=True, **options)
    else:
        layer = ImplicitLSTM(5, 4, trainable_boundary=True, **options)
    with torch.no_grad():
        for p in layer.recurrent_weights():
            p.mul_(1.5)
    return layer.double()


def fixture_name(cell: str, boundary: float) -> str:
    return f"cells_{cell}_{'zero' if boundary == 0 else 'boundary'}.pt"


def record(cell: str, boundary: float, state_dict: dict | None = None) -> dict:
    """States, statistics and gradients of every run on one cell's weights (``state_dict``;
    by default freshly drawn, with the end boundary state set to ``boundary``)."""
    if state_dict is None:
        layer = layer_of(cell)
        with torch.no_grad():
            layer.h_end.fill_(boundary)  # nonzero: the step from zero is not taken
        state_dict = layer.state_dict()
    hidden = 6 if cell == "gru" else 4
    gen = torch.Generator().manual_seed(1)
    xi = torch.randn(3, 7, 5, generator=gen, dtype=torch.float64)
    mask = torch.zeros(3, 7, dtype=torch.bool)
    for b, length in enumerate([7, 4, 1]):
        mask[b, :length] = True
    target = torch.randn(3, 7, hidden, generator=gen, dtype=torch.float64)
    out = {"state_dict": state_dict, "xi": xi, "mask": mask, "target": target, "forward": {}, "backward": {}}
    for name, (solver, options) in FORWARD.items():
        dtype = torch.float32 if name.endswith("float32") else torch.float64
        tol = 1e-5 if dtype == torch.float32 else 1e-10
        options = {"max_iter": 3000 if solver == "fixed_point" else None, **options}
        lay = layer_of(cell, solver=solver, tol=tol, **options)
        lay.load_state_dict(out["state_dict"])
        lay = lay.to(dtype)
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("error")
            y = lay(xi.to(dtype), mask)
        st = lay.last_stats
        out["forward"][name] = {
            "state": lay.last_solution,
            "output": y,
            "newton": st.newton_iterations,
            "krylov": st.krylov_iterations,
            "function_evals": st.function_evals,
            "jacobian_products": st.jacobian_products,
            "candidate": st.candidate,
        }
    for method in BACKWARD:
        extra = {"backward_tol": 1e-10, "backward_max_iter": 2000} if method in ADJOINT_SOLVERS else {}
        lay = layer_of(cell, solver="anderson", tol=1e-10, backward_solver=method, **extra)
        lay.load_state_dict(out["state_dict"])
        x = xi.clone().requires_grad_(True)
        (lay(x, mask) * target).sum().backward()
        out["backward"][method] = {
            "xi": x.grad,
            **{n: p.grad for n, p in lay.named_parameters()},
            "iterations": lay.last_backward_stats.newton_iterations + lay.last_backward_stats.krylov_iterations,
        }
    return out


if __name__ == "__main__":
    for cell in ("gru", "lstm"):
        for boundary in (0.0, 0.3):
            torch.save(record(cell, boundary), FIXTURES / fixture_name(cell, boundary))
