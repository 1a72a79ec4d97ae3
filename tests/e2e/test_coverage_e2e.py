"""The end-to-end tests of tests/unit/test_coverage.py: the coverage simulations (thousands
of simulated studies each)."""

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


# The fourth edition's intervals (experiments/size_or_tokens): 4 seeds, in bits per byte, made by
# its reading's own seed_summary, under three shapes of the seed-to-seed spread with the same sd:
# normal, heavy-tailed (Student t, 3 df) and right-skewed (lognormal, sigma 0.5: skewness 1.75),
# since 4 seeds cannot tell the shape of their spread
SHAPES = {
    "normal": lambda rng, size: rng.standard_normal(size),
    "t3": lambda rng, size: rng.standard_t(3, size) / np.sqrt(3),
    "lognormal": lambda rng, size: (
        (rng.lognormal(0, 0.5, size) - np.exp(0.125)) / np.sqrt((np.exp(0.25) - 1) * np.exp(0.25))
    ),
}
SEED_SD_BPB = 0.0025  # bpb: P's sd over seeds as HYPOTHESES.md's power assumes it ("Power")
TRUE_P = 0.0185  # the tokens reading's P


@pytest.mark.parametrize("shape, at_least", [("normal", 0.93), ("t3", 0.93), ("lognormal", 0.9)])
def test_the_fourth_editions_interval_at_4_seeds_covers_under_each_shape(shape, at_least):
    rng = np.random.default_rng(len(shape))
    studies = TRUE_P + SEED_SD_BPB * SHAPES[shape](rng, (STUDIES, 4))
    assert abs(studies.std() - SEED_SD_BPB) < 0.05 * SEED_SD_BPB  # each shape at the same sd
    rows = [seed_summary(pd.Series(d)) for d in studies]
    coverage = covered([(row["low"], row["high"]) for row in rows], TRUE_P)
    print(f"4 seeds, {shape}: t {coverage:.3f}")
    assert coverage >= at_least, coverage
