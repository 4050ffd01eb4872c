"""One Anderson(m) solve in progress, :class:`AndersonState`: the per-sample state, the ring
buffers of the last m iterates, and the step split where a loop asks the host whether every
sample is done (:meth:`~AndersonState.observe`, :meth:`~AndersonState.settle`,
:meth:`~AndersonState.advance`); its eager loop (:meth:`~AndersonState.run`), with the
compaction of the batch, and the per-sample results. The loops that drive it are in
:mod:`inn.solvers._anderson_loops`, the solver entry in :mod:`inn.solvers.anderson`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from inn.solvers._common import ResultCode, batch_norm, bcast
from inn.solvers._newton import group_any

INF = float("inf")

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
        """Allocate the state of a solve from x (B, ...) to relative residual ``tol``: ``groups``
        candidates per sequence (stacked, one sequence's verified candidate stops them all),
        Anderson's ``memory`` (0: the damped step), damping ``beta``, the Tikhonov term
        ``regularization`` of the least-squares weights, and ``divergence_factor``, the
        multiple of the first step's residual that counts as diverged."""
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
