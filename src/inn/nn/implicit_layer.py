"""What every implicit layer shares: a layer is a cell plus this machinery.

An implicit layer defines its states H (B, n, state width) by H = F(H), each position's state
a function of its input and of both neighbours' states, with the paper's switch s deciding
how much each neighbour counts. A cell (:mod:`inn.nn.implicit_gru`, :mod:`inn.nn.implicit_lstm`)
supplies the per-position transition and its analytic linearisation; this module supplies the
rest, once:

- :class:`BatchTensors`: a batch's tensors listed, cloned and reloaded in place, so that
  a CUDA graph of a solve can be replayed on another batch of the same shape;
- :class:`ImplicitSystem`: the equations for one batch with no autograd graph, what the solvers
  in :mod:`inn.solvers` work on: F, the red-black sweep, starting guesses, stacking and
  selecting sequences, the bfloat16 version;
- :class:`CellLinearization`: J^T products and the red-black adjoint sweep, both from the cell's
  ``_sources`` (what each position sends to its neighbours);
- :class:`ImplicitLayer`: the ``nn.Module``, which solves without a graph, then applies F once
  more with autograd at the solution and wraps it in the implicit backward
  (:mod:`inn.nn.implicit_function`); solver options, warm starts and statistics.

Padding: sequences are left-aligned and ``mask`` is True on real tokens. The state after a
sequence's last real token is the end boundary state, padded states are zero, so a sequence's
states do not depend on what it is batched with.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import torch
import torch.nn.functional as Fn
from torch import Tensor, nn

from inn.errors import InnError


def neighbours(H: Tensor, next_real: Tensor, h_start: Tensor, h_end: Tensor) -> tuple[Tensor, Tensor]:
    """(state_{t-1}, state_{t+1}) for every t, with the boundary states where the sequence ends.

    H (B, n, K); next_real (B, n) bool, True where position t+1 is a real token;
    h_start, h_end broadcastable to (B, 1, K).
    """
    B, n, K = H.shape
    hs = h_start.expand(B, 1, K).to(H.dtype)
    he = h_end.expand(B, 1, K).to(H.dtype)
    prev = torch.cat([hs, H[:, :-1]], dim=1)
    nxt = torch.cat([H[:, 1:], he], dim=1)
    nxt = torch.where(next_real.unsqueeze(-1), nxt, he)
    return prev, nxt


def next_real_mask(mask: Tensor) -> Tensor:
    """(B, n) bool: is position t+1 a real token (False at the last position)."""
    return torch.cat([mask[:, 1:], torch.zeros_like(mask[:, :1])], dim=1)


def switch(a_p: Tensor, a_n: Tensor) -> Tensor:
    """s = s_p / (s_p + s_n) with s_p = sigmoid(a_p), s_n = sigmoid(a_n), computed stably as
    sigmoid(log sigmoid(a_p) - log sigmoid(a_n)): never 0/0 when both sigmoids underflow."""
    return torch.sigmoid(Fn.logsigmoid(a_p) - Fn.logsigmoid(a_n))


def affine(bias: Tensor, x: Tensor, weight: Tensor) -> Tensor:
    """bias + x @ weight.T over any leading dimensions, as one fused product (``addmm``):
    the cell runs once per solver step, and on a GPU each separate operation is a launch.
    With low-precision weights (:meth:`ImplicitSystem.low_precision`) the product runs in their
    precision and the sum in x's."""
    bias2, x2 = bias.reshape(-1, bias.shape[-1]), x.reshape(-1, x.shape[-1])
    if weight.dtype != x.dtype:
        return (bias2 + torch.mm(x2.to(weight.dtype), weight.T)).view(bias.shape)
    return torch.addmm(bias2, x2, weight.T).view(bias.shape)


def product(x: Tensor, weight: Tensor) -> Tensor:
    """x @ weight in x's precision, the product itself in the weight's (low-precision weights)."""
    return x @ weight if weight.dtype == x.dtype else (x.to(weight.dtype) @ weight).to(x.dtype)


