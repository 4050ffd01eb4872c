"""The implicit GRU layer (paper section 2.5): H = F(H), each h_t coupled to both neighbours.

    hhat_t = s * h_{t-1} + (1 - s) * h_{t+1}        s = s_p / (s_p + s_n)
    s_p = sigmoid(W_p x_t + U_p h_{t-1} + b_p)       s_n = sigmoid(W_n x_t + U_n h_{t+1} + b_n)
    z = sigmoid(W_z x_t + U_z hhat_t + b_z)          r = sigmoid(W_r x_t + U_r hhat_t + b_r)
    htilde = tanh(W x_t + U (r * hhat_t) + b)        h_t = (1 - z) * hhat_t + z * htilde

with h_0 = h_s and h_{n+1} = h_e. Two pieces live here:

- :class:`GRUSystem`: the equations for one batch with the input terms ``W x + b``
  precomputed (xi is fixed during a solve, so only the U-products cost anything), F, and an
  analytic linearisation giving J V, J^T V and the k x k Jacobian blocks. It carries no
  autograd graph; the solvers in :mod:`inn.solvers` work on it.
- :class:`ImplicitGRU`: the ``nn.Module``. ``forward`` solves without a graph, then applies F
  once more with autograd at the solution and wraps it in the implicit-differentiation
  function (:mod:`inn.nn.implicit_function`), so backward costs one adjoint linear solve and
  one pass through F.

The switch is computed as s = sigmoid(log sigmoid(a_p) - log sigmoid(a_n)), which equals
s_p / (s_p + s_n) but never forms 0/0 when both sigmoids underflow (SPEC, measured facts).

Padding: sequences are left-aligned and ``mask`` is True on real tokens. The state after a
sequence's last real token is h_e, padded outputs are zero, so a sequence's states do not
depend on what it is batched with.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import torch
import torch.nn.functional as Fn
from torch import Tensor, nn

from inn.errors import InnError
from inn.solvers._common import relative_residual
from inn.solvers.tridiagonal import Tridiagonal



def _neighbours(H: Tensor, next_real: Tensor, h_start: Tensor, h_end: Tensor) -> tuple[Tensor, Tensor]:
    """(h_{t-1}, h_{t+1}) for every t, with the boundary states where the sequence ends.

    H (B, n, k); next_real (B, n) bool, True where position t+1 is a real token;
    h_start, h_end broadcastable to (B, 1, k).
    """
    B, n, k = H.shape
    hs = h_start.expand(B, 1, k).to(H.dtype)
    he = h_end.expand(B, 1, k).to(H.dtype)
    prev = torch.cat([hs, H[:, :-1]], dim=1)
    nxt = torch.cat([H[:, 1:], he], dim=1)
    nxt = torch.where(next_real.unsqueeze(-1), nxt, he)
    return prev, nxt


def _next_real(mask: Tensor) -> Tensor:
    """(B, n) bool: is position t+1 a real token (False at the last position)."""
    return torch.cat([mask[:, 1:], torch.zeros_like(mask[:, :1])], dim=1)


def cell(
    X: Tensor,
    prev: Tensor,
    nxt: Tensor,
    weight_pn: Tensor,
    weight_zr: Tensor,
    weight_c: Tensor,
) -> tuple[Tensor, tuple[Tensor, ...]]:
    """The transition f at every position: (h_{t-1}, h_{t+1}, W x_t + b) -> h_t.

    X (..., 5k) holds the input terms in the order p, n, z, r, candidate. Returns h and the
    intermediates (s, a_p, a_n, hhat, z, r, c) the linearisation needs.
    """
    k = prev.shape[-1]
    Xp, Xn, Xzr, Xc = X.split([k, k, 2 * k, k], dim=-1)
    a_p = _affine(Xp, prev, weight_pn[:k])
    a_n = _affine(Xn, nxt, weight_pn[k:])
    s = _switch(a_p, a_n)
    hhat = torch.lerp(nxt, prev, s)  # s h_{t-1} + (1 - s) h_{t+1}
    z, r = torch.sigmoid(_affine(Xzr, hhat, weight_zr)).split(k, dim=-1)
    c = torch.tanh(_affine(Xc, r * hhat, weight_c))
    h = torch.lerp(hhat, c, z)  # (1 - z) hhat + z c
    return h, (s, a_p, a_n, hhat, z, r, c)


def _switch(a_p: Tensor, a_n: Tensor) -> Tensor:
    """s = s_p / (s_p + s_n) with s_p = sigmoid(a_p), s_n = sigmoid(a_n), computed stably."""
    return torch.sigmoid(Fn.logsigmoid(a_p) - Fn.logsigmoid(a_n))


def _affine(bias: Tensor, x: Tensor, weight: Tensor) -> Tensor:
    """bias + x @ weight.T over any leading dimensions, as one fused product (``addmm``):
    the cell runs once per solver step, and on a GPU each separate operation is a launch.
    With low-precision weights (:meth:`GRUSystem.low_precision`) the product runs in their
    precision and the sum in x's."""
    bias2, x2 = bias.reshape(-1, bias.shape[-1]), x.reshape(-1, x.shape[-1])
    if weight.dtype != x.dtype:
        return (bias2 + torch.mm(x2.to(weight.dtype), weight.T)).view(bias.shape)
    return torch.addmm(bias2, x2, weight.T).view(bias.shape)


