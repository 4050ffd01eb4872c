"""Solver options on the trained walks fixture, forward and backward as the trainer runs them.

    [FIXTURE=tests/fixtures/<fixture>.pt] python options.py N BATCHES OPTIONS_JSON...

For each JSON object of layer options (``backward_*`` ones go to the backward), the same
BATCHES fresh b = 0.5 training batches of 20 walks of N steps (seed 1) through the whole model
with its token loss (``inn.experiment.breakdown.batch_costs``), one CPU thread, process time:
mean forward and adjoint iterations, solves at their limit, sequences the float64 fallbacks
solved again (forward / adjoint) and the homotopy solved, and the seconds of the forward solve,
the adjoint and the whole batch. E.g.

    python options.py 40 30 '{"compact": false, "backward_fallback": null}' '{}'
"""

import json
import os
import sys

import torch

from inn.experiment.breakdown import batch_costs, fixture_batches
from inn.nn.implicit_function import BACKWARD_OPTIONS, check_backward_options
from inn.solvers import check_options

torch.set_num_threads(1)
fixture = os.environ.get("FIXTURE", "tests/fixtures/walks_b05_inn_epoch5.pt")  # the epoch-5 one by default
n, count = int(sys.argv[1]), int(sys.argv[2])
model, meta, batches = fixture_batches(fixture, n, count)
forward, backward = dict(model.rnn.options), dict(model.rnn.backward_options)
batch_costs(model, batches[0], "token")  # warm-up
for arg in sys.argv[3:]:
    extra = json.loads(arg)
    model.rnn.options = {**forward, **{k: v for k, v in extra.items() if k not in BACKWARD_OPTIONS}}
    model.rnn.backward_options = {**backward, **{k: v for k, v in extra.items() if k in BACKWARD_OPTIONS}}
    check_options(model.rnn.solver, model.rnn.options)  # an option the layer does not take: refused, not ignored
    check_backward_options(model.rnn.backward_options)
    rows = [batch_costs(model, batch, "token") for batch in batches]

    def mean(key: str) -> float:
        return sum(row[key] for row in rows) / len(rows)

    def total(key: str) -> int:
        return sum(row[key] for row in rows)

    sys.stdout.write(f"n={n} {arg:55s} forward its {mean('forward_mean'):5.1f} adjoint its {mean('adjoint_mean'):5.1f} "
                     f"at limit {total('forward_limit')} / {total('adjoint_limit')} to float64 {total('forward_fallback')} / "
                     f"{total('adjoint_fallback')} homotopy {total('forward_homotopy')} "
                     f"forward s {mean('solve_s'):.3f} adjoint s {mean('adjoint_s'):.3f} total s {mean('total_s'):.3f}\n")
