"""Solvers for the implicit layer's equations H = F(H), forward and adjoint.

One entry point, :func:`solve`, validates the options once, builds the starting candidates
and dispatches by name through the registry :data:`SOLVERS`: one :class:`SolverSpec` per
solver (one solver per file), each option a :class:`SolverOption` with its type, range and
default. :func:`register_solver` adds a solver; :func:`check_solver_options` is the one check
of a solver's name and options, wherever they enter (the layer, ``solve``, the workflow's
config, ``inn train --settings``). Every solver returns per-sequence iteration counts,
residuals and :class:`ResultCode` values, collected in a :class:`SolverStats` record.
:data:`ADJOINT_SOLVERS` solve the transposed linear system of the implicit backward pass
(:mod:`inn.nn.implicit_function`), whose options are :data:`BACKWARD_OPTIONS`.

Solvers:

- ``newton_krylov``: the paper's Newton-BiCGSTAB (:mod:`inn.solvers.newton_krylov`).
- ``newton_direct``: Newton with exact block-tridiagonal solves (:mod:`inn.solvers.newton_direct`).
- ``anderson``: Anderson-accelerated fixed-point iteration (:mod:`inn.solvers.anderson`).
- ``fixed_point``: plain (damped) iteration H <- F(H), Anderson's degenerate case.
"""

from __future__ import annotations

import logging
import re
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from inn.errors import InnError
from inn.solvers import anderson as _anderson
from inn.solvers import cuda_graph as _graphs
from inn.solvers import newton_direct as _newton_direct
from inn.solvers import newton_krylov as _newton_krylov
from inn.solvers._common import (
    ConvergenceWarning,
    Counter,
    FixedPointSystem,
    ResultCode,
    SolverStats,
    batch_norm,
    bcast,
)
from inn.solvers._registry import SolverOption, SolverSpec, did_you_mean
from inn.solvers.bicgstab import KrylovInfo, bicgstab
from inn.solvers.block_tridiagonal import block_tridiagonal_solve_transposed
from inn.solvers.gmres import gmres
from inn.solvers.homotopy import homotopy_solve
from inn.solvers.tridiagonal import Tridiagonal

log = logging.getLogger(__name__)

# --------------------------------------------------------------------------- the registry
# One record per solver (:class:`SolverSpec`), each option with its type, range and default
# (:class:`SolverOption`): what ``solve`` dispatches on, what the layer, the workflow's config
# and ``inn train --settings`` check options against (:func:`check_solver_options`), and what
# docs/implicit-layer.md's options table is written from (:func:`options_table`).

#: options :func:`solve` itself takes, for every solver (defaults: ``solve``'s own)
COMMON_OPTIONS = (
    SolverOption("tol", 1e-4, "relative residual ||H - F(H)|| / ||H|| every sequence must reach",
                 type="number", exclusive_minimum=0),
    SolverOption("max_iter", None, "outer-iteration limit (null: the solver's own)", type="integer", minimum=1,
                 nullable=True),
    SolverOption("candidates", None, "starting points in order (null: the solver's own)", type="array",
                 choices=("zeros", "F0", "one_step", "random"), nullable=True),
    SolverOption("candidate_mode", "fallback", "fallback: a later candidate only where the earlier failed; "
                 "parallel: all at once (the paper's)", choices=("fallback", "parallel")),
    SolverOption("seed", 0, "seeds the random candidate", type="integer"),
    SolverOption("strict", False, "a solve that misses tol raises instead of warning", type="boolean"),
)

_DIVERGENCE = SolverOption("divergence_factor", 1e4, "a residual this many times its first one counts as diverged",
                           type="number", exclusive_minimum=1)
_LINE_SEARCH = SolverOption("line_search", True, "per-sequence backtracking on ||G|| (the paper: full steps)",
                            type="boolean")
_BACKTRACKS = SolverOption("max_backtracks", 6, "halvings of a Newton step per line search", type="integer",
                           minimum=0)
_BETA = SolverOption("beta", 1.0, "damping of each step (1: none)", type="number", exclusive_minimum=0, maximum=1)
_SWEEPS = ("tridiagonal", "red_black", "jacobi")  # inn.solvers.anderson.SWEEPS
#: options :func:`solve` applies itself, not the solver function (see its ``fallback``), for
#: the solvers that list them
_FALLBACK = SolverOption("fallback", "homotopy", "solve the sequences a float32 solve leaves above tol again on the "
                         "float64 system, from where float32 stopped, then from the first candidate; homotopy: then track a probability-one homotopy "
                         "for those that are still above it (null: never)", choices=("float64", "homotopy"),
                         nullable=True)
_FALLBACK_AFTER = SolverOption("fallback_after", 100, "float32 iterations per candidate before the fallback takes "
                               "over", type="integer", minimum=1)
FALLBACK_OPTIONS = (_FALLBACK, _FALLBACK_AFTER)


