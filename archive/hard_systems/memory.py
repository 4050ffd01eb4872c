"""Anderson's memory, forward and adjoint, on the trained walks fixtures.

    python memory.py FIXTURE N BATCHES ROUNDS FORWARD:ADJOINT...

The same BATCHES fresh b = 0.5 training batches of 20 walks of N steps (seed 1) through the
whole model with its token loss (``inn.experiment.breakdown.batch_costs``), the layer's other
defaults, one CPU thread, process time, for each pair of memories (the forward's is the
``memory`` option; the adjoint's is fixed in ``inn.solvers._adjoint_anderson`` and set here
for the measurement). The pairs run in turn, ROUNDS times over, so that no pair is always the
first; printed: each pair's last round (iterations are the same in every round). E.g.

    python memory.py tests/fixtures/walks_b05_inn_seed3_epoch12.pt 40 20 2 5:5 8:5 8:8
"""

import functools
import sys
import warnings

import torch

import inn.solvers as solvers
from inn.experiment.breakdown import batch_costs, fixture_batches
from inn.solvers import ConvergenceWarning

warnings.simplefilter("ignore", ConvergenceWarning)
torch.set_num_threads(1)
path, n, count, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
model, meta, batches = fixture_batches(path, n, count)
forward, adjoint = dict(model.rnn.options), solvers.ADJOINT_SOLVERS["anderson"]
batch_costs(model, batches[0], "token")  # warm-up
lines = {}
for _ in range(rounds):
    for pair in sys.argv[5:]:
        fm, am = (int(m) for m in pair.split(":"))
        model.rnn.options = {**forward, "memory": fm}
        solvers.ADJOINT_SOLVERS["anderson"] = functools.partial(adjoint, memory=am)
        rows = [batch_costs(model, batch, "token") for batch in batches]

        def mean(key: str) -> float:
            return sum(row[key] for row in rows) / len(rows)

        lines[pair] = (f"{path.rsplit('/', 1)[-1]} n={n} memory {fm:2d} / {am:2d}: forward its "
                       f"{mean('forward_mean'):5.1f} adjoint its {mean('adjoint_mean'):5.1f} at limit "
                       f"{sum(r['forward_limit'] for r in rows)} / {sum(r['adjoint_limit'] for r in rows)} to float64 "
                       f"{sum(r['adjoint_fallback'] for r in rows)} forward s {mean('solve_s'):.3f} adjoint s "
                       f"{mean('adjoint_s'):.3f} total s {mean('total_s'):.3f}")
solvers.ADJOINT_SOLVERS["anderson"] = adjoint
sys.stdout.write("".join(line + "\n" for line in lines.values()))
