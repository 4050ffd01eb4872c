"""The trained walks fixture on a GPU, eager and through CUDA graphs: what remains of the
launch-bound cost (kernel launches, host syncs, kernel time against wall time).

    python gpu_profile.py FIXTURE N BATCHES [DEVICE]

BATCHES fresh b = 0.5 training batches of 20 walks of N steps (seed 1) through the whole model
with its token loss, forward and backward as the trainer runs them (``batch_costs``), once with
the layer's eager Anderson solves and once with ``cuda_graph: True`` (forward and adjoint), the
same batches, after a warm-up pass that captures the graphs; then both again with the GMRES
adjoint (``backward_solver: gmres``, eager), which halves the adjoint's iterations on trained
systems. Per mode: wall ms per batch, forward
and adjoint iterations, and from ``torch.profiler`` per batch the kernel launches
(``cudaLaunchKernel`` and its kin), graph launches (``cudaGraphLaunch``), host syncs
(``cudaStreamSynchronize``, ``cudaDeviceSynchronize``, ``cudaMemcpy*`` to the host), and the
GPU's busy time (the kernels' summed device time) as a share of the wall time. Beside them a
BiLSTM and a BiGRU of the same k, forward and backward on the same encoder outputs. DEVICE
defaults to cuda; ``cpu`` runs the same code without the CUDA columns (a check of the script).
"""

import sys
import time
from collections import Counter

import torch
from torch.profiler import ProfilerActivity, profile

from inn.experiment.benchmark import _baseline_closures
from inn.experiment.breakdown import batch_costs, fixture_batches
from inn.experiment.timing import synchronize

fixture, n, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
device = torch.device(sys.argv[4] if len(sys.argv) > 4 else "cuda")
if device.type == "cpu":
    torch.set_num_threads(1)  # the check on a shared CPU: one thread, as every CPU figure here
torch.manual_seed(1)
model, meta, batches = fixture_batches(fixture, n, count, device)
forward, backward = dict(model.rnn.options), dict(model.rnn.backward_options)
LAUNCH = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx")
SYNC = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")
out = sys.stdout.write
gmres = {"backward_solver": "gmres"}  # the GMRES adjoint (eager: it is not captured)
modes = {"eager": ({}, {}), "graphed": ({"cuda_graph": True}, {}), "gmres": ({}, gmres),
         "graphed+gmres": ({"cuda_graph": True}, gmres)}  # graphed forward, GMRES adjoint
if device.type != "cuda":
    modes = {name: mode for name, mode in modes.items() if "graphed" not in name}

for mode, (extra, backward_extra) in modes.items():
    model.rnn.options = {**forward, **extra}
    model.rnn.backward_options = {**backward, **backward_extra}
    for batch in batches:  # warm-up: allocator, kernels, and every graph captured once
        batch_costs(model, batch, "token", "wall")
    synchronize(device)
    start = time.perf_counter()
    rows = [batch_costs(model, batch, "token", "wall") for batch in batches]
    synchronize(device)
    wall = (time.perf_counter() - start) / count
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        for batch in batches:
            batch_costs(model, batch, "token", "wall")
        synchronize(device)
    calls, device_us = Counter(), 0.0
    for event in prof.key_averages():
        name = event.key
        if name in LAUNCH:
            calls["launch"] += event.count
        elif name == "cudaGraphLaunch":
            calls["graph"] += event.count
        elif name in SYNC or (name.startswith("cudaMemcpy") and "Async" not in name):
            calls["sync"] += event.count
        elif name == "cudaMemcpyAsync":
            calls["memcpy_async"] += event.count
        device_us += getattr(event, "self_device_time_total", 0.0) if not name.startswith("cuda") else 0.0
    fwd = sum(r["forward_mean"] for r in rows) / count
    adj = sum(r["adjoint_mean"] for r in rows) / count
    out(f"{fixture} n = {n} {mode:13s} wall {wall * 1e3:7.1f} ms/batch, forward its {fwd:.1f}, adjoint its {adj:.1f}; "
        f"per batch: kernel launches {calls['launch'] / count:.0f}, graph launches {calls['graph'] / count:.0f}, "
        f"host syncs {calls['sync'] / count:.0f} (+{calls['memcpy_async'] / count:.0f} async copies), "
        f"GPU busy {device_us / 1e3 / count:.1f} ms ({100 * device_us / 1e6 / count / wall:.0f}% of wall)\n")

for kind in ("lstm", "gru"):
    spent = []
    for batch in batches:
        with torch.no_grad():
            xi = model.encoder(batch)
        step = _baseline_closures(kind, model.rnn.state_size, xi, device, torch.float32)[1]
        step()
        synchronize(device)
        times = []
        for _ in range(3):
            start = time.perf_counter()
            step()
            synchronize(device)
            times.append(time.perf_counter() - start)
        spent.append(min(times))
    out(f"{fixture} n = {n} Bi{kind.upper():4s}  wall {sum(spent) / count * 1e3:7.1f} ms/batch (forward and backward)\n")
