"""The implicit GRU's equations, linearisation, padding behaviour and failure reporting."""

import warnings

import pytest
import torch
from conftest import assert_padding_invariance, assert_padding_invariance_of_gradients, make_batch, make_layer

from inn.errors import InnError
from inn.nn import ImplicitGRU, ImplicitLSTM
from inn.solvers import ConvergenceWarning, ResultCode


def _paper_F(layer, xi, H, mask):
    """F by a plain loop over positions and sequences, written straight from the paper."""
    k = layer.hidden_size
    Wx, bias = layer.weight_x, layer.bias
    Wp, Wn, bp, bn = Wx[:k], Wx[k : 2 * k], bias[:k], bias[k : 2 * k]
    Wz, Wr, W = Wx[2 * k : 3 * k], Wx[3 * k : 4 * k], Wx[4 * k :]
    bz, br, b = bias[2 * k : 3 * k], bias[3 * k : 4 * k], bias[4 * k :]
    Up, Un = layer.weight_pn[:k], layer.weight_pn[k:]
    Uz, Ur, U = layer.weight_zr[:k], layer.weight_zr[k:], layer.weight_c
    out = torch.zeros_like(H)
    for i in range(H.shape[0]):
        n = int(mask[i].sum())
        for t in range(n):
            x = xi[i, t]
            h_prev = layer.h_start if t == 0 else H[i, t - 1]
            h_next = layer.h_end if t == n - 1 else H[i, t + 1]
            sp = torch.sigmoid(Wp @ x + Up @ h_prev + bp)
            sn = torch.sigmoid(Wn @ x + Un @ h_next + bn)
            s = sp / (sp + sn)
            hhat = s * h_prev + (1 - s) * h_next
            z = torch.sigmoid(Wz @ x + Uz @ hhat + bz)
            r = torch.sigmoid(Wr @ x + Ur @ hhat + br)
            htilde = torch.tanh(W @ x + U @ (r * hhat) + b)
            out[i, t] = (1 - z) * hhat + z * htilde
    return out


def test_transition_equals_per_position_loop():
    layer = make_layer(trainable_boundary=True)
    with torch.no_grad():
        layer.h_start.normal_()
        layer.h_end.normal_()
    xi, mask = make_batch(lengths=[6, 4, 1])
    H = torch.randn(3, 6, 6, dtype=torch.float64) * mask.unsqueeze(-1)
    expected = _paper_F(layer, xi, H, mask)
    assert torch.allclose(layer.transition(xi, H, mask), expected, atol=1e-12)
    assert torch.allclose(layer.system(xi, mask).F(H), expected, atol=1e-12)


def test_analytic_jvp_vjp_and_blocks_match_autograd():
    layer = make_layer(scale=2.0)
    xi, mask = make_batch(lengths=[6, 3, 5])
    system = layer.system(xi, mask)
    H = torch.randn(3, 6, 6, dtype=torch.float64) * mask.unsqueeze(-1)
    V = torch.randn_like(H)
    lin = system.linearize(H)
    assert torch.allclose(lin.jvp(V), torch.func.jvp(system.F, (H,), (V,))[1], atol=1e-12)
    # the double-backward trick gives the same J V
    Hg = H.clone().requires_grad_(True)
    FH = system.F(Hg)
    W = torch.zeros_like(FH, requires_grad=True)
    (g,) = torch.autograd.grad(FH, Hg, W, create_graph=True)
    (jv,) = torch.autograd.grad(g, W, V)
    assert torch.allclose(lin.jvp(V), jv, atol=1e-12)
    _, vjp_fn = torch.func.vjp(system.F, H)
    assert torch.allclose(lin.vjp(V), vjp_fn(V)[0], atol=1e-12)
    J = torch.autograd.functional.jacobian(system.F, H)  # (B, n, k, B, n, k)
    for t in range(6):
        L, R = lin.blocks(t)
        for b in range(3):
            ref_L = J[b, t, :, b, t - 1] if t > 0 else torch.zeros_like(L[b])
            ref_R = J[b, t, :, b, t + 1] if t < 5 else torch.zeros_like(R[b])
            assert torch.allclose(L[b], ref_L, atol=1e-12)
            assert torch.allclose(R[b], ref_R, atol=1e-12)


def test_stable_switch_never_forms_nan():
    layer = make_layer(dtype=torch.float32)
    with torch.no_grad():
        layer.bias[:12] = -200.0  # both s_p and s_n underflow to 0 in float32: 0/0 naively
    xi, mask = make_batch(dtype=torch.float32)
    H = torch.randn(3, 6, 6)
    assert torch.isfinite(layer.transition(xi, H, mask)).all()


@pytest.mark.parametrize("solver", ["newton_krylov", "anderson"])
def test_padding_invariance(solver):
    assert_padding_invariance(make_layer(solver=solver, tol=1e-11))


