"""Untied's own multipliers at V = 8,192 (sign_flip's multiplier rule) on the shipped bundles:
each cell of the grid is the run of that emb_lr_mult x head_lr_mult, read back from its own
record files; the rule waits until the grid and the point's seeds are all in."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from tiedvsuntied.analysis.load import load_results
from tiedvsuntied.studies.sign_flip import pieces

STUDY = Path(__file__).parents[2] / "experiments" / "sign_flip"
BUNDLES = [STUDY / "results_mult2d", STUDY / "results"]


@pytest.fixture(scope="module")
def mult2d():
    return pieces


def seed0_at_8192(tie: bool, lr: float) -> dict[tuple[float, float], float]:
    """(emb_lr_mult, the output matrix's multiplier) -> final validation bpb of an arm, from each
    bundled run's own files; a cell that ran twice (untied's (4, 1): the grid's bf16 run and the
    own piece's fp32 run, one record each) is the lesser, as the grid takes it."""
    cells = {}
    for run in (p for bundle in BUNDLES for p in bundle.iterdir() if p.is_dir()):
        config = yaml.safe_load((run / "config.yaml").read_text())
        summary = json.loads((run / "summary.json").read_text())
        optim = config["optim"]
        if (summary["tie"], summary["seed"], summary.get("replicate", 0)) != (tie, 0, 0):
            continue
        point = (summary["model"], summary["vocab_size"], optim["lr"], summary["status"])
        if point != ("micro", 8192, lr, "finished"):  # not the body ladder's V = 8,192 points
            continue
        if config["head"].get("tied_input_grad_scale", 1.0) != 1.0:
            continue  # the ends' remedy arm
        head = optim.get("tied_lr_mult" if tie else "head_lr_mult") or optim["emb_lr_mult"]
        cell, bpb = (optim["emb_lr_mult"], head), summary["heldout"]["val"]["loss_bpb"]
        cells[cell] = min(bpb, cells.get(cell, bpb))
    return cells


@pytest.mark.parametrize("tie, lr", [(False, 2e-3), (True, 1e-3)])  # lr_choice.tsv at V = 8,192
def test_each_cell_is_its_runs_validation_bpb_and_the_shared_pair_is_the_lr_checks_run(
    mult2d, tie, lr
):
    table = mult2d.grid(load_results(*BUNDLES).runs, lr, tie)
    cells = seed0_at_8192(tie, lr)
    assert mult2d.SHARED in cells  # the lr check's run
    assert table.notna().sum().sum() == len(cells)
    for (emb, head), bpb in cells.items():
        assert table.loc[emb, head] == pytest.approx(bpb)


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
