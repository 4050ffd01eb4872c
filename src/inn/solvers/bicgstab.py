"""Batched BiCGSTAB (van der Vorst, 1992) for the linear systems inside Newton's method.

Solves ``A x = b`` for a batch of independent non-symmetric systems given only ``matvec(x)
= A x``. Every sample has its own scalars (rho, alpha, omega), its own convergence test and
its own result code; a sample that has converged or broken down stops changing while the
others go on (the matvec is still applied to the whole batch: one big product is cheaper
than gathering the active rows). The paper's solver treated the batch as one block-diagonal
system with one set of scalars; ``global_dots=True`` reproduces that.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from inn.solvers._common import ResultCode, batch_dot, batch_norm, bcast


@dataclass
class KrylovInfo:
    """Per-sample outcome of :func:`bicgstab` (CPU-free: tensors stay on the solve's device)."""

    iterations: Tensor  #: (B,) int, full BiCGSTAB iterations (a half step counts as one)
    residual: Tensor  #: (B,) ||b - A x|| as tracked by the recurrence
    code: Tensor  #: (B,) :class:`ResultCode` values
    matvecs: int  #: batched products with A


def bicgstab(
    matvec: Callable[[Tensor], Tensor],
    b: Tensor,
    x0: Tensor | None = None,
    rtol: float | Tensor = 1e-5,
    atol: float | Tensor = 0.0,
    maxiter: int = 40,
    global_dots: bool = False,
) -> tuple[Tensor, KrylovInfo]:
    """Solve ``A x = b`` batched over the leading dimension with BiCGSTAB.

    Args:
        matvec: ``x -> A x`` on tensors shaped like ``b``; samples must not interact.
        b: right-hand sides, (B, ...).
        x0: starting guess (default zero).
        rtol, atol: sample i has converged when ``||r_i|| <= max(rtol_i * ||b_i||, atol_i)``;
            either may be a (B,) tensor.
        maxiter: iteration limit (each iteration costs two products with A).
        global_dots: the paper's batching: inner products, step lengths and the convergence
            test are taken over the whole batch as one block-diagonal system.

    Returns:
        ``(x, info)``. ``info.code`` is CONVERGED, MAX_ITERATIONS, BREAKDOWN (a scalar of the
        recurrence vanished: detected, never divided through; ``x`` is the last iterate) or
        NONFINITE.
    """
    B = b.shape[0]
    eps = torch.finfo(b.dtype).eps
    if global_dots:

        def dot(u: Tensor, v: Tensor) -> Tensor:
            return batch_dot(u, v).sum().expand(B)

        def norm(u: Tensor) -> Tensor:
            return torch.linalg.vector_norm(u).expand(B)
    else:
        dot, norm = batch_dot, batch_norm

    x = torch.zeros_like(b) if x0 is None else x0.clone()
    matvecs = 0
    if x0 is None:
        r = b.clone()
    else:
        r = b - matvec(x)
        matvecs += 1
    rtol_t = torch.as_tensor(rtol, dtype=b.dtype, device=b.device)
    atol_t = torch.as_tensor(atol, dtype=b.dtype, device=b.device)
    threshold = torch.maximum(rtol_t * norm(b), atol_t).expand(B)

    r_hat = r.clone()
    rnorm = norm(r)
    rhat_norm = rnorm.clone()
    code = torch.full((B,), int(ResultCode.MAX_ITERATIONS), dtype=torch.int64, device=b.device)
    done = rnorm <= threshold
    code = torch.where(done, int(ResultCode.CONVERGED), code)
    iterations = torch.zeros(B, dtype=torch.int64, device=b.device)
    ones = torch.ones(B, dtype=b.dtype, device=b.device)
    rho_old, alpha, omega = ones.clone(), ones.clone(), ones.clone()
    p = torch.zeros_like(b)
    v = torch.zeros_like(b)

    def safe_div(num: Tensor, den: Tensor, ok: Tensor) -> Tensor:
        return torch.where(ok, num / torch.where(ok, den, torch.ones_like(den)), torch.zeros_like(num))

    for _ in range(maxiter):
        if bool(done.all()):
            break
        active = ~done
        rho = dot(r_hat, r)
        ok_rho = rho.abs() > eps * rhat_norm * rnorm
        ok_omega = omega != 0
        ok = ok_rho & ok_omega
        beta = safe_div(rho, rho_old, ok) * safe_div(alpha, omega, ok)
        p = torch.where(bcast(active & ok, p), r + bcast(beta, p) * (p - bcast(omega, v) * v), p)
        v_new = matvec(p)
        matvecs += 1
        rv = dot(r_hat, v_new)
        ok = ok & (rv.abs() > eps * rhat_norm * norm(v_new))
        alpha_new = safe_div(rho, rv, ok)
        s = r - bcast(alpha_new, r) * v_new
        snorm = norm(s)
        half = ok & (snorm <= threshold)  # converged at the half step: x += alpha p
        t = matvec(s)
        matvecs += 1
        tt = dot(t, t)
        ok_t = tt > 0
        omega_new = safe_div(dot(t, s), tt, ok_t)
        x_full = x + bcast(alpha_new, x) * p + bcast(omega_new, x) * s
        x_half = x + bcast(alpha_new, x) * p
        r_full = s - bcast(omega_new, s) * t
        x_new = torch.where(bcast(half, x), x_half, x_full)
        r_new = torch.where(bcast(half, r), s, r_full)
        rnorm_new = norm(r_new)
        finite = torch.isfinite(rnorm_new)
        # A sample moves only when it is active, nothing broke down and the result is finite.
        broke = active & (~ok | (~half & ~ok_t))
        bad = active & ~broke & ~finite
        move = active & ~broke & finite
        x = torch.where(bcast(move, x), x_new, x)
        r = torch.where(bcast(move, r), r_new, r)
        rnorm = torch.where(move, rnorm_new, rnorm)
        v = torch.where(bcast(move, v), v_new, v)
        alpha = torch.where(move, alpha_new, alpha)
        omega = torch.where(move, omega_new, omega)
        rho_old = torch.where(move, rho, rho_old)
        iterations = iterations + move.long()
        converged = move & (half | (rnorm <= threshold))
        code = torch.where(converged, int(ResultCode.CONVERGED), code)
        code = torch.where(broke, int(ResultCode.BREAKDOWN), code)
        code = torch.where(bad, int(ResultCode.NONFINITE), code)
        done = done | converged | broke | bad
    return x, KrylovInfo(iterations=iterations, residual=rnorm, code=code, matvecs=matvecs)
