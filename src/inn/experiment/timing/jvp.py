"""``inn benchmark --jvp-only``: the cost of the products the solvers are built of, at one
solution: F, the analytic linearisation and its J V and J^T V, a red-black sweep, and the two
autograd ways of forming J V (``torch.func.jvp`` and the double-backward trick) that the tests
keep as references.
"""

from __future__ import annotations

import argparse

import torch

from inn.experiment.timing.benchmark_layers import benchmarked_model, build_layer, layer_config
from inn.experiment.timing.closures import time_interleaved
from inn.models import MODELS


def jvp_variants(args: argparse.Namespace) -> list[dict]:
    """Time the three ways of forming J V at a solution: the analytic linearisation (what the
    solvers use), ``torch.func.jvp`` and the double-backward trick (both kept as test
    references). The analytic one pays its setup (``linearize``) once per Newton step. On
    ``--model``'s layer."""
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    model = benchmarked_model(args.model)
    cell = MODELS[model].cell.removeprefix("implicit_")
    out = []
    for k in args.hidden:
        layer = build_layer(layer_config(model, k, k), k).to(device=device, dtype=dtype)
        gen = torch.Generator().manual_seed(args.seed)
        n = 40 if 40 in args.lengths else args.lengths[len(args.lengths) // 2]
        xi = torch.randn(args.batch, n, k, generator=gen).to(device=device, dtype=dtype)
        mask = torch.ones(args.batch, n, dtype=torch.bool, device=device)
        system = layer.system(xi, mask)
        with torch.no_grad():
            H = system.F(system.F(torch.zeros(system.shape, device=device, dtype=dtype)))
            lin = system.linearize(H)
        V = torch.randn(system.shape, generator=gen).to(device=device, dtype=dtype)

        def double_backward():
            Hg = H.detach().requires_grad_(True)
            FH = system.F(Hg)
            W = torch.zeros_like(FH, requires_grad=True)
            (g,) = torch.autograd.grad(FH, Hg, W, create_graph=True)
            return torch.autograd.grad(g, W, V)[0]

        fns = {
            "F": lambda: system.F(H),
            "linearize": lambda: system.linearize(H),
            "analytic_jvp": lambda: lin.jvp(V),
            "analytic_vjp": lambda: lin.vjp(V),
            "red_black_sweep": lambda: system.sweep(H),
            "torch_func_jvp": lambda: torch.func.jvp(system.F, (H,), (V,)),
            "double_backward_jvp": double_backward,
        }
        with torch.no_grad():
            times = time_interleaved(
                {name: fns[name] for name in fns if name != "double_backward_jvp"}, args.repeats, device, args.clock
            )
        times.update(time_interleaved({"double_backward_jvp": double_backward}, args.repeats, device, args.clock))
        for name, seconds in times.items():
            out.append({"cell": cell, "hidden": k, "n": n, "batch": args.batch, "operation": name, "seconds": seconds})
    return out


def jvp_lines(variants: list[dict]) -> list[str]:
    """The printed lines of :func:`jvp_variants`' measurements, one per operation."""
    return [
        f"{v['cell']:<4} k={v['hidden']:>4} n={v['n']:>3} B={v['batch']:>3} {v['operation']:<20} "
        f"{v['seconds'] * 1e3:8.2f} ms"
        for v in variants
    ]
