"""Coverage of the second edition's intervals (experiments/tie_x_init_books), by simulation at
the sizes measured there: each seed holds out its own books (data.heldout_fold = seed), so a
per-seed paired difference carries a seed component and the mean of its held-out books' own
effects. A nominal-95% t-interval over the 5 per-seed differences must cover the true mean
effect (over the population of books) at least 93% of the time, also when the books' effects
are heavy-tailed or skewed.

Sizes (nats), measured on the lr check's validation books (fold 0's 25 books, nano, seed 0):
the per-book tied − untied effect had sd 0.033 (init 0.02) to 0.060 (init 1.0) across books;
the seed sd of a paired difference was 0.028-0.040 in the first edition. The simulation uses
the larger of each and books' effects twice as spread.
"""

from __future__ import annotations

import numpy as np
import pytest

from tiedvsuntied.analysis.stats import seed_interval

SEEDS = 5
BOOKS = 22  # books in a test fold (fold 0: 22; folds 0-4: 19-25)
SEED_SD = 0.040
BOOK_SD = 0.060
TRUTH = 0.05
BOOK_SCALE = 2.0  # books' effects twice as spread as measured
STUDIES = 2000  # coverage's standard error ~0.005


def book_draws(rng: np.random.Generator, shape: tuple[int, ...], kind: str) -> np.ndarray:
    """Per-book effects around 0 with sd BOOK_SD: normal, heavy-tailed (t, 3 df) or skewed
    (a centred lognormal: a few books with a much larger effect)."""
    if kind == "normal":
        return BOOK_SD * rng.standard_normal(shape)
    if kind == "heavy":
        return BOOK_SD * rng.standard_t(3, shape) / np.sqrt(3.0)
    sigma = 1.0
    draws = rng.lognormal(0.0, sigma, shape)
    mean, sd = np.exp(sigma**2 / 2), np.sqrt((np.exp(sigma**2) - 1) * np.exp(sigma**2))
    return BOOK_SD * (draws - mean) / sd


def per_seed(rng: np.random.Generator, truth: float, kind: str, book_scale: float) -> np.ndarray:
    """STUDIES x SEEDS paired differences: truth + seed noise + the mean of the fold's books."""
    books = book_scale * book_draws(rng, (STUDIES, SEEDS, BOOKS), kind)
    return truth + SEED_SD * rng.standard_normal((STUDIES, SEEDS)) + books.mean(axis=2)


def coverage(intervals: np.ndarray, truth: float) -> float:
    low, high = intervals.T
    return float(np.mean((low <= truth) & (truth <= high)))


@pytest.mark.parametrize("kind", ["normal", "heavy", "skewed"])
def test_the_seed_t_interval_covers_with_books_held_out_per_seed(kind):
    rng = np.random.default_rng([1, len(kind)])
    studies = per_seed(rng, TRUTH, kind, BOOK_SCALE)
    intervals = np.array([seed_interval(d)[1:] for d in studies])
    got = coverage(intervals, TRUTH)
    print(f"{kind} books: t-interval over {SEEDS} seeds covers {got:.3f}")
    assert 0.93 <= got <= 0.975, got


def test_the_interaction_interval_covers_with_books_held_out_per_seed():
    # table B (studies.tie_x_init_books.analysis.contrasts): tying's effect at one init std minus
    # at another, per seed; each effect's runs are their own (independent seed noise), a seed's
    # books are shared
    rng = np.random.default_rng(7)
    books = book_draws(rng, (STUDIES, SEEDS, BOOKS), "heavy")
    first = (
        0.15
        + SEED_SD * rng.standard_normal((STUDIES, SEEDS))
        + BOOK_SCALE * 1.5 * books.mean(axis=2)
    )
    second = (
        TRUTH + SEED_SD * rng.standard_normal((STUDIES, SEEDS)) + BOOK_SCALE * books.mean(axis=2)
    )
    intervals = np.array([seed_interval(d)[1:] for d in first - second])
    got = coverage(intervals, 0.15 - TRUTH)
    print(f"interaction: t-interval over {SEEDS} seeds covers {got:.3f}")
    assert 0.93 <= got <= 0.975, got