class BatchTensors:
    """Per-batch data held as tensor attributes (tensors, tuples of tensors, nested holders):
    a system's equations, a linearisation. A captured CUDA graph reads its inputs at fixed
    addresses, so a graphed solve (:mod:`inn.solvers.cuda_graph`) keeps a :meth:`static_clone`
    per batch shape and :meth:`load_` s each new batch into it before a replay."""

    def tensors(self) -> dict[str, Tensor]:
        """Every tensor this object holds, by attribute name (``name.i`` in a tuple,
        ``name.attribute`` in a nested holder)."""
        out: dict[str, Tensor] = {}
        for name, value in vars(self).items():
            if isinstance(value, Tensor):
                out[name] = value
            elif isinstance(value, BatchTensors):
                out.update({f"{name}.{key}": tensor for key, tensor in value.tensors().items()})
            elif type(value) is tuple:
                out.update({f"{name}.{i}": tensor for i, tensor in enumerate(value) if isinstance(tensor, Tensor)})
        return out

    def static_clone(self) -> Any:
        """A copy whose tensors have storage of their own (a graph's static inputs)."""
        out = copy.copy(self)
        for name, value in vars(self).items():
            if isinstance(value, Tensor):
                setattr(out, name, value.clone())
            elif isinstance(value, BatchTensors):
                setattr(out, name, value.static_clone())
            elif type(value) is tuple:
                setattr(out, name, tuple(v.clone() if isinstance(v, Tensor) else v for v in value))
        return out

    def load_(self, other: "BatchTensors") -> None:
        """Copy ``other``'s tensors into this object's, in place (same names and shapes)."""
        theirs = other.tensors()
        for name, tensor in self.tensors().items():
            tensor.copy_(theirs[name])


class CellLinearization(BatchTensors):
    """dF/dH at one point, the parts every cell shares: J^T products and the red-black adjoint
    sweep, from the cell's ``_sources(g, sl)``, which returns the cotangents that positions
    ``sl`` with output cotangent g send to their left and right neighbours."""

    system: "ImplicitSystem"

    def _sources(self, g: Tensor, sl: slice) -> tuple[Tensor, Tensor]:
        raise NotImplementedError

    def low_precision(self) -> "CellLinearization | None":
        """The same linearisation with bfloat16 matrix products in :meth:`vjp` (the first pass
        of a mixed-precision adjoint solve); None unless the system is float32."""
        low = self.system.low_precision()
        if low is None:
            return None
        out = copy.copy(self)
        out.system = low
        return out

    def vjp(self, V: Tensor) -> Tensor:
        """J^T V = (dF/dH)^T . V, (B, n, K) -> (B, n, K)."""
        g_prev, g_next = self._sources(V, slice(None))
        # position t receives g_prev from t+1 and g_next from t-1
        out = torch.zeros_like(V)
        out[:, :-1] += g_prev[:, 1:]
        out[:, 1:] += g_next[:, :-1]
        return out * self.system.maskf

    def adjoint_sweep(self, u: Tensor, g: Tensor) -> Tensor:
        """One red-black Gauss-Seidel sweep on u = g + J^T u (cost: one J^T product).

        J^T couples position t only to t-1 and t+1, so the even positions are updated from
        the odd ones, then the odd from the new even ones; for this block-tridiagonal
        (consistently ordered) system that contracts like two Jacobi steps.
        """
        n = u.shape[1]
        ne, no = (n + 1) // 2, n // 2
        u = u.clone()
        m = self.system.maskf
        even = g[:, 0::2].clone()
        if no:
            gp, gn = self._sources(u[:, 1::2], slice(1, None, 2))  # odd sources
            even[:, :no] += gp  # 2j+1 -> 2j
            even[:, 1:] += gn[:, : ne - 1]  # 2j+1 -> 2j+2
        u[:, 0::2] = even * m[:, 0::2]
        if no:
            odd = g[:, 1::2].clone()
            gp, gn = self._sources(u[:, 0::2], slice(0, None, 2))  # even sources
            odd[:, : ne - 1] += gp[:, 1:]  # 2j -> 2j-1
            odd += gn[:, :no]  # 2j -> 2j+1
            u[:, 1::2] = odd * m[:, 1::2]
        return u


