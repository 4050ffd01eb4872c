"""Anderson acceleration of a fixed-point iteration, and plain (damped) iteration.

Anderson(m) extrapolates from the last m iterates: it picks weights alpha (summing to one)
minimising ||sum_i alpha_i (T(x_i) - x_i)||, per sequence, and steps to
beta * sum alpha_i T(x_i) + (1 - beta) * sum alpha_i x_i. One map evaluation per step, no
Jacobian. With m = 0 it is the damped iteration x <- (1 - beta) x + beta T(x).

The map T (``sweep``) has the same fixed points as F and costs one evaluation of the cell
per position: the exact tridiagonal step (default), a red-black sweep or F itself
(:data:`SWEEPS`, described with the mixed-precision first pass and the other options in
:mod:`inn.solvers._anderson_options`).

A sequence counts as converged when the true residual ||H - F(H)|| / ||H|| is below
``tol``. The tridiagonal step computes it on the way and reports it; for the red-black sweep,
whose own residual is only a proxy, it is checked with one F evaluation when the proxy says
so. The same iterations solve the adjoint system u = g + J^T u in the backward
pass (:data:`inn.solvers.ADJOINT_SOLVERS`).

CUDA graphs (``cuda_graph``, off by default): :class:`AndersonState` splits a step where the
eager loop syncs with the host, and :func:`anderson_chunked` runs fixed segments of steps
without that sync, which :mod:`inn.solvers.cuda_graph` captures and replays on a CUDA device
(on the CPU the same segments run as they are, and take the eager loop's steps exactly).
"""

from __future__ import annotations

import torch
from torch import Tensor

from inn.solvers import cuda_graph as graphs
from inn.solvers._anderson_loops import anderson_chunked as anderson_chunked
from inn.solvers._anderson_loops import anderson_iterate as anderson_iterate
from inn.solvers._anderson_options import (
    LOW_PRECISION_MAX_ITER,
    low_precision_version,
    sweep_map,
)
from inn.solvers._anderson_options import SWEEPS as SWEEPS
from inn.solvers._anderson_options import chunk_length as chunk_length
from inn.solvers._anderson_options import compaction_pays as compaction_pays
from inn.solvers._anderson_options import first_chunk_step as first_chunk_step
from inn.solvers._anderson_options import low_precision_pays as low_precision_pays
from inn.solvers._anderson_state import COMPACT_AT as COMPACT_AT
from inn.solvers._anderson_state import AndersonState as AndersonState
from inn.solvers._common import Counter, SolveResult, batch_norm, relative_residual


def anderson(
    system,
    H: Tensor,
    groups: int,
    counter: Counter,
    *,
    tol: float,
    max_iter: int,
    memory: int = 5,
    beta: float = 1.0,
    regularization: float = 1e-8,
    sweep: str = "tridiagonal",
    divergence_factor: float = 1e4,
    low_precision: bool | str = "auto",
    low_precision_tol: float = 3e-3,
    cuda_graph: bool | str = False,
    cuda_graph_steps: int = graphs.DEFAULT_STEPS,
    compact: bool | str = "auto",
) -> SolveResult:
    """Anderson acceleration of H <- T(H), T one of :data:`SWEEPS`; see :func:`inn.solvers.solve`.

    Mixed precision (``low_precision``: True, False or ``"auto"``, see
    :func:`low_precision_pays`): first iterate on the system with bfloat16 matrix products
    (:meth:`inn.nn.system.ImplicitSystem.low_precision`) down to ``low_precision_tol``, then
    on the float32 system from there down to ``tol``. The answer and its test are float32's;
    only the iterations that get close are cheaper.

    CUDA graphs (``cuda_graph``: True, False or ``"auto"``, see
    :func:`inn.solvers.cuda_graph.use`): the (final-precision) solve in captured segments of
    ``cuda_graph_steps`` steps (:func:`anderson_chunked`), one host sync per segment; the
    bfloat16 first pass runs eagerly. Not for the red-black sweep, whose true-residual checks
    sync with the host.

    Compaction (``compact``: True, False or ``"auto"``, see :func:`compaction_pays`): the
    sequences that are done leave the batch (:meth:`AndersonState.run`), in the eager loop.
    """
    kwargs = dict(
        groups=groups,
        memory=memory,
        beta=beta,
        regularization=regularization,
        divergence_factor=divergence_factor,
        compact=compaction_pays(H.device, compact) and groups == 1,
    )
    graphs.check_steps(cuda_graph_steps)
    obstacle = "the red_black sweep checks its true residual on the host" if sweep == "red_black" else None
    if not system.graphable:
        obstacle = "the cell has no split-off projection and analytic linearisation to capture"
    graph_steps = cuda_graph_steps if graphs.use(cuda_graph, H.device, obstacle) else 0
    low = low_precision_version(system, H, low_precision, tol, low_precision_tol)
    its_low = 0
    if low is not None:  # at most LOW_PRECISION_MAX_ITER steps: bfloat16 stalls near 1e-3
        H, its_low, _, _, evals, checks = _iterate(
            low, H, sweep, tol=low_precision_tol, max_iter=min(max_iter, LOW_PRECISION_MAX_ITER), **kwargs
        )
        counter.f += evals + checks
    H, its, res, code, evals, checks = _iterate(
        system, H, sweep, tol=tol, max_iter=max_iter, graph_steps=graph_steps, **kwargs
    )
    counter.f += evals + checks
    its = its + its_low
    return SolveResult(H, its, torch.zeros_like(its), res, code)


def _iterate(
    system, H: Tensor, sweep: str, *, tol: float, max_iter: int, graph_steps: int = 0, compact: bool = False, **kwargs
):
    """Anderson on ``system`` with the map of ``sweep``; ``graph_steps``: in captured segments
    of that many steps (:func:`anderson_chunked`), 0 for the eager loop, which drops the
    sequences that are done from the batch when ``compact``."""
    fmap = sweep_map(system, sweep)
    # the tridiagonal step from H = 0 needs no matrix products (the cell's step_from_zero, if any)
    from_zero = sweep == "tridiagonal" and not bool(H.any())
    first = system.step_from_zero() if from_zero else None
    if graph_steps:
        return anderson_chunked(
            lambda sy: (sweep_map(sy, sweep), batch_norm),
            system,
            H,
            tol=tol,
            max_iter=max_iter,
            first=first,
            steps=graph_steps,
            kind=f"forward {sweep}",
            **kwargs,
        )

    def checker(sy):
        return None if sweep == "jacobi" else (lambda x: relative_residual(x - sy.F(x), x))

    def restrict(rows: Tensor):
        sub = system.select(rows)
        return sweep_map(sub, sweep), batch_norm, checker(sub)

    return anderson_iterate(
        fmap,
        H,
        batch_norm,
        tol=tol,
        max_iter=max_iter,
        true_residual=checker(system),
        first=first,
        restrict=restrict if compact else None,
        **kwargs,
    )


def fixed_point(
    system,
    H: Tensor,
    groups: int,
    counter: Counter,
    *,
    tol: float,
    max_iter: int,
    beta: float = 1.0,
    sweep: str = "jacobi",
    divergence_factor: float = 1e4,
) -> SolveResult:
    """Plain (damped) iteration H <- (1 - beta) H + beta T(H): Anderson with no memory."""
    return anderson(
        system,
        H,
        groups,
        counter,
        tol=tol,
        max_iter=max_iter,
        memory=0,
        beta=beta,
        sweep=sweep,
        divergence_factor=divergence_factor,
        low_precision=False,
    )
