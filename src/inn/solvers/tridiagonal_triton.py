"""The Thomas algorithm as one Triton kernel: a GPU's tridiagonal solve in one launch.

Imported only where Triton is installed and the tensors live on a CUDA device (see
:meth:`inn.solvers.tridiagonal.Tridiagonal.default_method`). Each program owns one sequence
and a block of hidden units and walks the positions itself: forward elimination, then back
substitution, all in registers and one scratch tensor. The work is the CPU's Thomas
algorithm, O(n) per unit; the point is the launch count, which bounds every other method on
a GPU at the layer's sizes (parallel cyclic reduction needs about 8 log2 n launches).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

BLOCK = 32  # hidden units per program: (B, ceil(k / 32)) programs keep the GPU's loads in flight


@triton.jit
def _thomas(low, up, rhs, out, ratio, n, k, BLOCK: tl.constexpr):
    """x_t - l_t x_{t-1} - u_t x_{t+1} = b_t along t for one sequence and BLOCK units.

    d_t = 1 - l_t r_{t-1}, r_t = u_t / d_t, w_t = (b_t + l_t w_{t-1}) / d_t, then
    x_t = w_t + r_t x_{t+1}; l_0 and u_{n-1} are read as zero.
    """
    seq = tl.program_id(0)
    units = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    live = units < k
    base = seq * n * k + units
    r_prev = tl.zeros([BLOCK], dtype=rhs.dtype.element_ty)
    w_prev = tl.zeros([BLOCK], dtype=rhs.dtype.element_ty)
    for t in tl.range(0, n):
        at = base + t * k
        l_t = tl.load(low + at, mask=live & (t > 0), other=0.0)
        u_t = tl.load(up + at, mask=live & (t < n - 1), other=0.0)
        b_t = tl.load(rhs + at, mask=live, other=0.0)
        inv = 1.0 / (1.0 - l_t * r_prev)
        w_prev = (b_t + l_t * w_prev) * inv
        r_prev = u_t * inv
        tl.store(out + at, w_prev, mask=live)
        tl.store(ratio + at, r_prev, mask=live)
    x_next = tl.zeros([BLOCK], dtype=rhs.dtype.element_ty)
    for s in tl.range(0, n):
        at = base + (n - 1 - s) * k
        x_next = tl.load(out + at, mask=live, other=0.0) + tl.load(ratio + at, mask=live, other=0.0) * x_next
        tl.store(out + at, x_next, mask=live)


def thomas_solve(lower: Tensor, upper: Tensor, b: Tensor) -> Tensor:
    """x with (I - tridiag(lower, upper)) x = b, all (B, n, k) on one CUDA device."""
    lower, upper, b = lower.contiguous(), upper.contiguous(), b.contiguous()
    B, n, k = b.shape
    out, ratio = torch.empty_like(b), torch.empty_like(b)
    if b.numel():
        _thomas[(B, triton.cdiv(k, BLOCK))](lower, upper, b, out, ratio, n, k, BLOCK=BLOCK)
    return out
