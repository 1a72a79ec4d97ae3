"""The protocol's steps as scripts/gpu/slot.sh runs them (``python -m tiedvsuntied.study.fair``, a
run a process under the slot's deadline), on a fake sweep: the lr check runs whole, an edge is
followed x2 beyond it, only an arm whose lr is settled gets its seeds, and the lr table lands
where the slot packs it."""

from __future__ import annotations

import pandas as pd
import pytest
from fake_sign_flip import write_point

from tiedvsuntied.study import fair, registry

GRID = [1e-3, 2e-3, 4e-3]
BASE = "+experiment=sign_flip sweep=sign_flip_gpu model=micro"
CELLS = "tied:inv_sqrt_d untied:inv_sqrt_d"


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """Seed 0 of tied (best at the grid's high edge) and untied (best inside it) at micro."""
    sweep = tmp_path_factory.mktemp("slot") / "sign_flip_gpu"
    best = {True: 4e-3, False: 2e-3}
    for tie in (True, False):
        for lr in GRID:
            shift = 0.0 if lr == best[tie] else 0.5
            write_point(sweep, "micro", 8192, 0, tie, lr=lr, floor_shift=shift)
    return sweep


def lines(sweep, step: str, *extra: str) -> list[str]:
    args = fair.parser().parse_args(
        ["sign_flip", step, "--sweep-dir", str(sweep), "--grid", ",".join(f"{x:g}" for x in GRID)]
        + ["--cells", CELLS, "--seeds", "1,2,3", "--base", BASE, *extra]
    )
    return fair.lines(args)


def test_the_lr_check_is_each_cell_at_each_value_a_run_each(sweep):
    got = lines(sweep, "lr")
    assert got == [
        f"{BASE} seed=0 +arm={arm} init_std=inv_sqrt_d optim.lr={lr:g}"
        for arm in ("tied", "untied")
        for lr in GRID
    ]


def test_an_edge_is_followed_x2_beyond_it_and_the_table_lands_where_asked(sweep, tmp_path):
    table = tmp_path / "lr_choice_sign_flip_gpu.tsv"
    assert lines(sweep, "edge", "--table", str(table)) == [
        f"{BASE} seed=0 +arm=tied init_std=inv_sqrt_d optim.lr=0.008"
    ]
    written = pd.read_csv(table, sep="\t").set_index("arm")
    assert written.loc["tied", "run_next"] == 8e-3 and not written.loc["tied", "settled"]
    assert written.loc["untied", "settled"] and written.loc["untied", "lr"] == 2e-3


def test_only_an_arm_whose_lr_is_settled_gets_its_seeds(sweep):
    assert lines(sweep, "seeds") == [
        f"{BASE} seed={s} +arm=untied init_std=inv_sqrt_d optim.lr=0.002" for s in (1, 2, 3)
    ]


def test_no_run_yet_names_no_edge_and_no_seeds_and_prints_no_line(tmp_path, capsys):
    assert lines(tmp_path / "none", "edge") == [] and lines(tmp_path / "none", "seeds") == []
    args = ["--sweep-dir", str(tmp_path / "none"), "--grid", "1e-3", "--cells", CELLS]
    fair.main(["sign_flip", "edge", *args])  # an empty line would start a run of no overrides
    assert capsys.readouterr().out == ""


def test_an_arm_keeps_the_multiplier_another_study_chose(sweep, capsys):
    books = registry.study("tie_x_init_books")
    chosen = pd.read_csv(books.lr_table, sep="\t", dtype=str)
    mult = chosen.query("arm == 'untied' and init_std == 'inv_sqrt_d'")["emb_lr_mult"].iloc[0]
    got = lines(sweep, "seeds", "--emb-lr-mult-from", str(books.lr_table))
    assert got and all(line.endswith(f" optim.emb_lr_mult={mult}") for line in got)
    fair.main(["chosen", "tie_x_init_books", "untied", "inv_sqrt_d"])
    assert capsys.readouterr().out == f"{mult}\n"
