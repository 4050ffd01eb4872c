"""Uncertainty of a comparison: test-set sampling and seed-to-seed variance together.

Two models scored on the same test set differ partly because of what they learnt, partly
because of which sentences (or walks) happen to be in the test set, and partly because of
their training seeds (Reimers & Gurevych, EMNLP 2017). Each is a source the interval of a
difference must cover before the difference can be called real.

**Test set.** A paired bootstrap resamples the test units (sentences for tagging, walks for
the random walks, each with all its tokens or steps, since errors within one are correlated)
and recomputes the difference of the seed-averaged models on each resample.

**Seeds.** Each model's seeds give per-seed rates r_1..r_S on the same test set; their spread
u = s / sqrt(S) is the seed part of the mean's uncertainty. With 3 seeds a bootstrap of the
seeds under-covers badly (10 distinct resamples, and its variance is (S - 1) / S of the
sample's), so the seed part is drawn instead from Student's t: sqrt(u_a^2 + u_b^2) * T(nu),
with nu the Welch-Satterthwaite degrees of freedom of the difference of two means with
unequal, unknown variances (nu = 4 for 3 seeds a side with equal spreads). Each bootstrap
replicate adds one such draw to its test-set difference, and the interval is the replicates'
central quantiles: a Monte Carlo convolution of the two sources. The per-seed rates are
computed on the whole test set, so they also carry the seed-by-sentence interaction that the
test-set bootstrap sees; counting it twice errs on the wide side (simulated: 98% coverage at a
nominal 95% when seeds dominate, 99% when the seeds add nothing but token noise). The unit
resampling uses its own generator, so when every seed of both models makes the same
predictions the interval is exactly the test-set one; with one seed on either side there is no
seed spread to estimate, and only the test-set interval exists (``seed_aware`` False). The
calibration test (tests/test_stats.py) simulates 3 seeds per model with seed-to-seed variance
dominating the test-set noise.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

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
    seeds, and the unit's size; ``seed_rates`` holds each seed's own rate on the whole test set
    (empty: unknown, treated as one seed)."""

    hits: np.ndarray
    sizes: np.ndarray
    seeds: int
    seed_rates: np.ndarray = field(default_factory=lambda: np.zeros(0))
    #: a deterministic rule (the walks' Bayes-optimal floor): no seed-to-seed variance at all
    fixed: bool = False
    #: a digest of the test set's units and gold labels ("" unknown): two sides must share it
    gold: str = ""

    @property
    def rate(self) -> float:
        return float(self.hits.sum() / self.sizes.sum())

    @property
    def seed_error(self) -> float:
        """s / sqrt(S) of the per-seed rates (0 for a fixed rule; NaN with fewer than two seeds)."""
        if self.fixed:
            return 0.0
        if len(self.seed_rates) < 2:
            return float("nan")
        return float(np.std(self.seed_rates, ddof=1) / np.sqrt(len(self.seed_rates)))


def unit_scores(predictions: Sequence[pd.DataFrame], unit: str, count: str, fixed: bool = False) -> UnitScores:
    """Pool a model's predictions over seeds into per-unit scores.

    Args:
        predictions: one ``predictions.tsv`` table per seed (columns ``unit``, ``gold``,
            ``predicted``), all over the same test set.
        unit: the column that numbers the units (``sentence``, ``sequence``).
        count: what to count per unit: ``correct`` (accuracy) or ``wrong`` (error).
        fixed: the predictions come from a deterministic rule, not a trained model (no seeds).
    """
    if not predictions:
        raise InnError("unit_scores: no predictions")
    hits, sizes, rates, gold = None, None, [], None
    for table in predictions:
        digest = _gold_digest(table, unit)
        if gold is not None and digest != gold:
            raise InnError(
                "unit_scores: the seeds' predictions carry different gold labels, so they were scored "
                "on different test data; evaluate every seed on the same prepared test split"
            )
        gold = digest
        flags = table.gold.astype(str) == table.predicted.astype(str)
        if count == "wrong":
            flags = ~flags
        grouped = flags.groupby(table[unit]).agg(["sum", "size"]).sort_index()
        rates.append(float(grouped["sum"].sum() / grouped["size"].sum()))
        if sizes is None:
            hits, sizes = grouped["sum"].to_numpy(np.float64), grouped["size"].to_numpy(np.int64)
        elif not np.array_equal(grouped["size"].to_numpy(), sizes):
            raise InnError(
                "unit_scores: the seeds' predictions cover different test sets "
                f"({len(grouped)} {unit}s / {int(grouped['size'].sum())} items against "
                f"{len(sizes)} / {int(sizes.sum())}); rerun evaluation on one split"
            )
        else:
            hits = hits + grouped["sum"].to_numpy(np.float64)
    return UnitScores(hits / len(predictions), sizes, len(predictions), np.array(rates), fixed, gold)


