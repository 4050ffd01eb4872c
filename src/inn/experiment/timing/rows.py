"""The measurements of ``inn benchmark``: :class:`Row`, one measurement (one TSV row); the fits
t = a n^p per (weights, k, method); the printed table, with each implicit row's ratio to the
bidirectional baseline of its cell; and the TSV, written atomically.
"""

from __future__ import annotations

import io
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd

from inn.experiment.timing.fits import fit_power_law, fitted_lengths
from inn.models import bidirectional_baselines, model_with_role
from inn.tables import write_tsv


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
