"""Exact Newton steps through the block-tridiagonal structure of I - dF/dH.

Each h_t couples only to h_{t-1} and h_{t+1}, so the Newton system is block tridiagonal
with k x k blocks; the blocks are formed by the cell's linearisation (``blocks``)
and eliminated by a Thomas sweep (:mod:`inn.solvers.block_tridiagonal`). Few Newton steps,
each O(n k^3): dense work that suits a GPU; on a CPU Krylov is usually faster (measure with
``inn benchmark``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from inn.solvers._common import Counter, SolveResult
from inn.solvers._newton import newton_loop
from inn.solvers.block_tridiagonal import block_tridiagonal_solve


def newton_direct(
    system,
    H: Tensor,
    groups: int,
    counter: Counter,
    *,
    tol: float,
    max_iter: int,
    line_search: bool = True,
    max_backtracks: int = 6,
    divergence_factor: float = 1e4,
) -> SolveResult:
    """Newton with exact block-elimination linear solves; see :func:`inn.solvers.solve`."""

    def linear_step(lin, b: Tensor, eta: Tensor):
        dH = block_tridiagonal_solve(lin.blocks, b)
        return dH, torch.zeros(b.shape[0], dtype=torch.int64, device=b.device)

    return newton_loop(
        system,
        H,
        groups,
        counter,
        linear_step,
        tol=tol,
        max_iter=max_iter,
        line_search=line_search,
        max_backtracks=max_backtracks,
        forcing=0.0,
        divergence_factor=divergence_factor,
    )
