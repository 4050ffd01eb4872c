"""Paired bootstrap intervals on hand-made predictions whose answer is known, and the
seed-aware interval's coverage by simulation."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from inn.errors import InnError
from inn.experiment.stats import UnitScores, paired_bootstrap, unit_scores


def predictions(correct_per_sentence: list[list[bool]]) -> pd.DataFrame:
    """A predictions.tsv table: gold tag 'A', predicted 'A' where correct, 'B' elsewhere."""
    rows = [
        (s, t, "A", "A" if ok else "B") for s, flags in enumerate(correct_per_sentence) for t, ok in enumerate(flags)
    ]
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
    with pytest.raises(InnError, match="different test data"):
        paired_bootstrap(a, b)
    with pytest.raises(InnError, match="different test data"):
        unit_scores([predictions([[True] * 3] * 5), predictions([[True] * 2] * 5)], "sentence", "correct")
    # the same sizes, other gold labels (another tag column, another walk set): refused too
    other = predictions([[True] * 3] * 5).assign(gold="C", predicted="C")
    with pytest.raises(InnError, match="different gold labels"):
        paired_bootstrap(a, unit_scores([other], "sentence", "correct"))
    with pytest.raises(InnError, match="different gold labels"):
        unit_scores([predictions([[True] * 3] * 5), other], "sentence", "correct")
    # without gold digests (scores built by hand) the sizes still decide
    bare = UnitScores(np.ones(6), np.ones(6, dtype=int), 1)
    with pytest.raises(InnError, match="different test sets"):
        paired_bootstrap(UnitScores(np.ones(5), np.ones(5, dtype=int), 1), bare)


def test_tags_that_look_missing_are_read_as_tags(tmp_path):
    """A tag set with NA, NULL, nan or 01 (Korean Sejong's NA, say): a predictions.tsv read back
    scores them as written, right where gold and prediction agree."""
    from inn.tables import read_tsv, write_tsv

    tags = ["NA", "NULL", "nan", "N/A", "None", "01", "1"]
    table = pd.DataFrame(
        {
            "sentence": [0] * 7,
            "word": ["null", "NA", "x", "y", "z", "01", "1"],
            "gold": tags,
            "predicted": tags[:6] + ["01"],
        }
    )
    write_tsv(tmp_path / "predictions.tsv", table)
    read = read_tsv(tmp_path / "predictions.tsv")
    assert read["gold"].tolist() == tags and read["word"].tolist() == table["word"].tolist()
    assert unit_scores([read], "sentence", "correct").seed_rates.tolist() == [6 / 7]


def test_a_commit_of_digits_alone_is_read_as_written(tmp_path):
    """A history's short commit hash can be all digits (1290490 was one of this project's): read
    back it stays that text, leading zero included, not a number."""
    from inn.tables import read_tsv, write_tsv

    write_tsv(tmp_path / "history.tsv", pd.DataFrame({"epoch": [1, 2], "commit": ["0123456", "1290490"]}))
    assert read_tsv(tmp_path / "history.tsv")["commit"].tolist() == ["0123456", "1290490"]


def test_whole_numbers_are_written_exactly(tmp_path):
    """Parameter counts in a column with gaps (a float column) keep every digit; fractions keep six."""
    from inn.tables import read_tsv, write_tsv

    table = pd.DataFrame(
        {
            "parameters": [2_049_001.0, np.nan, 10_997_485.0],
            "error": [0.123456789, 0.5, np.nan],
            "b": [2.0, 0.5, 1.0],
            "perplexity": [math.exp(700.0), 1.5, 2.0],
        }
    )
    write_tsv(tmp_path / "t.tsv", table)
    read = read_tsv(tmp_path / "t.tsv")
    assert read.parameters.tolist()[::2] == [2_049_001, 10_997_485] and pd.isna(read.parameters[1])
    assert read.error.tolist()[:2] == [0.123457, 0.5] and read.b.tolist() == [2.0, 0.5, 1.0]
    assert read.perplexity[0] == pytest.approx(math.exp(700.0), rel=1e-5)  # huge, whole, but no count


def _seeded(rng, sizes, correct_rates):
    """One model's predictions.tsv tables: seed i right on each token with ``correct_rates[i]``."""
    return [predictions([list(rng.random(n) < rate) for n in sizes]) for rate in correct_rates]


