"""The Bayes-optimal floor of the biased-walk task: the least per-step error any model can reach.

A walk's increments are D_t = x_t - x_{t-1} (x_0 = 0), t = 1..N, with N known. Given the change
time t' and the direction v, D_t ~ N(b s_t v, I_d) with the share s_t(t') = clamp(t - t', 0, 1).
With m(t') = sum_t s_t^2 and S(t') = sum_t s_t D_t, the likelihood of t' with v marginalised is,
up to a factor that does not depend on t':

- v uniform on the unit sphere:  exp(-b^2 m / 2) 0F1(; d/2; b^2 |S|^2 / 4), where
  0F1(; nu + 1; z^2 / 4) = Gamma(nu + 1) (z / 2)^(-nu) I_nu(z) (evaluated with the scaled
  Bessel function ``scipy.special.ive``, so large z cannot overflow);
- v ~ N(0, I_d):  (1 + b^2 m)^(-d/2) exp(b^2 |S|^2 / (2 (1 + b^2 m))).

t' is uniform on [0, N). On the interval t' in [j, j + 1) (j = 0..N-1) the shares are 0 up to
step j, u = j + 1 - t' on step j + 1, and 1 after it, so m = u^2 + (N - j - 1) and
S = u D_{j+1} + T_{j+2} with the suffix sum T_k = sum_{t >= k} D_t. Each interval's posterior
mass is the integral over u in (0, 1], done by Gauss-Legendre quadrature (the integrand is
smooth in u). P(y_t = 1 | x) = P(t' < t | x) is the mass of the intervals j < t, and the Bayes
classifier predicts 1 where it exceeds 0.5; its error on a data set is the task's floor.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from scipy.special import gammaln, ive, logsumexp

from inn.data.fingerprint import read_record
from inn.data.walk import DIRECTIONS, generate_walks, load_walks, pad_walks
from inn.errors import InnError, at_least, positive_float, positive_int
from inn.tables import write_tsv

log = logging.getLogger(__name__)

#: Gauss-Legendre nodes per unit interval of t'. 32 nodes integrate the smooth per-interval
#: likelihood to far below the Monte Carlo error of any test set (checked against brute force).
QUADRATURE_NODES = 32
#: Walks per vectorised chunk: (chunk, max_len, nodes) float64 arrays stay around 100 MB.
CHUNK = 8192


def _log_marginal(b: float, dim: int, direction: str, m: np.ndarray, s2: np.ndarray) -> np.ndarray:
    """log p(x | t') up to a constant, from m(t') and |S(t')|^2, with v marginalised."""
    if direction == "gaussian":
        scale = 1.0 + b * b * m
        return b * b * s2 / (2.0 * scale) - 0.5 * dim * np.log(scale)
    if direction == "unit":
        nu = dim / 2.0 - 1.0
        z = b * np.sqrt(s2)
        # Small z: the series 0F1(; nu + 1; z^2 / 4) = 1 + z^2 / (4 (nu + 1)) + O(z^4), where the
        # Bessel form would divide 0 by 0.
        small = z < 1e-3
        safe = np.where(small, 1.0, z)
        bessel = gammaln(nu + 1.0) - nu * np.log(safe / 2.0) + np.log(ive(nu, safe)) + safe
        return -0.5 * b * b * m + np.where(small, z * z / (4.0 * (nu + 1.0)), bessel)
    raise InnError(f"unknown walk direction {direction!r} (expected one of {', '.join(DIRECTIONS)})")


def change_posterior(
    x: torch.Tensor | np.ndarray,
    lengths: torch.Tensor | np.ndarray,
    b: float,
    direction: str,
    nodes: int = QUADRATURE_NODES,
) -> np.ndarray:
    """P(y_t = 1 | x) for every step of every walk, under the generator's exact model.

    Args:
        x: walks padded to one width, shape (W, L, d) (as :func:`inn.data.walk.save_walks`
            stores them); values past a walk's length are ignored.
        lengths: (W,) walk lengths N.
        b: the bias size; ``direction``: how v was drawn, ``unit`` or ``gaussian``.

    Returns:
        float64 array (W, L): the posterior probability that step t (column t - 1) lies past the
        change; zero at padding.
    """
    x = np.asarray(x, dtype=np.float64)
    lengths = np.asarray(lengths, dtype=np.int64)
    if x.ndim != 3 or lengths.shape != x.shape[:1]:
        raise InnError(f"change_posterior: expected x (W, L, d) and lengths (W,), got {x.shape} and {lengths.shape}")
    W, L, dim = x.shape
    steps = np.arange(L)
    real = steps[None, :] < lengths[:, None]  # (W, L): step t = column + 1 exists
    increments = np.diff(x, axis=1, prepend=0.0) * real[..., None]  # D_t, zero at padding
    # Suffix sums T_k = sum_{t >= k} D_t; column j holds T_{j+2}, the part of S after step j + 1.
    suffix = np.cumsum(increments[:, ::-1], axis=1)[:, ::-1]
    after = np.concatenate([suffix[:, 1:], np.zeros((W, 1, dim))], axis=1)
    first = increments  # column j: D_{j+1}, the step that gets the fraction u
    a = np.einsum("wjd,wjd->wj", first, first)
    c = np.einsum("wjd,wjd->wj", first, after)
    e = np.einsum("wjd,wjd->wj", after, after)
    u, weights = np.polynomial.legendre.leggauss(nodes)
    u, weights = (u + 1.0) / 2.0, weights / 2.0  # on (0, 1)
    # N - j - 1 steps with s = 1 (clamped at padding, whose intervals are dropped below).
    full = np.maximum(lengths[:, None] - steps[None, :] - 1, 0).astype(np.float64)
    m = u[None, None, :] ** 2 + full[..., None]
    s2 = u**2 * a[..., None] + 2.0 * u * c[..., None] + e[..., None]
    log_mass = logsumexp(_log_marginal(b, dim, direction, m, s2) + np.log(weights), axis=-1)  # (W, L)
    log_mass = np.where(real, log_mass, -np.inf)
    posterior = np.exp(log_mass - logsumexp(log_mass, axis=1, keepdims=True))  # mass of interval j
    return np.cumsum(posterior, axis=1) * real  # P(t' < t) = mass of j = 0..t-1


def bayes_predictions(x, lengths, b: float, direction: str) -> np.ndarray:
    """The Bayes classifier's labels (W, L) for padded walks: 1 where P(t' < t | x) > 0.5."""
    lengths = np.asarray(lengths)
    parts = [
        change_posterior(x[i : i + CHUNK], lengths[i : i + CHUNK], b, direction) > 0.5
        for i in range(0, len(lengths), CHUNK)
    ]
    return np.concatenate(parts).astype(np.int64)


def bayes_error(x, lengths, y, b: float, direction: str) -> tuple[int, int]:
    """(errors, steps) of the Bayes classifier on walks ``x`` with labels ``y`` (both padded)."""
    lengths = np.asarray(lengths)
    predicted = bayes_predictions(x, lengths, b, direction)
    real = np.arange(predicted.shape[1])[None, :] < lengths[:, None]
    wrong = (predicted != np.asarray(y)[:, : predicted.shape[1]]) & real
    return int(wrong.sum()), int(lengths.sum())


def walk_floor(path: str | Path) -> tuple[dict, pd.DataFrame]:
    """The floor on one stored walk set.

    Returns:
        its generator settings, errors, steps and error rate; and the Bayes classifier's
        predictions in the models' ``predictions.tsv`` layout (sequence, step, gold, predicted,
        probability), so comparisons against the floor are paired like any other.
    """
    data = load_walks(path)
    for key in ("b", "dim", "direction"):
        if key not in data:
            raise InnError(
                f"{path}: walk file without its generator's {key!r} (regenerate it with `inn generate-walks`)"
            )
    b, direction = float(data["b"]), str(data["direction"])
    x, lengths, y = data["x"].numpy(), data["lengths"].numpy(), data["y"].numpy()
    posterior = np.concatenate(
        [
            change_posterior(x[i : i + CHUNK], lengths[i : i + CHUNK], b, direction)
            for i in range(0, len(lengths), CHUNK)
        ]
    )
    real = np.arange(posterior.shape[1])[None, :] < lengths[:, None]
    sequence, step = np.nonzero(real)
    gold, predicted = y[sequence, step], (posterior[sequence, step] > 0.5).astype(np.int64)
    table = pd.DataFrame(
        {
            "sequence": sequence,
            "step": step + 1,
            "gold": gold,
            "predicted": predicted,
            "probability": posterior[sequence, step].round(6),
        }
    )
    errors, steps = int((gold != predicted).sum()), int(lengths.sum())
    error = errors / steps
    row = {
        "b": b,
        "direction": direction,
        "dim": int(data["dim"]),
        "sequences": len(lengths),
        "steps": steps,
        "bayes_errors": errors,
        "bayes_error": error,
    }
    # the walk set's fingerprint (its prepared folder's record), so that collect pairs the floor
    # only with runs of these walks: another dim or direction keeps the same labels
    fingerprint = read_record(Path(path).parent).get("fingerprint")
    if fingerprint:
        row["data_fingerprint"] = fingerprint
    return row, table


def main(argv: list[str]) -> None:
    """``inn walk-floor``: the Bayes-optimal error of one stored walk set, and its predictions."""
    parser = argparse.ArgumentParser(prog="inn walk-floor", description=main.__doc__)
    parser.add_argument("walks", help="a walk file written by `inn generate-walks` (e.g. test.pt)")
    parser.add_argument("--out", required=True, help="output TSV: one row, the floor and its settings")
    parser.add_argument("--predictions", required=True, help="output TSV: the Bayes classifier's labels")
    args = parser.parse_args(argv)
    row, table = walk_floor(args.walks)
    log.info(
        "floor b=%g (%s v, d=%d): %.4f over %d steps of %d walks",
        row["b"],
        row["direction"],
        row["dim"],
        row["bayes_error"],
        row["steps"],
        row["sequences"],
    )
    write_tsv(args.predictions, table)
    write_tsv(args.out, pd.DataFrame([row]))


def survey(
    directions: list[str], dims: list[int], biases: list[float], walks: int, seed: int, max_len: int = 40
) -> pd.DataFrame:
    """The floor over a grid of generator settings, on fresh walks (one row per direction, d, b):
    how hard the task is before any model is trained, e.g. to choose ``walks.direction`` and
    ``walks.dim`` so that the paper's errors are reachable."""
    rows = []
    for direction in directions:
        for dim in dims:
            for b in biases:
                padded = pad_walks(generate_walks(walks, b, dim, seed, max_len=max_len, direction=direction))
                errors, steps = bayes_error(
                    padded["x"].numpy(), padded["lengths"].numpy(), padded["y"].numpy(), b, direction
                )
                rows.append(
                    {
                        "direction": direction,
                        "dim": dim,
                        "b": b,
                        "walks": walks,
                        "seed": seed,
                        "bayes_error": errors / steps,
                    }
                )
                log.info("floor %s d=%d b=%g: %.4f", direction, dim, b, errors / steps)
    return pd.DataFrame(rows)


def survey_main(argv: list[str]) -> None:
    """``inn walk-floor-survey``: the floor over generator settings (direction, d, b) on fresh walks."""
    parser = argparse.ArgumentParser(prog="inn walk-floor-survey", description=survey_main.__doc__)
    parser.add_argument("--directions", nargs="+", choices=DIRECTIONS, default=list(DIRECTIONS))
    parser.add_argument("--dims", nargs="+", type=positive_int, default=[1, 2, 3, 5, 10])
    parser.add_argument("--b", nargs="+", type=positive_float, default=[2.0, 1.0, 0.75, 0.5, 0.25])
    parser.add_argument("--walks", type=positive_int, default=20_000, help="walks per cell")
    parser.add_argument("--seed", type=at_least(0), default=101)
    parser.add_argument("--out", required=True, help="output TSV (direction, dim, b, bayes_error)")
    args = parser.parse_args(argv)
    write_tsv(args.out, survey(args.directions, args.dims, args.b, args.walks, args.seed))
