"""The implicit GRU and LSTM give the states, statistics and gradients stored before they
became cells of :class:`inn.nn.ImplicitSequence` (``tests/cell_fixtures.py``), for every
solver, sweep and starting candidate and for every backward, to 1e-6."""

import pytest
import torch

from cell_fixtures import FIXTURES, fixture_name, record


@pytest.mark.parametrize("boundary", [0.0, 0.3])
@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_cells_reproduce_their_stored_states_and_gradients(cell, boundary):
    stored = torch.load(FIXTURES / fixture_name(cell, boundary), weights_only=True)
    now = record(cell, boundary, stored["state_dict"])
    assert set(now["forward"]) == set(stored["forward"]) and set(now["backward"]) == set(stored["backward"])
    for run, want in stored["forward"].items():
        got = now["forward"][run]
        for key in ("state", "output"):
            assert torch.allclose(got[key].double(), want[key].double(), rtol=0, atol=1e-6), (run, key)
        for key in ("newton", "krylov", "candidate", "function_evals", "jacobian_products"):
            assert torch.equal(torch.as_tensor(got[key]), torch.as_tensor(want[key])), (run, key, got[key], want[key])
    for method, want in stored["backward"].items():
        got = now["backward"][method]
        assert set(got) == set(want)
        for key in want:
            if key == "iterations":
                assert torch.equal(got[key], want[key]), (method, got[key], want[key])
            else:
                assert torch.allclose(got[key], want[key], rtol=0, atol=1e-6), (method, key)
