"""``inn benchmark --breakdown``: what a training batch costs a trained implicit model, batch by batch.

The plain benchmark times the implicit layer on one batch with a random linear loss. Training
meets other systems: the model's own loss (its output layer and cross-entropy on the gold
labels) gives the adjoint's right-hand side dL/dH, and the hard sequences are rare (a few in a
thousand), so one batch says little. This mode runs ``--batches`` fresh training batches of
each length (walks: fresh walks of exactly n steps with the model's b; POS: windows of n dev
tokens) through a whole trained model, forward and backward as the trainer does (token or
sentence loss as the checkpoint's settings say; no warm starts), and writes one row per batch:

- forward and adjoint iterations (mean and max over the batch's sequences), the sequences
  that stopped at an iteration limit and the result codes of every sequence that missed tol
  (``MAX_ITERATIONS:2`` ...);
- batched F evaluations (the forward solver's and the one with autograd at the solution) and
  Jacobian(-vector) products (the adjoint's J^T products; the forward's, for Newton);
- time split into ``solve_s`` (the forward solve), ``F_s`` (F with autograd at the solution
  and its backward pass, which carries u to the parameters), ``adjoint_s`` (the adjoint solve)
  and ``rest_s`` (encoder, output layer, loss and their backward);
- with ``--fallback none``, ``float64`` or ``direct``: the adjoint's float64 fallback set so
  (the layer's default is ``float64``);
- the forward+backward time of a bidirectional GRU and LSTM of the same k on the same inputs
  (``--baselines``), fresh weights, the trained model's loss replaced by a linear one.

The implicit model's times are of one run each (no repeats: each batch is other data), the
baselines' the least of :data:`BASELINE_RUNS` runs; on a shared machine read them with
``--threads 1 --clock process`` and prefer the counts.
"""

from __future__ import annotations

import argparse
import itertools
import logging
import time
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

import pandas as pd
import torch

from inn.errors import InnError
from inn.experiment.config import training_defaults
from inn.nn.implicit_function import auto_adjoint
from inn.solvers import ADJOINT_SOLVERS, ConvergenceWarning, ResultCode
from inn.tables import write_tsv

log = logging.getLogger(__name__)


@dataclass
class BatchRow:
    """One training batch's costs (one TSV row)."""

    n: int
    batch_index: int
    batch: int
    hidden: int
    threads: int
    clock: str
    forward_mean: float
    forward_max: int
    forward_limit: int  #: sequences that stopped at the forward iteration limit
    forward_codes: str  #: result codes of the sequences that missed tol, ``NAME:count;...``
    forward_fallback: int  #: sequences the forward solved again on the float64 system
    forward_homotopy: int  #: sequences no local solve finished, solved by the homotopy
    adjoint_mean: float
    adjoint_max: int
    adjoint_limit: int
    adjoint_codes: str
    adjoint_fallback: int  #: sequences the adjoint's float64 fallback solved again (``--fallback``)
    adjoint_solver: str  #: the exact adjoint that ran (``auto`` picks one per batch)
    function_evals: int  #: batched F evaluations: the forward solver's + the one with autograd
    jacobian_products: int  #: batched J V / J^T V products (forward and adjoint)
    total_s: float
    solve_s: float
    F_s: float
    adjoint_s: float
    rest_s: float
    bigru_s: float = float("nan")
    bilstm_s: float = float("nan")


def code_summary(codes: torch.Tensor) -> str:
    """``NAME:count`` of every result code other than CONVERGED, ``;``-separated ("" if none)."""
    counts = Counter(ResultCode(int(c)).name for c in codes.tolist() if int(c) != int(ResultCode.CONVERGED))
    return ";".join(f"{name}:{count}" for name, count in sorted(counts.items()))


def limit_hits(stats: Any) -> int:
    """Sequences whose solve stopped at its iteration limit (code MAX_ITERATIONS)."""
    return int((stats.code == int(ResultCode.MAX_ITERATIONS)).sum())


