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
("anderson": the fastest measured on trained weights), by GMRES right-preconditioned by the
same I - D^T ("gmres": half Anderson's iterations on hard systems), by the first until a CPU
layer's adjoints grow hard and the second from then on ("auto", the default), of red-black Gauss-Seidel
sweeps on u = g + J^T u ("anderson_red_black"), by BiCGSTAB with analytic vector-Jacobian
products ("bicgstab", the paper's choice), by Anderson or plain iteration with whole J^T
products ("anderson_jacobi", "fixed_point"), or exactly through the block-tridiagonal
structure ("direct"). Its tolerance (``backward_tol``,
relative to ||dL/dH||) defaults to the forward ``tol``.

Approximate backward passes skip the solve (:data:`inn.solvers.APPROXIMATE_ADJOINTS`): the
phantom gradient ("phantom": ``backward_steps`` damped unrolled steps at the solution,
``backward_damping``), the Jacobian-free gradient ("jacobian_free": u = dL/dH) and the
preconditioner-only gradient ("preconditioned": u = (I - D^T)^{-1} dL/dH, D the copy
coupling). Off by default: their gradient error is measured by ``inn benchmark``.

CUDA graphs (``backward_cuda_graph``: True, False or ``"auto"``; default the forward's
``cuda_graph``): the ``"anderson"`` adjoint's solve in captured segments of steps, one host
sync per segment (:mod:`inn.solvers.cuda_graph`).

Float64 fallback (``backward_fallback``, ``"float64"`` by default; None turns it off): on
trained weights a few sequences have an ill-conditioned adjoint system, where float32 J^T
products are too coarse for the relative residual 1e-4 and the float32 solve stagnates to
its limit. With ``"float64"`` (Anderson) or
``"direct"`` (the block-tridiagonal solve) the sequences still above tol after
``backward_fallback_after`` float32 iterations (40) are solved again in float64, on the
system's float64 copy at the same solution; their residual is then that system's.

Adjoint warm start: a tensor set as ``layer.adjoint_start`` between the forward and the
backward (the trainer's: the same sentences' adjoints from the previous epoch) is the exact
adjoint solvers' starting point, used once; every backward leaves its u in
``layer.last_adjoint`` (detached).
"""

from __future__ import annotations

import logging
import warnings
from collections import deque
from typing import Any

import torch
from torch import Tensor

from inn import solvers
from inn.errors import InnError
from inn.solvers import ADJOINT_SOLVERS, APPROXIMATE_ADJOINTS, ConvergenceWarning, adjoint_spec, cuda_graph
from inn.solvers._anderson_options import compaction_pays

log = logging.getLogger(__name__)

#: ``backward_solver="auto"``: mean Anderson adjoint iterations a batch past which the GMRES
#: adjoint pays on a CPU (the measurements are in docs/decisions.md)
GMRES_PAYS_FROM = 30
#: ... averaged over this many consecutive backward passes of one layer
AUTO_WINDOW = 20

#: the layer's backward options (``ImplicitGRU(..., backward_solver=..., ...)``), by name: their
#: records, with types and ranges, are :data:`inn.solvers.BACKWARD_OPTIONS`
BACKWARD_OPTIONS = tuple(option.name for option in solvers.BACKWARD_OPTIONS)
#: ``backward_fallback`` values: how the sequences a float32 adjoint leaves above tol are solved again
FALLBACKS = (None, "float64", "direct")
#: the layers' ``backward_fallback`` with an exact adjoint: a float32 adjoint that cannot certify
#: tol is finished in float64 (approximate adjoints have none)
DEFAULT_FALLBACK = "float64"


def check_backward_options(options: dict[str, Any]) -> None:
    """Raise :class:`InnError` (one line) for an unknown backward solver or an option it
    does not take or whose value is out of range."""
    if "backward_cuda_graph" in options:
        cuda_graph.check(options["backward_cuda_graph"], "backward_cuda_graph")
    method = options.get("backward_solver", "auto")
    if method not in ADJOINT_SOLVERS and method not in APPROXIMATE_ADJOINTS and method != "auto":
        raise InnError(
            f"unknown backward solver {method!r}; choose one of "
            f"{', '.join(['auto', *ADJOINT_SOLVERS, *APPROXIMATE_ADJOINTS])}"
        )
    own = (
        {f"backward_{option.name}" for option in APPROXIMATE_ADJOINTS[method].options}
        if method in APPROXIMATE_ADJOINTS
        else set()
    )
    stray = sorted({"backward_steps", "backward_damping"} & set(options) - own)
    if stray:
        raise InnError(f"backward solver {method!r} takes no {', '.join(stray)} (only 'phantom' does)")
    if "backward_restart" in options and method not in ("gmres", "auto"):
        raise InnError(f"backward solver {method!r} takes no backward_restart (only 'gmres' and 'auto' do)")
    restart = options.get("backward_restart", 1)
    if isinstance(restart, bool) or not isinstance(restart, int) or restart < 1:
        raise InnError(f"backward_restart must be a positive integer, not {restart!r}")
    steps = options.get("backward_steps", 1)
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise InnError(f"backward_steps must be a positive integer, not {steps!r}")
    exact = method in ADJOINT_SOLVERS or method == "auto"
    fallback = options.get("backward_fallback", DEFAULT_FALLBACK if exact else None)
    if fallback not in FALLBACKS:
        raise InnError(f"backward_fallback must be one of {', '.join(map(str, FALLBACKS))}, not {fallback!r}")
    if fallback is not None and not exact:
        raise InnError(f"backward_fallback needs an exact adjoint; backward solver {method!r} is approximate")
    after = options.get("backward_fallback_after", 40)
    if isinstance(after, bool) or not isinstance(after, int) or after < 1:
        raise InnError(f"backward_fallback_after must be a positive integer, not {after!r}")
    damping = options.get("backward_damping", 1.0)
    if isinstance(damping, bool) or not isinstance(damping, (int, float)) or not 0 < damping <= 1:
        raise InnError(f"backward_damping must be a number in (0, 1], not {damping!r}")


class ImplicitBackward(torch.autograd.Function):
    """Identity forward; backward solves (I - J^T) u = grad at the stored solution."""

    @staticmethod
    def forward(ctx: Any, FH: Tensor, layer: Any, lin: Any, H: Tensor | None = None) -> Tensor:  # type: ignore[override]
        ctx.layer = layer
        ctx.lin = lin  # dF/dH at the solution
        ctx.H = H  # the solution (detached): the float64 fallback linearises its system there again
        return FH.clone()

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, None, None, None]:  # type: ignore[override]
        layer = ctx.layer
        opts = dict(layer.backward_options)
        method = opts.pop("backward_solver", "auto")
        auto = method == "auto"
        if auto:
            method = auto_adjoint(layer, grad.device)
        fallback = opts.pop("backward_fallback", DEFAULT_FALLBACK)
        fallback_after = opts.pop("backward_fallback_after", 40)
        tol = opts.pop("backward_tol", None)
        if tol is None:
            tol = float(layer.options.get("tol", 1e-4))
        max_iter = opts.pop("backward_max_iter", 200)
        check_backward_options(layer.backward_options)
        lin = ctx.lin
        with torch.no_grad():
            # padded outputs are constant zero: their incoming gradient is irrelevant
            g = grad * lin.system.maskf
            spec = adjoint_spec(method)
            extra = spec.arguments(opts, layer.options)  # its own options (anderson: the forward's cuda_graph)
            if not spec.exact:
                u, stats = spec.function(lin, g, **extra)
            else:
                if (
                    spec.compacts
                    and ctx.H is not None
                    and compaction_pays(g.device, layer.options.get("compact", "auto"))
                ):
                    H = ctx.H  # the sequences that go on, linearised again alone
                    extra["select"] = lambda rows: lin.system.select(rows).linearize(H[rows])
                start = getattr(layer, "adjoint_start", None)
                if start is not None and start.shape == g.shape:
                    extra["u0"] = start.to(g.dtype) * lin.system.maskf
                first_max = min(max_iter, fallback_after) if fallback and g.dtype != torch.float64 else max_iter
                u, stats = spec.function(lin, g, tol=tol, max_iter=first_max, **extra)
                if auto and method == "anderson":
                    observe_adjoint(layer, stats)  # its float32 steps: what GMRES would replace
                if fallback and g.dtype != torch.float64 and stats.num_failed and ctx.H is not None:
                    u, stats = float64_fallback(lin, ctx.H, g, u, stats, fallback, tol, max_iter)
        layer.adjoint_start = None  # one backward's start
        layer.last_adjoint = u
        layer.last_backward_stats = stats
        layer.last_adjoint_solver = method
        if stats.num_failed:
            message = (
                f"implicit backward ({method}): {stats.num_failed} of {stats.converged.numel()} sequences "
                f"did not reach tol {tol:g} (max residual {float(stats.residual.max()):.3g})"
            )
            if layer.options.get("strict", False):
                raise InnError(message)
            warnings.warn(message, ConvergenceWarning, stacklevel=2)
        return u, None, None, None


def auto_adjoint(layer: Any, device: torch.device) -> str:
    """The exact adjoint ``backward_solver="auto"`` runs for ``layer`` now: "anderson", until on
    a CPU its adjoints have averaged more than :data:`GMRES_PAYS_FROM` iterations over
    :data:`AUTO_WINDOW` backward passes in a row, then "gmres" for the rest of the layer's life
    (the systems a model learns grow harder as it trains, not easier). Both are exact to the
    same tol; elsewhere than on a CPU Anderson stays, with its CUDA graphs. A layer made afresh
    (a resumed run) starts again from Anderson."""
    if device.type != "cpu":
        return "anderson"
    return "gmres" if getattr(layer, "adjoint_switched", False) else "anderson"


def observe_adjoint(layer: Any, stats: Any) -> None:
    """Record one Anderson adjoint's mean iterations a sequence for :func:`auto_adjoint`; switch
    the layer to GMRES (``layer.adjoint_switched``) once a full window averages past the mark."""
    recent = getattr(layer, "adjoint_recent", None)
    if recent is None:
        recent = layer.adjoint_recent = deque(maxlen=AUTO_WINDOW)
    recent.append(float((stats.newton_iterations + stats.krylov_iterations).float().mean()))
    if len(recent) == AUTO_WINDOW and sum(recent) / AUTO_WINDOW > GMRES_PAYS_FROM:
        layer.adjoint_switched = True
        log.info(
            "the adjoint took %.1f Anderson iterations a batch over the last %d batches: GMRES from here on "
            "(backward_solver auto; docs/hard-systems.md)",
            sum(recent) / AUTO_WINDOW,
            AUTO_WINDOW,
        )


def float64_fallback(
    lin: Any, H: Tensor, g: Tensor, u: Tensor, stats: Any, how: str, tol: float, max_iter: int
) -> tuple[Tensor, Any]:
    """Solve again in float64 the adjoints of the sequences ``stats`` says missed tol: the
    system's float64 copy linearised at the same solution H, by Anderson from the float32 u
    (``how="float64"``) or by the block-tridiagonal solve (``"direct"``). Returns u with
    those rows replaced and the stats with their iterations added (a direct solve counts one),
    their residuals and codes the float64 solve's, ``extra["fallback"]`` how many were solved
    again. A cell without the ``transition`` hook has no float64 copy: nothing changes."""
    import dataclasses

    rows = (~stats.converged).nonzero().flatten().to(g.device)
    system = lin.system.select(rows).in_precision(torch.float64)
    if system is None:
        return u, stats
    lin64 = system.linearize(H[rows].to(torch.float64))
    g64 = g[rows].to(torch.float64)
    if how == "direct":
        u64, st = ADJOINT_SOLVERS["direct"].function(lin64, g64, tol=tol, max_iter=1)
    else:
        u64, st = ADJOINT_SOLVERS["anderson"].function(
            lin64, g64, tol=tol, max_iter=max_iter, u0=u[rows].to(torch.float64)
        )
    u = u.clone()
    u[rows] = u64.to(u.dtype)
    cpu = rows.cpu()
    iterations, residual, code = stats.newton_iterations.clone(), stats.residual.clone(), stats.code.clone()
    iterations[cpu] += st.newton_iterations + st.krylov_iterations
    residual[cpu] = st.residual.to(residual.dtype)
    code[cpu] = st.code
    return u, dataclasses.replace(
        stats,
        newton_iterations=iterations,
        residual=residual,
        code=code,
        converged=code == 0,
        function_evals=stats.function_evals + st.function_evals,
        jacobian_products=stats.jacobian_products + st.jacobian_products,
        extra={**stats.extra, "fallback": int(rows.numel())},
    )


def implicit_solution(layer: Any, xi: Tensor, mask: Tensor, H: Tensor, system: Any, X: Tensor | None = None) -> Tensor:
    """F(H*) with autograd, whose backward goes through the implicit-function theorem.

    ``X``: the input terms W xi + b, already computed with a graph by the caller. The one
    evaluation of F at H* serves both autograd and the adjoint's linearisation."""
    H = H.detach()
    FH, lin = layer.linearized_transition(xi, H, mask, X, system)
    return ImplicitBackward.apply(FH, layer, lin, H)


def jacobian_frobenius(F: Any, H: Tensor, mask: Tensor, samples: int = 1) -> Tensor:
    """Hutchinson's estimate of ||dF/dH||_F^2 at H per sequence, (B,), differentiable in the
    parameters (Jacobian regularisation, Bai, Koltun & Kolter 2021; TorchDEQ's ``jac_reg``).

    E ||J^T v||^2 = tr(J J^T) = ||J||_F^2 for v ~ N(0, I): each of ``samples`` costs one
    vector-Jacobian product with a graph (a double backward through one F). ``F``: H -> F(H)
    with autograd in the parameters, e.g. ``lambda Z: layer.transition(xi, Z, mask, X)``.
    """
    H = H.detach().requires_grad_(True)
    FH = F(H)
    maskf = mask.unsqueeze(-1).to(H.dtype)
    total = H.new_zeros(H.shape[0])
    for _ in range(samples):
        v = torch.randn_like(H) * maskf
        (vj,) = torch.autograd.grad(FH, H, v, create_graph=True)
        total = total + vj.pow(2).flatten(1).sum(1)
    return total / samples
