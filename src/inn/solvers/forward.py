"""The forward solve, :func:`solve`: H = F(H) for a batch of independent systems, by name.

It checks the options once, builds the starting candidates, runs the registered solver
(:data:`inn.solvers.table.SOLVERS`) on them, falls back where a float32 solve misses tol
(float64, then a homotopy), and reports every sequence's outcome in a
:class:`~inn.solvers.SolverStats`; a miss warns (:class:`~inn.solvers.ConvergenceWarning`) or,
``strict``, raises.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from inn.errors import InnError
from inn.solvers._common import ConvergenceWarning, Counter, FixedPointSystem, ResultCode, SolverStats
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

