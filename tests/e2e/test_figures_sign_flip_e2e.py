"""The end-to-end tests of tests/unit/test_figures_sign_flip.py: the paper's figures and
tables drawn from the shipped bundle."""

from __future__ import annotations

import shutil

from fake_results import write_sweep
from fake_sign_flip import write_sign_flip

from tiedvsuntied.figures import cli, paper


def test_paper_draws_the_third_edition_from_its_own_bundle(tmp_path, capsys, monkeypatch):
    """--paper: the sign_flip bundle's outputs from it alone, the rest from the second
    edition's bundle (mixing them would mix datasets); without it, one line says so."""
    section, books = paper.SECTIONS["sign_flip"], paper.SECTIONS["tie_x_init_books"]
    write_sweep(tmp_path / books.bundles[0], init_stds=("1.0",))
    monkeypatch.setattr(paper, "REPO", tmp_path)
    only = [*paper.section_outputs(section), "table_params"]
    args = ["--paper", "--out", str(tmp_path / "o"), "--formats", "png", "--only", ",".join(only)]
    assert cli.main(args) == 0
    skipped = "sign_flip_fig1_map, sign_flip_fig2_tokens, sign_flip_fig3_tokens_per_param, "
    assert skipped + "sign_flip_tables: skipped" in capsys.readouterr().out
    sweep = write_sign_flip(tmp_path / "sf")  # the unit file's fake sweep, made here
    shutil.copytree(sweep, tmp_path / section.bundles[0])
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert "56 runs: 56 finished" in out and "NOT MADE" not in out
    made = {p.name for p in (tmp_path / "o").iterdir()}
    assert {"sign_flip_fig1_map.png", "sign_flip_tables.md", "table_params.md"} <= made
