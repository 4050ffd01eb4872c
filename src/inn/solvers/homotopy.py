"""The fixed point that every local solver misses, found by a probability-one homotopy.

The implicit GRU's F maps the box |h| <= b (b from the boundary states and 1) into itself:
each h_t is a convex mix of its neighbours and a tanh. By Brouwer's theorem H = F(H) then has
a solution in the box for every input. Training can still make it unreachable from where
Anderson and Newton start: a trained walks INN has sequences on which every local solver,
float32 or float64, stalls at a relative residual of about 2e-3, near where a branch of
solutions folds away (a local minimum of ||H - F(H)|| that is no root), while the solution
lies elsewhere in the box.

The homotopy of Chow, Mallet-Paret and Yorke (1978) reaches it:

    rho(lam, H) = H - lam F(H) - (1 - lam) a,   a a random point inside the box.

At lam = 0 its root is H = a; every root with lam < 1 is a convex mix of F(H) and a, so in the
box; and for almost every a the roots form one smooth curve from (0, a) to a fixed point at
lam = 1, without bifurcations, that may turn back in lam (folds) but never ends. Tracking it by
arclength, not by lam, passes the folds where continuation in lam (or any local solver) stops.

Each step: an Euler predictor along the curve's tangent, then Newton corrections in the plane
orthogonal to it. Both need solves with the N x (N + 1) Jacobian [I - lam J, a - F(H)]; the
block I - lam J is block tridiagonal (:class:`inn.solvers.block_tridiagonal.BlockTridiagonalLU`),
and the extra column and row are eliminated by bordering (two right-hand sides per
factorisation). At lam >= 1 the point is interpolated back to lam = 1 and finished by Newton on
H = F(H). Everything runs in the system's dtype (float64 for the fallback).

Cost: one factorisation per corrector step, O(n k^3); on the trained walks INN (k = 200, n =
40) 20-30 path steps and 4-6 CPU seconds per sequence on one thread, against about 0.01 s for
a converging Anderson solve. Hence a fallback for the few sequences that everything else
leaves above tol (``fallback: "homotopy"`` of :func:`inn.solvers.solve`), one sequence at a
time: each follows its own curve with its own step lengths.
"""

from __future__ import annotations

import logging

import torch
from torch import Tensor

from inn.solvers._common import Counter, ResultCode, batch_dot, batch_norm, relative_residual
from inn.solvers.block_tridiagonal import BlockTridiagonalLU, SingularBlockError

log = logging.getLogger(__name__)


def homotopy_solve(
    system,
    a: Tensor,
    counter: Counter,
    *,
    tol: float,
    max_steps: int = 400,
    step: float = 0.1,
    max_step: float = 16.0,
    corrector_iter: int = 6,
) -> tuple[Tensor, int, float, int]:
    """Track the homotopy of one sequence (``system`` of batch 1) from ``a`` to a fixed point.

    Args:
        system: a :class:`inn.solvers.FixedPointSystem` of one sequence whose linearisation
            gives its Jacobian blocks (``blocks``).
        a: the start, (1, n, K), inside the box (zero at padding).
        counter: counts F evaluations (one per linearisation).
        tol: the relative residual ||H - F(H)|| / ||H|| the final Newton steps reach.
        max_steps: path steps before giving up; ``step`` the first step's arclength,
            ``max_step`` the longest (in the norm of (lam, H)); ``corrector_iter`` Newton
            corrections per step before the step is halved.

    Returns:
        (H, path steps, relative residual, :class:`ResultCode` value).
    """
    n = system.shape[1]
    one = torch.ones(1, dtype=a.dtype, device=a.device)
    lam, H = torch.zeros_like(one), a.clone()
    lin = system.linearize(H)
    counter.f += 1
    w0 = BlockTridiagonalLU(lin.blocks, n, lam).solve(a - lin.F)
    t_lam, t_H = _tangent(w0, None, None)  # at lam = 0, A = I: the tangent (1, F(a) - a)
    h, steps = step, 0
    while steps < max_steps:
        steps += 1
        result = _corrected(system, a, counter, lam + h * t_lam, H + h * t_H, t_lam, t_H, h, corrector_iter)
        if result is None:
            h /= 2
            if h < 1e-10:
                break
            continue
        lam_c, H_c, w, its = result
        if float(lam_c) >= 1:  # crossed lam = 1: back to it along the chord, then Newton on H = F(H)
            s = (1 - lam) / (lam_c - lam)
            return _finish(system, H + s * (H_c - H), counter, tol, n, steps)
        t_lam, t_H = _tangent(w, t_lam, t_H)
        lam, H = lam_c, H_c
        h = min(max_step, h * 1.5) if its <= 3 else h
    res = _residual(system, H, counter)
    code = ResultCode.MAX_ITERATIONS if steps >= max_steps else ResultCode.STALLED
    log.debug("homotopy stopped at lam %.4f after %d steps", float(lam), steps)
    return H, steps, res, int(code)


