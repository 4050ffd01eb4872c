"""The solvers against independent references: dense Newton, SciPy, each other, dense solves."""

import dataclasses
import warnings

import numpy as np
import pytest
import scipy.optimize
import torch
from conftest import make_batch, make_layer

from inn.errors import InnError
from inn.solvers import PAPER_OPTIONS, SOLVERS, ConvergenceWarning, solve
from inn.solvers.anderson import SWEEPS
from inn.solvers.block_tridiagonal import (
    BlockTridiagonalLU,
    SingularBlockError,
    batched_solve,
    block_tridiagonal_solve,
    block_tridiagonal_solve_transposed,
)
from inn.solvers.tridiagonal import Tridiagonal


def _single_F(layer, xi, length):
    """F for one unpadded sequence as a function of its flat state vector (float64)."""
    system = layer.system(xi[None, :length], torch.ones(1, length, dtype=torch.bool))
    k = layer.hidden_size
    return lambda h: system.F(h.reshape(1, length, k)).reshape(-1)


def _dense_newton(F, x, iters=30):
    for _ in range(iters):
        J = torch.autograd.functional.jacobian(F, x)
        x = x - torch.linalg.solve(torch.eye(x.numel(), dtype=x.dtype) - J, x - F(x))
    return x


@pytest.fixture
def problem():
    layer = make_layer(scale=1.5)
    xi, mask = make_batch(B=3, n=6, lengths=[6, 4, 5])
    return layer, xi, mask


def test_newton_krylov_matches_dense_newton_and_scipy(problem):
    layer, xi, mask = problem
    H, stats = solve(layer.system(xi, mask), "newton_krylov", tol=1e-12)
    assert stats.converged.all()
    assert (stats.krylov_iterations > 0).all() and (stats.newton_iterations > 0).all()
    k = layer.hidden_size
    for b, length in enumerate([6, 4, 5]):
        F = _single_F(layer, xi[b], length)
        dense = _dense_newton(F, torch.zeros(length * k, dtype=torch.float64))
        assert torch.allclose(H[b, :length].reshape(-1), dense, atol=1e-10)
        Fnp = lambda h: (lambda t: (t - F(t)).numpy())(torch.from_numpy(h))  # noqa: E731
        ref = scipy.optimize.newton_krylov(Fnp, np.zeros(length * k), f_tol=1e-12, method="bicgstab")
        assert np.allclose(H[b, :length].reshape(-1).numpy(), ref, atol=1e-9)


@pytest.mark.parametrize("method", sorted(SOLVERS))
def test_all_solvers_agree(problem, method):
    layer, xi, mask = problem
    system = layer.system(xi, mask)
    ref, _ = solve(system, "newton_direct", tol=1e-12)
    H, stats = solve(system, method, tol=1e-11, max_iter=2000 if method == "fixed_point" else None)
    assert stats.converged.all(), stats.summary()
    assert (stats.residual <= 1e-11).all()
    assert torch.allclose(H, ref, atol=1e-9)
    assert (H[~mask] == 0).all()


def test_the_stats_summary_names_iterations_for_every_solver(problem):
    """An Anderson solve's summary said ``newton_mean``: its outer iterations are Anderson steps."""
    layer, xi, mask = problem
    _, stats = solve(layer.system(xi, mask), "anderson", tol=1e-8)
    summary = stats.summary()
    assert not any(key.startswith("newton") for key in summary)
    assert summary["iterations_mean"] == pytest.approx(float(stats.newton_iterations.float().mean()))
    assert summary["iterations_max"] == int(stats.newton_iterations.max()) >= 1


@pytest.mark.parametrize("sweep", sorted(SWEEPS))
def test_every_anderson_sweep_reaches_the_same_states(problem, sweep):
    layer, xi, mask = problem
    system = layer.system(xi, mask)
    ref, _ = solve(system, "newton_direct", tol=1e-12)
    H, stats = solve(system, "anderson", tol=1e-11, sweep=sweep)
    assert stats.converged.all(), stats.summary()
    assert torch.allclose(H, ref, atol=1e-9)


