"""CUDA graphs of the Anderson solves: one host sync per chunk of steps instead of per step.

On a GPU the implicit layer is bound by kernel launches: an Anderson step is about 44 small
operations and one host sync (are all samples done?). :func:`inn.solvers.anderson.anderson_chunked`
runs a solve as fixed segments of steps with no host sync inside (steps 0 .. s - 1, then
chunks of ``cuda_graph_steps``); here, on a CUDA device, each segment is captured once as a
CUDA graph (``torch.cuda.graph``) and replayed, and the host asks whether every sample is
done only between segments. The forward ``anderson`` solve (tridiagonal or Jacobi sweep) and
the ``anderson`` adjoint of the backward pass use it.

- Cache: one entry per solve signature (what the map is, the Anderson options, the names,
  shapes, dtypes and device of every input tensor), least recently used first out past
  :data:`CACHE_SIZE`. The trainer batches by length buckets, so shapes repeat.
- Static buffers: an entry holds copies of its inputs (the system or linearisation:
  ``static_clone`` of :class:`inn.nn.system.BatchTensors`; tensors), of the starting
  point and of the Anderson state; a later solve of the same signature copies its own into
  them (``load_``) and replays.
- Capture: a segment's first run is its warm-up, on a side stream, and its result is kept;
  the segment is then captured and replayed from the next solve on.
- Fallback: a capture that fails leaves that entry eager; a path that cannot be captured
  (the red-black sweep's true-residual checks) runs eagerly; ``cuda_graph=True`` where the
  iterates are not on a CUDA device runs eagerly. Each with one :class:`CudaGraphWarning` per
  reason and process.

Options (validated by :func:`check`): the ``anderson`` solver's ``cuda_graph`` (False by
default, True, or ``"auto"``: on where the iterates are on a CUDA device) and
``cuda_graph_steps`` (5); the layer's ``backward_cuda_graph`` (default: the forward's
``cuda_graph``). The segments' arithmetic is tested on the CPU against the eager loop, the
replays on a GPU (tests/test_cuda_graph.py); on an H100 the trained paper-size INN's forward
and backward took 0.4x the eager time at n <= 40, the same at n = 160, with the same
iterations and gradients (docs/implicit-layer.md).
"""

from __future__ import annotations

import logging
import warnings
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from inn.errors import InnError

log = logging.getLogger(__name__)

#: steps per captured chunk by default (``cuda_graph_steps``; rounded up to a multiple of Anderson's memory)
DEFAULT_STEPS = 5

#: captured solve signatures kept (each holds copies of its inputs and state, and its graphs'
#: GPU memory: about 25 MiB at k = 200, B = 20, n <= 40). A training solves one signature per
#: batch length for each of its forward, adjoint and evaluation solves (a walks training of 40
#: lengths: 120); past this size entries are captured anew, with one warning.
CACHE_SIZE = 128


class CudaGraphWarning(RuntimeWarning):
    """A solve asked for CUDA graphs runs eagerly (a capture failed, or the path cannot be captured)."""


def check(setting: Any, name: str = "cuda_graph") -> None:
    """Raise :class:`InnError` unless ``setting`` is True, False or ``"auto"``."""
    if not (isinstance(setting, bool) or setting == "auto"):
        raise InnError(f"{name} must be true, false or 'auto', not {setting!r}")


def check_steps(steps: Any, name: str = "cuda_graph_steps") -> None:
    """Raise :class:`InnError` unless ``steps`` (steps per captured chunk) is a positive integer."""
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise InnError(f"{name} must be a positive integer, not {steps!r}")


def use(setting: bool | str, device: torch.device, obstacle: str | None = None) -> bool:
    """Whether a solve whose iterates live on ``device`` runs in captured segments.

    False: never. ``"auto"``: on a CUDA device. True: on a CUDA device; elsewhere the solve
    runs eagerly, with one warning. ``obstacle``: why this solve's path cannot be captured
    (then it runs eagerly, with one warning, if graphs were wanted).
    """
    check(setting)
    if setting is False or (setting == "auto" and device.type != "cuda"):
        return False
    if device.type != "cuda":
        warn_once(
            "device",
            f"cuda_graph=True, but the solve runs on {device.type}, not on a CUDA device: "
            "solving eagerly ('auto' captures on CUDA devices only)",
        )
        return False
    if obstacle:
        warn_once(obstacle, f"cuda_graph: {obstacle}; solving eagerly")
        return False
    return True


_WARNED: set[str] = set()  # reasons already warned about in this process


def warn_once(reason: str, message: str) -> None:
    """One :class:`CudaGraphWarning` per ``reason`` and process; later ones go to the debug log."""
    if reason in _WARNED:
        log.debug(message)
        return
    _WARNED.add(reason)
    warnings.warn(message, CudaGraphWarning, stacklevel=3)


def signature(value: Any) -> tuple:
    """What a captured segment's inputs must match: the structure and every tensor's shape,
    dtype and device (a :class:`~inn.nn.system.BatchTensors` by its tensors' names)."""
    if value is None:
        return ()
    if isinstance(value, Tensor):
        return tuple(value.shape), value.dtype, value.device
    if type(value) is tuple:
        return tuple(signature(v) for v in value)
    return type(value).__name__, tuple((name, *signature(t)) for name, t in value.tensors().items())


