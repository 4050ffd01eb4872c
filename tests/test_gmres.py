"""Batched right-preconditioned GMRES (inn.solvers.gmres) against dense solves, float64."""

import pytest
import torch

from inn.errors import InnError
from inn.nn.implicit_function import check_backward_options
from inn.solvers import ResultCode
from inn.solvers.gmres import gmres


def _system(B=4, N=40, spread=0.9, seed=0):
    g = torch.Generator().manual_seed(seed)
    A = torch.eye(N, dtype=torch.float64) + spread * torch.randn(B, N, N, generator=g, dtype=torch.float64) / N**0.5
    b = torch.randn(B, N, generator=g, dtype=torch.float64)
    diagonal = 1 + torch.rand(B, N, generator=g, dtype=torch.float64)  # M = diag: M^{-1} v = v / diagonal
    return A, b, (lambda x: (A @ x.unsqueeze(-1)).squeeze(-1)), (lambda v: v / diagonal)


def test_full_gmres_matches_the_dense_solve():
    A, b, matvec, precondition = _system()
    x, info = gmres(matvec, precondition, b, rtol=1e-12, maxiter=100, restart=100)
    assert (info.code == int(ResultCode.CONVERGED)).all()
    assert torch.allclose(x, torch.linalg.solve(A, b), atol=1e-9)
    assert (info.iterations <= 40).all()  # at most N products in exact arithmetic, and here no more
    assert torch.allclose(info.residual, torch.linalg.vector_norm(b - matvec(x), dim=1))


def test_restarts_reach_the_dense_solution():
    A, b, matvec, precondition = _system(spread=0.3)
    x, info = gmres(matvec, precondition, b, rtol=1e-11, maxiter=300, restart=5)
    assert (info.code == int(ResultCode.CONVERGED)).all() and (info.iterations > 5).all()
    assert torch.allclose(x, torch.linalg.solve(A, b), atol=1e-8)


def test_each_sample_stops_on_its_own():
    A, b, matvec, precondition = _system(B=3)
    b[1] = 0  # converged before any product, and it stays at zero
    x0 = torch.zeros_like(b)
    x0[2] = torch.linalg.solve(A[2], b[2])  # already a solution
    x, info = gmres(matvec, precondition, b, x0=x0, rtol=1e-10, maxiter=100, restart=100)
    assert info.iterations[1] == 0 and (x[1] == 0).all()
    assert info.iterations[2] == 0 and torch.equal(x[2], x0[2])
    assert info.iterations[0] > 0 and (info.code == int(ResultCode.CONVERGED)).all()


def test_the_limit_is_reported_with_the_true_residual():
    A, b, matvec, precondition = _system()
    x, info = gmres(matvec, precondition, b, rtol=1e-14, maxiter=3, restart=30)
    assert (info.code == int(ResultCode.MAX_ITERATIONS)).all() and info.matvecs == 3 + 1  # and the true residual's
    assert torch.allclose(info.residual, torch.linalg.vector_norm(b - matvec(x), dim=1))
    assert (info.residual < torch.linalg.vector_norm(b, dim=1)).all()  # three products did reduce it


def test_a_residual_at_round_off_stops_the_sample_not_the_batch():
    # float32: sample 1 is nearly singular (an eigenvalue 1e-6 of A), so ||x|| ~ 1e6 ||b|| and its
    # float32 residual b - A x is round-off of order 1e-7 * 1e6; GMRES's estimate meets tol anyway.
    # Sample 0 is well conditioned and converges; sample 1 stops after two such cycles, not at maxiter.
    g = torch.Generator().manual_seed(3)
    N = 20
    Q, _ = torch.linalg.qr(torch.randn(2, N, N, generator=g, dtype=torch.float64))
    eigenvalues = torch.linspace(0.5, 1.5, N, dtype=torch.float64).repeat(2, 1)
    eigenvalues[1, 0] = 1e-6
    A = (Q @ torch.diag_embed(eigenvalues) @ Q.transpose(1, 2)).float()
    b = torch.randn(2, N, generator=g)
    x, info = gmres(lambda v: (A @ v.unsqueeze(-1)).squeeze(-1), lambda v: v, b, rtol=1e-4, maxiter=200, restart=30)
    relative = info.residual / torch.linalg.vector_norm(b, dim=1)
    assert info.code[0] == int(ResultCode.CONVERGED) and relative[0] <= 1e-4
    assert info.code[1] == int(ResultCode.STALLED) and relative[1] > 1e-4
    assert info.iterations[1] < 60  # two cycles of at most N products and a few, not the 200 allowed
    exact = torch.linalg.solve(A[1].double(), b[1].double())
    assert torch.linalg.vector_norm(x[1].double() - exact) / torch.linalg.vector_norm(exact) < 0.05  # near it


def test_restart_is_gmres_only_and_positive():
    check_backward_options({"backward_solver": "gmres", "backward_restart": 10})
    with pytest.raises(InnError, match="takes no backward_restart"):
        check_backward_options({"backward_solver": "anderson", "backward_restart": 10})
    with pytest.raises(InnError, match="backward_restart must be a positive integer"):
        check_backward_options({"backward_solver": "gmres", "backward_restart": 0})


def test_compaction_takes_the_same_steps_on_fewer_samples():
    A, b, matvec, precondition = _system(B=6, N=50)
    A = torch.eye(50, dtype=torch.float64) + torch.linspace(0.1, 0.9, 6, dtype=torch.float64).view(6, 1, 1) * (
        A - torch.eye(50, dtype=torch.float64)
    )  # samples that converge at different times
    b[2] = 0
    diagonal = 1 + torch.arange(50, dtype=torch.float64) / 50
    matvec = lambda x: (A @ x.unsqueeze(-1)).squeeze(-1)  # noqa: E731
    asked = []

    def restrict(rows):
        asked.append(rows.tolist())
        part = A[rows]
        return (lambda x: (part @ x.unsqueeze(-1)).squeeze(-1)), (lambda v: v / diagonal)

    for restart in (60, 7):
        x, info = gmres(matvec, lambda v: v / diagonal, b, rtol=1e-11, maxiter=500, restart=restart, restrict=restrict)
        x_all, info_all = gmres(matvec, lambda v: v / diagonal, b, rtol=1e-11, maxiter=500, restart=restart)
        assert torch.equal(info.iterations, info_all.iterations) and (info.code == int(ResultCode.CONVERGED)).all()
        assert torch.allclose(x, x_all, atol=1e-12) and torch.allclose(x, torch.linalg.solve(A, b), atol=1e-8)
    assert asked and all(len(rows) < 6 for rows in asked) and 2 not in asked[0]