def _product(x: Tensor, weight: Tensor) -> Tensor:
    """x @ weight in x's precision, the product itself in the weight's (low-precision weights)."""
    return x @ weight if weight.dtype == x.dtype else (x.to(weight.dtype) @ weight).to(x.dtype)


class GRULinearization:
    """The implicit GRU's F and Jacobian products at one point H, analytically.

    Each product costs the same five k x k matrix products per position as F itself (the
    intermediates are computed once here). ``jvp`` is checked against ``torch.func.jvp`` and
    ``vjp`` against autograd in the tests.
    """

    def __init__(self, system: "GRUSystem", H: Tensor, evaluated: tuple | None = None) -> None:
        """``evaluated``: ``(prev, nxt, h, intermediates)`` of :func:`cell` at H when the caller
        has them already (detached), which saves an evaluation."""
        self.system = system
        k = system.k
        if evaluated is None:
            prev, nxt = _neighbours(H, system.next_real, system.h_start, system.h_end)
            h, intermediates = cell(system.X, prev, nxt, *system.weights)
        else:
            prev, nxt, h, intermediates = evaluated
        s, a_p, a_n, hhat, z, r, c = intermediates
        m = system.maskf
        self.F = h * m
        d = prev - nxt
        s1 = s * (1 - s)
        # d hhat = s dprev + (1 - s) dnext + d * (ep * dap - en * dan), dap = U_p dprev, ...
        self.s = s
        self.ep = s1 * torch.sigmoid(-a_p) * d
        self.en = s1 * torch.sigmoid(-a_n) * d
        self.hhat, self.r = hhat, r
        zd = z * (1 - z)
        rd = r * (1 - r)
        cd = 1 - c * c
        self.one_minus_z = 1 - z
        self.copy = system.copy_coupling(s, z)  # (lower, upper): the elementwise coupling
        self.gz = (c - hhat) * zd  # dh/da_z
        self.gc = z * cd  # dh/da_c
        self.hrd = hhat * rd  # d(r*hhat)/da_r
        self.k = k

    def jvp(self, V: Tensor) -> Tensor:
        """J V = dF/dH . V, (B, n, k) -> (B, n, k)."""
        sy = self.system
        k = self.k
        Wpn, Wzr, Wc = sy.weights
        zero = sy.zero_boundary
        vp, vn = _neighbours(V, sy.next_real, zero, zero)
        dap = vp @ Wpn[:k].T
        dan = vn @ Wpn[k:].T
        dhh = vn + self.s * (vp - vn) + self.ep * dap - self.en * dan
        dzr = dhh @ Wzr.T
        drh = self.hrd * dzr[..., k:] + self.r * dhh
        dac = drh @ Wc.T
        dh = self.one_minus_z * dhh + self.gz * dzr[..., :k] + self.gc * dac
        return dh * sy.maskf

    def _sources(self, g: Tensor, sl: slice) -> tuple[Tensor, Tensor]:
        """Cotangents that positions ``sl`` send to their left and right neighbours.

        ``g`` (B, m, k) is the cotangent of F at positions ``sl``; returns (to h_{t-1},
        to h_{t+1}), zero where the right neighbour is the boundary h_e.
        """
        sy = self.system
        k = self.k
        Wpn, Wzr, Wc = sy.weights
        g = g * sy.maskf[:, sl]
        g_hh = g * self.one_minus_z[:, sl]
        g_rh = _product(g * self.gc[:, sl], Wc)
        g_hh = g_hh + g_rh * self.r[:, sl]
        g_zr = torch.cat([g * self.gz[:, sl], g_rh * self.hrd[:, sl]], dim=-1)
        g_hh = g_hh + _product(g_zr, Wzr)
        s = self.s[:, sl]
        g_prev = g_hh * s + _product(g_hh * self.ep[:, sl], Wpn[:k])
        g_next = (g_hh - g_hh * s) - _product(g_hh * self.en[:, sl], Wpn[k:])
        return g_prev, g_next * sy.next_realf[:, sl]

    def low_precision(self) -> "GRULinearization | None":
        """The same linearisation with bfloat16 matrix products in :meth:`vjp` (the first pass
        of a mixed-precision adjoint solve); None unless the system is float32."""
        low = self.system.low_precision()
        if low is None:
            return None
        out = copy.copy(self)
        out.system = low
        return out

    def vjp(self, V: Tensor) -> Tensor:
        """J^T V = (dF/dH)^T . V, (B, n, k) -> (B, n, k)."""
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

    def blocks(self, t: int) -> tuple[Tensor, Tensor]:
        """(dF_t/dh_{t-1}, dF_t/dh_{t+1}), each (B, k, k), zero where there is no coupling.

        dF_t/dhhat = diag(1-z) + diag(gz) U_z + diag(gc) U [diag(r) + diag(hrd) U_r], then
        dhhat/dh_{t-1} = diag(s) + diag(ep) U_p and dhhat/dh_{t+1} = diag(1-s) - diag(en) U_n.
        Costs three k x k x k products per sample: a CPU-expensive, GPU-friendly path.
        """
        sy = self.system
        k = self.k
        Wpn, Wzr, Wc = sy.weights
        Wz, Wr = Wzr[:k], Wzr[k:]
        r, hrd, gz, gc = self.r[:, t], self.hrd[:, t], self.gz[:, t], self.gc[:, t]
        inner = Wc * r.unsqueeze(-2) + (Wc * hrd.unsqueeze(-2)) @ Wr  # U [diag r + diag hrd U_r]
        N = gc.unsqueeze(-1) * inner + gz.unsqueeze(-1) * Wz
        N = N + torch.diag_embed(self.one_minus_z[:, t])
        s, ep, en = self.s[:, t], self.ep[:, t], self.en[:, t]
        L = N * s.unsqueeze(-2) + (N * ep.unsqueeze(-2)) @ Wpn[:k]
        R = N * (1 - s).unsqueeze(-2) - (N * en.unsqueeze(-2)) @ Wpn[k:]
        real = sy.mask[:, t].to(L.dtype).view(-1, 1, 1)
        has_prev = real * (1.0 if t > 0 else 0.0)
        has_next = sy.next_real[:, t].to(L.dtype).view(-1, 1, 1)
        return L * has_prev, R * has_next