@pytest.mark.parametrize("method", ["thomas", "pcr"])
@pytest.mark.parametrize("n", [1, 2, 7, 16])
def test_tridiagonal_against_dense_solve(method, n):
    B, k = 3, 4
    gen = torch.Generator().manual_seed(3)
    # the layer's coefficients: lower + upper = 1 - z <= 1 (here up to 1, the hardest case)
    keep = torch.rand(B, n, k, generator=gen, dtype=torch.float64)
    keep[0] = 1.0  # z = 0 everywhere in one sample: a pure diffusion along the sequence
    s = torch.rand(B, n, k, generator=gen, dtype=torch.float64)
    lower, upper = keep * s, keep * (1 - s)
    b = torch.randn(B, n, k, generator=gen, dtype=torch.float64)
    dense = torch.zeros(B, k, n, n, dtype=torch.float64)
    t = torch.arange(n)
    dense[..., t, t] = 1.0
    dense[..., t[1:], t[:-1]] = -lower[:, 1:].transpose(1, 2)
    dense[..., t[:-1], t[1:]] = -upper[:, :-1].transpose(1, 2)
    rhs = b.transpose(1, 2).unsqueeze(-1)  # (B, k, n, 1)
    expected = torch.linalg.solve(dense, rhs).squeeze(-1).transpose(1, 2)
    assert torch.allclose(Tridiagonal(lower, upper, method).solve(b), expected, rtol=1e-10, atol=1e-10)
    expected_t = torch.linalg.solve(dense.mT, rhs).squeeze(-1).transpose(1, 2)
    lower_t, upper_t = Tridiagonal.transposed_coefficients(lower, upper)
    assert torch.allclose(Tridiagonal(lower_t, upper_t, method).solve(b), expected_t, rtol=1e-10, atol=1e-10)


def test_layer_with_the_accelerator_tridiagonal_solver(problem, monkeypatch):
    # CUDA uses parallel cyclic reduction: forced here on the CPU, forward and adjoint
    layer, xi, mask = problem
    system = layer.system(xi, mask)
    ref, _ = solve(system, "newton_direct", tol=1e-12)
    x = xi.clone().requires_grad_(True)
    layer.options.update(tol=1e-11)
    layer.backward_options.update(backward_tol=1e-11)
    layer(x, mask).pow(2).sum().backward()
    expected = x.grad.clone()
    monkeypatch.setattr(Tridiagonal, "default_method", staticmethod(lambda device: "pcr"))
    H, stats = solve(system, "anderson", tol=1e-11)
    assert stats.converged.all() and torch.allclose(H, ref, atol=1e-9)
    x = xi.clone().requires_grad_(True)
    layer(x, mask).pow(2).sum().backward()
    assert torch.allclose(x.grad, expected, atol=1e-8)


def test_tridiagonal_step_is_exact_newton_without_recurrent_weights():
    # with U = 0 the gates do not depend on H, F is affine and its Jacobian is exactly the
    # copy coupling: one tridiagonal step must land on the solution from anywhere
    layer = make_layer(scale=1.5)
    with torch.no_grad():
        for weight in (layer.weight_pn, layer.weight_zr, layer.weight_c):
            weight.zero_()
    xi, mask = make_batch(B=3, n=6, lengths=[6, 4, 1])
    system = layer.system(xi, mask)
    H = system.tridiagonal_step(torch.randn(system.shape, dtype=torch.float64) * mask.unsqueeze(-1))
    assert torch.allclose(system.F(H), H, atol=1e-12)
    lower, upper = system.linearize(H).copy
    L, R = system.linearize(H).blocks(2)
    assert torch.allclose(L, torch.diag_embed(lower[:, 2]))
    assert torch.allclose(R, torch.diag_embed(upper[:, 2]))


def test_paper_mode_two_candidates_in_parallel(problem):
    layer, xi, mask = problem
    H, stats = solve(layer.system(xi, mask), "newton_krylov", **{**PAPER_OPTIONS, "forcing": 1e-8}, tol=1e-10)
    assert stats.converged.all()
    assert set(stats.candidate.tolist()) <= {0, 1}
    ref, _ = solve(layer.system(xi, mask), "newton_direct", tol=1e-12)
    assert torch.allclose(H, ref, atol=1e-8)