class _Clock:
    """Accumulates the time spent inside wrapped calls, by name."""

    def __init__(self, now: Callable[[], float]) -> None:
        self.now = now
        self.spent: dict[str, float] = {}

    def wrap(self, name: str, fn: Callable) -> Callable:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = self.now()
            try:
                return fn(*args, **kwargs)
            finally:
                self.spent[name] = self.spent.get(name, 0.0) + self.now() - start

        return timed


def fixture_batches(path: str, n: int, count: int, device: str | torch.device = "cpu") -> tuple[Any, dict, list[dict]]:
    """A trained walks model read from ``path`` on ``device``, in training mode, and ``count``
    fresh training batches of 20 walks of exactly n steps (seed 1 on, on the device): what the
    hard-systems measurements in archive/hard_systems feed a checkpoint.
    Returns ``(model, meta, batches)``."""
    from inn.checkpoints import load_checkpoint

    model, meta = load_checkpoint(path, device=torch.device(device))
    model.train()
    make = training_batches(model, meta, None, 20, 1)
    batches = [{key: value.to(device) for key, value in make(n).items()} for _ in range(count)]
    return model, meta, batches


def training_batches(model, meta: dict, data: str | None, batch_size: int, seed: int) -> Callable[[int], dict]:
    """``n -> batch``: a collated training batch of ``batch_size`` sequences of exactly n
    positions with their gold labels (walks: fresh walks with the model's b, a new seed each
    call; POS: windows of n consecutive dev tokens of the prepared folder ``data``)."""
    from inn.batches import collate, encode_pos, load_features, read_split

    if not model.config.task_spec.tags:
        from inn.data.walk import generate_walks

        b = float(str(meta.get("dataset", "")).removeprefix("b") or "nan")
        if b != b:
            raise InnError("the checkpoint's meta names no walks dataset (b...): --breakdown needs its b")
        seeds = itertools.count(seed)

        def walks(n: int) -> dict:
            pairs = generate_walks(batch_size, b, model.config.input_dim, next(seeds), max_len=n, min_len=n)
            return collate([{"x": x, "y": y} for x, y in pairs])

        return walks
    if not data:
        raise InnError("--breakdown of a POS model needs --data, the prepared folder it was trained on")
    features = load_features(data)
    stream = [token for sentence in read_split(data, "dev") for token in sentence]
    generator = torch.Generator().manual_seed(seed)

    def windows(n: int) -> dict:
        starts = torch.randint(0, len(stream), (batch_size,), generator=generator).tolist()
        return collate(encode_pos([[stream[(s + i) % len(stream)] for i in range(n)] for s in starts], features))

    return windows