def static_copy(value: Any) -> Any:
    """A copy of ``value`` (None, a tensor, a tuple, a ``BatchTensors``) with storage of its own."""
    if value is None:
        return None
    if isinstance(value, Tensor):
        return value.clone()
    if type(value) is tuple:
        return tuple(static_copy(v) for v in value)
    return value.static_clone()


def load_static(static: Any, value: Any) -> None:
    """Copy ``value`` into ``static``, its :func:`static_copy` (of the same signature)."""
    if isinstance(static, Tensor):
        static.copy_(value)
    elif type(static) is tuple:
        for mine, theirs in zip(static, value):
            load_static(mine, theirs)
    elif static is not None:
        static.load_(value)


class EagerSegments:
    """A chunked solve's segments, run as they are: the inputs, starting point, first map value
    and Anderson state that the segments read (as given: no CUDA device)."""

    def __init__(self, inputs: Any, x: Tensor, first: Any, state: Any) -> None:
        self.inputs, self.x, self.first, self.state = inputs, x, first, state

    def run(self, name: str, segment: Callable[[], None]) -> None:
        """Run the segment called ``name``."""
        segment()


class GraphedSegments(EagerSegments):
    """Static copies of a solve's inputs, starting point, first map value and Anderson state
    (one cache entry), and each segment's captured CUDA graph."""

    def __init__(self, inputs: Any, x: Tensor, first: Any, make_state: Callable[[Tensor], Any]) -> None:
        super().__init__(static_copy(inputs), x.clone(), static_copy(first), make_state(x))
        self.graphs: dict[str, torch.cuda.CUDAGraph] = {}
        self.eager = False  # a capture failed: run every segment as it is

    def load(self, inputs: Any, x: Tensor, first: Any) -> None:
        """Refill the static copies with another solve's inputs of the same signature."""
        load_static(self.inputs, inputs)
        self.x.copy_(x)
        load_static(self.first, first)

    def run(self, name: str, segment: Callable[[], None]) -> None:
        """Replay the segment's graph; on its first run, run it on a side stream (the warm-up
        that capture needs, whose result is kept) and capture it for the next solves."""
        graph = self.graphs.get(name)
        if graph is not None:
            graph.replay()
            return
        if self.eager:
            segment()
            return
        current = torch.cuda.current_stream(self.x.device)
        side = torch.cuda.Stream(self.x.device)
        side.wait_stream(current)
        with torch.cuda.stream(side):
            segment()
        current.wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                segment()  # recorded, not run: the state keeps the warm-up's result
        except Exception as error:  # an operation that syncs with the host or cannot be captured
            torch.cuda.set_stream(current)  # (a failed capture_end leaves the capture stream current)
            self.state.rewind()
            self.eager = True
            warn_once(
                "capture",
                f"capturing a CUDA graph of the Anderson solve failed ({type(error).__name__}: "
                f"{error}); solving eagerly",
            )
            return
        self.graphs[name] = graph


_CACHE: OrderedDict[tuple, GraphedSegments] = OrderedDict()
_EVICTED: set[tuple] = set()  # signatures the cache has let go of (a later capture of one is thrash)


def segments(key: tuple, inputs: Any, x: Tensor, first: Any, make_state: Callable[[Tensor], Any]) -> EagerSegments:
    """The segments of one chunked solve: on a CUDA device, the cache entry for ``key`` and
    the inputs' signature (made on first use, refilled with ``inputs``, ``x`` and ``first``
    after), captured and replayed; elsewhere run as they are on a fresh state."""
    if x.device.type != "cuda":
        return EagerSegments(inputs, x, first, make_state(x))
    full_key = (key, signature(inputs), signature(x), signature(first))
    entry, made = cached(full_key, lambda: GraphedSegments(inputs, x, first, make_state))
    if not made:
        entry.load(inputs, x, first)
    return entry


def cached(key: tuple, make: Callable[[], Any]) -> tuple[Any, bool]:
    """The cache entry for ``key``, and whether ``make()`` made it now (the cache held none).

    The entry becomes the most recently used; the least recently used go past
    :data:`CACHE_SIZE`. A signature made again after it was evicted means that the run solves
    more signatures than the cache holds (a training's lengths times its forward, adjoint and
    evaluation solves): every such solve is captured anew, which costs more than its graphs
    save (measured on a GPU: a walks training of 40 lengths, 120 signatures, ran its epochs in
    about twice the eager time with 32 entries, in 0.4x with all 120 kept), so that is warned
    about once.
    """
    entry = _CACHE.pop(key, None)
    if entry is None and key in _EVICTED:
        warn_once(
            "cache",
            f"a CUDA graph evicted from the cache was captured again: this run solves more "
            f"signatures (shapes) than the {CACHE_SIZE} the cache holds, and recapturing is slower "
            "than solving eagerly; raise inn.solvers.cuda_graph.CACHE_SIZE (each entry holds its "
            "graphs' GPU memory) or turn cuda_graph off",
        )
    made = entry is None
    if made:
        entry = make()
    _CACHE[key] = entry
    while len(_CACHE) > CACHE_SIZE:
        _EVICTED.add(_CACHE.popitem(last=False)[0])
    return entry, made
