"""The paper's solver: Newton's method with BiCGSTAB on (I - dF/dH) dH = -G (section 2.3, 2.6).

Only Jacobian-vector products are needed; they come from the system's analytic
linearisation (five k x k products per position, the cost of one F evaluation).
``PAPER_OPTIONS`` reproduce the paper's batching: one block-diagonal system with global
BiCGSTAB scalars, full Newton steps, 40/40 limits, random and one-step candidates.
"""

from __future__ import annotations

from torch import Tensor

from inn.solvers._common import Counter, SolveResult
from inn.solvers._newton import newton_loop
from inn.solvers.bicgstab import bicgstab

#: the paper's method, as faithfully as it is described (forcing is not given there)
PAPER_OPTIONS = {
    "candidates": ("random", "one_step"),
    "candidate_mode": "parallel",
    "max_iter": 40,
    "krylov_max_iter": 40,
    "forcing": 1e-3,
    "line_search": False,
    "global_dots": True,
}


def newton_krylov(
    system,
    H: Tensor,
    groups: int,
    counter: Counter,
    *,
    tol: float,
    max_iter: int,
    krylov_max_iter: int = 40,
    forcing: str | float = "adaptive",
    line_search: bool = True,
    max_backtracks: int = 6,
    global_dots: bool = False,
    divergence_factor: float = 1e4,
) -> SolveResult:
    """Newton-Krylov on the stacked candidates; see :func:`inn.solvers.solve`."""

    def linear_step(lin, b: Tensor, eta: Tensor):
        dH, info = bicgstab(lambda V: V - lin.jvp(V), b, rtol=eta, maxiter=krylov_max_iter, global_dots=global_dots)
        counter.jp += info.matvecs
        return dH, info.iterations

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
        forcing=forcing,
        divergence_factor=divergence_factor,
    )
