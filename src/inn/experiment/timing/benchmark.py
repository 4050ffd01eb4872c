"""``inn benchmark``: time the implicit layer's solvers against bidirectional GRU/LSTM.

The layer is that of any implicit model of the registry (``--model``, default the INN; a cell
of one's own registered by ``--import MODULE`` or the config's ``imports`` included), built
as training builds it (:mod:`inn.experiment.timing.benchmark_layers`). For a batch of B sequences of
length n and hidden width k, every method's forward time (under ``torch.no_grad()``) and
forward+backward time (a linear loss on all outputs) are measured in the same run, with the
solver's iteration counts and residuals. Weight sets:

- ``init``: a freshly initialised layer;
- ``harder<c>``: the same with every recurrent matrix (:data:`RECURRENT`: the GRU's U_p,
  U_n, U_z, U_r, U; the LSTM's U_p, U_n and gate matrices; a cell of one's own: all its
  matrices) scaled by one factor, found by bisection, so that dF/dH at the solution has
  spectral radius c (``--harder``, default 0.84). Training grows the recurrent weights; real
  systems are harder than fresh ones, and this radius is the contraction factor of plain
  iteration;
- ``checkpoint``: the layer's weights from a trained checkpoint (``--checkpoint PATH``), when
  given: a whole checkpoint is read through the model config it stores (``--model`` is then
  its model), a plain state_dict as ``--model``'s layer (``--prefix PREFIX``). With ``--data``
  (the prepared data folder the model was trained on; the checkpoint must then be a whole
  implicit model) its inputs are what the layer sees in use, the trained encoder's output on
  windows of real dev tokens (or fresh walks), instead of Gaussian noise.

The baselines are timed with each weight set's inputs and their own fresh weights (seeded by
``--seed``). Each implicit row's ratio is to the bidirectional baseline of its cell (BiGRU
for the implicit GRU and for a cell of one's own, BiLSTM for the implicit LSTM). Per
(weights, k, method) it fits t = a * n^p by least squares in log-log space, with r^2,
prints a table and writes one CSV row per measurement (atomically). Times are the minimum
over ``--repeats`` interleaved rounds after one warm-up round: on a shared machine the
minimum is the least disturbed figure.
"""

from __future__ import annotations

import argparse
import copy
import io
import logging
import math
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd
import torch
from torch import nn

from inn.device import machine_load, resolve_device, set_threads
from inn.errors import InnError, at_least, positive_float, positive_int
from inn.experiment.timing.benchmark_layers import (
    METHODS,
    benchmarked_model,
    build_layer,
    layer_config,
    load_layer_weights,
)
from inn.experiment.timing.fits import fit_power_law, fitted_lengths, synchronize
from inn.experiment.timing.peers import MISSING_NOTE, PEERS, available, peer_summary
from inn.models import MODELS, bidirectional_baselines, model_with_role
from inn.solvers import ConvergenceWarning
from inn.tables import write_tsv

log = logging.getLogger(__name__)

#: methods that only mean something on a CUDA device (skipped elsewhere, with a note)
CUDA_ONLY = ("anderson_graph",)
BASELINES = ("gru", "lstm")


@dataclass
class Row:
    """One measurement (one CSV row)."""

    weights: str
    method: str
    hidden: int
    n: int
    batch: int
    device: str
    dtype: str
    cell: str = ""  #: the implicit cell ("gru", "lstm", one's own); empty for baselines and peers' own rows
    threads: int = 0
    clock: str = "wall"
    repeats: int = 0  #: timed rounds (1: timed once, too slow to repeat)
    load: float = float("nan")  #: the machine's one-minute load average after the rounds
    forward_s: float = float("nan")
    forward_backward_s: float = float("nan")
    newton_mean: float = float("nan")
    krylov_mean: float = float("nan")
    function_evals: float = float("nan")
    residual_max: float = float("nan")
    failed: int = 0
    backward_iterations: float = float("nan")
    backward_residual_max: float = float("nan")
    grad_cosine: float = float("nan")  #: of the parameters' gradient with the exact one (tight adjoint)
    grad_error: float = float("nan")  #: ||g - g_exact|| / ||g_exact||, the same gradients
    note: str = ""


