"""Any cell as an implicit layer: :class:`ImplicitSequence` and the machinery it runs on.

An implicit layer defines its states H (B, n, K) by H = F(H), each position's state a
function of its input and of both neighbours' states: h_t = f(x_t, h_{t-1}, h_{t+1}), with
boundary states h_0 = h_s and h_{n+1} = h_e. The cell f is any ``nn.Module`` with
``forward(x, h_prev, h_next) -> h`` on (B, n, d), (B, n, K), (B, n, K) -> (B, n, K), acting on
every position on its own (:class:`Cell` lists what it may add for speed). This module
supplies the rest, once:

- :class:`BatchTensors`: a batch's tensors listed, cloned and reloaded in place, so that a
  CUDA graph of a solve can be replayed on another batch of the same shape;
- :class:`ImplicitSystem`: the equations for one batch with no autograd graph, what the
  solvers in :mod:`inn.solvers` work on (:class:`inn.solvers.FixedPointSystem`, the whole
  protocol): F, the red-black and tridiagonal sweeps, starting guesses, stacking and selecting
  sequences, the bfloat16 version; each from the cell's hook where it has one;
- :class:`CellLinearization`: dF/dH at a point: J^T products and the red-black adjoint sweep
  from the cell's ``_sources`` (what each position sends to its neighbours);
  :class:`AutogradLinearization` gives J V, J^T V and the Jacobian blocks of any cell through
  ``torch.func``;
- :class:`ImplicitSequence`: the ``nn.Module``, which solves without a graph, then applies F
  once more with autograd at the solution and wraps it in the implicit backward
  (:mod:`inn.nn.implicit_function`); solver options, warm starts and statistics.

Padding: sequences are left-aligned and ``mask`` is True on real tokens. The state after a
sequence's last real token is the end boundary state, padded states are zero, so a sequence's
states do not depend on what it is batched with.
"""

from __future__ import annotations

import copy
import math
from typing import Any, Protocol

import torch
import torch.nn.functional as Fn
from torch import Tensor, nn