def _sweep(default: str) -> SolverOption:
    return SolverOption("sweep", default, "the map iterated: tridiagonal-preconditioned step, red-black "
                        "Gauss-Seidel or plain F", choices=_SWEEPS)


#: every solver :func:`solve` knows, by name (:func:`register_solver` adds one)
SOLVERS: dict[str, SolverSpec] = {}


def register_solver(spec: SolverSpec) -> SolverSpec:
    """Add a forward solver to the registry, so that ``solve``, the layers, the workflow's
    config (``solver.name``) and ``inn train --settings`` accept its name and check its options.

    Raises:
        InnError: a name already registered, not a lower-case identifier, or an option named
            as one of :data:`COMMON_OPTIONS` or ``backward_*`` (:data:`BACKWARD_OPTIONS`).
    """
    if not re.fullmatch(r"[a-z][a-z0-9_]*", spec.name):
        raise InnError(f"solver name {spec.name!r}: use lower-case letters, digits and _ (it is a config value)")
    if spec.name in SOLVERS:
        raise InnError(f"a solver named {spec.name!r} is registered already; give yours another name")
    common = {o.name for o in COMMON_OPTIONS}
    shared = sorted(o.name for o in spec.options if o.name in common or o.name.startswith("backward_"))
    if shared:
        raise InnError(f"solver {spec.name!r}: option(s) {', '.join(shared)} belong to every solver (solve's own, "
                       "or backward_*, the implicit backward's); rename them")
    SOLVERS[spec.name] = spec
    return spec


for _spec in (
    SolverSpec("newton_krylov", _newton_krylov.newton_krylov, (
        SolverOption("krylov_max_iter", 40, "BiCGSTAB iterations per Newton step (the paper: 40)", type="integer",
                     minimum=1),
        SolverOption("forcing", "adaptive", "BiCGSTAB's relative tolerance: adaptive (Eisenstat-Walker) or fixed",
                     type="number", choices=("adaptive",), exclusive_minimum=0, exclusive_maximum=1),
        _LINE_SEARCH, _BACKTRACKS,
        SolverOption("global_dots", False, "one set of BiCGSTAB scalars for the whole batch (the paper's)",
                     type="boolean"),
        _DIVERGENCE,
    ), max_iter=40, candidates=("F0", "one_step", "random"),
        doc="the paper's Newton-BiCGSTAB (inn.solvers.newton_krylov)"),
    SolverSpec("newton_direct", _newton_direct.newton_direct, (_LINE_SEARCH, _BACKTRACKS, _DIVERGENCE),
               max_iter=20, candidates=("F0", "one_step", "random"),
               doc="Newton with exact block-tridiagonal solves (inn.solvers.newton_direct)"),
    # Anderson's first sweep from zero is as good as the paper's one-step guess (which costs two
    # sequential GRU sweeps); Newton wants a point near the solution, F(0) is one evaluation away
    SolverSpec("anderson", _anderson.anderson, (
        SolverOption("memory", 5, "iterates Anderson extrapolates from (fixed_point: none)", type="integer",
                     minimum=1),
        _BETA,
        SolverOption("regularization", 1e-8, "Tikhonov term of the least-squares weights", type="number", minimum=0),
        _sweep("tridiagonal"), _DIVERGENCE,
        SolverOption("low_precision", "auto", "first steps with bfloat16 products (auto: float32 on a CPU with "
                     "native bfloat16)", type="boolean", choices=("auto",)),
        SolverOption("low_precision_tol", 3e-3, "where the bfloat16 steps hand over to float32", type="number",
                     exclusive_minimum=0),
        SolverOption("cuda_graph", False, "the solve in captured CUDA graphs (auto: on CUDA devices)", type="boolean",
                     choices=("auto",), resumable=True),
        SolverOption("cuda_graph_steps", _graphs.DEFAULT_STEPS, "steps per captured chunk", type="integer",
                     minimum=1, resumable=True),
        SolverOption("compact", "auto", "sequences that are done leave the batch, forward and adjoint (auto: on "
                     "a CPU)", type="boolean", choices=("auto",)),
        *FALLBACK_OPTIONS,
    ), max_iter=200, candidates=("zeros", "one_step", "random"),
        doc="Anderson-accelerated fixed-point iteration (inn.solvers.anderson)"),
    SolverSpec("fixed_point", _anderson.fixed_point, (_BETA, _sweep("jacobi"), _DIVERGENCE),
               max_iter=500, candidates=("zeros", "one_step", "random"),
               doc="plain (damped) iteration H <- F(H), Anderson's degenerate case"),
):
    register_solver(_spec)