def _corrected(
    system,
    a: Tensor,
    counter: Counter,
    lam_p: Tensor,
    H_p: Tensor,
    t_lam: Tensor,
    t_H: Tensor,
    h: float,
    corrector_iter: int,
) -> tuple[Tensor, Tensor, Tensor, int] | None:
    """Newton on rho = 0 within the plane through the prediction (lam_p, H_p), a step of
    arclength ``h`` along the tangent (t_lam, t_H), orthogonal to it; returns (lam, H,
    A^{-1} (a - F(H)) at the last linearisation, corrections) or None when the corrections
    do not settle within ``corrector_iter`` (the step was too long)."""
    n = system.shape[1]
    lam_c, H_c = lam_p, H_p
    for it in range(corrector_iter):
        lin = system.linearize(H_c)
        counter.f += 1
        rho = H_c - lam_c * lin.F - (1 - lam_c) * a
        f = a - lin.F
        try:
            both = BlockTridiagonalLU(lin.blocks, n, lam_c).solve(torch.stack([rho, f], -1))
        except SingularBlockError:  # a singular I - lam J off the curve: a shorter step avoids it
            return None
        p, w = both[..., 0], both[..., 1]
        off_plane = t_lam * (lam_c - lam_p) + batch_dot(t_H, H_c - H_p)
        d_lam = (batch_dot(t_H, p) - off_plane) / (t_lam - batch_dot(t_H, w))
        d_H = -p - d_lam * w
        lam_c, H_c = lam_c + d_lam, H_c + d_H
        moved = float(torch.sqrt(d_lam**2 + batch_dot(d_H, d_H)))
        if not torch.isfinite(torch.as_tensor(moved)):
            return None
        if moved <= 1e-9 * (1 + float(batch_norm(H_c))):
            return lam_c, H_c, w, it + 1
        if it and moved > 0.5 * h:  # not contracting: the step was too long
            return None
    return None


def _tangent(w: Tensor, t_lam: Tensor | None, t_H: Tensor | None) -> tuple[Tensor, Tensor]:
    """The unit tangent (1, -A^{-1} f) / norm, oriented along the previous one."""
    norm = torch.sqrt(1 + batch_dot(w, w))
    n_lam, n_H = 1 / norm, -w / norm
    if t_lam is not None and float(n_lam * t_lam + batch_dot(n_H, t_H)) < 0:
        n_lam, n_H = -n_lam, -n_H
    return n_lam, n_H


def _finish(system, H: Tensor, counter: Counter, tol: float, n: int, steps: int, newton_iter: int = 20):
    """Newton on H = F(H) from a point of the curve at lam = 1, to well below ``tol`` where the
    precision allows (near a fold a residual of tol leaves the state about 10 tol off; the
    last Newton steps, quadratic, cost one factorisation each)."""
    one = torch.ones(1, dtype=H.dtype, device=H.device)
    target = min(tol, max(tol * 1e-4, 1e3 * torch.finfo(H.dtype).eps))
    for _ in range(newton_iter):
        lin = system.linearize(H)
        counter.f += 1
        G = H - lin.F
        res = float(relative_residual(G, H))
        if res <= target:
            return H, steps, res, int(ResultCode.CONVERGED)
        try:
            H = H - BlockTridiagonalLU(lin.blocks, n, one).solve(G)
        except SingularBlockError:  # I - J singular at H: Newton cannot go on; H as it is
            break
    res = _residual(system, H, counter)
    return H, steps, res, int(ResultCode.CONVERGED if res <= tol else ResultCode.STALLED)


def _residual(system, H: Tensor, counter: Counter) -> float:
    counter.f += 1
    return float(relative_residual(H - system.F(H), H))
