"""The implicit LSTM: equations against a loop written from the definition, analytic Jacobian
products against autograd, gradcheck through the implicit backward, padding, solver agreement,
and the tridiagonal step against a dense solve."""

import pytest
import torch
from conftest import assert_gradcheck, assert_padding_invariance, assert_padding_invariance_of_gradients, make_batch

from inn.nn import ImplicitLSTM
from inn.solvers import ADJOINT_SOLVERS, SOLVERS, solve
from inn.solvers.anderson import SWEEPS


def make_lstm(input_size=5, hidden=4, scale=1.0, dtype=torch.float64, **options):
    """A small ImplicitLSTM; ``scale`` multiplies the recurrent weights (harder systems)."""
    layer = ImplicitLSTM(input_size, hidden, **options).to(dtype)
    with torch.no_grad():
        for p in layer.recurrent_weights():
            p.mul_(scale)
    return layer


def _loop_F(layer, xi, H, mask):
    """F by a plain loop over sequences and positions, straight from the definition."""
    k = layer.hidden_size
    Wp, Wn, Wi, Wf, Wo, Wg = layer.weight_x.split(k)
    bp, bn, bi, bf, bo, bg = layer.bias.split(k)
    Up, Un = layer.weight_pn.split(k)
    Ui, Uf, Uo, Ug = layer.weight_gates.split(k)
    out = torch.zeros_like(H)
    for b in range(H.shape[0]):
        n = int(mask[b].sum())
        for t in range(n):
            x = xi[b, t]
            prev = layer.h_start if t == 0 else H[b, t - 1]
            nxt = layer.h_end if t == n - 1 else H[b, t + 1]
            hp, cp, hn, cn = prev[:k], prev[k:], nxt[:k], nxt[k:]
            sp = torch.sigmoid(Wp @ x + Up @ hp + bp)
            sn = torch.sigmoid(Wn @ x + Un @ hn + bn)
            s = sp / (sp + sn)
            hhat = s * hp + (1 - s) * hn
            chat = s * cp + (1 - s) * cn
            i = torch.sigmoid(Wi @ x + Ui @ hhat + bi)
            f = layer.cell.forget_max * torch.sigmoid(Wf @ x + Uf @ hhat + bf)
            o = torch.sigmoid(Wo @ x + Uo @ hhat + bo)
            g = torch.tanh(Wg @ x + Ug @ hhat + bg)
            c = f * chat + i * g
            out[b, t] = torch.cat([o * torch.tanh(c), c])
    return out


@pytest.fixture
def problem():
    layer = make_lstm(scale=1.5)
    xi, mask = make_batch(B=3, n=6, lengths=[6, 4, 5])
    return layer, xi, mask


@pytest.mark.parametrize("forget_max", [1.0, 0.8])
def test_transition_equals_per_position_loop(forget_max):
    layer = make_lstm(trainable_boundary=True, forget_max=forget_max)
    with torch.no_grad():
        layer.h_start.normal_()
        layer.h_end.normal_()
    xi, mask = make_batch(lengths=[6, 4, 1])
    H = torch.randn(3, 6, 8, dtype=torch.float64) * mask.unsqueeze(-1)
    expected = _loop_F(layer, xi, H, mask)
    assert torch.allclose(layer.transition(xi, H, mask), expected, atol=1e-12)
    assert torch.allclose(layer.system(xi, mask).F(H), expected, atol=1e-12)


