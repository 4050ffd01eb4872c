"""The Newton loop shared by ``newton_krylov`` and ``newton_direct`` (they differ in the linear step).

Per sequence: linearise at H, solve (I - J) dH = -G(H) approximately, take a step whose
length is found by backtracking on ||G|| (each sequence its own length, or one full step for
all in the paper's mode), stop the sequence when its relative residual is below ``tol``, when
another starting candidate of the same sequence has converged, or when it fails (NaN/Inf,
divergence, no acceptable step).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from inn.solvers._common import Counter, ResultCode, SolveResult, batch_norm, bcast, relative_residual

#: (linearization, rhs, inner relative tolerance per sample) -> (dH, inner iterations (B,))
LinearStep = Callable[[object, Tensor, Tensor], tuple[Tensor, Tensor]]


def group_any(flags: Tensor, groups: int) -> Tensor:
    """Candidates are stacked as (groups, B): True for every row whose sequence has a True."""
    return flags.view(groups, -1).any(0).repeat(groups)


def newton_loop(
    system,
    H: Tensor,
    groups: int,
    counter: Counter,
    linear_step: LinearStep,
    *,
    tol: float,
    max_iter: int,
    line_search: bool = True,
    max_backtracks: int = 6,
    forcing: str | float = "adaptive",
    divergence_factor: float = 1e4,
) -> SolveResult:
    """Run Newton's method; returns H with its Newton and inner iterations, residual and code.

    ``forcing``: the inner solve's relative tolerance; a float, or ``"adaptive"``
    (Eisenstat-Walker choice 2, never tighter than needed to reach ``tol`` in this step and
    never looser than 0.1): early steps are cheap, the last ones accurate.
    """
    CB = H.shape[0]
    dev = H.device
    lin = system.linearize(H)
    counter.f += 1
    G = H - lin.F
    gnorm = batch_norm(G)
    gnorm0 = gnorm.clone()
    res = relative_residual(G, H)
    newton_it = torch.zeros(CB, dtype=torch.int64, device=dev)
    inner_it = torch.zeros(CB, dtype=torch.int64, device=dev)
    code = torch.full((CB,), int(ResultCode.MAX_ITERATIONS), dtype=torch.int64, device=dev)
    failed = ~torch.isfinite(gnorm)  # res is +inf at H = 0 (float32), which is no failure
    code = torch.where(failed, int(ResultCode.NONFINITE), code)
    gnorm_prev = None
    for _ in range(max_iter):
        converged = (res <= tol) & ~failed
        done = group_any(converged, groups) | failed
        if bool(done.all()):
            break
        active = ~done
        if isinstance(forcing, str):
            need = 0.5 * tol / res.clamp_min(torch.finfo(H.dtype).tiny)  # enough to reach tol
            if gnorm_prev is None:
                eta = torch.full_like(res, 0.1)
            else:
                eta = 0.9 * (gnorm / gnorm_prev.clamp_min(torch.finfo(H.dtype).tiny)) ** 2
            eta = torch.maximum(eta.clamp(1e-6, 0.1), need.clamp(max=0.5))
        else:
            eta = torch.full_like(res, float(forcing))
        b = torch.where(bcast(active, G), -G, torch.zeros_like(G))
        dH, its = linear_step(lin, b, eta)
        inner_it = inner_it + its * active.long()
        newton_it = newton_it + active.long()

        lam = torch.ones(CB, dtype=H.dtype, device=dev)
        pending = active.clone()
        H_new, G_new, gnorm_new = H.clone(), G.clone(), gnorm.clone()
        lin_new = None
        for attempt in range(max_backtracks + 1 if line_search else 1):
            H_try = H + bcast(lam, H) * dH
            lin_try = system.linearize(H_try)
            counter.f += 1
            G_try = H_try - lin_try.F
            gn_try = batch_norm(G_try)
            finite = torch.isfinite(gn_try)
            if line_search:
                ok = finite & (gn_try <= (1 - 1e-4 * lam) * gnorm)
            else:
                ok = finite
            take = pending & ok
            H_new = torch.where(bcast(take, H), H_try, H_new)
            G_new = torch.where(bcast(take, G), G_try, G_new)
            gnorm_new = torch.where(take, gn_try, gnorm_new)
            if attempt == 0 and bool((ok | ~active).all()):
                lin_new = lin_try  # every sequence took the full step: reuse this linearisation
            pending = pending & ~ok
            if not bool(pending.any()):
                break
            lam = torch.where(pending, lam * 0.5, lam)
        # no acceptable step (or non-finite at every length): the sequence has failed
        stalled = pending
        code = torch.where(stalled & active & torch.isfinite(gnorm_new), int(ResultCode.STALLED), code)
        code = torch.where(stalled & active & ~finite, int(ResultCode.NONFINITE), code)
        failed = failed | stalled
        H, G, gnorm_prev, gnorm = H_new, G_new, gnorm, gnorm_new
        diverged = gnorm > divergence_factor * gnorm0.clamp_min(torch.finfo(H.dtype).tiny)
        code = torch.where(diverged & ~failed, int(ResultCode.DIVERGED), code)
        failed = failed | diverged
        res = relative_residual(G, H)
        if lin_new is None:
            lin = system.linearize(H)
            counter.f += 1
        else:
            lin = lin_new
    converged = (res <= tol) & ~failed
    code = torch.where(converged, int(ResultCode.CONVERGED), code)
    return SolveResult(H, newton_it, inner_it, res, code)
