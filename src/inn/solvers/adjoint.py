"""The adjoint solvers of the implicit backward pass: (I - J^T) u = g, J = dF/dH at the solution.

Exact adjoints (:data:`ADJOINT_SOLVERS`) solve it to a tolerance; approximate ones
(:data:`APPROXIMATE_ADJOINTS`) trade gradient accuracy for time. :mod:`inn.nn.implicit_function`
runs them with the layer's ``backward_*`` options, whose records are :data:`BACKWARD_OPTIONS`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from inn.solvers import anderson as _anderson  # anderson_chunked: looked up there, where tests replace it
from inn.solvers import cuda_graph as _graphs
from inn.solvers._anderson_loops import anderson_iterate
from inn.solvers._anderson_options import LOW_PRECISION_MAX_ITER, low_precision_version
from inn.solvers._common import ResultCode, SolveResult, SolverStats, batch_norm, bcast
from inn.solvers._registry import AdjointSpec, SolverOption
from inn.solvers.bicgstab import bicgstab
from inn.solvers.block_tridiagonal import block_tridiagonal_solve_transposed
from inn.solvers.gmres import gmres
from inn.solvers.tridiagonal import Tridiagonal

# --------------------------------------------------------------------------- exact adjoints
# (lin, g, *, tol, max_iter, u0, **options) -> (u, stats): solve (I - J^T) u = g to tol;
# ``u0``: a starting point (a warm start, e.g. the same sentence's adjoint in the previous
# epoch), None for the solver's own.


def _stats(name: str, result: SolveResult, products: int) -> SolverStats:
    """An adjoint's stats: one linearisation (counted as one evaluation of F), ``products``
    J^T products."""
    return result.stats(name, function_evals=1, jacobian_products=products)


def _adjoint_bicgstab(lin, g: Tensor, *, tol: float, max_iter: int, u0: Tensor | None = None):
    u, info = bicgstab(lambda V: V - lin.vjp(V), g, x0=g if u0 is None else u0, rtol=tol, maxiter=max_iter)
    gn = batch_norm(g).clamp_min(torch.finfo(g.dtype).tiny)
    res = torch.where(batch_norm(g) > 0, info.residual / gn, torch.zeros_like(gn))
    code = torch.where(res <= tol, int(ResultCode.CONVERGED), info.code)
    zeros = torch.zeros_like(info.iterations)
    return u, _stats("bicgstab", SolveResult(u, zeros, info.iterations, res, code), info.matvecs)


def _adjoint_gmres(
    lin,
    g: Tensor,
    *,
    tol: float,
    max_iter: int,
    restart: int = 30,
    u0: Tensor | None = None,
    select: Callable[[Tensor], Any] | None = None,
):
    """GMRES on (I - J^T) u = g, preconditioned on the right by the tridiagonal I - D^T (the
    same factorisation Anderson's step uses): :func:`inn.solvers.gmres.gmres`. Its iterations
    are J^T products; each cycle costs one more, for the true residual. ``select``: ``rows ->
    the linearisation of those sequences alone``; with it the sequences that are done leave the
    batch (compaction, as the Anderson adjoint's)."""

    def restrict(rows: Tensor):
        sub = select(rows)
        return (lambda V: V - sub.vjp(V)), copy_inverse(sub).solve

    u, info = gmres(
        lambda V: V - lin.vjp(V),
        copy_inverse(lin).solve,
        g,
        x0=u0,
        rtol=tol,
        maxiter=max_iter,
        restart=restart,
        restrict=restrict if select is not None else None,
    )
    scale = batch_norm(g)
    res = torch.where(scale > 0, info.residual / scale.clamp_min(torch.finfo(g.dtype).tiny), torch.zeros_like(scale))
    return u, _stats(
        "gmres", SolveResult(u, info.iterations, torch.zeros_like(info.iterations), res, info.code), info.matvecs
    )


class _NoCoupling:
    """I - D^T for a cell with no elementwise coupling (D = 0): the identity."""

    @staticmethod
    def solve(b: Tensor) -> Tensor:
        return b


def copy_inverse(lin) -> Tridiagonal | _NoCoupling:
    """I - D^T factorised, D the linearisation's elementwise copy coupling (``lin.copy``):
    the adjoint's preconditioner; the identity where the cell has no coupling."""
    return _NoCoupling() if lin.copy is None else Tridiagonal.transposed(*lin.copy)


def _adjoint_step(vjp, g: Tensor, copy: Tridiagonal | _NoCoupling, scale: Tensor):
    """The tridiagonal adjoint step u -> u + (I - D^T)^{-1} r, r = g + J^T u - u, with ``copy``
    the factorised I - D^T; it reports ||r|| / ``scale``, u's true residual, as Anderson's test."""
    tiny = torch.finfo(g.dtype).tiny

    def fmap(u: Tensor) -> tuple[Tensor, Tensor]:
        r = g + vjp(u) - u
        return u + copy.solve(r), batch_norm(r) / scale.clamp_min(tiny)

    return fmap


def _adjoint_segment_map(inputs: tuple[Any, Tensor]):
    """(map, scale) of the tridiagonal adjoint from (linearisation, g), as each segment of a
    chunked solve builds them (:func:`inn.solvers.anderson.anderson_chunked`): D is factorised
    in the segment, so that a captured segment reads only the linearisation's tensors and g."""
    lin, g = inputs
    scale = batch_norm(g)
    return _adjoint_step(lin.vjp, g, copy_inverse(lin), scale), lambda u: scale


def _adjoint_anderson(
    lin,
    g: Tensor,
    *,
    tol: float,
    max_iter: int,
    memory: int = 5,
    sweep: str = "tridiagonal",
    low_precision: bool | str = "auto",
    low_precision_tol: float = 3e-3,
    u0: Tensor | None = None,
    cuda_graph: bool | str = False,
    cuda_graph_steps: int = _graphs.DEFAULT_STEPS,
    select: Callable[[Tensor], Any] | None = None,
):
    """Anderson on the adjoint u = g + J^T u; ``cuda_graph``: the (final-precision) tridiagonal
    solve in captured segments, as the forward's (:func:`inn.solvers.anderson.anderson`).
    ``select``: ``rows -> the linearisation of those sequences alone``; with it the eager
    tridiagonal solve drops the sequences that are done from the batch (the forward's
    ``compact``), each compaction costing one cell evaluation of the sequences that go on."""
    graphed = _adjoint_graphed(lin, g, sweep, cuda_graph, cuda_graph_steps)
    scale = batch_norm(g)
    tiny = torch.finfo(g.dtype).tiny
    true_residual = lambda u: batch_norm(u - lin.vjp(u) - g) / scale.clamp_min(tiny)  # noqa: E731
    its_low = low_evals = 0
    if sweep == "tridiagonal":
        fmap, u0, its_low, low_evals = _tridiagonal_adjoint_start(
            lin, g, scale, u0, tol, max_iter, memory, low_precision, low_precision_tol, select
        )
    elif sweep == "red_black":
        fmap, u0 = (lambda u: lin.adjoint_sweep(u, g)), g if u0 is None else u0
    else:
        fmap, u0, true_residual = (lambda u: g + lin.vjp(u)), g if u0 is None else u0, None
    if graphed:
        u, its, res, code, evals, checks = _anderson.anderson_chunked(
            _adjoint_segment_map,
            (lin, g),
            u0,
            tol=tol,
            max_iter=max_iter,
            memory=memory,
            steps=cuda_graph_steps,
            kind="adjoint tridiagonal",
        )
    else:
        restrict = _adjoint_restrict(select, g, scale) if select is not None and sweep == "tridiagonal" else None
        u, its, res, code, evals, checks = anderson_iterate(
            fmap,
            u0,
            lambda u: scale,
            tol=tol,
            max_iter=max_iter,
            memory=memory,
            true_residual=true_residual,
            restrict=restrict,
        )
    its = its + its_low
    res = torch.where(scale > 0, res, torch.zeros_like(res))
    code = torch.where((scale == 0) | (code == int(ResultCode.CONVERGED)), int(ResultCode.CONVERGED), code)
    name = ("anderson" if memory else "fixed_point") + ("" if sweep == "jacobi" else f"_{sweep}")
    # J^T products: both passes' (bfloat16 ones too, as the forward counts its bfloat16 F)
    return u, _stats(name, SolveResult(u, its, torch.zeros_like(its), res, code), low_evals + evals + checks)


def _adjoint_graphed(lin, g: Tensor, sweep: str, cuda_graph: bool | str, cuda_graph_steps: int) -> bool:
    """Whether the adjoint runs in captured segments: only the tridiagonal sweep of a cell with
    an analytic linearisation is captured (:func:`inn.solvers.cuda_graph.use`)."""
    _graphs.check_steps(cuda_graph_steps)
    obstacle = None if sweep == "tridiagonal" else f"the {sweep} adjoint is not captured"
    if not lin.system.graphable:
        obstacle = "the cell has no analytic linearisation to capture"
    return _graphs.use(cuda_graph, g.device, obstacle)


def _tridiagonal_adjoint_start(
    lin,
    g: Tensor,
    scale: Tensor,
    start: Tensor | None,
    tol: float,
    max_iter: int,
    memory: int,
    low_precision: bool | str,
    low_precision_tol: float,
    select: Callable[[Tensor], Any] | None,
) -> tuple[Callable, Tensor, Any, int]:
    """The tridiagonal adjoint's map u -> u + (I - D^T)^{-1} (g + J^T u - u), D factorised once,
    and where it starts: the step from u = 0 (where J^T u costs nothing) or, per sequence, the
    warm start ``start`` where that is the closer one; then, with mixed precision, a bfloat16
    pass down to ``low_precision_tol`` (as the forward's, :func:`inn.solvers.anderson.anderson`).
    Returns (map, start, iterations so far, bfloat16 J^T products)."""
    copy = copy_inverse(lin)
    u0 = copy.solve(g)
    its_low = low_evals = 0
    if start is not None:
        closer = batch_norm(g + lin.vjp(start) - start) < batch_norm(g + lin.vjp(u0) - u0)
        u0 = torch.where(bcast(closer, u0), start, u0)
        its_low = 1  # the two J^T products of the choice, counted as one iteration
    low = low_precision_version(lin, g, low_precision, tol, low_precision_tol)
    if low is not None:
        u0, its_pass, _, _, low_evals, _ = anderson_iterate(
            _adjoint_step(low.vjp, g, copy, scale),
            u0,
            lambda u: scale,
            tol=low_precision_tol,
            max_iter=min(max_iter, LOW_PRECISION_MAX_ITER),
            memory=memory,
            restrict=_adjoint_restrict(select, g, scale, low=True) if select is not None else None,
        )
        its_low = its_low + its_pass
    return _adjoint_step(lin.vjp, g, copy, scale), u0, its_low, low_evals


def _adjoint_restrict(select: Callable[[Tensor], Any], g: Tensor, scale: Tensor, low: bool = False):
    """``rows -> (map, scale, None)``: the tridiagonal adjoint step of the sequences at
    ``rows`` alone (their linearisation from ``select``; ``low``: its bfloat16 version). The
    step reports its true residual, so no separate check is needed."""

    def restrict(rows: Tensor):
        sub, sub_scale = select(rows), scale[rows]
        products = (sub.low_precision() or sub) if low else sub
        return _adjoint_step(products.vjp, g[rows], copy_inverse(sub), sub_scale), (lambda u: sub_scale), None

    return restrict


def _adjoint_fixed_point(lin, g: Tensor, *, tol: float, max_iter: int, u0: Tensor | None = None):
    return _adjoint_anderson(lin, g, tol=tol, max_iter=max_iter, memory=0, sweep="jacobi", u0=u0)


def _adjoint_anderson_jacobi(lin, g: Tensor, *, tol: float, max_iter: int, u0: Tensor | None = None):
    return _adjoint_anderson(lin, g, tol=tol, max_iter=max_iter, sweep="jacobi", u0=u0)


def _adjoint_anderson_red_black(lin, g: Tensor, *, tol: float, max_iter: int, u0: Tensor | None = None):
    return _adjoint_anderson(lin, g, tol=tol, max_iter=max_iter, sweep="red_black", u0=u0)


def _adjoint_direct(lin, g: Tensor, *, tol: float, max_iter: int, u0: Tensor | None = None):
    """Exact: ``u0`` is not needed."""
    u = block_tridiagonal_solve_transposed(lin.blocks, g)
    scale = batch_norm(g).clamp_min(torch.finfo(g.dtype).tiny)
    res = batch_norm(u - lin.vjp(u) - g) / scale
    code = torch.where(res <= tol, int(ResultCode.CONVERGED), int(ResultCode.MAX_ITERATIONS))
    zeros = torch.zeros(g.shape[0], dtype=torch.int64, device=g.device)
    return u, _stats("direct", SolveResult(u, zeros + 1, zeros, res, code), 1)


# --------------------------------------------------------------------------- approximate adjoints
# (lin, g, **options) -> (u, stats): u approximates (I - J^T)^{-1} g without solving for it.
# Cheaper backward passes that trade gradient accuracy for time; their stats say "converged"
# (there is no tolerance to miss) and carry no residual (NaN: computing it would cost a J^T
# product, as much as a phantom step). ``inn benchmark`` reports their gradient error.


def _approximate(name: str, u: Tensor, steps: int, products: int) -> tuple[Tensor, SolverStats]:
    """u and its stats: ``steps`` iterations, "converged", residual NaN (not computed)."""
    B = u.shape[0]
    code = torch.full((B,), int(ResultCode.CONVERGED), dtype=torch.int64)
    iterations = torch.full((B,), steps, dtype=torch.int64)
    result = SolveResult(u, iterations, torch.zeros(B, dtype=torch.int64), torch.full((B,), float("nan")), code)
    return u, _stats(name, result, products)


def _adjoint_phantom(lin, g: Tensor, *, steps: int = 5, damping: float = 1.0):
    """The phantom gradient (Geng et al. 2021): backpropagation through ``steps`` damped
    unrolled steps H <- damping F(H) + (1 - damping) H started at the solution. There every
    step's Jacobian is A = damping J + (1 - damping) I, so the unrolled chain rule gives
    u = damping (I + A^T + ... + (A^T)^(steps-1)) g: a truncated Neumann series of the exact
    (I - J^T)^{-1} g, whose error (A^T)^steps u* shrinks with every step on a contractive
    system. Costs steps - 1 J^T products; ``steps=1, damping=1`` is the Jacobian-free u = g."""
    v = g
    total = g
    for _ in range(steps - 1):
        v = damping * lin.vjp(v) + (1 - damping) * v
        total = total + v
    return _approximate("phantom", damping * total, steps, steps - 1)


def _adjoint_jacobian_free(lin, g: Tensor):
    """The Jacobian-free gradient (Fung et al. 2022): u = dL/dH, as if dF/dH were zero."""
    return _approximate("jacobian_free", g, 0, 0)


def _adjoint_preconditioned(lin, g: Tensor):
    """The preconditioner-only gradient (Fung et al. 2022 with the layer's own preconditioner):
    u = (I - D^T)^{-1} g with D the elementwise copy coupling of the neighbours (the
    tridiagonal step's transpose, the cell's ``coupling``), the part of dF/dH that carries
    information along the sentence; the couplings through the weight matrices are dropped.
    Exact when the recurrent matrices are zero; costs one tridiagonal solve (for a cell with
    no coupling it is the Jacobian-free gradient)."""
    return _approximate("preconditioned", copy_inverse(lin).solve(g), 1, 0)


# --------------------------------------------------------------------------- the registries

#: the exact adjoints, by name (``backward_solver``)
ADJOINT_SOLVERS: dict[str, AdjointSpec] = {}
#: the approximate adjoints, by name (``backward_solver``)
APPROXIMATE_ADJOINTS: dict[str, AdjointSpec] = {}

for _spec in (
    AdjointSpec("bicgstab", _adjoint_bicgstab, "BiCGSTAB on (I - J^T) u = g"),
    AdjointSpec(
        "anderson",
        _adjoint_anderson,
        "tridiagonal-preconditioned steps, Anderson-accelerated",
        (
            SolverOption(
                "low_precision",
                "auto",
                "the anderson adjoint's bfloat16 first steps, as low_precision",
                type="boolean",
                choices=("auto",),
            ),
            SolverOption(
                "cuda_graph",
                None,
                "the anderson adjoint in CUDA graphs (default: cuda_graph)",
                type="boolean",
                choices=("auto",),
                resumable=True,
            ),
        ),
        compacts=True,
        inherits=("cuda_graph", "cuda_graph_steps"),
    ),
    AdjointSpec(
        "gmres",
        _adjoint_gmres,
        "GMRES right-preconditioned by the same tridiagonal solve",
        (
            SolverOption(
                "restart",
                30,
                "gmres (and auto's gmres) only: Krylov vectors kept before a restart",
                type="integer",
                minimum=1,
            ),
        ),
        compacts=True,
    ),
    AdjointSpec("anderson_red_black", _adjoint_anderson_red_black, "Anderson on red-black Gauss-Seidel sweeps"),
    AdjointSpec("anderson_jacobi", _adjoint_anderson_jacobi, "Anderson on plain u <- g + J^T u steps"),
    AdjointSpec("fixed_point", _adjoint_fixed_point, "plain u <- g + J^T u steps"),
    AdjointSpec("direct", _adjoint_direct, "the block-tridiagonal solve, exact"),
    AdjointSpec(
        "phantom",
        _adjoint_phantom,
        "damped unrolled steps from the solution",
        (
            SolverOption("steps", 5, "phantom only: damped unrolled steps", type="integer", minimum=1),
            SolverOption("damping", 1.0, "phantom only: their damping", type="number", exclusive_minimum=0, maximum=1),
        ),
        exact=False,
    ),
    AdjointSpec("jacobian_free", _adjoint_jacobian_free, "u = g", exact=False),
    AdjointSpec("preconditioned", _adjoint_preconditioned, "u = (I - D^T)^{-1} g", exact=False),
):
    (ADJOINT_SOLVERS if _spec.exact else APPROXIMATE_ADJOINTS)[_spec.name] = _spec


def adjoint_spec(name: str) -> AdjointSpec | None:
    """The record of adjoint ``name``, exact or approximate, or None."""
    return ADJOINT_SOLVERS.get(name) or APPROXIMATE_ADJOINTS.get(name)


def as_backward(option: SolverOption) -> SolverOption:
    """An adjoint's own option as the layer takes it: ``backward_<name>``."""
    return dataclasses.replace(option, name=f"backward_{option.name}")


#: approximate adjoint -> its own options and their defaults
APPROXIMATE_OPTIONS = {name: spec.defaults for name, spec in APPROXIMATE_ADJOINTS.items()}

#: the backward's own options that pick and bound the adjoint, for every adjoint
_BACKWARD_SOLVE = (
    SolverOption(
        "backward_solver",
        "auto",
        "the adjoint solve (auto: anderson, gmres once a CPU layer's adjoints "
        "average over 30 iterations), or an approximate gradient",
        choices=("auto", *ADJOINT_SOLVERS, *APPROXIMATE_ADJOINTS),
    ),
    SolverOption(
        "backward_tol",
        None,
        "the adjoint's relative residual (null: tol)",
        type="number",
        exclusive_minimum=0,
        nullable=True,
    ),
    SolverOption("backward_max_iter", 200, "the adjoint's iteration limit", type="integer", minimum=1),
)
#: the backward's float64 retry of an exact adjoint (:func:`inn.nn.implicit_function.float64_fallback`)
_BACKWARD_FALLBACK = (
    SolverOption(
        "backward_fallback",
        "float64",
        "exact adjoints: solve the sequences a float32 adjoint leaves above "
        "tol again on the float64 system (float64: Anderson; direct: block-tridiagonal; null: never)",
        choices=("float64", "direct"),
        nullable=True,
    ),
    SolverOption(
        "backward_fallback_after",
        40,
        "float32 adjoint iterations before the fallback takes over",
        type="integer",
        minimum=1,
    ),
)
_OWN = {
    o.name: as_backward(o) for spec in (*ADJOINT_SOLVERS.values(), *APPROXIMATE_ADJOINTS.values()) for o in spec.options
}
#: the implicit backward's options, for every solver (the layer's ``backward_*``;
#: :mod:`inn.nn.implicit_function` reads them): its own, then each adjoint's as ``backward_<name>``
BACKWARD_OPTIONS = (*_BACKWARD_SOLVE, *_OWN.values(), *_BACKWARD_FALLBACK)
