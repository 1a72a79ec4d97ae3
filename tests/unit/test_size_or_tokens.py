"""The fourth edition's declaration (tiedvsuntied.studies.size_or_tokens) on the protocol: two
budgets at one body are two points of the lr table, each arm's first grid is its cell's, piece
a0 runs the third edition's 10 MB cells at the lr its checks chose, and the third arm's runs are
told apart from tied's."""

from __future__ import annotations

import dataclasses
import itertools

import pandas as pd

from tiedvsuntied.analysis.arms import arm
from tiedvsuntied.study import protocol, registry

STUDY = registry.study("size_or_tokens")
THIRD = registry.study("sign_flip")


def lr_check(cells: dict[tuple[str, int], dict[float, float]]) -> pd.DataFrame:
    """Seed-0 runs of one arm (untied) over {(model, steps): {lr: val_bpb}}, as a runs table."""
    rows = [
        {"model": m, "vocab_size": 8192, "max_steps": s, "init_std": "inv_sqrt_d", "lr": lr}
        | {"val_bpb": bpb, "tie": False, "seed": 0, "replicate": 0, "status": "finished"}
        | {"clip_frac": 0.0}
        for (m, s), bpbs in cells.items()
        for lr, bpb in bpbs.items()
    ]
    return pd.DataFrame(rows)


def test_two_budgets_at_one_body_are_two_points_each_with_its_own_steps():
    at = {name: p.steps for name, p in STUDY.points.items()}
    assert at["b256x8-10mb"] == at["micro-10mb"] == 1347
    assert at["b256x8-45mb"] == at["micro-45mb"] == 6094
    row = {"model": "body256x8", "vocab_size": "8192", "max_steps": "6094"}
    assert STUDY.point_of(row) == "b256x8-45mb"
    assert STUDY.point_of(row | {"max_steps": "1347"}) == "b256x8-10mb"
    # d = 256 x 8 at 45 MB reads micro-at-10 MB's tokens per parameter (HYPOTHESES.md)
    assert abs(6094 / 1347 - 8_481_280 / 1_874_688) < 0.5 / 1347


def test_the_lr_rule_reads_each_cell_against_its_own_first_grid():
    runs = lr_check(
        {
            ("body256x8", 6094): {2.5e-4: 2.0, 5e-4: 2.1, 1e-3: 2.2},  # best at its low edge
            ("body256x8", 1347): {2.5e-4: 2.3, 5e-4: 2.1, 1e-3: 2.2},  # best inside
        }
    )
    table = STUDY.choose(STUDY, runs).set_index("max_steps")
    assert table.loc[6094, "run_next"] == 1.25e-4 and not table.loc[6094, "settled"]
    assert table.loc[1347, "lr"] == 5e-4 and table.loc[1347, "settled"]


def test_no_edge_is_named_before_a_cells_first_grid_ran_whole():
    grids = {("micro", 6094): {5e-4: 2.0, 1e-3: 2.1}}  # micro-45mb's tied grid is 3 values
    runs = lr_check(grids).assign(tie=True)
    table = STUDY.choose(STUDY, runs)
    assert table["run_next"].isna().all() and not table["settled"].any()


def test_a0_runs_the_third_editions_10mb_cells_at_the_lr_its_checks_chose():
    third = protocol.choices(THIRD)
    lines = protocol.commands(STUDY, "a0", None, None)
    assert len(lines) == 16  # 2 cells x 2 arms x 4 seeds, one run a command
    for line in lines:
        words = dict(w.split("=", 1) for w in line.split() if "=" in w)
        chosen = third[
            third["model"].eq(words["model"])
            & third["vocab_size"].eq(words["data.vocab_size"])
            & third["arm"].eq(words["+arm"])
            & third["init_std"].eq("inv_sqrt_d")
        ]["lr"]
        assert [words["optim.lr"]] == list(chosen)
        assert words["trainer.max_steps"] == "1347"
    seeds = [line.split("seed=")[1].split()[0] for line in lines]
    assert seeds == [str(s) for s, _ in itertools.product(range(4), "ab")] * 2  # pairs together


def test_the_third_arm_checks_tieds_lr_x_half_one_two_then_runs_its_seeds_at_the_best(tmp_path):
    home = tmp_path / STUDY.name  # its own lr table, not the one the study ships
    home.mkdir()
    study = dataclasses.replace(STUDY, home=home)
    assert protocol.commands(study, "c1", None, None) == []  # tied not chosen there yet
    cell = {"model": "body256x8", "vocab_size": "8192", "max_steps": "6094"}
    cell |= {"init_std": "inv_sqrt_d", "run_next": ""}
    table = pd.DataFrame([cell | {"arm": "tied", "lr": "0.0005", "settled": "True"}])
    table.to_csv(home / "lr_choice.tsv", sep="\t", index=False)
    [check] = protocol.commands(study, "c1", None, None)
    assert "seed=0 +arm=tie_untie optim.lr=0.00025,0.0005,0.001" in check
    assert "trainer.max_steps=6094" in check
    table = pd.concat([table, pd.DataFrame([cell | {"arm": "tie_untie", "lr": "0.001"}])])
    table.assign(settled=["True", "True"]).to_csv(home / "lr_choice.tsv", sep="\t", index=False)
    [seeds] = protocol.commands(study, "c1", None, None)
    assert "seed=1,2,3 +arm=tie_untie optim.lr=0.001" in seeds


def test_tie_then_untie_is_an_arm_of_its_own():
    base = {"tie": True, "t5_rescale": False, "emb_lr_mult": 4.0, "head_lr_mult": 4.0}
    assert arm(base | {"untie_step": 4083}) == "tie_untie"
    assert arm(base | {"untie_step": None}) == "tied"