def solver_spec(name: str, where: str = "") -> SolverSpec:
    """The registry's record of solver ``name``.

    Raises:
        InnError: an unknown name, as one line ``[<where>: ]unknown solver ...`` listing the
            known ones.
    """
    spec = SOLVERS.get(name) if isinstance(name, str) else None
    if spec is None:
        prefix = f"{where}: " if where else ""
        raise InnError(f"{prefix}unknown solver {name!r}{did_you_mean(name, list(SOLVERS))}; choose one of "
                       f"{', '.join(SOLVERS)}")
    return spec


def solver_options(name: str, where: str = "", *, backward: bool = True) -> dict[str, SolverOption]:
    """Every option solver ``name`` takes, by key: its own, :data:`COMMON_OPTIONS` and
    (``backward``) :data:`BACKWARD_OPTIONS`. An unknown name raises as :func:`solver_spec`."""
    spec = solver_spec(name, where)
    return {o.name: o for o in (*COMMON_OPTIONS, *spec.options, *(BACKWARD_OPTIONS if backward else ()))}


def check_solver_options(name: str, options: Mapping[str, Any], where: str = "", *, name_where: str | None = None,
                         backward: bool = True) -> None:
    """Check solver ``name`` and ``options`` against the registry: every key one of the
    solver's options, :data:`COMMON_OPTIONS` or (``backward``) :data:`BACKWARD_OPTIONS`, and
    every value of its option's type and in its range.

    Args:
        where: the dotted path of ``options`` in what they came from, e.g.
            ``"config: solver.options"``: a line then names ``<where>.<key>``.
        name_where: the path of the name, e.g. ``"config: solver.name"`` (default: none).
        backward: also accept the implicit backward's options (the layer's ``**options``);
            False for :func:`solve`'s own.

    Raises:
        InnError: the first unknown name, unknown key (with the closest known one), wrong type
            or value out of range, as one line.
    """
    known = solver_options(name, name_where or "", backward=backward)
    for key, value in options.items():
        option = known.get(key)
        if option is None:
            hint = did_you_mean(key, list(known))
            takes = ", ".join(sorted(known))
            if where:
                raise InnError(f"{where}.{key}: not an option of solver {name!r}{hint}; it takes {takes}")
            raise InnError(f"solver {name!r} has no option {key!r}{hint}; it takes {takes}")
        problem = option.problem(value, f"{where}.{key}" if where else f"solver {name!r} option {key}")
        if problem:
            raise InnError(problem)


def check_options(method: str, options: dict[str, Any]) -> None:
    """Raise :class:`InnError` for an unknown solver, or an option of :func:`solve` it does
    not take or whose value it refuses (:func:`check_solver_options`, the backward's left out)."""
    solver_spec(method)
    if "cuda_graph" in options:  # the CUDA-graph options' own lines first (inn.solvers.cuda_graph)
        _graphs.check(options["cuda_graph"])
    if "cuda_graph_steps" in options:
        _graphs.check_steps(options["cuda_graph_steps"])
    check_solver_options(method, options, backward=False)


def resumable_options() -> set[str]:
    """The option names that may change between an interrupted training and its resumption
    (:attr:`SolverOption.resumable`: how a solve runs, not what it computes)."""
    specs = (*COMMON_OPTIONS, *BACKWARD_OPTIONS, *(o for spec in SOLVERS.values() for o in spec.options))
    return {o.name for o in specs if o.resumable}


def options_table() -> str:
    """The options of every registered solver as a Markdown table (docs/implicit-layer.md's)."""
    rows = ["| solver | option | default | takes | what |", "|---|---|---|---|---|"]
    groups = [("all", COMMON_OPTIONS), *((spec.name, spec.options) for spec in SOLVERS.values()),
              ("backward", BACKWARD_OPTIONS)]
    for group, options in groups:
        for o in options:
            cells = (group, f"`{o.name}`", f"`{_yaml(o.default)}`", o.describe(), o.doc)
            rows.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(rows)


def _yaml(value: Any) -> str:
    """A default as a config spells it: true, null, 1e-4, tridiagonal."""
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "null"}[value]
    if isinstance(value, float):
        return re.sub(r"e([+-])0*(\d)", lambda m: f"e{m[1].replace('+', '')}{m[2]}", f"{value:g}")
    return str(value)


#: the paper's Newton-Krylov, as an options dict for ``ImplicitGRU(..., **PAPER_OPTIONS)``
PAPER_OPTIONS = dict(_newton_krylov.PAPER_OPTIONS)

__all__ = [
    "ADJOINT_SOLVERS", "APPROXIMATE_ADJOINTS", "BACKWARD_OPTIONS", "COMMON_OPTIONS", "ConvergenceWarning",
    "FixedPointSystem", "KrylovInfo", "PAPER_OPTIONS", "ResultCode", "SOLVERS", "SolverOption", "SolverSpec",
    "SolverStats", "bicgstab", "check_options", "check_solver_options", "register_solver", "solve", "solver_options",
    "solver_spec",
]


