"""The implicit GRU and LSTM give the states, statistics and gradients stored before they
became cells of :class:`inn.nn.ImplicitSequence` (``tests/cell_fixtures.py``), for every
solver, sweep and starting candidate and for every backward, to 1e-6."""

import pytest
import torch
from cell_fixtures import FIXTURES, fixture_name, record

#: statistics changed on purpose since the fixtures were stored: run -> (sequences whose
#: statistics still hold, why). The red-black sweep solves the length-1 sequence (index 2) in
#: its first step; that sequence was then flagged DIVERGED on the round-off of the batch's
#: later steps and solved again from the one-step guess (2 more F evaluations). A residual
#: below tol is no longer a divergence: it stays on its first candidate.
CHANGED = {"anderson_red_black": slice(0, 2)}
#: backward solvers added after the fixtures were stored; each is checked against the direct
#: solve and against unrolled autograd instead (tests/test_implicit_grad.py, test_any_cell.py)
ADDED = {"gmres"}


@pytest.mark.parametrize("boundary", [0.0, 0.3])
@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_cells_reproduce_their_stored_states_and_gradients(cell, boundary):
    stored = torch.load(FIXTURES / fixture_name(cell, boundary), weights_only=True)
    now = record(cell, boundary, stored["state_dict"])
    assert set(now["forward"]) == set(stored["forward"]) and set(now["backward"]) == set(stored["backward"]) | ADDED
    for run, want in stored["forward"].items():
        got = now["forward"][run]
        for key in ("state", "output"):
            assert torch.allclose(got[key].double(), want[key].double(), rtol=0, atol=1e-6), (run, key)
        rows = CHANGED.get(run, slice(None))
        for key in ("newton", "krylov", "candidate"):
            assert torch.equal(got[key][rows], want[key][rows]), (run, key, got[key], want[key])
        for key in ("function_evals", "jacobian_products") if run not in CHANGED else ():
            assert got[key] == want[key], (run, key, got[key], want[key])
    for method, want in stored["backward"].items():
        got = now["backward"][method]
        assert set(got) == set(want)
        for key in want:
            if key == "iterations":
                assert torch.equal(got[key], want[key]), (method, got[key], want[key])
            else:
                assert torch.allclose(got[key], want[key], rtol=0, atol=1e-6), (method, key)
