"""The implicit LSTM (the paper's future work, section 5): the LSTM cell with both neighbours.

    hhat_t = s h_{t-1} + (1 - s) h_{t+1}            chat_t = s c_{t-1} + (1 - s) c_{t+1}
    s = s_p / (s_p + s_n), s_p = sigmoid(W_p x_t + U_p h_{t-1} + b_p), s_n = sigmoid(W_n x_t + U_n h_{t+1} + b_n)
    i, f, o = sigmoid(W_{i,f,o} x_t + U_{i,f,o} hhat_t + b_{i,f,o})    g = tanh(W_g x_t + U_g hhat_t + b_g)
    c_t = f * chat_t + i * g                        h_t = o * tanh(c_t)

with f optionally capped, f = forget_max sigmoid(...) (``forget_max`` 1: the cell as defined).
The cap is the remedy when c grows without bound: h = o tanh(c) is bounded, c is not, and with
the gates fixed c_t = f (s c_{t-1} + (1 - s) c_{t+1}) + i g is the expected reward of a walk along
the sentence that is stopped with probability 1 - f; where f saturates to 1 and the switch points
inward from both ends, that walk stays for a time exponential in the sentence's length and |c|
overflows (four implicit LSTM walk runs of docs/results.md did). With forget_max < 1 the c
equations are a contraction and |c| <= 1 / (1 - forget_max) at every fixed point.

The state of a position is [h_t; c_t] (width 2k), so the solvers, which work on (B, n, K)
tensors, take it unchanged; the boundary states [h_s; c_s] and [h_e; c_e] are zero (or
learned), and the layer outputs h. The switch is the implicit GRU's, computed stably
(:func:`inn.nn.system.switch`). :class:`LSTMCell` is this cell for
:class:`inn.nn.ImplicitSequence`, with the hooks (:class:`inn.nn.sequence.Cell`):

- the input terms split off (``project``) and ``transition`` on them;
- :class:`LSTMLinearization`: J V, J^T V and the 2k x 2k Jacobian blocks analytically (six
  k x k products per position for a product, as for F itself);
- its own tridiagonal step: with the gates fixed at the current hhat, c_t - f_t (s_t c_{t-1} +
  (1 - s_t) c_{t+1}) = i_t g_t is a scalar tridiagonal system along the sentence per unit,
  solved exactly (:mod:`inn.solvers.tridiagonal`), and h = o tanh(c) follows; the same step
  from H = 0 without matrix products;
- the explicit LSTM step of the one-step guess, the bound |h| < 1, bfloat16 products, and the
  output map [h; c] -> h.

:class:`ImplicitLSTM` is the layer, with the parameter names of its checkpoints.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as Fn
from torch import Tensor, nn

from inn.errors import InnError
from inn.nn.sequence import HeldCell, ImplicitSequence
from inn.nn.system import CellLinearization, ImplicitSystem, affine, neighbours, product, switch
from inn.solvers._common import relative_residual
from inn.solvers.tridiagonal import Tridiagonal


def transition(
    X: Tensor, prev: Tensor, nxt: Tensor, weight_pn: Tensor, weight_gates: Tensor, forget_max: float = 1.0
) -> tuple[Tensor, tuple[Tensor, ...]]:
    """The transition at every position: ([h; c]_{t-1}, [h; c]_{t+1}, W x_t + b) -> [h_t; c_t].

    X (..., 6k) holds the input terms in the order p, n, i, f, o, g; ``weight_pn`` is U_p; U_n
    (2k, k), ``weight_gates`` U_i; U_f; U_o; U_g (4k, k); ``forget_max`` caps f. Returns the
    state (..., 2k) and the intermediates (s, a_p, a_n, hhat, chat, i, f, o, g, tanh c) the
    linearisation needs.
    """
    k = weight_pn.shape[1]
    hp, cp = prev.split(k, dim=-1)
    hn, cn = nxt.split(k, dim=-1)
    Xp, Xn, Xg = X.split([k, k, 4 * k], dim=-1)
    a_p = affine(Xp, hp, weight_pn[:k])
    a_n = affine(Xn, hn, weight_pn[k:])
    s = switch(a_p, a_n)
    hhat = torch.lerp(hn, hp, s)  # s h_{t-1} + (1 - s) h_{t+1}
    chat = torch.lerp(cn, cp, s)
    A = affine(Xg, hhat, weight_gates)
    i, f, o = torch.sigmoid(A[..., : 3 * k]).split(k, dim=-1)
    if forget_max != 1.0:
        f = f * forget_max
    g = torch.tanh(A[..., 3 * k :])
    c = torch.addcmul(f * chat, i, g)
    tc = torch.tanh(c)
    return torch.cat([o * tc, c], dim=-1), (s, a_p, a_n, hhat, chat, i, f, o, g, tc)


def copy_coupling(s: Tensor, f: Tensor) -> tuple[Tensor, Tensor]:
    """c's elementwise coupling to its neighbours, f s and f (1 - s) (k units, unmasked)."""
    lower = f * s
    return lower, f - lower


