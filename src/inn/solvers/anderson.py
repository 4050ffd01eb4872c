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

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from inn.solvers import cuda_graph as graphs
from inn.solvers._anderson_options import (
    LOW_PRECISION_MAX_ITER,
    chunk_length,
    compaction_pays,
    first_chunk_step,
    low_precision_version,
    sweep_map,
)
from inn.solvers._anderson_options import SWEEPS as SWEEPS  # importable from here as before
from inn.solvers._anderson_options import low_precision_pays as low_precision_pays  # importable from here as before
from inn.solvers._common import Counter, ResultCode, SolveResult, batch_norm, bcast, relative_residual
from inn.solvers._newton import group_any

INF = float("inf")


def anderson_iterate(
    fmap: Callable[[Tensor], Tensor | tuple[Tensor, Tensor]],
    x: Tensor,
    scale: Callable[[Tensor], Tensor],
    *,
    tol: float,
    max_iter: int,
    groups: int = 1,
    memory: int = 5,
    beta: float = 1.0,
    regularization: float = 1e-8,
    divergence_factor: float = 1e4,
    true_residual: Callable[[Tensor], Tensor] | None = None,
    first: Tensor | tuple[Tensor, Tensor] | None = None,
    restrict: Restrict | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor, int, int]:
    """Iterate x <- fmap(x) with Anderson(memory) until the residual is below ``tol``.

    The residual is ||fmap(x) - x|| / scale(x), or, when ``true_residual`` is given, that
    function's value, evaluated only when the proxy is below the sample's threshold (which
    tightens if the check fails). A map that computes the true residual of its input anyway
    (a preconditioned step) returns ``(T(x), residual of x)``; that residual is then the test,
    at no extra cost. ``first``: fmap(x) when the caller has it already (cheaper). Returns
    (x, iterations, residual, code, fmap evaluations,
    true-residual evaluations), per sample; each sample keeps its lowest-residual iterate and
    stops when done.

    ``restrict``: ``rows -> (fmap, scale, true_residual)`` of the samples at ``rows`` alone
    (indices into x's batch): with it, the samples that are done leave the batch once a
    quarter of it is done (:meth:`AndersonState.run`), so that a batch costs what its samples
    need rather than its slowest sample's iterations times its size. Only for ``groups == 1``.
    """
    state = AndersonState(
        x,
        tol=tol,
        groups=groups,
        memory=memory,
        beta=beta,
        regularization=regularization,
        divergence_factor=divergence_factor,
    )
    evals, reported, true_residual = state.run(fmap, scale, 0, max_iter, true_residual, first, restrict)
    return (*state.finish(true_residual, reported), evals, state.checks)


#: ``rows -> (map, scale of its residual, true residual or None)`` of the samples at ``rows``
Restrict = Callable[[Tensor], tuple[Callable, Callable[[Tensor], Tensor], Callable[[Tensor], Tensor] | None]]

#: the working batch is compacted once at most this share of it is still iterating
COMPACT_AT = 0.75