def _gold_digest(table: pd.DataFrame, unit: str) -> str:
    """A hash of the units and gold labels of one predictions table, in their order."""
    columns = table[[unit, "gold"]].astype(str)
    return hashlib.sha256(pd.util.hash_pandas_object(columns, index=False).to_numpy().tobytes()).hexdigest()[:16]


def paired_bootstrap(
    a: UnitScores, b: UnitScores, resamples: int = RESAMPLES, seed: int = 0, level: float = LEVEL
) -> dict[str, float]:
    """The difference rate(a) - rate(b), with its test-set and its seed-aware intervals.

    Resamples the units with replacement ``resamples`` times (seeded generators, so the
    intervals are reproducible) and takes the ``level`` central interval of the differences:
    the test-set interval. Where both models have two or more seeds, each replicate also gets
    the two models' seed draws (the module's docstring says why a t pivot and not a bootstrap
    of the seeds), which gives the seed-aware interval; a ``fixed`` side (the Bayes floor)
    contributes no seed part and needs no seeds.

    Returns:
        ``difference`` (the pooled difference), ``low``, ``high``, ``p_value`` (the seed-aware
        interval where ``seed_aware``, else the test-set one), ``test_low``, ``test_high``,
        ``test_p_value`` (test set only), ``seed_aware`` and ``units``. A p-value is two-sided:
        twice the smaller share of replicates on either side of zero, floored at 1 / resamples.
    """
    if a.gold and b.gold and a.gold != b.gold:
        raise InnError(
            "paired_bootstrap: the two models' predictions carry different gold labels, so they were "
            "scored on different test data (another corpus, walk set or tag column); compare runs of "
            "one prepared data set"
        )
    if not np.array_equal(a.sizes, b.sizes):
        raise InnError(
            f"paired_bootstrap: the two models were scored on different test sets "
            f"({len(a.sizes)} units / {int(a.sizes.sum())} items against "
            f"{len(b.sizes)} / {int(b.sizes.sum())})"
        )
    delta, sizes = a.hits - b.hits, a.sizes.astype(np.float64)
    rng = np.random.default_rng(seed)
    n = len(sizes)
    diffs = []
    for start in range(0, resamples, CHUNK):
        index = rng.integers(0, n, size=(min(CHUNK, resamples - start), n), dtype=np.int32)
        diffs.append(delta[index].sum(1) / sizes[index].sum(1))
    diffs = np.concatenate(diffs)
    difference = float(delta.sum() / sizes.sum())
    test_low, test_high, test_p = _interval(diffs, level, resamples)
    result = {
        "difference": difference,
        "test_low": test_low,
        "test_high": test_high,
        "test_p_value": test_p,
        "seed_aware": False,
        "units": n,
    }
    if not (np.isnan(a.seed_error) or np.isnan(b.seed_error)):
        draws = np.random.default_rng([seed, 1])  # its own stream: the units' indices stay as above
        ua2, ub2 = a.seed_error**2, b.seed_error**2
        spread = np.sqrt(ua2 + ub2)
        if spread > 0:  # Welch-Satterthwaite degrees of freedom of the two seed means' difference
            dof = (ua2 + ub2) ** 2 / sum(u**2 / (len(x.seed_rates) - 1) for u, x in ((ua2, a), (ub2, b)) if u > 0)
            seeded = diffs + spread * draws.standard_t(dof, resamples)
        else:
            seeded = diffs
        low, high, p_value = _interval(seeded, level, resamples)
        result.update(low=low, high=high, p_value=p_value, seed_aware=True)
    else:
        result.update(low=test_low, high=test_high, p_value=test_p)
    return result


def _interval(diffs: np.ndarray, level: float, resamples: int) -> tuple[float, float, float]:
    """The ``level`` central interval of replicated differences and their two-sided p-value."""
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(diffs, [tail, 1.0 - tail])
    below, above = np.mean(diffs <= 0), np.mean(diffs >= 0)
    return float(low), float(high), float(max(min(1.0, 2.0 * min(below, above)), 1.0 / resamples))
