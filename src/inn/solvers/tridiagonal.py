"""Scalar tridiagonal solves along the sequence, batched over sequences and hidden units.

The implicit GRU's state h_t = (1 - z_t) * hhat_t + z_t * htilde_t copies a gated, convex mix
of its two neighbours, hhat_t = s_t h_{t-1} + (1 - s_t) h_{t+1}, unit by unit. Where the update
gate z is near 0 (a unit that carries its value along the sentence), that copy is a
diffusion along the sequence whose slowest modes contract like 1 - O(1/n^2): the reason plain
and Anderson iterations on trained weights grow with the sentence length. Solving that
elementwise part exactly is cheap: for each sequence and each hidden unit it is one scalar
tridiagonal system along the positions,

    x_t - lower_t x_{t-1} - upper_t x_{t+1} = b_t,

with lower_t = (1 - z_t) s_t and upper_t = (1 - z_t)(1 - s_t). The system is diagonally
dominant (lower_t + upper_t = 1 - z_t <= 1, strictly at the ends), so elimination without
pivoting is stable. Three algorithms, picked by device:

- ``"thomas"`` (CPU): forward elimination and back substitution, O(n) work per unit in n
  sequential elementwise steps on (B, k) slices; the factorisation is kept for repeated
  solves (the adjoint).
- ``"triton"`` (CUDA with Triton installed): the same algorithm as one Triton kernel
  (:mod:`inn.solvers.tridiagonal_triton`), one launch per solve.
- ``"pcr"`` (CUDA without Triton): parallel cyclic reduction, ceil(log2 n) steps each on the
  whole (B, n, k) tensor, O(n log n) work in about 8 log2 n launches.

On a GPU at the layer's sizes the launches, not the arithmetic, set the time.

Used as the preconditioner of the ``"tridiagonal"`` sweep of :mod:`inn.solvers.anderson` and
of the adjoint solve.
"""

from __future__ import annotations

import functools
import importlib.util
import logging

import torch
from torch import Tensor

from inn.errors import InnError

log = logging.getLogger(__name__)