def solve(
    system: FixedPointSystem,
    method: str = "anderson",
    *,
    tol: float = 1e-4,
    max_iter: int | None = None,
    candidates: Sequence[str] | None = None,
    candidate_mode: str = "fallback",
    seed: int = 0,
    strict: bool = False,
    start: Tensor | None = None,
    **options: Any,
) -> tuple[Tensor, SolverStats]:
    """Solve H = F(H) for a batch of independent systems.

    Finds H with ||H - F(H)|| <= tol * ||H|| for every sequence of the batch.

    Args:
        system: the equations (see :class:`FixedPointSystem`; :class:`inn.nn.ImplicitSequence`
            builds one per batch).
        method: a name in :data:`SOLVERS`.
        tol: relative residual ||H - F(H)|| / ||H|| to reach, per sequence.
        max_iter: outer iteration limit (default per method, :attr:`SolverSpec.max_iter`).
        candidates: starting points, in order: ``"one_step"`` (the paper's guess from a
            forward and a backward sweep of the one-directional cell), ``"random"``, ``"zeros"``, ``"F0"`` (F(0));
            default per method, :attr:`SolverSpec.candidates`.
        candidate_mode: ``"parallel"`` (the paper: all candidates at once, a sequence stops
            when one of its candidates converges, the earliest wins) or ``"fallback"`` (the
            next candidate only for sequences the previous ones failed: cheaper).
        seed: seeds the random candidate.
        strict: raise :class:`InnError` if any sequence fails, instead of warning with
            :class:`ConvergenceWarning`.
        start: a starting point of the solution's shape (zero at padded positions), tried
            before the candidates: a warm start, e.g. each sequence's solution under the
            previous epoch's weights. ``stats.candidate`` then counts it as candidate 0 and
            the ``candidates`` from 1.
        **options: the method's own options (:attr:`SolverSpec.options`). Among Anderson's,
            ``fallback``: ``"homotopy"`` (default), ``"float64"`` or None. A float32 iterate near a nearly singular
            fixed point can stall or overflow where the same system in float64 converges (a
            trained walks INN: NONFINITE after 77 float32 Anderson steps, 20 steps in
            float64). With a system that has a float64 copy (``in_precision``), each float32
            candidate then runs at most ``fallback_after`` iterations, and the sequences that
            every candidate leaves above tol are solved again on the float64 copy: first for
            ``fallback_after`` iterations from where the float32 candidates stopped (their
            lowest-residual iterate: most stop a few steps short of tol, by round-off or the
            cut), then those still above tol from the first candidate, with ``max_iter``;
            ``stats.candidate`` counts that solve after the
            candidates, ``stats.extra["fallback"]`` how many sequences it took. With
            ``"homotopy"`` (default) the sequences still above tol after that are solved by
            a probability-one homotopy (:mod:`inn.solvers.homotopy`, seconds per sequence, on
            the float64 copy or a float64 system), which reaches a fixed point where every
            local solver stalls at a fold;
            ``stats.extra["homotopy"]`` counts them, their path steps count as iterations.

    Returns:
        ``(H, stats)``: H (B, n, k), the solution (for a failed sequence, the best iterate);
        stats a :class:`SolverStats` with per-sequence iterations, residual, converged flag,
        result code and winning candidate.

    Raises:
        InnError: unknown method or option, an option's value of the wrong type or out of its
            range (:func:`check_solver_options`), a ``start`` of the wrong shape; in strict mode, a
            failed solve.
    """
    check_options(method, options)
    if candidate_mode not in ("parallel", "fallback"):
        raise InnError(f"candidate_mode must be 'parallel' or 'fallback', not {candidate_mode!r}")
    if candidates is None:
        candidates = SOLVERS[method].candidates
    if not candidates:
        raise InnError("need at least one starting candidate")
    kinds = tuple(candidates)
    if start is not None:
        if start.shape != system.shape:
            raise InnError(f"start has shape {tuple(start.shape)}; the solution has {tuple(system.shape)}")
        kinds = ("start",) + kinds
    spec = SOLVERS[method]
    solver = spec.function
    max_iter = spec.max_iter if max_iter is None else int(max_iter)
    generator = torch.Generator().manual_seed(seed)
    counter = Counter()
    # solve's own options, not the solver function's (absent: the method's default, or none)
    fallback = options.pop(_FALLBACK.name, spec.defaults.get(_FALLBACK.name))
    fallback_after = options.pop(_FALLBACK_AFTER.name, _FALLBACK_AFTER.default)
    # a float64 copy for the fallback: float32 systems whose cell can give one
    precise = fallback is not None and getattr(system, "has_precision_copy", False) \
        and system.X.dtype == torch.float32
    first_max_iter = min(max_iter, fallback_after) if precise else max_iter

    def guess(sub, kind: str, rows: Tensor | None) -> Tensor:
        if kind == "end":  # where the float32 candidates stopped: their lowest-residual iterate
            end = H[rows].to(sub.X.dtype)
            return torch.where(torch.isfinite(end), end, torch.zeros_like(end))
        if kind != "start":
            return sub.initial_guess(kind, generator)
        return start if rows is None else start[rows]

    def run(sub, kinds: Sequence[str], rows: Tensor | None = None, limit: int = first_max_iter):
        guesses = [guess(sub, kind, rows) for kind in kinds]
        stacked = sub.repeat(len(kinds))
        H, newton, krylov, res, code = solver(stacked, torch.cat(guesses, 0), len(kinds), counter, tol=tol,
                                              max_iter=limit, **options)
        # a small residual far outside the box is no solution
        outside = stacked.outside_bounds(H) & (code == int(ResultCode.CONVERGED))
        code = code.masked_fill(outside, int(ResultCode.OUT_OF_BOUNDS))
        return _pick_winner(H, newton, krylov, res, code, groups=len(kinds))

    if candidate_mode == "parallel":
        H, newton, krylov, res, code, cand = run(system, kinds)
    else:
        H, newton, krylov, res, code, cand = run(system, kinds[:1])
        for index, kind in enumerate(kinds[1:], start=1):
            retry = (code != int(ResultCode.CONVERGED)).nonzero().flatten()
            if retry.numel() == 0:
                break
            log.debug("retrying %d sequence(s) from candidate %r", retry.numel(), kind)
            retried = run(system.select(retry), [kind], retry)
            _take_better(retry, index, retried, H, newton, krylov, res, code, cand)
    extra = {}
    retry = (code != int(ResultCode.CONVERGED)).nonzero().flatten()
    if precise and retry.numel():
        log.debug("solving %d sequence(s) again in float64", retry.numel())
        extra["fallback"] = int(retry.numel())
        # first from where float32 stopped (most misses stop a few steps short of tol there), then
        # what that leaves from the first candidate, with max_iter
        for kind, limit in (("end", first_max_iter), (tuple(candidates)[0], max_iter)):
            retried = run(system.select(retry).in_precision(torch.float64), [kind], retry, limit=limit)
            _take_better(retry, len(kinds), retried, H, newton, krylov, res, code, cand)
            retry = (code != int(ResultCode.CONVERGED)).nonzero().flatten()
            if retry.numel() == 0:
                break
    # the homotopy on float64 systems only (the float64 copy, or a float64 model's own): in
    # float32 its corrections cannot settle (a float32 system without the copy keeps its misses)
    if fallback == "homotopy" and retry.numel() and (precise or system.X.dtype == torch.float64):
        exact = system.select(retry)
        _homotopy_fallback(exact.in_precision(torch.float64) if precise else exact, retry, tol, generator, counter,
                           H, newton, res, code, cand, len(kinds) + precise)
        extra["homotopy"] = int(retry.numel())
    stats = SolverStats(
        solver=method,
        newton_iterations=newton.cpu(),
        krylov_iterations=krylov.cpu(),
        residual=res.detach().cpu(),
        converged=(code == int(ResultCode.CONVERGED)).cpu(),
        code=code.cpu(),
        candidate=cand.cpu(),
        function_evals=counter.f,
        jacobian_products=counter.jp,
        extra=extra,
    )
    _report(stats, f"forward solve ({method})", tol, strict)
    return H, stats


