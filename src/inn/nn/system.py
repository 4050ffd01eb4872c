"""The equations of an implicit layer for one batch, and their linearisations.

An implicit layer's states H (B, n, K) satisfy H = F(H), each position's state a function of
its input and of both neighbours' states: h_t = f(x_t, h_{t-1}, h_{t+1}), with boundary states
h_0 = h_s and h_{n+1} = h_e (:mod:`inn.nn.sequence` holds the layer and the cell protocol).
Here is what the solvers in :mod:`inn.solvers` work on:

- :class:`BatchTensors`: a batch's tensors listed, cloned and reloaded in place, so that a
  CUDA graph of a solve can be replayed on another batch of the same shape;
- :class:`ImplicitSystem`: the equations for one batch with no autograd graph
  (:class:`inn.solvers.FixedPointSystem`, the whole protocol): F, the red-black and
  tridiagonal sweeps, starting guesses, stacking and selecting sequences, the bfloat16
  version; each from the cell's hook where it has one;
- :class:`CellLinearization`: dF/dH at a point: J^T products and the red-black adjoint sweep
  from the cell's ``_sources`` (what each position sends to its neighbours);
  :class:`AutogradLinearization` gives J V, J^T V and the Jacobian blocks of any cell through
  ``torch.func``.

Padding: sequences are left-aligned and ``mask`` is True on real tokens. The state after a
sequence's last real token is the end boundary state, padded states are zero, so a sequence's
states do not depend on what it is batched with.
"""

from __future__ import annotations

import copy
from typing import Any

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

    def load_(self, other: BatchTensors) -> None:
        """Copy ``other``'s tensors into this object's, in place (same names and shapes)."""
        theirs = other.tensors()
        for name, tensor in self.tensors().items():
            tensor.copy_(theirs[name])


def evaluate_cell(
    cell: nn.Module, X: Tensor, prev: Tensor, nxt: Tensor, weights: tuple[Tensor, ...]
) -> tuple[Tensor, Any]:
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
    cell at H (:class:`~inn.nn.sequence.Cell`). It sets ``system``, ``F`` (F(H), masked, (B, n, K)) and
    ``copy``, the masked elementwise coupling (lower, upper), (B, n, K) each, that the
    tridiagonal preconditioner inverts, or None where the cell has none; and implements
    :meth:`jvp`, :meth:`_sources` and :meth:`blocks`."""

    system: ImplicitSystem
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

    def low_precision(self) -> CellLinearization | None:
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

    def __init__(self, system: ImplicitSystem, H: Tensor, evaluated: tuple | None = None) -> None:
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
    where it has one (:class:`~inn.nn.sequence.Cell`) and from the cell alone otherwise.

    ``X`` (B, n, m): the cell's input terms, fixed during a solve (its ``project`` of x, or x);
    ``weights``: the detached tensors its ``transition`` takes (none without the hook);
    ``h_start``, ``h_end``: the boundary states (K entries).
    """

    #: how far past :meth:`state_bound` a state may lie and still count as a solution: the
    #: saturated units of genuine solutions lie just past the box (by round-off at tol), the
    #: spurious roots of the relative residual far beyond it.
    BOUND_SLACK = 0.01

    def __init__(
        self, cell: nn.Module, X: Tensor, mask: Tensor, weights: tuple[Tensor, ...], h_start: Tensor, h_end: Tensor
    ) -> None:
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
        the copy coupling makes I - dF/dH nearly singular, a state far outside the box can pass
        it, its residual small against its own large norm. :func:`inn.solvers.solve` rejects such a state
        (:attr:`~inn.solvers.ResultCode.OUT_OF_BOUNDS`) and retries the sequence from its
        next starting candidate."""
        return (H.abs() > self.state_bound() + self.BOUND_SLACK).flatten(1).any(1)

    def low_precision(self) -> ImplicitSystem | None:
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

    def in_precision(self, dtype: torch.dtype) -> ImplicitSystem | None:
        """The same equations with input terms, weights and boundaries in ``dtype`` (the
        float64 fallbacks of the solve and the adjoint); None for a cell without the
        ``transition`` hook, whose own parameters would stay in theirs."""
        if not self.has_precision_copy:
            return None
        return type(self)(
            self.cell,
            self.X.to(dtype),
            self.mask,
            tuple(w.to(dtype) for w in self.weights),
            self.h_start.to(dtype),
            self.h_end.to(dtype),
        )

    def repeat(self, times: int) -> ImplicitSystem:
        """The same systems stacked ``times`` times along B (several starting candidates)."""
        if times == 1:
            return self
        return type(self)(
            self.cell, self.X.repeat(times, 1, 1), self.mask.repeat(times, 1), self.weights, self.h_start, self.h_end
        )

    def select(self, index: Tensor) -> ImplicitSystem:
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
