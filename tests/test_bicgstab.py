"""Batched BiCGSTAB against torch.linalg.solve, per-sample convergence and result codes."""

import torch

from inn.solvers import ResultCode, bicgstab


def _systems(B=5, N=24, dtype=torch.float64):
    # non-symmetric, increasingly hard per sample, so samples converge at different steps
    scales = torch.linspace(0.1, 0.8, B, dtype=dtype)
    A = torch.eye(N, dtype=dtype) + scales.view(B, 1, 1) * torch.randn(B, N, N, dtype=dtype) / N**0.5
    b = torch.randn(B, N, dtype=dtype)
    return A, b


def _reference(A, b):
    # one sample at a time: batched dense solves are unreliable on this project's CPU build
    return torch.stack([torch.linalg.solve(A[i], b[i]) for i in range(A.shape[0])])


def test_matches_dense_solve_with_per_sample_iterations():
    A, b = _systems()
    x, info = bicgstab(lambda v: (A @ v.unsqueeze(-1)).squeeze(-1), b, rtol=1e-10, maxiter=200)
    ref = _reference(A, b)
    assert torch.allclose(x, ref, atol=1e-8, rtol=1e-8)
    assert (info.code == ResultCode.CONVERGED).all()
    assert len(set(info.iterations.tolist())) > 1, "samples should converge at different steps"
    assert info.iterations[0] < info.iterations[-1]
    true_res = torch.linalg.vector_norm(b - (A @ x.unsqueeze(-1)).squeeze(-1), dim=1)
    assert (true_res <= 1e-9 * torch.linalg.vector_norm(b, dim=1)).all()


def test_multidimensional_samples_and_x0_and_float32():
    A, b = _systems(B=3, N=12, dtype=torch.float32)
    shape = (3, 3, 4)
    mv = lambda v: (A @ v.reshape(3, 12, 1)).reshape(shape)  # noqa: E731
    ref = _reference(A.double(), b.double()).float().reshape(shape)
    x, info = bicgstab(mv, b.reshape(shape), x0=torch.ones(shape), rtol=1e-6, maxiter=100)
    assert torch.allclose(x, ref, atol=1e-4)
    assert (info.code == ResultCode.CONVERGED).all()


def test_max_iterations_code_and_frozen_converged_samples():
    A, b = _systems(B=4, N=40)
    A[-1] = torch.randn(40, 40, dtype=A.dtype) * 3  # hard: will not converge in 3 steps
    x, info = bicgstab(lambda v: (A @ v.unsqueeze(-1)).squeeze(-1), b, rtol=1e-12, maxiter=3)
    assert info.code[-1] == ResultCode.MAX_ITERATIONS
    assert (info.iterations <= 3).all()


def test_zero_rhs_converges_immediately():
    A, b = _systems(B=3, N=8)
    b[1] = 0
    x, info = bicgstab(lambda v: (A @ v.unsqueeze(-1)).squeeze(-1), b, rtol=1e-10)
    assert info.iterations[1] == 0 and (x[1] == 0).all()
    assert info.code[1] == ResultCode.CONVERGED


def test_breakdown_is_detected_not_divided_through():
    # a rotation: with r_hat = b, <r_hat, A b> = 0, the textbook breakdown
    rot = torch.tensor([[0.0, 1.0], [-1.0, 0.0]], dtype=torch.float64)
    A = torch.stack([rot, torch.eye(2, dtype=torch.float64)])
    b = torch.tensor([[1.0, 0.0], [1.0, 2.0]], dtype=torch.float64)
    x, info = bicgstab(lambda v: (A @ v.unsqueeze(-1)).squeeze(-1), b, rtol=1e-10)
    assert info.code[0] == ResultCode.BREAKDOWN
    assert torch.isfinite(x).all()
    assert info.code[1] == ResultCode.CONVERGED
    assert torch.allclose(x[1], b[1])


def test_nonfinite_is_reported():
    A, b = _systems(B=2, N=6)
    A[0, 0, 0] = float("nan")
    x, info = bicgstab(lambda v: (A @ v.unsqueeze(-1)).squeeze(-1), b, rtol=1e-10)
    assert info.code[0] in (ResultCode.NONFINITE, ResultCode.BREAKDOWN)
    assert info.code[1] == ResultCode.CONVERGED


def test_global_dots_paper_mode_solves_the_block_diagonal_system():
    A, b = _systems(B=3, N=10)
    x, info = bicgstab(lambda v: (A @ v.unsqueeze(-1)).squeeze(-1), b, rtol=1e-10, maxiter=200, global_dots=True)
    assert torch.allclose(x, _reference(A, b), atol=1e-7)
    assert len(set(info.iterations.tolist())) == 1  # one global set of scalars: all move together
