"""Exact solves with I - J for block-tridiagonal J by block elimination (a Thomas sweep).

Row t of (I - J) x = b reads x_t - L_t x_{t-1} - R_t x_{t+1} = b_t, with k x k blocks
L_t = dF_t/dh_{t-1} and R_t = dF_t/dh_{t+1}. Forward elimination keeps
E_t = D_t^{-1} R_t and w_t = D_t^{-1} y_t with D_t = I - L_t E_{t-1}; back substitution is
x_t = w_t + E_t x_{t+1}. Cost per sample and position: one k x k LU and about 3 k^3 flops,
memory n k^2 per sample. Loops run over positions only, batched over B.
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


def batched_solve(A: Tensor, B: Tensor) -> Tensor:
    """torch.linalg.solve for (N, k, k) x (N, k, m), guarded against the CPU batched-LU bug."""
    with _cpu_single_thread(A):
        return torch.linalg.solve(A, B)


def block_tridiagonal_solve(blocks: Callable[[int], tuple[Tensor, Tensor]], b: Tensor) -> Tensor:
    """Solve x_t - L_t x_{t-1} - R_t x_{t+1} = b_t for x, batched: b (B, n, k) -> x (B, n, k).

    ``blocks(t)`` returns (L_t, R_t), (B, k, k) each (L_0 and R_{n-1} are ignored).
    """
    B, n, k = b.shape
    eye = torch.eye(k, dtype=b.dtype, device=b.device).expand(B, k, k)
    E: list[Tensor] = []
    w: list[Tensor] = []
    for t in range(n):
        L, R = blocks(t)
        y = b[:, t].unsqueeze(-1)  # (B, k, 1)
        if t == 0:
            D = eye
        else:
            D = eye - L @ E[-1]
            y = y + L @ w[-1]
        sol = batched_solve(D, torch.cat([R, y], dim=-1))
        E.append(sol[..., :k])
        w.append(sol[..., k:])
    x = [None] * n
    x[n - 1] = w[n - 1]
    for t in range(n - 2, -1, -1):
        x[t] = w[t] + E[t] @ x[t + 1]
    return torch.stack(x, 1).squeeze(-1)


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
