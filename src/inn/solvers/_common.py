"""Shared pieces of the solvers: result codes, the stats record, the system protocol, norms.

Every nonlinear solver in this package solves the same problem, ``G(H) = H - F(H) = 0`` for a
batch of independent systems (one per sequence), and reports per system how it went. The
system is anything that follows :class:`FixedPointSystem`; :class:`inn.nn.ImplicitGRU` builds
one (:class:`inn.nn.implicit_gru.GRUSystem`) per forward pass.
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
    STALLED = 5  #: the line search found no step that decreases the residual
    OUT_OF_BOUNDS = 6  #: met tol outside the box every fixed point lies in: not a solution


class ConvergenceWarning(RuntimeWarning):
    """A solve did not reach its tolerance; the trainer counts these (``strict`` raises instead)."""


class Linearization(Protocol):
    """dF/dH at one point ``H``: products with the Jacobian J and its transpose."""

    F: Tensor  #: F(H) at the linearisation point, (B, n, k)

    def jvp(self, V: Tensor) -> Tensor:
        """J V, (B, n, k) -> (B, n, k)."""

    def vjp(self, V: Tensor) -> Tensor:
        """J^T V, (B, n, k) -> (B, n, k)."""

    def blocks(self, t: int) -> tuple[Tensor, Tensor]:
        """(dF_t/dh_{t-1}, dF_t/dh_{t+1}) as (B, k, k) each; zero where there is no coupling."""


class FixedPointSystem(Protocol):
    """A batch of fixed-point problems H = F(H), H of shape (B, n, k), independent along B."""

    shape: torch.Size

    def F(self, H: Tensor) -> Tensor:
        """One evaluation of the implicit definition."""

    def linearize(self, H: Tensor) -> Linearization:
        """F and its Jacobian products at ``H``."""

    def initial_guess(self, kind: str, generator: torch.Generator | None = None) -> Tensor:
        """A starting point: ``"zeros"``, ``"random"`` or ``"one_step"``."""

    def repeat(self, times: int) -> "FixedPointSystem":
        """The same systems stacked ``times`` times along B (for several starting candidates)."""

    def outside_bounds(self, H: Tensor) -> Tensor:
        """(B,) bool: where H lies outside a box that holds every fixed point (optional; a
        system without one has no such check)."""


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
        """Batch means and maxima as plain floats, for logs and the report."""
        return {
            "newton_mean": float(self.newton_iterations.float().mean()) if self.newton_iterations.numel() else 0.0,
            "newton_max": int(self.newton_iterations.max()) if self.newton_iterations.numel() else 0,
            "krylov_mean": float(self.krylov_iterations.float().mean()) if self.krylov_iterations.numel() else 0.0,
            "residual_max": float(self.residual.max()) if self.residual.numel() else 0.0,
            "failed": self.num_failed,
            "function_evals": self.function_evals,
            "jacobian_products": self.jacobian_products,
        }


class Counter:
    """Counts batched F evaluations and Jacobian products for the stats record."""

    def __init__(self) -> None:
        self.f = 0
        self.jp = 0
