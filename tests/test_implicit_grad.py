"""Implicit differentiation: gradcheck, unrolled fixed-point autograd, adjoint solvers agree."""

import pytest
import torch
from conftest import assert_gradcheck, make_batch, make_layer

from inn.solvers import ADJOINT_SOLVERS


def test_gradcheck_through_implicit_backward():
    layer = make_layer(input_size=2, hidden=3, tol=1e-13, backward_tol=1e-13, trainable_boundary=True)
    xi, mask = make_batch(B=2, n=4, input_size=2, lengths=[4, 3])
    assert_gradcheck(layer, xi, mask)


def _unrolled(layer, xi, mask, iterations=400):
    H = torch.zeros(xi.shape[0], xi.shape[1], layer.hidden_size, dtype=xi.dtype)
    for _ in range(iterations):
        H = layer.transition(xi, H, mask)
    return H


@pytest.mark.parametrize("solver", ["newton_krylov", "anderson", "newton_direct"])
def test_gradients_equal_unrolled_fixed_point(solver):
    layer = make_layer(solver=solver, tol=1e-12, backward_tol=1e-12)
    xi, mask = make_batch(B=2, n=5, lengths=[5, 3])
    xi.requires_grad_(True)
    target = torch.randn(2, 5, 6, dtype=torch.float64)
    loss = (layer(xi, mask) * target).sum()
    grads = torch.autograd.grad(loss, [xi] + list(layer.parameters()))
    loss_u = (_unrolled(layer, xi, mask) * target).sum()
    grads_u = torch.autograd.grad(loss_u, [xi] + list(layer.parameters()))
    for a, b in zip(grads, grads_u):
        assert torch.allclose(a, b, atol=1e-9), (a - b).abs().max()


@pytest.mark.parametrize("method", sorted(ADJOINT_SOLVERS))
def test_adjoint_solvers_agree(method):
    layer = make_layer(scale=1.5, tol=1e-12, backward_solver=method, backward_tol=1e-11, backward_max_iter=2000)
    ref_layer = make_layer(scale=1.5, tol=1e-12, backward_solver="direct")
    ref_layer.load_state_dict(layer.state_dict())
    xi, mask = make_batch(B=3, n=6, lengths=[6, 2, 4])
    grads = []
    for lay in (layer, ref_layer):
        x = xi.clone().requires_grad_(True)
        lay(x, mask).pow(2).sum().backward()
        grads.append(torch.cat([x.grad.flatten()] + [p.grad.flatten() for p in lay.parameters()]))
    assert layer.last_backward_stats.converged.all()
    assert torch.allclose(grads[0], grads[1], atol=1e-8)


def test_trainable_boundary_gets_gradients_float32():
    layer = make_layer(trainable_boundary=True, dtype=torch.float32)
    xi, mask = make_batch(dtype=torch.float32, lengths=[6, 2, 4])
    layer(xi, mask).sum().backward()
    assert layer.h_start.grad is not None and layer.h_end.grad.abs().sum() > 0
    assert torch.isfinite(layer.weight_c.grad).all()


@pytest.mark.parametrize("low_precision", [True, False])
def test_mixed_precision_adjoint_reaches_the_float64_gradients(low_precision, monkeypatch):
    from inn.nn.implicit_gru import GRULinearization

    passes = []
    original = GRULinearization.low_precision
    monkeypatch.setattr(GRULinearization, "low_precision", lambda self: passes.append(1) or original(self))
    layer64 = make_layer(hidden=32, scale=1.5, tol=1e-12, backward_tol=1e-12)
    layer = make_layer(
        hidden=32,
        dtype=torch.float32,
        tol=1e-5,
        backward_tol=1e-5,
        low_precision=low_precision,
        backward_low_precision=low_precision,
        solver="anderson",
    )
    layer.load_state_dict({k: v.float() for k, v in layer64.state_dict().items()})
    xi, mask = make_batch(B=4, n=12, lengths=[12, 7, 12, 3])
    target = torch.randn(4, 12, 32, dtype=torch.float64)
    grads = []
    for lay, x in ((layer64, xi), (layer, xi.float())):
        x = x.clone().requires_grad_(True)
        (lay(x, mask) * target.to(x.dtype)).sum().backward()
        grads.append(torch.cat([x.grad.flatten()] + [p.grad.flatten() for p in lay.parameters()]).double())
    assert layer.last_backward_stats.converged.all() and (len(passes) > 0) == low_precision
    assert float((grads[1] - grads[0]).norm() / grads[0].norm()) < 1e-4


