"""Runtime scaling (paper section 4): time to compute the hidden states of a batch against n.

The paper fitted t = a * n^p to the time its implicit layer took for a batch of 20 sequences
of length n (random walks b = 0.5: 0.17 n^1.8; POS: 0.29 n^1.3). :func:`measure` times any
hidden-state function on inputs of each length, recording the solver's iterations when the
layer is implicit, and :func:`fit_power_law` fits the law by least squares in log-log space.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

import numpy as np
import pandas as pd
import torch
from torch import Tensor


def fit_power_law(n: Iterable[float], t: Iterable[float]) -> tuple[float, float, float]:
    """Least-squares fit of ``t = a * n**p`` in log-log space; returns ``(a, p, r2)``.

    ``r2`` is the coefficient of determination of the log-log fit, as the paper reports it.
    """
    x, y = np.log(np.asarray(list(n), dtype=float)), np.log(np.asarray(list(t), dtype=float))
    if len(x) < 2 or np.ptp(x) == 0:
        return float("nan"), float("nan"), float("nan")
    p, log_a = np.polyfit(x, y, 1)
    residual = y - (p * x + log_a)
    total = ((y - y.mean()) ** 2).sum()
    r2 = 1.0 - (residual**2).sum() / total if total > 0 else float("nan")
    return float(np.exp(log_a)), float(p), float(r2)


def synchronize(device: torch.device) -> None:
    """Wait for queued GPU work, so wall-clock times cover the computation itself."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _solver_columns(stats) -> dict:
    """An implicit layer's solver statistics for one batch (nothing for explicit layers)."""
    if stats is None:
        return {}
    summary = stats.summary()
    return {"newton_iters": summary["newton_mean"], "krylov_iters": summary["krylov_mean"],
            "residual": summary["residual_max"], "failed": summary["failed"]}


@torch.no_grad()
def measure(hidden: Callable[[Tensor, Tensor], Tensor], make_inputs: Callable[[int], tuple[Tensor, Tensor]],
            lengths: Iterable[int], repeats: int = 3, device: torch.device | str = "cpu",
            stats: Callable[[], object] | None = None) -> pd.DataFrame:
    """Time ``hidden(xi, mask)`` on inputs of each length (one warm-up call per length).

    Args:
        hidden: the hidden-state function (e.g. ``model.hidden_states``).
        make_inputs: ``n -> (xi, mask)`` for a batch of length-``n`` sequences (on ``device``).
        lengths: the sequence lengths n to time.
        repeats: timed calls per length, each on fresh inputs.
        stats: returns the implicit layer's ``last_stats`` after a call (None for explicit).

    Returns:
        One row per timed call: n, repeat, seconds, and for implicit layers the mean Newton
        and Krylov iterations, the largest final residual and the count of failed sequences.
    """
    device = torch.device(device)
    rows = []
    for n in lengths:
        xi, mask = make_inputs(n)
        hidden(xi, mask)  # warm-up: allocator, kernels, caches
        for repeat in range(repeats):
            xi, mask = make_inputs(n)
            synchronize(device)
            start = time.perf_counter()
            hidden(xi, mask)
            synchronize(device)
            seconds = time.perf_counter() - start
            rows.append({"n": n, "repeat": repeat, "seconds": seconds,
                         **_solver_columns(stats() if stats else None)})
    return pd.DataFrame(rows)


def fit_table(measurements: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Fit ``t = a n^p`` to the mean time per length of every group in ``measurements``."""
    rows = []
    for key, group in measurements.groupby(by, sort=False):
        per_n = group.groupby("n")["seconds"].mean()
        a, p, r2 = fit_power_law(per_n.index, per_n.values)
        key = key if isinstance(key, tuple) else (key,)
        rows.append({**dict(zip(by, key)), "a": a, "p": p, "r2": r2,
                     "n_min": int(per_n.index.min()), "n_max": int(per_n.index.max())})
    return pd.DataFrame(rows)