from inn.errors import InnError
from inn.solvers._common import relative_residual
from inn.solvers.tridiagonal import Tridiagonal


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
      states' (:func:`affine`, :func:`product`), and return h in the states' dtype.
      [X = x, forward, no weights]
    - ``Linearization``: a :class:`CellLinearization` subclass, built as
      ``Linearization(system, H, evaluated)``: ``system`` the :class:`ImplicitSystem`, H
      (B, n, K) the point, ``evaluated`` either None (evaluate the cell at H yourself) or the
      detached ``(prev, nxt, h, aux)`` of the cell at H, neighbours (B, n, K) each, the cell's
      unmasked state (B, n, K) and its ``aux``, which the layer has anyway at the solution. It
      sets ``system``, ``F`` (F(H), masked) and ``copy`` (the masked ``coupling`` or None) and
      implements analytic ``jvp`` (J V), ``_sources`` (hence J^T V and the red-black adjoint
      sweep) and ``blocks`` (dF_t/dh_{t-1}, dF_t/dh_{t+1}, (B, K, K) each).
      [:class:`AutogradLinearization`: about 2-3x an analytic product]
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
      larger |entry|, so a state that meets tol beyond it (plus :attr:`ImplicitSystem.BOUND_SLACK`)
      is a spurious root (``OUT_OF_BOUNDS``) and is solved again. [inf: no check]
    - ``output(H)`` and ``output_size``: the layer's output where the state is wider (the
      LSTM's state is [h; c], (B, n, 2k), its output h, (B, n, k)). [H]
    - ``supports_low_precision = True``: ``transition`` and the linearisation accept bfloat16
      weights (:meth:`ImplicitSystem.low_precision`; Anderson's first pass). [False]
    """

    def forward(self, x: Tensor, h_prev: Tensor, h_next: Tensor) -> Tensor: ...


def evaluate_cell(cell: nn.Module, X: Tensor, prev: Tensor, nxt: Tensor,
                  weights: tuple[Tensor, ...]) -> tuple[Tensor, Any]:
    """The cell on input terms X and neighbours (prev, nxt): its ``transition`` with
    ``weights`` where it has the hook, else its ``forward`` (X is then x). Returns (state,
    ``aux``, what the other hooks want from the evaluation; None without the hook)."""
    transition = getattr(cell, "transition", None)
    return (cell(X, prev, nxt), None) if transition is None else transition(X, prev, nxt, *weights)


class CellLinearization(BatchTensors):
    """dF/dH at one point, the parts every cell shares: J^T products and the red-black adjoint
    sweep, from ``_sources(g, sl)``, which returns the cotangents that positions ``sl`` with
    output cotangent g send to their left and right neighbours.

    A cell's ``Linearization`` hook is a subclass, built as ``(system, H, evaluated)``: H
    (B, n, K) the point, ``evaluated`` None or the detached ``(prev, nxt, h, aux)`` of the
    cell at H (:class:`Cell`). It sets ``system``, ``F`` (F(H), masked, (B, n, K)) and
    ``copy``, the masked elementwise coupling (lower, upper), (B, n, K) each, that the
    tridiagonal preconditioner inverts, or None where the cell has none; and implements
    :meth:`jvp`, :meth:`_sources` and :meth:`blocks`."""

    system: "ImplicitSystem"
    F: Tensor
    copy: tuple[Tensor, Tensor] | None

    def _sources(self, g: Tensor, sl: slice) -> tuple[Tensor, Tensor]:
        """J^T at positions ``sl``: g (B, m, K), the cotangent of F there, -> (to h_{t-1},
        to h_{t+1}), (B, m, K) each, the second zero where the right neighbour is h_e
        (``system.next_realf``). :meth:`vjp` and :meth:`adjoint_sweep` are built on it."""
        raise NotImplementedError

    def jvp(self, V: Tensor) -> Tensor:
        """J V = dF/dH . V, (B, n, K) -> (B, n, K)."""
        raise NotImplementedError

    def blocks(self, t: int) -> tuple[Tensor, Tensor]:
        """(dF_t/dh_{t-1}, dF_t/dh_{t+1}), each (B, K, K), zero where there is no coupling."""
        raise NotImplementedError

    def mask_blocks(self, t: int, L: Tensor, R: Tensor) -> tuple[Tensor, Tensor]:
        """Position t's blocks with the couplings that do not exist zeroed: none at padding,
        none to the left of the first position, none to the right of a sequence's last."""
        sy = self.system
        real = sy.mask[:, t].to(L.dtype).view(-1, 1, 1)
        has_prev = real * (1.0 if t > 0 else 0.0)
        has_next = sy.next_real[:, t].to(L.dtype).view(-1, 1, 1)
        return L * has_prev, R * has_next

    def low_precision(self) -> "CellLinearization | None":
        """The same linearisation with bfloat16 matrix products in :meth:`vjp` (the first pass
        of a mixed-precision adjoint solve); None unless the system has such a version."""
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


class AutogradLinearization(CellLinearization):
    """dF/dH of any cell at H by autograd: J V by ``torch.func.jvp`` (forward mode, one cell
    evaluation's worth per product), J^T V by one ``torch.func.vjp`` of the cell at H (taken at
    the first J^T product and reused), the Jacobian blocks by K forward products per position.
    The fallback where a cell has no ``Linearization`` hook: about 2-3x an analytic product."""

    def __init__(self, system: "ImplicitSystem", H: Tensor, evaluated: tuple | None = None) -> None:
        self.system = sy = system
        self.prev, self.nxt = neighbours(H, sy.next_real, sy.h_start, sy.h_end)
        h, aux = sy.evaluate(sy.X, self.prev, self.nxt) if evaluated is None else evaluated[2:]
        self.F = h * sy.maskf
        self.copy = sy.coupling(sy.X, self.prev, self.nxt, aux)
        self._pullback = None

    def _cell(self, X: Tensor, prev: Tensor, nxt: Tensor) -> Tensor:
        return self.system.evaluate(X, prev, nxt)[0]

    def jvp(self, V: Tensor) -> Tensor:
        sy = self.system
        vp, vn = neighbours(V, sy.next_real, sy.zero_boundary, sy.zero_boundary)
        _, dh = torch.func.jvp(lambda p, q: self._cell(sy.X, p, q), (self.prev, self.nxt), (vp, vn))
        return dh * sy.maskf

    def _sources(self, g: Tensor, sl: slice) -> tuple[Tensor, Tensor]:
        """J^T of the cell at positions ``sl`` (through the whole sequence's pullback, the
        other positions' cotangents zero)."""
        sy = self.system
        if self._pullback is None:
            _, self._pullback = torch.func.vjp(lambda p, q: self._cell(sy.X, p, q), self.prev, self.nxt)
        full = torch.zeros_like(self.F)
        full[:, sl] = g * sy.maskf[:, sl]
        g_prev, g_next = self._pullback(full)
        return g_prev[:, sl], g_next[:, sl] * sy.next_realf[:, sl]

    def blocks(self, t: int) -> tuple[Tensor, Tensor]:
        """Position t's cell Jacobians: its inputs repeated K times along the positions, with
        the K unit vectors as tangents, give the K columns at once."""
        sy = self.system
        B, _, K = self.F.shape
        X = sy.X[:, t : t + 1].expand(B, K, sy.X.shape[-1])
        # (forward-mode duals need storage of their own: no expanded views)
        prev, nxt = self.prev[:, t : t + 1].repeat(1, K, 1), self.nxt[:, t : t + 1].repeat(1, K, 1)
        eye = torch.eye(K, dtype=self.F.dtype, device=self.F.device).repeat(B, 1, 1)
        L = torch.func.jvp(lambda p: self._cell(X, p, nxt), (prev,), (eye,))[1].mT
        R = torch.func.jvp(lambda q: self._cell(X, prev, q), (nxt,), (eye,))[1].mT
        return self.mask_blocks(t, L, R)


class ImplicitSystem(BatchTensors):
    """The equations of one batch with no autograd graph (solver side), for any cell: the
    whole :class:`inn.solvers.FixedPointSystem` protocol, each member from the cell's hook
    where it has one (:class:`Cell`) and from the cell alone otherwise.

    ``X`` (B, n, m): the cell's input terms, fixed during a solve (its ``project`` of x, or x);
    ``weights``: the detached tensors its ``transition`` takes (none without the hook);
    ``h_start``, ``h_end``: the boundary states (K entries).
    """

    #: how far past :meth:`state_bound` a state may lie and still count as a solution. On a
    #: trained walk INN the saturated units of genuine solutions (tol 1e-4) lay within 1e-3 of
    #: the box, the spurious roots of the relative residual 0.07 to 19 beyond it.
    BOUND_SLACK = 0.01

    def __init__(self, cell: nn.Module, X: Tensor, mask: Tensor, weights: tuple[Tensor, ...], h_start: Tensor,
                 h_end: Tensor) -> None:
        self.cell = cell
        self.X = X
        self.mask = mask
        self.maskf = mask.unsqueeze(-1).to(X.dtype)
        self.next_real = next_real_mask(mask)
        self.next_realf = self.next_real.unsqueeze(-1).to(X.dtype)
        self.linkf = self.maskf * self.next_realf  # (B, n, 1): t real and coupled to a real t + 1
        self.weights = weights
        width = h_start.numel()
        self.h_start = h_start.reshape(1, 1, width).to(X.dtype)
        self.h_end = h_end.reshape(1, 1, width).to(X.dtype)
        self.zero_boundary = torch.zeros(1, 1, width, dtype=X.dtype, device=X.device)
        self.shape = torch.Size((X.shape[0], X.shape[1], width))

    def evaluate(self, X: Tensor, prev: Tensor, nxt: Tensor) -> tuple[Tensor, Any]:
        """The cell at every position given: (state, what its other hooks want from it)."""
        return evaluate_cell(self.cell, X, prev, nxt, self.weights)

    @property
    def graphable(self) -> bool:
        """Whether a solve on it may be captured as a CUDA graph: only with the cell's
        projection and analytic linearisation, whose tensors the system and linearisation
        hold (a static copy then holds all the solve reads)."""
        return hasattr(self.cell, "transition") and hasattr(self.cell, "Linearization")

    def F(self, H: Tensor) -> Tensor:
        """One evaluation of the implicit definition (padded positions give zero)."""
        prev, nxt = neighbours(H, self.next_real, self.h_start, self.h_end)
        return self.evaluate(self.X, prev, nxt)[0] * self.maskf

    def linearize(self, H: Tensor, evaluated: tuple | None = None) -> CellLinearization:
        """dF/dH at H: the cell's analytic ``Linearization``, else by autograd. ``evaluated``:
        ``(prev, nxt, state, aux)`` of the cell at H when the caller has them (detached)."""
        return getattr(self.cell, "Linearization", AutogradLinearization)(self, H, evaluated)

    def coupling(self, X: Tensor, prev: Tensor, nxt: Tensor, aux: Any) -> tuple[Tensor, Tensor] | None:
        """The cell's elementwise coupling to its neighbours at these points, zero where there
        is no neighbour; None where the cell has no ``coupling`` hook."""
        hook = getattr(self.cell, "coupling", None)
        return None if hook is None else self.mask_coupling(*hook(X, prev, nxt, aux))

    def mask_coupling(self, lower: Tensor, upper: Tensor) -> tuple[Tensor, Tensor]:
        """A coupling (lower, upper) with the links that do not exist zeroed: none at padding,
        none to the right of a sequence's last position."""
        return lower * self.maskf, upper * self.linkf

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
            h, _ = self.evaluate(self.X[:, sl], prev, nxt)
            H[:, sl] = h * self.maskf[:, sl]
        return H

    def tridiagonal_step(self, H: Tensor, with_residual: bool = False) -> Tensor | tuple[Tensor, Tensor]:
        """H + (I - D)^{-1} (F(H) - H), D the cell's elementwise coupling at H (:meth:`coupling`).

        A Newton step with the Jacobian's elementwise part only: it solves the gated copy of
        the neighbours exactly, unit by unit along the sequence (the slow, length-dependent
        modes of trained weights; :mod:`inn.solvers.tridiagonal`), and leaves the couplings
        through the weight matrices to Anderson. Same fixed points as F; costs one cell
        evaluation and a tridiagonal solve. A cell with its own ``tridiagonal_step`` takes it;
        one without a coupling takes F (D = 0). ``with_residual``: also return H's relative
        residual ||F(H) - H|| / ||H|| per sequence, which the step computes anyway.
        """
        hook = getattr(self.cell, "tridiagonal_step", None)
        if hook is not None:
            return hook(self, H, with_residual)
        prev, nxt = neighbours(H, self.next_real, self.h_start, self.h_end)
        h, aux = self.evaluate(self.X, prev, nxt)
        G = h * self.maskf - H
        copy = self.coupling(self.X, prev, nxt, aux)
        step = H + (G if copy is None else Tridiagonal(*copy).solve(G))
        return (step, relative_residual(G, H)) if with_residual else step

    def step_from_zero(self) -> tuple[Tensor, Tensor] | None:
        """:meth:`tridiagonal_step` at H = 0 with its residual, where the cell knows a cheaper
        way (``step_from_zero`` hook); else None, and the step is taken."""
        hook = getattr(self.cell, "step_from_zero", None)
        return None if hook is None else hook(self)

    def state_bound(self) -> Tensor:
        """(1, 1, K): the largest |state| entry any fixed point can have (the cell's
        ``state_bound``; inf where it knows none)."""
        hook = getattr(self.cell, "state_bound", None)
        if hook is None:
            return torch.full_like(self.zero_boundary, float("inf"))
        return hook(self.h_start, self.h_end)

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
        solves iterate on it first and finish on the float32 system. None unless float32 and
        the cell ``supports_low_precision``."""
        if self.X.dtype != torch.float32 or not getattr(self.cell, "supports_low_precision", False):
            return None
        weights = tuple(w.to(torch.bfloat16) for w in self.weights)
        return type(self)(self.cell, self.X, self.mask, weights, self.h_start, self.h_end)

    @property
    def has_precision_copy(self) -> bool:
        """Whether :meth:`in_precision` can give the same equations in another dtype (the
        float64 fallbacks): only with the cell's ``transition`` hook, whose weights it casts."""
        return hasattr(self.cell, "transition")

    def in_precision(self, dtype: torch.dtype) -> "ImplicitSystem | None":
        """The same equations with input terms, weights and boundaries in ``dtype`` (the
        float64 fallbacks of the solve and the adjoint); None for a cell without the
        ``transition`` hook, whose own parameters would stay in theirs."""
        if not self.has_precision_copy:
            return None
        return type(self)(self.cell, self.X.to(dtype), self.mask, tuple(w.to(dtype) for w in self.weights),
                          self.h_start.to(dtype), self.h_end.to(dtype))

    def repeat(self, times: int) -> "ImplicitSystem":
        """The same systems stacked ``times`` times along B (several starting candidates)."""
        if times == 1:
            return self
        return type(self)(self.cell, self.X.repeat(times, 1, 1), self.mask.repeat(times, 1), self.weights,
                          self.h_start, self.h_end)

    def select(self, index: Tensor) -> "ImplicitSystem":
        """The systems of the sequences at ``index`` (for retrying failed ones)."""
        return type(self)(self.cell, self.X[index], self.mask[index], self.weights, self.h_start, self.h_end)

    def initial_guess(self, kind: str, generator: torch.Generator | None = None) -> Tensor:
        """A starting point for the solvers.

        ``"zeros"``; ``"random"`` (uniform in (-0.5, 0.5), drawn on the CPU from
        ``generator`` so it is the same on every device); ``"one_step"``, the paper's guess
        state_t = f(state^f_{t-1}, state^b_{t+1}, xi_t) from a forward and a backward sweep of
        the one-directional cell with the same weights; ``"F0"``, F(0).
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
        """The one-directional cell, (B, K) -> (B, K): the cell's ``explicit_step``, else the
        cell with ``state`` as both neighbours (for the GRU that is hhat = h, its explicit step)."""
        hook = getattr(self.cell, "explicit_step", None)
        if hook is not None:
            return hook(Xt, state, *self.weights)
        return self.evaluate(Xt[:, None], state[:, None], state[:, None])[0][:, 0]

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
        h, _ = self.evaluate(self.X, prev, nxt)
        return h * self.maskf


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

    def __init__(self, cell: nn.Module, state_size: int, solver: str = "anderson",
                 trainable_boundary: bool = False, input_size: int | None = None, **options: Any) -> None:
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

    def linearized_transition(self, xi: Tensor, H: Tensor, mask: Tensor, X: Tensor | None,
                              system: ImplicitSystem) -> tuple[Tensor, CellLinearization]:
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
