"""Training walks the epoch-12 fixture's forward leaves above tol, solved every way there is.

    python stalled_walks.py WALKS_B0.5_FOLDER WALK [WALK ...]

The walks (indices into the workflow's ``results/data/walks/b0.5/train.pt``) through
``tests/fixtures/walks_b05_inn_seed3_epoch12.pt``'s layer as training solves them (float32,
the defaults, Anderson memory 5 and 8), then on the system's float64 copy: Anderson with
memory 5 and 8 and up to 2,000 steps from each candidate, and Newton with exact
block-tridiagonal steps (``newton_direct``). Printed per solve: iterations, result codes and
residuals per walk, CPU seconds. ``forward_sweep.py`` found the walks (``forward_sweep_epoch12.txt``).
"""

import copy
import sys
import time
import warnings

import torch

from inn.batches import collate
from inn.checkpoints import load_checkpoint
from inn.data.walk import load_walks
from inn.solvers import ConvergenceWarning, ResultCode, solve

warnings.simplefilter("ignore", ConvergenceWarning)
torch.set_num_threads(1)
model, _ = load_checkpoint("tests/fixtures/walks_b05_inn_seed3_epoch12.pt")
model.eval()
walks = load_walks(f"{sys.argv[1]}/train.pt")
rows = [int(w) for w in sys.argv[2:]]
batch = collate([{"x": walks["x"][j, :walks["lengths"][j]], "y": walks["y"][j, :walks["lengths"][j]]} for j in rows])
layer = model.rnn


def show(label: str, stats, seconds: float) -> None:
    codes = [ResultCode(int(c)).name for c in stats.code]
    residuals = [f"{float(r):.1e}" for r in stats.residual]
    sys.stdout.write(f"{label}: iterations {stats.newton_iterations.tolist()} {codes} residuals {residuals}, "
                     f"{seconds:.2f} CPU s\n")


with torch.no_grad():
    xi = model.encoder(batch)
    for memory in (5, 8):
        layer.options = {**layer.options, "memory": memory}
        start = time.process_time()
        layer(xi, batch["mask"])
        show(f"float32, as in training, memory {memory}", layer.last_stats, time.process_time() - start)
    system = copy.deepcopy(layer).double().system(xi.double(), batch["mask"])
    for method, options in [("anderson", {"memory": 5, "max_iter": 2000}), ("anderson", {"memory": 8, "max_iter": 2000}),
                            ("newton_direct", {"max_iter": 50})]:
        start = time.process_time()
        _, stats = solve(system, method, tol=1e-4, **options)
        show(f"float64 {method} {options}", stats, time.process_time() - start)
