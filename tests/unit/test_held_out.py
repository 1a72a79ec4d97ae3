"""experiments/sign_flip/held_out.py: a point that ran, predicted from all the others, and a body
not run yet, predicted from them all (studies.sign_flip.curve.held_out and .predict), on the
fake sign_flip sweep (a body's coordinates on the shipped bundle:
tests/e2e/test_held_out_e2e.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from fake_sign_flip import read_only_sign_flip
from helpers import script_module

from tiedvsuntied.studies.sign_flip import analysis as sign_flip
from tiedvsuntied.studies.sign_flip import curve as sign_flip_curve

STUDY = Path(__file__).parents[2] / "experiments" / "sign_flip"


@pytest.fixture(scope="module")
def fake(tmp_path_factory):
    return read_only_sign_flip(tmp_path_factory)


@pytest.fixture(scope="module")
def held_out():
    return script_module(STUDY / "held_out.py")


def test_a_body_not_run_is_read_off_each_ladders_line_at_its_value_there(fake):
    runs = fake[1].runs
    both = sign_flip.pairs(runs)
    ladders = {"V": both[both["n_embd"].eq(128)], "body": both[both["vocab_size"].eq(8192)]}
    at = {"rho": 0.1, "tokens_per_param": 0.05, "params_total": 5e7}  # beyond every point
    table = sign_flip_curve.predict(runs, at)
    assert len(table) == len(sign_flip_curve.AXES) * len(ladders) and not table["in_range"].any()
    for row in table.itertuples():
        points = ladders[row.ladder]
        line = np.polyfit(np.log(points[f"{row.axis}_t"]), points["diff"], 1)
        assert row.fit == pytest.approx(np.polyval(line, np.log(at[row.axis])))
        assert row.fit_low < row.fit < row.fit_high


def test_the_script_prints_every_reading_and_names_what_is_valid(fake, held_out, capsys):
    sweep = str(fake[0])
    text = held_out.main([sweep, "--point", "256,8,8192"])
    assert text in capsys.readouterr().out
    assert len(text.splitlines()) == 2 + len(sign_flip_curve.AXES) * 2  # header, rule, rows
    assert " off_low " in text and " fit " in held_out.main([sweep, "--model", "body512x8"])
    with pytest.raises(SystemExit, match=r"no runs at .*'n_embd': 512.* ran: \[\(64, 2, 8192\)"):
        held_out.main([sweep, "--point", "512,4,8192"])
    with pytest.raises(SystemExit, match=r"--model 'd999' is not in conf/model; valid: \["):
        held_out.main([sweep, "--model", "d999"])
    with pytest.raises(SystemExit, match=r"--vocab-size 50257: no finished run read it; valid"):
        held_out.main([sweep, "--model", "micro", "--vocab-size", "50257"])