class LSTMLinearization(CellLinearization):
    """The implicit LSTM's F and Jacobian products at one point H, analytically.

    Per position, with ds = s(1 - s)(sigmoid(-a_p) da_p - sigmoid(-a_n) da_n):
    d hhat = s dh_{t-1} + (1 - s) dh_{t+1} + (h_{t-1} - h_{t+1}) ds, d chat likewise with c,
    dA = U_{ifog} d hhat, dc = f d chat + chat df + g di + i dg, dh = o (1 - tanh^2 c) dc +
    tanh c do. ``jvp`` is checked against ``torch.func.jvp`` and ``vjp`` against autograd in
    the tests.
    """

    def __init__(self, system: ImplicitSystem, H: Tensor, evaluated: tuple | None = None) -> None:
        """``evaluated``: ``(prev, nxt, state, intermediates)`` of :func:`transition` at H when
        the caller has them already (detached), which saves an evaluation."""
        self.system = system
        k = self.k = system.weights[0].shape[1]
        if evaluated is None:
            prev, nxt = neighbours(H, system.next_real, system.h_start, system.h_end)
            out, intermediates = system.evaluate(system.X, prev, nxt)
        else:
            prev, nxt, out, intermediates = evaluated
        s, a_p, a_n, hhat, chat, i, f, o, g, tc = intermediates
        self.F = out * system.maskf
        d = prev - nxt
        self.dh, self.dc = d[..., :k], d[..., k:]  # h_{t-1} - h_{t+1}, c_{t-1} - c_{t+1}
        s1 = s * (1 - s)
        self.s = s
        self.sp = s1 * torch.sigmoid(-a_p)  # ds/da_p
        self.sn = s1 * torch.sigmoid(-a_n)  # -ds/da_n
        self.f = f
        self.gi = g * i * (1 - i)  # dc/da_i
        self.gf = chat * f * (1 - f / system.cell.forget_max)  # dc/da_f
        self.go = tc * o * (1 - o)  # dh/da_o
        self.gg = i * (1 - g * g)  # dc/da_g
        self.a = o * (1 - tc * tc)  # dh/dc
        # (lower, upper) over the whole state: c's elementwise coupling to its neighbours
        # (:func:`copy_coupling`); h has none to its own neighbours
        zero = torch.zeros_like(s)
        self.copy = tuple(torch.cat([zero, part], dim=-1) for part in system.mask_coupling(*copy_coupling(s, f)))

    def jvp(self, V: Tensor) -> Tensor:
        """J V = dF/dH . V, (B, n, 2k) -> (B, n, 2k)."""
        sy = self.system
        k = self.k
        Wpn, Wg = sy.weights
        zero = sy.zero_boundary
        vp, vn = neighbours(V, sy.next_real, zero, zero)
        vhp, vcp = vp.split(k, dim=-1)
        vhn, vcn = vn.split(k, dim=-1)
        ds = self.sp * (vhp @ Wpn[:k].T) - self.sn * (vhn @ Wpn[k:].T)
        dhh = torch.lerp(vhn, vhp, self.s) + self.dh * ds
        dch = torch.lerp(vcn, vcp, self.s) + self.dc * ds
        di, df, do, dg = (dhh @ Wg.T).split(k, dim=-1)
        dc = self.f * dch + self.gi * di + self.gf * df + self.gg * dg
        dh = self.a * dc + self.go * do
        return torch.cat([dh, dc], dim=-1) * sy.maskf

    def _sources(self, g: Tensor, sl: slice) -> tuple[Tensor, Tensor]:
        """Cotangents that positions ``sl`` send to their left and right neighbours.

        ``g`` (B, m, 2k) is the cotangent of F at positions ``sl``; returns (to state_{t-1},
        to state_{t+1}), zero where the right neighbour is the end boundary.
        """
        sy = self.system
        k = self.k
        Wpn, Wg = sy.weights
        g = g * sy.maskf[:, sl]
        gh, gc = g.split(k, dim=-1)
        gct = gc + self.a[:, sl] * gh  # the cotangent of c_t
        g_A = torch.cat([gct * self.gi[:, sl], gct * self.gf[:, sl], gh * self.go[:, sl], gct * self.gg[:, sl]], -1)
        g_hh = product(g_A, Wg)
        g_ch = gct * self.f[:, sl]
        g_ds = g_hh * self.dh[:, sl] + g_ch * self.dc[:, sl]
        s = self.s[:, sl]
        g_prev = torch.cat([g_hh * s + product(g_ds * self.sp[:, sl], Wpn[:k]), g_ch * s], -1)
        g_next = torch.cat([(g_hh - g_hh * s) - product(g_ds * self.sn[:, sl], Wpn[k:]), g_ch - g_ch * s], -1)
        return g_prev, g_next * sy.next_realf[:, sl]

    def blocks(self, t: int) -> tuple[Tensor, Tensor]:
        """(dF_t/dstate_{t-1}, dF_t/dstate_{t+1}), each (B, 2k, 2k), zero where there is no
        coupling. With N_c = dc/dhhat = diag(gi) U_i + diag(gf) U_f + diag(gg) U_g and
        N_h = dh/dhhat = diag(a) N_c + diag(go) U_o, the left block is

            [[N_h M + diag(a f dc sp) U_p,  diag(a f s)],
             [N_c M + diag(f dc sp) U_p,    diag(f s)  ]],   M = diag(s) + diag(dh sp) U_p,

        and the right one the same with 1 - s, -sn and U_n."""
        sy = self.system
        k = self.k
        Wpn, Wg = sy.weights
        Wi, Wf, Wo, Wgg = Wg.split(k)
        col = lambda v: v[:, t].unsqueeze(-2)  # noqa: E731  (scales columns)
        row = lambda v: v[:, t].unsqueeze(-1)  # noqa: E731  (scales rows)
        Nc = row(self.gi) * Wi + row(self.gf) * Wf + row(self.gg) * Wgg
        N = torch.cat([row(self.a) * Nc + row(self.go) * Wo, Nc], dim=-2)  # (B, 2k, k): d[h; c]/dhhat
        fa = torch.cat([self.a * self.f, self.f], dim=-1)  # d[h; c]/dchat, elementwise
        s = self.s[:, t]

        def block(weight: Tensor, copy: Tensor, sign: float, rate: Tensor) -> Tensor:
            hh = N * copy.unsqueeze(-2) + sign * (N * col(self.dh * rate)) @ weight
            hh = hh + sign * row(fa * torch.cat([self.dc * rate] * 2, -1)) * weight.repeat(2, 1)
            cc = torch.cat(
                [torch.diag_embed(self.a[:, t] * self.f[:, t] * copy), torch.diag_embed(self.f[:, t] * copy)], dim=-2
            )  # d[h; c]/dc_{t-/+1}
            return torch.cat([hh, cc], dim=-1)

        L = block(Wpn[:k], s, 1.0, self.sp)
        R = block(Wpn[k:], 1 - s, -1.0, self.sn)
        return self.mask_blocks(t, L, R)