def batch_costs(model, batch: dict, normalise: str, clock: str = "process") -> dict[str, Any]:
    """One forward and backward of a trained implicit model on ``batch`` as the trainer runs it,
    with the solver statistics and the time split of :class:`BatchRow` (a dict of its fields
    from ``forward_mean`` to ``rest_s``). ``normalise``: the training loss's ``"token"`` or
    ``"sentence"``."""
    import inn.solvers as solvers
    from inn.experiment.train.losses import token_losses

    layer = model.rnn
    now = time.process_time if clock == "process" else time.perf_counter
    timer = _Clock(now)
    method = layer.backward_options.get("backward_solver", "auto")
    if method == "auto":  # the one this batch's backward will run
        method = auto_adjoint(layer, next(layer.parameters()).device)
    if method not in ADJOINT_SOLVERS:
        raise InnError(f"--breakdown times exact adjoints only; the model's backward solver is {method!r}")
    solve, adjoint, linearized = solvers.solve, ADJOINT_SOLVERS[method], layer.linearized_transition
    solvers.solve = timer.wrap("solve", solve)
    ADJOINT_SOLVERS[method] = replace(adjoint, function=timer.wrap("adjoint", adjoint.function))
    layer.linearized_transition = timer.wrap("F", linearized)
    captured: dict[str, torch.Tensor] = {}
    hook = layer.register_forward_hook(lambda module, args, output: captured.__setitem__("H", output))
    try:
        model.zero_grad(set_to_none=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)  # counted in the row
            start = now()
            loss, count, _ = token_losses(model, batch)
            loss = loss / (count if normalise == "token" else batch["mask"].shape[0])
            H = captured["H"]
            # the model's own part of the backward first, then the layer's: adjoint + F's backward
            rest_grads = torch.autograd.grad(loss, [H, *[p for p in model.output.parameters()]])
            before = timer.spent.get("adjoint", 0.0)
            layer_start = now()
            H.backward(rest_grads[0])
            F_backward = now() - layer_start - (timer.spent.get("adjoint", 0.0) - before)
            total = now() - start
    finally:
        solvers.solve, ADJOINT_SOLVERS[method] = solve, adjoint
        del layer.linearized_transition  # the class's method again
        hook.remove()
    fs, bs = layer.last_stats, layer.last_backward_stats
    spent = {name: timer.spent.get(name, 0.0) for name in ("solve", "adjoint", "F")}
    F_s = spent["F"] + F_backward
    return dict(
        forward_mean=float(fs.newton_iterations.float().mean()),
        forward_max=int(fs.newton_iterations.max()),
        forward_limit=limit_hits(fs),
        forward_codes=code_summary(fs.code),
        forward_fallback=int(fs.extra.get("fallback", 0)),
        forward_homotopy=int(fs.extra.get("homotopy", 0)),
        adjoint_mean=float(bs.newton_iterations.float().mean()),
        adjoint_max=int(bs.newton_iterations.max()),
        adjoint_limit=limit_hits(bs),
        adjoint_codes=code_summary(bs.code),
        adjoint_fallback=int(bs.extra.get("fallback", 0)),
        adjoint_solver=method,
        function_evals=int(fs.function_evals) + 1,
        jacobian_products=int(fs.jacobian_products + bs.jacobian_products),
        total_s=total,
        solve_s=spent["solve"],
        F_s=F_s,
        adjoint_s=spent["adjoint"],
        rest_s=max(total - spent["solve"] - F_s - spent["adjoint"], 0.0),
    )


#: runs of each baseline per batch, the least of which is its time (a few milliseconds: the
#: least of several, as the benchmark's other CPU figures)
BASELINE_RUNS = 3


def run_breakdown(args: argparse.Namespace, baseline_closures: Callable) -> list[BatchRow]:
    """Every batch of ``inn benchmark --breakdown``: ``--batches`` per length in ``--lengths``;
    ``baseline_closures`` (the benchmark's) times the baselines on the same batches."""
    from inn.checkpoints import load_checkpoint
    from inn.experiment.timing.fits import synchronize
    from inn.nn import ImplicitSequence

    if not args.checkpoint:
        raise InnError("--breakdown needs --checkpoint, a whole trained inn or inn_lstm model")
    device = torch.device(args.device)
    model, meta = load_checkpoint(args.checkpoint, device=device)
    if not isinstance(getattr(model, "rnn", None), ImplicitSequence):
        raise InnError(
            f"{args.checkpoint} is not an implicit model's checkpoint: --breakdown needs a whole trained "
            "inn or inn_lstm model"
        )
    dtype = getattr(torch, args.dtype)
    model.to(dtype=dtype).train()
    if getattr(args, "fallback", None):  # the adjoint's float64 fallback (inn.nn.implicit_function)
        fallback = None if args.fallback == "none" else args.fallback
        model.rnn.backward_options = {**model.rnn.backward_options, "backward_fallback": fallback}
    k = model.rnn.state_size if model.rnn.output_size == model.rnn.state_size else model.rnn.output_size
    normalise = meta.get("settings", {}).get("training", {}).get("loss", training_defaults(model.config.task)["loss"])
    make = training_batches(model, meta, args.data, args.batch, args.seed)
    now = time.process_time if args.clock == "process" else time.perf_counter
    rows = []
    batch_costs(
        model,
        {
            key: value.to(device=device, dtype=dtype) if value.dtype.is_floating_point else value.to(device)
            for key, value in make(min(args.lengths)).items()
        },
        normalise,
        args.clock,
    )  # warm-up
    for n in args.lengths:
        for index in range(args.batches):
            batch = {
                key: value.to(device=device, dtype=dtype) if value.dtype.is_floating_point else value.to(device)
                for key, value in make(n).items()
            }
            costs = batch_costs(model, batch, normalise, args.clock)
            row = BatchRow(
                n=n,
                batch_index=index,
                batch=args.batch,
                hidden=k,
                threads=torch.get_num_threads(),
                clock=args.clock,
                **costs,
            )
            with torch.no_grad():
                xi = model.encoder(batch)
            for kind in args.baselines:
                fb = baseline_closures(kind, k, xi.detach(), device, dtype)[1]
                fb()  # warm-up: allocator, kernels
                times = []
                for _ in range(BASELINE_RUNS):
                    synchronize(device)
                    start = now()
                    fb()
                    synchronize(device)
                    times.append(now() - start)
                setattr(row, f"bi{kind}_s", min(times))
            rows.append(row)
            log.info(
                "n=%d batch %d: forward %.1f (max %d, %d at limit) adjoint %.1f (max %d, %d at limit %s) total %.3fs",
                n,
                index,
                row.forward_mean,
                row.forward_max,
                row.forward_limit,
                row.adjoint_mean,
                row.adjoint_max,
                row.adjoint_limit,
                row.adjoint_codes,
                row.total_s,
            )
    return rows