def _gradients(layer, xi, mask, target):
    x = xi.clone().requires_grad_(True)
    layer.zero_grad(set_to_none=True)
    (layer(x, mask) * target).sum().backward()
    return torch.cat([x.grad.flatten()] + [p.grad.flatten() for p in layer.parameters()])


def _approximate_and_exact(scale=1.0, zero_recurrent=False, lengths=(6, 2, 4), **backward):
    torch.manual_seed(0)
    exact = make_layer(scale=scale, tol=1e-12, backward_solver="direct")
    approx = make_layer(tol=1e-12, **backward)
    if zero_recurrent:
        with torch.no_grad():
            for p in (exact.weight_pn, exact.weight_zr, exact.weight_c):
                p.zero_()
    approx.load_state_dict(exact.state_dict())
    xi, mask = make_batch(B=3, n=6, lengths=list(lengths))
    target = torch.randn(3, 6, 6, dtype=torch.float64)
    return _gradients(approx, xi, mask, target), _gradients(exact, xi, mask, target)


@pytest.mark.parametrize(
    "backward",
    [
        dict(backward_solver="phantom", backward_steps=3, backward_damping=0.7),
        dict(backward_solver="jacobian_free"),
        dict(backward_solver="preconditioned"),
    ],
)
def test_approximate_backward_is_exact_without_neighbours(backward):
    """Length-1 sentences have no coupling (dF/dH = 0): every approximation is the exact
    gradient there (the phantom's damped series sums to 1 - (1 - tau)^steps of it, hence tau 1)."""
    if backward["backward_solver"] == "phantom":
        backward = dict(backward, backward_damping=1.0)
    got, want = _approximate_and_exact(lengths=(1, 1, 1), **backward)
    assert torch.allclose(got, want, atol=1e-12)


def test_preconditioned_backward_is_exact_when_the_recurrent_matrices_vanish():
    """With U = 0, dF/dH is the copy coupling D alone, which the preconditioner inverts
    exactly; the Jacobian-free gradient, which ignores D, is then measurably off."""
    got, want = _approximate_and_exact(zero_recurrent=True, backward_solver="preconditioned")
    assert torch.allclose(got, want, atol=1e-10)
    free, _ = _approximate_and_exact(zero_recurrent=True, backward_solver="jacobian_free")
    assert (free - want).norm() > 1e-3 * want.norm()


@pytest.mark.parametrize("damping", [1.0, 0.6])
def test_phantom_gradient_error_shrinks_with_every_step(damping):
    errors = []
    for steps in (1, 2, 4, 8, 16, 64):
        got, want = _approximate_and_exact(backward_solver="phantom", backward_steps=steps, backward_damping=damping)
        errors.append(float((got - want).norm() / want.norm()))
    assert all(b < a for a, b in zip(errors, errors[1:])), errors
    assert errors[-1] < 1e-6 < errors[0]


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(backward_solver="neumann"), "unknown backward solver 'neumann'"),
        (dict(backward_solver="phantom", backward_steps=0), "backward_steps must be a positive integer"),
        (dict(backward_solver="phantom", backward_damping=1.5), r"backward_damping must be a number in \(0, 1\]"),
        (dict(backward_solver="anderson", backward_steps=3), "takes no backward_steps"),
        (dict(backward_fallback="float128"), "backward_fallback must be one of None, float64, direct, not 'float128'"),
        (
            dict(backward_solver="phantom", backward_fallback="direct"),
            "needs an exact adjoint; backward solver 'phantom'",
        ),
        (
            dict(backward_fallback="direct", backward_fallback_after=0),
            "backward_fallback_after must be a positive integer",
        ),
    ],
)
def test_backward_options_are_validated_in_one_line(options, message):
    from inn.errors import InnError

    with pytest.raises(InnError, match=message):
        make_layer(**options)


