"""Why the GMRES adjoint hands more float32 solves to the float64 fallback than Anderson on the
epoch-5 fixture (docs/decisions.md has the verdict).

    python gmres_trace.py N BATCHES

The same BATCHES fresh b = 0.5 training batches of 20 walks of N steps as ``options.py``, with
``backward_solver: gmres``; every float32 GMRES solve is traced a second time, cycle by cycle
without compaction (the same steps): for each sequence that ends above tol, each cycle's
products, its residual estimate |gamma| / ||g|| at the cycle's end, and the true relative
residual ||g - (I - J^T) u|| / ||g|| formed after it, in float32 as the solver forms it.
"""
import importlib
import sys

import torch

import inn.solvers as solvers
from inn.experiment.breakdown import batch_costs, fixture_batches
from inn.solvers._common import batch_norm

gmres_module = importlib.import_module("inn.solvers.gmres")  # inn.solvers.gmres is the function
Cycle, layer_gmres = gmres_module._Cycle, gmres_module.gmres
traces = []  # (the solver's info, [(products, estimate, true residual) per cycle])


def traced(matvec, precondition, b, x0=None, rtol=1e-5, maxiter=200, restart=30, restrict=None):
    """The layer's GMRES, then (float32 solves) the same cycles again, recorded."""
    x, info = layer_gmres(matvec, precondition, b, x0, rtol, maxiter, restart, restrict)
    if b.dtype != torch.float32:
        return x, info
    scale = batch_norm(b)
    u, r, used, cycles = torch.zeros_like(b), b.clone(), 0, []
    while used < maxiter and not bool((batch_norm(r) <= rtol * scale).all()):
        m = min(restart, maxiter - used)
        cycle = Cycle(r, scale, batch_norm(r) > rtol * scale, m)
        for j in range(m):
            cycle.step(j, matvec(precondition(cycle.V[:, j].view_as(r))).reshape(b.shape[0], -1), rtol)
            used += 1
            if not bool(cycle.active.any()):
                break
        estimate = cycle.gamma[:, j + 1].abs() / scale
        u = u + precondition(cycle.update(j + 1).view_as(r))
        r = b - matvec(u)
        cycles.append((j + 1, estimate, batch_norm(r) / scale))
    traces.append((info, cycles))
    return x, info


solvers.gmres = traced  # what the layer's backward_solver "gmres" calls
torch.set_num_threads(1)
n, count = int(sys.argv[1]), int(sys.argv[2])
model, meta, batches = fixture_batches("tests/fixtures/walks_b05_inn_epoch5.pt", n, count)
model.rnn.backward_options = {**model.rnn.backward_options, "backward_solver": "gmres"}
for batch in batches:
    batch_costs(model, batch, "token")
missed = 0
for info, cycles in traces:
    for i in (info.code != 0).nonzero().flatten().tolist():  # 0: CONVERGED
        missed += 1
        line = " | ".join(f"{p}p est {est[i]:.1e} true {true[i]:.1e}" for p, est, true in cycles)
        sys.stdout.write(f"sequence {i}, {int(info.iterations[i])} products: {line}\n")
sys.stdout.write(f"{len(traces)} float32 adjoint solves, {missed} sequences above tol\n")
