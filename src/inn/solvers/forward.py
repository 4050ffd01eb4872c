"""The forward solve, :func:`solve`: H = F(H) for a batch of independent systems, by name.

It checks the options once, builds the starting candidates, runs the registered solver
(:data:`inn.solvers.table.SOLVERS`) on them, falls back where a float32 solve misses tol
(float64, then a homotopy), and reports every sequence's outcome in a
:class:`~inn.solvers.SolverStats`; a miss warns (:class:`~inn.solvers.ConvergenceWarning`) or,
``strict``, raises.
"""

from __future__ import annotations

import dataclasses
import logging
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

from inn.errors import InnError
from inn.solvers._common import (
    ConvergenceWarning,
    Counter,
    FixedPointSystem,
    ResultCode,
    SolveResult,
    SolverStats,
)
from inn.solvers.homotopy import homotopy_solve
from inn.solvers.table import _FALLBACK, _FALLBACK_AFTER, SOLVERS, check_options

log = logging.getLogger(__name__)


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
            ``fallback``: ``"homotopy"`` (default), ``"float64"`` or None, for the float32
            iterates that stall or overflow near a nearly singular fixed point where the same
            system in float64 converges. With a system that has a float64 copy
            (``in_precision``), each float32 candidate then runs at most ``fallback_after``
            iterations, and the sequences that every candidate leaves above tol are solved
            again on the float64 copy (:func:`float64_retry`); ``stats.candidate`` counts that
            solve after the candidates, ``stats.extra["fallback"]`` how many sequences it
            took. With ``"homotopy"`` the sequences still above tol after that are solved by a
            probability-one homotopy (:func:`homotopy_retry`), which reaches a fixed point
            where every local solver stalls at a fold; ``stats.extra["homotopy"]`` counts
            them, their path steps count as iterations.

    Returns:
        ``(H, stats)``: H (B, n, k), the solution (for a failed sequence, the best iterate);
        stats a :class:`SolverStats` with per-sequence iterations, residual, converged flag,
        result code and winning candidate.

    Raises:
        InnError: unknown method or option, an option's value of the wrong type or out of its
            range (:func:`check_solver_options`), a ``start`` of the wrong shape; in strict mode, a
            failed solve.
    """
    kinds = check(system, method, candidates, candidate_mode, start, options)
    plan = pick(system, method, max_iter, options)
    runner = Runner(plan.function, options, tol, torch.Generator().manual_seed(seed), start)
    best, cand = run_candidates(runner, system, kinds, candidate_mode, plan.first_max_iter)
    extra = fallbacks(runner, system, best, cand, kinds, plan)
    stats = best.stats(
        method, candidate=cand, function_evals=runner.counter.f, jacobian_products=runner.counter.jp, extra=extra
    )
    _report(stats, f"forward solve ({method})", tol, strict)
    return best.solution, stats


def check(
    system: FixedPointSystem,
    method: str,
    candidates: Sequence[str] | None,
    candidate_mode: str,
    start: Tensor | None,
    options: dict[str, Any],
) -> tuple[str, ...]:
    """The starting points :func:`solve` runs, in order (``"start"`` first where a warm start
    is given), once the method, its options, the candidate mode, the candidates and the warm
    start's shape are checked.

    Raises:
        InnError: the first of them that is wrong, as one line.
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
    return kinds


@dataclasses.dataclass(frozen=True)
class Plan:
    """What :func:`solve` runs for a method: its solver function, iteration limits and fallback."""

    function: Callable[..., Any]
    max_iter: int
    #: the candidates' limit: ``fallback_after`` where the float64 retry follows, else max_iter
    first_max_iter: int
    #: ``"homotopy"``, ``"float64"`` or None (:func:`solve`'s ``fallback`` option)
    fallback: str | None
    #: whether the float64 retry applies (a fallback, and a system with a float64 copy)
    precise: bool


def pick(system: FixedPointSystem, method: str, max_iter: int | None, options: dict[str, Any]) -> Plan:
    """The registered solver of ``method`` and its limits; takes :func:`solve`'s own options
    (``fallback``, ``fallback_after``) out of ``options``, leaving the solver function's."""
    spec = SOLVERS[method]
    max_iter = spec.max_iter if max_iter is None else int(max_iter)
    # absent: the method's default, or none
    fallback = options.pop(_FALLBACK.name, spec.defaults.get(_FALLBACK.name))
    fallback_after = options.pop(_FALLBACK_AFTER.name, _FALLBACK_AFTER.default)
    precise = fallback is not None and has_float64_copy(system)
    first_max_iter = min(max_iter, fallback_after) if precise else max_iter
    return Plan(spec.function, max_iter, first_max_iter, fallback, precise)


