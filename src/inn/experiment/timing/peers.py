"""TorchDEQ (Geng & Kolter 2023), the standard implicit-layer library, as a measured peer.

``inn benchmark`` runs TorchDEQ's own solvers on the same :class:`~inn.nn.implicit_layer.ImplicitSystem`
as ours (the layer's ``system(...)``, whose ``F`` it iterates), from the same start (zeros),
to the same relative tolerance, and reports them in the same table. Optional: installed with
``pip install -e ".[peers]"``; without it the peers are skipped with a note.

Matching the stopping tests. Ours stops when every sequence has ||F(H) - H|| / ||H|| <= tol
at the H it returns (:func:`inn.solvers._common.relative_residual`, per sequence). TorchDEQ's
``stop_mode="rel"`` is also per sample (one sample = one sequence, its (n, k) states
flattened) and stops when the largest over the batch is below tol, i.e. when every sequence
is, with ||F(x) - x|| / (||F(x)|| + 1e-9) at its last iterate x, returning F(x) (Anderson,
fixed-point iteration) or x (Broyden). The denominators differ by a factor 1 +- tol, and F(x)
is one contraction past x, so the tests agree to within that factor; every row's residual is
recomputed in OUR definition at the returned point, and a sequence above tol is counted as
failed, whichever solver produced it.

Rows: ``torchdeq_anderson``, ``torchdeq_broyden``, ``torchdeq_fixed_point_iter`` (forward
only, under ``torch.no_grad``: TorchDEQ's solvers have no backward of their own), and
``torchdeq_ift``: TorchDEQ's Anderson forward and its implicit-differentiation backward
(``torchdeq.grad.backward_factory("ift")``, Anderson on the adjoint with autograd
vector-Jacobian products through the layer's F, to the same tol, ``stop_mode="rel"``).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable

import torch
from torch import Tensor

from inn.solvers import SOLVERS
from inn.solvers._common import batch_norm, relative_residual

#: peer row name -> TorchDEQ solver name (``torchdeq.solver.get_solver``)
PEER_SOLVERS = {
    "torchdeq_anderson": "anderson",
    "torchdeq_broyden": "broyden",
    "torchdeq_fixed_point_iter": "fixed_point_iter",
}
#: the peer row with TorchDEQ's own implicit-differentiation backward
IFT = "torchdeq_ift"
PEERS = (*PEER_SOLVERS, IFT)
#: iteration limits: our own solvers' (Broyden's is a quasi-Newton method: Anderson's limit)
MAX_ITER = {
    "anderson": SOLVERS["anderson"].max_iter,
    "broyden": SOLVERS["anderson"].max_iter,
    "fixed_point_iter": SOLVERS["fixed_point"].max_iter,
}
#: the note a run without TorchDEQ prints instead of the peer rows
MISSING_NOTE = "TorchDEQ peers skipped: torchdeq is not installed (pip install -e '.[peers]')"


def available() -> bool:
    """Whether TorchDEQ can be imported."""
    return importlib.util.find_spec("torchdeq") is not None


class _Counted:
    """A function that counts its calls (batched F evaluations)."""

    def __init__(self, fn: Callable[[Tensor], Tensor]) -> None:
        self.fn, self.calls = fn, 0

    def __call__(self, x: Tensor) -> Tensor:
        self.calls += 1
        return self.fn(x)


class Peer:
    """One TorchDEQ row on one layer and batch: its timed closures and its figures.

    ``forward()`` solves H = F(H) under ``torch.no_grad``; ``forward_backward()`` (IFT row
    only, else None) solves, applies F once with autograd at the solution and backpropagates
    a linear loss through TorchDEQ's implicit backward, as ours is timed.
    """

    def __init__(self, name: str, layer, xi: Tensor, mask: Tensor, target: Tensor, tol: float) -> None:
        from torchdeq.solver import get_solver

        self.name, self.layer, self.xi, self.mask, self.target, self.tol = name, layer, xi, mask, target, tol
        self.solver_name = PEER_SOLVERS.get(name, "anderson")
        self.solver = get_solver(self.solver_name)
        self.system = layer.system(xi, mask)
        self.backward_records: list[tuple[Callable, Tensor, dict]] = []

    def _solve(self, F: Callable[[Tensor], Tensor]) -> tuple[Tensor, dict]:
        x0 = torch.zeros(self.system.shape, dtype=self.system.X.dtype, device=self.system.X.device)
        with torch.no_grad():
            H, _, info = self.solver(F, x0, max_iter=MAX_ITER[self.solver_name], tol=self.tol, stop_mode="rel")
        return H, info

    def forward(self) -> Tensor:
        return self._solve(self.system.F)[0]

    def _backward_solver(self, record: bool):
        from torchdeq.solver import get_solver

        anderson = get_solver("anderson")

        def solve(func, x0, **kwargs):
            out = anderson(func, x0, **kwargs)
            if record:
                self.backward_records.append((func, out[0], out[2]))
            return out

        return solve

    def _forward_backward(self, record: bool = False) -> None:
        from torchdeq.grad import backward_factory

        layer = self.layer
        layer.zero_grad(set_to_none=True)
        x = self.xi.detach().requires_grad_(True)
        X = layer.input_terms(x)
        H, _ = self._solve(self.system.F)
        ift = backward_factory(
            "ift",
            b_solver=self._backward_solver(record),
            b_solver_kwargs=dict(max_iter=MAX_ITER["anderson"], tol=self.tol, stop_mode="rel"),
        )
        (out,) = ift(None, lambda Z: layer.transition(x, Z, self.mask, X), H.detach())
        (layer.output(out) * self.target).sum().backward()  # the layer's output: h of the state

    @property
    def forward_backward(self) -> Callable[[], None] | None:
        return self._forward_backward if self.name == IFT else None

    def figures(self, clock: Callable[[], float] | None = None) -> dict:
        """Iterations, F evaluations and the final residual in our definition (max over the
        batch) of one forward; for the IFT row also the adjoint's iterations and residual
        ||u - J^T u - g|| / ||g|| (the definition of our adjoint solvers). With ``clock``
        also that forward's time (``forward_s``): the figure kept for a solve too slow to
        repeat."""
        F = _Counted(self.system.F)
        start = clock() if clock is not None else 0.0
        H, info = self._solve(F)
        elapsed = clock() - start if clock is not None else None
        with torch.no_grad():
            res = relative_residual(self.system.F(H) - H, H)
        out = dict(
            newton_mean=float(info["nstep"].float().mean()),
            function_evals=float(F.calls),
            residual_max=float(res.max()),
            failed=int((res > self.tol).sum()),
        )
        if elapsed is not None:
            out["forward_s"] = elapsed
        if self.name == IFT:
            self.backward_records.clear()
            self._forward_backward(record=True)
            func, u, binfo = self.backward_records[-1]
            with torch.no_grad():
                g = func(torch.zeros_like(u))  # J^T 0 + g
                bres = batch_norm(func(u) - u) / batch_norm(g).clamp_min(torch.finfo(g.dtype).tiny)
            out.update(
                backward_iterations=float(binfo["nstep"].float().mean()), backward_residual_max=float(bres.max())
            )
            out["failed"] += int((bres > self.tol).sum())
        return out


def peer_summary(rows, ours) -> str:
    """Per system (weights, k, n): our fastest forward against TorchDEQ's fastest, each among
    the rows whose every sequence reached tol; empty when no peer was run."""
    groups: dict[tuple, list] = {}
    for row in rows:
        groups.setdefault((row.weights, row.hidden, row.n), []).append(row)
    lines = []
    for (weights, hidden, n), group in groups.items():

        def best(names):
            done = [r for r in group if r.method in names and r.failed == 0 and r.forward_s == r.forward_s]
            return min(done, key=lambda r: r.forward_s, default=None)

        mine, theirs = best(ours), best(PEERS)
        if theirs is None and not any(r.method in PEERS for r in group):
            continue
        ratio = theirs.forward_s / mine.forward_s if mine and theirs else float("nan")
        lines.append(
            f"{weights:<11} {hidden:>4} {n:>4}  {mine.method if mine else '-':<20} "
            f"{mine.forward_s if mine else float('nan'):>8.4f}  {theirs.method if theirs else '-':<26} "
            f"{theirs.forward_s if theirs else float('nan'):>8.4f}  {ratio:>6.2f}"
        )
    if not lines:
        return ""
    head = (
        f"\nforward: our best against TorchDEQ's best (rows with every sequence at tol)\n"
        f"{'weights':<11} {'k':>4} {'n':>4}  {'ours':<20} {'fwd s':>8}  {'TorchDEQ':<26} {'fwd s':>8}  {'ratio':>6}\n"
    )
    return head + "\n".join(lines) + "\n"
