"""The implicit GRU layer (paper section 2.5): H = F(H), each h_t coupled to both neighbours.

    hhat_t = s * h_{t-1} + (1 - s) * h_{t+1}        s = s_p / (s_p + s_n)
    s_p = sigmoid(W_p x_t + U_p h_{t-1} + b_p)       s_n = sigmoid(W_n x_t + U_n h_{t+1} + b_n)
    z = sigmoid(W_z x_t + U_z hhat_t + b_z)          r = sigmoid(W_r x_t + U_r hhat_t + b_r)
    htilde = tanh(W x_t + U (r * hhat_t) + b)        h_t = (1 - z) * hhat_t + z * htilde

with h_0 = h_s and h_{n+1} = h_e. :class:`GRUCell` is this f as a cell of
:class:`inn.nn.ImplicitSequence` with every hook (:class:`inn.nn.sequence.Cell`):

- the input terms ``W x + b`` split off (``project``: x is fixed during a solve, so only the
  U-products cost anything), and ``transition`` on them with the recurrent matrices passed in;
- an analytic linearisation (:class:`GRULinearization`: J V, J^T V and the k x k Jacobian
  blocks, each at the cost of one F evaluation);
- its tridiagonal coupling, the gated copy of the neighbours (1 - z) s and (1 - z)(1 - s),
  which Anderson's preconditioner and the adjoint's invert along the sentence; the step from
  H = 0 without matrix products; the explicit GRU step of the one-step guess; the maximum
  principle bounding every fixed point; bfloat16 products.

:class:`ImplicitGRU` is the layer: ``ImplicitSequence(GRUCell(...))`` with the parameter names
and order of its checkpoints. ``forward`` solves without a graph, then applies F once more with
autograd at the solution and wraps it in the implicit-differentiation function
(:mod:`inn.nn.implicit_function`), so backward costs one adjoint linear solve and one pass
through F.

The switch is computed as s = sigmoid(log sigmoid(a_p) - log sigmoid(a_n)), which equals
s_p / (s_p + s_n) but never forms 0/0 when both sigmoids underflow (in float32 a sigmoid
underflows to zero for pre-activations below about -89).

Padding: sequences are left-aligned and ``mask`` is True on real tokens. The state after a
sequence's last real token is h_e, padded outputs are zero, so a sequence's states do not
depend on what it is batched with.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as Fn
from torch import Tensor, nn

from inn.nn.sequence import HeldCell, ImplicitSequence
from inn.nn.system import CellLinearization, ImplicitSystem, affine, neighbours, product, switch
from inn.solvers._common import relative_residual
from inn.solvers.tridiagonal import Tridiagonal


def transition(
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
    a_p = affine(Xp, prev, weight_pn[:k])
    a_n = affine(Xn, nxt, weight_pn[k:])
    s = switch(a_p, a_n)
    hhat = torch.lerp(nxt, prev, s)  # s h_{t-1} + (1 - s) h_{t+1}
    z, r = torch.sigmoid(affine(Xzr, hhat, weight_zr)).split(k, dim=-1)
    c = torch.tanh(affine(Xc, r * hhat, weight_c))
    h = torch.lerp(hhat, c, z)  # (1 - z) hhat + z c
    return h, (s, a_p, a_n, hhat, z, r, c)


def copy_coupling(s: Tensor, z: Tensor) -> tuple[Tensor, Tensor]:
    """The elementwise part of dh_t/dh_{t-1} and dh_t/dh_{t+1}: (1 - z) s and (1 - z)(1 - s),
    the gated copy of the neighbours (unmasked)."""
    keep = 1 - z
    lower = keep * s
    return lower, keep - lower


class GRULinearization(CellLinearization):
    """The implicit GRU's F and Jacobian products at one point H, analytically.

    Each product costs the same five k x k matrix products per position as F itself (the
    intermediates are computed once here). ``jvp`` is checked against ``torch.func.jvp`` and
    ``vjp`` against autograd in the tests.
    """

    def __init__(self, system: ImplicitSystem, H: Tensor, evaluated: tuple | None = None) -> None:
        """``evaluated``: ``(prev, nxt, h, intermediates)`` of :func:`transition` at H when the
        caller has them already (detached), which saves an evaluation."""
        self.system = system
        k = system.weights[0].shape[1]
        if evaluated is None:
            prev, nxt = neighbours(H, system.next_real, system.h_start, system.h_end)
            h, intermediates = transition(system.X, prev, nxt, *system.weights)
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
        self.copy = system.mask_coupling(*copy_coupling(s, z))  # (lower, upper): the elementwise coupling
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
        vp, vn = neighbours(V, sy.next_real, zero, zero)
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
        g_rh = product(g * self.gc[:, sl], Wc)
        g_hh = g_hh + g_rh * self.r[:, sl]
        g_zr = torch.cat([g * self.gz[:, sl], g_rh * self.hrd[:, sl]], dim=-1)
        g_hh = g_hh + product(g_zr, Wzr)
        s = self.s[:, sl]
        g_prev = g_hh * s + product(g_hh * self.ep[:, sl], Wpn[:k])
        g_next = (g_hh - g_hh * s) - product(g_hh * self.en[:, sl], Wpn[k:])
        return g_prev, g_next * sy.next_realf[:, sl]

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
        return self.mask_blocks(t, L, R)


class GRUCell(HeldCell):
    """The implicit GRU's cell f(x_t, h_{t-1}, h_{t+1}) with every hook of
    :class:`inn.nn.sequence.Cell` (see the module docstring).

    Parameters: ``weight_x`` (5k, input_size) and ``bias`` (5k), the input terms for p, n, z, r
    and the candidate; ``weight_pn`` U_p; U_n (2k, k), ``weight_zr`` U_z; U_r (2k, k),
    ``weight_c`` U (k, k). Inside :class:`ImplicitGRU` the layer holds them (``holder``).
    """

    supports_low_precision = True
    Linearization = GRULinearization
    transition = staticmethod(transition)

    def __init__(self, input_size: int, hidden_size: int) -> None:
        super().__init__()
        self.input_size = input_size
        self.hidden_size = self.output_size = k = hidden_size
        self.weight_x = nn.Parameter(torch.empty(5 * k, input_size))
        self.bias = nn.Parameter(torch.empty(5 * k))
        self.weight_pn = nn.Parameter(torch.empty(2 * k, k))  # U_p; U_n
        self.weight_zr = nn.Parameter(torch.empty(2 * k, k))  # U_z; U_r
        self.weight_c = nn.Parameter(torch.empty(k, k))  # U
        self.reset_parameters()

    def weights(self) -> tuple[Tensor, Tensor, Tensor]:
        """The recurrent matrices, in the order :func:`transition` takes them."""
        return self.params.weight_pn, self.params.weight_zr, self.params.weight_c

    def project(self, x: Tensor) -> Tensor:
        """W x_t + b for all five blocks at once: (B, n, input_size) -> (B, n, 5k)."""
        return Fn.linear(x, self.params.weight_x, self.params.bias)

    def forward(self, x: Tensor, h_prev: Tensor, h_next: Tensor) -> Tensor:
        return transition(self.project(x), h_prev, h_next, *self.weights())[0]

    @staticmethod
    def coupling(X: Tensor, prev: Tensor, nxt: Tensor, aux: tuple[Tensor, ...]) -> tuple[Tensor, Tensor]:
        """The gated copy of the neighbours, :func:`copy_coupling`, from s and z in ``aux``."""
        return copy_coupling(aux[0], aux[4])

    @staticmethod
    def state_bound(h_start: Tensor, h_end: Tensor) -> Tensor:
        """A maximum principle: h_t = (1 - z) hhat_t + z tanh(...) mixes its neighbours (or the
        boundary states) with a value in (-1, 1), so no unit of a fixed point exceeds
        max(1, |h_start|, |h_end|) in size."""
        return torch.maximum(h_start.abs(), h_end.abs()).clamp_min(1.0)

    @staticmethod
    def step_from_zero(system: ImplicitSystem) -> tuple[Tensor, Tensor] | None:
        """The tridiagonal step at H = 0 with its residual, without matrix products.

        With H = 0 and zero boundary states every recurrent product vanishes: hhat = 0, so
        F(0) = z c with z and c from the input terms alone. Anderson's usual first step
        (from the ``"zeros"`` candidate) then costs elementwise work and a tridiagonal
        solve. None when a boundary state is not zero (trainable boundaries).
        """
        if bool(system.h_start.any()) or bool(system.h_end.any()):
            return None
        Xp, Xn, Xz, _, Xc = system.X.chunk(5, dim=-1)
        s = switch(Xp, Xn)
        z = torch.sigmoid(Xz)
        G = z * torch.tanh(Xc) * system.maskf
        step = Tridiagonal(*system.mask_coupling(*copy_coupling(s, z))).solve(G)
        return step, relative_residual(G, torch.zeros_like(G))

    @staticmethod
    def explicit_step(Xt: Tensor, h: Tensor, weight_pn: Tensor, weight_zr: Tensor, weight_c: Tensor) -> Tensor:
        """The explicit GRU step (hhat = h) used by the one-step guess's sweeps."""
        k = h.shape[-1]
        zr = h @ weight_zr.T
        z = torch.sigmoid(Xt[:, 2 * k : 3 * k] + zr[:, :k])
        r = torch.sigmoid(Xt[:, 3 * k : 4 * k] + zr[:, k:])
        c = torch.tanh(Xt[:, 4 * k :] + (r * h) @ weight_c.T)
        return h + z * (c - h)


