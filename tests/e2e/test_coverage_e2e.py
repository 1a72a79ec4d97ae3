"""The end-to-end tests of tests/unit/test_coverage.py: the coverage simulations (thousands
of simulated studies each)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tiedvsuntied.analysis.arms import interaction_interval
from tiedvsuntied.analysis.stats import seed_interval

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