def _homotopy_fallback(exact, rows: Tensor, tol: float, generator: torch.Generator, counter: Counter,
                       H: Tensor, newton: Tensor, res: Tensor, code: Tensor, cand: Tensor, index: int) -> None:
    """The sequences ``rows`` that every candidate and the float64 retry left above tol, each
    solved by the homotopy of :mod:`inn.solvers.homotopy` on ``exact``, their float64 systems
    (in the order of ``rows``), from a random start in the box; its path steps count as
    iterations, the sequence as candidate ``index``. One sequence at a time: each follows its
    own curve, and they are rare (a few in 50,000 training walks of a trained walks INN)."""
    log.info("homotopy for %d sequence(s) no local solve converged on", rows.numel())
    for i, row in enumerate(rows.tolist()):
        one = exact.select(torch.tensor([i], device=rows.device))
        bound = one.state_bound() if hasattr(one, "state_bound") else torch.ones(1)
        bound = torch.where(torch.isfinite(bound), bound, torch.ones_like(bound))
        uniform = torch.rand(one.shape, generator=generator, dtype=torch.float64).to(one.X)
        a = 0.5 * bound * (2 * uniform - 1) * one.maskf
        try:
            H1, steps, r1, c1 = homotopy_solve(one, a, counter, tol=tol)
        except (NotImplementedError, AttributeError):  # a linearisation without Jacobian blocks
            log.debug("no Jacobian blocks: no homotopy")
            return
        newton[row] += steps
        if c1 == int(ResultCode.CONVERGED) and bool(one.outside_bounds(H1)[0]):
            c1 = int(ResultCode.OUT_OF_BOUNDS)
        if c1 == int(ResultCode.CONVERGED) or r1 < float(res[row]):
            H[row] = H1[0].to(H.dtype)
            res[row], code[row], cand[row] = r1, c1, index


