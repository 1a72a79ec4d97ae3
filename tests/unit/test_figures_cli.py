"""python -m tiedvsuntied.figures (figures.cli): outputs, notes, bad input, --paper; end to end on
the tiny sweep (slow)."""

from __future__ import annotations

import re

import pytest
from fake_results import DIVERGED, RUNNING, strip_probes, write_sweep
from helpers import caption_of

from tiedvsuntied.analysis.load import ResultsError, load_results
from tiedvsuntied.figures import paper
from tiedvsuntied.figures.cli import main
from tiedvsuntied.figures.loss import fig_initial_loss
from tiedvsuntied.figures.style import (
    REGISTRY,
    TIE_COLOR,
    print_notes,
)

TIED, UNTIED = TIE_COLOR[True].lower(), TIE_COLOR[False].lower()


def test_cli_makes_figures_and_prints_what_is_left_out(tmp_path, fig_results, drawn, capsys):
    sweep = fig_results.runs["path"].iloc[0].rsplit("/", 1)[0]
    only = "fig2_loss_vs_params"
    assert main([sweep, "--out", str(tmp_path / "o"), "--formats", "png", "--only", only]) == 0
    out = capsys.readouterr().out
    assert (tmp_path / "o" / "fig2_loss_vs_params.png").stat().st_size > 0
    assert not (tmp_path / "o" / "fig2_loss_vs_params.pdf").exists()
    assert f"not shown: {DIVERGED}: diverged, no final loss" in out
    print_notes(drawn.outputs["fig1_val_loss"][1])  # what the CLI prints of each figure
    assert f"marked: {RUNNING}: interrupted" in capsys.readouterr().out  # no lock held


def test_cli_bad_input(tmp_path, capsys):
    assert main([str(tmp_path / "missing"), "--out", str(tmp_path / "o")]) == 2
    assert f"{tmp_path / 'missing'} does not exist" in capsys.readouterr().err
    for bad in (["--formats", "jpg"], ["--only", "fig9"], []):
        with pytest.raises(SystemExit) as e:
            main(([str(tmp_path)] if bad else []) + ["--out", str(tmp_path / "o"), *bad])
        assert e.value.code == 2
    err = capsys.readouterr().err
    assert "valid formats are pdf, png, svg" in err and "unknown figure(s) ['fig9']" in err
    assert "give one or more SWEEP_DIRs" in err


def test_mixed_sweeps_are_refused_clearly_and_need_data_id(tmp_path, fig_results, capsys):
    write_sweep(tmp_path / "a", init_stds=("0.02",), vocab_size=512)
    write_sweep(tmp_path / "b", init_stds=("0.02",), vocab_size=1024, data_files="b.txt")
    mixed = load_results(tmp_path / "a", tmp_path / "b")
    mixing = {"fig11_crossover"}
    mixing |= {
        n for s in ("sign_flip", "size_or_tokens") for n in paper.section_outputs(paper.SECTIONS[s])
    }
    for name, output in REGISTRY.items():  # in-process: every figure of one dataset refuses
        # fig 11, the third edition's map over rho and the fourth edition's equal-parameters
        # reading compare vocabularies by design
        if "fig" in name and name not in mixing:
            with pytest.raises(ResultsError, match=r"mix 2 values of vocab_size"):
                output.write(mixed, tmp_path / "o", ["png"])
    with pytest.raises(ResultsError, match="no runs to plot"):
        fig_initial_loss(fig_results.runs.iloc[:0])
    args = [
        str(tmp_path / "a"),
        str(tmp_path / "b"),
        "--out",
        str(tmp_path / "o"),
        "--formats",
        "png",
        "--only",
        "fig3_initial_loss",
    ]
    assert main(args) == 1
    captured = capsys.readouterr()
    assert "fig3_initial_loss: NOT MADE" in captured.err and "--data-id" in captured.err
    assert "mixed sweeps" in captured.out
    data_id = load_results(tmp_path / "a").runs["data_id"].iloc[0]
    assert main(args + ["--data-id", data_id]) == 0
    assert (tmp_path / "o" / "fig3_initial_loss.png").exists()


def required_bundle() -> str:
    """The shipped bundle of the paper's required section: experiments/<study>/results."""
    (bundle,) = [b for s in paper.sections() if s.required for b in s.bundles]
    return bundle


def test_paper_without_a_bundle_says_where_and_how_to_make_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(paper, "REPO", tmp_path)
    assert main(["--paper", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    bundle = required_bundle()
    assert f"no results bundle at {tmp_path / bundle}" in err
    assert f"python -m tiedvsuntied.bundle results/{bundle.split('/')[1]} {bundle}" in err


def test_paper_makes_its_figures_and_tables_from_the_bundle(tmp_path, capsys, monkeypatch):
    """Every output of PAPER exists (each is drawn by the drawn fixture); --paper makes them
    from the shipped bundle (two here: the figures are tested on their own; one of no section
    is drawn from the required section's bundle)."""
    from tiedvsuntied.figures import cli

    assert set(cli.PAPER) <= set(REGISTRY)
    bundle = tmp_path / required_bundle()
    write_sweep(bundle, init_stds=("1.0",))
    monkeypatch.setattr(paper, "REPO", tmp_path)
    monkeypatch.setattr(cli, "PAPER", ("fig3_initial_loss", "table_params"))
    assert main(["--paper", "--out", str(tmp_path / "o"), "--formats", "png"]) == 0
    out = capsys.readouterr().out
    made = sorted(p.name for p in (tmp_path / "o").iterdir())
    assert made == ["fig3_initial_loss.png", "table_params.md", "table_params.tex"]
    assert re.search(rf"the paper from {bundle} in \d+\.\d s", out)


def test_figures_on_a_bundle_without_probe_arrays_say_so_and_are_skipped(tmp_path, capsys):
    sweep = write_sweep(tmp_path / "sw", init_stds=("1.0",), seeds=(0, 1, 2))
    strip_probes(sweep)
    only = "fig6_paired_difference,fig8_cka"
    args = [str(sweep), "--out", str(tmp_path / "o"), "--formats", "png", "--only", only]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "fig8_cka: skipped: no tied/untied pairs with probe rows" in out
    assert (tmp_path / "o" / "fig6_paired_difference.png").exists()  # needs windows only
    files, fig = REGISTRY["fig4_embedding_geometry"].write(load_results(sweep), tmp_path, ["png"])
    assert fig.empty.startswith("no probe arrays") and files == []
    assert "has no 'emb_norm'" in caption_of(fig)  # the footnote says what is missing


def test_paper_draws_a_section_from_its_bundles_with_the_more_bundles_that_are_shipped(
    tmp_path, monkeypatch
):
    """The third edition's section: its outputs from its own bundle, first, with the GPU slots'
    bundles where shipped; the rest from the required section's bundle."""
    from tiedvsuntied.figures import cli

    monkeypatch.setattr(paper, "REPO", tmp_path)
    section = next(s for s in paper.sections() if s.more_bundles)
    for bundle in (required_bundle(), *section.bundles):
        (tmp_path / bundle).mkdir(parents=True)
    own = paper.section_outputs(section)
    assert cli.paper_groups([], [*own, "table_params"]) == [
        ([str(tmp_path / b) for b in section.bundles], own),
        ([str(tmp_path / required_bundle())], ["table_params"]),
    ]
    gpu = tmp_path / section.more_bundles[0]  # a slot's piece a shipped, piece b not yet
    gpu.mkdir()
    assert cli.paper_groups([], own)[0][0] == [
        *(str(tmp_path / b) for b in section.bundles),
        str(gpu),
    ]