def _time_interleaved(
    fns: dict[str, Callable[[], object]], repeats: int, device: torch.device, clock: str = "wall"
) -> dict[str, float]:
    """Minimum time of each function over ``repeats`` rounds, after one warm-up round.

    The functions take turns within each round, so a burst of load from other processes on a
    shared machine hits all of them alike, and the minimum is the least disturbed figure.
    ``clock="process"`` measures this process's CPU time instead of wall time: with one
    thread (``--threads 1``) it is the compute time, nearly immune to other processes.
    """
    now = time.process_time if clock == "process" else time.perf_counter
    best = {name: math.inf for name in fns}
    for round_ in range(repeats + 1):
        for name, fn in fns.items():
            synchronize(device)
            start = now()
            fn()
            synchronize(device)
            if round_:
                best[name] = min(best[name], now() - start)
    return best


def jacobian_radius(layer, xi: torch.Tensor, mask: torch.Tensor, iterations: int = 60) -> float:
    """Spectral radius of dF/dH at the solution (the hardest sequence of the batch), by power
    iteration with analytic J V products. It is the asymptotic contraction factor of plain
    fixed-point iteration: the number "trained-like" systems (``--harder``) are described by."""
    from inn.solvers import solve

    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        system = layer.system(xi, mask)
        H, stats = solve(system, "anderson", tol=1e-5, max_iter=300, candidates=("F0",))
        if not bool(stats.converged.all()):
            return math.inf  # too hard to even solve: certainly past any target radius
        lin = system.linearize(H)
        v = torch.randn(H.shape, generator=torch.Generator().manual_seed(1), dtype=H.dtype).to(H.device)
        v = v * system.maskf
        v = v / v.norm()
        logs = []
        for i in range(iterations):
            w = lin.jvp(v)
            norm = w.norm()
            if not torch.isfinite(norm) or norm == 0:
                return float(norm)
            if i >= iterations // 2:
                logs.append(math.log(float(norm)))
            v = w / norm
    return math.exp(sum(logs) / len(logs))


#: the recurrent matrices of the implicit GRU and LSTM, what ``harder`` weight sets scale (of
#: a layer with none of them, a cell of one's own: all its matrices)
RECURRENT = ("weight_pn", "weight_zr", "weight_c", "weight_gates")


def make_harder(layer, xi: torch.Tensor, mask: torch.Tensor, contraction: float, steps: int = 10) -> float:
    """Scale the recurrent matrices (:data:`RECURRENT`, all by one factor) until dF/dH at
    the solution has spectral radius ``contraction`` (bisection in log space); returns the
    factor used."""
    params = dict(layer.named_parameters())
    base = {name: p.detach().clone() for name, p in params.items() if name in RECURRENT}
    base = base or {name: p.detach().clone() for name, p in params.items() if p.dim() >= 2}

    def apply(factor: float) -> float:
        with torch.no_grad():
            for name, value in base.items():
                params[name].copy_(value * factor)
        return jacobian_radius(layer, xi, mask)

    lo, hi = 0.5, 8.0
    for _ in range(steps):
        mid = math.sqrt(lo * hi)
        rho = apply(mid)
        if math.isfinite(rho) and rho < contraction:
            lo = mid
        else:
            hi = mid
    rho = apply(lo)
    log.info(
        "harder weights: recurrent matrices x %.3f -> spectral radius of dF/dH %.3f (target %.3f)", lo, rho, contraction
    )
    return lo


def _implicit_closures(layer, xi, mask, target) -> tuple[Callable[[], object], Callable[[], object]]:
    def forward():
        with torch.no_grad():
            layer(xi, mask)

    def forward_backward():
        layer.zero_grad(set_to_none=True)
        x = xi.detach().requires_grad_(True)
        (layer(x, mask) * target).sum().backward()

    return forward, forward_backward


