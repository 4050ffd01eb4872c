"""``inn benchmark``: time the implicit layer's solvers against bidirectional GRU/LSTM.

The layer is that of any implicit model of the registry (``--model``, default the INN; a cell
of one's own registered by ``--import MODULE`` or the config's ``imports`` included), built
as training builds it (:mod:`inn.experiment.timing.benchmark_layers`). For a batch of B sequences of
length n and hidden width k, every method's forward time (under ``torch.no_grad()``) and
forward+backward time (a linear loss on all outputs) are measured in the same run, with the
solver's iteration counts and residuals. Weight sets:

- ``init``: a freshly initialised layer;
- ``harder<c>``: the same with every recurrent matrix (:data:`~inn.experiment.timing.harder.RECURRENT`: the GRU's U_p,
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

The steps live in modules of their own: :mod:`~inn.experiment.timing.closures` (what is timed
and how), :mod:`~inn.experiment.timing.harder` (the ``harder<c>`` weights),
:mod:`~inn.experiment.timing.rows` (the measurements, fits, table and TSV) and
:mod:`~inn.experiment.timing.jvp` (``--jvp-only``); this module holds the command.
"""

from __future__ import annotations

import argparse
import logging
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch
from torch import nn

from inn.device import add_device_argument, add_threads_argument, machine_load, resolve_device, set_threads
from inn.errors import InnError, at_least, positive_float, positive_int
from inn.experiment.timing.benchmark_layers import (
    METHODS,
    benchmarked_model,
    build_layer,
    layer_config,
    load_layer_weights,
)
from inn.experiment.timing.closures import (
    baseline_closures,
    exact_gradient,
    implicit_closures,
    solver_figures,
    time_interleaved,
)
from inn.experiment.timing.harder import jacobian_radius as jacobian_radius
from inn.experiment.timing.harder import make_harder
from inn.experiment.timing.jvp import jvp_lines, jvp_variants
from inn.experiment.timing.peers import MISSING_NOTE, PEERS, available, peer_summary
from inn.experiment.timing.rows import Row, fits, format_table, write_rows
from inn.models import MODELS, bidirectional_baselines
from inn.solvers import ConvergenceWarning
from inn.tables import write_tsv

log = logging.getLogger(__name__)

#: methods that only mean something on a CUDA device (skipped elsewhere, with a note)
CUDA_ONLY = ("anderson_graph",)
BASELINES = ("gru", "lstm")
SLOW_NOTE = "skipped: too slow at a shorter n (--max-seconds)"


@dataclass
class _WeightSet:
    """One weight set's layer (``init``, ``harder<c>`` or ``checkpoint``), as every method and
    length of it is timed: its width k, config and input size, and the layer itself."""

    name: str
    hidden: int
    config: object
    input_size: int
    layer: nn.Module


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
        base = _weight_set_layer(args, cfg, input_size, trained[2] if weights == "checkpoint" else None)
        if contraction is not None:
            calib_x = torch.randn(args.batch, 40, input_size, generator=gen).to(device=device, dtype=_dtype(args))
            calib_mask = torch.ones(args.batch, 40, dtype=torch.bool, device=device)
            make_harder(base, calib_x, calib_mask, contraction)
        weight_set = _WeightSet(weights, k, cfg, input_size, base)
        slow: set[str] = set()
        for n in args.lengths:
            rows += _time_length(args, weight_set, n, cell, gen, real_inputs if weights == "checkpoint" else None, slow)
    return rows


def _dtype(args: argparse.Namespace) -> torch.dtype:
    """The torch dtype of ``--dtype``."""
    return getattr(torch, args.dtype)


def _weight_set_layer(args: argparse.Namespace, cfg, input_size: int, state: dict | None) -> nn.Module:
    """A weight set's layer at ``--tol`` on the benchmark's device and dtype: fresh (seeded by
    the caller), or with the checkpoint's ``state``."""
    base = build_layer(cfg, input_size, options={"tol": args.tol})
    if state is not None:
        base.load_state_dict(state)
    return base.to(device=torch.device(args.device), dtype=_dtype(args))


