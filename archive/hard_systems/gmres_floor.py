"""The GMRES adjoint with and without its round-off stop, beside Anderson, on a trained walks
fixture (docs/decisions.md has the verdict).

    python gmres_floor.py FIXTURE N BATCHES

A sample whose residual estimate met tol while its true residual did not, for
``inn.solvers.gmres.FLOOR_CYCLES`` cycles in a row, stops (its residual is at round-off) and the
float64 fallback takes it; "no stop" sets that count out of reach, the solver as it was. The
same BATCHES fresh b = 0.5 training batches of 20 walks of N steps as ``options.py``, the three
settings interleaved batch by batch, one CPU thread, process time: adjoint iterations per
sequence, the adjoint's and the batch's seconds, sequences handed to float64, solves at a limit.
"""

import importlib
import sys

import torch

from inn.experiment.breakdown import batch_costs, fixture_batches

gmres_module = importlib.import_module("inn.solvers.gmres")  # inn.solvers.gmres is the function
torch.set_num_threads(1)
fixture, n, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
model, meta, batches = fixture_batches(fixture, n, count)
base = dict(model.rnn.backward_options)
batch_costs(model, batches[0], "token")  # warm-up
settings = [("anderson", {}, gmres_module.FLOOR_CYCLES),
            ("gmres, no stop", {"backward_solver": "gmres"}, 10**9),
            ("gmres", {"backward_solver": "gmres"}, gmres_module.FLOOR_CYCLES)]
keys = ("adjoint_mean", "adjoint_s", "total_s", "adjoint_fallback", "adjoint_limit")
sums = {name: dict.fromkeys(keys, 0.0) for name, _, _ in settings}
for batch in batches:
    for name, extra, floor in settings:
        gmres_module.FLOOR_CYCLES = floor
        model.rnn.backward_options = {**base, **extra}
        row = batch_costs(model, batch, "token")
        for key in keys:
            sums[name][key] += row[key]
label = fixture.split("/")[-1].removesuffix(".pt")
for name, _, _ in settings:
    s = sums[name]
    sys.stdout.write(f"{label} n={n} {name:15s} adjoint its {s['adjoint_mean'] / count:5.1f} adjoint s "
                     f"{s['adjoint_s'] / count:.3f} batch s {s['total_s'] / count:.3f} to float64 "
                     f"{int(s['adjoint_fallback'])} at limit {int(s['adjoint_limit'])}\n")
