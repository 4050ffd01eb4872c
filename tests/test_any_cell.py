"""Any cell is an implicit layer: an implicit tanh RNN written as a plain ``nn.Module`` (no
hooks) under :class:`inn.nn.ImplicitSequence`, against a per-position loop, dense Newton,
every solver (each running its own method, as its statistics show), gradcheck, unrolled
autograd through the fixed-point iteration, and padding."""

import warnings

import pytest
import torch
from conftest import assert_gradcheck, make_batch
from torch import nn

from inn.nn import ImplicitSequence
from inn.solvers import ADJOINT_SOLVERS, APPROXIMATE_ADJOINTS, SOLVERS, ConvergenceWarning, solve
from inn.solvers.anderson import SWEEPS


class TanhCell(nn.Module):
    """h_t = tanh(W x_t + U_p h_{t-1} + U_n h_{t+1} + b): the docs' example, as a user writes it."""

    def __init__(self, input_size: int, state_size: int) -> None:
        super().__init__()
        self.W = nn.Linear(input_size, state_size)
        self.U_p = nn.Linear(state_size, state_size, bias=False)
        self.U_n = nn.Linear(state_size, state_size, bias=False)

    def forward(self, x, h_prev, h_next):
        return torch.tanh(self.W(x) + self.U_p(h_prev) + self.U_n(h_next))


def make_tanh(input_size=5, state_size=4, trainable_boundary=False, **options):
    torch.manual_seed(2)
    layer = ImplicitSequence(
        TanhCell(input_size, state_size), state_size, trainable_boundary=trainable_boundary, **options
    ).double()
    if trainable_boundary:
        with torch.no_grad():
            layer.h_start.normal_()
            layer.h_end.normal_()
    return layer


def _loop_F(layer, xi, H, mask):
    """F by a loop over sequences and positions, straight from the definition."""
    cell = layer.cell
    out = torch.zeros_like(H)
    for b in range(H.shape[0]):
        n = int(mask[b].sum())
        for t in range(n):
            prev = layer.h_start if t == 0 else H[b, t - 1]
            nxt = layer.h_end if t == n - 1 else H[b, t + 1]
            out[b, t] = torch.tanh(
                cell.W.weight @ xi[b, t] + cell.W.bias + cell.U_p.weight @ prev + cell.U_n.weight @ nxt
            )
    return out


def _dense_newton(layer, xi, mask):
    """Each sequence's solution by Newton's method with the dense Jacobian of the loop's F."""
    H = torch.zeros(*mask.shape, layer.state_size, dtype=xi.dtype)
    for b in range(mask.shape[0]):
        n = int(mask[b].sum())
        F = lambda h: _loop_F(layer, xi[b : b + 1, :n], h.view(1, n, -1), mask[b : b + 1, :n]).flatten()  # noqa: E731
        h = torch.zeros(n * layer.state_size, dtype=xi.dtype)
        for _ in range(30):
            J = torch.autograd.functional.jacobian(F, h)
            h = h - torch.linalg.solve(torch.eye(h.numel(), dtype=h.dtype) - J, h - F(h))
        H[b, :n] = h.view(n, -1)
    return H


@pytest.fixture
def problem():
    layer = make_tanh(trainable_boundary=True)
    xi, mask = make_batch(B=3, n=6, lengths=[6, 4, 1])
    return layer, xi, mask


def test_transition_equals_per_position_loop(problem):
    layer, xi, mask = problem
    H = torch.randn(3, 6, 4, dtype=torch.float64) * mask.unsqueeze(-1)
    expected = _loop_F(layer, xi, H, mask)
    assert torch.allclose(layer.transition(xi, H, mask), expected, atol=1e-12)
    with torch.no_grad():
        assert torch.allclose(layer.system(xi, mask).F(H), expected, atol=1e-12)


def test_autograd_linearisation_matches_dense_jacobian(problem):
    layer, xi, mask = problem
    system = layer.system(xi, mask)
    H = torch.randn(system.shape, dtype=torch.float64) * mask.unsqueeze(-1)
    V = torch.randn_like(H)
    J = torch.autograd.functional.jacobian(system.F, H)  # (B, n, K, B, n, K)
    lin = system.linearize(H)
    Jm = J.reshape(H.numel(), H.numel())
    assert torch.allclose(lin.jvp(V).flatten(), Jm @ V.flatten(), atol=1e-12)
    assert torch.allclose(lin.vjp(V).flatten(), Jm.T @ V.flatten(), atol=1e-12)
    assert lin.copy is None  # no coupling hook: the preconditioners are the identity
    for t in range(6):
        L, R = lin.blocks(t)
        for b in range(3):
            assert torch.allclose(L[b], J[b, t, :, b, t - 1] if t > 0 else torch.zeros_like(L[b]), atol=1e-12)
            assert torch.allclose(R[b], J[b, t, :, b, t + 1] if t < 5 else torch.zeros_like(R[b]), atol=1e-12)
    g = torch.randn_like(H) * mask.unsqueeze(-1)
    u = torch.linalg.solve(torch.eye(H.numel(), dtype=H.dtype) - Jm.T, g.flatten()).view_as(H)
    assert torch.allclose(lin.adjoint_sweep(u, g), u, atol=1e-12)  # the red-black adjoint sweep's fixed point


