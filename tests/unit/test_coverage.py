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

from tiedvsuntied.analysis.stats import seed_interval, seed_summary


def test_one_seed_has_no_interval_and_identical_seeds_a_point():
    mean, low, high = seed_interval([0.1])
    assert mean == pytest.approx(0.1) and np.isnan(low) and np.isnan(high)
    assert seed_summary(pd.Series([0.1]))["method"] == "1 seed: no interval (needs 2)"
    assert seed_interval([0.2, 0.2, 0.2])[1:] == (0.2, 0.2)
    mean, low, high = seed_interval([0.0, 1.0, 2.0])  # t(2) quantile 4.303, sem 0.577
    assert (mean, high - mean) == pytest.approx((1.0, 4.303 * 3**-0.5), rel=1e-3)
