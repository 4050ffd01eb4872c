"""The walk task's Bayes-optimal floor against brute-force integration and known limits."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from scipy.special import logsumexp

from inn.data.walk import generate_walks, save_walks
from inn.errors import InnError
from inn.experiment.walk_floor import bayes_error, change_posterior, walk_floor


def _padded(walks):
    lengths = np.array([len(y) for _, y in walks])
    width, dim = lengths.max(), walks[0][0].shape[1]
    x = np.zeros((len(walks), width, dim))
    y = np.zeros((len(walks), width), dtype=np.int64)
    for i, (xi, yi) in enumerate(walks):
        x[i, : len(yi)], y[i, : len(yi)] = xi.numpy(), yi.numpy()
    return x, lengths, y


def _v_grid(dim: int, direction: str):
    """Points v and log prior weights that integrate over v's distribution."""
    if direction == "unit" and dim == 1:
        return np.array([[1.0], [-1.0]]), np.log([0.5, 0.5])
    if direction == "unit":  # d = 2: the circle
        theta = np.linspace(0, 2 * np.pi, 720, endpoint=False)
        return np.stack([np.cos(theta), np.sin(theta)], 1), np.full(720, -np.log(720))
    axis = np.linspace(-6, 6, 61)
    grid = np.stack(np.meshgrid(*[axis] * dim, indexing="ij"), -1).reshape(-1, dim)
    return grid, -0.5 * (grid**2).sum(1)  # unnormalised N(0, I): constants cancel


def _brute_force_posterior(x, n: int, b: float, direction: str, per_unit: int = 100):
    """P(t' < t | x) by the generative density itself, summed over grids of t' and v."""
    increments = np.diff(x[:n], axis=0, prepend=np.zeros((1, x.shape[1])))  # (n, d)
    change = (np.arange(n * per_unit) + 0.5) / per_unit  # midpoints on [0, n)
    share = np.clip(np.arange(1, n + 1)[None, :] - change[:, None], 0, 1)  # (T', n)
    v, log_prior = _v_grid(x.shape[1], direction)
    mean = b * share[:, None, :, None] * v[None, :, None, :]  # (T', V, n, d)
    log_lik = -0.5 * ((increments[None, None] - mean) ** 2).sum((-1, -2)) + log_prior[None, :]
    log_post = logsumexp(log_lik, axis=1)
    post = np.exp(log_post - logsumexp(log_post))
    return np.array([post[change < t].sum() for t in range(1, n + 1)])


@pytest.mark.parametrize("direction", ["unit", "gaussian"])
@pytest.mark.parametrize("dim", [1, 2])
def test_posterior_matches_brute_force_integration(direction, dim):
    walks = generate_walks(3, b=1.5, dim=dim, seed=10 + dim, max_len=5, min_len=4, direction=direction)
    x, lengths, _ = _padded(walks)
    ours = change_posterior(x, lengths, 1.5, direction)
    for i, n in enumerate(lengths):
        reference = _brute_force_posterior(x[i], int(n), 1.5, direction)
        np.testing.assert_allclose(ours[i, :n], reference, atol=2e-4)
        assert (ours[i, n:] == 0).all()


def test_no_bias_leaves_the_prior():
    # b = 0: nothing in x speaks about t', so P(t' < t) = t / N and the floor is the error of
    # the rule "1 past the middle" (odd lengths only: at t = N / 2 the posterior ties at 0.5).
    walks = [w for w in generate_walks(600, b=0.0, dim=3, seed=1) if len(w[1]) % 2 == 1]
    x, lengths, y = _padded(walks)
    posterior = change_posterior(x, lengths, 0.0, "gaussian")
    steps = np.arange(1, x.shape[1] + 1)[None, :]
    real = steps <= lengths[:, None]
    np.testing.assert_allclose(posterior[real], (steps / lengths[:, None])[real], atol=1e-12)
    prior_rule = (steps > lengths[:, None] / 2).astype(int)
    errors, total = bayes_error(x, lengths, y, 0.0, "unit")
    assert total == real.sum()
    assert errors == int(((prior_rule != y) & real).sum()) > 0


@pytest.mark.parametrize("direction", ["unit", "gaussian"])
def test_large_bias_is_almost_free_of_error(direction):
    x, lengths, y = _padded(generate_walks(500, b=8.0, dim=10, seed=2, direction=direction))
    errors, steps = bayes_error(x, lengths, y, 8.0, direction)
    assert errors / steps < 0.01