class GRUSystem:
    """The implicit GRU equations for one batch, with no autograd graph (solver side).

    ``X`` (B, n, 5k) are the precomputed input terms W x + b, ``weights`` the detached
    recurrent matrices (U_pn (2k, k), U_zr (2k, k), U (k, k)).
    """

    def __init__(
        self,
        X: Tensor,
        mask: Tensor,
        weights: tuple[Tensor, Tensor, Tensor],
        h_start: Tensor,
        h_end: Tensor,
    ) -> None:
        self.X = X
        self.mask = mask
        self.maskf = mask.unsqueeze(-1).to(X.dtype)
        self.next_real = _next_real(mask)
        self.next_realf = self.next_real.unsqueeze(-1).to(X.dtype)
        self.weights = weights
        self.k = weights[2].shape[0]
        self.h_start = h_start.reshape(1, 1, self.k).to(X.dtype)
        self.h_end = h_end.reshape(1, 1, self.k).to(X.dtype)
        self.zero_boundary = torch.zeros(1, 1, self.k, dtype=X.dtype, device=X.device)
        self.shape = torch.Size((X.shape[0], X.shape[1], self.k))

    def F(self, H: Tensor) -> Tensor:
        """One evaluation of the implicit definition (padded positions give zero)."""
        prev, nxt = _neighbours(H, self.next_real, self.h_start, self.h_end)
        h, _ = cell(self.X, prev, nxt, *self.weights)
        return h * self.maskf

    def sweep(self, H: Tensor) -> Tensor:
        """One red-black nonlinear Gauss-Seidel sweep: even positions from their (odd)
        neighbours, then odd positions from the new even ones. Same fixed points as F, the
        same cost (each half evaluates the cell at half the positions), and on this
        nearest-neighbour system it contracts about like two plain F steps."""
        B, n, k = H.shape
        H = H.clone()
        hs = self.h_start.expand(B, 1, k)
        he = self.h_end.expand(B, 1, k)
        for parity in (0, 1):
            sl = slice(parity, None, 2)
            m = len(range(parity, n, 2))
            # neighbours of positions parity, parity + 2, ...: only the half that is updated
            prev = H[:, 0::2][:, :m] if parity else torch.cat([hs, H[:, 1::2]], 1)[:, :m]
            nxt = H[:, parity + 1 :: 2]
            if nxt.shape[1] < m:
                nxt = torch.cat([nxt, he], 1)
            nxt = torch.where(self.next_real[:, sl].unsqueeze(-1), nxt, he)
            h, _ = cell(self.X[:, sl], prev, nxt, *self.weights)
            H[:, sl] = h * self.maskf[:, sl]
        return H

    def copy_coupling(self, s: Tensor, z: Tensor) -> tuple[Tensor, Tensor]:
        """The elementwise part of dF_t/dh_{t-1} and dF_t/dh_{t+1}: (1 - z) s and
        (1 - z)(1 - s), the gated copy of the neighbours, zero where there is no neighbour."""
        keep = (1 - z) * self.maskf
        lower = keep * s
        return lower, (keep - lower) * self.next_realf

    def tridiagonal_step(self, H: Tensor, with_residual: bool = False) -> Tensor | tuple[Tensor, Tensor]:
        """H + (I - D)^{-1} (F(H) - H), D the copy coupling at H (:meth:`copy_coupling`).

        A Newton step with the Jacobian's elementwise part only: it solves the gated copy
        of the neighbours exactly, unit by unit along the sequence (the slow, length-dependent
        modes of trained weights; :mod:`inn.solvers.tridiagonal`), and leaves the couplings
        through the weight matrices to Anderson. Same fixed points as F; costs one cell
        evaluation and a tridiagonal solve. ``with_residual``: also return H's relative
        residual ||F(H) - H|| / ||H|| per sequence, which the step computes anyway.
        """
        prev, nxt = _neighbours(H, self.next_real, self.h_start, self.h_end)
        h, (s, _, _, _, z, _, _) = cell(self.X, prev, nxt, *self.weights)
        G = h * self.maskf - H
        step = H + Tridiagonal(*self.copy_coupling(s, z)).solve(G)
        return (step, relative_residual(G, H)) if with_residual else step

    def step_from_zero(self) -> tuple[Tensor, Tensor] | None:
        """:meth:`tridiagonal_step` at H = 0 with its residual, without matrix products.

        With H = 0 and zero boundary states every recurrent product vanishes: hhat = 0, so
        F(0) = z c with z and c from the input terms alone. Anderson's usual first step
        (from the ``"zeros"`` candidate) then costs elementwise work and a tridiagonal
        solve. None when a boundary state is not zero (trainable boundaries).
        """
        if bool(self.h_start.any()) or bool(self.h_end.any()):
            return None
        k = self.k
        Xp, Xn, Xz, _, Xc = self.X.split(k, dim=-1)
        s = _switch(Xp, Xn)
        z = torch.sigmoid(Xz)
        G = z * torch.tanh(Xc) * self.maskf
        return Tridiagonal(*self.copy_coupling(s, z)).solve(G), relative_residual(G, torch.zeros_like(G))

    def linearize(self, H: Tensor) -> GRULinearization:
        return GRULinearization(self, H)

    def low_precision(self) -> "GRUSystem | None":
        """The same equations with the recurrent products in bfloat16 (sums, gates and the
        tridiagonal solve stay in float32): about 2x cheaper per F evaluation on a CPU with
        native bfloat16 products, accurate to a relative residual of about 1e-3. Mixed-precision
        solves iterate on it first and finish on the float32 system. None unless float32."""
        if self.X.dtype != torch.float32:
            return None
        weights = tuple(w.to(torch.bfloat16) for w in self.weights)
        return GRUSystem(self.X, self.mask, weights, self.h_start, self.h_end)

    def repeat(self, times: int) -> "GRUSystem":
        if times == 1:
            return self
        return GRUSystem(
            self.X.repeat(times, 1, 1), self.mask.repeat(times, 1), self.weights, self.h_start, self.h_end
        )

    def select(self, index: Tensor) -> "GRUSystem":
        """The systems of the sequences at ``index`` (for retrying failed ones)."""
        return GRUSystem(self.X[index], self.mask[index], self.weights, self.h_start, self.h_end)

    def initial_guess(self, kind: str, generator: torch.Generator | None = None) -> Tensor:
        """A starting point for the solvers.

        ``"zeros"``; ``"random"`` (uniform in (-0.5, 0.5), drawn on the CPU from
        ``generator`` so it is the same on every device); ``"one_step"``, the paper's guess
        h_t = f(h^f_{t-1}, h^b_{t+1}, xi_t) from a forward and a backward sweep of the
        ordinary GRU with the same weights (hhat = h_{t-1}, resp. h_{t+1}); ``"F0"``, F(0).
        """
        B, n, k = self.shape
        dt, dev = self.X.dtype, self.X.device
        if kind == "zeros":
            return torch.zeros(B, n, k, dtype=dt, device=dev)
        if kind == "random":
            R = torch.rand(B, n, k, generator=generator, dtype=dt) - 0.5
            return R.to(dev) * self.maskf
        if kind == "F0":
            return self.F(torch.zeros(B, n, k, dtype=dt, device=dev))
        if kind == "one_step":
            return self._one_step()
        raise InnError(f"unknown initial guess {kind!r}; use zeros, random, one_step or F0")

    def _gru_step(self, Xt: Tensor, h: Tensor) -> Tensor:
        """The explicit GRU step (hhat = h) used by the one-step guess's sweeps."""
        k = self.k
        _, Wzr, Wc = self.weights
        zr = h @ Wzr.T
        z = torch.sigmoid(Xt[:, 2 * k : 3 * k] + zr[:, :k])
        r = torch.sigmoid(Xt[:, 3 * k : 4 * k] + zr[:, k:])
        c = torch.tanh(Xt[:, 4 * k :] + (r * h) @ Wc.T)
        return h + z * (c - h)

    def _one_step(self) -> Tensor:
        B, n, k = self.shape
        hs = self.h_start.reshape(1, k).expand(B, k)
        he = self.h_end.reshape(1, k).expand(B, k)
        fwd, bwd = [], [None] * n
        h = hs
        for t in range(n):
            h = self._gru_step(self.X[:, t], h)
            fwd.append(h)
        h = he
        for t in range(n - 1, -1, -1):
            h = torch.where(self.mask[:, t : t + 1], self._gru_step(self.X[:, t], h), he)
            bwd[t] = h
        Hf = torch.stack(fwd, 1)
        Hb = torch.stack(bwd, 1)
        prev = torch.cat([self.h_start.expand(B, 1, k), Hf[:, :-1]], 1)
        nxt = torch.cat([Hb[:, 1:], self.h_end.expand(B, 1, k)], 1)
        nxt = torch.where(self.next_real.unsqueeze(-1), nxt, self.h_end.expand(B, 1, k))
        h, _ = cell(self.X, prev, nxt, *self.weights)
        return h * self.maskf


