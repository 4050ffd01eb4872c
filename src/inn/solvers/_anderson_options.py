"""The options of an Anderson solve (:mod:`inn.solvers.anderson`) and how they resolve: the
map it iterates, mixed precision, compaction, and the segment lengths of a captured solve.

The map T (``sweep``) has the same fixed points as F and costs one evaluation of the cell
per position:

- ``"tridiagonal"`` (default): H + (I - D)^{-1} (F(H) - H), where D is the gated copy of
  the neighbours, (1 - z)(s h_{t-1} + (1 - s) h_{t+1}), solved exactly unit by unit along
  the sequence (:mod:`inn.solvers.tridiagonal`). On trained weights, whose slow modes are
  that copy diffusing along the sentence, it needs 9-18 iterations at any length where the
  red-black sweep needs 22-111, rising with n (real EWT text, k = 448 and 224); at
  initialisation the two are level.
- ``"red_black"``: a red-black Gauss-Seidel sweep, even positions first, then odd ones from
  the new even ones; on this nearest-neighbour system it contracts about like two Jacobi
  steps.
- ``"jacobi"``: F itself, every position from the old neighbours.

Mixed precision (``low_precision``, on by default for float32 on a CPU with native bfloat16
products): the first steps, down to a residual of ``low_precision_tol`` (3e-3), run on the
system with bfloat16 matrix products, which halves the cost of a step there; the float32
steps then finish from that point, and the answer is tested in float32 as always. bfloat16
alone stalls near a residual of 7e-4 (trained k = 448 weights, n = 10..160).
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor

from inn.errors import InnError

#: sweep name -> the map T of a system whose fixed points Anderson finds
SWEEPS = {
    "jacobi": lambda system: system.F,
    "red_black": lambda system: system.sweep,
    "tridiagonal": lambda system: lambda H: system.tridiagonal_step(H, with_residual=True),
}


def sweep_map(system, sweep: str):
    """The map T of ``sweep`` (a name in :data:`SWEEPS`) on ``system``."""
    if sweep not in SWEEPS:
        raise InnError(f"sweep must be one of {', '.join(SWEEPS)}, not {sweep!r}")
    return SWEEPS[sweep](system)


#: the most steps of the low-precision first pass (it reaches 3e-3 in 6-8 on trained weights)
LOW_PRECISION_MAX_ITER = 30


def low_precision_pays(device: torch.device, dtype: torch.dtype, setting: bool | str) -> bool:
    """Resolve a ``low_precision`` option: ``"auto"`` is True for float32 on a CPU whose
    oneDNN runs bfloat16 matrix products natively (there a (800 x 448) @ (448 x 448) product
    took 0.85 ms against 3.5 ms in float32), False elsewhere (GPUs: not measured yet)."""
    if setting == "auto":
        return dtype == torch.float32 and device.type == "cpu" and _native_bfloat16()
    if not isinstance(setting, bool):
        raise InnError(f"low_precision must be true, false or 'auto', not {setting!r}")
    return setting


@functools.cache
def _native_bfloat16() -> bool:
    try:
        return bool(torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a build without oneDNN's check
        return False


def low_precision_version(target, like: Tensor, setting: bool | str, tol: float, low_tol: float):
    """``target.low_precision()``, the system or linearisation with bfloat16 products, when a
    first pass to ``low_tol`` is wanted (``setting`` for iterates like ``like``), is short of
    ``tol``, and ``target`` has such a version (its cell's products take bfloat16 weights);
    else None. The forward and the adjoint share it."""
    if tol >= low_tol or not low_precision_pays(like.device, like.dtype, setting):
        return None
    return target.low_precision()


def compaction_pays(device: torch.device, setting: bool | str) -> bool:
    """Resolve a ``compact`` option: ``"auto"`` is True on a CPU, where a step's cost is its
    arithmetic and so proportional to the samples in it, False elsewhere (on a GPU at these
    sizes a step costs its kernel launches, whatever the batch)."""
    if setting == "auto":
        return device.type == "cpu"
    if not isinstance(setting, bool):
        raise InnError(f"compact must be true, false or 'auto', not {setting!r}")
    return setting


def first_chunk_step(memory: int) -> int:
    """The first step a replayable chunk can start at: divergence is checked from step 2 on,
    the ring buffer is full from step memory - 1 on, and from a multiple of ``memory`` every
    chunk whose length is one too writes the same slots in the same order."""
    need = max(2, memory - 1)
    return need if memory <= 1 else -(-need // memory) * memory


def chunk_length(steps: int, memory: int) -> int:
    """``steps`` rounded up to a multiple of ``memory`` (see :func:`first_chunk_step`)."""
    return steps if memory <= 1 else -(-steps // memory) * memory