class AndersonState:
    """One Anderson(memory) solve in progress: its options, per-sample state and ring buffers.

    A step is split where the eager loop asks the host whether every sample is done:
    :meth:`observe` takes in the map's value at x (best iterate, failure flags), :meth:`settle`
    marks samples verified and done, and, unless the solve stops there, :meth:`advance` moves
    to the extrapolated next iterate. :meth:`run` (:func:`anderson_iterate`) asks after every
    step; :func:`anderson_chunked` runs fixed segments of steps without asking, the work that a
    CUDA graph captures (:mod:`inn.solvers.cuda_graph`). A sample that is done stays put (x
    is its best iterate; its flags and count no longer change), so steps taken after it
    stopped change nothing of its result.

    The fields a step rebinds (:data:`FIELDS`) have buffers allocated once: :meth:`reset_`
    refills them and :meth:`persist_` copies a segment's results back into them, so that a
    captured segment reads and writes the same addresses at every replay.
    """

    #: the per-sample fields that steps rebind
    FIELDS = (
        "x",
        "best_x",
        "best_res",
        "threshold",
        "verified",
        "true_res",
        "iterations",
        "nonfinite",
        "diverged",
        "done",
        "too_large",
    )

    def __init__(
        self,
        x: Tensor,
        *,
        tol: float,
        groups: int = 1,
        memory: int = 5,
        beta: float = 1.0,
        regularization: float = 1e-8,
        divergence_factor: float = 1e4,
    ) -> None:
        B, N = x.shape[0], x[0].numel()
        dev, dt = x.device, x.dtype
        self.tol, self.groups, self.memory, self.beta = tol, groups, memory, beta
        self.divergence_factor = divergence_factor
        self.tiny = torch.finfo(dt).tiny
        self.reg = max(regularization, 100 * torch.finfo(dt).eps)
        self.eye = torch.eye(max(memory, 1), dtype=dt, device=dev)
        self.ones = torch.ones(B, max(memory, 1), 1, dtype=dt, device=dev)
        # ring buffers of the last ``memory`` iterates (B, m, N): no re-stacking
        self.Gb = x.new_empty(B, memory, N) if memory > 0 else None
        self.Fb = x.new_empty(B, memory, N) if memory > 0 else None
        self.Xb = x.new_empty(B, memory, N) if memory > 0 and beta != 1.0 else None
        self.x, self.best_x = torch.empty_like(x), torch.empty_like(x)
        self.best_res, self.threshold, self.true_res, self.too_large = (x.new_empty(B) for _ in range(4))
        self.verified, self.nonfinite, self.diverged, self.done = (
            torch.empty(B, dtype=torch.bool, device=dev) for _ in range(4)
        )
        self.iterations = torch.empty(B, dtype=torch.int64, device=dev)
        self.checks = 0  # true-residual evaluations
        self._buffers = {name: getattr(self, name) for name in self.FIELDS}
        #: after a compaction (:meth:`select_`): the batch rows the working samples are, and the
        #: finished results of the whole batch (x, iterations, residual, code); else None
        self.rows: Tensor | None = None
        self.out: tuple[Tensor, Tensor, Tensor, Tensor] | None = None
        self.reset_(x)

    def reset_(self, x: Tensor) -> None:
        """Start again from x: no best iterate yet, nothing verified, failed or counted."""
        self.x.copy_(x)
        self.best_x.copy_(x)
        for field in (self.best_res, self.true_res, self.too_large):
            field.fill_(INF)
        self.threshold.fill_(float(self.tol))  # true residual <= tol
        for field in (self.verified, self.nonfinite, self.diverged, self.done, self.iterations):
            field.zero_()

    def persist_(self) -> None:
        """Copy the fields that steps rebound into their buffers and point the fields at the
        buffers again (the end of a segment). No field is ever rebound to another's buffer, so
        the order of the copies does not matter."""
        for name, buffer in self._buffers.items():
            value = getattr(self, name)
            if value is not buffer:
                buffer.copy_(value)
                setattr(self, name, buffer)

    def rewind(self) -> None:
        """Point the fields at their buffers, dropping whatever an unfinished segment rebound
        (a capture that failed part-way: the buffers hold the state before it)."""
        for name, buffer in self._buffers.items():
            setattr(self, name, buffer)

    def observe(
        self, fx: Tensor | tuple[Tensor, Tensor], scale: Callable[[Tensor], Tensor], it: int
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        """Take in the map's value at x in step ``it``, T(x) or (T(x), x's residual): keep each
        active sample's lowest-residual iterate, flag non-finite and diverged samples. Returns
        (T(x), T(x) - x, the reported residual or None)."""
        fx, reported = fx if isinstance(fx, tuple) else (fx, None)
        x = self.x
        g = fx - x
        gnorm = batch_norm(g)
        # from x = 0 the relative residual is +inf (float32 overflows ||g|| / tiny): not a
        # failure, only not converged; a NaN or Inf in the step itself is one
        finite = gnorm < INF  # False for NaN too
        res = gnorm / scale(x).clamp_min(self.tiny) if reported is None else reported
        res = torch.where(finite, res, gnorm)
        active = ~self.done
        improve = active & (res < self.best_res)
        self.best_x = torch.where(bcast(improve, x), x, self.best_x)
        self.best_res = torch.where(improve, res, self.best_res)
        self.nonfinite = self.nonfinite | (active & ~finite)
        if it >= 2:  # (from x = 0 the first residual is meaningless: inf)
            self.diverged = self.diverged | (active & (res > self.too_large))
        elif it == 1:  # divergence threshold: divergence_factor x the residual after the first step,
            # never below tol (a first step that lands on the solution, e.g. a sequence with no
            # neighbours, must not make the next step's round-off a divergence)
            self.too_large = (self.divergence_factor * res).clamp_min(max(self.tol, self.tiny))
        return fx, g, reported

    def settle(self, true_residual: Callable[[Tensor], Tensor] | None = None, reported: Tensor | None = None) -> None:
        """Mark samples verified (residual at most tol) and done (verified, or another
        candidate of the same sequence verified, or failed). With no ``true_residual``, or a
        map that reports it, without a host sync; else the red-black sweep's check, which
        evaluates the true residual of the samples the proxy calls converged (host syncs)."""
        groups, tol = self.groups, self.tol
        failed = self.nonfinite | self.diverged
        if true_residual is None or reported is not None:
            self.verified = self.verified | (self.best_res <= tol)  # a failed sample stopped before it could pass
            self.true_res = self.best_res
        else:
            proxy_ok = (self.best_res <= self.threshold) & ~failed & ~self.verified
            if bool(group_any(proxy_ok, groups).any()) and bool(
                (group_any(proxy_ok, groups) | group_any(self.verified, groups) | failed).all()
            ):
                # check every candidate the proxy calls converged, in one batched evaluation
                r = true_residual(self.best_x)
                self.checks += 1
                self.true_res = torch.where(proxy_ok, r, self.true_res)
                passed = proxy_ok & (r <= tol)
                self.verified = self.verified | passed
                retry = proxy_ok & ~passed
                self.threshold = torch.where(retry, self.threshold * torch.clamp(tol / r, 0.05, 0.5), self.threshold)
                self.best_res = self.best_res.masked_fill(retry, INF)
        self.done = (group_any(self.verified, groups) if groups > 1 else self.verified) | failed

    def advance(self, it: int, fx: Tensor, g: Tensor) -> None:
        """Count step ``it`` for the samples not done and move to the next iterate: Anderson's
        extrapolation from the ring buffers (step ``it`` writes slot it % memory; they then hold
        min(it + 1, memory) iterates), or the damped step without memory. Finished or failed
        samples stop moving (their rows cost a little, but stay put at their best iterate)."""
        self.iterations = self.iterations + ~self.done
        x, memory, beta = self.x, self.memory, self.beta
        B = x.shape[0]
        if memory <= 0:
            x_next = x + beta * g
        else:
            slot = it % memory  # slots are written before they are read
            self.Gb[:, slot] = g.reshape(B, -1)
            self.Fb[:, slot] = fx.reshape(B, -1)
            if self.Xb is not None:
                self.Xb[:, slot] = x.reshape(B, -1)
            m = min(it + 1, memory)
            gram = self.Gb[:, :m] @ self.Gb[:, :m].mT  # (B, m, m); the order of the slots does not matter
            diagonal = gram.diagonal(dim1=-2, dim2=-1)
            diagonal.add_(diagonal.mean(-1, keepdim=True).clamp_min(self.tiny), alpha=self.reg)
            # minimise alpha^T gram alpha subject to sum(alpha) = 1: alpha ~ gram^{-1} 1
            sol, info = torch.linalg.solve_ex(gram, self.ones[:, :m])
            alpha = sol / sol.sum(1, keepdim=True)
            usable = (info == 0) & (alpha.sum((1, 2)).abs() < INF)  # False for NaN too
            alpha = torch.where(bcast(usable, alpha), alpha, self.eye[:m, slot, None])  # else: the plain step
            x_next = (alpha.mT @ self.Fb[:, :m]).reshape(x.shape)
            if self.Xb is not None:
                x_next = beta * x_next + (1 - beta) * (alpha.mT @ self.Xb[:, :m]).reshape(x.shape)
        self.x = torch.where(bcast(self.done, x), self.best_x, x_next)

    def run(
        self,
        fmap: Callable[[Tensor], Tensor | tuple[Tensor, Tensor]],
        scale: Callable[[Tensor], Tensor],
        start: int,
        max_iter: int,
        true_residual: Callable[[Tensor], Tensor] | None = None,
        first: Tensor | tuple[Tensor, Tensor] | None = None,
        restrict: Restrict | None = None,
    ) -> tuple[int, Tensor | None, Callable[[Tensor], Tensor] | None]:
        """Steps ``start`` .. ``max_iter``, stopping as soon as every sample is done: the eager
        loop. Returns the number of map evaluations, the last reported residual (None when
        the map reports none) and the true residual of the working samples (``restrict``'s
        after a compaction). ``first``: the map's value at x in step 0, when known.

        With ``restrict`` (see :func:`anderson_iterate`), whenever at most :data:`COMPACT_AT`
        of the working samples are still iterating, the finished ones are stowed and the rest
        go on alone (:meth:`select_`): per sample the same steps (Anderson's weights are each
        sample's own), at the cost of their own iterations only."""
        evals, reported = 0, None
        for it in range(start, max_iter + 1):
            fx, g, reported = self.observe(first if it == 0 and first is not None else fmap(self.x), scale, it)
            evals += 1
            self.settle(true_residual, reported)
            # Every step is a handful of whole-batch tensor operations and this host sync (are
            # all samples done?): on a GPU at these sizes the launches, not the arithmetic, set
            # the time (anderson_chunked runs steps without it).
            if bool(self.done.all()) or it == max_iter:
                break
            if restrict is not None and self.groups == 1:
                keep = (~self.done).nonzero().flatten()
                if keep.numel() <= COMPACT_AT * self.done.numel():
                    fx, g = fx[keep], g[keep]
                    self.select_(keep)
                    fmap, scale, true_residual = restrict(self.rows)
            self.advance(it, fx, g)
        return evals, reported, true_residual

    def select_(self, keep: Tensor) -> None:
        """Stow the finished results of the working samples not in ``keep`` (local indices)
        and go on with those in ``keep`` alone: every per-sample field and ring buffer is cut
        to them. Eager solves only (a captured segment needs fixed shapes)."""
        B0 = self.done.numel() if self.rows is None else self.out[0].shape[0]
        if self.rows is None:
            self.rows = torch.arange(B0, device=keep.device)
            x = self.best_x
            self.out = (
                torch.empty_like(x),
                torch.empty_like(self.iterations),
                x.new_empty(B0),
                torch.empty_like(self.iterations),
            )
        stowed = torch.ones_like(self.done)
        stowed[keep] = False
        self._stow(stowed)
        for name in self.FIELDS:
            setattr(self, name, getattr(self, name)[keep])
        for name in ("Gb", "Fb", "Xb"):
            if getattr(self, name) is not None:
                setattr(self, name, getattr(self, name)[keep])
        self.ones = self.ones[: keep.numel()]
        self.rows = self.rows[keep]

    def _stow(self, which: Tensor) -> None:
        """Write the results of the working samples ``which`` (a mask) into :attr:`out`."""
        x, iterations, res, code = self._results()
        rows = self.rows[which]
        for out, value in zip(self.out, (x, iterations, res, code)):
            out[rows] = value[which]

    def finish(
        self, true_residual: Callable[[Tensor], Tensor] | None = None, reported: Tensor | None = None
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """(best iterate, iterations, residual, :class:`ResultCode`) per sample. Under a proxy
        residual, samples that ran out of iterations get their true residual reported too
        (``true_residual``: the working samples' after a compaction)."""
        if true_residual is not None and reported is None:
            failed = self.nonfinite | self.diverged
            unchecked = ~self.verified & ~failed & ~torch.isfinite(self.true_res)
            if bool(unchecked.any()):
                r = true_residual(self.best_x)
                self.checks += 1
                self.true_res = torch.where(unchecked, r, self.true_res)
            self.verified = self.verified | (~failed & (self.true_res <= self.tol))
        if self.rows is None:
            return self._results()
        self._stow(torch.ones_like(self.done))
        return self.out

    def _results(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """(best iterate, iterations, residual, code) of the working samples as they stand."""
        failed = self.nonfinite | self.diverged
        verified, true_res = self.verified, self.true_res
        converged = verified & ~failed
        B, dev = verified.shape[0], verified.device
        code = torch.full((B,), int(ResultCode.MAX_ITERATIONS), dtype=torch.int64, device=dev)
        code = code.masked_fill(self.diverged, int(ResultCode.DIVERGED)).masked_fill(
            self.nonfinite, int(ResultCode.NONFINITE)
        )
        code = code.masked_fill(converged, int(ResultCode.CONVERGED))
        true_res = torch.where(failed, self.best_res, true_res)
        return self.best_x, self.iterations, true_res, code


#: (inputs) -> (map, scale of the residual): how a segment makes its map from the per-batch inputs
Build = Callable[[Any], tuple[Callable[[Tensor], Tensor | tuple[Tensor, Tensor]], Callable[[Tensor], Tensor]]]


def anderson_chunked(
    build: Build,
    inputs: Any,
    x: Tensor,
    *,
    tol: float,
    max_iter: int,
    first: Tensor | tuple[Tensor, Tensor] | None = None,
    steps: int = graphs.DEFAULT_STEPS,
    kind: str = "",
    groups: int = 1,
    memory: int = 5,
    beta: float = 1.0,
    regularization: float = 1e-8,
    divergence_factor: float = 1e4,
) -> tuple[Tensor, Tensor, Tensor, Tensor, int, int]:
    """:func:`anderson_iterate`'s solve in fixed segments of steps without a host sync inside,
    asking whether every sample is done only between segments: the form a CUDA graph can
    capture and replay (on a CUDA device the segments are captured once per shape and
    replayed, elsewhere they run as they are: :func:`inn.solvers.cuda_graph.segments`).

    ``build(inputs)`` makes the map and the scale of its residual from the per-batch
    ``inputs`` (a system, a linearisation, tensors, tuples of them). Each segment builds them
    itself, so that a captured segment reads nothing but the tensors of ``inputs``, which a
    replay's static copies are refilled from. The map must report its residual, or need no
    true-residual check (the tridiagonal and Jacobi sweeps; the red-black sweep's check syncs
    with the host). ``kind`` names the map in the graph cache's key.

    The segments: steps 0 .. s - 1 from x (s = :func:`first_chunk_step`), then chunks of
    ``steps`` steps (rounded up to a multiple of ``memory``: :func:`chunk_length`) while a
    whole chunk stays short of ``max_iter``, then the eager loop for what remains. Samples
    that are done stay put, so the steps a segment takes after everyone stopped change
    nothing: the iterates, iterations, residuals and codes are :func:`anderson_iterate`'s. The
    map evaluations returned count those extra steps too.
    """
    options = dict(
        tol=tol,
        groups=groups,
        memory=memory,
        beta=beta,
        regularization=regularization,
        divergence_factor=divergence_factor,
    )
    start, length = first_chunk_step(memory), chunk_length(steps, memory)
    if start > max_iter:  # no room for a segment
        fmap, scale = build(inputs)
        return anderson_iterate(fmap, x, scale, max_iter=max_iter, first=first, **options)
    parts = graphs.segments(
        (kind, start, length, *options.items()), inputs, x, first, lambda like: AndersonState(like, **options)
    )
    state = parts.state
    parts.run("start", lambda: _segment(state, build, parts.inputs, range(start), parts.x, parts.first))
    # every chunk takes steps start .. start + length - 1: what a step does depends on its
    # index only through index % memory (the slot) and index >= 2, the same for all chunks
    chunk = range(start, start + length)
    it = evals = start
    done = bool(state.done.all())
    while not done and it + length <= max_iter:
        parts.run("chunk", lambda: _segment(state, build, parts.inputs, chunk))
        it, evals = it + length, evals + length
        done = bool(state.done.all())
    if not done:
        fmap, scale = build(parts.inputs)
        evals += state.run(fmap, scale, it, max_iter)[0]
        state.persist_()  # between segments the fields are their buffers, which the next solve's replays use
    best_x, iterations, res, code = state.finish()
    return best_x.clone(), iterations.clone(), res, code, evals, 0  # (the buffers serve the next solve)


def _segment(
    state: AndersonState,
    build: Build,
    inputs: Any,
    steps: range,
    x: Tensor | None = None,
    first: Tensor | tuple[Tensor, Tensor] | None = None,
) -> None:
    """Steps ``steps`` with no host sync, the fields persisted at the end: one segment of
    :func:`anderson_chunked`, what a CUDA graph captures. With ``x`` the state starts again
    from it, and step 0 takes ``first`` as the map's value when given."""
    fmap, scale = build(inputs)
    if x is not None:
        state.reset_(x)
    for it in steps:
        fx, g, reported = state.observe(first if it == 0 and first is not None else fmap(state.x), scale, it)
        state.settle(reported=reported)
        state.advance(it, fx, g)
    state.persist_()


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
