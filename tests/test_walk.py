"""Biased random walks: the generator's statistics, labels and reproducibility."""

from __future__ import annotations

import pytest
import torch

from inn.data.walk import generate_walks, load_walks, save_walks
from inn.errors import InnError

DIM = 3


def test_shapes_and_labels():
    walks = generate_walks(2_000, b=1.0, dim=DIM, seed=0, max_len=40)
    assert len(walks) == 2_000
    for x, y in walks:
        assert x.shape == (len(y), DIM) and x.dtype == torch.float32 and y.dtype == torch.long
        # 0...0 1...1 ending in 1: one change at most, never back.
        assert y[-1] == 1 and (y[1:] >= y[:-1]).all()


def test_lengths_uniform_on_1_to_max_len():
    lengths = torch.tensor([len(y) for _, y in generate_walks(40_000, 1.0, DIM, seed=1)])
    counts = torch.bincount(lengths, minlength=41)[1:].float()
    assert lengths.min() == 1 and lengths.max() == 40
    expected = len(lengths) / 40
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < 80  # chi-square with 39 degrees of freedom: 80 is p < 1e-4


def _steps(walks, dim=DIM):
    """Per walk: its steps x_t - x_{t-1} (float64) and labels."""
    return [(torch.diff(torch.cat([torch.zeros(1, dim), x]), dim=0).double(), y) for x, y in walks]


def test_pre_change_steps_are_unbiased_with_unit_variance():
    before = torch.cat([s[y == 0] for s, y in _steps(generate_walks(20_000, b=2.0, dim=DIM, seed=2))])
    assert before.shape[0] > 50_000
    assert before.mean(0).abs().max() < 0.02
    assert (before.var(0) - 1).abs().max() < 0.03


def test_post_change_mean_step_is_b_along_one_direction():
    b = 2.0
    norms, orthogonal = [], []
    for steps, y in _steps(generate_walks(5_000, b=b, dim=DIM, seed=3, direction="unit")):
        steps = steps[1:][(y[1:] == 1) & (y[:-1] == 1)]  # full post-change steps
        if len(steps) < 20:
            continue
        mean = steps.mean(0)
        norms.append(mean.norm())
        # The steps' spread across the walk direction stays unit variance.
        direction = mean / mean.norm()
        residual = steps - (steps @ direction)[:, None] * direction
        orthogonal.append(residual.pow(2).sum(1).mean() / (DIM - 1))
    norms, orthogonal = torch.stack(norms), torch.stack(orthogonal)
    # |mean of m steps| ~ b plus noise of variance 1/m per axis.
    assert abs(norms.mean() - b) < 0.15
    assert abs(orthogonal.mean() - 1) < 0.1


def test_gaussian_direction_has_unit_variance_per_axis():
    # v ~ N(0, I_d): the mean of m full post-change steps is b v plus noise of variance 1/m
    # per axis, so across walks each axis varies by b^2 + E[1/m].
    b = 2.0
    means, noise = [], []
    for steps, y in _steps(generate_walks(8_000, b=b, dim=DIM, seed=3)):
        steps = steps[1:][(y[1:] == 1) & (y[:-1] == 1)]
        if len(steps) >= 10:
            means.append(steps.mean(0))
            noise.append(1.0 / len(steps))
    means = torch.stack(means)
    assert means.mean(0).abs().max() < 0.15
    assert (means.var(0) - sum(noise) / len(noise) - b**2).abs().max() < 0.5
    assert abs(means.var(0).mean() - sum(noise) / len(noise) - b**2) < 0.2


def test_unknown_direction_is_one_line():
    with pytest.raises(InnError, match="unknown direction 'sphere'"):
        generate_walks(5, 1.0, DIM, seed=0, direction="sphere")


def test_first_post_change_step_gets_a_uniform_fraction_of_the_bias():
    # In one dimension v = +-1; the fraction t - t' of the first biased step is uniform on
    # (0, 1], so that step moves b/2 along v on average.
    b = 6.0
    first = []
    for steps, y in _steps(generate_walks(20_000, b=b, dim=1, seed=4, direction="unit"), dim=1):
        ones = (y == 1).nonzero()
        if len(ones) >= 6:
            sign = torch.sign(steps[ones[1:, 0], 0].sum())  # later steps reveal v
            first.append(sign * steps[ones[0, 0], 0])
    first = torch.stack(first)
    assert abs(first.mean() - b / 2) < 0.1
    assert abs(first.var() - (1 + b**2 / 12)) < 0.3  # unit noise plus b * U(0, 1]


def test_fixed_length_walks():
    walks = generate_walks(30, 0.5, DIM, seed=5, max_len=60, min_len=60)
    assert {len(y) for _, y in walks} == {60}


def test_seeds_reproducible_and_distinct(tmp_path):
    a = generate_walks(50, 0.5, DIM, seed=7)
    b = generate_walks(50, 0.5, DIM, seed=7)
    c = generate_walks(50, 0.5, DIM, seed=8)
    assert all(torch.equal(xa, xb) and torch.equal(ya, yb) for (xa, ya), (xb, yb) in zip(a, b))
    assert not all(xa.shape == xc.shape and torch.equal(xa, xc) for (xa, _), (xc, _) in zip(a, c))
    save_walks(tmp_path / "w.pt", a, b=0.5)
    stored = load_walks(tmp_path / "w.pt")
    assert stored["b"] == 0.5 and stored["x"].shape == (50, int(stored["lengths"].max()), DIM)
    for i, (x, y) in enumerate(a):
        n = int(stored["lengths"][i])
        assert torch.equal(stored["x"][i, :n], x) and torch.equal(stored["y"][i, :n], y)
        assert (stored["x"][i, n:] == 0).all()