def _baseline_closures(kind, k, xi, device, dtype) -> tuple[Callable[[], object], Callable[[], object]]:
    cls = nn.GRU if kind == "gru" else nn.LSTM
    rnn = cls(xi.shape[-1], k, batch_first=True, bidirectional=True).to(device=device, dtype=dtype)
    proj = torch.randn(2 * k, generator=torch.Generator().manual_seed(2)).to(device=device, dtype=dtype)

    def forward():
        with torch.no_grad():
            rnn(xi)

    def forward_backward():
        rnn.zero_grad(set_to_none=True)
        x = xi.detach().requires_grad_(True)
        (rnn(x)[0] * proj).sum().backward()

    return forward, forward_backward


def _parameter_gradient(layer) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in layer.parameters() if p.grad is not None]).double()


def _exact_gradient(base, xi, mask, target, tol: float) -> torch.Tensor:
    """The parameters' gradient of the benchmark's loss with forward and adjoint solved 100x
    tighter than the benchmark's tol (the reference of the grad_* columns)."""
    layer = copy.deepcopy(base)
    layer.solver, layer.options = "anderson", {"tol": tol / 100, "max_iter": 1000}
    layer.backward_options = {"backward_solver": "anderson", "backward_low_precision": False, "backward_max_iter": 1000}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        _implicit_closures(layer, xi, mask, target)[1]()
    return _parameter_gradient(layer)


def _solver_figures(layer, xi, mask, target, device, clock: str, exact: torch.Tensor | None = None) -> dict:
    """Iterations and residuals of one forward and one forward+backward, and their times;
    with ``exact``, the parameters' gradient's cosine and relative error against it."""
    now = time.process_time if clock == "process" else time.perf_counter
    out: dict = {}
    forward, forward_backward = _implicit_closures(layer, xi, mask, target)
    synchronize(device)
    start = now()
    forward()
    synchronize(device)
    out["forward_s"] = now() - start
    st = layer.last_stats.summary()
    out.update(
        newton_mean=st["iterations_mean"],
        krylov_mean=st["krylov_mean"],
        function_evals=st["function_evals"],
        residual_max=st["residual_max"],
        failed=st["failed"],
    )
    start = now()
    forward_backward()
    synchronize(device)
    out["forward_backward_s"] = now() - start
    bst = layer.last_backward_stats
    if bst is not None:
        its = bst.krylov_iterations if bst.krylov_iterations.any() else bst.newton_iterations
        out["backward_iterations"] = float(its.float().mean())
        out["backward_residual_max"] = float(bst.residual.max())
        out["failed"] += bst.num_failed
    if exact is not None:
        got = _parameter_gradient(layer)
        out["grad_cosine"] = float(torch.nn.functional.cosine_similarity(got, exact, dim=0))
        out["grad_error"] = float((got - exact).norm() / exact.norm())
    return out


def _trained(args: argparse.Namespace, device: torch.device) -> tuple[tuple | None, Callable | None]:
    """The checkpoint's layer ``(config, input size, state_dict)`` (None without one) and,
    with ``--data``, the maker of real inputs for it (its encoder's output on real tokens)."""
    if args.data and not args.checkpoint:
        raise InnError("--data needs --checkpoint, the trained model whose encoder makes the inputs")
    if not args.checkpoint:
        return None, None
    real_inputs = None
    if args.data:
        from inn.checkpoints import load_checkpoint
        from inn.experiment.timing.fits import realistic_inputs

        model, meta = load_checkpoint(args.checkpoint, device=device)
        if not getattr(getattr(model, "config", None), "implicit", False):
            raise InnError(
                f"{args.checkpoint} is not an implicit model's checkpoint: --data needs a whole trained implicit model"
            )
        real_inputs = realistic_inputs(model, meta, args.data, args.batch, device, args.seed)
    return load_layer_weights(args.checkpoint, args.prefix, args.model), real_inputs