def _time_length(
    args: argparse.Namespace,
    weight_set: _WeightSet,
    n: int,
    cell: str,
    gen: torch.Generator,
    real_inputs: Callable | None,
    slow: set[str],
) -> list[Row]:
    """The rows of one weight set at length n: every method, peer and baseline on one batch,
    timed in interleaved rounds. A method too slow to repeat joins ``slow``."""
    device, dtype = torch.device(args.device), _dtype(args)
    xi = torch.randn(args.batch, n, weight_set.input_size, generator=gen).to(device=device, dtype=dtype)
    mask = torch.ones(args.batch, n, dtype=torch.bool, device=device)
    if real_inputs is not None:
        xi = real_inputs(n)[0].to(dtype)  # windows of n real tokens: every position real
    base = weight_set.layer
    target = torch.randn(args.batch, n, base.output_size, generator=gen).to(device=device, dtype=dtype)
    common = dict(
        weights=weight_set.name,
        hidden=weight_set.hidden,
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
    exact = exact_gradient(base, xi, mask, target, args.tol)
    for method in args.methods:
        row = row_of[method] = Row(method=method, cell=cell, **common)
        timed = _time_method(args, method, row, weight_set, (xi, mask, target), exact, slow)
        if timed is not None:
            closures[method + "/fwd"], closures[method + "/fb"] = timed
    for peer in args.peers:
        _add_peer(peer, base, xi, mask, target, args, row_of, closures, {**common, "cell": cell}, slow)
    for kind in args.baselines:
        name = bidirectional_baselines()[kind]
        row_of[name] = Row(method=name, **common)
        closures[f"{name}/fwd"], closures[f"{name}/fb"] = baseline_closures(kind, weight_set.hidden, xi, device, dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        times = time_interleaved(closures, args.repeats, device, args.clock)
    return _timed_rows(row_of, times)


def _time_method(
    args: argparse.Namespace, method: str, row: Row, weight_set: _WeightSet, batch: tuple, exact: torch.Tensor, slow
) -> tuple[Callable[[], object], Callable[[], object]] | None:
    """One implicit method on the weight set's own layer: its solver figures set on ``row``
    and its closures to time with the rest; None when it is skipped (too slow at a shorter n,
    CUDA only) or timed once here (too slow to repeat: it then joins ``slow``)."""
    device = torch.device(args.device)
    if method in slow:
        row.note = SLOW_NOTE
        return None
    if method in CUDA_ONLY and device.type != "cuda":
        row.note = "skipped: CUDA graphs need a CUDA device"
        return None
    solver, options = METHODS[method]
    # every method solves the weight set's own layer
    layer = build_layer(weight_set.config, weight_set.input_size, solver, {**options, "tol": args.tol})
    layer.load_state_dict(weight_set.layer.state_dict())
    layer.to(device=device, dtype=_dtype(args))
    xi, mask, target = batch
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        for key, value in solver_figures(layer, xi, mask, target, device, args.clock, exact).items():
            setattr(row, key, value)
    if row.forward_backward_s > args.max_seconds / (args.repeats + 1):
        # too slow to repeat: keep this one measurement, skip longer n
        slow.add(method)
        row.note, row.repeats = "timed once", 1
        return None
    return implicit_closures(layer, xi, mask, target)


def _timed_rows(row_of: dict[str, Row], times: dict[str, float]) -> list[Row]:
    """The rows with their interleaved times and the machine's load set, each logged."""
    load = machine_load()
    rows = []
    for name, row in row_of.items():
        row.load = load
        if name + "/fwd" in times:
            row.forward_s = times[name + "/fwd"]
            row.forward_backward_s = times.get(name + "/fb", float("nan"))
        rows.append(row)
        log.info(
            "%s k=%d n=%d %s: fwd %.4fs fwd+bwd %.4fs newton %.1f krylov %.1f res %.1e failed %d %s",
            row.weights,
            row.hidden,
            row.n,
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
        row.note = SLOW_NOTE
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


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``inn benchmark``, one group of arguments after another."""
    parser = argparse.ArgumentParser(prog="inn benchmark", description=__doc__.split("\n\n")[0])
    _add_size_arguments(parser)
    _add_method_arguments(parser)
    _add_layer_arguments(parser)
    _add_timing_arguments(parser)
    _add_mode_arguments(parser)
    parser.add_argument("--out", default="results/benchmark/benchmark.tsv", help="TSV of measurements")
    parser.add_argument("--fits-out", help="TSV of the fits (default: beside --out, *_fits.tsv)")
    return parser


def _add_size_arguments(parser: argparse.ArgumentParser) -> None:
    """The systems' sizes: hidden widths, sequence lengths, batch."""
    parser.add_argument("--hidden", type=positive_int, nargs="+", default=[200, 448], help="hidden sizes k")
    parser.add_argument(
        "--lengths", type=positive_int, nargs="+", default=[10, 20, 40, 80, 160], help="sequence lengths n"
    )
    parser.add_argument("--batch-size", dest="batch", type=positive_int, default=20, help="sequences per batch")


def _add_method_arguments(parser: argparse.ArgumentParser) -> None:
    """What is timed: our methods, TorchDEQ's, the baselines, at which tolerance and weights."""
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


def _add_layer_arguments(parser: argparse.ArgumentParser) -> None:
    """Whose layer: a model of the registry, or a trained checkpoint's (with its real inputs)."""
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


def _add_timing_arguments(parser: argparse.ArgumentParser) -> None:
    """Where and how it is timed: device, dtype, rounds, budget, threads, clock, seed."""
    add_device_argument(parser)
    parser.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    parser.add_argument("--repeats", type=positive_int, default=5)
    parser.add_argument(
        "--max-seconds",
        type=positive_float,
        default=60.0,
        help="budget per method and (weights, k, n): a method whose forward+backward takes over "
        "max-seconds / (repeats + 1) is timed once and skipped at longer n",
    )
    add_threads_argument(parser)
    parser.add_argument(
        "--clock",
        choices=["wall", "process"],
        default="wall",
        help="wall time, or this process's CPU time (CPU only; use with --threads 1 on a "
        "busy machine: it measures work, not the neighbours' load)",
    )
    parser.add_argument("--seed", type=at_least(0), default=1)


def _add_mode_arguments(parser: argparse.ArgumentParser) -> None:
    """The other measurements instead of the table: J V products alone, or a step's breakdown."""
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


def main(argv: list[str] | None = None) -> None:
    """Entry point of ``inn benchmark``."""
    args = build_parser().parse_args(argv)
    args.device = str(resolve_device(args.device))
    if args.clock == "process" and not args.device.startswith("cpu"):
        raise InnError("--clock process measures CPU time: use it with --device cpu")
    set_threads(args.threads)
    peer_note = _choose_peers(args)
    if args.fits_out and len(set(args.lengths)) < 2:
        raise InnError("--fits-out needs at least two --lengths: the fits are t = a n^p over the lengths")
    if args.breakdown:
        from inn.experiment.timing.breakdown import run_breakdown, summary_table, write_breakdown

        batches = run_breakdown(args, baseline_closures)
        write_breakdown(args.out, batches)
        log.info("wrote %s", args.out)
        print(summary_table(batches))
        return
    if args.jvp_only:
        variants = jvp_variants(args)
        write_tsv(args.out, pd.DataFrame(variants))
        for line in jvp_lines(variants):
            print(line)
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


def _choose_peers(args: argparse.Namespace) -> str:
    """Set ``args.peers`` to the TorchDEQ rows to time (all by default where torchdeq is
    installed, none without it); returns the note that they were asked for but are missing."""
    unknown = sorted(set(args.peers or ()) - set(PEERS))
    if unknown:
        raise InnError(f"unknown peer(s) {unknown}; choose from {', '.join(PEERS)}")
    peer_note = ""
    if not available():
        peer_note = MISSING_NOTE if args.peers is None or args.peers else ""
        args.peers = []
    elif args.peers is None:
        args.peers = list(PEERS)
    return peer_note