def test_fallback_candidate_runs_only_for_failed_sequences(problem):
    layer, xi, mask = problem
    system = layer.system(xi, mask)
    with pytest.warns(ConvergenceWarning):
        H, stats = solve(system, "newton_krylov", tol=1e-13, max_iter=2, candidates=("zeros", "one_step"))
    assert (stats.newton_iterations == 4).all()  # two Newton steps from each candidate
    _, easy = solve(system, "newton_krylov", tol=1e-6, candidates=("one_step", "zeros"))
    assert easy.converged.all() and (easy.candidate == 0).all()  # fallback never needed


def test_per_sequence_step_lengths_handle_hard_systems():
    # trained-like: recurrent weights scaled up; undamped Newton from zero is fragile here
    layer = make_layer(hidden=8, scale=4.0)
    xi, mask = make_batch(B=4, n=8, lengths=[8, 8, 5, 3])
    xi = 3 * xi
    H, stats = solve(layer.system(xi, mask), "newton_krylov", tol=1e-10, candidates=("zeros", "one_step", "random"))
    assert torch.isfinite(H).all()
    direct, st2 = solve(layer.system(xi, mask), "newton_direct", tol=1e-10, candidates=("one_step", "random"))
    ok = stats.converged & st2.converged
    assert ok.any()
    res = H - layer.system(xi, mask).F(H)
    for b in range(4):
        if stats.converged[b]:
            assert torch.linalg.vector_norm(res[b]) <= 1e-9 * torch.linalg.vector_norm(H[b])


def _dense_from_blocks(blocks, B, n, k, transpose=False):
    M = torch.zeros(B, n * k, n * k, dtype=torch.float64)
    for t in range(n):
        L, R = blocks(t)
        if t > 0:
            M[:, t * k : (t + 1) * k, (t - 1) * k : t * k] = L
        if t < n - 1:
            M[:, t * k : (t + 1) * k, (t + 1) * k : (t + 2) * k] = R
    A = torch.eye(n * k, dtype=torch.float64) - M
    return A.mT if transpose else A


def test_block_tridiagonal_against_dense_solve():
    B, n, k = 3, 5, 4
    Ls = [torch.randn(B, k, k, dtype=torch.float64) * 0.3 for _ in range(n)]
    Rs = [torch.randn(B, k, k, dtype=torch.float64) * 0.3 for _ in range(n)]
    blocks = lambda t: (Ls[t], Rs[t])  # noqa: E731
    b = torch.randn(B, n, k, dtype=torch.float64)
    for transpose, fn in ((False, block_tridiagonal_solve), (True, block_tridiagonal_solve_transposed)):
        A = _dense_from_blocks(blocks, B, n, k, transpose)
        ref = torch.stack([torch.linalg.solve(A[i], b[i].reshape(-1)) for i in range(B)]).reshape(B, n, k)
        assert torch.allclose(fn(blocks, b), ref, atol=1e-10)


def test_block_lu_scaled_with_several_right_hand_sides_against_dense_solve():
    """The kept factors of I - lam J solve two right-hand sides at once (the homotopy's
    corrector), each as a dense solve of the same matrix does."""
    B, n, k = 2, 4, 3
    Ls = [torch.randn(B, k, k, dtype=torch.float64) * 0.4 for _ in range(n)]
    Rs = [torch.randn(B, k, k, dtype=torch.float64) * 0.4 for _ in range(n)]
    blocks = lambda t: (Ls[t], Rs[t])  # noqa: E731
    lam = torch.tensor([0.3, 0.9], dtype=torch.float64)
    b = torch.randn(B, n, k, 2, dtype=torch.float64)
    x = BlockTridiagonalLU(blocks, n, lam).solve(b)
    for i in range(B):
        J = torch.eye(n * k, dtype=torch.float64) - _dense_from_blocks(blocks, B, n, k)[i]
        A = torch.eye(n * k, dtype=torch.float64) - lam[i] * J
        ref = torch.linalg.solve(A, b[i].reshape(n * k, 2))
        assert torch.allclose(x[i].reshape(n * k, 2), ref, atol=1e-10)