def fallbacks(
    runner: Runner, system: FixedPointSystem, best: SolveResult, cand: Tensor, kinds: tuple[str, ...], plan: Plan
) -> dict[str, int]:
    """Where the candidates ``kinds`` left sequences above tol: the float64 retry
    (:func:`float64_retry`) where ``plan.precise``, then the homotopy (:func:`homotopy_retry`)
    where ``plan.fallback`` is ``"homotopy"``, each as the candidate after the last. Returns
    how many sequences each took (``stats.extra``)."""
    extra: dict[str, int] = {}
    if plan.precise:
        first = kinds[runner.start is not None]  # the first of the candidates proper
        extra.update(float64_retry(runner, system, best, cand, len(kinds), first, plan.first_max_iter, plan.max_iter))
    if plan.fallback == "homotopy":
        extra.update(homotopy_retry(runner, system, best, cand, len(kinds) + plan.precise, plan.precise))
    return extra


def has_float64_copy(system: FixedPointSystem) -> bool:
    """Whether the float64 retry applies: a float32 system whose cell can give a float64 copy."""
    return bool(getattr(system, "has_precision_copy", False)) and system.X.dtype == torch.float32


class Runner:
    """Runs one solver function on stacked starting points of some of the batch's sequences,
    with one :class:`~inn.solvers._common.Counter` for the whole solve. ``best`` (set by the
    retries) is the best iterate so far, the ``"end"`` starting point."""

    def __init__(
        self,
        function: Callable[..., Any],
        options: dict[str, Any],
        tol: float,
        generator: torch.Generator,
        start: Tensor | None,
    ) -> None:
        self.function, self.options, self.tol = function, options, tol
        self.generator, self.start = generator, start
        self.counter = Counter()
        self.best: SolveResult | None = None

    def guess(self, sub: FixedPointSystem, kind: str, rows: Tensor | None) -> Tensor:
        """The starting point ``kind`` of the sequences ``rows`` (None: all), whose system is ``sub``."""
        if kind == "end":  # where the float32 candidates stopped: their lowest-residual iterate
            end = self.best.solution[rows].to(sub.X.dtype)
            return torch.where(torch.isfinite(end), end, torch.zeros_like(end))
        if kind != "start":
            return sub.initial_guess(kind, self.generator)
        return self.start if rows is None else self.start[rows]

    def __call__(
        self, sub: FixedPointSystem, kinds: Sequence[str], rows: Tensor | None = None, *, limit: int
    ) -> tuple[SolveResult, Tensor]:
        """Each sequence of ``sub`` solved from each of ``kinds`` at once, at most ``limit``
        iterations: the winner per sequence (:func:`pick_winner`) and its candidate index."""
        guesses = [self.guess(sub, kind, rows) for kind in kinds]
        stacked = sub.repeat(len(kinds))
        result = self.function(
            stacked, torch.cat(guesses, 0), len(kinds), self.counter, tol=self.tol, max_iter=limit, **self.options
        )
        if not isinstance(result, SolveResult):  # a registered solver that returns the 5-tuple
            result = SolveResult(*result)
        # a small residual far outside the box is no solution
        outside = stacked.outside_bounds(result.solution) & (result.code == int(ResultCode.CONVERGED))
        result.code = result.code.masked_fill(outside, int(ResultCode.OUT_OF_BOUNDS))
        return pick_winner(result, groups=len(kinds))


def unconverged(best: SolveResult) -> Tensor:
    """The indices of the sequences not converged so far."""
    return (best.code != int(ResultCode.CONVERGED)).nonzero().flatten()


def run_candidates(
    runner: Runner, system: FixedPointSystem, kinds: tuple[str, ...], mode: str, limit: int
) -> tuple[SolveResult, Tensor]:
    """The starting points ``kinds`` all at once (``"parallel"``), or each after the other
    for the sequences the earlier ones left unconverged (``"fallback"``)."""
    if mode == "parallel":
        return runner(system, kinds, limit=limit)
    best, cand = runner(system, kinds[:1], limit=limit)
    for index, kind in enumerate(kinds[1:], start=1):
        retry = unconverged(best)
        if retry.numel() == 0:
            break
        log.debug("retrying %d sequence(s) from candidate %r", retry.numel(), kind)
        take_better(best, cand, retry, index, runner(system.select(retry), [kind], retry, limit=limit))
    return best, cand