@pytest.mark.parametrize("forget_max", [1.0, 0.8])
def test_analytic_jvp_vjp_and_blocks_match_autograd(forget_max):
    layer = make_lstm(scale=2.0, trainable_boundary=True, forget_max=forget_max)
    with torch.no_grad():
        layer.h_start.normal_()
        layer.h_end.normal_()
    xi, mask = make_batch(lengths=[6, 3, 5])
    system = layer.system(xi, mask)
    H = torch.randn(system.shape, dtype=torch.float64) * mask.unsqueeze(-1)
    V = torch.randn_like(H)
    lin = system.linearize(H)
    assert torch.allclose(lin.F, system.F(H), atol=1e-14)
    assert torch.allclose(lin.jvp(V), torch.func.jvp(system.F, (H,), (V,))[1], atol=1e-12)
    _, vjp_fn = torch.func.vjp(system.F, H)
    assert torch.allclose(lin.vjp(V), vjp_fn(V)[0], atol=1e-12)
    J = torch.autograd.functional.jacobian(system.F, H)  # (B, n, 2k, B, n, 2k)
    for t in range(6):
        L, R = lin.blocks(t)
        for b in range(3):
            ref_L = J[b, t, :, b, t - 1] if t > 0 else torch.zeros_like(L[b])
            ref_R = J[b, t, :, b, t + 1] if t < 5 else torch.zeros_like(R[b])
            assert torch.allclose(L[b], ref_L, atol=1e-12), t
            assert torch.allclose(R[b], ref_R, atol=1e-12), t
    # the red-black adjoint sweep is a Gauss-Seidel sweep on u = g + J^T u: same fixed point
    g = torch.randn_like(H) * mask.unsqueeze(-1)
    u = torch.linalg.solve(torch.eye(H.numel(), dtype=H.dtype) - J.reshape(H.numel(), -1).T, g.flatten())
    u = u.view_as(H)
    assert torch.allclose(lin.adjoint_sweep(u, g), u, atol=1e-12)


@pytest.mark.parametrize("forget_max", [1.0, 0.8])
def test_gradcheck_through_implicit_backward(forget_max):
    layer = make_lstm(
        input_size=2, hidden=2, tol=1e-13, backward_tol=1e-13, trainable_boundary=True, forget_max=forget_max
    )
    xi, mask = make_batch(B=2, n=4, input_size=2, lengths=[4, 3])
    assert_gradcheck(layer, xi, mask)


def test_gradients_equal_unrolled_fixed_point(problem):
    layer, xi, mask = problem
    layer.options["tol"] = layer.backward_options["backward_tol"] = 1e-12
    xi.requires_grad_(True)
    target = torch.randn(3, 6, 4, dtype=torch.float64)
    grads = torch.autograd.grad((layer(xi, mask) * target).sum(), [xi, *layer.parameters()])
    H = torch.zeros(3, 6, layer.state_size, dtype=torch.float64)
    for _ in range(300):  # plain iteration, differentiated by autograd through every step
        H = layer.transition(xi, H, mask)
    grads_u = torch.autograd.grad((layer.output(H) * target).sum(), [xi, *layer.parameters()])
    for a, b in zip(grads, grads_u):
        assert torch.allclose(a, b, atol=1e-9), (a - b).abs().max()


@pytest.mark.parametrize("method", sorted(ADJOINT_SOLVERS))
def test_adjoint_solvers_agree(problem, method):
    layer, xi, mask = problem
    layer.options["tol"] = 1e-12
    layer.backward_options.update(backward_solver=method, backward_tol=1e-11, backward_max_iter=2000)
    grads = []
    for solver in (method, "direct"):
        layer.backward_options["backward_solver"] = solver
        layer.zero_grad()
        x = xi.clone().requires_grad_(True)
        layer(x, mask).pow(2).sum().backward()
        assert layer.last_backward_stats.converged.all()
        grads.append(torch.cat([x.grad.flatten()] + [p.grad.flatten() for p in layer.parameters()]))
    assert torch.allclose(grads[0], grads[1], atol=1e-8)


@pytest.mark.parametrize("solver", ["newton_krylov", "anderson"])
def test_padding_invariance(solver):
    assert assert_padding_invariance(make_lstm(solver=solver, tol=1e-11)).shape == (3, 7, 4)


def test_padding_invariance_of_gradients():
    assert_padding_invariance_of_gradients(make_lstm(tol=1e-11, backward_tol=1e-11))


@pytest.mark.parametrize("method", sorted(SOLVERS))
def test_all_solvers_agree(problem, method):
    layer, xi, mask = problem
    system = layer.system(xi, mask)
    ref, _ = solve(system, "newton_direct", tol=1e-12)
    assert torch.allclose(system.F(ref), ref, atol=1e-12)
    H, stats = solve(system, method, tol=1e-11, max_iter=2000 if method == "fixed_point" else None)
    assert stats.converged.all(), stats.summary()
    assert torch.allclose(H, ref, atol=1e-9)
    assert (H[~mask] == 0).all()


