"""Where a training batch's time goes on the trained walks fixture, and what the matrix products
alone would cost: the floor of any implementation of the same iterations.

    python time_split.py FIXTURE N BATCHES

BATCHES fresh b = 0.5 training batches of 20 walks of N steps (seed 1) through the whole model
with its token loss, forward and backward as the trainer runs them (``batch_costs``, the
layer's default options), one CPU thread, process time. Three passes over the same batches:

1. unprofiled: the batch's seconds, forward and adjoint iterations, and a BiLSTM of the same k
   forward and backward on the same encoder outputs (fresh weights, a linear loss; the least
   of three runs);
2. profiled (``torch.profiler``, which slows the many small operations most): the self time of
   the matrix products (``mm``, ``addmm``, ``bmm``) and of everything else, and the inclusive
   time of the solver's parts: the cell's F and its J^T products, the tridiagonal solves of
   the preconditioner, Anderson's own bookkeeping;
3. the floor: the matrix products' self time per batch against the unprofiled batch and the
   BiLSTM. A matrix product is one large call the profiler hardly slows, so that time is what
   the same iterations would cost with every elementwise operation, solve and Python line free.
"""

import re
import sys
import time
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

from inn.experiment.benchmark import _baseline_closures
from inn.experiment.breakdown import batch_costs, fixture_batches

torch.set_num_threads(1)
fixture, n, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
model, meta, batches = fixture_batches(fixture, n, count)
batch_costs(model, batches[0], "token")  # warm-up

rows = [batch_costs(model, batch, "token") for batch in batches]
lstm = []
for batch in batches:
    with torch.no_grad():
        xi = model.encoder(batch)
    step = _baseline_closures("lstm", model.rnn.state_size, xi, torch.device("cpu"), torch.float32)[1]
    step()
    times = []
    for _ in range(3):  # a BiLSTM batch takes milliseconds: the least of three
        start = time.process_time()
        step()
        times.append(time.process_time() - start)
    lstm.append(min(times))

MATMUL = {"aten::mm", "aten::addmm", "aten::bmm"}
PARTS = {  # a solver part: the Python functions whose inclusive time it is (file, function)
    "cell F (transition)": [("implicit_gru.py", "transition")],
    "cell J^T products (_sources)": [("implicit_gru.py", "_sources")],
    "cell J products (jvp)": [("implicit_gru.py", "jvp")],
    "tridiagonal solves": [("tridiagonal.py", "__init__"), ("tridiagonal.py", "solve")],
    "Anderson's bookkeeping (observe, advance)": [("anderson.py", "observe"), ("anderson.py", "advance")],
    "forward solve": [("anderson.py", "anderson")],
    "adjoint solve": [("__init__.py", "_adjoint_anderson")],
}
with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
    for batch in batches:
        batch_costs(model, batch, "token")
matmul = other = 0.0
parts = defaultdict(float)
for event in prof.key_averages():
    if event.key.startswith("aten::"):
        if event.key in MATMUL:
            matmul += event.self_cpu_time_total
        else:
            other += event.self_cpu_time_total
    match = re.match(r"(?:.*/)?inn/(?:[a-z_]+/)*([a-z_0-9]+\.py)\(\d+\): (\w+)$", event.key)
    if match:
        for part, functions in PARTS.items():
            if (match.group(1), match.group(2)) in functions:
                parts[part] += event.cpu_time_total
profiled = sum(e.self_cpu_time_total for e in prof.key_averages())


def ms(us: float) -> str:
    return f"{us / 1e3 / count:8.1f} ms"


batch_s = sum(r["total_s"] for r in rows) / count
lstm_s = sum(lstm) / count
out = sys.stdout.write
out(f"{fixture}, n = {n}, {count} batches of 20: forward its {sum(r['forward_mean'] for r in rows) / count:.1f}, "
    f"adjoint its {sum(r['adjoint_mean'] for r in rows) / count:.1f}\n")
out(f"unprofiled: batch {batch_s * 1e3:8.1f} ms, BiLSTM {lstm_s * 1e3:6.1f} ms, x BiLSTM {batch_s / lstm_s:5.1f}\n")
out(f"profiled:   batch {ms(profiled)}; self time of matrix products {ms(matmul)}, of every other operation "
    f"{ms(other)}\n")
for part, us in parts.items():
    out(f"  {part:44s} {ms(us)} ({100 * us / profiled:4.1f}% of the profiled batch)\n")
out(f"floor: the matrix products alone are {100 * matmul / 1e6 / count / batch_s:4.1f}% of the unprofiled batch, "
    f"{matmul / 1e6 / count / lstm_s:4.1f}x the BiLSTM's forward and backward\n")
