"""Paired bootstrap intervals on hand-made predictions whose answer is known."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from inn.errors import InnError
from inn.experiment.stats import UnitScores, paired_bootstrap, unit_scores


def predictions(correct_per_sentence: list[list[bool]]) -> pd.DataFrame:
    """A predictions.tsv table: gold tag 'A', predicted 'A' where correct, 'B' elsewhere."""
    rows = [(s, t, "A", "A" if ok else "B") for s, flags in enumerate(correct_per_sentence)
            for t, ok in enumerate(flags)]
    return pd.DataFrame(rows, columns=["sentence", "position", "gold", "predicted"])


def test_identical_models_differ_by_nothing():
    rng = np.random.default_rng(0)
    table = predictions([list(rng.random(rng.integers(1, 30)) < 0.9) for _ in range(200)])
    a = unit_scores([table], "sentence", "correct")
    result = paired_bootstrap(a, a, resamples=2_000)
    assert result["difference"] == result["low"] == result["high"] == 0.0
    assert result["p_value"] == 1.0 and result["units"] == 200


def test_a_uniform_gain_has_a_point_interval():
    # A is right on every token; B is wrong on the first token of every 4-token sentence. Every
    # resample of sentences then has A - B = 1/4 exactly.
    a = unit_scores([predictions([[True] * 4] * 50)], "sentence", "correct")
    b = unit_scores([predictions([[False, True, True, True]] * 50)], "sentence", "correct")
    result = paired_bootstrap(a, b, resamples=1_000)
    assert result["difference"] == pytest.approx(0.25)
    assert result["low"] == pytest.approx(0.25) and result["high"] == pytest.approx(0.25)
    assert result["p_value"] == pytest.approx(1e-3)


def test_interval_width_matches_the_ratio_estimators_standard_error():
    # Independent sentences of random length; A and B differ by noise around +0.02. The
    # bootstrap's 95% interval must match +-1.96 times the delta-method standard error of
    # sum(delta) / sum(size), and must cover the true difference.
    rng = np.random.default_rng(1)
    sizes = rng.integers(5, 40, size=2_000)
    a = [list(rng.random(n) < 0.92) for n in sizes]
    b = [list(rng.random(n) < 0.90) for n in sizes]
    sa, sb = unit_scores([predictions(a)], "sentence", "correct"), unit_scores([predictions(b)], "sentence", "correct")
    result = paired_bootstrap(sa, sb, seed=3)
    delta = sa.hits - sb.hits
    d = delta.sum() / sizes.sum()
    se = np.sqrt(((delta - d * sizes) ** 2).sum()) / sizes.sum()
    assert (result["high"] - result["low"]) == pytest.approx(2 * 1.96 * se, rel=0.08)
    assert result["low"] < 0.02 < result["high"] and result["low"] > 0  # distinguishable from zero


def test_seeds_are_pooled_per_sentence():
    first = predictions([[True, True], [False, False], [True, False]])
    second = predictions([[True, False], [True, False], [True, True]])
    pooled = unit_scores([first, second], "sentence", "correct")
    assert pooled.seeds == 2 and pooled.hits.tolist() == [1.5, 0.5, 1.5] and pooled.sizes.tolist() == [2, 2, 2]
    assert pooled.rate == pytest.approx((3 / 6 + 4 / 6) / 2)  # the mean of the seeds' accuracies
    wrong = unit_scores([first], "sentence", "wrong")
    assert wrong.hits.tolist() == [0, 2, 1]


def test_reproducible_for_a_seed():
    rng = np.random.default_rng(4)
    a = UnitScores(rng.integers(0, 10, 300).astype(float), np.full(300, 10), 1)
    b = UnitScores(rng.integers(0, 10, 300).astype(float), np.full(300, 10), 1)
    assert paired_bootstrap(a, b, seed=5) == paired_bootstrap(a, b, seed=5)
    assert paired_bootstrap(a, b, seed=5)["low"] != paired_bootstrap(a, b, seed=6)["low"]


def test_different_test_sets_are_refused():
    a = unit_scores([predictions([[True] * 3] * 5)], "sentence", "correct")
    b = unit_scores([predictions([[True] * 3] * 6)], "sentence", "correct")
    with pytest.raises(InnError, match="different test sets"):
        paired_bootstrap(a, b)
    with pytest.raises(InnError, match="different test sets"):
        unit_scores([predictions([[True] * 3] * 5), predictions([[True] * 2] * 5)], "sentence", "correct")
