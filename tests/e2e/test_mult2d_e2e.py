"""Untied's own multipliers at V = 8,192 (sign_flip's multiplier rule) on the shipped bundles:
each cell of the grid is the run of that emb_lr_mult x head_lr_mult, read back from its own
record files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tiedvsuntied.analysis.load import load_results
from tiedvsuntied.studies.sign_flip import pieces as mult2d

pytestmark = pytest.mark.slow  # reads the shipped bundles (tests/e2e)

STUDY = Path(__file__).parents[2] / "experiments" / "sign_flip"
BUNDLES = [STUDY / "results_mult2d", STUDY / "results"]


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
def test_each_cell_is_its_runs_validation_bpb_and_the_shared_pair_is_the_lr_checks_run(tie, lr):
    table = mult2d.grid(load_results(*BUNDLES).runs, lr, tie)
    cells = seed0_at_8192(tie, lr)
    assert mult2d.SHARED in cells  # the lr check's run
    assert table.notna().sum().sum() == len(cells)
    for (emb, head), bpb in cells.items():
        assert table.loc[emb, head] == pytest.approx(bpb)
