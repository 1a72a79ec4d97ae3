"""Untied's own multipliers at V = 8,192 (experiments/sign_flip/mult2d.py) on the shipped bundles:
each cell of the grid is the run of that emb_lr_mult x head_lr_mult, read back from its own
record files; the rule waits until the grid and the point's seeds are all in."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from tiedvsuntied.analysis.load import load_results

STUDY = Path(__file__).parents[2] / "experiments" / "sign_flip"
BUNDLES = [STUDY / "results_mult2d", STUDY / "results"]


@pytest.fixture(scope="module")
def mult2d():
    spec = importlib.util.spec_from_file_location("mult2d", STUDY / "mult2d.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def untied_seed0_at_8192(lr: float) -> dict[tuple[float, float], float]:
    """(emb_lr_mult, head_lr_mult) -> final validation bpb, from each bundled run's own files."""
    cells = {}
    for run in (p for bundle in BUNDLES for p in bundle.iterdir() if p.is_dir()):
        config = yaml.safe_load((run / "config.yaml").read_text())
        summary = json.loads((run / "summary.json").read_text())
        optim = config["optim"]
        if (summary["tie"], summary["seed"], summary.get("replicate", 0)) != (False, 0, 0):
            continue
        if (summary["vocab_size"], optim["lr"], summary["status"]) != (8192, lr, "finished"):
            continue
        head = optim.get("head_lr_mult") or optim["emb_lr_mult"]
        cells[(optim["emb_lr_mult"], head)] = summary["heldout"]["val"]["loss_bpb"]
    return cells


def test_each_cell_is_its_runs_validation_bpb_and_the_shared_pair_is_the_lr_checks_run(mult2d):
    lr = 2e-3  # untied's chosen lr at V = 8,192 (lr_choice.tsv)
    table = mult2d.grid(load_results(*BUNDLES).runs, lr)
    cells = untied_seed0_at_8192(lr)
    assert mult2d.SHARED in cells and len(cells) >= 3  # the lr check's run and mult2d's
    assert table.notna().sum().sum() == len(cells)
    for (emb, head), bpb in cells.items():
        assert table.loc[emb, head] == pytest.approx(bpb)


def test_untied_moves_only_when_its_best_pair_gains_more_than_the_seed_sd(mult2d):
    table = pd.DataFrame(2.0, index=mult2d.MULTS, columns=mult2d.MULTS)
    table.loc[4.0, 1.0] = 1.99  # 0.01 ahead of the shared (4, 4)
    assert mult2d.verdict(table, sd=0.005, seeds=4)["untied_moves"] is True
    assert mult2d.verdict(table, sd=0.02, seeds=4)["untied_moves"] is False
    assert mult2d.verdict(table, sd=0.005, seeds=3)["untied_moves"] is None  # seeds not all in
    table.loc[16.0, 16.0] = float("nan")
    rule = mult2d.verdict(table, sd=0.005, seeds=4)
    assert rule["untied_moves"] is None and rule["gain_over_shared"] == pytest.approx(0.01)
