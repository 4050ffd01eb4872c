"""Anderson acceleration of the fixed-point iteration H <- F(H), and plain (damped) iteration.

Anderson(m) extrapolates from the last m iterates: it picks weights alpha (summing to one)
minimising ||sum_i alpha_i (F(x_i) - x_i)||, per sequence, and steps to
beta * sum alpha_i F(x_i) + (1 - beta) * sum alpha_i x_i. One F evaluation per step, no
Jacobian. With m = 0 it is the damped fixed-point iteration x <- (1 - beta) x + beta F(x).
The same iteration also solves the adjoint system u = g + J^T u in the backward pass.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from inn.solvers._common import Counter, ResultCode, batch_norm, bcast
from inn.solvers._newton import group_any

OPTIONS = {"memory": 5, "beta": 1.0, "regularization": 1e-8, "divergence_factor": 1e4}
FIXED_POINT_OPTIONS = {"beta": 1.0, "divergence_factor": 1e4}


def anderson_iterate(
    fmap: Callable[[Tensor], Tensor],
    x: Tensor,
    scale: Callable[[Tensor], Tensor],
    *,
    tol: float,
    max_iter: int,
    groups: int = 1,
    memory: int = 5,
    beta: float = 1.0,
    regularization: float = 1e-8,
    divergence_factor: float = 1e4,
) -> tuple[Tensor, Tensor, Tensor, Tensor, int]:
    """Iterate x <- fmap(x) with Anderson(memory) until ||fmap(x) - x|| / scale(x) <= tol.

    Returns (x, iterations, relative residual, code, fmap evaluations), per sample; each sample
    keeps the iterate with the lowest residual seen and stops when done.
    """
    B = x.shape[0]
    dev, dt = x.device, x.dtype
    flat = lambda t: t.reshape(B, -1)  # noqa: E731
    tiny = torch.finfo(dt).tiny
    X_hist: list[Tensor] = []
    G_hist: list[Tensor] = []
    F_hist: list[Tensor] = []
    best_x = x.clone()
    best_res = torch.full((B,), float("inf"), dtype=dt, device=dev)
    iterations = torch.zeros(B, dtype=torch.int64, device=dev)
    code = torch.full((B,), int(ResultCode.MAX_ITERATIONS), dtype=torch.int64, device=dev)
    failed = torch.zeros(B, dtype=torch.bool, device=dev)
    evals = 0
    res0 = None
    for it in range(max_iter + 1):
        fx = fmap(x)
        evals += 1
        g = fx - x
        res = batch_norm(g) / scale(x).clamp_min(tiny)
        if res0 is None:
            res0 = res.clone()
        finite = torch.isfinite(res)
        done_before = group_any((best_res <= tol) & ~failed, groups) | failed
        improve = ~done_before & finite & (res < best_res)
        best_x = torch.where(bcast(improve, x), x, best_x)
        best_res = torch.where(improve, res, best_res)
        bad = ~done_before & ~finite
        diverged = ~done_before & finite & (res > divergence_factor * res0.clamp_min(tiny))
        code = torch.where(bad, int(ResultCode.NONFINITE), code)
        code = torch.where(diverged, int(ResultCode.DIVERGED), code)
        failed = failed | bad | diverged
        done = group_any((best_res <= tol) & ~failed, groups) | failed
        if bool(done.all()) or it == max_iter:
            break
        iterations = iterations + (~done).long()
        if memory <= 0:
            x_next = x + beta * g
        else:
            X_hist.append(flat(x))
            G_hist.append(flat(g))
            F_hist.append(flat(fx))
            if len(X_hist) > memory:
                X_hist.pop(0), G_hist.pop(0), F_hist.pop(0)
            m = len(G_hist)
            Gm = torch.stack(G_hist, 1)  # (B, m, N)
            gram = Gm @ Gm.mT  # (B, m, m)
            diag = torch.diagonal(gram, dim1=-2, dim2=-1).mean(-1).clamp_min(tiny)
            gram = gram + regularization * diag.view(B, 1, 1) * torch.eye(m, dtype=dt, device=dev)
            # minimise alpha^T gram alpha subject to sum(alpha) = 1: alpha ~ gram^{-1} 1
            ones = torch.ones(B, m, 1, dtype=dt, device=dev)
            sol = torch.linalg.solve(gram, ones)
            alpha = sol / sol.sum(1, keepdim=True)
            alpha = torch.where(torch.isfinite(alpha).all(1, keepdim=True), alpha,
                                torch.nn.functional.one_hot(torch.full((B,), m - 1, device=dev), m).to(dt).unsqueeze(-1))
            Fm = torch.stack(F_hist, 1)
            Xm = torch.stack(X_hist, 1)
            x_next = (beta * (alpha.mT @ Fm) + (1 - beta) * (alpha.mT @ Xm)).reshape(x.shape)
        # finished or failed samples stop moving (their rows cost a little, but stay put)
        x = torch.where(bcast(done, x), best_x, x_next)
        x = torch.where(torch.isfinite(x), x, torch.zeros_like(x))
    converged = (best_res <= tol) & ~failed
    code = torch.where(converged, int(ResultCode.CONVERGED), code)
    return best_x, iterations, best_res, code, evals


def _relative_to_iterate(system) -> Callable[[Tensor], Tensor]:
    return lambda x: batch_norm(x)


def anderson(system, H: Tensor, groups: int, counter: Counter, *, tol: float, max_iter: int,
             memory: int = 5, beta: float = 1.0, regularization: float = 1e-8, divergence_factor: float = 1e4):
    """Anderson acceleration of H <- F(H); see :func:`inn.solvers.solve`."""
    H, its, res, code, evals = anderson_iterate(
        system.F, H, batch_norm, tol=tol, max_iter=max_iter, groups=groups, memory=memory, beta=beta,
        regularization=regularization, divergence_factor=divergence_factor,
    )
    counter.f += evals
    return H, its, torch.zeros_like(its), res, code


def fixed_point(system, H: Tensor, groups: int, counter: Counter, *, tol: float, max_iter: int,
                beta: float = 1.0, divergence_factor: float = 1e4):
    """Plain (damped) iteration H <- (1 - beta) H + beta F(H): Anderson with no memory."""
    return anderson(system, H, groups, counter, tol=tol, max_iter=max_iter, memory=0, beta=beta,
                    divergence_factor=divergence_factor)
