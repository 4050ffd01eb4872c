"""Scalar tridiagonal solves along the sequence, batched over sequences and hidden units.

The implicit GRU's state h_t = (1 - z_t) * hhat_t + z_t * htilde_t copies a gated, convex mix
of its two neighbours, hhat_t = s_t h_{t-1} + (1 - s_t) h_{t+1}, unit by unit. Where the update
gate z is near 0 (a unit that carries its value along the sentence), that copy is a
diffusion along the sequence whose slowest modes contract like 1 - O(1/n^2): the reason plain
and Anderson iterations on trained weights grow with the sentence length. Solving that
elementwise part exactly is cheap: for each sequence and each hidden unit it is one scalar
tridiagonal system along the positions,

    x_t - lower_t x_{t-1} - upper_t x_{t+1} = b_t,

with lower_t = (1 - z_t) s_t and upper_t = (1 - z_t)(1 - s_t), which the Thomas algorithm
solves in O(n) per unit. The system is diagonally dominant (lower_t + upper_t = 1 - z_t <= 1,
strictly at the ends), so elimination without pivoting is stable. Used as the preconditioner
of the ``"tridiagonal"`` sweep of :mod:`inn.solvers.anderson` and of the adjoint solve.
"""

from __future__ import annotations

import torch
from torch import Tensor


class Tridiagonal:
    """The factorised matrix I - (lower, upper) of shape (B, n, k) coefficients, along dim 1.

    ``lower[:, 0]`` and ``upper[:, -1]`` are ignored (there is nothing to couple to). The
    factorisation costs one sequential pass over the positions; each :meth:`solve` two more,
    all of them elementwise on (B, k) slices.
    """

    def __init__(self, lower: Tensor, upper: Tensor) -> None:
        n = lower.shape[1]
        self.lower = lower.unbind(1)
        inv = [torch.ones_like(lower[:, 0])]  # 1 / pivot_t
        ratio = [-upper[:, 0]]  # upper_t / pivot_t, negated: x_t = w_t - ratio_t x_{t+1}
        for t in range(1, n):
            inv.append(1.0 / (1.0 + self.lower[t] * ratio[t - 1]))
            ratio.append(-upper[:, t] * inv[t])
        self.inv, self.ratio = inv, ratio

    def solve(self, b: Tensor) -> Tensor:
        """x with (I - tridiag(lower, upper)) x = b, for b (B, n, k)."""
        rows = b.unbind(1)
        n = len(rows)
        w = [rows[0]]
        for t in range(1, n):
            w.append((rows[t] + self.lower[t] * w[t - 1]) * self.inv[t])
        x = [w[-1]] * n
        for t in range(n - 2, -1, -1):
            x[t] = torch.addcmul(w[t], self.ratio[t], x[t + 1], value=-1)
        return torch.stack(x, 1)

    @staticmethod
    def transposed(lower: Tensor, upper: Tensor) -> "Tridiagonal":
        """The factorised transpose: row t of (I - D)^T couples to t-1 by upper_{t-1} and to
        t+1 by lower_{t+1}."""
        zero = torch.zeros_like(lower[:, :1])
        return Tridiagonal(torch.cat([zero, upper[:, :-1]], 1), torch.cat([lower[:, 1:], zero], 1))