@pytest.mark.parametrize("sweep", sorted(SWEEPS))
def test_every_anderson_sweep_and_guess_reaches_the_same_states(problem, sweep):
    layer, xi, mask = problem
    system = layer.system(xi, mask)
    ref, _ = solve(system, "newton_direct", tol=1e-12)
    for candidate in ("zeros", "one_step", "random", "F0"):
        H, stats = solve(system, "anderson", tol=1e-11, sweep=sweep, candidates=(candidate,))
        assert stats.converged.all(), (candidate, stats.summary())
        assert torch.allclose(H, ref, atol=1e-9)


def test_tridiagonal_step_solves_c_exactly_given_the_gates():
    layer = make_lstm(scale=1.5, trainable_boundary=True)
    with torch.no_grad():
        layer.h_start.normal_()
        layer.h_end.normal_()
    xi, mask = make_batch(B=2, n=6, lengths=[6, 4])
    system = layer.system(xi, mask)
    k = layer.hidden_size
    H = torch.randn(system.shape, dtype=torch.float64) * mask.unsqueeze(-1)
    step = system.tridiagonal_step(H)
    from inn.nn.implicit_layer import neighbours

    prev, nxt = neighbours(H, system.next_real, system.h_start, system.h_end)
    _, (s, _, _, _, _, i, f, o, g, _) = system.evaluate(system.X, prev, nxt)
    cs, ce = layer.h_start[k:].detach(), layer.h_end[k:].detach()
    for b, n in enumerate([6, 4]):
        for unit in range(k):  # c_t - f s c_{t-1} - f (1 - s) c_{t+1} = i g (+ boundary terms)
            fs, fr = f[b, :n, unit] * s[b, :n, unit], f[b, :n, unit] * (1 - s[b, :n, unit])
            A = torch.eye(n, dtype=torch.float64) - torch.diag(fs[1:], -1) - torch.diag(fr[:-1], 1)
            rhs = i[b, :n, unit] * g[b, :n, unit]
            rhs[0] += fs[0] * cs[unit]
            rhs[-1] += fr[-1] * ce[unit]
            c = torch.linalg.solve(A, rhs)
            assert torch.allclose(step[b, :n, k + unit], c, atol=1e-12)
        assert torch.allclose(step[b, :n, :k], o[b, :n] * torch.tanh(step[b, :n, k:]), atol=1e-12)
    assert (step[~mask] == 0).all()
    # with no recurrent weights the gates do not depend on H: one step lands on the solution
    with torch.no_grad():
        for w in layer.recurrent_weights():
            w.zero_()
    system = layer.system(xi, mask)
    H = system.tridiagonal_step(torch.randn(system.shape, dtype=torch.float64) * mask.unsqueeze(-1))
    assert torch.allclose(system.F(H), H, atol=1e-12)


@pytest.mark.parametrize("forget_max", [1.0, 0.8])
def test_step_from_zero_equals_the_tridiagonal_step_at_zero(problem, forget_max):
    layer, xi, mask = problem
    layer.cell.forget_max = forget_max
    system = layer.system(xi, mask)
    step, res = system.step_from_zero()
    ref, ref_res = system.tridiagonal_step(torch.zeros(system.shape, dtype=torch.float64), with_residual=True)
    assert torch.allclose(step, ref, atol=1e-14) and torch.equal(res, ref_res)


