"""The end-to-end tests of tests/unit/test_figures_sign_flip.py: the paper's figures and
tables drawn from the shipped bundle."""

from __future__ import annotations

import shutil

from fake_results import write_sweep
from fake_sign_flip import write_sign_flip

from tiedvsuntied.figures import cli


def test_paper_draws_the_third_edition_from_its_own_bundle(tmp_path, capsys, monkeypatch):
    """--paper: the sign_flip bundle's outputs from it alone, the rest from the second
    edition's bundle (mixing them would mix datasets); without it, one line says so."""
    write_sweep(tmp_path / cli.PAPER_BUNDLES[0], init_stds=("1.0",))
    monkeypatch.setattr(cli, "REPO", tmp_path)
    paper = [*cli.THIRD, "table_params"]
    args = ["--paper", "--out", str(tmp_path / "o"), "--formats", "png", "--only", ",".join(paper)]
    assert cli.main(args) == 0
    skipped = "sign_flip_fig1_map, sign_flip_fig2_tokens, sign_flip_fig3_tokens_per_param, "
    assert skipped + "sign_flip_tables: skipped" in capsys.readouterr().out
    sweep = write_sign_flip(tmp_path / "sf")  # the unit file's fake sweep, made here
    shutil.copytree(sweep, tmp_path / cli.SIGN_FLIP_BUNDLE)
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert "56 runs: 56 finished" in out and "NOT MADE" not in out
    made = {p.name for p in (tmp_path / "o").iterdir()}
    assert {"sign_flip_fig1_map.png", "sign_flip_tables.md", "table_params.md"} <= made
