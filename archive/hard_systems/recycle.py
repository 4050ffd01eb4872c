"""The adjoint started from the forward's secant information, on a trained walks fixture.

    python recycle.py FIXTURE N BATCHES [PAIRS]

Anderson's forward iterates on the tridiagonal step T(H) = H + P^{-1} (F(H) - H) (P = I - D,
D the gated copy) leave pairs of differences (dH_j, dT_j) with dT_j ~ M dH_j, M = T'(H*). Their
least-squares model M~ = dT (dH^T dH)^+ dH^T is exact on what the forward explored. The adjoint
(I - J)^T u = g is (I - M)^T (P^T u) = g, so w0 = (I - M~^T)^{-1} g (Woodbury, rank <= PAIRS)
and u0 = P^{-T} w0 is the start that secant model gives; u0 = P^{-T} g (M~ = 0) is the
adjoint's usual first step. For each of BATCHES fresh b = 0.5 training batches of 20 walks of
N steps (seed 1) through the whole model with its token loss: the adjoint's iterations from
its usual start and from u0 (through the layer's adjoint start, whose choice counts one
iteration), and the median relative residual of the two starts. PAIRS: the last that many
forward pairs (default: all). One thread; compaction, the fallbacks and the bfloat16 first
passes off, so that every pair is a float32 step of the whole batch.
"""

import sys
import warnings

import torch

import inn.solvers as solvers
import inn.solvers.anderson as anderson
from inn.checkpoints import load_checkpoint
from inn.experiment.breakdown import training_batches
from inn.experiment.train import token_losses
from inn.solvers import ConvergenceWarning, batch_norm, copy_inverse

torch.set_num_threads(1)
warnings.simplefilter("ignore", ConvergenceWarning)
path, n, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
last = int(sys.argv[4]) if len(sys.argv) > 4 else 1000
model, meta = load_checkpoint(path, device=torch.device("cpu"))
model.train()
model.rnn.options = {**model.rnn.options, "compact": False, "fallback": None, "low_precision": False}
model.rnn.backward_options = {**model.rnn.backward_options, "backward_fallback": None,
                              "backward_low_precision": False}
make = training_batches(model, meta, None, 20, 1)
pairs: list[tuple[torch.Tensor, torch.Tensor]] = []  # (H, T(H)) of every forward step
results: list[tuple[float, float, float, float]] = []
tridiagonal, adjoint = anderson.SWEEPS["tridiagonal"], solvers.ADJOINT_SOLVERS["anderson"]


def recording(system):
    step = tridiagonal(system)

    def fmap(H: torch.Tensor):
        out = step(H)
        pairs.append((H.clone(), out[0].clone()))
        return out
    return fmap


def secant_start(lin, g: torch.Tensor) -> torch.Tensor:
    """u0 = P^{-T} (I - M~^T)^{-1} g from the recorded forward pairs, per sequence, in float64."""
    use = pairs[-(last + 1):]
    dH = torch.stack([h for h, _ in use], -1).flatten(1, -2).double().diff(dim=-1)  # (B, N, m)
    dT = torch.stack([t for _, t in use], -1).flatten(1, -2).double().diff(dim=-1)
    w = g.flatten(1).double()
    for b in range(g.shape[0]):
        moved = dH[b].norm(dim=0) > 0  # a sequence that is done stays put: no pair
        s, t = dH[b][:, moved], dT[b][:, moved]
        if s.shape[1]:
            U = s @ torch.linalg.pinv(s.T @ s, rtol=1e-10)  # M~^T = U t^T
            w[b] = w[b] + U @ torch.linalg.solve(torch.eye(s.shape[1], dtype=s.dtype) - t.T @ U, t.T @ w[b])
    return copy_inverse(lin).solve(w.reshape(g.shape).to(g.dtype)) * lin.system.maskf


def both(lin, g: torch.Tensor, **options):
    """The usual adjoint, and the same from the secant start (what the model trains on: the usual)."""
    options.pop("u0", None)
    u, stats = adjoint(lin, g, **options)
    u0 = secant_start(lin, g)
    _, secant = adjoint(lin, g, u0=u0, **options)
    residual = lambda v: float((batch_norm(g + lin.vjp(v) - v) / batch_norm(g)).median())  # noqa: E731
    results.append((float(stats.newton_iterations.float().mean()), float(secant.newton_iterations.float().mean()),
                    residual(copy_inverse(lin).solve(g)), residual(u0)))
    return u, stats


anderson.SWEEPS["tridiagonal"], solvers.ADJOINT_SOLVERS["anderson"] = recording, both
for _ in range(count):
    batch = make(n)
    pairs.clear()
    model.zero_grad(set_to_none=True)
    loss, tokens, _ = token_losses(model, batch)
    (loss / tokens).backward()
usual, secant, r_usual, r_secant = (torch.tensor(column) for column in zip(*results))
sys.stdout.write(f"n={n} {count} batches, pairs {'all' if last >= 1000 else last}: adjoint iterations {usual.mean():.2f} "
                 f"-> {secant.mean():.2f} from the secant start; start residual median {r_usual.median():.3f} "
                 f"-> {r_secant.median():.3f}\n")
