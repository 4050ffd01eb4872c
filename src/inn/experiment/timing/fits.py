"""Runtime scaling (paper section 4): time to compute the hidden states of a batch against n.

The paper fitted t = a * n^p to the time its implicit layer took for a batch of 20 sequences
of length n (random walks b = 0.5: 0.17 n^1.8; POS: 0.29 n^1.3). :func:`measure` times any
hidden-state function on inputs of each length, recording the solver's iterations when the
layer is implicit, and :func:`fit_power_law` fits the law by least squares in log-log space.
"""

from __future__ import annotations

import argparse
import itertools
import logging
import os
import re
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from inn.device import available_cores, machine_load
from inn.errors import InnError, at_least, positive_int
from inn.experiment.report import paper
from inn.models import model_with_role
from inn.tables import read_tsv, write_tsv

log = logging.getLogger(__name__)


def fit_power_law(n: Iterable[float], t: Iterable[float]) -> tuple[float, float, float]:
    """Least-squares fit of ``t = a * n**p`` in log-log space; returns ``(a, p, r2)``.

    ``r2`` is the coefficient of determination of the log-log fit, as the paper reports it.
    Times that are not positive and finite (a method that was skipped or timed out) are left
    out (:func:`fitted_lengths` says which lengths remain); with fewer than two lengths left
    every figure is NaN, and with two ``r2`` is NaN: a line through two points fits them
    exactly, which says nothing of the law.
    """
    n, t = np.asarray(list(n), dtype=float), np.asarray(list(t), dtype=float)
    keep = fitted_lengths(n, t)
    x, y = np.log(n[keep]), np.log(t[keep])
    if len(x) < 2 or np.ptp(x) == 0:
        return float("nan"), float("nan"), float("nan")
    p, log_a = np.polyfit(x, y, 1)
    residual = y - (p * x + log_a)
    total = ((y - y.mean()) ** 2).sum()
    r2 = 1.0 - (residual**2).sum() / total if total > 0 and len(np.unique(x)) > 2 else float("nan")
    return float(np.exp(log_a)), float(p), float(r2)


def fitted_lengths(n: Iterable[float], t: Iterable[float]) -> np.ndarray:
    """Which of the lengths ``n`` a fit uses: those whose time is positive and finite."""
    t = np.asarray(list(t), dtype=float)
    return np.isfinite(t) & (t > 0)


#: below this r² a fitted power law is flagged as not to be trusted
MIN_R2 = 0.9


def trust_notes(
    times: pd.Series,
    r2: float = float("nan"),
    repeats: float = float("nan"),
    load: float = float("nan"),
    cores: int | None = None,
) -> str:
    """Why timings (``times``: fastest seconds per length n, indexed by n) or a power law fitted
    to them cannot be trusted: an r² below :data:`MIN_R2`, one repeat per length, a time that
    falls as n grows (noise larger than the effect), a machine loaded beyond its cores while
    they were taken; "" when none applies."""
    notes = []
    if not np.isnan(r2) and r2 < MIN_R2:
        notes.append(f"r² {r2:.2f} < {MIN_R2}: the power law fits poorly")
    if repeats == 1:
        notes.append("one repeat per length")
    times = times.dropna().sort_index()
    falling = [
        int(n)
        for n, before, after in zip(times.index[1:], times.values[:-1], times.values[1:])
        if after < 0.95 * before
    ]
    if falling:
        notes.append(f"time falls as n grows (at n = {', '.join(map(str, falling))})")
    cores = cores or available_cores()
    if not np.isnan(load) and load > cores:
        notes.append(f"machine busy (load {load:.1f} on {cores} cores)")
    return "; ".join(notes)


def synchronize(device: torch.device) -> None:
    """Wait for queued GPU work, so wall-clock times cover the computation itself."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _solver_columns(stats) -> dict:
    """An implicit layer's solver statistics for one batch (nothing for explicit layers)."""
    if stats is None:
        return {}
    summary = stats.summary()
    return {
        "newton_iters": summary["iterations_mean"],
        "krylov_iters": summary["krylov_mean"],
        "residual": summary["residual_max"],
        "failed": summary["failed"],
    }