def run(args: argparse.Namespace) -> list[Row]:
    """All measurements of one benchmark invocation."""
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    if args.threads:  # main() has set the default
        torch.set_num_threads(args.threads)
    unknown = [m for m in args.methods if m not in METHODS]
    if unknown:
        raise InnError(f"unknown method(s) {unknown}; choose from {', '.join(METHODS)}")
    trained, real_inputs = _trained(args, device)
    model = trained[0].kind if trained else benchmarked_model(args.model)
    cell = MODELS[model].cell.removeprefix("implicit_")  # the rows' cell: "gru", "lstm", one's own
    weight_sets: list[tuple[str, int, object]] = [("init", k, None) for k in args.hidden]
    for contraction in args.harder:
        weight_sets += [(f"harder{contraction:g}", k, contraction) for k in args.hidden]
    if trained:
        weight_sets.append(("checkpoint", trained[0].hidden_size, None))
    rows: list[Row] = []
    for weights, k, contraction in weight_sets:
        gen = torch.Generator().manual_seed(args.seed)
        torch.manual_seed(args.seed)
        cfg, input_size = trained[:2] if weights == "checkpoint" else (layer_config(model, k, k), k)
        base = build_layer(cfg, input_size, options={"tol": args.tol})
        if weights == "checkpoint":
            base.load_state_dict(trained[2])
        base.to(device=device, dtype=dtype)
        if contraction is not None:
            calib_x = torch.randn(args.batch, 40, input_size, generator=gen).to(device=device, dtype=dtype)
            calib_mask = torch.ones(args.batch, 40, dtype=torch.bool, device=device)
            make_harder(base, calib_x, calib_mask, contraction)
        slow: set[str] = set()
        for n in args.lengths:
            xi = torch.randn(args.batch, n, input_size, generator=gen).to(device=device, dtype=dtype)
            mask = torch.ones(args.batch, n, dtype=torch.bool, device=device)
            if real_inputs is not None and weights == "checkpoint":
                xi = real_inputs(n)[0].to(dtype)  # windows of n real tokens: every position real
            target = torch.randn(args.batch, n, base.output_size, generator=gen).to(device=device, dtype=dtype)
            common = dict(
                weights=weights,
                hidden=k,
                n=n,
                batch=args.batch,
                device=str(device),
                dtype=args.dtype,
                threads=torch.get_num_threads(),
                clock=args.clock,
                repeats=args.repeats,
            )
            closures: dict[str, Callable[[], object]] = {}
            row_of: dict[str, Row] = {}
            exact = _exact_gradient(base, xi, mask, target, args.tol)
            for method in args.methods:
                row = row_of[method] = Row(method=method, cell=cell, **common)
                if method in slow:
                    row.note = "skipped: too slow at a shorter n (--max-seconds)"
                    continue
                if method in CUDA_ONLY and device.type != "cuda":
                    row.note = "skipped: CUDA graphs need a CUDA device"
                    continue
                solver, options = METHODS[method]
                # every method solves the weight set's own layer
                layer = build_layer(cfg, input_size, solver, {**options, "tol": args.tol})
                layer.load_state_dict(base.state_dict())
                layer.to(device=device, dtype=dtype)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", ConvergenceWarning)
                    for key, value in _solver_figures(layer, xi, mask, target, device, args.clock, exact).items():
                        setattr(row, key, value)
                if row.forward_backward_s > args.max_seconds / (args.repeats + 1):
                    # too slow to repeat: keep this one measurement, skip longer n
                    slow.add(method)
                    row.note, row.repeats = "timed once", 1
                    continue
                closures[method + "/fwd"], closures[method + "/fb"] = _implicit_closures(layer, xi, mask, target)
            for peer in args.peers:
                _add_peer(peer, base, xi, mask, target, args, row_of, closures, {**common, "cell": cell}, slow)
            for kind in args.baselines:
                name = bidirectional_baselines()[kind]
                row_of[name] = Row(method=name, **common)
                closures[f"{name}/fwd"], closures[f"{name}/fb"] = _baseline_closures(kind, k, xi, device, dtype)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                times = _time_interleaved(closures, args.repeats, device, args.clock)
            load = machine_load()
            for name, row in row_of.items():
                row.load = load
                if name + "/fwd" in times:
                    row.forward_s = times[name + "/fwd"]
                    row.forward_backward_s = times.get(name + "/fb", float("nan"))
                rows.append(row)
                log.info(
                    "%s k=%d n=%d %s: fwd %.4fs fwd+bwd %.4fs newton %.1f krylov %.1f res %.1e failed %d %s",
                    weights,
                    k,
                    n,
                    name,
                    row.forward_s,
                    row.forward_backward_s,
                    row.newton_mean,
                    row.krylov_mean,
                    row.residual_max,
                    row.failed,
                    row.note,
                )
    return rows


