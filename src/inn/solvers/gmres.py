"""Batched restarted GMRES (Saad and Schultz, 1986), right-preconditioned, for the adjoint.

Solves ``A x = b`` for a batch of independent non-symmetric systems given ``matvec(x) = A x``
and ``precondition(v) = M^{-1} v``: it minimises ``||b - A M^{-1} y||`` over the Krylov space
of ``A M^{-1}`` and returns ``x = M^{-1} y``. With the preconditioner on the right the residual
it minimises is ``A x``'s own, so its test is the true residual's. Every sample has its own
Arnoldi basis (classical Gram-Schmidt, done twice: float32 keeps the basis orthogonal), its own
Givens rotations and its own convergence test; a sample that has converged stops changing while
the others go on (the products still run on the whole batch). Where Anderson with memory m
keeps m differences, GMRES keeps the whole Krylov space up to ``restart`` vectors and is optimal
in it: on systems whose preconditioned map has eigenvalues on every side of the unit circle it
needs fewer products.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from inn.solvers._common import ResultCode, batch_norm, bcast
from inn.solvers.bicgstab import KrylovInfo


def gmres(
    matvec: Callable[[Tensor], Tensor],
    precondition: Callable[[Tensor], Tensor],
    b: Tensor,
    x0: Tensor | None = None,
    rtol: float = 1e-5,
    maxiter: int = 200,
    restart: int = 30,
) -> tuple[Tensor, KrylovInfo]:
    """Solve ``A x = b`` batched over the leading dimension with right-preconditioned GMRES.

    Args:
        matvec: ``x -> A x`` on tensors shaped like ``b``; samples must not interact.
        precondition: ``v -> M^{-1} v`` likewise.
        b: right-hand sides, (B, ...).
        x0: starting guess (default zero, which costs no product).
        rtol: sample i has converged when ``||b_i - A x_i|| <= rtol ||b_i||``.
        maxiter: Arnoldi products with A per solve, over all restarts; each cycle adds one
            product for its true residual.
        restart: basis vectors kept before a restart (the true residual is formed then).

    Returns:
        ``(x, info)``: ``info.iterations`` counts each sample's products until it converged,
        ``info.residual`` is ``||b - A x||`` from a final true product, ``info.code``
        CONVERGED, MAX_ITERATIONS or NONFINITE.
    """
    B, dtype, device = b.shape[0], b.dtype, b.device
    tiny = torch.finfo(dtype).tiny
    scale = batch_norm(b)
    x = torch.zeros_like(b) if x0 is None else x0.clone()
    r = b if x0 is None else b - matvec(x)
    products = 0 if x0 is None else 1
    arnoldi = 0
    iterations = torch.zeros(B, dtype=torch.int64, device=device)
    done = batch_norm(r) <= rtol * scale
    while arnoldi < maxiter and not bool(done.all()):
        m = min(restart, maxiter - arnoldi)
        beta = batch_norm(r)
        V = torch.zeros(B, m + 1, r[0].numel(), dtype=dtype, device=device)
        V[:, 0] = (r / bcast(beta.clamp_min(tiny), r)).reshape(B, -1)
        R = torch.zeros(B, m + 1, m, dtype=dtype, device=device)  # the Hessenberg matrix, rotated
        cs = torch.zeros(B, m, dtype=dtype, device=device)
        sn = torch.zeros(B, m, dtype=dtype, device=device)
        gamma = torch.zeros(B, m + 1, dtype=dtype, device=device)
        gamma[:, 0] = beta
        used = torch.zeros(B, dtype=torch.int64, device=device)  # basis vectors each sample uses
        active = ~done
        for j in range(m):
            w = matvec(precondition(V[:, j].view_as(b))).reshape(B, -1)
            products += 1
            arnoldi += 1
            basis = V[:, : j + 1]
            h = torch.einsum("bjn,bn->bj", basis, w)
            w = w - torch.einsum("bj,bjn->bn", h, basis)
            again = torch.einsum("bjn,bn->bj", basis, w)
            w = w - torch.einsum("bj,bjn->bn", again, basis)
            h = h + again
            norm = torch.linalg.vector_norm(w, dim=1)
            V[:, j + 1] = w / norm.clamp_min(tiny).unsqueeze(1)
            for i in range(j):  # the earlier rotations, on the new column
                hi, hk = h[:, i].clone(), h[:, i + 1].clone()
                h[:, i], h[:, i + 1] = cs[:, i] * hi + sn[:, i] * hk, -sn[:, i] * hi + cs[:, i] * hk
            rho = torch.sqrt(h[:, j] ** 2 + norm ** 2).clamp_min(tiny)
            cs[:, j], sn[:, j] = h[:, j] / rho, norm / rho
            R[:, : j + 1, j] = h
            R[:, j, j] = rho
            gamma[:, j + 1] = -sn[:, j] * gamma[:, j]
            gamma[:, j] = cs[:, j] * gamma[:, j]
            used = torch.where(active, used + 1, used)
            iterations = torch.where(active, iterations + 1, iterations)
            active = active & (gamma[:, j + 1].abs() > rtol * scale) & torch.isfinite(gamma[:, j + 1])
            if not bool(active.any()):
                break
        k = j + 1
        # y from R y = gamma over each sample's own first ``used`` columns (the rest: identity, 0)
        keep = torch.arange(k, device=device).unsqueeze(0) < used.unsqueeze(1)  # (B, k)
        eye = torch.eye(k, dtype=dtype, device=device).expand(B, k, k)
        square = torch.where(keep.unsqueeze(1) & keep.unsqueeze(2), R[:, :k, :k], eye)
        rhs = torch.where(keep, gamma[:, :k], torch.zeros_like(gamma[:, :k]))
        y = torch.linalg.solve_triangular(square, rhs.unsqueeze(-1), upper=True).squeeze(-1)
        step = torch.einsum("bj,bjn->bn", y, V[:, :k]).view_as(b)
        x = torch.where(bcast(done, b), x, x + precondition(step))
        r = b - matvec(x)
        products += 1
        done = done | (batch_norm(r) <= rtol * scale)
    residual = batch_norm(r)
    code = torch.full((B,), int(ResultCode.MAX_ITERATIONS), dtype=torch.int64, device=device)
    code = torch.where(residual <= rtol * scale, int(ResultCode.CONVERGED), code)
    code = torch.where(torch.isfinite(residual), code, int(ResultCode.NONFINITE))
    return x, KrylovInfo(iterations=iterations, residual=residual, code=code, matvecs=products)