def test_seeds_that_disagree_widen_the_interval_past_zero():
    # A's two seeds disagree widely (90% and 96% correct), B's sit at 92%: pooled, A is ahead by
    # about 1 point, and over 3,000 sentences the test set alone says so; the seeds do not.
    rng = np.random.default_rng(7)
    sizes = rng.integers(5, 30, size=3_000)
    a = unit_scores(_seeded(rng, sizes, [0.90, 0.96]), "sentence", "correct")
    b = unit_scores(_seeded(rng, sizes, [0.92, 0.92]), "sentence", "correct")
    result = paired_bootstrap(a, b, resamples=4_000)
    assert result["seed_aware"]
    assert result["test_low"] > 0  # test-set noise alone: distinguishable
    assert result["low"] < 0 < result["high"]  # with the seeds: not
    assert result["p_value"] > 0.05 > result["test_p_value"]


def test_identical_seeds_reduce_it_to_the_test_set_interval():
    rng = np.random.default_rng(8)
    sizes = rng.integers(5, 30, size=400)
    one_a, one_b = _seeded(rng, sizes, [0.93]), _seeded(rng, sizes, [0.91])
    single = paired_bootstrap(unit_scores(one_a, "sentence", "correct"), unit_scores(one_b, "sentence", "correct"))
    assert not single["seed_aware"] and (single["low"], single["high"]) == (single["test_low"], single["test_high"])
    tripled = paired_bootstrap(
        unit_scores(one_a * 3, "sentence", "correct"), unit_scores(one_b * 3, "sentence", "correct")
    )
    assert tripled["seed_aware"]
    for key in ("difference", "low", "high", "p_value", "test_low", "test_high"):
        assert tripled[key] == single[key]


def test_the_point_estimate_is_the_pooled_difference():
    rng = np.random.default_rng(9)
    sizes = rng.integers(5, 30, size=300)
    runs_a, runs_b = _seeded(rng, sizes, [0.90, 0.93, 0.95]), _seeded(rng, sizes, [0.91, 0.92, 0.94])
    rate = lambda table: (table.gold == table.predicted).mean()  # noqa: E731
    pooled = np.mean([rate(t) for t in runs_a]) - np.mean([rate(t) for t in runs_b])
    result = paired_bootstrap(unit_scores(runs_a, "sentence", "correct"), unit_scores(runs_b, "sentence", "correct"))
    assert result["difference"] == pytest.approx(pooled, abs=1e-12)
    assert result["low"] < result["difference"] < result["high"]


def test_seed_aware_interval_covers_the_true_difference_90_to_99_percent_of_the_time():
    """Calibration by simulation: 3 seeds per model, seed-to-seed spread (sd 0.03 in accuracy)
    well above the test-set noise (about 0.009 on 200 sentences), a fresh test set of sentences
    and fresh seeds in each of 300 replicates; the true difference is +0.02. The test-set
    interval alone covers it far less often."""
    rng = np.random.default_rng(2017)
    true, tau, replicates = 0.02, 0.03, 300

    def model(p, sizes, effect):
        hits = [rng.binomial(sizes, np.clip(p + effect + rng.normal(0, tau), 0, 1)).astype(float) for _ in range(3)]
        return UnitScores(np.mean(hits, 0), sizes, 3, np.array([h.sum() / sizes.sum() for h in hits]))

    covered = covered_by_test_set = 0
    for replicate in range(replicates):
        sizes, p = rng.integers(5, 30, 200), rng.uniform(0.3, 0.8, 200)
        result = paired_bootstrap(model(p, sizes, true), model(p, sizes, 0.0), resamples=2_000, seed=replicate)
        covered += result["low"] <= true <= result["high"]
        covered_by_test_set += result["test_low"] <= true <= result["test_high"]
    assert 0.90 <= covered / replicates <= 0.99
    assert covered_by_test_set / replicates < 0.8