def _add_peer(
    name: str, layer, xi, mask, target, args, row_of: dict, closures: dict, common: dict, slow: set[str]
) -> None:
    """A TorchDEQ row (:mod:`inn.experiment.timing.peers`) on the same layer weights and batch as ours; like
    ours, timed once (its forward; the IFT row's backward is then not timed) and skipped at
    longer n when one run exceeds the --max-seconds share."""
    from inn.experiment.timing.peers import Peer

    row = row_of[name] = Row(method=name, **common)
    if name in slow:
        row.note = "skipped: too slow at a shorter n (--max-seconds)"
        return
    peer = Peer(name, layer, xi, mask, target, args.tol)
    now = time.process_time if args.clock == "process" else time.perf_counter
    start = now()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        for key, value in peer.figures(clock=now).items():
            setattr(row, key, value)
    if now() - start > args.max_seconds / (args.repeats + 1):
        slow.add(name)
        row.note, row.repeats = "timed once", 1
        return
    closures[name + "/fwd"] = peer.forward
    if peer.forward_backward is not None:
        closures[name + "/fb"] = peer.forward_backward


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
            times = _time_interleaved(
                {name: fns[name] for name in fns if name != "double_backward_jvp"}, args.repeats, device, args.clock
            )
        times.update(_time_interleaved({"double_backward_jvp": double_backward}, args.repeats, device, args.clock))
        for name, seconds in times.items():
            out.append({"cell": cell, "hidden": k, "n": n, "batch": args.batch, "operation": name, "seconds": seconds})
    return out


def fits(rows: list[Row]) -> list[dict]:
    """t = a n^p per (weights, hidden, method), for forward and forward+backward times; only
    where at least two lengths were timed (a column with fewer is NaN: TorchDEQ's
    forward-only rows have no forward+backward)."""
    groups: dict[tuple, list[Row]] = {}
    for row in rows:
        groups.setdefault((row.weights, row.hidden, row.method), []).append(row)
    out = []
    for (weights, hidden, method), group in groups.items():
        ns = [r.n for r in group]
        entry = {"weights": weights, "hidden": hidden, "method": method}
        for column in ("forward_s", "forward_backward_s"):
            times = [getattr(r, column) for r in group]
            a, p, r2 = fit_power_law(ns, times)
            # the lengths fitted: a method skipped at long n is fitted on the short ones only
            fitted = [n for n, kept in zip(ns, fitted_lengths(ns, times)) if kept]
            entry.update(
                {
                    f"{column}_a": a,
                    f"{column}_p": p,
                    f"{column}_r2": r2,
                    f"{column}_n": f"{min(fitted)}-{max(fitted)}" if fitted else "",
                }
            )
        if math.isfinite(entry["forward_s_p"]) or math.isfinite(entry["forward_backward_s_p"]):
            out.append(entry)
    return out