@pytest.mark.parametrize("method", ["anderson", "anderson_red_black", "bicgstab", "fixed_point"])
def test_adjoint_warm_start_reaches_the_same_gradient_in_fewer_iterations(method):
    """A second identical backward started from the first one's adjoint: the same gradient
    (to tol), fewer adjoint iterations; the start is used once."""
    layer = make_layer(scale=1.5, tol=1e-10, backward_solver=method, backward_tol=1e-8, backward_max_iter=2000)
    xi, mask = make_batch(B=3, n=6, lengths=[6, 2, 4])
    target = torch.randn(3, 6, 6, dtype=torch.float64)
    cold = _gradients(layer, xi, mask, target)
    cold_its = layer.last_backward_stats
    layer.adjoint_start = layer.last_adjoint.float()  # stored in low precision, as the trainer does
    warm = _gradients(layer, xi, mask, target)
    warm_its = layer.last_backward_stats
    assert layer.adjoint_start is None

    def its(st):
        return (st.newton_iterations + st.krylov_iterations).sum()

    assert its(warm_its) < its(cold_its)
    assert torch.allclose(warm, cold, rtol=1e-6, atol=1e-7)


def test_hutchinson_estimate_of_the_jacobian_norm_is_unbiased():
    """Mean of many one-sample estimates against ||dF/dH||_F^2 from the dense Jacobian
    (float64, a tiny system), within four standard errors; per sequence, padding ignored."""
    from inn.nn.implicit_function import jacobian_frobenius

    torch.manual_seed(0)
    layer = make_layer(input_size=3, hidden=2, scale=2.0, tol=1e-12)
    xi, mask = make_batch(B=2, n=3, input_size=3, lengths=[3, 2])
    with torch.no_grad():
        H = layer(xi, mask)
    exact = []
    for b in range(2):
        m = int(mask[b].sum())
        J = torch.autograd.functional.jacobian(
            lambda Z: layer.transition(xi[b : b + 1, :m], Z, mask[b : b + 1, :m]), H[b : b + 1, :m]
        )
        exact.append(float(J.pow(2).sum()))
    F = lambda Z: layer.transition(xi, Z, mask)  # noqa: E731
    draws = torch.stack([jacobian_frobenius(F, H, mask).detach() for _ in range(3000)])
    mean, se = draws.mean(0), draws.std(0) / 3000**0.5
    for b in range(2):
        assert abs(float(mean[b]) - exact[b]) < 4 * float(se[b]), (float(mean[b]), exact[b], float(se[b]))
    assert float(jacobian_frobenius(F, H, mask, samples=2).sum().detach()) > 0