def test_padding_invariance_of_gradients():
    assert_padding_invariance_of_gradients(make_layer(tol=1e-11, backward_tol=1e-11))


def test_float32_no_grad_and_stats():
    layer = make_layer(input_size=4, hidden=16, dtype=torch.float32)
    xi, mask = make_batch(B=4, n=9, input_size=4, lengths=[9, 5, 1, 7], dtype=torch.float32)
    with torch.no_grad():
        H = layer(xi, mask)
    assert H.shape == (4, 9, 16) and H.dtype == torch.float32 and not H.requires_grad
    st = layer.last_stats
    assert st.converged.all() and (st.residual <= 1e-4).all()
    assert st.newton_iterations.shape == (4,) and st.krylov_iterations.shape == (4,)
    assert st.candidate.shape == (4,)
    G = H - layer.system(xi, mask).F(H)
    assert (torch.linalg.vector_norm(G.flatten(1), dim=1) <= 1e-4 * torch.linalg.vector_norm(H.flatten(1), dim=1)).all()


@pytest.mark.parametrize("solver", ["anderson", "fixed_point", "newton_krylov"])
def test_float32_solve_from_zeros_is_not_a_failure(solver):
    # from H = 0 the relative residual ||F(0)|| / ||0|| overflows float32 (it once made the
    # zeros candidate count as NONFINITE, so every solve silently fell back to the next one)
    layer = make_layer(input_size=8, hidden=64, dtype=torch.float32, solver=solver, candidates=("zeros", "random"))
    xi, mask = make_batch(B=2, n=40, input_size=8, dtype=torch.float32)
    with torch.no_grad():
        assert torch.linalg.vector_norm(layer.system(xi, mask).F(torch.zeros(2, 40, 64))) > 4.0
        layer(xi, mask)
    st = layer.last_stats
    assert st.converged.all() and (st.candidate == 0).all(), st.summary()


def test_forced_nonconvergence_is_visible():
    # fallback float64: no homotopy, which would go on past max_iter (it follows its own path)
    layer = make_layer(scale=3.0, max_iter=1, tol=1e-14, candidates=("zeros",), fallback="float64")
    xi, mask = make_batch()
    with pytest.warns(ConvergenceWarning):
        layer(xi, mask)
    st = layer.last_stats
    assert st.num_failed == 3 and not st.converged.any()
    assert (st.code == ResultCode.MAX_ITERATIONS).all()
    strict = make_layer(scale=3.0, max_iter=1, tol=1e-14, candidates=("zeros",), strict=True, fallback="float64")
    with pytest.raises(InnError, match="did not reach tol"):
        strict(xi, mask)


def test_nan_input_is_reported_not_silent():
    layer = make_layer(solver="newton_krylov")
    xi, mask = make_batch()
    xi[1, 2, 0] = float("nan")
    with pytest.warns(ConvergenceWarning):
        layer(xi, mask)
    st = layer.last_stats
    assert not st.converged[1] and st.code[1] == ResultCode.NONFINITE
    assert st.converged[0] and st.converged[2]


def test_unknown_option_and_solver_raise_innerror():
    with pytest.raises(InnError, match="no option"):
        ImplicitGRU(3, 4, solver="anderson", krylov_max_iter=3)
    with pytest.raises(InnError, match="unknown solver"):
        ImplicitGRU(3, 4, solver="magic")


def test_empty_sequences_and_default_mask():
    layer = make_layer()
    xi, mask = make_batch(lengths=[6, 0, 2])
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        H = layer(xi, mask)
    assert (H[1] == 0).all()
    assert layer(xi).shape == (3, 6, 6)


@pytest.mark.parametrize("layer_class", ["gru", "lstm"])
def test_the_cells_parameters_are_reachable_from_the_cell(layer_class):
    """The layer holds the cell's weights under their flat checkpoint names, yet they are the
    cell's: cell.parameters() lists them (the same tensors), an optimiser of the cell trains the
    layer, and the layer lists each once with the keys checkpoints have always had."""
    layer = (ImplicitGRU if layer_class == "gru" else ImplicitLSTM)(4, 5)
    names = [name for name, _ in layer.cell.named_parameters()]
    assert names == [name for name in layer.state_dict() if name not in ("h_start", "h_end")]
    assert all(p is getattr(layer, name) for name, p in layer.cell.named_parameters())
    assert len(list(layer.parameters())) == len(names)
    before = layer.weight_x.detach().clone()
    optimiser = torch.optim.SGD(layer.cell.parameters(), lr=0.1)
    xi = torch.randn(2, 3, 4)
    layer(xi, torch.ones(2, 3, dtype=torch.bool)).sum().backward()
    optimiser.step()
    assert not torch.equal(layer.weight_x, before)
