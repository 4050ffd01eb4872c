"""Any cell as an implicit layer: the cell protocol (:class:`Cell`) and :class:`ImplicitSequence`.

The cell f is any ``nn.Module`` with ``forward(x, h_prev, h_next) -> h`` on (B, n, d),
(B, n, K), (B, n, K) -> (B, n, K), acting on every position on its own (:class:`Cell` lists
what it may add for speed). :class:`ImplicitSequence` is the ``nn.Module``: it solves
H = F(H) without a graph on the batch's :class:`~inn.nn.system.ImplicitSystem`, then applies F
once more with autograd at the solution and wraps it in the implicit backward
(:mod:`inn.nn.implicit_function`); solver options, warm starts and statistics.
"""

from __future__ import annotations

import math
from typing import Any, Protocol

import torch
from torch import Tensor, nn

from inn.errors import InnError
from inn.nn.system import (
    CellLinearization,
    ImplicitSystem,
    evaluate_cell,
    neighbours,
    next_real_mask,
)


class Cell(Protocol):
    """What :class:`ImplicitSequence` asks of a cell, and the hooks it may add for speed.

    Required: ``forward(x, h_prev, h_next) -> h``, (B, n, d), (B, n, K), (B, n, K) ->
    (B, n, K), every position on its own (the layer couples positions only through their
    neighbours' states). Nothing else: autograd's Jacobian products (``torch.func``) then give
    every solver and the exact implicit backward.

    Optional hooks, each used when present and replaced by the fallback in brackets otherwise.
    Shapes: B sequences, n positions, K the state's width, m the width of the input terms.

    - ``project(x) -> X``, (B, n, d) -> (B, n, m); ``transition(X, h_prev, h_next, *weights)
      -> (h, aux)``, h (B, n, K); and ``weights() -> tuple of tensors``: the input projection
      split off, computed once per solve (x is fixed while the solver iterates); ``transition``
      is the cell on it with the recurrent ``weights`` passed in (detached on the solver side,
      with autograd at the solution), ``aux`` whatever the other hooks want from that
      evaluation (the GRU's gates), passed on to ``coupling`` and ``Linearization``. With
      ``supports_low_precision`` the weights may arrive in bfloat16 while X and the states are
      float32: do the matrix products in the weights' precision and everything else in the
      states' (:func:`~inn.nn.system.affine`, :func:`~inn.nn.system.product`), and return h in the states' dtype.
      [X = x, forward, no weights]
    - ``Linearization``: a :class:`~inn.nn.system.CellLinearization` subclass, built as
      ``Linearization(system, H, evaluated)``: ``system`` the :class:`~inn.nn.system.ImplicitSystem`, H
      (B, n, K) the point, ``evaluated`` either None (evaluate the cell at H yourself) or the
      detached ``(prev, nxt, h, aux)`` of the cell at H, neighbours (B, n, K) each, the cell's
      unmasked state (B, n, K) and its ``aux``, which the layer has anyway at the solution. It
      sets ``system``, ``F`` (F(H), masked) and ``copy`` (the masked ``coupling`` or None) and
      implements analytic ``jvp`` (J V), ``_sources`` (hence J^T V and the red-black adjoint
      sweep) and ``blocks`` (dF_t/dh_{t-1}, dF_t/dh_{t+1}, (B, K, K) each).
      [:class:`~inn.nn.system.AutogradLinearization`: about 2-3x an analytic product]
    - ``coupling(X, h_prev, h_next, aux) -> (lower, upper)``, each (B, n, K): the elementwise
      (diagonal) part of dh_t/dh_{t-1} and dh_t/dh_{t+1}, e.g. the GRU's gated copy (1 - z) s
      and (1 - z)(1 - s), unmasked (the layer zeroes the links that do not exist). The
      tridiagonal sweep of Anderson and the adjoint's preconditioner invert I - D exactly
      along the sequence, unit by unit: the slow, length-dependent copy modes cost no
      iterations. [none: those steps are plain F and J^T steps]
    - ``tridiagonal_step(system, H, with_residual) -> H'`` (or ``(H', residual)``, residual
      (B,)): a cell's own preconditioned step (the LSTM solves its c exactly, then h).
      [H + (I - D)^{-1} (F(H) - H), D from ``coupling``]
    - ``step_from_zero(system) -> (H', residual) or None``: the same as
      ``tridiagonal_step(system, 0, with_residual=True)``, H' (B, n, K) and H = 0's relative
      residual per sequence (B,), computed more cheaply (with zero neighbours the GRU's needs
      no matrix product); None where the shortcut does not apply (nonzero boundary states).
      [None: the step is taken]
    - ``explicit_step(X_t, state, *weights)``: the one-directional cell of the paper's
      one-step guess, X_t (B, m), state (B, K) -> (B, K). [the cell with both neighbours ``state``]
    - ``state_bound(h_start, h_end) -> bound``: the boundary states come as (1, 1, K) and the
      bound is (1, 1, K) (anything that broadcasts against (B, n, K)): no fixed point has a
      larger |entry|, so a state that meets tol beyond it (plus
      :attr:`~inn.nn.system.ImplicitSystem.BOUND_SLACK`) is a spurious root
      (``OUT_OF_BOUNDS``) and is solved again. [inf: no check]
    - ``output(H)`` and ``output_size``: the layer's output where the state is wider (the
      LSTM's state is [h; c], (B, n, 2k), its output h, (B, n, k)). [H]
    - ``supports_low_precision = True``: ``transition`` and the linearisation accept bfloat16
      weights (:meth:`~inn.nn.system.ImplicitSystem.low_precision`; Anderson's first pass). [False]
    """

    def forward(self, x: Tensor, h_prev: Tensor, h_next: Tensor) -> Tensor: ...


