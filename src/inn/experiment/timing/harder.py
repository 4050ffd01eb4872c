"""Trained-like weights for ``inn benchmark``: a fresh layer's recurrent matrices scaled until
dF/dH at the solution has a given spectral radius (the ``harder<c>`` weight sets).

Training grows the recurrent weights, so real systems are harder than fresh ones; the spectral
radius of dF/dH is the contraction factor of plain fixed-point iteration, the one number a
weight set's difficulty is described by.
"""

from __future__ import annotations

import logging
import math
import warnings

import torch

from inn.solvers import ConvergenceWarning

log = logging.getLogger(__name__)


#: the recurrent matrices of the implicit GRU and LSTM, what ``harder`` weight sets scale (of
#: a layer with none of them, a cell of one's own: all its matrices)
RECURRENT = ("weight_pn", "weight_zr", "weight_c", "weight_gates")


def jacobian_radius(layer, xi: torch.Tensor, mask: torch.Tensor, iterations: int = 60) -> float:
    """Spectral radius of dF/dH at the solution (the hardest sequence of the batch), by power
    iteration with analytic J V products. It is the asymptotic contraction factor of plain
    fixed-point iteration: the number "trained-like" systems (``--harder``) are described by."""
    from inn.solvers import solve

    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        system = layer.system(xi, mask)
        H, stats = solve(system, "anderson", tol=1e-5, max_iter=300, candidates=("F0",))
        if not bool(stats.converged.all()):
            return math.inf  # too hard to even solve: certainly past any target radius
        lin = system.linearize(H)
        v = torch.randn(H.shape, generator=torch.Generator().manual_seed(1), dtype=H.dtype).to(H.device)
        v = v * system.maskf
        v = v / v.norm()
        logs = []
        for i in range(iterations):
            w = lin.jvp(v)
            norm = w.norm()
            if not torch.isfinite(norm) or norm == 0:
                return float(norm)
            if i >= iterations // 2:
                logs.append(math.log(float(norm)))
            v = w / norm
    return math.exp(sum(logs) / len(logs))


def make_harder(layer, xi: torch.Tensor, mask: torch.Tensor, contraction: float, steps: int = 10) -> float:
    """Scale the recurrent matrices (:data:`RECURRENT`, all by one factor) until dF/dH at
    the solution has spectral radius ``contraction`` (bisection in log space); returns the
    factor used."""
    params = dict(layer.named_parameters())
    base = {name: p.detach().clone() for name, p in params.items() if name in RECURRENT}
    base = base or {name: p.detach().clone() for name, p in params.items() if p.dim() >= 2}

    def apply(factor: float) -> float:
        with torch.no_grad():
            for name, value in base.items():
                params[name].copy_(value * factor)
        return jacobian_radius(layer, xi, mask)

    lo, hi = 0.5, 8.0
    for _ in range(steps):
        mid = math.sqrt(lo * hi)
        rho = apply(mid)
        if math.isfinite(rho) and rho < contraction:
            lo = mid
        else:
            hi = mid
    rho = apply(lo)
    log.info(
        "harder weights: recurrent matrices x %.3f -> spectral radius of dF/dH %.3f (target %.3f)", lo, rho, contraction
    )
    return lo
