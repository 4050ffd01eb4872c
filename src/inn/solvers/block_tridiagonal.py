"""Exact solves with I - J for block-tridiagonal J by block elimination (a Thomas sweep).

Row t of (I - J) x = b reads x_t - L_t x_{t-1} - R_t x_{t+1} = b_t, with k x k blocks
L_t = dF_t/dh_{t-1} and R_t = dF_t/dh_{t+1}. Forward elimination keeps
E_t = D_t^{-1} R_t and w_t = D_t^{-1} y_t with D_t = I - L_t E_{t-1}; back substitution is
x_t = w_t + E_t x_{t+1}. Cost per sample and position: one k x k LU and about 3 k^3 flops,
memory n k^2 per sample. Loops run over positions only, batched over B.
:class:`BlockTridiagonalLU` keeps the factors for more right-hand sides.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch
from torch import Tensor


@contextlib.contextmanager
def _cpu_single_thread(t: Tensor) -> Iterator[None]:
    """Batched LU of >= 200 x 200 matrices gave wrong results or hung on this project's CPU
    build with 2 threads (torch 2.x CPU wheels, measured in this project); on one thread it is right."""
    if t.device.type != "cpu" or t.shape[0] < 2 or torch.get_num_threads() == 1:
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


class SingularBlockError(RuntimeError):
    """A diagonal block D_t of the elimination is singular: I - J (or I - lambda J) has no
    unique solution there, which a caller that can step around it (the homotopy) catches."""


def batched_solve(A: Tensor, B: Tensor) -> Tensor:
    """torch.linalg.solve for (N, k, k) x (N, k, m), guarded against the CPU batched-LU bug."""
    with _cpu_single_thread(A):
        return torch.linalg.solve(A, B)


class BlockTridiagonalLU:
    """The block elimination of I - J, kept for several right-hand sides (a homotopy's
    corrector solves two per step with one factorisation).

    ``blocks(t)`` returns (L_t, R_t), (B, k, k) each (L_0 and R_{n-1} are ignored); ``scale``
    (B,) factors I - scale J instead (the homotopy's I - lambda J).
    """

    def __init__(self, blocks: Callable[[int], tuple[Tensor, Tensor]], n: int, scale: Tensor | None = None) -> None:
        self.lower: list[Tensor] = []
        self.pivots: list[tuple[Tensor, Tensor]] = []
        self.E: list[Tensor] = []
        for t in range(n):
            L, R = blocks(t)
            if scale is not None:
                L, R = L * scale.view(-1, 1, 1), R * scale.view(-1, 1, 1)
            eye = torch.eye(L.shape[-1], dtype=L.dtype, device=L.device).expand_as(L)
            D = eye if t == 0 else eye - L @ self.E[-1]
            with _cpu_single_thread(D):
                LU, piv, info = torch.linalg.lu_factor_ex(D)
            if bool((info != 0).any()):
                raise SingularBlockError(f"block {t} of I - J is singular (U[{int(info.max()) - 1}] is zero)")
            with _cpu_single_thread(D):
                self.E.append(torch.linalg.lu_solve(LU, piv, R))
            self.lower.append(L)
            self.pivots.append((LU, piv))

    def solve(self, b: Tensor) -> Tensor:
        """x with (I - J) x = b: b (B, n, k) or (B, n, k, m) for m right-hand sides."""
        vector = b.dim() == 3
        if vector:
            b = b.unsqueeze(-1)
        n = len(self.E)
        w: list[Tensor] = []
        for t in range(n):
            y = b[:, t] if t == 0 else b[:, t] + self.lower[t] @ w[-1]
            with _cpu_single_thread(y):
                w.append(torch.linalg.lu_solve(*self.pivots[t], y))
        x = [w[-1]] * n
        for t in range(n - 2, -1, -1):
            x[t] = w[t] + self.E[t] @ x[t + 1]
        out = torch.stack(x, 1)
        return out.squeeze(-1) if vector else out


def block_tridiagonal_solve(blocks: Callable[[int], tuple[Tensor, Tensor]], b: Tensor) -> Tensor:
    """Solve x_t - L_t x_{t-1} - R_t x_{t+1} = b_t for x, batched: b (B, n, k) -> x (B, n, k).

    ``blocks(t)`` returns (L_t, R_t), (B, k, k) each (L_0 and R_{n-1} are ignored).
    """
    return BlockTridiagonalLU(blocks, b.shape[1]).solve(b)


def block_tridiagonal_solve_transposed(blocks: Callable[[int], tuple[Tensor, Tensor]], b: Tensor) -> Tensor:
    """Solve (I - J)^T u = b: row t is u_t - R_{t-1}^T u_{t-1} - L_{t+1}^T u_{t+1} = b_t."""
    n = b.shape[1]
    cache = [blocks(t) for t in range(n)]
    zero = torch.zeros_like(cache[0][0])

    def transposed(t: int) -> tuple[Tensor, Tensor]:
        lower = cache[t - 1][1].mT if t > 0 else zero
        upper = cache[t + 1][0].mT if t + 1 < n else zero
        return lower, upper

    return block_tridiagonal_solve(transposed, b)