def test_block_lu_names_a_singular_block():
    """D_1 = I - L_1 D_0^{-1} R_0 is zero for L_1 = R_0 = I: the elimination says which block,
    as an error the homotopy can catch (still a RuntimeError for every other caller)."""
    eye = torch.eye(3, dtype=torch.float64).expand(1, 3, 3)
    with pytest.raises(SingularBlockError, match="block 1 of I - J is singular"):
        BlockTridiagonalLU(lambda t: (eye, eye), 2)
    assert issubclass(SingularBlockError, RuntimeError)


def test_homotopy_finish_at_a_singular_jacobian_stalls_instead_of_raising():
    """Newton's last steps from the end of the curve meet a singular I - J (a trained walks INN
    met one at b = 0.75 and its training stopped): the solve reports itself stalled at the
    point it reached, the caller counts it, and training goes on."""
    from types import SimpleNamespace

    from inn.solvers._common import Counter, ResultCode
    from inn.solvers.homotopy import _finish

    eye = torch.eye(3, dtype=torch.float64).expand(1, 3, 3)
    system = SimpleNamespace(F=lambda H: H + 1.0)
    system.linearize = lambda H: SimpleNamespace(F=system.F(H), blocks=lambda t: (eye, eye))
    H0 = torch.full((1, 2, 3), 0.5, dtype=torch.float64)
    H, steps, res, code = _finish(system, H0, Counter(), tol=1e-8, n=2, steps=7)
    assert code == int(ResultCode.STALLED) and steps == 7
    assert torch.equal(H, H0) and res == pytest.approx(2.0)  # ||H - F(H)|| / ||H|| = 1 / 0.5


def test_homotopy_reaches_the_fixed_point_scipy_finds(problem):
    """From a random start in the box the homotopy's curve ends at the fixed point that
    SciPy's Newton-Krylov finds from zero (the small layer has one: its F contracts)."""
    from inn.solvers._common import Counter
    from inn.solvers.homotopy import homotopy_solve

    layer, xi, mask = problem
    k = layer.hidden_size
    generator = torch.Generator().manual_seed(3)
    for b, length in enumerate([6, 4, 5]):
        system = layer.system(xi[None, b, :length], torch.ones(1, length, dtype=torch.bool))
        a = 0.5 * (2 * torch.rand(system.shape, generator=generator, dtype=torch.float64) - 1)
        H, steps, res, code = homotopy_solve(system, a, Counter(), tol=1e-12)
        assert code == 0 and res <= 1e-12 and steps >= 1
        F = _single_F(layer, xi[b], length)
        Fnp = lambda h: (lambda t: (t - F(t)).numpy())(torch.from_numpy(h))  # noqa: E731
        ref = scipy.optimize.newton_krylov(Fnp, np.zeros(length * k), f_tol=1e-12, method="bicgstab")
        assert np.allclose(H.reshape(-1).numpy(), ref, atol=1e-9)


def test_guarded_batched_solve_matches_unbatched_at_bug_size():
    # the CPU build's batched LU misbehaved at >= 200 x 200 with batch >= 2 on 2 threads
    A = torch.eye(200, dtype=torch.float32) + 0.05 * torch.randn(3, 200, 200)
    rhs = torch.randn(3, 200, 2)
    x = batched_solve(A, rhs)
    ref = torch.stack([torch.linalg.solve(A[i], rhs[i]) for i in range(3)])
    assert torch.allclose(x, ref, atol=1e-4)