def _take_better(rows: Tensor, index: int, retried: tuple, H, newton, krylov, res, code, cand) -> None:
    """Where a retry of ``rows`` converged or left a smaller residual, take its solution
    (in H's dtype), residual and code, and name candidate ``index``; add its iterations."""
    H2, n2, k2, r2, c2, _ = retried
    better = (c2 == int(ResultCode.CONVERGED)) | (r2.to(res.dtype) < res[rows])
    idx = rows[better]
    H[idx] = H2[better].to(H.dtype)
    res[idx], code[idx] = r2[better].to(res.dtype), c2[better]
    cand[idx] = index
    newton[rows] += n2
    krylov[rows] += k2


def _pick_winner(H, newton, krylov, res, code, groups: int):
    """Per sequence, the candidate that converged first (fewest iterations, earliest listed),
    else the one with the lowest residual. Iterations are summed over all candidates run."""
    C = groups
    B = H.shape[0] // C
    conv = (code == int(ResultCode.CONVERGED)).view(C, B)
    big = torch.iinfo(torch.int64).max // 4
    order_conv = torch.where(conv, newton.view(C, B) * C + torch.arange(C, device=H.device).view(C, 1), big)
    res_v = torch.where(torch.isfinite(res), res, torch.full_like(res, float("inf"))).view(C, B)
    cand = torch.where(conv.any(0), order_conv.argmin(0), res_v.argmin(0))
    rows = cand * B + torch.arange(B, device=H.device)
    return (
        H[rows], newton.view(C, B).sum(0), krylov.view(C, B).sum(0), res[rows], code[rows], cand,
    )


def _report(stats: SolverStats, what: str, tol: float, strict: bool) -> None:
    """Non-convergence is never silent: a counted warning, or an error in strict mode."""
    failed = stats.num_failed
    if not failed:
        return
    codes = sorted({ResultCode(int(c)).name for c in stats.code[~stats.converged]})
    message = (
        f"{what}: {failed} of {stats.converged.numel()} sequences did not reach tol {tol:g} "
        f"(max residual {float(stats.residual.max()):.3g}; {', '.join(codes)})"
    )
    if strict:
        raise InnError(message)
    warnings.warn(message, ConvergenceWarning, stacklevel=3)


# --------------------------------------------------------------------------- adjoint solvers
# (lin, g, tol, max_iter, u0) -> (u, stats): solve (I - J^T) u = g, J = dF/dH at the solution;
# ``u0``: a starting point (a warm start, e.g. the same sentence's adjoint in the previous
# epoch), None for the solver's own.


def _adjoint_stats(name: str, iterations: Tensor, inner: Tensor, res: Tensor, code: Tensor, lin_evals: int, jp: int):
    return SolverStats(
        solver=name,
        newton_iterations=iterations.cpu(),
        krylov_iterations=inner.cpu(),
        residual=res.detach().cpu(),
        converged=(code == int(ResultCode.CONVERGED)).cpu(),
        code=code.cpu(),
        candidate=torch.zeros_like(code).cpu(),
        function_evals=lin_evals,
        jacobian_products=jp,
    )


def _adjoint_bicgstab(lin, g: Tensor, *, tol: float, max_iter: int, u0: Tensor | None = None):
    u, info = bicgstab(lambda V: V - lin.vjp(V), g, x0=g if u0 is None else u0, rtol=tol, maxiter=max_iter)
    gn = batch_norm(g).clamp_min(torch.finfo(g.dtype).tiny)
    res = torch.where(batch_norm(g) > 0, info.residual / gn, torch.zeros_like(gn))
    code = torch.where(res <= tol, int(ResultCode.CONVERGED), info.code)
    zeros = torch.zeros_like(info.iterations)
    return u, _adjoint_stats("bicgstab", zeros, info.iterations, res, code, 1, info.matvecs)


def _adjoint_gmres(lin, g: Tensor, *, tol: float, max_iter: int, restart: int = 30, u0: Tensor | None = None,
                   select: Callable[[Tensor], Any] | None = None):
    """GMRES on (I - J^T) u = g, preconditioned on the right by the tridiagonal I - D^T (the
    same factorisation Anderson's step uses): :func:`inn.solvers.gmres.gmres`. Its iterations
    are J^T products; each cycle costs one more, for the true residual. ``select``: ``rows ->
    the linearisation of those sequences alone``; with it the sequences that are done leave the
    batch (compaction, as the Anderson adjoint's)."""
    def restrict(rows: Tensor):
        sub = select(rows)
        return (lambda V: V - sub.vjp(V)), copy_inverse(sub).solve

    u, info = gmres(lambda V: V - lin.vjp(V), copy_inverse(lin).solve, g, x0=u0, rtol=tol, maxiter=max_iter,
                    restart=restart, restrict=restrict if select is not None else None)
    scale = batch_norm(g)
    res = torch.where(scale > 0, info.residual / scale.clamp_min(torch.finfo(g.dtype).tiny), torch.zeros_like(scale))
    return u, _adjoint_stats("gmres", info.iterations, torch.zeros_like(info.iterations), res, info.code, 1,
                             info.matvecs)


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