class ImplicitGRU(ImplicitSequence):
    """Implicitly-defined bidirectional GRU layer (Kazi & Thompson, 2017):
    :class:`inn.nn.ImplicitSequence` on a :class:`GRUCell`.

    Args:
        input_size: width of xi.
        hidden_size: k, the state width.
        solver: a name in :data:`inn.solvers.SOLVERS`: ``"anderson"`` (default, the workflow's:
            the fastest measured, 2-3x the paper's method), ``"newton_krylov"`` (the paper's
            Newton-BiCGSTAB), ``"newton_direct"``, ``"fixed_point"``. All reach the same
            states to ``tol``.
        trainable_boundary: learn h_s and h_e (zero and fixed otherwise, as in the paper).
        **options: solver and backward options, see :class:`inn.nn.ImplicitSequence`.

    Shapes: ``forward(xi, mask)`` with xi (B, n, input_size), mask (B, n) bool (True on real
    tokens, left-aligned) returns H (B, n, hidden_size), zero at padded positions. The cell's
    parameters are the layer's own (``weight_x``, ``bias``, ``weight_pn``, ``weight_zr``,
    ``weight_c``, then ``h_start``, ``h_end``), as in checkpoints from before the cells, and
    ``layer.cell.parameters()`` lists the same tensors.
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        solver: str = "anderson",
        trainable_boundary: bool = False,
        **options: Any,
    ) -> None:
        super().__init__(GRUCell(input_size, hidden_size), hidden_size, solver, trainable_boundary, **options)
        self.hidden_size = hidden_size
        self._hold_cell_parameters()

    def extra_repr(self) -> str:
        return f"{self.input_size}, {self.hidden_size}, solver={self.solver!r}"
