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
pivoting is stable. Two algorithms, picked by device:

- ``"thomas"`` (CPU): forward elimination and back substitution, O(n) work per unit in n
  sequential elementwise steps on (B, k) slices; the factorisation is kept for repeated
  solves (the adjoint).
- ``"pcr"`` (CUDA): parallel cyclic reduction, ceil(log2 n) steps each on the whole (B, n, k)
  tensor, O(n log n) work but about 15 log2 n kernel launches instead of 6 n.

Used as the preconditioner of the ``"tridiagonal"`` sweep of :mod:`inn.solvers.anderson` and
of the adjoint solve.
"""

from __future__ import annotations

import torch
from torch import Tensor

from inn.errors import InnError


class Tridiagonal:
    """The matrix I - (lower, upper) of shape (B, n, k) coefficients, along dim 1.

    ``lower[:, 0]`` and ``upper[:, -1]`` are ignored (there is nothing to couple to).
    ``method``: ``"thomas"`` or ``"pcr"``; default Thomas on the CPU, PCR elsewhere.
    """

    def __init__(self, lower: Tensor, upper: Tensor, method: str | None = None) -> None:
        self.method = method or self.default_method(lower.device)
        if self.method == "pcr":
            self.sub = torch.cat([torch.zeros_like(lower[:, :1]), -lower[:, 1:]], 1)
            self.sup = torch.cat([-upper[:, :-1], torch.zeros_like(upper[:, :1])], 1)
            return
        if self.method != "thomas":
            raise InnError(f"tridiagonal method must be 'thomas' or 'pcr', not {method!r}")
        n = lower.shape[1]
        self.lower = lower.unbind(1)
        inv = [torch.ones_like(lower[:, 0])]  # 1 / pivot_t
        ratio = [-upper[:, 0]]  # upper_t / pivot_t, negated: x_t = w_t - ratio_t x_{t+1}
        for t in range(1, n):
            inv.append(1.0 / (1.0 + self.lower[t] * ratio[t - 1]))
            ratio.append(-upper[:, t] * inv[t])
        self.inv, self.ratio = inv, ratio

    @staticmethod
    def default_method(device: torch.device) -> str:
        """Thomas on the CPU (fewest operations), PCR on accelerators (fewest launches)."""
        return "thomas" if device.type == "cpu" else "pcr"

    def solve(self, b: Tensor) -> Tensor:
        """x with (I - tridiag(lower, upper)) x = b, for b (B, n, k)."""
        if self.method == "pcr":
            return self._pcr(b)
        rows = b.unbind(1)
        n = len(rows)
        w = [rows[0]]
        for t in range(1, n):
            w.append((rows[t] + self.lower[t] * w[t - 1]) * self.inv[t])
        x = [w[-1]] * n
        for t in range(n - 2, -1, -1):
            x[t] = torch.addcmul(w[t], self.ratio[t], x[t + 1], value=-1)
        return torch.stack(x, 1)

    def _pcr(self, b: Tensor) -> Tensor:
        """Parallel cyclic reduction: at stride s every row eliminates its couplings to rows
        t - s and t + s using those rows; after ceil(log2 n) strides each row stands alone.
        Rows beyond the ends are identity rows (sub = sup = 0, diag = 1, rhs = 0)."""
        sub, sup, rhs = self.sub, self.sup, b
        diag = torch.ones_like(b)
        n = b.shape[1]
        stride = 1
        while stride < n:
            def before(x: Tensor, fill: float) -> Tensor:  # x[:, t - stride]
                return torch.cat([torch.full_like(x[:, :stride], fill), x[:, :-stride]], 1)

            def after(x: Tensor, fill: float) -> Tensor:  # x[:, t + stride]
                return torch.cat([x[:, stride:], torch.full_like(x[:, :stride], fill)], 1)

            k1 = sub / before(diag, 1.0)
            k2 = sup / after(diag, 1.0)
            diag = diag - before(sup, 0.0) * k1 - after(sub, 0.0) * k2
            rhs = rhs - before(rhs, 0.0) * k1 - after(rhs, 0.0) * k2
            sub, sup = -before(sub, 0.0) * k1, -after(sup, 0.0) * k2
            stride *= 2
        return rhs / diag

    @staticmethod
    def transposed_coefficients(lower: Tensor, upper: Tensor) -> tuple[Tensor, Tensor]:
        """(lower, upper) of the transpose: row t of (I - D)^T couples to t-1 by upper_{t-1}
        and to t+1 by lower_{t+1}."""
        zero = torch.zeros_like(lower[:, :1])
        return torch.cat([zero, upper[:, :-1]], 1), torch.cat([lower[:, 1:], zero], 1)

    @classmethod
    def transposed(cls, lower: Tensor, upper: Tensor) -> "Tridiagonal":
        """The transpose of I - (lower, upper), ready to solve."""
        return cls(*cls.transposed_coefficients(lower, upper))