def _adjoint_anderson(lin, g: Tensor, *, tol: float, max_iter: int, memory: int = 5, sweep: str = "tridiagonal",
                      low_precision: bool | str = "auto", low_precision_tol: float = 3e-3, u0: Tensor | None = None,
                      cuda_graph: bool | str = False, cuda_graph_steps: int = _graphs.DEFAULT_STEPS,
                      select: Callable[[Tensor], Any] | None = None):
    """Anderson on the adjoint u = g + J^T u; ``cuda_graph``: the (final-precision) tridiagonal
    solve in captured segments, as the forward's (:func:`inn.solvers.anderson.anderson`).
    ``select``: ``rows -> the linearisation of those sequences alone``; with it the eager
    tridiagonal solve drops the sequences that are done from the batch (the forward's
    ``compact``), each compaction costing one cell evaluation of the sequences that go on."""
    _graphs.check_steps(cuda_graph_steps)
    obstacle = None if sweep == "tridiagonal" else f"the {sweep} adjoint is not captured"
    if not lin.system.graphable:
        obstacle = "the cell has no analytic linearisation to capture"
    graphed = _graphs.use(cuda_graph, g.device, obstacle)
    scale = batch_norm(g)
    tiny = torch.finfo(g.dtype).tiny
    true_residual = lambda u: batch_norm(u - lin.vjp(u) - g) / scale.clamp_min(tiny)  # noqa: E731
    start = u0
    u0 = g if start is None else start
    its_low = low_evals = 0
    if sweep == "red_black":
        fmap = lambda u: lin.adjoint_sweep(u, g)  # noqa: E731
    elif sweep == "tridiagonal":  # u + (I - D^T)^{-1} (g + J^T u - u), D factorised once
        copy = copy_inverse(lin)
        u0 = copy.solve(g)  # the step from u = 0, where J^T u costs nothing
        if start is not None:  # per sequence, the warm start where it is the closer one
            closer = batch_norm(g + lin.vjp(start) - start) < batch_norm(g + lin.vjp(u0) - u0)
            u0 = torch.where(bcast(closer, u0), start, u0)
            its_low = 1  # the two J^T products of the choice, counted as one iteration
        fmap = _adjoint_step(lin.vjp, g, copy, scale)
        # mixed precision, as the forward (inn.solvers.anderson.anderson): bfloat16 J^T
        # products down to low_precision_tol, then float32 from there
        low = _anderson.low_precision_version(lin, g, low_precision, tol, low_precision_tol)
        if low is not None:
            u0, its_pass, _, _, low_evals, _ = _anderson.anderson_iterate(
                _adjoint_step(low.vjp, g, copy, scale), u0, lambda u: scale, tol=low_precision_tol,
                max_iter=min(max_iter, _anderson.LOW_PRECISION_MAX_ITER), memory=memory,
                restrict=_adjoint_restrict(select, g, scale, low=True) if select is not None else None)
            its_low = its_low + its_pass
    else:
        fmap = lambda u: g + lin.vjp(u)  # noqa: E731
        true_residual = None
    if graphed:
        u, its, res, code, evals, checks = _anderson.anderson_chunked(
            _adjoint_segment_map, (lin, g), u0, tol=tol, max_iter=max_iter, memory=memory, steps=cuda_graph_steps,
            kind="adjoint tridiagonal")
    else:
        restrict = _adjoint_restrict(select, g, scale) if select is not None and sweep == "tridiagonal" else None
        u, its, res, code, evals, checks = _anderson.anderson_iterate(
            fmap, u0, lambda u: scale, tol=tol, max_iter=max_iter, memory=memory, true_residual=true_residual,
            restrict=restrict)
    its = its + its_low
    res = torch.where(scale > 0, res, torch.zeros_like(res))
    code = torch.where((scale == 0) | (code == int(ResultCode.CONVERGED)), int(ResultCode.CONVERGED), code)
    name = ("anderson" if memory else "fixed_point") + ("" if sweep == "jacobi" else f"_{sweep}")
    # J^T products: both passes' (bfloat16 ones too, as the forward counts its bfloat16 F)
    return u, _adjoint_stats(name, its, torch.zeros_like(its), res, code, 1, low_evals + evals + checks)


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
    return u, _adjoint_stats("direct", zeros + 1, zeros, res, code, 1, 1)