def format_table(rows: list[Row], fit_rows: list[dict]) -> str:
    """A plain-text table of the measurements, each implicit row's ratio to the bidirectional
    baseline of its cell (``x bi``: BiLSTM for the implicit LSTM, else the BiGRU, the timing
    reference), and the fits."""
    buf = io.StringIO()
    baselines = bidirectional_baselines()
    ref = {(r.method, r.weights, r.hidden, r.n): r for r in rows if r.method in baselines.values()}
    buf.write(
        f"{'weights':<11} {'k':>4} {'n':>4} {'method':<25} {'cell':>4} {'fwd s':>8} {'fwd+bwd s':>9} {'x bi':>7} "
        f"{'newton':>6} {'krylov':>6} {'F':>5} {'resid':>8} {'fail':>4} {'bwd it':>6} {'grad err':>8} {'cos':>8}\n"
    )
    for r in rows:
        g = ref.get((baselines.get(r.cell, model_with_role("timing_reference")), r.weights, r.hidden, r.n))
        ratio = r.forward_backward_s / g.forward_backward_s if g and g.forward_backward_s > 0 else float("nan")
        buf.write(
            f"{r.weights:<11} {r.hidden:>4} {r.n:>4} {r.method:<25} {r.cell:>4} {r.forward_s:>8.4f} "
            f"{r.forward_backward_s:>9.4f} {ratio:>7.2f} {r.newton_mean:>6.1f} {r.krylov_mean:>6.1f} "
            f"{r.function_evals:>5.0f} {r.residual_max:>8.1e} {r.failed:>4d} {r.backward_iterations:>6.1f} "
            f"{r.grad_error:>8.1e} {r.grad_cosine:>8.5f}"
            f"{'  ' + r.note if r.note else ''}\n"
        )
    if not fit_rows:  # one length: nothing to fit
        return buf.getvalue()
    buf.write("\nfits t = a * n^p (least squares in log-log space)\n")
    buf.write(
        f"{'weights':<11} {'k':>4} {'method':<25} {'fwd a':>9} {'fwd p':>6} {'fwd r2':>6} {'fwd n':>7} "
        f"{'f+b a':>9} {'f+b p':>6} {'f+b r2':>6} {'f+b n':>7}\n"
    )
    for f in fit_rows:
        buf.write(
            f"{f['weights']:<11} {f['hidden']:>4} {f['method']:<25} {f['forward_s_a']:>9.2e} "
            f"{f['forward_s_p']:>6.2f} {f['forward_s_r2']:>6.3f} {f['forward_s_n']:>7} "
            f"{f['forward_backward_s_a']:>9.2e} {f['forward_backward_s_p']:>6.2f} "
            f"{f['forward_backward_s_r2']:>6.3f} {f['forward_backward_s_n']:>7}\n"
        )
    return buf.getvalue()


def write_rows(path: str | Path, rows: list[Row]) -> None:
    """One row per measurement, as TSV (:func:`inn.tables.write_tsv`), written atomically."""
    names = list(asdict(rows[0]).keys()) if rows else [f.name for f in Row.__dataclass_fields__.values()]
    write_tsv(path, pd.DataFrame([asdict(row) for row in rows], columns=names))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="inn benchmark", description=__doc__.split("\n\n")[0])
    parser.add_argument("--hidden", type=positive_int, nargs="+", default=[200, 448], help="hidden sizes k")
    parser.add_argument(
        "--lengths", type=positive_int, nargs="+", default=[10, 20, 40, 80, 160], help="sequence lengths n"
    )
    parser.add_argument("--batch-size", dest="batch", type=positive_int, default=20, help="sequences per batch")
    parser.add_argument(
        "--methods",
        nargs="+",
        default=["paper", "newton_krylov", "anderson", "fixed_point", "newton_direct"],
        help=f"implicit methods: {', '.join(METHODS)}",
    )
    parser.add_argument(
        "--peers",
        nargs="*",
        default=None,
        help="TorchDEQ rows on the same systems (default: all of them when torchdeq is "
        "installed, none without it; --peers alone: none): " + ", ".join(PEERS),
    )
    parser.add_argument("--baselines", nargs="*", default=list(BASELINES), choices=list(BASELINES))
    parser.add_argument("--tol", type=positive_float, default=1e-4, help="relative residual every solve must reach")
    parser.add_argument(
        "--harder",
        type=positive_float,
        nargs="*",
        default=[0.84],
        help="also time trained-like weights: recurrent matrices scaled until dF/dH at the "
        "solution has this spectral radius (0.84 and 0.95 were seen in trained INNs)",
    )
    parser.add_argument(
        "--model",
        help="the implicit model of the registry whose layer is timed (default: the "
        "checkpoint's, else the INN; one's own: with --import MODULE)",
    )
    parser.add_argument(
        "--checkpoint", help="a trained implicit model's checkpoint, or a state_dict of --model's layer"
    )
    parser.add_argument(
        "--prefix",
        default="",
        help="key prefix of the layer inside a state_dict file; without it, the file's one layer of --model",
    )
    parser.add_argument(
        "--data",
        help="with a whole implicit model's checkpoint: its prepared data folder; the trained layer is then "
        "fed its encoder's output on real dev tokens (walks: fresh walks) instead of noise",
    )
    parser.add_argument("--device", default="auto", help="auto (CUDA when present), cpu or cuda")
    parser.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    parser.add_argument("--repeats", type=positive_int, default=5)
    parser.add_argument(
        "--max-seconds",
        type=positive_float,
        default=60.0,
        help="budget per method and (weights, k, n): a method whose forward+backward takes over "
        "max-seconds / (repeats + 1) is timed once and skipped at longer n",
    )
    parser.add_argument(
        "--threads",
        type=positive_int,
        help="torch CPU threads (default: the cores free of other work, at most 4; OMP_NUM_THREADS where set)",
    )
    parser.add_argument(
        "--clock",
        choices=["wall", "process"],
        default="wall",
        help="wall time, or this process's CPU time (CPU only; use with --threads 1 on a "
        "busy machine: it measures work, not the neighbours' load)",
    )
    parser.add_argument("--seed", type=at_least(0), default=1)
    parser.add_argument(
        "--jvp-only",
        action="store_true",
        help="only time F, the analytic J V / J^T V, torch.func.jvp and the double-backward trick",
    )
    parser.add_argument(
        "--breakdown",
        action="store_true",
        help="with --checkpoint of a whole trained implicit model: per training batch (its own loss, "
        "fresh walks or dev windows) the forward and adjoint iterations, limit hits, F evaluations, "
        "Jacobian products and time split into solve / F / adjoint / rest, beside --baselines "
        "(inn.experiment.timing.breakdown)",
    )
    parser.add_argument("--batches", type=positive_int, default=5, help="--breakdown: batches per length")
    parser.add_argument(
        "--fallback",
        choices=["none", "float64", "direct"],
        help="--breakdown: the model's adjoint with this backward_fallback (none: off; default: as "
        "trained, else the layer's float64)",
    )
    parser.add_argument("--out", default="results/benchmark/benchmark.tsv", help="TSV of measurements")
    parser.add_argument("--fits-out", help="TSV of the fits (default: beside --out, *_fits.tsv)")
    return parser