def test_float32_stats_warm_start_and_low_precision():
    layer = make_lstm(input_size=4, hidden=16, dtype=torch.float32, solver="anderson", low_precision=True)
    xi, mask = make_batch(B=4, n=9, input_size=4, lengths=[9, 5, 1, 7], dtype=torch.float32)
    with torch.no_grad():
        H = layer(xi, mask)
    assert H.shape == (4, 9, 16) and H.dtype == torch.float32 and not H.requires_grad
    assert layer.last_solution.shape == (4, 9, 32)
    st = layer.last_stats
    assert st.converged.all() and (st.residual <= 1e-4).all() and st.candidate.shape == (4,)
    # a warm start from the solution converges at once and gives the same output
    with torch.no_grad():
        again = layer(xi, mask, start=layer.last_solution)
    assert (layer.last_stats.candidate == 0).all() and (layer.last_stats.newton_iterations <= 1).all()
    assert torch.allclose(again, H, atol=1e-4)
    layer(xi, mask).sum().backward()  # the mixed-precision adjoint
    assert layer.last_backward_stats.converged.all() and torch.isfinite(layer.weight_gates.grad).all()


def _saturated_walk_layer(forget_max, n=24):
    """A layer whose c equations are the walk of the module docstring at its worst: no
    recurrent weights (the gates are fixed), f = 1 in float64, i g = -1, and the switch pointing
    inward from both ends (x = +1 on the left half, -1 on the right)."""
    layer = make_lstm(input_size=1, hidden=2, forget_max=forget_max, solver="anderson", tol=1e-12)
    k = 2
    with torch.no_grad():
        for w in layer.recurrent_weights():
            w.zero_()
        layer.weight_x.zero_()
        layer.weight_x[:k] = -3.0  # a_p = -3 x: s = s_p / (s_p + s_n) small where x = +1
        layer.weight_x[k : 2 * k] = 3.0
        layer.bias.zero_()
        layer.bias[2 * k : 4 * k] = 40.0  # i = f = 1 in float64
        layer.bias[5 * k :] = -40.0  # g = -1
    x = torch.ones(1, n, 1, dtype=torch.float64)
    x[0, n // 2 :] = -1.0
    return layer, x, torch.ones(1, n, dtype=torch.bool)


def _exact_c(layer, x, mask):
    """c of the unique fixed point by a dense solve: with the gates fixed, (I - f s L - f (1 - s) U) c = i g."""
    system = layer.system(x, mask)
    _, (s, _, _, _, _, i, f, _, g, _) = system.evaluate(system.X, *[torch.zeros(system.shape, dtype=x.dtype)] * 2)
    fs, fr = (f * s)[0, :, 0], (f * (1 - s))[0, :, 0]
    n = x.shape[1]
    A = torch.eye(n, dtype=x.dtype) - torch.diag(fs[1:], -1) - torch.diag(fr[:-1], 1)
    return torch.linalg.solve(A, (i * g)[0, :, 0])


def test_forget_max_bounds_the_cell_state_where_the_uncapped_cell_overflows():
    """Uncapped, the fixed point's |c| grows exponentially with the sentence's length (the
    model's, not a solver's, failure: a dense solve says so); capped at 0.9, the solver finds
    the fixed point the dense solve gives, with |c| <= 1 / (1 - 0.9)."""
    layer, x, mask = _saturated_walk_layer(1.0)
    assert _exact_c(layer, x, mask).abs().max() > 1e10
    assert torch.isinf(layer.system(x, mask).state_bound()[..., 2:]).all()
    layer, x, mask = _saturated_walk_layer(0.9)
    c = _exact_c(layer, x, mask)
    assert c.abs().max() <= 10.0 and c.abs().max() > 9.0  # the bound, nearly attained mid-sentence
    h = layer(x, mask)
    assert layer.last_stats.converged.all()
    assert torch.allclose(layer.last_solution[0, :, 2], c, atol=1e-9)
    assert torch.allclose(h[0, :, 0], 0.5 * torch.tanh(c), atol=1e-9)  # o = sigmoid(0)
    assert torch.allclose(
        layer.system(x, mask).state_bound()[0, 0], torch.tensor([1.0, 1.0, 10.0, 10.0], dtype=x.dtype)
    )


def test_forget_max_outside_its_range_is_refused():
    from inn.errors import InnError

    for bad in (0.0, 1.5, -0.1):
        with pytest.raises(InnError, match=r"forget_max must lie in \(0, 1\]"):
            ImplicitLSTM(2, 3, forget_max=bad)
    assert "forget_max=0.9" in repr(ImplicitLSTM(2, 3, forget_max=0.9))