@torch.no_grad()
def measure(
    hidden: Callable[[Tensor, Tensor], Tensor],
    make_inputs: Callable[[int], tuple[Tensor, Tensor]],
    lengths: Iterable[int],
    repeats: int = 3,
    device: torch.device | str = "cpu",
    stats: Callable[[], object] | None = None,
) -> pd.DataFrame:
    """Time ``hidden(xi, mask)`` on inputs of each length (one warm-up call per length).

    Args:
        hidden: the hidden-state function (e.g. ``model.hidden_states``).
        make_inputs: ``n -> (xi, mask)`` for a batch of length-``n`` sequences (on ``device``).
        lengths: the sequence lengths n to time.
        repeats: timed calls per length, each on fresh inputs.
        stats: returns the implicit layer's ``last_stats`` after a call (None for explicit).

    Returns:
        One row per timed call: n, repeat, seconds, the machine's load average just before it
        (:func:`machine_load`), and for implicit layers the mean Newton and Krylov iterations,
        the largest final residual and the count of failed sequences.
    """
    device = torch.device(device)
    rows = []
    for n in lengths:
        xi, mask = make_inputs(n)
        hidden(xi, mask)  # warm-up: allocator, kernels, caches
        for repeat in range(repeats):
            xi, mask = make_inputs(n)
            synchronize(device)
            load = machine_load()
            start = time.perf_counter()
            hidden(xi, mask)
            synchronize(device)
            seconds = time.perf_counter() - start
            rows.append(
                {
                    "n": n,
                    "repeat": repeat,
                    "seconds": seconds,
                    "load": load,
                    **_solver_columns(stats() if stats else None),
                }
            )
    return pd.DataFrame(rows)