def _ran_its_own_method(method, stats, fixed_point_steps):
    """What each solver's statistics must show it did: Newton with Krylov steps, Newton with
    direct steps, Anderson steps (fewer than plain iteration's), plain F iterations. (The
    length-1 sequence, with no neighbours, is solved by its starting point alone.)"""
    newton, krylov = stats.newton_iterations[:2], stats.krylov_iterations
    assert stats.solver == method and (newton > 0).all()
    if method == "newton_krylov":
        return bool((krylov[:2] > 0).all() and stats.jacobian_products > 0)
    if method == "newton_direct":
        return bool((krylov == 0).all() and stats.jacobian_products == 0)
    steps = int(stats.newton_iterations.sum())
    if method == "anderson":
        return bool((krylov == 0).all() and steps < fixed_point_steps and stats.jacobian_products == 0)
    return bool((krylov == 0).all() and steps == fixed_point_steps and stats.jacobian_products == 0)


def test_every_solver_reaches_the_dense_newton_states_by_its_own_method(problem):
    layer, xi, mask = problem
    reference = _dense_newton(layer, xi, mask)
    with torch.no_grad():
        _, plain = solve(layer.system(xi, mask), "fixed_point", tol=1e-11, max_iter=5000)
    for method in SOLVERS:
        lay = make_tanh(
            trainable_boundary=True, solver=method, tol=1e-11, max_iter=5000 if method == "fixed_point" else None
        )
        lay.load_state_dict(layer.state_dict())
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("error", ConvergenceWarning)
            H = lay(xi, mask)
        stats = lay.last_stats
        assert stats.converged.all() and torch.allclose(H, reference, atol=1e-9), method
        assert _ran_its_own_method(method, stats, int(plain.newton_iterations.sum())), (method, stats.summary())
    assert (H[~mask] == 0).all()


@pytest.mark.parametrize("sweep", sorted(SWEEPS))
@pytest.mark.parametrize("candidate", ["zeros", "one_step", "random", "F0"])
def test_every_anderson_sweep_and_starting_candidate(problem, sweep, candidate):
    layer, xi, mask = problem
    system = layer.system(xi, mask)
    with torch.no_grad():
        reference, _ = solve(system, "newton_direct", tol=1e-12)
        H, stats = solve(system, "anderson", tol=1e-11, sweep=sweep, candidates=(candidate,))
    assert stats.converged.all() and torch.allclose(H, reference, atol=1e-9), stats.summary()


def test_float32_with_mixed_precision_asked_for_solves_in_float32():
    layer = make_tanh(solver="anderson", low_precision=True).float()  # the cell takes no bfloat16 weights
    xi, mask = make_batch(B=2, n=9, lengths=[9, 5], dtype=torch.float32)
    out = layer(xi, mask)
    assert layer.system(xi, mask).low_precision() is None and layer.last_stats.converged.all()
    out.sum().backward()
    assert layer.last_backward_stats.converged.all() and torch.isfinite(layer.cell.U_p.weight.grad).all()


def test_gradcheck_through_implicit_backward():
    layer = make_tanh(input_size=2, state_size=3, trainable_boundary=True, tol=1e-13, backward_tol=1e-13)
    xi, mask = make_batch(B=2, n=4, input_size=2, lengths=[4, 3])
    assert_gradcheck(layer, xi, mask)


@pytest.mark.parametrize("method", sorted(ADJOINT_SOLVERS))
def test_every_adjoint_solver_gives_the_unrolled_gradients(problem, method):
    layer, xi, mask = problem
    layer.options["tol"] = 1e-12
    layer.backward_options.update(backward_solver=method, backward_tol=1e-11, backward_max_iter=2000)
    target = torch.randn(3, 6, 4, dtype=torch.float64)
    x = xi.clone().requires_grad_(True)
    grads = torch.autograd.grad((layer(x, mask) * target).sum(), [x, *layer.parameters()])
    assert layer.last_backward_stats.converged.all()
    H = torch.zeros(3, 6, 4, dtype=torch.float64)
    for _ in range(300):  # plain iteration, differentiated by autograd through every step
        H = layer.transition(x, H, mask)
    unrolled = torch.autograd.grad((H * target).sum(), [x, *layer.parameters()])
    for a, b in zip(grads, unrolled):
        assert torch.allclose(a, b, atol=1e-9), (a - b).abs().max()


@pytest.mark.parametrize("method", sorted(APPROXIMATE_ADJOINTS))
def test_approximate_backwards_run(problem, method):
    layer, xi, mask = problem
    layer.backward_options["backward_solver"] = method
    x = xi.clone().requires_grad_(True)
    layer(x, mask).pow(2).sum().backward()
    assert torch.isfinite(x.grad).all() and layer.last_backward_stats.solver == method


@pytest.mark.parametrize("solver", sorted(SOLVERS))
def test_padding_is_inert(solver):
    layer = make_tanh(
        trainable_boundary=True, solver=solver, tol=1e-11, max_iter=5000 if solver == "fixed_point" else None
    )
    xi, mask = make_batch(B=3, n=7, lengths=[7, 4, 2])
    garbage = xi.clone()
    garbage[~mask] = 1e3  # padded inputs must not matter
    x = garbage.clone().requires_grad_(True)
    H = layer(x, mask)
    H.pow(2).sum().backward()
    assert (H[~mask] == 0).all() and (x.grad[~mask] == 0).all()
    for b, length in enumerate([7, 4, 2]):
        alone_x = xi[b : b + 1, :length].clone().requires_grad_(True)
        alone = layer(alone_x, mask[b : b + 1, :length])
        alone.pow(2).sum().backward()
        assert torch.allclose(H[b, :length], alone[0], atol=1e-9)
        assert torch.allclose(x.grad[b, :length], alone_x.grad[0], atol=1e-8)