class Tridiagonal:
    """The matrix I - (lower, upper) of shape (B, n, k) coefficients, along dim 1.

    ``lower[:, 0]`` and ``upper[:, -1]`` are ignored (there is nothing to couple to).
    ``method``: ``"thomas"``, ``"triton"`` or ``"pcr"``; default :meth:`default_method`.
    """

    def __init__(self, lower: Tensor, upper: Tensor, method: str | None = None) -> None:
        self.method = method or self.default_method(lower.device)
        if self.method == "pcr":
            self._factor_pcr(lower, upper)
            return
        if self.method == "triton":
            self.coefficients = (lower, upper)  # the kernel factorises as it solves
            return
        if self.method != "thomas":
            raise InnError(f"tridiagonal method must be 'thomas', 'triton' or 'pcr', not {method!r}")
        # pivots d_t = 1 - l_t r_{t-1} with r_t = u_t / d_t (d_0 = 1); each step is one or
        # two whole-slice operations, so the n sequential steps cost little beyond dispatch
        one = torch.ones_like(lower[:, 0])
        inv, ratio = [one], [upper[:, 0]]
        for t in range(1, lower.shape[1]):
            inv.append(torch.addcmul(one, lower[:, t], ratio[t - 1], value=-1).reciprocal_())
            ratio.append(upper[:, t] * inv[t])
        self.inv = torch.stack(inv, 1)  # 1 / d_t
        self.scaled_lower = (lower * self.inv).unbind(1)  # l_t / d_t
        self.ratio = ratio

    def _factor_pcr(self, lower: Tensor, upper: Tensor) -> None:
        """Parallel cyclic reduction of the coefficients, kept for every solve.

        Row t reads d_t x_t - l_t x_{t-s} - u_t x_{t+s} = r_t at stride s (first s = 1, d = 1).
        Adding k1 = l_t / d_{t-s} times row t - s and k2 = u_t / d_{t+s} times row t + s
        removes x_{t-s} and x_{t+s} and couples row t to t - 2s and t + 2s instead; after
        ceil(log2 n) strides every row stands alone. Rows beyond the ends are identity rows.
        The factors k1, k2 per stride depend on the matrix only, so a solve replays them on
        the right-hand side. All terms stay non-negative (l, u >= 0): no cancellation in the
        pivots.

        Written for few kernel launches (what bounds it on a GPU at these sizes): each
        quantity lives in the middle of a buffer whose margins hold what lies beyond the
        ends, so t - s and t + s are views, and each stride writes into a second buffer.
        """
        n = lower.shape[1]
        self.margin = 1 << (max(n - 1, 1).bit_length() - 1)  # the largest stride
        low, up = _Buffers(lower, self.margin, 0.0), _Buffers(upper, self.margin, 0.0)
        diag = _Buffers(lower, self.margin, 1.0)
        low.mid[:, 1:] = lower[:, 1:]
        up.mid[:, :-1] = upper[:, :-1]
        self.factors = []
        stride = 1
        while stride < n:
            k1 = low.mid / diag.shifted(-stride)
            k2 = up.mid / diag.shifted(stride)
            dk = torch.addcmul(diag.mid, k1, up.shifted(-stride), value=-1)
            torch.addcmul(dk, k2, low.shifted(stride), value=-1, out=diag.next)
            torch.mul(k1, low.shifted(-stride), out=low.next)
            torch.mul(k2, up.shifted(stride), out=up.next)
            for buffers in (diag, low, up):
                buffers.swap()
            self.factors.append((stride, k1, k2))
            stride *= 2
        self.inv_diag = 1.0 / diag.mid

    @staticmethod
    def default_method(device: torch.device) -> str:
        """Thomas on the CPU (fewest operations); on a GPU one Triton kernel where Triton is
        installed, else PCR (fewest launches in plain PyTorch)."""
        if device.type == "cpu":
            return "thomas"
        return "triton" if device.type == "cuda" and _has_triton() else "pcr"

    def solve(self, b: Tensor) -> Tensor:
        """x with (I - tridiag(lower, upper)) x = b, for b (B, n, k)."""
        if self.method == "pcr":
            return self._pcr(b)
        if self.method == "triton":
            try:
                from inn.solvers.tridiagonal_triton import thomas_solve

                return thomas_solve(*self.coefficients, b)
            except Exception as error:  # a Triton that cannot build for this GPU, say
                _TRITON_FAILED.append(repr(error))
                log.warning(
                    "the Triton tridiagonal kernel failed (%s); using parallel cyclic reduction from now on", error
                )
                self.method = "pcr"
                self._factor_pcr(*self.coefficients)
                return self._pcr(b)
        rows = (b * self.inv).unbind(1)
        n = len(rows)
        w = [rows[0]]  # forward elimination: w_t = b_t / d_t + (l_t / d_t) w_{t-1}
        for t in range(1, n):
            w.append(torch.addcmul(rows[t], self.scaled_lower[t], w[t - 1]))
        x = [w[-1]] * n  # back substitution: x_t = w_t + r_t x_{t+1}
        for t in range(n - 2, -1, -1):
            x[t] = torch.addcmul(w[t], self.ratio[t], x[t + 1])
        return torch.stack(x, 1)

    def _pcr(self, b: Tensor) -> Tensor:
        """Replay the reduction's factors on b: r_t += k1 r_{t-s} + k2 r_{t+s} per stride."""
        rhs = _Buffers(b, self.margin, 0.0)
        rhs.mid.copy_(b)
        for stride, k1, k2 in self.factors:
            torch.addcmul(torch.addcmul(rhs.mid, k1, rhs.shifted(-stride)), k2, rhs.shifted(stride), out=rhs.next)
            rhs.swap()
        return rhs.mid * self.inv_diag

    @staticmethod
    def transposed_coefficients(lower: Tensor, upper: Tensor) -> tuple[Tensor, Tensor]:
        """(lower, upper) of the transpose: row t of (I - D)^T couples to t-1 by upper_{t-1}
        and to t+1 by lower_{t+1}."""
        zero = torch.zeros_like(lower[:, :1])
        return torch.cat([zero, upper[:, :-1]], 1), torch.cat([lower[:, 1:], zero], 1)

    @classmethod
    def transposed(cls, lower: Tensor, upper: Tensor) -> Tridiagonal:
        """The transpose of I - (lower, upper), ready to solve."""
        return cls(*cls.transposed_coefficients(lower, upper))


_TRITON_FAILED: list[str] = []  # why the kernel failed in this process, if it did


@functools.cache
def _installed(package: str) -> bool:
    return importlib.util.find_spec(package) is not None


def _has_triton() -> bool:
    """Triton is installed and its kernel has not failed in this process."""
    return _installed("triton") and not _TRITON_FAILED


class _Buffers:
    """Two (B, n + 2 margin, k) buffers like ``like``, margins set to ``fill``: ``mid`` is the
    current value's (B, n, k) view, ``next`` the other buffer's, ``shifted(d)`` the current
    value at t + d (|d| <= margin), ``swap()`` makes ``next`` current."""

    def __init__(self, like: Tensor, margin: int, fill: float) -> None:
        B, n, k = like.shape
        self.both = torch.full((2, B, n + 2 * margin, k), fill, dtype=like.dtype, device=like.device)
        self.n, self.margin, self.current = n, margin, 0

    def _view(self, which: int, shift: int = 0) -> Tensor:
        start = self.margin + shift
        return self.both[which, :, start : start + self.n]

    @property
    def mid(self) -> Tensor:
        return self._view(self.current)

    @property
    def next(self) -> Tensor:
        return self._view(1 - self.current)

    def shifted(self, shift: int) -> Tensor:
        return self._view(self.current, shift)

    def swap(self) -> None:
        self.current = 1 - self.current