class HeldCell(nn.Module):
    """Base of the cells whose parameters the layer may hold under their flat names (the implicit
    GRU's and LSTM's, so that checkpoints keep their keys): :attr:`params` is where they live,
    and they start uniform in +-1/sqrt(k), as torch's GRU and LSTM do. A subclass creates its
    parameters and names its recurrent matrices in :meth:`weights`."""

    hidden_size: int

    @property
    def params(self) -> nn.Module:
        """Where the parameters live: this cell, or the layer holding them."""
        return self.__dict__.get("holder", self)

    def named_parameters(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True):
        """The cell's parameters wherever they live: held by its layer (under their flat names,
        :meth:`ImplicitSequence._hold_cell_parameters`) they are still the cell's, so that
        ``cell.parameters()`` gives what an optimiser or a regulariser of the cell needs. The
        layer's own ``parameters()`` lists each once."""
        holder = self.__dict__.get("holder")
        if holder is None:
            yield from super().named_parameters(prefix, recurse, remove_duplicate)
            return
        for name in self.__dict__["held"]:
            yield (f"{prefix}.{name}" if prefix else name), holder._parameters[name]

    def weights(self) -> tuple[Tensor, ...]:
        """The recurrent matrices, in the order the cell's ``transition`` takes them."""
        raise NotImplementedError

    def reset_parameters(self) -> None:
        """Uniform(-1/sqrt(k), 1/sqrt(k)), as torch.nn.GRU and torch.nn.LSTM do."""
        bound = 1.0 / math.sqrt(self.hidden_size)
        for p in (self.params.weight_x, self.params.bias, *self.weights()):
            nn.init.uniform_(p, -bound, bound)


