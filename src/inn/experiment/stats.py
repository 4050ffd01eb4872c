"""Uncertainty of a comparison: paired bootstrap over test units, pooled over seeds.

Two models scored on the same test set differ partly because of what they learnt and partly
because of which sentences (or walks) happen to be in the test set; their training seeds add a
third source (Reimers & Gurevych, EMNLP 2017). A paired bootstrap resamples the test units
(sentences for tagging, walks for the random walks, each with all its tokens or steps, since
errors within one are correlated) and recomputes the difference on each resample. Each model's
per-unit score is first averaged over its seeds, so the interval is for the seed-averaged
models; the spread over seeds is reported beside it as mean +- standard deviation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from inn.errors import InnError

RESAMPLES = 10_000
LEVEL = 0.95
#: Resamples drawn at once: (chunk, units) int32 indices, about 80 MB for 10,000 sentences.
CHUNK = 2_000


@dataclass(frozen=True)
class UnitScores:
    """Per test unit (sentence or walk): hits (correct tokens, or wrong steps) averaged over
    seeds, and the unit's size; ``units`` names each unit so two models can be aligned."""

    hits: np.ndarray
    sizes: np.ndarray
    seeds: int

    @property
    def rate(self) -> float:
        return float(self.hits.sum() / self.sizes.sum())


def unit_scores(predictions: Sequence[pd.DataFrame], unit: str, count: str) -> UnitScores:
    """Pool a model's predictions over seeds into per-unit scores.

    Args:
        predictions: one ``predictions.tsv`` table per seed (columns ``unit``, ``gold``,
            ``predicted``), all over the same test set.
        unit: the column that numbers the units (``sentence``, ``sequence``).
        count: what to count per unit: ``correct`` (accuracy) or ``wrong`` (error).
    """
    if not predictions:
        raise InnError("unit_scores: no predictions")
    hits, sizes = None, None
    for table in predictions:
        flags = table.gold.astype(str) == table.predicted.astype(str)
        if count == "wrong":
            flags = ~flags
        grouped = flags.groupby(table[unit]).agg(["sum", "size"]).sort_index()
        if sizes is None:
            hits, sizes = grouped["sum"].to_numpy(np.float64), grouped["size"].to_numpy(np.int64)
        elif not np.array_equal(grouped["size"].to_numpy(), sizes):
            raise InnError("unit_scores: the seeds' predictions cover different test sets "
                           f"({len(grouped)} {unit}s / {int(grouped['size'].sum())} items against "
                           f"{len(sizes)} / {int(sizes.sum())}); rerun evaluation on one split")
        else:
            hits = hits + grouped["sum"].to_numpy(np.float64)
    return UnitScores(hits / len(predictions), sizes, len(predictions))


def paired_bootstrap(a: UnitScores, b: UnitScores, resamples: int = RESAMPLES, seed: int = 0,
                     level: float = LEVEL) -> dict[str, float]:
    """The difference rate(a) - rate(b) on the test set, with a percentile bootstrap interval.

    Resamples the units with replacement ``resamples`` times (a seeded generator, so the
    interval is reproducible) and takes the ``level`` central interval of the differences.

    Returns:
        ``difference``, ``low``, ``high``, ``p_value`` (two-sided: twice the smaller share of
        resampled differences on either side of zero, floored at 1 / resamples) and ``units``.
    """
    if not np.array_equal(a.sizes, b.sizes):
        raise InnError(f"paired_bootstrap: the two models were scored on different test sets "
                       f"({len(a.sizes)} units / {int(a.sizes.sum())} items against "
                       f"{len(b.sizes)} / {int(b.sizes.sum())})")
    delta, sizes = a.hits - b.hits, a.sizes.astype(np.float64)
    rng = np.random.default_rng(seed)
    n = len(sizes)
    diffs = []
    for start in range(0, resamples, CHUNK):
        index = rng.integers(0, n, size=(min(CHUNK, resamples - start), n), dtype=np.int32)
        diffs.append(delta[index].sum(1) / sizes[index].sum(1))
    diffs = np.concatenate(diffs)
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(diffs, [tail, 1.0 - tail])
    below, above = np.mean(diffs <= 0), np.mean(diffs >= 0)
    return {"difference": float(delta.sum() / sizes.sum()), "low": float(low), "high": float(high),
            "p_value": float(max(min(1.0, 2.0 * min(below, above)), 1.0 / resamples)), "units": n}