def main(argv: list[str] | None = None) -> None:
    """Entry point of ``inn benchmark``."""
    args = build_parser().parse_args(argv)
    args.device = str(resolve_device(args.device))
    if args.clock == "process" and not args.device.startswith("cpu"):
        raise InnError("--clock process measures CPU time: use it with --device cpu")
    set_threads(args.threads)
    unknown = sorted(set(args.peers or ()) - set(PEERS))
    if unknown:
        raise InnError(f"unknown peer(s) {unknown}; choose from {', '.join(PEERS)}")
    peer_note = ""
    if not available():
        peer_note = MISSING_NOTE if args.peers is None or args.peers else ""
        args.peers = []
    elif args.peers is None:
        args.peers = list(PEERS)
    if args.fits_out and len(set(args.lengths)) < 2:
        raise InnError("--fits-out needs at least two --lengths: the fits are t = a n^p over the lengths")
    if args.breakdown:
        from inn.experiment.timing.breakdown import run_breakdown, summary_table, write_breakdown

        batches = run_breakdown(args, _baseline_closures)
        write_breakdown(args.out, batches)
        log.info("wrote %s", args.out)
        print(summary_table(batches))
        return
    if args.jvp_only:
        variants = jvp_variants(args)
        write_tsv(args.out, pd.DataFrame(variants))
        for v in variants:
            print(
                f"{v['cell']:<4} k={v['hidden']:>4} n={v['n']:>3} B={v['batch']:>3} {v['operation']:<20} "
                f"{v['seconds'] * 1e3:8.2f} ms"
            )
        return
    rows = run(args)
    fit_rows = fits(rows)
    write_rows(args.out, rows)
    if fit_rows:
        fits_out = args.fits_out or str(Path(args.out).with_name(Path(args.out).stem + "_fits.tsv"))
        write_tsv(fits_out, pd.DataFrame(fit_rows))
        log.info("wrote %s and %s", args.out, fits_out)
    else:
        log.info("wrote %s (one length timed: no fits t = a n^p)", args.out)
    print(format_table(rows, fit_rows) + (f"\n{peer_note}\n" if peer_note else peer_summary(rows, list(METHODS))))
    if peer_note:
        log.warning(peer_note)
