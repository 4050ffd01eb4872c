"""Shared pieces of the solvers: result codes, the result and stats records, the system protocol, norms.

Every nonlinear solver in this package solves the same problem, ``G(H) = H - F(H) = 0`` for a
batch of independent systems (one per sequence), and reports per system how it went. The
system is anything that follows :class:`FixedPointSystem`, the whole of what the solvers call;
:class:`inn.nn.ImplicitSequence` builds one (:class:`inn.nn.system.ImplicitSystem`)
per forward pass, for any cell.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Protocol

import torch
from torch import Tensor


class ResultCode(enum.IntEnum):
    """Outcome of one system's solve (lineax style: a code, never a silent zero)."""

    CONVERGED = 0
    MAX_ITERATIONS = 1
    BREAKDOWN = 2  #: a Krylov scalar vanished (rho, <r0, v> or <t, t>): cannot continue
    NONFINITE = 3  #: NaN or Inf appeared in the iterate or the residual
    DIVERGED = 4  #: the residual grew past ``divergence_factor`` times its start (Anderson: after its first step)
    #: no progress: the line search found no step that decreases the residual, or (GMRES) the
    #: residual sits at round-off
    STALLED = 5
    OUT_OF_BOUNDS = 6  #: met tol outside the box every fixed point lies in: not a solution


class ConvergenceWarning(RuntimeWarning):
    """A solve did not reach its tolerance; the trainer counts these (``strict`` raises instead)."""


class Linearization(Protocol):
    """dF/dH at one point ``H``: what the Newton steps and the adjoint solvers call."""

    system: FixedPointSystem  #: the system it linearises (masks, and its bfloat16 version)
    F: Tensor  #: F(H) at the linearisation point, (B, n, K)
    #: the elementwise coupling (lower, upper) of each state to its neighbours, (B, n, K) each,
    #: that the tridiagonal preconditioners invert; None where the cell has none
    copy: tuple[Tensor, Tensor] | None

    def jvp(self, V: Tensor) -> Tensor:
        """J V, (B, n, K) -> (B, n, K)."""

    def vjp(self, V: Tensor) -> Tensor:
        """J^T V, (B, n, K) -> (B, n, K)."""

    def blocks(self, t: int) -> tuple[Tensor, Tensor]:
        """(dF_t/dh_{t-1}, dF_t/dh_{t+1}) as (B, K, K) each; zero where there is no coupling."""

    def adjoint_sweep(self, u: Tensor, g: Tensor) -> Tensor:
        """One red-black Gauss-Seidel sweep on u = g + J^T u."""

    def low_precision(self) -> Linearization | None:
        """The same with bfloat16 matrix products, or None."""


class FixedPointSystem(Protocol):
    """A batch of fixed-point problems H = F(H), H of shape (B, n, K), independent along B,
    each position coupled to its two neighbours: every member a solver calls. Members that a
    system cannot offer cheaply have a defined fallback (the docstrings say which), so no
    solver needs to ask what a system has."""

    shape: torch.Size  #: (B, n, K)
    mask: Tensor  #: (B, n) bool, True on real positions
    maskf: Tensor  #: (B, n, 1), the mask as 0/1 in the states' dtype
    X: Tensor  #: the input terms, fixed during a solve (its dtype and device are the states')

    def F(self, H: Tensor) -> Tensor:
        """One evaluation of the implicit definition (zero at padding)."""

    def linearize(self, H: Tensor) -> Linearization:
        """F and its Jacobian products at ``H``."""

    def sweep(self, H: Tensor) -> Tensor:
        """One red-black nonlinear Gauss-Seidel sweep (same fixed points as F)."""

    def tridiagonal_step(self, H: Tensor, with_residual: bool = False) -> Tensor | tuple[Tensor, Tensor]:
        """H + (I - D)^{-1} (F(H) - H) with D the elementwise coupling at H (F(H) with none),
        and with ``with_residual`` H's relative residual per sequence."""

    def step_from_zero(self) -> tuple[Tensor, Tensor] | None:
        """The tridiagonal step at H = 0 and its residual when it is cheaper so, else None."""

    def initial_guess(self, kind: str, generator: torch.Generator | None = None) -> Tensor:
        """A starting point: ``"zeros"``, ``"random"``, ``"one_step"`` or ``"F0"``."""

    def repeat(self, times: int) -> FixedPointSystem:
        """The same systems stacked ``times`` times along B (for several starting candidates)."""

    def select(self, index: Tensor) -> FixedPointSystem:
        """The systems of the sequences at ``index`` (retries)."""

    def outside_bounds(self, H: Tensor) -> Tensor:
        """(B,) bool: where H lies outside a box that holds every fixed point (all False for a
        system that knows no box)."""

    def low_precision(self) -> FixedPointSystem | None:
        """The same equations with bfloat16 matrix products, or None."""

    @property
    def graphable(self) -> bool:
        """Whether its solves may be captured as CUDA graphs (:mod:`inn.solvers.cuda_graph`,
        which also calls ``static_clone``, ``load_`` and ``tensors`` of
        :class:`inn.nn.system.BatchTensors` on graphable systems)."""