#: name -> adjoint solver for the implicit backward pass
ADJOINT_SOLVERS = {
    "bicgstab": _adjoint_bicgstab,
    "anderson": _adjoint_anderson,  # tridiagonal-preconditioned steps, Anderson-accelerated
    "gmres": _adjoint_gmres,  # GMRES right-preconditioned by the same tridiagonal solve
    "anderson_red_black": _adjoint_anderson_red_black,
    "anderson_jacobi": _adjoint_anderson_jacobi,
    "fixed_point": _adjoint_fixed_point,
    "direct": _adjoint_direct,
}


# --------------------------------------------------------------------------- approximate adjoints
# (lin, g, **options) -> (u, stats): u approximates (I - J^T)^{-1} g without solving for it.
# Cheaper backward passes that trade gradient accuracy for time; their stats say "converged"
# (there is no tolerance to miss) and carry no residual (NaN: computing it would cost a J^T
# product, as much as a phantom step). ``inn benchmark`` reports their gradient error.


def _approximate_stats(name: str, g: Tensor, steps: int, products: int) -> SolverStats:
    B = g.shape[0]
    code = torch.full((B,), int(ResultCode.CONVERGED), dtype=torch.int64)
    return _adjoint_stats(name, torch.full((B,), steps, dtype=torch.int64), torch.zeros(B, dtype=torch.int64),
                          torch.full((B,), float("nan")), code, 1, products)


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
    return damping * total, _approximate_stats("phantom", g, steps, steps - 1)


def _adjoint_jacobian_free(lin, g: Tensor):
    """The Jacobian-free gradient (Fung et al. 2022): u = dL/dH, as if dF/dH were zero."""
    return g, _approximate_stats("jacobian_free", g, 0, 0)


def _adjoint_preconditioned(lin, g: Tensor):
    """The preconditioner-only gradient (Fung et al. 2022 with the layer's own preconditioner):
    u = (I - D^T)^{-1} g with D the elementwise copy coupling of the neighbours (the
    tridiagonal step's transpose, the cell's ``coupling``), the part of dF/dH that carries
    information along the sentence; the couplings through the weight matrices are dropped.
    Exact when the recurrent matrices are zero; costs one tridiagonal solve (for a cell with
    no coupling it is the Jacobian-free gradient)."""
    return copy_inverse(lin).solve(g), _approximate_stats("preconditioned", g, 1, 0)


#: name -> approximate adjoint, and the options each takes (``backward_<option>`` on the layer)
APPROXIMATE_ADJOINTS = {
    "phantom": _adjoint_phantom,
    "jacobian_free": _adjoint_jacobian_free,
    "preconditioned": _adjoint_preconditioned,
}
APPROXIMATE_OPTIONS = {"phantom": {"steps": 5, "damping": 1.0}, "jacobian_free": {}, "preconditioned": {}}

#: the implicit backward's options, for every solver (the layer's ``backward_*``;
#: :mod:`inn.nn.implicit_function` reads them)
BACKWARD_OPTIONS = (
    SolverOption("backward_solver", "auto", "the adjoint solve (auto: anderson, gmres once a CPU layer's adjoints "
                 "average over 30 iterations), or an approximate gradient",
                 choices=("auto", *ADJOINT_SOLVERS, *APPROXIMATE_ADJOINTS)),
    SolverOption("backward_tol", None, "the adjoint's relative residual (null: tol)", type="number",
                 exclusive_minimum=0, nullable=True),
    SolverOption("backward_max_iter", 200, "the adjoint's iteration limit", type="integer", minimum=1),
    SolverOption("backward_low_precision", "auto", "the anderson adjoint's bfloat16 first steps, as low_precision",
                 type="boolean", choices=("auto",)),
    SolverOption("backward_cuda_graph", None, "the anderson adjoint in CUDA graphs (default: cuda_graph)",
                 type="boolean", choices=("auto",), resumable=True),
    SolverOption("backward_restart", 30, "gmres (and auto's gmres) only: Krylov vectors kept before a restart", type="integer",
                 minimum=1),
    SolverOption("backward_steps", APPROXIMATE_OPTIONS["phantom"]["steps"], "phantom only: damped unrolled steps",
                 type="integer", minimum=1),
    SolverOption("backward_damping", APPROXIMATE_OPTIONS["phantom"]["damping"], "phantom only: their damping",
                 type="number", exclusive_minimum=0, maximum=1),
    SolverOption("backward_fallback", "float64", "exact adjoints: solve the sequences a float32 adjoint leaves above "
                 "tol again on the float64 system (float64: Anderson; direct: block-tridiagonal; null: never)",
                 choices=("float64", "direct"), nullable=True),
    SolverOption("backward_fallback_after", 40, "float32 adjoint iterations before the fallback takes over",
                 type="integer", minimum=1),
)
