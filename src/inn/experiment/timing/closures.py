"""How ``inn benchmark`` times a method: the forward and forward+backward closures of an
implicit layer and of a bidirectional baseline, the minimum of their interleaved rounds, and
one implicit method's solver figures (iterations, residuals, its gradient against a tight
solve's).

The loss of every forward+backward is linear in all outputs (a fixed random projection), so
every method and baseline does the same backward work per output.
"""

from __future__ import annotations

import copy
import math
import time
import warnings
from collections.abc import Callable

import torch
from torch import nn

from inn.experiment.timing.fits import synchronize
from inn.solvers import ConvergenceWarning


def time_interleaved(
    fns: dict[str, Callable[[], object]], repeats: int, device: torch.device, clock: str = "wall"
) -> dict[str, float]:
    """Minimum time of each function over ``repeats`` rounds, after one warm-up round.

    The functions take turns within each round, so a burst of load from other processes on a
    shared machine hits all of them alike, and the minimum is the least disturbed figure.
    ``clock="process"`` measures this process's CPU time instead of wall time: with one
    thread (``--threads 1``) it is the compute time, nearly immune to other processes.
    """
    now = time.process_time if clock == "process" else time.perf_counter
    best = {name: math.inf for name in fns}
    for round_ in range(repeats + 1):
        for name, fn in fns.items():
            synchronize(device)
            start = now()
            fn()
            synchronize(device)
            if round_:
                best[name] = min(best[name], now() - start)
    return best


def implicit_closures(layer, xi, mask, target) -> tuple[Callable[[], object], Callable[[], object]]:
    """The implicit ``layer``'s forward (no graph) and forward+backward (the loss: outputs
    times ``target``, summed) on the batch ``xi``, ``mask``."""

    def forward():
        with torch.no_grad():
            layer(xi, mask)

    def forward_backward():
        layer.zero_grad(set_to_none=True)
        x = xi.detach().requires_grad_(True)
        (layer(x, mask) * target).sum().backward()

    return forward, forward_backward


def baseline_closures(kind, k, xi, device, dtype) -> tuple[Callable[[], object], Callable[[], object]]:
    """A fresh bidirectional ``kind`` (``gru`` or ``lstm``) of width ``k``: its forward and
    forward+backward on ``xi``, the loss linear in its outputs as the implicit layer's."""
    cls = nn.GRU if kind == "gru" else nn.LSTM
    rnn = cls(xi.shape[-1], k, batch_first=True, bidirectional=True).to(device=device, dtype=dtype)
    proj = torch.randn(2 * k, generator=torch.Generator().manual_seed(2)).to(device=device, dtype=dtype)

    def forward():
        with torch.no_grad():
            rnn(xi)

    def forward_backward():
        rnn.zero_grad(set_to_none=True)
        x = xi.detach().requires_grad_(True)
        (rnn(x)[0] * proj).sum().backward()

    return forward, forward_backward


def parameter_gradient(layer) -> torch.Tensor:
    """The gradient of every parameter of ``layer`` that has one, flat, in float64."""
    return torch.cat([p.grad.flatten() for p in layer.parameters() if p.grad is not None]).double()


def exact_gradient(base, xi, mask, target, tol: float) -> torch.Tensor:
    """The parameters' gradient of the benchmark's loss with forward and adjoint solved 100x
    tighter than the benchmark's tol (the reference of the grad_* columns)."""
    layer = copy.deepcopy(base)
    layer.solver, layer.options = "anderson", {"tol": tol / 100, "max_iter": 1000}
    layer.backward_options = {"backward_solver": "anderson", "backward_low_precision": False, "backward_max_iter": 1000}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        implicit_closures(layer, xi, mask, target)[1]()
    return parameter_gradient(layer)


def solver_figures(layer, xi, mask, target, device, clock: str, exact: torch.Tensor | None = None) -> dict:
    """Iterations and residuals of one forward and one forward+backward, and their times;
    with ``exact``, the parameters' gradient's cosine and relative error against it."""
    now = time.process_time if clock == "process" else time.perf_counter
    out: dict = {}
    forward, forward_backward = implicit_closures(layer, xi, mask, target)
    synchronize(device)
    start = now()
    forward()
    synchronize(device)
    out["forward_s"] = now() - start
    st = layer.last_stats.summary()
    out.update(
        newton_mean=st["iterations_mean"],
        krylov_mean=st["krylov_mean"],
        function_evals=st["function_evals"],
        residual_max=st["residual_max"],
        failed=st["failed"],
    )
    start = now()
    forward_backward()
    synchronize(device)
    out["forward_backward_s"] = now() - start
    bst = layer.last_backward_stats
    if bst is not None:
        its = bst.krylov_iterations if bst.krylov_iterations.any() else bst.newton_iterations
        out["backward_iterations"] = float(its.float().mean())
        out["backward_residual_max"] = float(bst.residual.max())
        out["failed"] += bst.num_failed
    if exact is not None:
        got = parameter_gradient(layer)
        out["grad_cosine"] = float(torch.nn.functional.cosine_similarity(got, exact, dim=0))
        out["grad_error"] = float((got - exact).norm() / exact.norm())
    return out