class ImplicitSystem(BatchTensors):
    """The equations of one batch, with no autograd graph (solver side); a cell subclasses it.

    ``X`` (B, n, blocks x k) are the precomputed input terms W x + b (fixed during a solve, so
    only the recurrent products cost anything), ``weights`` the detached recurrent matrices,
    the first of them U_p; U_n (2k, k). A subclass sets ``cell`` (the transition at every
    position, ``(X, prev, nxt, *weights) -> (state, intermediates)``), ``Linearization`` and
    ``state_factor`` (state width per hidden unit), and adds what its solvers need
    (``tridiagonal_step``, ``_one_step``, optionally ``step_from_zero``).
    """

    state_factor = 1
    Linearization: type
    cell: Any

    def __init__(self, X: Tensor, mask: Tensor, weights: tuple[Tensor, ...], h_start: Tensor, h_end: Tensor) -> None:
        self.X = X
        self.mask = mask
        self.maskf = mask.unsqueeze(-1).to(X.dtype)
        self.next_real = next_real_mask(mask)
        self.next_realf = self.next_real.unsqueeze(-1).to(X.dtype)
        self.weights = weights
        self.k = weights[0].shape[1]
        width = self.state_factor * self.k
        self.h_start = h_start.reshape(1, 1, width).to(X.dtype)
        self.h_end = h_end.reshape(1, 1, width).to(X.dtype)
        self.zero_boundary = torch.zeros(1, 1, width, dtype=X.dtype, device=X.device)
        self.shape = torch.Size((X.shape[0], X.shape[1], width))

    def F(self, H: Tensor) -> Tensor:
        """One evaluation of the implicit definition (padded positions give zero)."""
        prev, nxt = neighbours(H, self.next_real, self.h_start, self.h_end)
        h, _ = self.cell(self.X, prev, nxt, *self.weights)
        return h * self.maskf

    def linearize(self, H: Tensor) -> CellLinearization:
        return self.Linearization(self, H)

    def sweep(self, H: Tensor) -> Tensor:
        """One red-black nonlinear Gauss-Seidel sweep: even positions from their (odd)
        neighbours, then odd positions from the new even ones. Same fixed points as F, the
        same cost (each half evaluates the cell at half the positions), and on this
        nearest-neighbour system it contracts about like two plain F steps."""
        B, n, K = H.shape
        H = H.clone()
        hs = self.h_start.expand(B, 1, K)
        he = self.h_end.expand(B, 1, K)
        for parity in (0, 1):
            sl = slice(parity, None, 2)
            m = len(range(parity, n, 2))
            # neighbours of positions parity, parity + 2, ...: only the half that is updated
            prev = H[:, 0::2][:, :m] if parity else torch.cat([hs, H[:, 1::2]], 1)[:, :m]
            nxt = H[:, parity + 1 :: 2]
            if nxt.shape[1] < m:
                nxt = torch.cat([nxt, he], 1)
            nxt = torch.where(self.next_real[:, sl].unsqueeze(-1), nxt, he)
            h, _ = self.cell(self.X[:, sl], prev, nxt, *self.weights)
            H[:, sl] = h * self.maskf[:, sl]
        return H

    #: how far past :meth:`state_bound` a state may lie and still count as a solution. On a
    #: trained walk INN the saturated units of genuine solutions (tol 1e-4) lay within 1e-3 of
    #: the box, the spurious roots of the relative residual 0.07 to 19 beyond it.
    BOUND_SLACK = 0.01

    def state_bound(self) -> Tensor:
        """(1, 1, width): the largest |state| entry any fixed point can have; a cell that
        knows one says so (the base: inf, no check)."""
        return torch.full_like(self.zero_boundary, float("inf"))

    def outside_bounds(self, H: Tensor) -> Tensor:
        """(B,) bool: sequences whose state leaves the box every fixed point lies in.

        A relative residual ||H - F(H)|| / ||H|| below tol is not proof of a solution: where
        the copy coupling makes I - dF/dH nearly singular, a state far out (|h| up to 20 on a
        trained walk INN, whose fixed points all have |h| <= 1) can pass it, its residual
        small against its own large norm. :func:`inn.solvers.solve` rejects such a state
        (:attr:`~inn.solvers.ResultCode.OUT_OF_BOUNDS`) and retries the sequence from its
        next starting candidate."""
        return (H.abs() > self.state_bound() + self.BOUND_SLACK).flatten(1).any(1)

    def low_precision(self) -> "ImplicitSystem | None":
        """The same equations with the recurrent products in bfloat16 (sums, gates and the
        tridiagonal solve stay in float32): about 2x cheaper per F evaluation on a CPU with
        native bfloat16 products, accurate to a relative residual of about 1e-3. Mixed-precision
        solves iterate on it first and finish on the float32 system. None unless float32."""
        if self.X.dtype != torch.float32:
            return None
        weights = tuple(w.to(torch.bfloat16) for w in self.weights)
        return type(self)(self.X, self.mask, weights, self.h_start, self.h_end)

    def repeat(self, times: int) -> "ImplicitSystem":
        if times == 1:
            return self
        return type(self)(self.X.repeat(times, 1, 1), self.mask.repeat(times, 1), self.weights, self.h_start,
                          self.h_end)

    def select(self, index: Tensor) -> "ImplicitSystem":
        """The systems of the sequences at ``index`` (for retrying failed ones)."""
        return type(self)(self.X[index], self.mask[index], self.weights, self.h_start, self.h_end)

    def initial_guess(self, kind: str, generator: torch.Generator | None = None) -> Tensor:
        """A starting point for the solvers.

        ``"zeros"``; ``"random"`` (uniform in (-0.5, 0.5), drawn on the CPU from
        ``generator`` so it is the same on every device); ``"one_step"``, the paper's guess
        state_t = f(state^f_{t-1}, state^b_{t+1}, xi_t) from a forward and a backward sweep of
        the ordinary recurrent cell with the same weights; ``"F0"``, F(0).
        """
        B, n, K = self.shape
        dt, dev = self.X.dtype, self.X.device
        if kind == "zeros":
            return torch.zeros(B, n, K, dtype=dt, device=dev)
        if kind == "random":
            R = torch.rand(B, n, K, generator=generator, dtype=dt) - 0.5
            return R.to(dev) * self.maskf
        if kind == "F0":
            return self.F(torch.zeros(B, n, K, dtype=dt, device=dev))
        if kind == "one_step":
            return self._one_step()
        raise InnError(f"unknown initial guess {kind!r}; use zeros, random, one_step or F0")

    def _explicit_step(self, Xt: Tensor, state: Tensor) -> Tensor:
        """The ordinary (one-directional) cell's step, (B, K) -> (B, K), for the one-step guess."""
        raise NotImplementedError

    def _one_step(self) -> Tensor:
        """The paper's one-step guess: the cell at every position, with a forward sweep of the
        explicit cell giving the left neighbours and a backward sweep the right ones."""
        B, n, K = self.shape
        hs = self.h_start.reshape(1, K).expand(B, K)
        he = self.h_end.reshape(1, K).expand(B, K)
        fwd, bwd = [], [None] * n
        h = hs
        for t in range(n):
            h = self._explicit_step(self.X[:, t], h)
            fwd.append(h)
        h = he
        for t in range(n - 1, -1, -1):
            h = torch.where(self.mask[:, t : t + 1], self._explicit_step(self.X[:, t], h), he)
            bwd[t] = h
        Hf = torch.stack(fwd, 1)
        Hb = torch.stack(bwd, 1)
        prev = torch.cat([self.h_start.expand(B, 1, K), Hf[:, :-1]], 1)
        nxt = torch.cat([Hb[:, 1:], self.h_end.expand(B, 1, K)], 1)
        nxt = torch.where(self.next_real.unsqueeze(-1), nxt, self.h_end.expand(B, 1, K))
        h, _ = self.cell(self.X, prev, nxt, *self.weights)
        return h * self.maskf


