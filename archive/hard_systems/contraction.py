"""Why the walks INN's forward takes 6 iterations at initialisation and ~20 once trained: the
contraction of the solver's map at the solution, per sequence, for a list of INN states.

    python contraction.py N BATCHES STATE [STATE ...]   (STATE: a checkpoint, or ``init``)

For each state: BATCHES batches of 20 fresh b = 0.5 walks of exactly N steps (the same walks
for every state), solved as training solves them (float32, the layer's defaults), then, on the
system's float64 copy solved to 1e-10 (by Anderson: plain steps diverge on some sequences), the
spectral radius rho of the Jacobian of the maps the solvers iterate: F itself (a plain
fixed-point step) and the tridiagonal step T(H) = H + (I - D)^{-1} (F(H) - H) that Anderson
accelerates (its Jacobian at a fixed point, (I - D)^{-1} (J_F - D), is the adjoint's too,
transposed); and T with a fraction alpha of the copy coupling, (I - 0.9 D)^{-1}. rho by 60 steps
of power iteration on central differences (eps 1e-6), the geometric mean of the last 20 growth
factors, so complex pairs count. Printed per state: the mean Anderson iterations, the median
and 90th percentile of each rho over the sequences, and for the first batch the leading
eigenvalues of J_T of its first two sequences (Rayleigh-Ritz on an 8-dimensional subspace
iteration) with how the 8 leading modes spread over units (the share of the top 8 of the
state's K unit directions, pooled over the batch) and positions (the share of the top 5).

``init``: a freshly initialised INN of the first checkpoint's configuration (seed 1).
"""

import copy
import sys
import warnings

import torch

from inn.batches import collate
from inn.checkpoints import load_checkpoint
from inn.data.walk import generate_walks
from inn.models import ModelConfig, build_model
from inn.nn.implicit_layer import neighbours
from inn.solvers.tridiagonal import Tridiagonal

torch.set_num_threads(1)
warnings.simplefilter("ignore")
n, batches, names = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
reference, _ = load_checkpoint(next(name for name in names if name != "init"))
walks = [collate([{"x": x, "y": y} for x, y in generate_walks(20, 0.5, reference.config.input_dim, 1000 + i,
                                                             max_len=n, min_len=n)]) for i in range(batches)]
EPS = 1e-6


def jvp(step, H: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """d step / dH at H applied to v, by central differences (float64)."""
    return (step(H + EPS * v) - step(H - EPS * v)) / (2 * EPS)


def spectral_radius(step, H: torch.Tensor, steps: int = 60) -> torch.Tensor:
    """Per sequence: rho of d step / dH at H, by power iteration."""
    v = torch.randn(H.shape, dtype=H.dtype, generator=torch.Generator().manual_seed(0))
    v = v / v.flatten(1).norm(dim=1).view(-1, 1, 1)
    logs = []
    for _ in range(steps):
        w = jvp(step, H, v)
        growth = w.flatten(1).norm(dim=1)
        logs.append(growth.log())
        v = w / growth.view(-1, 1, 1)
    return torch.stack(logs[-20:]).mean(0).exp()


def partial_step(system, alpha: float):
    """T with the copy coupling scaled by alpha: H + (I - alpha D)^{-1} (F(H) - H)."""
    def step(H: torch.Tensor) -> torch.Tensor:
        prev, nxt = neighbours(H, system.next_real, system.h_start, system.h_end)
        h, aux = system.evaluate(system.X, prev, nxt)
        lower, upper = system.coupling(system.X, prev, nxt, aux)
        return H + Tridiagonal(alpha * lower, alpha * upper).solve(h * system.maskf - H)
    return step


def slow_modes(step, H: torch.Tensor, r: int = 8, steps: int = 60) -> str:
    """The r leading eigenvalues of d step / dH (first two sequences) and their spread."""
    B, N, K = H.shape
    V = torch.randn(B, r, N, K, dtype=H.dtype, generator=torch.Generator().manual_seed(0))
    for _ in range(steps):
        W = torch.stack([jvp(step, H, V[:, j]) for j in range(r)], 1)
        Q, _ = torch.linalg.qr(W.flatten(2).transpose(1, 2))
        V = Q.transpose(1, 2).reshape(B, r, N, K)
    W = torch.stack([jvp(step, H, V[:, j]) for j in range(r)], 1)
    ritz = torch.linalg.eigvals(torch.einsum("bin,bjn->bij", V.flatten(2), W.flatten(2)))
    ritz = ritz.gather(1, ritz.abs().argsort(dim=1, descending=True))
    units = torch.linalg.svdvals(V.reshape(-1, K)).pow(2)
    positions = V.pow(2).sum(-1)
    shown = "; ".join(" ".join(f"{complex(z):.2f}" for z in ritz[b, :6]) for b in range(2))
    return (f"leading eigenvalues of J_T: {shown} | top 8 unit directions {float(units[:8].sum() / units.sum()):.2f} "
            f"| top 5 positions {float((positions.sort(-1, descending=True).values[..., :5].sum(-1) / positions.sum(-1)).median()):.2f}")


for name in names:
    if name == "init":
        torch.manual_seed(1)
        model = build_model(ModelConfig(**vars(reference.config))).eval()
    else:
        model, _ = load_checkpoint(name)
    m64 = copy.deepcopy(model).double()
    m64.rnn.options = {**m64.rnn.options, "tol": 1e-10, "max_iter": 500}
    its, rho = [], {"T": [], "F": [], "T(0.9 D)": []}
    for i, batch in enumerate(walks):
        x, mask = batch["x"], batch["mask"]
        with torch.no_grad():
            model.rnn(x, mask)
            its.append(model.rnn.last_stats.newton_iterations.float())
            m64.rnn(x.double(), mask)
            system, H = m64.rnn.system(x.double(), mask), m64.rnn.last_solution
            for key, step in (("T", system.tridiagonal_step), ("F", system.F), ("T(0.9 D)", partial_step(system, 0.9))):
                rho[key].append(spectral_radius(step, H))
            if i == 0:
                modes = slow_modes(system.tridiagonal_step, H)
    q = torch.tensor([0.5, 0.9], dtype=torch.float64)
    shown = " | ".join(f"rho_{key} median {m:.3f} 90% {p:.3f}"
                       for key, values in rho.items() for m, p in [torch.cat(values).quantile(q).tolist()])
    print(f"{name}: n = {n}, {len(torch.cat(its))} walks | Anderson iterations {torch.cat(its).mean():.1f} | {shown}\n"
          f"    {modes}", flush=True)