class LSTMCell(HeldCell):
    """The implicit LSTM's cell, state [h; c] (2k) -> [h; c], with the hooks of
    :class:`inn.nn.sequence.Cell` (see the module docstring).

    Parameters: ``weight_x`` (6k, input_size) and ``bias`` (6k), the input terms for p, n, i,
    f, o, g; ``weight_pn`` U_p; U_n (2k, k); ``weight_gates`` U_i; U_f; U_o; U_g (4k, k).
    Inside :class:`ImplicitLSTM` the layer holds them (``holder``). ``forget_max`` in (0, 1]
    caps the forget gate (see the module docstring).
    """

    supports_low_precision = True
    Linearization = LSTMLinearization

    def __init__(self, input_size: int, hidden_size: int, forget_max: float = 1.0) -> None:
        super().__init__()
        if not 0.0 < forget_max <= 1.0:
            raise InnError(f"forget_max must lie in (0, 1], got {forget_max}")
        self.forget_max = float(forget_max)
        self.input_size = input_size
        self.hidden_size = self.output_size = k = hidden_size
        self.weight_x = nn.Parameter(torch.empty(6 * k, input_size))
        self.bias = nn.Parameter(torch.empty(6 * k))
        self.weight_pn = nn.Parameter(torch.empty(2 * k, k))  # U_p; U_n
        self.weight_gates = nn.Parameter(torch.empty(4 * k, k))  # U_i; U_f; U_o; U_g
        self.reset_parameters()

    def weights(self) -> tuple[Tensor, Tensor]:
        """The recurrent matrices, in the order :func:`transition` takes them."""
        return self.params.weight_pn, self.params.weight_gates

    def project(self, x: Tensor) -> Tensor:
        """W x_t + b for all six blocks at once: (B, n, input_size) -> (B, n, 6k)."""
        return Fn.linear(x, self.params.weight_x, self.params.bias)

    def transition(
        self, X: Tensor, prev: Tensor, nxt: Tensor, weight_pn: Tensor, weight_gates: Tensor
    ) -> tuple[Tensor, tuple[Tensor, ...]]:
        """:func:`transition` with this cell's forget gate cap."""
        return transition(X, prev, nxt, weight_pn, weight_gates, self.forget_max)

    def forward(self, x: Tensor, h_prev: Tensor, h_next: Tensor) -> Tensor:
        return self.transition(self.project(x), h_prev, h_next, *self.weights())[0]

    def output(self, H: Tensor) -> Tensor:
        """h, the first half of the state [h; c]."""
        return H[..., : self.hidden_size]

    def state_bound(self, h_start: Tensor, h_end: Tensor) -> Tensor:
        """h = o tanh(c) lies in (-1, 1) at a fixed point; c within 1 / (1 - forget_max) when
        the forget gate is capped (|c| <= forget_max max|c| + |i g|, |i g| < 1), else it has no
        fixed bound."""
        k = h_start.shape[-1] // 2
        c_bound = float("inf") if self.forget_max == 1.0 else 1.0 / (1.0 - self.forget_max)
        bound = torch.full_like(h_start, c_bound)
        bound[..., :k] = 1.0
        return bound

    @staticmethod
    def tridiagonal_step(
        system: ImplicitSystem, H: Tensor, with_residual: bool = False
    ) -> Tensor | tuple[Tensor, Tensor]:
        """c solved exactly with the gates at H, then h = o tanh(c).

        With the gates and the switch fixed (they depend on h only), c_t = f (s c_{t-1} +
        (1 - s) c_{t+1}) + i g is linear in c and tridiagonal along the sentence, unit by unit:
        c + (I - D)^{-1} (F_c(H) - c) solves it exactly (D: :func:`copy_coupling`), and h is
        then o tanh(c) at the new c. Same fixed points as F; one cell evaluation and a
        tridiagonal solve. ``with_residual``: also return H's relative residual
        ||F(H) - H|| / ||H|| per sequence, which the step computes anyway.
        """
        k = H.shape[-1] // 2
        prev, nxt = neighbours(H, system.next_real, system.h_start, system.h_end)
        out, (s, _, _, _, _, _, f, o, _, _) = system.evaluate(system.X, prev, nxt)
        G = out * system.maskf - H
        c = H[..., k:] + Tridiagonal(*system.mask_coupling(*copy_coupling(s, f))).solve(G[..., k:])
        step = torch.cat([o * torch.tanh(c) * system.maskf, c], dim=-1)
        return (step, relative_residual(G, H)) if with_residual else step

    @staticmethod
    def step_from_zero(system: ImplicitSystem) -> tuple[Tensor, Tensor] | None:
        """The tridiagonal step at H = 0 with its residual, without matrix products: with
        zero neighbours and boundaries hhat = chat = 0, so the gates come from the input terms
        alone and F(0) = [o tanh(i g); i g]. None when a boundary state is not zero."""
        if bool(system.h_start.any()) or bool(system.h_end.any()):
            return None
        Xp, Xn, Xi, Xf, Xo, Xg = system.X.chunk(6, dim=-1)
        s, f, o = switch(Xp, Xn), torch.sigmoid(Xf) * system.cell.forget_max, torch.sigmoid(Xo)
        ig = torch.sigmoid(Xi) * torch.tanh(Xg) * system.maskf
        G = torch.cat([o * torch.tanh(ig) * system.maskf, ig], dim=-1)
        c = Tridiagonal(*system.mask_coupling(*copy_coupling(s, f))).solve(ig)
        return torch.cat([o * torch.tanh(c) * system.maskf, c], dim=-1), relative_residual(G, torch.zeros_like(G))

    def explicit_step(self, Xt: Tensor, state: Tensor, weight_pn: Tensor, weight_gates: Tensor) -> Tensor:
        """The ordinary LSTM step (hhat = h, chat = c) used by the one-step guess's sweeps."""
        k = state.shape[-1] // 2
        h, c = state.split(k, dim=-1)
        A = Xt[:, 2 * k :] + product(h, weight_gates.T)
        i, f, o = torch.sigmoid(A[:, : 3 * k]).split(k, dim=-1)
        c = f * self.forget_max * c + i * torch.tanh(A[:, 3 * k :])
        return torch.cat([o * torch.tanh(c), c], dim=-1)