def fit_table(measurements: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Fit ``t = a n^p`` to the fastest time per length of every group in ``measurements``.

    The minimum over repeats is the least disturbed figure on a shared machine (other
    processes only ever add time). Each fit carries its quality: the repeats per length (the
    fewest), the highest load average seen while timing (NaN where not recorded) and
    :func:`trust_notes`.
    """
    rows = []
    for key, group in measurements.groupby(by, sort=False):
        per_n = group.groupby("n")["seconds"].min()
        repeats = int(group.groupby("n").size().min())
        load = float(group["load"].max()) if "load" in group and group["load"].notna().any() else float("nan")
        a, p, r2 = fit_power_law(per_n.index, per_n.values)
        fitted = per_n.index[fitted_lengths(per_n.index, per_n.values)]
        key = key if isinstance(key, tuple) else (key,)
        # the lengths the fit used, not every length tried (a skipped one has no time)
        rows.append(
            {
                **dict(zip(by, key)),
                "a": a,
                "p": p,
                "r2": r2,
                "points": len(fitted),
                "n_min": int(fitted.min()) if len(fitted) else None,
                "n_max": int(fitted.max()) if len(fitted) else None,
                "repeats": repeats,
                "load": load,
                "note": trust_notes(per_n, r2, repeats, load),
            }
        )
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- trained models


def _pos_inputs(model, data_dir: str, batch_size: int, device: torch.device, seed: int):
    """``n -> (xi, mask)``: windows of n consecutive dev tokens through the model's encoder."""
    from inn.batches import collate, encode_pos, load_features, read_split, to_device

    features = load_features(data_dir)
    stream = [token for sentence in read_split(data_dir, "dev") for token in sentence]
    generator = torch.Generator().manual_seed(seed)

    def make(n: int):
        starts = torch.randint(0, len(stream), (batch_size,), generator=generator).tolist()
        windows = [[stream[(s + i) % len(stream)] for i in range(n)] for s in starts]
        batch = to_device(collate(encode_pos(windows, features)), device)
        return model.encoder(batch), batch["mask"]

    return make


def _walk_inputs(model, b: float, batch_size: int, device: torch.device, seed: int):
    """``n -> (xi, mask)``: fresh biased walks of exactly n steps through the model's encoder."""
    from inn.batches import collate, to_device
    from inn.data.walk import generate_walks

    seeds = itertools.count(seed)  # fresh walks for every call

    def make(n: int):
        walks = generate_walks(batch_size, b, model.config.input_dim, next(seeds), max_len=n, min_len=n)
        batch = to_device(collate([{"x": x, "y": y} for x, y in walks]), device)
        return model.encoder(batch), batch["mask"]

    return make


def walk_bias(data: str | os.PathLike) -> float:
    """The bias b of a prepared walks folder, as its generator recorded it (``prepared.json``,
    else the walk files' own settings), whatever the folder is named; only walks that record
    neither fall back on the workflow's folder name, ``b<number>``.

    Raises:
        InnError: neither records b (naming the folder and the fix).
    """
    from inn.data.fingerprint import read_record
    from inn.data.walk import load_walks

    b = read_record(data).get("b")
    for split in ("dev", "train", "test"):
        if b is not None:
            break
        path = Path(data) / f"{split}.pt"
        if path.is_file():
            b = load_walks(path).get("b")
    named = re.fullmatch(r"b(\d+(?:\.\d*)?)", Path(data).name)
    if b is None and named:
        b = float(named.group(1))
    if isinstance(b, bool) or not isinstance(b, (int, float)):
        raise InnError(
            f"{data} records no walk bias b (no prepared.json or walk files that say it): give the "
            "folder `inn generate-walks` wrote, or generate the walks again"
        )
    return float(b)


def realistic_inputs(model, meta: dict, data: str, batch_size: int, device: torch.device, seed: int = 0):
    """``n -> (xi, mask)`` for a trained model: POS models see windows of real dev tokens
    from the prepared corpus folder ``data`` (so the implicit layer solves the systems its
    trained weights produce on real text), walk models fresh walks with the model's b."""
    if model.config.task_spec.tags:
        make = _pos_inputs(model, data, batch_size, device, seed)
    else:
        make = _walk_inputs(model, walk_bias(data), batch_size, device, seed)

    def detached(n: int) -> tuple[Tensor, Tensor]:
        with torch.no_grad():
            xi, mask = make(n)
        return xi, mask

    return detached


def time_checkpoint(
    checkpoint: str,
    data: str,
    lengths: list[int],
    repeats: int = 3,
    batch_size: int = 20,
    device: str = "auto",
    seed: int = 0,
) -> pd.DataFrame:
    """Time a trained model's hidden states on realistic inputs of each length
    (:func:`realistic_inputs`)."""
    from inn.checkpoints import load_checkpoint
    from inn.device import resolve_device

    device = resolve_device(device)
    model, meta = load_checkpoint(checkpoint, device=device)
    task = model.config.task
    make = realistic_inputs(model, meta, data, batch_size, device, seed)
    stats = (lambda: model.rnn.last_stats) if hasattr(model.rnn, "last_stats") else None
    frame = measure(model.hidden_states, make, lengths, repeats=repeats, device=device, stats=stats)
    frame.insert(0, "model", meta["model"])
    frame.insert(0, "dataset", meta["dataset"])
    frame.insert(0, "task", task)
    frame["device"] = str(device)
    return frame


def time_model_main(argv: list[str]) -> None:
    """``inn time-model``: seconds per batch against sequence length for one trained model."""
    parser = argparse.ArgumentParser(prog="inn time-model", description=time_checkpoint.__doc__)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--data", required=True, help="the prepared data folder the model was trained on")
    parser.add_argument("--lengths", type=positive_int, nargs="+", required=True)
    parser.add_argument("--repeats", type=positive_int, default=3)
    parser.add_argument("--batch-size", type=positive_int, default=20)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--seed", type=at_least(0), default=0)
    parser.add_argument("--out", required=True, help="TSV of measurements")
    args = parser.parse_args(argv)
    frame = time_checkpoint(
        args.checkpoint, args.data, args.lengths, args.repeats, args.batch_size, args.device, args.seed
    )
    write_tsv(args.out, frame)
    for n, group in frame.groupby("n"):
        log.info("n=%d: %.4f s per batch", n, group.seconds.mean())


def fit_timing_main(argv: list[str]) -> None:
    """``inn fit-timing``: power-law fits of every model's timing, beside the paper's fits."""
    parser = argparse.ArgumentParser(prog="inn fit-timing", description=fit_timing_main.__doc__)
    parser.add_argument("--out", required=True, help="fits (TSV)")
    parser.add_argument("--measurements", required=True, help="all measurements stacked (TSV)")
    parser.add_argument("inputs", nargs="*", help="per-model measurement TSVs")
    args = parser.parse_intermixed_args(argv)  # IN --out OUT IN: inputs after the options too
    frames = [read_tsv(p) for p in args.inputs]
    measurements = (
        pd.concat(frames, ignore_index=True)
        if frames
        else pd.DataFrame(columns=["task", "dataset", "model", "n", "seconds"])
    )
    fits = (
        fit_table(measurements, ["task", "dataset", "model"])
        if frames
        else pd.DataFrame(
            columns=["task", "dataset", "model", "a", "p", "r2", "points", "n_min", "n_max", "repeats", "load", "note"]
        )
    )
    claimed = model_with_role("claimed")  # the paper fitted its INN's times
    for column in ("a", "p"):
        fits[f"paper_{column}"] = [
            paper.TIMING.get(t, {}).get(column) if m == claimed else None for t, m in zip(fits.task, fits.model)
        ]
    write_tsv(args.measurements, measurements)
    write_tsv(args.out, fits)