def float64_retry(
    runner: Runner,
    system: FixedPointSystem,
    best: SolveResult,
    cand: Tensor,
    index: int,
    first: str,
    first_limit: int,
    max_iter: int,
) -> dict[str, int]:
    """The sequences every float32 candidate left above tol, solved again on the float64 copy
    of their systems: first for ``first_limit`` iterations from where float32 stopped (most
    misses stop a few steps short of tol there), then those still above tol from the ``first``
    candidate with ``max_iter``; a better result replaces the float32 one as candidate
    ``index``. Returns ``{"fallback": how many}`` (empty if none needed it)."""
    retry = unconverged(best)
    if not retry.numel():
        return {}
    log.debug("solving %d sequence(s) again in float64", retry.numel())
    runner.best = best
    extra = {"fallback": int(retry.numel())}
    for kind, limit in (("end", first_limit), (first, max_iter)):
        retried = runner(system.select(retry).in_precision(torch.float64), [kind], retry, limit=limit)
        take_better(best, cand, retry, index, retried)
        retry = unconverged(best)
        if retry.numel() == 0:
            break
    return extra


def homotopy_retry(
    runner: Runner, system: FixedPointSystem, best: SolveResult, cand: Tensor, index: int, precise: bool
) -> dict[str, int]:
    """The sequences still above tol, each solved by the homotopy (:func:`_homotopy_fallback`)
    as candidate ``index``, on float64 systems only (the float64 copy where ``precise``, or a
    float64 model's own: in float32 its corrections cannot settle, so a float32 system without
    the copy keeps its misses). Returns ``{"homotopy": how many}`` (empty if none)."""
    retry = unconverged(best)
    if not retry.numel() or not (precise or system.X.dtype == torch.float64):
        return {}
    exact = system.select(retry)
    _homotopy_fallback(
        exact.in_precision(torch.float64) if precise else exact,
        retry,
        runner.tol,
        runner.generator,
        runner.counter,
        best,
        cand,
        index,
    )
    return {"homotopy": int(retry.numel())}


def _homotopy_fallback(
    exact,
    rows: Tensor,
    tol: float,
    generator: torch.Generator,
    counter: Counter,
    best: SolveResult,
    cand: Tensor,
    index: int,
) -> None:
    """The sequences ``rows``, each solved by the homotopy of :mod:`inn.solvers.homotopy` on
    ``exact``, their float64 systems (in the order of ``rows``), from a random start in the
    box; its path steps count as iterations, the sequence as candidate ``index``. One sequence
    at a time: each follows its own curve, and they are rare."""
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
        best.iterations[row] += steps
        if c1 == int(ResultCode.CONVERGED) and bool(one.outside_bounds(H1)[0]):
            c1 = int(ResultCode.OUT_OF_BOUNDS)
        if c1 == int(ResultCode.CONVERGED) or r1 < float(best.residual[row]):
            best.solution[row] = H1[0].to(best.solution.dtype)
            best.residual[row], best.code[row], cand[row] = r1, c1, index


def take_better(best: SolveResult, cand: Tensor, rows: Tensor, index: int, retried: tuple[SolveResult, Tensor]) -> None:
    """Where a retry of ``rows`` converged or left a smaller residual, take its solution
    (in the best's dtype), residual and code, and name candidate ``index``; add its iterations."""
    other, _ = retried
    better = (other.code == int(ResultCode.CONVERGED)) | (other.residual.to(best.residual.dtype) < best.residual[rows])
    idx = rows[better]
    best.solution[idx] = other.solution[better].to(best.solution.dtype)
    best.residual[idx], best.code[idx] = other.residual[better].to(best.residual.dtype), other.code[better]
    cand[idx] = index
    best.iterations[rows] += other.iterations
    best.inner_iterations[rows] += other.inner_iterations


def pick_winner(result: SolveResult, groups: int) -> tuple[SolveResult, Tensor]:
    """Per sequence, the candidate that converged first (fewest iterations, earliest listed),
    else the one with the lowest residual, and its index. Iterations are summed over all
    candidates run."""
    H, newton, krylov, res, code = result
    C = groups
    B = H.shape[0] // C
    conv = (code == int(ResultCode.CONVERGED)).view(C, B)
    big = torch.iinfo(torch.int64).max // 4
    order_conv = torch.where(conv, newton.view(C, B) * C + torch.arange(C, device=H.device).view(C, 1), big)
    res_v = torch.where(torch.isfinite(res), res, torch.full_like(res, float("inf"))).view(C, B)
    cand = torch.where(conv.any(0), order_conv.argmin(0), res_v.argmin(0))
    rows = cand * B + torch.arange(B, device=H.device)
    return SolveResult(H[rows], newton.view(C, B).sum(0), krylov.view(C, B).sum(0), res[rows], code[rows]), cand


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