class ImplicitLSTM(ImplicitSequence):
    """Implicitly-defined bidirectional LSTM layer: the paper's implicit coupling on the LSTM
    cell, :class:`inn.nn.ImplicitSequence` on an :class:`LSTMCell`.

    Args:
        input_size: width of xi.
        hidden_size: k, the width of h and of c (the solved state is [h; c], 2k wide).
        solver: a name in :data:`inn.solvers.SOLVERS` (default ``"anderson"``, the workflow's).
        trainable_boundary: learn the boundary states [h_s; c_s] and [h_e; c_e] (zero and
            fixed otherwise).
        forget_max: the forget gate's cap in (0, 1]; 1 is the cell as defined. Below 1, c is
            bounded by 1 / (1 - forget_max) and cannot overflow (module docstring).
        **options: solver and backward options, see :class:`inn.nn.ImplicitSequence`.

    Shapes: ``forward(xi, mask)`` with xi (B, n, input_size), mask (B, n) bool (True on real
    tokens, left-aligned) returns h (B, n, hidden_size), zero at padded positions;
    ``last_solution`` (and a warm ``start``) is the whole state (B, n, 2 hidden_size). The
    cell's parameters are the layer's own, named as in checkpoints from before the cells, and
    ``layer.cell.parameters()`` lists the same tensors.
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        solver: str = "anderson",
        trainable_boundary: bool = False,
        forget_max: float = 1.0,
        **options: Any,
    ) -> None:
        super().__init__(
            LSTMCell(input_size, hidden_size, forget_max), 2 * hidden_size, solver, trainable_boundary, **options
        )
        self.hidden_size = hidden_size
        self._hold_cell_parameters()

    def extra_repr(self) -> str:
        cap = "" if self.cell.forget_max == 1.0 else f", forget_max={self.cell.forget_max}"
        return f"{self.input_size}, {self.hidden_size}, solver={self.solver!r}{cap}"