def test_red_black_sweeps_share_the_fixed_points():
    layer = make_layer(scale=1.5)
    for n in (5, 6):  # odd and even lengths: the parity bookkeeping differs
        xi, mask = make_batch(B=3, n=n, lengths=[n, n - 2, 1])
        system = layer.system(xi, mask)
        H, _ = solve(system, "newton_direct", tol=1e-13)
        assert torch.allclose(system.sweep(H), H, atol=1e-12)
        lin = system.linearize(H)
        g = torch.randn_like(H) * mask.unsqueeze(-1)
        A = lambda u: u - lin.vjp(u)  # noqa: E731
        u = block_tridiagonal_solve_transposed(lin.blocks, g)
        assert torch.allclose(A(u), g, atol=1e-11)
        assert torch.allclose(lin.adjoint_sweep(u, g), u, atol=1e-11)
        # and one sweep from elsewhere equals two half steps of plain Gauss-Seidel
        v = torch.randn_like(H) * mask.unsqueeze(-1)
        even = torch.zeros_like(v)
        even[:, 0::2] = (g + lin.vjp(v))[:, 0::2]
        even[:, 1::2] = v[:, 1::2]
        expected = even.clone()
        expected[:, 1::2] = (g + lin.vjp(even))[:, 1::2]
        assert torch.allclose(lin.adjoint_sweep(v, g), expected * mask.unsqueeze(-1), atol=1e-12)


def test_anderson_reports_divergence_and_nonfinite_per_sample():
    from inn.solvers._common import ResultCode
    from inn.solvers.anderson import anderson_iterate

    # plain iteration of x <- a x + 1 per sample, absolute residuals: a = 0.5 converges,
    # a = 3 grows without bound (DIVERGED once past 10x its first step's), the third turns NaN
    a = torch.tensor([0.5, 3.0, 1.0], dtype=torch.float64).view(3, 1)

    def fmap(x):
        fx = a * x + 1
        fx[2] = float("nan") if bool((x[2] > 2).any()) else fx[2]
        return fx

    x, its, res, code, _, _ = anderson_iterate(
        fmap,
        torch.zeros(3, 4, dtype=torch.float64),
        lambda x: torch.ones(3, dtype=torch.float64),
        tol=1e-10,
        max_iter=200,
        memory=0,
        divergence_factor=10.0,
    )
    assert code.tolist() == [ResultCode.CONVERGED, ResultCode.DIVERGED, ResultCode.NONFINITE]
    assert torch.allclose(x[0], torch.full((4,), 2.0, dtype=torch.float64))
    assert its[1] < 10 and its[2] < 10  # failed samples stop early
    assert torch.isfinite(x).all()  # each keeps its best iterate


def test_step_from_zero_equals_the_tridiagonal_step_at_zero(problem):
    layer, xi, mask = problem
    system = layer.system(xi, mask)
    step, residual = system.step_from_zero()
    expected, expected_residual = system.tridiagonal_step(
        torch.zeros(system.shape, dtype=torch.float64), with_residual=True
    )
    assert torch.allclose(step, expected, rtol=1e-14, atol=1e-15)
    assert torch.equal(residual, expected_residual)
    with torch.no_grad():
        layer.h_start.fill_(0.1)
    assert layer.system(xi, mask).step_from_zero() is None  # boundary products do not vanish


def test_a_failing_triton_kernel_falls_back_to_pcr(monkeypatch, caplog):
    import sys
    import types

    from inn.solvers import tridiagonal

    def broken(*args):
        raise RuntimeError("no kernel image for this GPU")

    monkeypatch.setitem(sys.modules, "inn.solvers.tridiagonal_triton", types.SimpleNamespace(thomas_solve=broken))
    monkeypatch.setattr(tridiagonal, "_installed", lambda package: True)
    monkeypatch.setattr(tridiagonal, "_TRITON_FAILED", [])
    assert Tridiagonal.default_method(torch.device("cuda")) == "triton"
    gen = torch.Generator().manual_seed(0)
    lower, upper = 0.4 * torch.rand(2, 7, 3, generator=gen), 0.4 * torch.rand(2, 7, 3, generator=gen)
    b = torch.randn(2, 7, 3, generator=gen)
    solver = Tridiagonal(lower, upper, "triton")
    x = solver.solve(b)
    assert torch.allclose(x, Tridiagonal(lower, upper, "thomas").solve(b), atol=1e-6)
    assert solver.method == "pcr" and "Triton tridiagonal kernel failed" in caplog.text
    assert Tridiagonal.default_method(torch.device("cuda")) == "pcr"  # for the rest of the process