class ImplicitSequence(nn.Module):
    """An implicitly-defined bidirectional recurrent layer from any cell: the states H with
    h_t = cell(x_t, h_{t-1}, h_{t+1}) at every real position, found by a solver, and their
    exact gradients by implicit differentiation.

    Args:
        cell: an ``nn.Module`` with ``forward(x, h_prev, h_next) -> h`` on (B, n, d),
            (B, n, K), (B, n, K) -> (B, n, K), every position on its own; the hooks of
            :class:`Cell` make it faster.
        state_size: K, the width of the state.
        solver: a name in :data:`inn.solvers.SOLVERS`: ``"anderson"`` (default, the workflow's:
            the fastest measured, 2-3x the paper's method), ``"newton_krylov"`` (the paper's
            Newton-BiCGSTAB), ``"newton_direct"``, ``"fixed_point"``, or one added by
            :func:`inn.solvers.register_solver`. All reach the same states to ``tol``.
        trainable_boundary: learn the boundary states h_s and h_e (zero and fixed otherwise,
            as in the paper).
        input_size: d, the width of x (default: the cell's ``input_size`` attribute, if any).
            Known, it lets the layer check the cell on a tiny probe now
            (:func:`inn.nn.probe.check_cell`: :class:`inn.errors.CellError` for a wrong
            shape, dtype or device, or a non-finite state from finite input) and refuse xi of
            another width.
        **options: solver options (see :func:`inn.solvers.solve`: ``tol``, ``max_iter``,
            ``candidates``, ``strict``, ...) and for the backward pass ``backward_solver``
            (a name in :data:`inn.solvers.ADJOINT_SOLVERS`; ``"anderson"`` default),
            ``backward_tol`` (default: ``tol``), ``backward_max_iter`` (default 200) and
            ``backward_low_precision`` (the ``"anderson"`` adjoint's mixed precision, as the
            forward's ``low_precision``; default ``"auto"``), ``backward_cuda_graph`` (its
            CUDA graphs, as the forward's ``cuda_graph``; default: the forward's setting); or
            an approximate backward (``"phantom"`` with ``backward_steps`` and
            ``backward_damping``, ``"jacobian_free"``, ``"preconditioned"``:
            :mod:`inn.nn.implicit_function`).

    Shapes: ``forward(xi, mask)`` with xi (B, n, d), mask (B, n) bool (True on real tokens,
    left-aligned) returns (B, n, output_size) (the state, or the cell's ``output`` of it), zero
    at padded positions. After each call ``last_stats`` (:class:`inn.solvers.SolverStats`)
    says how the solve went per sequence, and after each backward ``last_backward_stats`` the
    same for the adjoint solve; ``last_solution`` is that call's state (B, n, state_size),
    detached (what a warm start of the next solve of the same sentences starts from); likewise
    ``adjoint_start`` (set before a backward) and ``last_adjoint`` for the adjoint solve
    (:mod:`inn.nn.implicit_function`).
    """

    def __init__(
        self,
        cell: nn.Module,
        state_size: int,
        solver: str = "anderson",
        trainable_boundary: bool = False,
        input_size: int | None = None,
        **options: Any,
    ) -> None:
        super().__init__()
        from inn.nn.implicit_function import BACKWARD_OPTIONS, check_backward_options
        from inn.nn.probe import check_cell
        from inn.solvers import check_options, check_solver_options, solver_spec

        solver_spec(solver)  # an unknown name: one line listing the known ones
        self.cell = cell
        self.state_size = state_size
        self.output_size = getattr(cell, "output_size", state_size)
        self.input_size = input_size if input_size is not None else getattr(cell, "input_size", None)
        if self.input_size is not None:
            check_cell(cell, state_size, self.input_size)  # a misbehaving cell: one line now, not in a solve
        self.solver = solver
        self.backward_options = {key: options.pop(key) for key in BACKWARD_OPTIONS if key in options}
        check_backward_options(self.backward_options)
        check_options(solver, options)
        check_solver_options(solver, self.backward_options)  # their types and ranges (inn.solvers.BACKWARD_OPTIONS)
        self.options = options
        self.last_stats = None
        self.last_backward_stats = None
        self.last_solution = None  # the state of the last forward call, detached (for warm starts)
        self.adjoint_start = None  # the next backward's adjoint starting point (used once)
        self.last_adjoint = None  # u of the last backward, detached (for adjoint warm starts)
        # Jacobian regularisation: with jacobian_samples > 0, a forward with gradients also
        # leaves the Hutchinson estimate of ||dF/dH||_F^2 per state entry (differentiable)
        self.jacobian_samples = 0
        self.last_jacobian_penalty = None
        self._boundaries(trainable_boundary)

    def _boundaries(self, trainable: bool) -> None:
        """The states beyond the ends, zero: learned parameters, or fixed buffers (the paper)."""
        if trainable:
            self.h_start = nn.Parameter(torch.zeros(self.state_size))
            self.h_end = nn.Parameter(torch.zeros(self.state_size))
        else:
            self.register_buffer("h_start", torch.zeros(self.state_size))
            self.register_buffer("h_end", torch.zeros(self.state_size))

    def _hold_cell_parameters(self) -> None:
        """Register the cell's parameters on this layer under their own names, before the
        boundary states, and let the cell read them from here: the state_dict keys and the
        parameter order of the implicit GRU and LSTM from before they were cells
        (``weight_x``, ... rather than ``cell.weight_x``), so that trained checkpoints and
        optimiser states load."""
        boundaries = {name: self._parameters.pop(name) for name in ("h_start", "h_end") if name in self._parameters}
        held = tuple(self.cell._parameters)
        for name in held:
            self.register_parameter(name, self.cell._parameters.pop(name))
        self._parameters.update(boundaries)
        self.cell.__dict__["holder"] = self  # a plain reference, not a submodule (no cycle of modules)
        self.cell.__dict__["held"] = held  # what cell.parameters() still lists

    def recurrent_weights(self) -> tuple[Tensor, ...]:
        """The tensors the cell's ``transition`` takes besides its input terms (none without
        the hook)."""
        weights = getattr(self.cell, "weights", None)
        return () if weights is None else tuple(weights())

    def extra_repr(self) -> str:
        return f"state_size={self.state_size}, solver={self.solver!r}"

    def input_terms(self, xi: Tensor) -> Tensor:
        """The cell's input terms, computed once per solve: its ``project(xi)``, else xi."""
        project = getattr(self.cell, "project", None)
        return xi if project is None else project(xi)

    def system(self, xi: Tensor, mask: Tensor, X: Tensor | None = None) -> ImplicitSystem:
        """The detached equations for this batch (what the solvers work on); ``X`` are the
        input terms if already computed."""
        if X is None:
            with torch.no_grad():
                X = self.input_terms(xi)
        weights = tuple(w.detach() for w in self.recurrent_weights())
        return ImplicitSystem(self.cell, X.detach(), mask.bool(), weights, self.h_start.detach(), self.h_end.detach())

    def transition(self, xi: Tensor, H: Tensor, mask: Tensor, X: Tensor | None = None) -> Tensor:
        """F(H): one evaluation of the implicit definition on the state H (B, n, state_size),
        with autograd (padded rows zero). ``X``: the input terms ``input_terms(xi)`` when the
        caller has them (saves a product)."""
        return self._evaluate(xi, H, mask, X)[0]

    def linearized_transition(
        self, xi: Tensor, H: Tensor, mask: Tensor, X: Tensor | None, system: ImplicitSystem
    ) -> tuple[Tensor, CellLinearization]:
        """F(H) with autograd, and the linearisation of ``system`` at H (detached) from the
        same evaluation (the implicit backward needs both at the solution)."""
        FH, (prev, nxt, h, aux) = self._evaluate(xi, H, mask, X)
        aux = tuple(t.detach() for t in aux) if isinstance(aux, tuple) else aux
        return FH, system.linearize(H, (prev.detach(), nxt.detach(), h.detach(), aux))

    def _evaluate(self, xi: Tensor, H: Tensor, mask: Tensor, X: Tensor | None) -> tuple[Tensor, tuple]:
        mask = mask.bool()
        prev, nxt = neighbours(H, next_real_mask(mask), self.h_start, self.h_end)
        X = self.input_terms(xi) if X is None else X
        h, aux = evaluate_cell(self.cell, X, prev, nxt, self.recurrent_weights())
        return h * mask.unsqueeze(-1).to(h.dtype), (prev, nxt, h, aux)

    def output(self, H: Tensor) -> Tensor:
        """The layer's output from the solved state: the cell's ``output``, else the state."""
        output = getattr(self.cell, "output", None)
        return H if output is None else output(H)

    def forward(self, xi: Tensor, mask: Tensor | None = None, start: Tensor | None = None) -> Tensor:
        """The output (B, n, output_size) of the state H with H = F(H) for every sequence;
        ``start`` (B, n, state_size): a warm start for the solve, e.g. the same sentences'
        solutions from the previous epoch (any dtype; tried before the solver's own
        candidates, which remain the fallback)."""
        from inn.nn.implicit_function import implicit_solution
        from inn.solvers import solve

        if xi.dim() != 3 or (self.input_size is not None and xi.shape[-1] != self.input_size):
            width = "d" if self.input_size is None else self.input_size
            raise InnError(f"{type(self).__name__} expects xi of shape (B, n, {width}), got {tuple(xi.shape)}")
        if mask is None:
            mask = torch.ones(xi.shape[:2], dtype=torch.bool, device=xi.device)
        mask = mask.bool()
        if xi.shape[1] == 0:
            return xi.new_zeros(xi.shape[0], 0, self.output_size)
        needs_grad = torch.is_grad_enabled() and (xi.requires_grad or any(p.requires_grad for p in self.parameters()))
        X = self.input_terms(xi)  # with a graph when gradients are wanted
        system = self.system(xi, mask, X)
        if start is not None and start.shape == system.shape:  # (solve names a wrong shape)
            start = start.to(X.dtype) * system.maskf  # padded positions stay inert
        with torch.no_grad():
            H, stats = solve(system, self.solver, start=start, **self.options)
        self.last_stats = stats
        self.last_solution = H
        self.last_jacobian_penalty = None
        if not needs_grad:
            return self.output(H)
        if self.jacobian_samples:
            from inn.nn.implicit_function import jacobian_frobenius

            fro2 = jacobian_frobenius(lambda Z: self.transition(xi, Z, mask, X), H, mask, self.jacobian_samples)
            self.last_jacobian_penalty = fro2.sum() / (mask.sum() * self.state_size).clamp_min(1)
        return self.output(implicit_solution(self, xi, mask, H, system, X))
