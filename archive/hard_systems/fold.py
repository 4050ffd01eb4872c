"""A training walk every local solver stalls on, three ways: continuation in the recurrent
weights, restarts from random points of the box, and the homotopy of ``inn.solvers.homotopy``.

    python fold.py FIXTURE WALKS_B0.5_FOLDER WALK [STARTS]

FIXTURE a walks INN checkpoint (``tests/fixtures/walks_b05_inn_seed3_epoch12.pt``), WALK an
index into the workflow's ``results/data/walks/b0.5/train.pt`` (5,630 for that fixture:
``forward_sweep.py`` found it; ``tests/fixtures/walks_b05_seed3_epoch12_fold.pt`` is its copy).
Everything in float64, one thread, CPU seconds, no fallback but the homotopy's own. Printed: per continuation stage (recurrent
weights scaled by lam, each solve started from the last) Anderson's iterations and residual;
Anderson (memory 5, 600 steps) and ``newton_direct`` (60 steps) from STARTS (12) random points
of the box; the homotopy's path steps, residual, seconds and its solution's distance from
where Anderson stalls from zero. ``fold.txt`` holds a run.
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
from inn.solvers._common import Counter
from inn.solvers.homotopy import homotopy_solve

warnings.simplefilter("ignore", ConvergenceWarning)
torch.set_num_threads(1)
fixture, folder, walk = sys.argv[1], sys.argv[2], int(sys.argv[3])
starts = int(sys.argv[4]) if len(sys.argv) > 4 else 12
model, _ = load_checkpoint(fixture)
model.eval()
walks = load_walks(f"{folder}/train.pt")
n = int(walks["lengths"][walk])
batch = collate([{"x": walks["x"][walk, :n], "y": walks["y"][walk, :n]}])
layer = copy.deepcopy(model.rnn).double()
out = sys.stdout.write

with torch.no_grad():
    xi = model.encoder(batch).double()
    names = ("weight_pn", "weight_zr", "weight_c")
    base = {name: getattr(layer, name).detach().clone() for name in names}

    def scaled(lam: float):
        for name in names:
            getattr(layer, name).copy_(lam * base[name])
        return layer.system(xi, batch["mask"])

    out(f"walk {walk} (n = {n})\ncontinuation in the recurrent weights, Anderson to 1e-10 from the last stage:\n")
    H = None
    for lam in (0, 0.25, 0.5, 0.7, 0.8, 0.85, 0.9, 0.93, 0.95, 0.97, 0.98, 0.99, 0.995, 1.0):
        H, stats = solve(scaled(lam), "anderson", tol=1e-10, max_iter=400, start=H, candidates=["zeros"],
                         fallback=None)
        out(f"  lam {lam}: {int(stats.newton_iterations[0])} iterations, {ResultCode(int(stats.code[0])).name}, "
            f"residual {float(stats.residual[0]):.1e}\n")
    system = scaled(1.0)
    stalled, _ = solve(system, "anderson", tol=1e-4, max_iter=2000, candidates=["zeros"], fallback=None)
    many = system.repeat(starts)
    generator = torch.Generator().manual_seed(0)
    random = (2 * torch.rand(many.shape, generator=generator, dtype=torch.float64) - 1) * many.maskf
    for method, options in (("anderson", {"max_iter": 600, "fallback": None}), ("newton_direct", {"max_iter": 60})):
        start = time.process_time()
        _, stats = solve(many, method, tol=1e-4, start=random, candidates=["zeros"], **options)
        out(f"{method} from {starts} random starts: {int(stats.converged.sum())} converged, residuals "
            f"{float(stats.residual.min()):.1e} - {float(stats.residual.max()):.1e}, "
            f"{time.process_time() - start:.1f} CPU s\n")
    a = 0.5 * (2 * torch.rand(system.shape, generator=generator, dtype=torch.float64) - 1) * system.maskf
    start = time.process_time()
    H, steps, residual, code = homotopy_solve(system, a, Counter(), tol=1e-10)
    out(f"homotopy: {steps} path steps, {ResultCode(code).name}, residual {residual:.1e}, "
        f"{time.process_time() - start:.1f} CPU s; max |h| {float(H.abs().max()):.3f}; "
        f"distance from Anderson's stall {float((H - stalled).norm()):.2f} (|H| {float(H.norm()):.2f})\n")