@pytest.mark.parametrize("method", ["anderson", "newton_krylov"])
def test_a_warm_start_is_tried_first_and_falls_back(problem, method):
    layer, xi, mask = problem
    system = layer.system(xi, mask)
    ref, _ = solve(system, "newton_direct", tol=1e-12)
    _, cold = solve(system, method, tol=1e-8)
    # at the solution: nothing to do; near it: fewer steps than the default candidates
    H, at = solve(system, method, tol=1e-8, start=ref)
    assert at.converged.all() and (at.newton_iterations == 0).all() and (at.candidate == 0).all()
    near = ref + 1e-3 * torch.randn_like(ref) * system.maskf
    H, warm = solve(system, method, tol=1e-8, start=near)
    assert warm.converged.all() and (warm.candidate == 0).all()
    assert warm.newton_iterations.sum() < cold.newton_iterations.sum()
    assert torch.allclose(H, ref, atol=1e-6)
    # a start that breaks the solve: the default candidates take over, sequence by sequence
    bad = near.clone()
    bad[1] = float("nan")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the fallback converges: no warning
        H, stats = solve(system, method, tol=1e-8, start=bad)
    assert stats.converged.all() and stats.candidate.tolist() == [0, 1, 0]
    assert torch.allclose(H, ref, atol=1e-6)
    with pytest.raises(InnError, match=r"start has shape \(3, 5, 6\); the solution has \(3, 6, 6\)"):
        solve(system, method, start=ref[:, :5])


def test_the_layer_ignores_a_warm_start_at_padded_positions(problem):
    layer, xi, mask = problem
    layer.options["tol"] = 1e-10
    with torch.no_grad():
        H = layer(xi, mask)
        start = H + 1e-2 * torch.randn_like(H)
        start[~mask] = 5.0  # garbage at padding
        warm = layer(xi, mask, start=start.float())  # any dtype
    assert layer.last_stats.converged.all() and (layer.last_stats.candidate == 0).all()
    assert torch.equal(layer.last_solution, warm)
    assert (warm[~mask] == 0).all() and torch.allclose(warm, H, atol=1e-8)


def test_mixed_precision_iterates_in_bfloat16_and_finishes_in_float32(monkeypatch):
    from inn.nn.implicit_layer import ImplicitSystem
    from inn.solvers.anderson import low_precision_pays

    layer64 = make_layer(hidden=32, scale=1.5)
    xi, mask = make_batch(B=4, n=12, lengths=[12, 7, 12, 3])
    ref, _ = solve(layer64.system(xi, mask), "newton_direct", tol=1e-12)
    system = layer64.float().system(xi.float(), mask)
    # the low-precision system: the same equations, products rounded to bfloat16
    low = system.low_precision()
    assert low.weights[0].dtype == torch.bfloat16 and layer64.double().system(xi, mask).low_precision() is None
    H = ref.float()
    err = float((low.F(H) - system.F(H)).norm() / system.F(H).norm())
    assert 1e-5 < err < 1e-2
    passes = []
    monkeypatch.setattr(
        ImplicitSystem, "low_precision", lambda self, f=ImplicitSystem.low_precision: passes.append(1) or f(self)
    )
    mixed, stats = solve(system, "anderson", tol=1e-5, low_precision=True)
    assert passes and stats.converged.all() and (stats.residual <= 1e-5).all()  # float32's test
    plain, plain_stats = solve(system, "anderson", tol=1e-5, low_precision=False)
    assert len(passes) == 1 and plain_stats.converged.all()
    for H in (mixed, plain):
        assert float((H.double() - ref).norm() / ref.norm()) < 1e-4
    # "auto": float32 on a CPU with native bfloat16 products only
    assert not low_precision_pays(torch.device("cpu"), torch.float64, "auto")
    assert not low_precision_pays(torch.device("cuda"), torch.float32, "auto")
    assert low_precision_pays(torch.device("cpu"), torch.float64, True)
    with pytest.raises(InnError, match="low_precision must be true, false or 'auto', not 'yes'"):
        solve(system, "anderson", low_precision="yes")