@pytest.mark.parametrize("fallback", ["float64", "direct"])
def test_float64_fallback_solves_the_adjoints_float32_misses(fallback):
    """A float32 adjoint that cannot reach its tol (1e-9) in its one allowed iteration hands every
    sequence to the float64 fallback: u is then the dense float64 solve of (I - J^T) u = dL/dH at
    the float32 solution, and the gradients are those of autograd unrolled through the float64
    fixed-point iteration (to the float32 solution's accuracy)."""
    from inn.solvers import ResultCode

    torch.manual_seed(0)
    layer64 = make_layer(scale=1.5, tol=1e-12)
    layer = make_layer(
        scale=1.5,
        dtype=torch.float32,
        tol=1e-6,
        solver="anderson",
        backward_tol=1e-9,
        backward_fallback=fallback,
        backward_fallback_after=1,
    )
    layer.load_state_dict({k: v.float() for k, v in layer64.state_dict().items()})
    xi, mask = make_batch(B=3, n=6, lengths=[6, 2, 4])
    target = torch.randn(3, 6, 6, dtype=torch.float64)
    x = xi.float().requires_grad_(True)
    (layer(x, mask) * target.float()).sum().backward()
    stats = layer.last_backward_stats
    assert stats.extra["fallback"] == 3 and stats.converged.all() and float(stats.residual.max()) <= 1e-9
    # without the fallback the same float32 solve misses (the test can fail)
    plain = make_layer(
        scale=1.5,
        dtype=torch.float32,
        tol=1e-6,
        solver="anderson",
        backward_tol=1e-9,
        backward_max_iter=1,
        backward_fallback=None,
    )
    plain.load_state_dict(layer.state_dict())
    with pytest.warns(Warning, match="did not reach tol"):
        (plain(xi.float(), mask) * target.float()).sum().backward()
    assert int((plain.last_backward_stats.code == int(ResultCode.MAX_ITERATIONS)).sum()) == 3
    # dense float64 reference at the float32 solution
    H = layer.last_solution.double()
    lin = layer64.system(xi, mask).linearize(H)
    B, n, K = H.shape
    for b in range(B):
        J = torch.zeros(n * K, n * K, dtype=torch.float64)
        for t in range(n):
            L, R = (block[b] for block in lin.blocks(t))
            if t:
                J[t * K : (t + 1) * K, (t - 1) * K : t * K] = L
            if t + 1 < n:
                J[t * K : (t + 1) * K, (t + 1) * K : (t + 2) * K] = R
        g = (target[b] * mask[b, :, None]).flatten()
        dense = torch.linalg.solve(torch.eye(n * K, dtype=torch.float64) - J.T, g)
        assert torch.allclose(layer.last_adjoint[b].double().flatten(), dense, rtol=0, atol=1e-5 * float(dense.norm()))
    # gradients against autograd unrolled through the float64 iteration
    x64 = xi.clone().requires_grad_(True)
    loss = (_unrolled(layer64, x64, mask) * target).sum()
    want = torch.autograd.grad(loss, [x64] + list(layer64.parameters()))
    got = [x.grad] + [p.grad for p in layer.parameters()]
    for a, b in zip(got, want):
        assert float((a.double() - b).norm()) <= 1e-4 * float(b.norm()) + 1e-6


def test_auto_adjoint_turns_to_gmres_once_a_cpu_layers_adjoints_are_slow(monkeypatch, caplog):
    """``backward_solver="auto"`` (the default): Anderson while the layer's adjoints are cheap;
    once a full window of them averages past the mark, GMRES for the rest of the layer's life,
    with one log line; the gradients stay the direct solve's either way. Off a CPU, Anderson."""
    import inn.nn.implicit_function as implicit_function

    layer = make_layer(scale=1.5, tol=1e-12, backward_tol=1e-11, backward_max_iter=2000)
    assert layer.backward_options.get("backward_solver", "auto") == "auto"
    ref_layer = make_layer(scale=1.5, tol=1e-12, backward_solver="direct")
    ref_layer.load_state_dict(layer.state_dict())

    def gradients(lay, xi, mask):
        x = xi.clone().requires_grad_(True)
        lay.zero_grad()
        lay(x, mask).pow(2).sum().backward()
        return torch.cat([x.grad.flatten()] + [p.grad.flatten() for p in lay.parameters()])

    def passes(count):
        used = []
        for seed in range(count):
            torch.manual_seed(seed)
            xi, mask = make_batch(B=3, n=6, lengths=[6, 2, 4])
            got, want = gradients(layer, xi, mask), gradients(ref_layer, xi, mask)
            assert torch.allclose(got, want, atol=1e-8)
            used.append(layer.last_adjoint_solver)
        return used

    assert passes(3) == ["anderson"] * 3  # these small systems take far fewer than 30 iterations
    monkeypatch.setattr(implicit_function, "GMRES_PAYS_FROM", 0)  # every adjoint counts as slow
    monkeypatch.setattr(implicit_function, "AUTO_WINDOW", 2)
    layer.adjoint_recent = None  # the window's length changed: start it again
    with caplog.at_level("INFO", logger="inn.nn.implicit_function"):
        assert passes(4) == ["anderson", "anderson", "gmres", "gmres"]
    assert len([r for r in caplog.records if "GMRES from here on" in r.getMessage()]) == 1
    assert implicit_function.auto_adjoint(layer, torch.device("cuda")) == "anderson"
    assert implicit_function.auto_adjoint(make_layer(), torch.device("cpu")) == "anderson"  # a layer made afresh
