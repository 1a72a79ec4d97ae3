"""experiments/sign_flip/held_out.py on the shipped bundle: a body's coordinates from its config
are those its runs record."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import script_module

from tiedvsuntied.analysis.load import load_results
from tiedvsuntied.studies.sign_flip import analysis as sign_flip
from tiedvsuntied.studies.sign_flip import curve as sign_flip_curve

pytestmark = pytest.mark.slow  # reads the shipped bundles (tests/e2e)

STUDY = Path(__file__).parents[2] / "experiments" / "sign_flip"


@pytest.fixture(scope="module")
def held_out():
    return script_module(STUDY / "held_out.py")


def test_a_bodys_coordinates_from_its_config_are_those_its_runs_record(held_out):
    """The shipped bundle's d = 256 x 4 at V = 8,192: its config's counts and the runs' tokens
    give what the trainer recorded."""
    runs = load_results(STUDY / "results").runs
    cell = sign_flip.pairs(runs).query("n_embd == 256 and n_layer == 4").iloc[0]
    got = held_out.coordinates(runs, "body256x4", 8192)
    for axis in sign_flip_curve.AXES:
        assert got[axis] == pytest.approx(cell[f"{axis}_t"], rel=1e-9), axis
