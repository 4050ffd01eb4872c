"""Batched restarted GMRES (Saad and Schultz, 1986), right-preconditioned, for the adjoint.

Solves ``A x = b`` for a batch of independent non-symmetric systems given ``matvec(x) = A x``
and ``precondition(v) = M^{-1} v``: it minimises ``||b - A M^{-1} y||`` over the Krylov space
of ``A M^{-1}`` and returns ``x = M^{-1} y``. With the preconditioner on the right the residual
it minimises is ``A x``'s own, so its test is the true residual's. Every sample has its own
Arnoldi basis (classical Gram-Schmidt, done twice: float32 keeps the basis orthogonal), its own
Givens rotations and its own convergence test; a sample that has converged stops changing while
the others go on (with ``restrict``, finished samples leave the batch). Where Anderson with memory m
keeps m differences, GMRES keeps the whole Krylov space up to ``restart`` vectors and is optimal
in it: on systems whose preconditioned map has eigenvalues on every side of the unit circle it
needs fewer products.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from inn.solvers._anderson_state import COMPACT_AT
from inn.solvers._common import ResultCode, batch_norm, bcast
from inn.solvers.bicgstab import KrylovInfo

#: cycles in a row whose residual estimate met tol while the true residual stayed above it, after
#: which a sample stops (STALLED): its residual is at its precision's round-off, where more
#: restarts of a product or two only move it at random (float32 adjoints of nearly singular
#: systems; the layer's float64 fallback then solves them again)
FLOOR_CYCLES = 2


def gmres(
    matvec: Callable[[Tensor], Tensor],
    precondition: Callable[[Tensor], Tensor],
    b: Tensor,
    x0: Tensor | None = None,
    rtol: float = 1e-5,
    maxiter: int = 200,
    restart: int = 30,
    restrict: Callable[[Tensor], tuple[Callable[[Tensor], Tensor], Callable[[Tensor], Tensor]]] | None = None,
) -> tuple[Tensor, KrylovInfo]:
    """Solve ``A x = b`` batched over the leading dimension with right-preconditioned GMRES.

    Args:
        matvec: ``x -> A x`` on tensors shaped like ``b``; samples must not interact.
        precondition: ``v -> M^{-1} v`` likewise.
        b: right-hand sides, (B, ...).
        x0: starting guess (default zero, which costs no product).
        rtol: sample i has converged when ``||b_i - A x_i|| <= rtol ||b_i||``.
        maxiter: Arnoldi products with A per solve, over all restarts; each cycle adds one
            product of the whole batch for its true residual.
        restart: basis vectors kept before a restart (the true residual is formed then).
        restrict: ``rows -> (matvec, precondition)`` of the samples at ``rows`` (indices into
            the batch) alone. With it, whenever at most :data:`inn.solvers.anderson.COMPACT_AT`
            of the working samples still iterate, the finished ones take their result and the
            rest go on alone, each keeping its own basis: the same steps, at the cost of the
            samples that go on (compaction, as Anderson's).

    Returns:
        ``(x, info)``: ``info.iterations`` counts each sample's products until it converged or
        stopped, ``info.residual`` is ``||b - A x||`` from a final true product, ``info.code``
        CONVERGED, MAX_ITERATIONS, STALLED (:data:`FLOOR_CYCLES` cycles in a row ended with the
        estimate at tol and the true residual above it) or NONFINITE.
    """
    B, device = b.shape[0], b.device
    scale = batch_norm(b)
    x = torch.zeros_like(b) if x0 is None else x0.clone()
    r = b if x0 is None else b - matvec(x)
    products = 0 if x0 is None else 1
    arnoldi = 0
    iterations = torch.zeros(B, dtype=torch.int64, device=device)
    done = batch_norm(r) <= rtol * scale
    floored = torch.zeros(B, dtype=torch.int64, device=device)  # cycles in a row that ended on the floor
    stalled = torch.zeros(B, dtype=torch.bool, device=device)
    everyone = torch.arange(B, device=device)
    while arnoldi < maxiter and not bool((done | stalled).all()):
        m = min(restart, maxiter - arnoldi)
        rows, mv, pc = everyone, matvec, precondition
        going = (~(done | stalled)).nonzero().flatten()
        started = torch.zeros(B, dtype=torch.bool, device=device)
        started[going] = True
        if restrict is not None and going.numel() <= COMPACT_AT * B:
            rows = going
            mv, pc = restrict(rows)
        cycle = _Cycle(r[rows], scale[rows], started[rows], m)
        for j in range(m):
            w = mv(pc(cycle.V[:, j].view_as(r[rows]))).reshape(rows.numel(), -1)
            products += 1
            arnoldi += 1
            iterations[rows] += cycle.active.long()
            cycle.step(j, w, rtol)
            if not bool(cycle.active.any()):
                break
            if restrict is not None and int(cycle.active.sum()) <= COMPACT_AT * rows.numel():
                keep = cycle.active.nonzero().flatten()
                finished = cycle.active.logical_not().nonzero().flatten()
                x[rows[finished]] += pc(cycle.update(j + 1).view_as(r[rows]))[finished]
                cycle.select_(keep)
                rows = rows[keep]
                mv, pc = restrict(rows)
        x[rows] += pc(cycle.update(j + 1).view_as(r[rows]))
        ran_out = torch.zeros(B, dtype=torch.bool, device=device)
        ran_out[rows[cycle.active]] = True  # still above tol by its estimate when the cycle ended
        r = b - matvec(x)
        products += 1
        done = done | (batch_norm(r) <= rtol * scale)
        # the estimate met tol and the true residual did not: round-off, not the Krylov space
        floor = started & ~ran_out & ~done
        floored = torch.where(floor, floored + 1, torch.where(started, 0, floored))
        stalled = stalled | (floored >= FLOOR_CYCLES)
    residual = batch_norm(r)
    code = torch.full((B,), int(ResultCode.MAX_ITERATIONS), dtype=torch.int64, device=device)
    code = torch.where(stalled, int(ResultCode.STALLED), code)
    code = torch.where(residual <= rtol * scale, int(ResultCode.CONVERGED), code)
    code = torch.where(torch.isfinite(residual), code, int(ResultCode.NONFINITE))
    return x, KrylovInfo(iterations=iterations, residual=residual, code=code, matvecs=products)


class _Cycle:
    """One GMRES cycle of the working samples: each one's Arnoldi basis V, its Hessenberg
    matrix reduced by Givens rotations to R, the rotated right-hand side gamma, and how many
    basis vectors it uses (those added while it was still iterating)."""

    def __init__(self, r: Tensor, scale: Tensor, active: Tensor, m: int) -> None:
        B, dtype, device = r.shape[0], r.dtype, r.device
        self.tiny = torch.finfo(dtype).tiny
        beta = batch_norm(r)
        self.V = torch.zeros(B, m + 1, r[0].numel(), dtype=dtype, device=device)
        self.V[:, 0] = (r / bcast(beta.clamp_min(self.tiny), r)).reshape(B, -1)
        self.R = torch.zeros(B, m + 1, m, dtype=dtype, device=device)
        self.cs = torch.zeros(B, m, dtype=dtype, device=device)
        self.sn = torch.zeros(B, m, dtype=dtype, device=device)
        self.gamma = torch.zeros(B, m + 1, dtype=dtype, device=device)
        self.gamma[:, 0] = beta
        self.used = torch.zeros(B, dtype=torch.int64, device=device)
        self.scale, self.active = scale, active

    def step(self, j: int, w: Tensor, rtol: float) -> None:
        """Add A M^{-1} v_j (``w``, flattened) to the basis: orthogonalise it twice (classical
        Gram-Schmidt), rotate the new column, and test each sample's residual estimate."""
        basis = self.V[:, : j + 1]
        h = torch.einsum("bjn,bn->bj", basis, w)
        w = w - torch.einsum("bj,bjn->bn", h, basis)
        again = torch.einsum("bjn,bn->bj", basis, w)
        w = w - torch.einsum("bj,bjn->bn", again, basis)
        h = h + again
        norm = torch.linalg.vector_norm(w, dim=1)
        self.V[:, j + 1] = w / norm.clamp_min(self.tiny).unsqueeze(1)
        cs, sn = self.cs, self.sn
        for i in range(j):  # the earlier rotations, on the new column
            hi, hk = h[:, i].clone(), h[:, i + 1].clone()
            h[:, i], h[:, i + 1] = cs[:, i] * hi + sn[:, i] * hk, -sn[:, i] * hi + cs[:, i] * hk
        rho = torch.sqrt(h[:, j] ** 2 + norm**2).clamp_min(self.tiny)
        cs[:, j], sn[:, j] = h[:, j] / rho, norm / rho
        self.R[:, : j + 1, j] = h
        self.R[:, j, j] = rho
        self.gamma[:, j + 1] = -sn[:, j] * self.gamma[:, j]
        self.gamma[:, j] = cs[:, j] * self.gamma[:, j]
        self.used = torch.where(self.active, self.used + 1, self.used)
        estimate = self.gamma[:, j + 1].abs()
        self.active = self.active & (estimate > rtol * self.scale) & torch.isfinite(estimate)

    def update(self, k: int) -> Tensor:
        """V y, flattened, with R y = gamma over each sample's own first ``used`` of the ``k``
        columns so far (the rest: identity and 0, so a sample that used none gets 0)."""
        B, dtype, device = self.V.shape[0], self.V.dtype, self.V.device
        keep = torch.arange(k, device=device).unsqueeze(0) < self.used.unsqueeze(1)
        eye = torch.eye(k, dtype=dtype, device=device).expand(B, k, k)
        square = torch.where(keep.unsqueeze(1) & keep.unsqueeze(2), self.R[:, :k, :k], eye)
        rhs = torch.where(keep, self.gamma[:, :k], torch.zeros_like(self.gamma[:, :k]))
        y = torch.linalg.solve_triangular(square, rhs.unsqueeze(-1), upper=True).squeeze(-1)
        return torch.einsum("bj,bjn->bn", y, self.V[:, :k])

    def select_(self, keep: Tensor) -> None:
        """Go on with the samples at ``keep`` (indices into the working samples) alone."""
        for name in ("V", "R", "cs", "sn", "gamma", "used", "scale", "active"):
            setattr(self, name, getattr(self, name)[keep])