def summary_table(rows: list[BatchRow]) -> str:
    """Per length: batches, mean iterations, limit hits, sequences the forward solved again in
    float64 (``ffb``) and by the homotopy (``hom``), those the adjoint solved again in float64
    (``fb``), F evaluations, J products, the time split and the ratio of the mean total to each
    baseline's."""
    frame = pd.DataFrame([asdict(r) for r in rows])
    lines = [
        f"{'n':>4} {'batches':>7} {'fwd it':>6} {'fwd max':>7} {'fwd lim':>7} {'ffb':>4} {'hom':>4} "
        f"{'adj it':>6} {'adj max':>7} {'adj lim':>7} {'fb':>4} {'F':>6} {'JP':>6} {'total s':>8} {'solve':>6} "
        f"{'F s':>6} {'adjoint':>7} {'rest':>6} "
        f"{'x BiGRU':>7} {'x BiLSTM':>8}"
    ]
    for n, g in frame.groupby("n", sort=False):
        total = g.total_s.mean()
        ratio = {
            kind: total / g[f"bi{kind}_s"].mean() if g[f"bi{kind}_s"].notna().any() else float("nan")
            for kind in ("gru", "lstm")
        }
        lines.append(
            f"{n:>4} {len(g):>7} {g.forward_mean.mean():>6.1f} {g.forward_max.max():>7} "
            f"{g.forward_limit.sum():>7} {g.forward_fallback.sum():>4} {g.forward_homotopy.sum():>4} "
            f"{g.adjoint_mean.mean():>6.1f} {g.adjoint_max.max():>7} "
            f"{g.adjoint_limit.sum():>7} {g.adjoint_fallback.sum():>4} {g.function_evals.mean():>6.1f} "
            f"{g.jacobian_products.mean():>6.1f} "
            f"{total:>8.3f} {g.solve_s.mean():>6.3f} {g.F_s.mean():>6.3f} {g.adjoint_s.mean():>7.3f} "
            f"{g.rest_s.mean():>6.3f} {ratio['gru']:>7.1f} {ratio['lstm']:>8.1f}"
        )
    return "\n".join(lines) + "\n"


def write_breakdown(path: str, rows: list[BatchRow]) -> None:
    """One row per batch, as TSV (:func:`inn.tables.write_tsv`)."""
    names = list(BatchRow.__dataclass_fields__)
    write_tsv(path, pd.DataFrame([asdict(row) for row in rows], columns=names))