def test_fixed_points_obey_the_maximum_principle():
    # saturating inputs and trained-like recurrent weights: |h| <= max(1, |boundary states|)
    from inn.nn import ImplicitLSTM

    layer = make_layer(hidden=8, scale=3.0)
    xi, mask = make_batch(B=6, n=9, lengths=[9, 9, 7, 5, 3, 1])
    system = layer.system(4 * xi, mask)
    H, stats = solve(system, "newton_direct", tol=1e-12, candidates=("one_step", "random", "zeros"))
    assert stats.converged.any()
    assert H[stats.converged].abs().max() <= 1 and not system.outside_bounds(H)[stats.converged].any()
    peak = H.abs().flatten(1).max(1).values.clamp_min(1e-9).view(-1, 1, 1)
    assert system.outside_bounds(1.05 * H / peak)[mask.any(1)].all()  # past the box's slack: flagged
    with torch.no_grad():  # trainable boundaries widen the box to their size
        layer.h_start.fill_(1.5)
    assert torch.equal(layer.system(xi, mask).state_bound(), torch.full((1, 1, 8), 1.5, dtype=xi.dtype))
    lstm = ImplicitLSTM(5, 4).double()
    lsystem = lstm.system(4 * xi, mask)
    HL, lstats = solve(lsystem, "anderson", tol=1e-10)
    assert lstats.converged.all() and HL[..., :4].abs().max() < 1
    c_only = HL.clone()
    c_only[..., 4:] *= 50  # c has no fixed bound; h does
    assert not lsystem.outside_bounds(c_only).any()
    assert lsystem.outside_bounds(torch.cat([2 * HL[..., :4], HL[..., 4:]], -1)).any()


def test_a_converged_state_outside_the_box_is_retried(problem, monkeypatch):
    # a small relative residual far out (a spurious root of ||H - F(H)|| / ||H||): rejected,
    # and the sequence solved from its next candidate
    import inn.solvers as S

    layer, xi, mask = problem
    reference, _ = solve(layer.system(xi, mask), "anderson", tol=1e-10)
    anderson = S.SOLVERS["anderson"].function
    calls = []

    def spurious_first(system, H0, groups, counter, **options):
        H, newton, krylov, res, code = anderson(system, H0, groups, counter, **options)
        calls.append(H0.shape[0])
        if len(calls) == 1:
            H = H.clone()
            H[0] = 20 * H[0]  # sequence 0 "converged" to a state with |h| up to 20
        return H, newton, krylov, res, code

    monkeypatch.setitem(S.SOLVERS, "anderson", dataclasses.replace(S.SOLVERS["anderson"], function=spurious_first))
    H, stats = solve(layer.system(xi, mask), "anderson", tol=1e-10, candidates=("zeros", "one_step"))
    assert calls == [3, 1]  # only sequence 0 ran again
    assert stats.converged.all() and stats.candidate.tolist() == [1, 0, 0]
    assert torch.allclose(H, reference, atol=1e-8)
    calls.clear()
    with pytest.warns(ConvergenceWarning, match="OUT_OF_BOUNDS"):
        _, alone = solve(layer.system(xi, mask), "anderson", tol=1e-10, candidates=("zeros",), fallback="float64")
    assert alone.converged.tolist() == [False, True, True]
    calls.clear()  # by default the homotopy solves what no candidate did
    H, rescued = solve(layer.system(xi, mask), "anderson", tol=1e-10, candidates=("zeros",))
    assert rescued.converged.all() and rescued.candidate.tolist() == [1, 0, 0]
    assert rescued.extra == {"homotopy": 1}
    assert torch.allclose(H, reference, atol=1e-8)


def test_a_sequence_solved_by_its_first_step_is_not_a_divergence():
    # a length-1 sequence has no neighbours: one red-black sweep from zero solves it, and the
    # round-off of the steps its batch still takes must not count as growth past 1e4 x that
    # first residual (it did: DIVERGED at a residual below tol)
    layer = make_layer(scale=1.5, solver="anderson", sweep="red_black", candidates=("zeros",), tol=1e-11)
    xi, mask = make_batch(B=3, n=6, lengths=[6, 4, 1])
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        layer(xi, mask)
    assert layer.last_stats.converged.all() and layer.last_stats.newton_iterations[2] > 1
