"""The protocol's lr rule (tiedvsuntied.study.rules, sign_flip's ``choose``) on its shipped bundle:
each arm's clip rule (HYPOTHESES.md: an arm whose clip binds on more than 10% of its seeds'
steps is re-run with the clip raised), recomputed from the runs' own record files."""

from __future__ import annotations

import json
import types
from functools import partial

import pandas as pd
import pytest
import yaml

from tiedvsuntied.analysis.arms import arm
from tiedvsuntied.analysis.load import load_results
from tiedvsuntied.study import registry, rules

pytestmark = pytest.mark.slow  # reads the shipped bundles (tests/e2e)

SIGN_FLIP = registry.study("sign_flip")
STUDY = SIGN_FLIP.home
GRID = [float(lr) for lr in SIGN_FLIP.grid.split(",")]  # the lr check's first grid


@pytest.fixture(scope="module")
def choose_lr():
    """The rule as sign_flip chooses: its arms with an lr check (the ends' run at tied's lr)."""
    checked = ("tied", "untied")
    chosen = partial(rules.chosen_lr, arm=arm, arms=checked)
    return types.SimpleNamespace(
        chosen_lr=chosen,
        CHECKED_ARMS=checked,
        POINT=rules.POINT,
        MAX_CLIP_FRAC=rules.MAX_CLIP_FRAC,
        SEEDS=rules.SEEDS,
    )


def records() -> pd.DataFrame:
    """Each shipped run's summary.json with its config's body lr and ``plain``: a tied or untied
    run at the shared multiplier, not one of the ends' arms (the remedy's input-gradient scale,
    the T5 pair's rescale or own embedding std) nor an arm at its own multipliers."""
    rows = []
    for run in sorted(p for p in (STUDY / "results").iterdir() if (p / "summary.json").is_file()):
        config = yaml.safe_load((run / "config.yaml").read_text())
        head = config.get("head", {})
        plain = head.get("tied_input_grad_scale", 1.0) == 1.0 and not head.get("t5_rescale")
        plain = plain and head.get("emb_init_std") is None
        optim = config["optim"]
        plain = plain and optim.get("head_lr_mult") in (None, optim.get("emb_lr_mult"))
        summary = json.loads((run / "summary.json").read_text())
        rows.append({**summary, "lr": config["optim"]["lr"], "plain": plain})
    return pd.DataFrame(rows)


def test_an_arm_is_rerun_when_its_seeds_clip_on_more_than_a_tenth_of_steps(choose_lr):
    table = choose_lr.chosen_lr(load_results(STUDY / "results").runs, GRID)
    runs = records().query("status == 'finished' and replicate == 0 and plain")
    assert len(table) >= 4 and table["clip_rerun"].any()  # untied at V = 40,960 (11%)
    # the bundle holds the ends' remedy arm, run at tied's lr with no lr check of its own
    assert set(table["arm"]) == set(choose_lr.CHECKED_ARMS)
    for row in table.itertuples():
        point = (runs["model"] == row.model) & (runs["vocab_size"] == row.vocab_size)
        mine = runs[point & (runs["tie"] == (row.arm == "tied")) & (runs["lr"] == row.lr)]
        assert row.clip_frac == pytest.approx(mine["clip_frac"].mean()) and row.seeds == len(mine)
        binds = mine["clip_frac"].mean() > choose_lr.MAX_CLIP_FRAC and len(mine) >= choose_lr.SEEDS
        assert row.clip_rerun == binds, row


def test_no_edge_is_named_and_no_lr_settled_before_the_first_grid_has_run_whole(choose_lr):
    runs = load_results(STUDY / "results").runs
    tied = (runs["vocab_size"] == 1024) & runs["tie"] & (runs["seed"] == 0)
    key = ("micro", 1024, "tied", "inv_sqrt_d")

    def row(runs):
        table = choose_lr.chosen_lr(runs, GRID).set_index(choose_lr.POINT)
        run_next = table.loc[key, "run_next"]  # NaN, not None, once another row names an edge
        return (None if pd.isna(run_next) else run_next), table.loc[key, "settled"]

    assert row(runs) == (None, True)  # 5e-4 ran and lost: 1e-3 is inside what ran
    runs = runs[~(tied & (runs["lr"] == 5e-4))]  # as before the check went below 1e-3
    assert row(runs) == (5e-4, False)  # 1e-3, the best, is the low edge of what ran
    killed = runs.assign(status=runs["status"].mask(tied & (runs["lr"] == 4e-3), "interrupted"))
    assert row(killed) == (None, False)  # the first grid's 4e-3 has not run whole: no edge yet
