"""Untied's own multipliers at V = 8,192 (sign_flip's multiplier rule): the rule waits until the
grid and the point's seeds are all in (each cell read from the shipped bundles:
tests/e2e/test_mult2d_e2e.py)."""

from __future__ import annotations

import pandas as pd
import pytest

from tiedvsuntied.studies.sign_flip import pieces


@pytest.fixture(scope="module")
def mult2d():
    return pieces


def test_an_arm_moves_only_when_its_best_pair_gains_more_than_the_seed_sd(mult2d):
    table = pd.DataFrame(2.0, index=mult2d.MULTS, columns=mult2d.MULTS)
    table.loc[4.0, 4.0] = 1.995  # the shared pair
    table.loc[16.0, 4.0] = 1.985  # 0.01 ahead of it, at the embedding's high edge
    table.loc[32.0, 4.0] = 1.99  # x2 beyond it ran and lost
    table = mult2d_grid(table)
    rule = mult2d.verdict(table, sd=0.005, seeds=4)
    assert rule["best"] == (16.0, 4.0) and rule["run_next"] == [] and rule["moves"] is True
    assert mult2d.verdict(table, sd=0.02, seeds=4)["moves"] is False
    assert mult2d.verdict(table, sd=0.005, seeds=3)["moves"] is None  # seeds not all in
    table.loc[1.0, 1.0] = float("nan")
    rule = mult2d.verdict(table, sd=0.005, seeds=4)  # the first grid not whole: no edge yet
    assert rule["moves"] is None and rule["gain_over_shared"] == pytest.approx(0.01)


def test_a_best_pair_at_an_edge_names_the_run_x2_beyond_it_and_waits_for_it(mult2d):
    table = pd.DataFrame(2.0, index=mult2d.MULTS, columns=mult2d.MULTS)
    table.loc[16.0, 1.0] = 1.98  # a corner: both multipliers at an edge
    rule = mult2d.verdict(table, sd=0.005, seeds=4)
    assert rule["run_next"] == [(32.0, 1.0), (16.0, 0.5)] and rule["moves"] is None
    table.loc[32.0, 1.0], table.loc[16.0, 0.5] = 1.99, 1.99  # both ran and lost
    rule = mult2d.verdict(mult2d_grid(table), sd=0.005, seeds=4)
    assert rule["run_next"] == [] and rule["best"] == (16.0, 1.0) and rule["moves"] is True
    tied = pd.DataFrame([[1.99, 2.0, 2.01]], index=[4.0], columns=mult2d.MULTS)
    assert mult2d.verdict(tied, sd=0.005, seeds=4)["run_next"] == [
        (4.0, 0.5)
    ]  # one row: no emb edge


def mult2d_grid(table: pd.DataFrame) -> pd.DataFrame:
    return table.reindex(index=sorted(table.index), columns=sorted(table.columns))