def test_floor_orders_with_bias_and_direction():
    floors = {}
    for direction in ("unit", "gaussian"):
        for b in (0.25, 1.0):
            x, lengths, y = _padded(generate_walks(1_000, b=b, dim=10, seed=3, direction=direction))
            errors, steps = bayes_error(x, lengths, y, b, direction)
            floors[direction, b] = errors / steps
    # A larger bias is easier; in d = 10 a Gaussian v has |v|^2 about 10, a far larger step.
    assert floors["gaussian", 1.0] < floors["gaussian", 0.25]
    assert floors["unit", 1.0] < floors["unit", 0.25]
    assert floors["gaussian", 1.0] < floors["unit", 1.0] / 2


def test_floor_on_a_fixed_sample_equals_the_reference_figure(tmp_path):
    # Reference: 20,000 walks (d = 10, v ~ N(0, I), b = 0.5, seed 101) had a floor of 0.0777;
    # this sample of 2,000 independent walks must agree within four of its standard errors
    # (estimated over walks, since steps within a walk are correlated).
    walks = generate_walks(2_000, b=0.5, dim=10, seed=7)
    save_walks(tmp_path / "test.pt", walks, b=0.5, dim=10, direction="gaussian")
    row, table = walk_floor(tmp_path / "test.pt")
    assert row["direction"] == "gaussian" and row["dim"] == 10 and row["sequences"] == 2_000
    lengths = np.array([len(y) for _, y in walks])
    assert len(table) == row["steps"] == lengths.sum()
    assert row["bayes_errors"] == (table.gold != table.predicted).sum()
    per_walk = (table.gold != table.predicted).groupby(table.sequence).sum().to_numpy()
    # Ratio estimator's standard error over walks.
    se = np.sqrt(((per_walk - row["bayes_error"] * lengths) ** 2).sum()) / lengths.sum()
    assert abs(row["bayes_error"] - REFERENCE_FLOOR) < 4 * se
    assert 0.002 < se < 0.01


def test_the_floor_names_the_walk_set_it_was_computed_on(tmp_path):
    """In a prepared walk folder the floor carries the folder's fingerprint (collect pairs it only
    with runs of those walks); a walk file outside one has none to give."""
    from inn.data.fingerprint import write_record

    for split in ("train", "dev", "test"):
        save_walks(tmp_path / f"{split}.pt", generate_walks(20, 0.5, 3, seed=1), b=0.5, dim=3, direction="gaussian")
    fingerprint = write_record(tmp_path)
    assert walk_floor(tmp_path / "test.pt")[0]["data_fingerprint"] == fingerprint
    (tmp_path / "prepared.json").unlink()
    assert "data_fingerprint" not in walk_floor(tmp_path / "test.pt")[0]


def test_walk_file_without_its_generator_settings(tmp_path):
    save_walks(tmp_path / "old.pt", generate_walks(5, 0.5, 3, seed=0), b=0.5, dim=3)
    with pytest.raises(InnError, match="without its generator's 'direction'"):
        walk_floor(tmp_path / "old.pt")


def test_float32_input_and_chunking_agree():
    walks = generate_walks(300, b=0.75, dim=4, seed=5)
    x, lengths, y = _padded(walks)
    whole = change_posterior(x, lengths, 0.75, "gaussian")
    parts = np.concatenate(
        [
            change_posterior(torch.tensor(x[i : i + 7], dtype=torch.float32), lengths[i : i + 7], 0.75, "gaussian")
            for i in range(0, 300, 7)
        ]
    )
    np.testing.assert_allclose(parts, whole, atol=1e-5)


REFERENCE_FLOOR = 0.0777


def test_survey_lists_every_cell(tmp_path):
    from inn.experiment.walk_floor import survey_main

    survey_main(
        [
            "--directions",
            "gaussian",
            "--dims",
            "1",
            "4",
            "--b",
            "1.0",
            "--walks",
            "200",
            "--out",
            str(tmp_path / "s.tsv"),
        ]
    )
    table = pd.read_csv(tmp_path / "s.tsv", sep="\t")
    assert table[["direction", "dim", "b"]].values.tolist() == [["gaussian", 1, 1.0], ["gaussian", 4, 1.0]]
    assert (table.bayes_error.between(0, 0.5)).all() and table.bayes_error[1] < table.bayes_error[0]