class ImplicitLayer(nn.Module):
    """An implicitly-defined bidirectional recurrent layer: a cell's :class:`ImplicitSystem`
    plus the solvers, the implicit backward, warm starts and statistics.

    Args:
        input_size: width of xi.
        hidden_size: k, the width of the output (and of each part of the state).
        solver: a name in :data:`inn.solvers.SOLVERS` (``"newton_krylov"``, the paper's
            method; ``"newton_direct"``; ``"anderson"``; ``"fixed_point"``).
        **options: solver options (see :func:`inn.solvers.solve`: ``tol``, ``max_iter``,
            ``candidates``, ``strict``, ...) and for the backward pass ``backward_solver``
            (a name in :data:`inn.solvers.ADJOINT_SOLVERS`; ``"anderson"`` default),
            ``backward_tol`` (default: ``tol``), ``backward_max_iter`` (default 200) and
            ``backward_low_precision`` (the ``"anderson"`` adjoint's mixed precision, as the
            forward's ``low_precision``; default ``"auto"``), ``backward_cuda_graph`` (its
            CUDA graphs, as the forward's ``cuda_graph``; default: the forward's setting); or
            an approximate backward
            (``"phantom"`` with ``backward_steps`` and ``backward_damping``,
            ``"jacobian_free"``, ``"preconditioned"``: :mod:`inn.nn.implicit_function`).

    A subclass sets ``System`` and ``input_blocks`` (input terms per hidden unit), registers
    its recurrent weights after ``super().__init__`` and returns them from
    :meth:`recurrent_weights`, then calls :meth:`_boundaries` and :meth:`reset_parameters`.

    Shapes: ``forward(xi, mask)`` with xi (B, n, input_size), mask (B, n) bool (True on real
    tokens, left-aligned) returns (B, n, hidden_size), zero at padded positions. After each
    call ``last_stats`` (:class:`inn.solvers.SolverStats`) says how the solve went per
    sequence, and after each backward ``last_backward_stats`` the same for the adjoint solve;
    ``last_solution`` is that call's state (B, n, state_size), detached (what a warm start of
    the next solve of the same sentences starts from); likewise ``adjoint_start`` (set before a
    backward) and ``last_adjoint`` for the adjoint solve (:mod:`inn.nn.implicit_function`).
    """

    System: type[ImplicitSystem]
    input_blocks: int

    def __init__(self, input_size: int, hidden_size: int, solver: str = "newton_krylov", **options: Any) -> None:
        super().__init__()
        from inn.solvers import SOLVERS, check_options

        if solver not in SOLVERS:
            raise InnError(f"unknown solver {solver!r}; choose one of {', '.join(SOLVERS)}")
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.state_size = self.System.state_factor * hidden_size  # the width of the solved state
        self.solver = solver
        from inn.nn.implicit_function import BACKWARD_OPTIONS, check_backward_options

        self.backward_options = {key: options.pop(key) for key in BACKWARD_OPTIONS if key in options}
        check_backward_options(self.backward_options)
        check_options(solver, options)
        self.options = options
        self.weight_x = nn.Parameter(torch.empty(self.input_blocks * hidden_size, input_size))
        self.bias = nn.Parameter(torch.empty(self.input_blocks * hidden_size))
        self.last_stats = None
        self.last_backward_stats = None
        self.last_solution = None  # the state of the last forward call, detached (for warm starts)
        self.adjoint_start = None  # the next backward's adjoint starting point (used once)
        self.last_adjoint = None  # u of the last backward, detached (for adjoint warm starts)
        # Jacobian regularisation: with jacobian_samples > 0, a forward with gradients also
        # leaves the Hutchinson estimate of ||dF/dH||_F^2 per state entry (differentiable)
        self.jacobian_samples = 0
        self.last_jacobian_penalty = None

    def _boundaries(self, trainable: bool) -> None:
        """The states beyond the ends, zero: learned parameters, or fixed buffers (the paper)."""
        if trainable:
            self.h_start = nn.Parameter(torch.zeros(self.state_size))
            self.h_end = nn.Parameter(torch.zeros(self.state_size))
        else:
            self.register_buffer("h_start", torch.zeros(self.state_size))
            self.register_buffer("h_end", torch.zeros(self.state_size))

    def recurrent_weights(self) -> tuple[Tensor, ...]:
        """The recurrent matrices, in the order the cell takes them (U_p; U_n first)."""
        raise NotImplementedError

    def reset_parameters(self) -> None:
        """Uniform(-1/sqrt(k), 1/sqrt(k)), as torch.nn.GRU and torch.nn.LSTM do."""
        bound = 1.0 / math.sqrt(self.hidden_size)
        for p in (self.weight_x, self.bias, *self.recurrent_weights()):
            nn.init.uniform_(p, -bound, bound)

    def extra_repr(self) -> str:
        return f"{self.input_size}, {self.hidden_size}, solver={self.solver!r}"

    def input_terms(self, xi: Tensor) -> Tensor:
        """W x_t + b for all gates at once: (B, n, input_size) -> (B, n, input_blocks x k)."""
        return Fn.linear(xi, self.weight_x, self.bias)

    def system(self, xi: Tensor, mask: Tensor, X: Tensor | None = None) -> ImplicitSystem:
        """The detached equations for this batch (what the solvers work on); ``X`` are the
        input terms if already computed."""
        if X is None:
            with torch.no_grad():
                X = self.input_terms(xi)
        X = X.detach()
        weights = tuple(w.detach() for w in self.recurrent_weights())
        return self.System(X, mask.bool(), weights, self.h_start.detach(), self.h_end.detach())

    def transition(self, xi: Tensor, H: Tensor, mask: Tensor, X: Tensor | None = None) -> Tensor:
        """F(H): one evaluation of the implicit definition on the state H (B, n, state_size),
        with autograd (padded rows zero). ``X``: the input terms ``input_terms(xi)`` when the
        caller has them (saves a product)."""
        return self._evaluate(xi, H, mask, X)[0]

    def linearized_transition(self, xi: Tensor, H: Tensor, mask: Tensor, X: Tensor | None,
                              system: ImplicitSystem) -> tuple[Tensor, CellLinearization]:
        """F(H) with autograd, and the linearisation of ``system`` at H (detached) from the
        same evaluation (the implicit backward needs both at the solution)."""
        FH, evaluated = self._evaluate(xi, H, mask, X)
        detached = tuple(t.detach() for t in evaluated[:3]) + (tuple(t.detach() for t in evaluated[3]),)
        return FH, system.Linearization(system, H, evaluated=detached)

    def _evaluate(self, xi: Tensor, H: Tensor, mask: Tensor, X: Tensor | None) -> tuple[Tensor, tuple]:
        mask = mask.bool()
        prev, nxt = neighbours(H, next_real_mask(mask), self.h_start, self.h_end)
        X = self.input_terms(xi) if X is None else X
        h, intermediates = self.System.cell(X, prev, nxt, *self.recurrent_weights())
        return h * mask.unsqueeze(-1).to(h.dtype), (prev, nxt, h, intermediates)

    def output(self, H: Tensor) -> Tensor:
        """The layer's output from the solved state (the whole state, unless a cell says else)."""
        return H

    def forward(self, xi: Tensor, mask: Tensor | None = None, start: Tensor | None = None) -> Tensor:
        """The output (B, n, k) of the state H with H = F(H) for every sequence; ``start``
        (B, n, state_size): a warm start for the solve, e.g. the same sentences' solutions from
        the previous epoch (any dtype; tried before the solver's own candidates, which remain
        the fallback)."""
        from inn.nn.implicit_function import implicit_solution
        from inn.solvers import solve

        if xi.dim() != 3 or xi.shape[-1] != self.input_size:
            raise InnError(f"{type(self).__name__} expects xi of shape (B, n, {self.input_size}), "
                           f"got {tuple(xi.shape)}")
        if mask is None:
            mask = torch.ones(xi.shape[:2], dtype=torch.bool, device=xi.device)
        mask = mask.bool()
        if xi.shape[1] == 0:
            return xi.new_zeros(xi.shape[0], 0, self.hidden_size)
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