def batch_norm(X: Tensor) -> Tensor:
    """Euclidean norm of each sample: (B, ...) -> (B,)."""
    return torch.linalg.vector_norm(X.reshape(X.shape[0], -1), dim=1)


def batch_dot(X: Tensor, Y: Tensor) -> Tensor:
    """Inner product of each sample: (B, ...), (B, ...) -> (B,)."""
    return (X.reshape(X.shape[0], -1) * Y.reshape(Y.shape[0], -1)).sum(1)


def bcast(v: Tensor, like: Tensor) -> Tensor:
    """View a per-sample (B,) tensor so it broadcasts against ``like`` (B, ...)."""
    return v.reshape(v.shape + (1,) * (like.dim() - 1))


def relative_residual(G: Tensor, H: Tensor) -> Tensor:
    """||G|| / ||H|| per sample; an all-padding (empty) sequence has H = G = 0 and scores 0."""
    tiny = torch.finfo(H.dtype).tiny
    return batch_norm(G) / batch_norm(H).clamp_min(tiny)


@dataclass
class SolverStats:
    """What one batched solve did, per sequence (TorchDEQ/lineax style).

    All per-sequence fields are CPU tensors of shape (B,). ``candidate`` is the index (into
    the ``candidates`` option) of the starting point whose solution was kept.
    """

    solver: str
    newton_iterations: Tensor  #: outer iterations (Newton steps, Anderson/fixed-point steps)
    krylov_iterations: Tensor  #: inner linear-solver iterations summed over outer steps
    residual: Tensor  #: final ||H - F(H)|| / ||H||
    converged: Tensor  #: bool
    code: Tensor  #: :class:`ResultCode` values
    candidate: Tensor  #: index of the winning starting candidate
    function_evals: int = 0  #: batched evaluations of F (and of its linearisation)
    jacobian_products: int = 0  #: batched J V or J^T V products
    extra: dict = field(default_factory=dict)

    @property
    def num_failed(self) -> int:
        """How many sequences did not converge (the count a trainer sums into its log)."""
        return int((~self.converged).sum())

    def summary(self) -> dict[str, float]:
        """Batch means and maxima as plain floats, for logs and the report. ``iterations_*`` count
        the outer iterations, whatever the solver's are (Newton steps, Anderson or fixed-point
        steps); ``krylov_mean`` the inner linear-solver iterations (0 for a solver without)."""
        return {
            "iterations_mean": float(self.newton_iterations.float().mean()) if self.newton_iterations.numel() else 0.0,
            "iterations_max": int(self.newton_iterations.max()) if self.newton_iterations.numel() else 0,
            "krylov_mean": float(self.krylov_iterations.float().mean()) if self.krylov_iterations.numel() else 0.0,
            "residual_max": float(self.residual.max()) if self.residual.numel() else 0.0,
            "failed": self.num_failed,
            "function_evals": self.function_evals,
            "jacobian_products": self.jacobian_products,
        }


@dataclass
class SolveResult:
    """What one batched solve found, per sequence, forward or adjoint: the solution and (B,)
    tensors of its outer and inner iterations, relative residual and :class:`ResultCode`.

    A forward solver function returns one (:attr:`inn.solvers.SolverSpec.function`); the
    adjoints build their :class:`SolverStats` from one. It unpacks as the 5-tuple
    ``(solution, iterations, inner_iterations, residual, code)`` that solver functions
    returned before it, and a registered solver may still return that tuple.
    """

    solution: Tensor  #: (B, n, K)
    iterations: Tensor  #: outer iterations (Newton steps, Anderson/fixed-point steps)
    inner_iterations: Tensor  #: inner linear-solver iterations summed over outer steps
    residual: Tensor  #: final relative residual
    code: Tensor  #: :class:`ResultCode` values

    def __iter__(self):
        return iter((self.solution, self.iterations, self.inner_iterations, self.residual, self.code))

    def stats(
        self,
        solver: str,
        *,
        candidate: Tensor | None = None,
        function_evals: int = 0,
        jacobian_products: int = 0,
        extra: dict | None = None,
    ) -> SolverStats:
        """The :class:`SolverStats` record of this result (CPU tensors), ``candidate`` the
        winning starting point of each sequence (default: 0, the only one)."""
        code = self.code.cpu()
        return SolverStats(
            solver=solver,
            newton_iterations=self.iterations.cpu(),
            krylov_iterations=self.inner_iterations.cpu(),
            residual=self.residual.detach().cpu(),
            converged=code == int(ResultCode.CONVERGED),
            code=code,
            candidate=torch.zeros_like(code) if candidate is None else candidate.cpu(),
            function_evals=function_evals,
            jacobian_products=jacobian_products,
            extra=extra or {},
        )


class Counter:
    """Counts batched F evaluations and Jacobian products for the stats record."""

    def __init__(self) -> None:
        self.f = 0
        self.jp = 0
