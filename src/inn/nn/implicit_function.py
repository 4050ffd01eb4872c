"""Gradients of the implicit layer by implicit differentiation (paper section 2.4).

At a solution H* = F(H*, xi, theta) the chain rule gives

    dL/dtheta = u^T dF/dtheta,   (I - dF/dH)^T u = dL/dH,

and the same for xi. :func:`implicit_solution` returns F(H*) computed once with autograd,
passed through :class:`ImplicitBackward`, an identity in the forward pass whose backward
replaces the incoming gradient dL/dH by u. Autograd then carries u through that one F
evaluation to every parameter and to xi. Nothing is backpropagated through the solver's
iterations, and H* itself is detached.

The adjoint system is solved (``backward_solver``) by Anderson acceleration of
u <- u + (I - D^T)^{-1} (g + J^T u - u), with D the elementwise copy coupling factorised once
("anderson", default: the fastest measured on trained weights), of red-black Gauss-Seidel
sweeps on u = g + J^T u ("anderson_red_black"), by BiCGSTAB with analytic vector-Jacobian
products ("bicgstab", the paper's choice), by Anderson or plain iteration with whole J^T
products ("anderson_jacobi", "fixed_point"), or exactly through the block-tridiagonal
structure ("direct"). Its tolerance (``backward_tol``,
relative to ||dL/dH||) defaults to the forward ``tol``.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch import Tensor

from inn.errors import InnError
from inn.solvers import ADJOINT_SOLVERS, ConvergenceWarning


class ImplicitBackward(torch.autograd.Function):
    """Identity forward; backward solves (I - J^T) u = grad at the stored solution."""

    @staticmethod
    def forward(ctx: Any, FH: Tensor, layer: Any, lin: Any) -> Tensor:  # type: ignore[override]
        ctx.layer = layer
        ctx.lin = lin  # dF/dH at the solution
        return FH.clone()

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, None, None]:  # type: ignore[override]
        layer = ctx.layer
        opts = dict(layer.backward_options)
        method = opts.pop("backward_solver", "anderson")
        tol = opts.pop("backward_tol", None)
        if tol is None:
            tol = float(layer.options.get("tol", 1e-4))
        max_iter = opts.pop("backward_max_iter", 200)
        if method not in ADJOINT_SOLVERS:
            raise InnError(f"unknown backward solver {method!r}; choose one of {', '.join(ADJOINT_SOLVERS)}")
        extra = {"low_precision": opts.pop("backward_low_precision", "auto")} if method == "anderson" else {}
        lin = ctx.lin
        with torch.no_grad():
            # padded outputs are constant zero: their incoming gradient is irrelevant
            g = grad * lin.system.maskf
            u, stats = ADJOINT_SOLVERS[method](lin, g, tol=tol, max_iter=max_iter, **extra)
        layer.last_backward_stats = stats
        if stats.num_failed:
            message = (
                f"implicit backward ({method}): {stats.num_failed} of {stats.converged.numel()} sequences "
                f"did not reach tol {tol:g} (max residual {float(stats.residual.max()):.3g})"
            )
            if layer.options.get("strict", False):
                raise InnError(message)
            warnings.warn(message, ConvergenceWarning, stacklevel=2)
        return u, None, None


def implicit_solution(layer: Any, xi: Tensor, mask: Tensor, H: Tensor, system: Any, X: Tensor | None = None) -> Tensor:
    """F(H*) with autograd, whose backward goes through the implicit-function theorem.

    ``X``: the input terms W xi + b, already computed with a graph by the caller. The one
    evaluation of F at H* serves both autograd and the adjoint's linearisation."""
    H = H.detach()
    FH, lin = layer.linearized_transition(xi, H, mask, X, system)
    return ImplicitBackward.apply(FH, layer, lin)
