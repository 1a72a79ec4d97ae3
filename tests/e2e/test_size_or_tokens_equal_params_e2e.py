"""studies.size_or_tokens.analysis's reading at equal total parameters on the third edition's
shipped bundle: each arm counts its own recorded parameters."""

from __future__ import annotations

from pathlib import Path

import pytest

from tiedvsuntied.analysis.load import load_results
from tiedvsuntied.studies.size_or_tokens import analysis

pytestmark = pytest.mark.slow  # reads the shipped bundles (tests/e2e)

THIRD = Path(__file__).resolve().parents[2] / "experiments" / "sign_flip" / "results"


@pytest.mark.skipif(not THIRD.is_dir(), reason="the third edition's bundle is not shipped here")
def test_each_arm_counts_its_own_recorded_parameters_on_the_third_editions_bundle():
    runs = load_results(THIRD).runs
    rows = analysis.equal_params(runs)
    recorded = analysis.chosen(runs).groupby([*analysis.CELL, "arm"])["params_total"].unique()
    for row in rows.itertuples():
        assert list(recorded[(*(getattr(row, c) for c in analysis.CELL), row.arm)]) == [row.params]
    arms = rows.pivot_table(index=analysis.CELL, columns="arm", values="params")
    v_d = arms.index.get_level_values("vocab_size") * arms.index.get_level_values("n_embd")
    assert (arms["untied"] - arms["tied"]).tolist() == list(v_d)
    assert set(rows["arm"]) == set(analysis.ARMS)  # untied_own, t5 ... are not this reading's