class ImplicitGRU(nn.Module):
    """Implicitly-defined bidirectional GRU layer (Kazi & Thompson, 2017).

    Args:
        input_size: width of xi.
        hidden_size: k, the state width.
        solver: a name in :data:`inn.solvers.SOLVERS` (``"newton_krylov"``, the paper's
            method; ``"newton_direct"``; ``"anderson"``; ``"fixed_point"``).
        trainable_boundary: learn h_s and h_e (zero and fixed otherwise, as in the paper).
        **options: solver options (see :func:`inn.solvers.solve`: ``tol``, ``max_iter``,
            ``candidates``, ``strict``, ...) and for the backward pass ``backward_solver``
            (a name in :data:`inn.solvers.ADJOINT_SOLVERS`; ``"anderson"`` default),
            ``backward_tol`` (default: ``tol``), ``backward_max_iter`` (default 200) and
            ``backward_low_precision`` (the ``"anderson"`` adjoint's mixed precision, as the
            forward's ``low_precision``; default ``"auto"``); or an approximate backward
            (``"phantom"`` with ``backward_steps`` and ``backward_damping``,
            ``"jacobian_free"``, ``"preconditioned"``: :mod:`inn.nn.implicit_function`).

    Shapes: ``forward(xi, mask)`` with xi (B, n, input_size), mask (B, n) bool (True on real
    tokens, left-aligned) returns H (B, n, hidden_size), zero at padded positions. After each
    call ``last_stats`` (:class:`inn.solvers.SolverStats`) says how the solve went per
    sequence, and after each backward ``last_backward_stats`` the same for the adjoint solve;
    ``last_solution`` is that call's H, detached (what a warm start of the next solve of the
    same sentences starts from); likewise ``adjoint_start`` (set before a backward) and
    ``last_adjoint`` for the adjoint solve (:mod:`inn.nn.implicit_function`).
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        solver: str = "newton_krylov",
        trainable_boundary: bool = False,
        **options: Any,
    ) -> None:
        super().__init__()
        from inn.solvers import SOLVERS, check_options

        if solver not in SOLVERS:
            raise InnError(f"unknown solver {solver!r}; choose one of {', '.join(SOLVERS)}")
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.solver = solver
        from inn.nn.implicit_function import BACKWARD_OPTIONS, check_backward_options

        self.backward_options = {key: options.pop(key) for key in BACKWARD_OPTIONS if key in options}
        check_backward_options(self.backward_options)
        check_options(solver, options)
        self.options = options
        k = hidden_size
        # input terms for p, n, z, r, candidate (W_p .. W, with b_p .. b)
        self.weight_x = nn.Parameter(torch.empty(5 * k, input_size))
        self.bias = nn.Parameter(torch.empty(5 * k))
        self.weight_pn = nn.Parameter(torch.empty(2 * k, k))  # U_p; U_n
        self.weight_zr = nn.Parameter(torch.empty(2 * k, k))  # U_z; U_r
        self.weight_c = nn.Parameter(torch.empty(k, k))  # U
        if trainable_boundary:
            self.h_start = nn.Parameter(torch.zeros(k))
            self.h_end = nn.Parameter(torch.zeros(k))
        else:
            self.register_buffer("h_start", torch.zeros(k))
            self.register_buffer("h_end", torch.zeros(k))
        self.reset_parameters()
        self.last_stats = None
        self.last_backward_stats = None
        self.last_solution = None  # H of the last forward call, detached (for warm starts)
        self.adjoint_start = None  # the next backward's adjoint starting point (used once)
        # Jacobian regularisation: with jacobian_samples > 0, a forward with gradients also
        # leaves the Hutchinson estimate of ||dF/dH||_F^2 per state entry (differentiable)
        self.jacobian_samples = 0
        self.last_jacobian_penalty = None
        self.last_adjoint = None  # u of the last backward, detached (for adjoint warm starts)

    def reset_parameters(self) -> None:
        """Uniform(-1/sqrt(k), 1/sqrt(k)), as torch.nn.GRU does."""
        bound = 1.0 / math.sqrt(self.hidden_size)
        for p in (self.weight_x, self.bias, self.weight_pn, self.weight_zr, self.weight_c):
            nn.init.uniform_(p, -bound, bound)

    def extra_repr(self) -> str:
        return f"{self.input_size}, {self.hidden_size}, solver={self.solver!r}"

    def input_terms(self, xi: Tensor) -> Tensor:
        """W x_t + b for all five gates at once: (B, n, input_size) -> (B, n, 5k)."""
        return Fn.linear(xi, self.weight_x, self.bias)

    def system(self, xi: Tensor, mask: Tensor, X: Tensor | None = None) -> GRUSystem:
        """The detached equations for this batch (what the solvers work on); ``X`` are the
        input terms if already computed."""
        if X is None:
            with torch.no_grad():
                X = self.input_terms(xi)
        X = X.detach()
        weights = (self.weight_pn.detach(), self.weight_zr.detach(), self.weight_c.detach())
        return GRUSystem(X, mask.bool(), weights, self.h_start.detach(), self.h_end.detach())

    def transition(self, xi: Tensor, H: Tensor, mask: Tensor, X: Tensor | None = None) -> Tensor:
        """F(H): one evaluation of the implicit definition, with autograd (padded rows zero).

        ``X``: the input terms ``input_terms(xi)`` when the caller has them (saves a product).
        """
        return self._evaluate(xi, H, mask, X)[0]

    def linearized_transition(self, xi: Tensor, H: Tensor, mask: Tensor, X: Tensor | None,
                              system: GRUSystem) -> tuple[Tensor, GRULinearization]:
        """F(H) with autograd, and the linearisation of ``system`` at H (detached) from the
        same evaluation (the implicit backward needs both at the solution)."""
        FH, evaluated = self._evaluate(xi, H, mask, X)
        detached = tuple(t.detach() for t in evaluated[:3]) + (tuple(t.detach() for t in evaluated[3]),)
        return FH, GRULinearization(system, H, evaluated=detached)

    def _evaluate(self, xi: Tensor, H: Tensor, mask: Tensor, X: Tensor | None) -> tuple[Tensor, tuple]:
        mask = mask.bool()
        prev, nxt = _neighbours(H, _next_real(mask), self.h_start, self.h_end)
        X = self.input_terms(xi) if X is None else X
        h, intermediates = cell(X, prev, nxt, self.weight_pn, self.weight_zr, self.weight_c)
        return h * mask.unsqueeze(-1).to(h.dtype), (prev, nxt, h, intermediates)

    def forward(self, xi: Tensor, mask: Tensor | None = None, start: Tensor | None = None) -> Tensor:
        """H (B, n, k) with H = F(H) for every sequence; ``start`` (B, n, k): a warm start for
        the solve, e.g. the same sentences' solutions from the previous epoch (any dtype;
        tried before the solver's own candidates, which remain the fallback)."""
        from inn.nn.implicit_function import implicit_solution
        from inn.solvers import solve

        if xi.dim() != 3 or xi.shape[-1] != self.input_size:
            raise InnError(f"ImplicitGRU expects xi of shape (B, n, {self.input_size}), got {tuple(xi.shape)}")
        if mask is None:
            mask = torch.ones(xi.shape[:2], dtype=torch.bool, device=xi.device)
        mask = mask.bool()
        if xi.shape[1] == 0:
            return xi.new_zeros(xi.shape[0], 0, self.hidden_size)
        needs_grad = torch.is_grad_enabled() and (xi.requires_grad or any(p.requires_grad for p in self.parameters()))
        X = self.input_terms(xi)  # (B, n, 5k); with a graph when gradients are wanted
        system = self.system(xi, mask, X)
        if start is not None and start.shape == system.shape:  # (solve names a wrong shape)
            start = start.to(X.dtype) * system.maskf  # padded positions stay inert
        with torch.no_grad():
            H, stats = solve(system, self.solver, start=start, **self.options)
        self.last_stats = stats
        self.last_solution = H
        self.last_jacobian_penalty = None
        if not needs_grad:
            return H
        if self.jacobian_samples:
            from inn.nn.implicit_function import jacobian_frobenius

            fro2 = jacobian_frobenius(lambda Z: self.transition(xi, Z, mask, X), H, mask, self.jacobian_samples)
            self.last_jacobian_penalty = fro2.sum() / (mask.sum() * self.hidden_size).clamp_min(1)
        return implicit_solution(self, xi, mask, H, system, X)
