"""Coverage of the tables' intervals, by simulation: how often a nominal-95% interval covers a
known true difference, with seed and evaluation-window noise like the measured ones.

A simulated study: per seed, tied − untied over N_WINDOWS evaluation windows (the windows are the
same text in both arms, so their difficulty cancels; what is left is SEED_SD between seeds and
WINDOW_SD per window), averaged over the windows as the summary's test loss is. The tables'
functions then make the interval from those per-seed means: ``seed_interval`` (cells)
and ``interaction_interval`` (the interaction). Numbers in docs/figures.md.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tiedvsuntied.analysis.arms import interaction_interval
from tiedvsuntied.analysis.stats import seed_interval, seed_summary

SEED_SD = 0.025  # nats: the spread of one config's paired difference across seeds (measured)
WINDOW_SD = 0.3  # nats: per-window noise of a paired difference
N_WINDOWS = 300
TRUE_DIFF = -0.03  # tied − untied
TRUE_INTERACTION = 0.05  # tie effect at level A minus at level B
STUDIES = 2000


def seed_means(rng: np.random.Generator, n_seeds: int, truth: float) -> np.ndarray:
    """STUDIES x n_seeds paired differences: truth + seed noise + the mean of window noise."""
    seed_effect = truth + SEED_SD * rng.standard_normal((STUDIES, n_seeds))
    windows = WINDOW_SD * rng.standard_normal((STUDIES, n_seeds, N_WINDOWS))
    return seed_effect + windows.mean(axis=2)


def covered(intervals: list[tuple[float, float]], truth: float) -> float:
    low, high = np.array(intervals).T
    return float(np.mean((low <= truth) & (truth <= high)))


@pytest.mark.parametrize("n_seeds", [3, 5])
def test_t_interval_over_seeds_covers(n_seeds):
    rng = np.random.default_rng(n_seeds)
    studies = seed_means(rng, n_seeds, TRUE_DIFF)
    coverage = covered([seed_interval(d)[1:] for d in studies], TRUE_DIFF)
    print(f"{n_seeds} seeds: t {coverage:.3f}")
    assert coverage >= 0.93, coverage


@pytest.mark.parametrize("n_seeds", [3, 5])
def test_interaction_interval_covers(n_seeds):
    rng = np.random.default_rng(10 + n_seeds)
    # each level's runs are their own: the two effects of a seed carry independent noise
    at_first = seed_means(rng, n_seeds, TRUE_DIFF + TRUE_INTERACTION)
    at_second = seed_means(rng, n_seeds, TRUE_DIFF)
    seeds = pd.RangeIndex(n_seeds, name="seed")
    rows = [
        interaction_interval(pd.Series(a, seeds), pd.Series(b, seeds))
        for a, b in zip(at_first, at_second, strict=True)
    ]
    assert all(row["n_seeds"] == n_seeds for row in rows)
    coverage = covered([(row["low"], row["high"]) for row in rows], TRUE_INTERACTION)
    print(f"{n_seeds} seeds: interaction t {coverage:.3f}")
    assert coverage >= 0.93, coverage


def test_one_seed_has_no_interval_and_identical_seeds_a_point():
    mean, low, high = seed_interval([0.1])
    assert mean == pytest.approx(0.1) and np.isnan(low) and np.isnan(high)
    assert seed_summary(pd.Series([0.1]))["method"] == "1 seed: no interval (needs 2)"
    assert seed_interval([0.2, 0.2, 0.2])[1:] == (0.2, 0.2)
    mean, low, high = seed_interval([0.0, 1.0, 2.0])  # t(2) quantile 4.303, sem 0.577
    assert (mean, high - mean) == pytest.approx((1.0, 4.303 * 3**-0.5), rel=1e-3)
