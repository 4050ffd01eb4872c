"""How an Anderson solve's steps are driven: :func:`anderson_iterate`, the eager loop that asks
the host after every step whether every sample is done, and :func:`anderson_chunked`, fixed
segments of steps without that sync, the work a CUDA graph captures and replays
(:mod:`inn.solvers.cuda_graph`). Both step an :class:`~inn.solvers._anderson_state.AndersonState`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import Tensor

from inn.solvers import cuda_graph as graphs
from inn.solvers._anderson_options import chunk_length, first_chunk_step
from inn.solvers._anderson_state import AndersonState, Restrict


def anderson_iterate(
    fmap: Callable[[Tensor], Tensor | tuple[Tensor, Tensor]],
    x: Tensor,
    scale: Callable[[Tensor], Tensor],
    *,
    tol: float,
    max_iter: int,
    true_residual: Callable[[Tensor], Tensor] | None = None,
    first: Tensor | tuple[Tensor, Tensor] | None = None,
    restrict: Restrict | None = None,
    **options: Any,
) -> tuple[Tensor, Tensor, Tensor, Tensor, int, int]:
    """Iterate x <- fmap(x) with Anderson(memory) until the residual is below ``tol``;
    ``options``: :class:`AndersonState`'s (``groups``, ``memory``, ``beta``,
    ``regularization``, ``divergence_factor``).

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
    state = AndersonState(x, tol=tol, **options)
    evals, reported, true_residual = state.run(fmap, scale, 0, max_iter, true_residual, first, restrict)
    return (*state.finish(true_residual, reported), evals, state.checks)


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
    memory: int = 5,
    **options: Any,
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

    ``memory`` and ``options``: :class:`AndersonState`'s, as :func:`anderson_iterate` takes them.
    """
    options = {"tol": tol, "memory": memory, **options}  # the state's, named in the graph cache's key
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
