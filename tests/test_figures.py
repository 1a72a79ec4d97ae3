"""tiedvsuntied.figures: every figure on hand-built results, bad input, the CLI; end to end on
the tiny sweep."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys

import matplotlib
import numpy as np
import pandas as pd
import pytest
from fake_results import write_run, write_sweep
from matplotlib.colors import to_hex
from matplotlib.figure import Figure
from matplotlib.text import Text

from tiedvsuntied.analysis.early import early_steps, early_summary
from tiedvsuntied.analysis.load import ResultsError, load_results
from tiedvsuntied.analysis.stats import aggregate_runs, noise_floor, paired_table
from tiedvsuntied.analysis.theory import gaussian_logit_loss
from tiedvsuntied.figures import style, tables
from tiedvsuntied.figures.books import NOT_BOOKS
from tiedvsuntied.figures.cli import main
from tiedvsuntied.figures.finetune import fig_finetune
from tiedvsuntied.figures.geometry import fig_embedding_geometry
from tiedvsuntied.figures.gradients import fig_grad_split
from tiedvsuntied.figures.init import fig_initial_loss
from tiedvsuntied.figures.loss import fig_loss_vs_params, fig_val_loss
from tiedvsuntied.figures.paired import fig_arms, fig_paired_difference
from tiedvsuntied.figures.style import (
    REF_COLOR,
    REGISTRY,
    STATUS_MARKER,
    TIE_COLOR,
    caption,
    publish,
    save_figure,
)
from tiedvsuntied.figures.tables import write_param_tables, write_tables

TIED, UNTIED = TIE_COLOR[True].lower(), TIE_COLOR[False].lower()
DIVERGED = "tie=true_init=1.0_model=micro_seed=1"
RUNNING = "tie=false_init=0.036_model=nano_seed=1"
FAILED = "tie=false_init=1.0_model=nano_seed=1"


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    sweep = write_sweep(
        tmp_path_factory.mktemp("fig") / "sw",
        models=("nano", "micro"),
        seeds=(0, 1),
        statuses={
            (True, "1.0", "micro", 1): "diverged",
            (False, "0.036", "nano", 1): "running",
            (False, "1.0", "nano", 1): "failed",
        },
    )
    return load_results(sweep)


def _lines(fig: Figure):
    return [line for ax in fig.axes for line in ax.get_lines()]


def _texts(fig: Figure) -> str:
    """All text in the figure, wrapped lines joined again."""
    return " ".join(" ".join(t.get_text() for t in fig.findobj(Text)).split())


def _caption(fig: Figure) -> str:
    """The caption under a figure's panels, unwrapped."""
    return " ".join(fig.caption_text.get_text().split())


def test_every_figure_draws_and_says_on_the_image_what_it_shows_and_leaves_out(results, tmp_path):
    rc_before = dict(matplotlib.rcParams)
    for name, output in REGISTRY.items():
        files, fig = output.write(results, tmp_path, ["png"])
        if name.startswith("books_"):  # the second edition's: these runs hold out no documents
            assert fig.empty == NOT_BOOKS and files == []
            continue
        if fig is None:  # tables
            assert files and all(p.exists() and p.suffix in (".md", ".tex") for p in files)
            continue
        if name == "fig7_finetune":  # not fine-tuned: the panels say so, and no file is written
            assert fig.empty and "not fine-tuning runs: no retain/loss" in _texts(fig)
            assert files == [] and not (tmp_path / f"{name}.png").exists()
            continue
        assert [p.name for p in files] == [f"{name}.png"] and not fig.empty
        assert any(len(line.get_xdata()) for line in _lines(fig)), f"{name} draws nothing"
        # the caption says what is drawn: sizes, steps, corpus, V, seeds per cell ...
        caption = _caption(fig)
        assert "20 steps" in caption and "input (text)" in caption, (name, caption)
        assert "V = 512" in caption and "seed" in caption.split("V = 512")[1], (name, caption)
        # ... and, as a footnote, what is left out (all of it, or how many more the console has)
        for item in fig.skipped + fig.flagged:
            assert " ".join(item.split()) in caption or "more (the console lists them)" in caption
        small = [
            t.get_text() for t in fig.findobj(Text) if t.get_text().strip() and t.get_fontsize() < 6
        ]
        assert not small, f"{name}: text below 6 pt: {small[:3]}"
    assert dict(matplotlib.rcParams) == rc_before  # figures never change the global style


def test_caption_counts_seeds_per_cell_and_names_the_corpus(tmp_path):
    sweep = write_sweep(tmp_path / "sw", init_stds=("1.0",), seeds=(0, 1, 2))
    write_run(sweep, tie=True, init_std="1.0", seed=3)  # one cell with 4 seeds
    write_run(sweep, tie=True, init_std="1.0", seed=0, replicate=1)
    res = load_results(sweep)
    text = style.describe_runs(res.runs)
    assert text == (
        "nano (d=32), 20 steps · input (text) · V = 512 · "
        "n = 3–4 seeds/cell (+1 replicate run: noise floor)"
    )
    one = res.runs[res.runs["seed"] == 0].iloc[:1]
    assert style.seeds_per_cell(one) == "n = 1 seed/cell"


def test_corpus_label_reads_the_data_config_and_falls_back_to_the_table(tmp_path):
    from tiedvsuntied.figures.labels import corpus_label

    configs = {
        "shakespeare": "data:\n  name: text\n  files: /x/tinyshakespeare/input.txt\n"
        "  encoding: gpt2\n  vocab: full\n",
        "wiki": "data:\n  name: wikitext2\n  source: hub\n  path: Salesforce/wikitext\n"
        "  config: wikitext-2-raw-v1\n  encoding: gpt2\n  vocab: seen\n",
        "mine": "data:\n  name: text\n  files: [/x/novels/moby_dick.txt]\n  encoding: bytes\n",
    }
    labels = {}
    for name, config in configs.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.yaml").write_text(config)
        labels[name] = corpus_label({"path": str(tmp_path / name), "data": "x", "data_id": "i"})
    assert labels == {
        "shakespeare": "Tiny Shakespeare (text, GPT-2 tokens)",
        "wiki": "WikiText-2 (wikitext2, GPT-2 tokens, closed vocabulary)",
        "mine": "moby_dick (text, bytes)",
    }
    assert corpus_label({"path": None, "data": "text", "data_id": "abc"}) == "data text (abc)"


def test_a_numeric_init_std_of_another_width_is_labelled_with_both_numbers():
    label = style.init_label("0.036", short=True, widths=[128])
    assert label == "init std 0.036, ($d^{-1/2}$ at d=768; here $d^{-1/2}$ = 0.088)"
    assert style.init_label("0.036", widths=[768]) == "init std 0.036"  # d^-0.5 here
    assert style.init_label("1.0", widths=[128]) == "init std 1.0"
    assert style.init_label("inv_sqrt_d", widths=[128]) == r"init std $d^{-1/2}$"


def test_val_loss_colours_and_flags(results):
    fig = fig_val_loss(results.runs, results.history)
    colours = {to_hex(line.get_color()) for line in _lines(fig)}
    assert TIED in colours and UNTIED in colours
    assert colours <= {TIED, UNTIED, to_hex(REF_COLOR)}
    assert len(fig.axes) == 2 * 2  # 2 sizes x 2 init stds
    flagged = " ".join(fig.flagged)
    assert f"{DIVERGED}: diverged at step 10" in flagged
    assert f"{RUNNING}: running" in flagged and f"{FAILED}: failed" in flagged
    assert _caption(fig).count("Marked:") == 1  # the footnote on the image


def test_diverged_curve_ends_where_it_diverged(results):
    fig = fig_val_loss(results.runs, results.history)
    div = results.runs.set_index("name").loc[DIVERGED]
    ends = [line for line in _lines(fig) if line.get_marker() == STATUS_MARKER["diverged"]]
    assert len(ends) == 1
    h = results.history[
        (results.history["run_id"] == div["run_id"]) & results.history["val/loss"].notna()
    ]
    assert ends[0].get_xdata()[-1] == h["tokens"].iloc[-1]
    assert h["step"].max() <= div["diverged_at_step"]
    dashed = [
        line
        for line in _lines(fig)
        if line.get_linestyle() == "--" and to_hex(line.get_color()) == TIED
    ]
    assert any(max(line.get_xdata()) == h["tokens"].max() for line in dashed)


def test_loss_vs_params_plots_seed_means_and_skips_unfinished(results):
    fig = fig_loss_vs_params(results.runs)
    skipped = " ".join(fig.skipped)
    for name, status in ((DIVERGED, "diverged"), (RUNNING, "running"), (FAILED, "failed")):
        assert f"{name}: {status}, no final loss" in skipped
    agg = aggregate_runs(results.runs)
    plotted = np.concatenate([line.get_ydata() for line in fig.axes[0].get_lines()])
    for mean in agg["mean"]:
        assert np.isclose(plotted, mean).any()
    xs = np.concatenate([line.get_xdata() for line in fig.axes[1].get_lines()])
    assert set(xs) <= set(results.runs["params_non_embedding"].astype(float))
    assert fig.axes[0].get_xscale() == "log"


def test_initial_loss_against_ln_v_and_prediction(results):
    fig = fig_initial_loss(results.runs)
    ln_v = math.log(512)
    left = fig.axes[0]
    assert any(np.allclose(line.get_ydata(), ln_v) for line in left.get_lines())
    diamonds = np.concatenate(
        [line.get_ydata() for line in left.get_lines() if line.get_marker() == "D"]
    )
    sigmas = results.runs["init_logit_std"].dropna().unique()
    for pred in gaussian_logit_loss(sigmas, 512):
        assert np.isclose(diamonds, pred).any()
    measured = np.concatenate(
        [line.get_ydata() for line in left.get_lines() if line.get_marker() == "o"]
    )
    assert sorted(measured) == pytest.approx(sorted(results.runs["init_val_loss"]))


def test_embedding_geometry_says_when_probes_are_missing(tmp_path):
    sweep = tmp_path / "sw"
    write_run(sweep, tie=True, probes=False)
    write_run(sweep, tie=False, token_freq=False)
    runs = load_results(sweep).runs
    fig = fig_embedding_geometry(runs)
    text = _texts(fig)
    assert "no probe arrays with token frequencies" in text
    assert "tie=true_init=0.02_model=nano_seed=0: no probes/step_*.npz" in " ".join(fig.skipped)
    assert "token_freq.npy missing" in " ".join(fig.skipped)
    # the untied run's cosines are still drawn
    assert any(p.get_height() > 0 for ax in fig.axes for p in ax.patches)


def test_embedding_geometry_one_run_per_tie_and_setting(results):
    fig = fig_embedding_geometry(results.runs)
    assert f"{len(results.runs) - 4} other run(s)" in " ".join(fig.skipped)
    assert "micro" in fig.legends[0].get_title().get_text()  # the title rides on the legend
    assert len(fig.axes) == 4 * 2  # norms, cosines per stratum raw and centred, in/out cosines


def test_grad_split_tied_only_and_missing_metrics(results):
    fig = fig_grad_split(results.runs, results.history)
    n_untied = int((results.runs["tie"] == False).sum())  # noqa: E712
    assert f"{n_untied} untied run(s)" in " ".join(fig.skipped)
    assert {to_hex(line.get_color()) for line in _lines(fig)} == {TIED, to_hex(REF_COLOR)}
    bare = results.history.drop(columns=["train/grad_norm_in", "train/grad_norm_out"])
    fig = fig_grad_split(results.runs, bare)
    assert "gradient split not logged" in _texts(fig)
    assert "train/grad_norm_in, train/grad_norm_out not logged" in caption(fig)


def test_mixed_sweeps_and_empty_input_are_refused_clearly(tmp_path, results):
    write_sweep(tmp_path / "a", init_stds=("0.02",), vocab_size=512)
    write_sweep(tmp_path / "b", init_stds=("0.02",), vocab_size=1024, data_files="b.txt")
    mixed = load_results(tmp_path / "a", tmp_path / "b")
    for make in (
        lambda: fig_val_loss(mixed.runs, mixed.history),
        lambda: fig_loss_vs_params(mixed.runs),
        lambda: fig_initial_loss(mixed.runs),
        lambda: fig_embedding_geometry(mixed.runs),
        lambda: fig_grad_split(mixed.runs, mixed.history),
    ):
        with pytest.raises(ResultsError, match=r"mix 2 values of vocab_size"):
            make()
    with pytest.raises(ResultsError, match="no runs to plot"):
        fig_initial_loss(results.runs.iloc[:0])


def test_no_initial_loss_yet_is_said_in_the_figure(results):
    runs = results.runs.assign(init_val_loss=np.nan)
    fig = fig_initial_loss(runs)
    assert "no run has an initial validation loss yet" in _texts(fig)
    assert len(fig.skipped) == len(runs)


def test_save_figure_writes_each_format(tmp_path, results):
    fig = fig_loss_vs_params(results.runs)
    paths = save_figure(fig, tmp_path / "out", "f", ("pdf", "png", "svg"))
    assert [p.name for p in paths] == ["f.pdf", "f.png", "f.svg"]
    assert paths[0].read_bytes()[:4] == b"%PDF" and paths[1].read_bytes()[:4] == b"\x89PNG"
    assert all(p.stat().st_size > 1000 for p in paths)


# ----------------------------------------------------------------------------- CLI


def test_cli_makes_figures_and_prints_what_is_left_out(tmp_path, results, capsys):
    sweep = results.runs["path"].iloc[0].rsplit("/", 1)[0]
    only = "fig1_val_loss,fig2_loss_vs_params"
    assert main([sweep, "--out", str(tmp_path / "o"), "--formats", "png", "--only", only]) == 0
    out = capsys.readouterr().out
    assert (tmp_path / "o" / "fig1_val_loss.png").stat().st_size > 0
    assert not (tmp_path / "o" / "fig1_val_loss.pdf").exists()
    assert f"not shown: {DIVERGED}: diverged, no final loss" in out
    assert f"marked: {RUNNING}: running" in out


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


def test_cli_keeps_the_finished_copy_of_a_run_found_in_several_sweeps(tmp_path, capsys):
    write_run(tmp_path / "rerun", status="finished")
    write_run(tmp_path / "first_try", status="failed")
    out = tmp_path / "o"
    assert (
        main(
            [
                str(tmp_path / "first_try"),
                str(tmp_path / "rerun"),
                "--out",
                str(out),
                "--formats",
                "png",
                "--only",
                "fig2_loss_vs_params",
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert (
        "1 runs: 1 finished" in printed and "found twice" in printed and "not shown" not in printed
    )


def test_cli_mixed_sweeps_need_data_id(tmp_path, capsys):
    write_sweep(tmp_path / "a", init_stds=("0.02",), vocab_size=512)
    write_sweep(tmp_path / "b", init_stds=("0.02",), vocab_size=1024, data_files="b.txt")
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


def test_parameter_table_files(tmp_path):
    """GPT-2 small: 124,439,808 tied, 163,037,184 untied (the published counts)."""
    md, tex = write_param_tables(tmp_path)
    small = next(line for line in md.read_text().splitlines() if line.startswith("| small "))
    assert "124,439,808" in small and "163,037,184" in small
    assert r"\begin{tabular}" in tex.read_text() and "124{,}439{,}808" in tex.read_text()


# ----------------------------------------------------------------------------- end to end


@pytest.mark.slow
def test_cli_regenerates_every_figure_from_the_tiny_sweep(tiny_sweep, tmp_path):
    out = tmp_path / "figures"
    proc = subprocess.run(
        [sys.executable, "-m", "tiedvsuntied.figures", str(tiny_sweep), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "NOT MADE" not in proc.stderr
    assert "4 runs: 4 finished" in proc.stdout
    # no fine-tuning runs: figure 7 is skipped in one line, not written empty
    assert "fig7_finetune: skipped: not fine-tuning runs" in proc.stdout
    skipped = {line.split(":")[0] for line in proc.stdout.splitlines() if ": skipped: " in line}
    books = {name for name in REGISTRY if name.startswith("books_")}  # second edition's
    assert skipped == {"fig7_finetune", *books}
    assert not (out / "fig7_finetune.png").exists()
    tables = {
        "table_params": ["table_params.md", "table_params.tex"],
        "table_paired": ["table_paired.md", "table_interaction.md"],
        "table_early": ["table_early.md"],
    }
    for name in set(REGISTRY) - skipped:
        for file in tables.get(name, [f"{name}.pdf", f"{name}.png"]):
            path = out / file
            assert path.exists() and path.stat().st_size > 0, path
    assert not (out / "table_classic.md").exists()  # no learning-rate grid
    # the tiny sweep has one seed: no interval, and no windows-only one in its place
    paired_text = (out / "table_paired.md").read_text()
    assert (
        paired_text.startswith("0 intervals at 95% each") and "1 seed: no interval" in paired_text
    )
    early = (out / "table_early.md").read_text()
    assert early.startswith("nano (d=64), 12 steps · ") and "n = 1 seed/cell" in early


def _bands(fig: Figure) -> int:
    return sum(len(ax.collections) for ax in fig.axes)


def test_fewer_than_three_seeds_draw_each_seed_not_a_band(tmp_path):
    two = load_results(write_sweep(tmp_path / "two", init_stds=("1.0",), seeds=(0, 1)))
    three = load_results(write_sweep(tmp_path / "three", init_stds=("1.0",), seeds=(0, 1, 2)))
    fig2, fig3 = (
        fig_val_loss(two.runs, two.history),
        fig_val_loss(three.runs, three.history),
    )
    assert _bands(fig2) == 0 and _bands(fig3) == 2  # a t-band per arm only with 3 seeds
    thin = [line for line in _lines(fig2) if line.get_linewidth() < 1]
    assert len(thin) == 4  # each seed of each arm
    assert "< 3 seeds: each seed, no CI" in _texts(fig2) and "t-CI over seeds (n=3)" in _texts(fig3)
    bars = fig_loss_vs_params(two.runs)
    segments = [seg for ax in bars.axes for c in ax.collections for seg in c.get_segments()]
    assert not any(np.isfinite(seg).all() for seg in segments)  # no error bars at n = 2
    assert _bands(fig_grad_split(two.runs, two.history)) == 0


def test_grad_ratio_is_a_geometric_mean_with_clipping_noted(tmp_path):
    res = load_results(
        write_sweep(tmp_path / "sw", ties=(True,), init_stds=("1.0",), seeds=(0, 1, 2))
    )
    fig = fig_grad_split(res.runs, res.history)
    h = res.history.assign(
        r=np.log(res.history["train/grad_norm_out"] / res.history["train/grad_norm_in"])
    )
    geo = np.exp(h.dropna(subset=["r"]).groupby("step")["r"].mean())
    mean_line = fig.axes[1].get_lines()[0].get_ydata()
    assert mean_line == pytest.approx(geo.to_numpy(), rel=1e-6)
    assert "pre-clip" in _texts(fig)


def test_paired_difference_figure_and_tables(tmp_path):
    sweep = write_sweep(
        tmp_path / "sw",
        init_stds=("1.0", "0.036"),
        seeds=(0, 1, 2),
        statuses={(False, "0.036", "nano", 2): "failed"},
    )
    for tie in (True, False):  # the noise floor of init 1.0
        write_run(sweep, tie=tie, init_std="1.0", seed=0, replicate=1)
    res = load_results(sweep)
    fig = REGISTRY["fig6_paired_difference"].write(res, tmp_path, ["png"])[1]
    assert "tie=true_init=0.036_model=nano_seed=2: finished, no partner" in fig.skipped
    assert "tie=true_init=1.0_model=nano_seed=0_replicate=1: replicate 1 (noise floor only)" in (
        fig.skipped
    )
    # the cell with fewer seeds than the others is named; the caption gives the range
    assert fig.flagged == ["init std 0.036 (nano, final): 95% t over 2 seeds' paired differences"]
    # the caption names the method, n seeds and the floor; the floor is shaded where measured
    title = _caption(fig)
    assert "95% t-interval over n = 2–3 seeds per cell" in title and "noise floor" in title
    assert "from 2 re-runs of a config" in title
    # every run's best validation step is its last: one panel, not two identical ones
    assert len(fig.axes) == 1 and "= best validation step" in fig.axes[0].get_title()
    assert "step 20" in fig.axes[0].get_title() and fig.axes[0].get_xlabel() == "init std (nano)"
    assert sum(len(ax.collections) for ax in fig.axes) >= 2 + 1  # error bars + the floor band
    t = paired_table(res.runs, ("final",))
    errorbar_means = [line.get_ydata()[0] for line in _lines(fig) if line.get_marker() == "o"]
    assert sorted(errorbar_means) == pytest.approx(sorted(t["diff"]))
    # both arms' means beside each effect, as the table has them
    beside = sorted(a.get_text() for a in fig.axes[0].texts if a.get_text().startswith("tied "))
    assert beside == sorted(f"tied {r.mean_t:.2f}\nuntied {r.mean_u:.2f}" for r in t.itertuples())
    # the legend holds what is drawn: every cell has an interval, so no open "mean only" marker
    legend = [h.get_text() for h in fig.legends[0].get_texts()]
    assert legend == [
        "mean, 95% t-interval over seeds (paired by seed)",
        "one seed",
        "noise floor (±)",
    ]
    files = {p.name: p.read_text() for p in REGISTRY["table_paired"].write(res, tmp_path, [])[0]}
    assert set(files) == {"table_paired.md", "table_interaction.md"}  # no lr grid, no other arms
    assert "[+" in files["table_paired.md"] or "[-" in files["table_paired.md"]
    assert files["table_paired.md"].startswith("6 intervals at 95% each")
    assert "mean_t" in files["table_paired.md"] and "mean_u" in files["table_paired.md"]
    assert (
        "No cell has finished tied/untied pairs at both init_std=1.0 and inv_sqrt_d"
        in (files["table_interaction.md"])
    )


def test_the_noise_floor_pools_every_replicate_against_replicate_0(tmp_path):
    sweep = write_sweep(tmp_path / "sw", init_stds=("1.0",), seeds=(0, 1))
    for k in (1, 2):
        for tie in (True, False):
            write_run(sweep, tie=tie, init_std="1.0", seed=0, replicate=k)
    runs = load_results(sweep).runs
    loss = runs[runs["seed"] == 0].set_index(["tie", "replicate"])["test_loss"]
    expected = np.mean([abs(loss[t, 0] - loss[t, k]) for t in (True, False) for k in (1, 2)])
    floor = noise_floor(runs).iloc[0]
    assert floor["n"] == 4 and floor["floor_final"] == pytest.approx(expected)
    caption = _caption(fig_paired_difference(runs))
    assert f"{expected:.3f} nats, from 4 re-runs of a config" in caption
    assert "(+4 replicate runs: noise floor)" not in caption  # the paired runs are described


def test_paired_difference_has_a_best_step_panel_only_when_a_best_step_is_not_the_last(tmp_path):
    res = load_results(write_sweep(tmp_path / "sw", init_stds=("1.0",), seeds=(0, 1, 2)))
    runs = res.runs.copy()
    early = runs["seed"] == 0
    runs.loc[early, "best_step"] = 10
    runs.loc[early, "test_loss_at_best"] = runs.loc[early, "test_loss"] + 0.5
    fig = fig_paired_difference(runs)
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == [
        "test loss, final weights (step 20)",
        "test loss, best validation step (10–20)",
    ]


def test_table_classic_is_written_for_a_learning_rate_grid_only(tmp_path):
    for lr in (1e-3, 3e-3):
        write_sweep(tmp_path / "sw", init_stds=("0.02",), seeds=(0, 1), lr=lr)
    res = load_results(tmp_path / "sw")
    files = {p.name: p for p in write_tables(tmp_path / "o", res.runs)}
    assert "table_classic.md" in files
    text = files["table_classic.md"].read_text()
    assert "lr_tied" in text and "|     2 |" in text  # two rates in the grid
    one = load_results(write_sweep(tmp_path / "one", init_stds=("0.02",), lr=1e-3))
    assert "table_classic.md" not in {p.name for p in write_tables(tmp_path / "p", one.runs)}


def test_interaction_table_file_and_one_seed_cells(tmp_path):
    sweep = write_sweep(
        tmp_path / "sw", init_stds=("1.0", "inv_sqrt_d"), seeds=(0, 1, 2), models=("nano", "micro")
    )
    res = load_results(sweep)
    text = tables.interaction_text(res.runs)
    assert "## Tying x init std" in text and "## Tying x size (micro − nano)" in text
    assert text.count("intervals at 95% each") == 2 and "| True " in text  # the primary row
    one = load_results(write_sweep(tmp_path / "one", init_stds=("1.0",)))
    fig = fig_paired_difference(one.runs)
    assert "t-interval over n = 1 seed per cell (below 2 seeds: the mean only)" in _caption(fig)
    assert "noise floor not measured" in _caption(fig)
    assert not any(ax.collections for ax in fig.axes)  # one seed: a mean, no interval drawn
    legend = [h.get_text() for h in fig.legends[0].get_texts()]
    assert legend == ["fewer than 2 seeds: mean only, no interval", "one seed"]


def test_finetune_figure_draws_one_trajectory_per_mode_from_the_logged_drift_and_retention():
    import pandas as pd

    modes = [("keep", "head"), ("copy", "head"), ("fresh", "all")]
    runs = pd.DataFrame(
        {
            "run_id": [f"r{i}" for i in range(4)],
            "name": ["ft"] * 4,
            "seed": [0, 0, 0, 1],
            "status": "finished",
            "tie": True,
            "init_std": "0.02",
            "model": "nano",
            "vocab_size": 97,
            "data_id": "d",
            "variant": [
                f"finetune.trainable={t}, finetune.untie={u}" for u, t in modes + [modes[0]]
            ],
        }
    )
    history = pd.DataFrame(
        [
            {
                "run_id": f"r{i}",
                "step": step,
                "val/loss": 5 - step / 10,
                "retain/loss": 4 + step / 10,
                "drift/emb_cos_seen": 1 - step / 100,
                "drift/emb_cos_unseen": 1 - step / 200,
                "init_std": "0.02",
                "variant": runs["variant"][i],
            }
            for i in range(4)
            for step in (0, 1, 2)
        ]
    )
    fig = fig_finetune(runs, history)
    retention, drift = fig.axes[0], fig.axes[1]
    assert (
        len(retention.get_lines()) == 3 and len(drift.get_lines()) == 6
    )  # seen and unseen per mode
    assert [list(line.get_ydata()) for line in retention.get_lines()][0] == [4.0, 4.1, 4.2]
    # the runs share a name: the label names the mode (the variant) of the one left out
    mode = "finetune.trainable=head, finetune.untie=keep"
    assert fig.skipped == [f"ft [{mode}]: another seed of a mode shown"]


def test_linear_cka_is_one_up_to_rotation_and_scale_and_near_zero_for_unrelated_rows():
    from tiedvsuntied.figures.similarity import linear_cka

    rng = np.random.default_rng(0)
    x = rng.standard_normal((500, 32))
    q, _ = np.linalg.qr(rng.standard_normal((32, 32)))
    assert linear_cka(x, 3.0 * x @ q) == pytest.approx(1.0, abs=1e-9)
    assert linear_cka(x, rng.standard_normal((500, 32))) < 0.1
    assert linear_cka(x, x + 5.0) == pytest.approx(1.0)  # a common offset is removed first


def test_cka_pairs_each_tied_run_with_its_untied_partner_at_every_common_probe(tmp_path):
    from tiedvsuntied.figures.similarity import pair_cka

    sweep = write_sweep(tmp_path / "sw", init_stds=("0.02",), seeds=(0, 1, 2))
    write_run(tmp_path / "sw", tie=True, init_std="0.02", seed=3)  # no partner: not a pair
    runs = load_results(sweep).runs.assign(setting="0.02")
    cka = pair_cka(runs)
    assert (
        sorted(cka["seed"].unique()) == [0, 1, 2] and len(cka) == 3 * 5
    )  # probes at 0, 5, ..., 20
    # by construction of the fake runs the tied matrix is the output one, mostly
    assert (cka["cka_out"] > cka["cka_in"] + 0.3).all() and (
        cka["cka_untied"] < 0.5
    ).all()  # 64 rows: biased up
    fig = REGISTRY["fig8_cka"].write(load_results(sweep), tmp_path, ["png"])[1]
    assert sum(len(ax.collections) for ax in fig.axes) == 3  # 3 seeds: a t-band per side


def test_anisotropy_draws_tied_untied_input_and_output_per_row(results):
    from tiedvsuntied.figures.similarity import fig_anisotropy

    fig = fig_anisotropy(results.runs, results.history)
    colours = {(to_hex(line.get_color()), line.get_linestyle()) for line in _lines(fig)}
    assert {(TIED, "-"), (UNTIED, "-"), (UNTIED, "--")} <= colours
    assert "rare and unseen strata" in caption(fig)


def test_geometry_figures_on_fine_tuning_runs_only_say_where_to_look_in_one_panel(results):
    from tiedvsuntied.figures.similarity import fig_anisotropy, fig_cka

    history = results.history.assign(**{"drift/emb_cos_seen": 0.99})  # what fine-tuning runs log
    fig = fig_anisotropy(results.runs, history)
    assert len(fig.axes) == 1 and "their embedding drift is figure 7" in _texts(fig)
    assert len(fig.skipped) == len(results.runs)
    tied_only = results.runs[results.runs["tie"] == True]  # noqa: E712 (no partners: no pairs)
    assert len(fig_cka(tied_only).axes) == 1


def test_crossover_compares_vocabularies_as_a_ratio_at_their_embedding_share(tmp_path, capsys):
    write_sweep(tmp_path / "a", init_stds=("0.02",), seeds=(0, 1, 2), vocab_size=512)
    write_sweep(
        tmp_path / "b", init_stds=("0.02",), seeds=(0, 1, 2), vocab_size=4096, data_files="b.txt"
    )
    runs = load_results(tmp_path / "a", tmp_path / "b").runs
    fig = REGISTRY["fig11_crossover"].write(
        load_results(tmp_path / "a", tmp_path / "b"), tmp_path, ["png"]
    )[1]
    points = sorted(
        (line.get_xdata()[0], line.get_ydata()[0])
        for line in _lines(fig)
        if line.get_marker() == "o"
    )
    expected = []
    for vocab in (512, 4096):
        r = runs[runs["vocab_size"] == vocab]
        tied = r[r["tie"] == True].iloc[0]  # noqa: E712
        diff = paired_table(r, ("final",))["diff"].iloc[0]
        expected.append(
            (
                100 * tied["params_embedding"] / tied["params_total"],
                100 * diff / r.loc[r["tie"].eq(False), "test_loss"].mean(),
            )
        )
    assert len(points) == 2 and np.ravel(points) == pytest.approx(np.ravel(sorted(expected)))
    assert points[0][0] < points[1][0]  # the larger vocabulary holds the larger share
    assert any("95% t over 3 seeds" in f for f in fig.flagged)
    # the CLI makes it from mixed sweeps; the single-dataset figures say to pick one
    args = [
        str(tmp_path / "a"),
        str(tmp_path / "b"),
        "--out",
        str(tmp_path / "o"),
        "--formats",
        "png",
    ]
    assert (
        main(args + ["--only", "fig11_crossover"]) == 0
        and (tmp_path / "o" / "fig11_crossover.png").exists()
    )


def test_a_zero_init_head_sits_at_ln_v_in_the_initial_loss_figure_and_off_the_log_sigma_axis(
    results,
):
    runs = results.runs.copy()
    zero = runs.index[runs["tie"] == False][0]  # noqa: E712
    runs.loc[zero, ["init_logit_std", "init_val_loss"]] = (
        0.0,
        math.log(int(runs.loc[zero, "vocab_size"])),
    )
    fig = fig_initial_loss(runs)
    assert f"{runs.loc[zero, 'name']}: σ = 0 (zero head), left panel only" in fig.skipped
    points = [
        x
        for line in fig.axes[1].get_lines()
        if line.get_linestyle() == "None"
        for x in line.get_xdata()
    ]
    assert points and min(points) > 0  # the runs' points: nothing at σ = 0 on the log axis


# ----------------------------------------------------------------------------- the first steps


def _log_spaced_sweep(path):
    """Fake runs with the training loss at every step and evaluations at 1, 2, 4 as well (what
    trainer.log_first and trainer.eval_log_steps give)."""
    sweep = write_sweep(path, init_stds=("1.0", "inv_sqrt_d"), seeds=(0, 1, 2), log_interval=1)
    for metrics in sweep.glob("*/metrics.jsonl"):
        first = json.loads(metrics.read_text().splitlines()[0])
        extra = [
            {"step": s, "tokens": 256 * s, "val/loss": first["val/loss"] - s} for s in (1, 2, 4)
        ]
        with open(metrics, "a") as f:
            f.writelines(json.dumps(rec) + "\n" for rec in extra)
    return sweep


def test_loss_curves_use_a_log_step_axis_for_log_spaced_evaluations(tmp_path):
    res = load_results(_log_spaced_sweep(tmp_path / "sw"))
    fig = fig_val_loss(res.runs, res.history)
    ax = fig.axes[0]
    assert ax.get_xscale() == "symlog" and "log scale" in fig.axes[-1].get_xlabel()
    assert -0.1 < ax.get_xlim()[0] <= 0 and ax.get_xlim()[1] >= 20  # steps 0 to 20 in view
    curves = {(to_hex(line.get_color()), line.get_linewidth() < 1): line for line in _lines(fig)}
    tied, untied = curves[(TIED, False)], curves[(UNTIED, False)]
    assert list(tied.get_xdata()[:4]) == [0, 1, 2, 4]  # step 0 has a place on the axis
    # where the arms overlap both stay visible: tied dashed and lighter, on top of untied solid
    assert tied.get_linestyle() == "--" and untied.get_linestyle() == "-"
    assert tied.get_zorder() > untied.get_zorder() and tied.get_alpha() < 1
    # the training loss at every step, thin, beneath
    train = curves[(TIED, True)]
    assert list(train.get_xdata()) == list(range(1, 21)) and train.get_zorder() < 2
    assert "thin: training loss, every step to 20" in _texts(fig)
    tokens = fig_val_loss(res.runs, res.history, x="tokens")
    assert tokens.axes[0].get_xscale() == "linear" and "training tokens" in _texts(tokens)
    assert not any(line.get_linewidth() < 1 for line in _lines(tokens))  # no train loss
    with pytest.raises(ValueError, match="x='steps'"):
        fig_val_loss(res.runs, res.history, x="steps")


def test_gradient_split_follows_the_step_axis_of_figure_1(tmp_path):
    res = load_results(_log_spaced_sweep(tmp_path / "sw"))
    fig = fig_grad_split(res.runs, res.history)
    assert fig.axes[0].get_xscale() == "symlog" and fig.axes[0].get_xlim()[0] > -0.1
    first = fig.axes[0].get_lines()[0]
    assert first.get_xdata()[0] == 1  # gradients from step 1, at their step
    tokens = fig_grad_split(res.runs, res.history, x="tokens")
    assert tokens.axes[0].get_xscale() == "linear"


def test_publish_shows_an_empty_figure_but_writes_no_file(results, tmp_path, capsys):
    fig = fig_finetune(results.runs, results.history)
    publish(fig, tmp_path, "fig7_finetune", ("png",))
    assert "fig7_finetune: not written: not fine-tuning runs" in capsys.readouterr().out
    assert not list(tmp_path.iterdir())


def test_evaluations_at_a_fixed_interval_keep_the_token_axis(results):
    fig = fig_val_loss(results.runs, results.history)
    assert fig.axes[0].get_xscale() == "linear" and "training tokens" in _texts(fig)


def test_table_early_names_the_runs_and_gives_steps_per_cell(tmp_path):
    res = load_results(_log_spaced_sweep(tmp_path / "sw"))
    path = REGISTRY["table_early"].write(res, tmp_path / "o", [])[0][0]
    text = path.read_text()
    assert text.startswith("nano (d=32), 20 steps · input (text) · V = 512 · n = 3 seeds/cell\n")
    assert "(here: train/loss)" in text and "## Every run" in text
    summary = early_summary(early_steps(res.runs, res.history))
    for _, row in summary.iterrows():  # each cell's line, as the summary has it
        head = "tied" if row["tie"] else "untied"
        line = next(
            x for x in text.splitlines() if f"| {head} " in x and f" {row['init_std']} " in x
        )
        n, never = row["step_below_ln_v_n"], row["step_below_ln_v_never"]
        if never == n:
            assert "never (by step 20)" in line
        else:
            assert f"{row['step_below_ln_v_median']:g} [" in line or (
                f"| {int(row['step_below_ln_v_min'])} " in line
            )
    assert "no d^-0.5 arm" in text  # the d^-0.5 runs themselves have none


# ----------------------------------------------------------------------------- the paper


def test_paper_without_a_bundle_says_where_and_how_to_make_it(tmp_path, capsys, monkeypatch):
    from tiedvsuntied.figures import cli

    monkeypatch.setattr(cli, "REPO", tmp_path)
    assert main(["--paper", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert f"no results bundle at {tmp_path / 'experiments/tie_x_init/results'}" in err
    assert "python -m tiedvsuntied.bundle results/tie_x_init" in err


def test_paper_makes_its_figures_and_tables_from_the_bundle(tmp_path, capsys, monkeypatch):
    from tiedvsuntied.figures import cli

    bundle = tmp_path / "experiments" / "tie_x_init" / "results"
    _log_spaced_sweep(bundle)
    monkeypatch.setattr(cli, "REPO", tmp_path)
    assert main(["--paper", "--out", str(tmp_path / "o"), "--formats", "png"]) == 0
    out = capsys.readouterr().out
    made = sorted(p.name for p in (tmp_path / "o").iterdir())
    assert made == sorted(
        [f"{name}.png" for name in cli.PAPER if name.startswith("fig")]
        + ["table_early.md", "table_interaction.md", "table_paired.md"]
        + ["table_params.md", "table_params.tex"]
    )
    assert re.search(rf"the paper from {bundle} in \d+\.\d s", out)


def _strip_probes(sweep, runs="*", keep=("val_window_loss", "test_window_loss")):
    """What a bundle keeps of most runs (those matching ``runs``): window losses only."""
    for path in sweep.glob(f"{runs}/probes/*.npz"):
        with np.load(path) as z:
            arrays = {k: z[k] for k in z.files if k in keep}
        np.savez(path, **arrays)


def test_figures_on_a_bundle_without_probe_arrays_say_so_and_are_skipped(tmp_path, capsys):
    sweep = write_sweep(tmp_path / "sw", init_stds=("1.0",), seeds=(0, 1, 2))
    _strip_probes(sweep)
    args = [str(sweep), "--out", str(tmp_path / "o"), "--formats", "png"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "fig4_embedding_geometry: skipped: no probe arrays" in out
    assert "fig8_cka: skipped: no tied/untied pairs with probe rows" in out
    assert not (tmp_path / "o" / "fig4_embedding_geometry.png").exists()
    assert (tmp_path / "o" / "fig6_paired_difference.png").exists()  # needs windows only
    res = load_results(sweep)
    fig = fig_embedding_geometry(res.runs)
    assert fig.empty and "has no 'emb_norm'" in _caption(fig)  # the footnote says what is missing


def test_geometry_from_a_bundle_draws_no_init_it_did_not_keep(tmp_path):
    """A bundle keeps probe files at the best and last step only, per-token arrays and cosines
    for the lowest seed: the last probe is drawn, and no later probe passes for step 0."""
    sweep = write_sweep(tmp_path / "sw", init_stds=("1.0",), seeds=(0, 1))
    for path in sweep.glob("*/probes/step_0000000.npz"):
        path.unlink()
    _strip_probes(sweep, runs="*seed=1-*")
    res = load_results(sweep)
    fig = fig_embedding_geometry(res.runs)
    assert not fig.empty
    strata = fig.axes[2]  # raw cosines of the first column
    colours = {to_hex(line.get_color()) for line in strata.get_lines() if line.get_marker() == "o"}
    assert colours == {TIED, UNTIED}  # the last probe, and no grey "init"
    assert "no probe at step 0" in _caption(fig)


def test_arms_and_anisotropy_on_tied_runs_only_draw_and_name_nothing_else(results):
    from tiedvsuntied.figures.similarity import fig_anisotropy

    tied = results.select(results.runs["tie"] == True)  # noqa: E712
    fig = fig_arms(tied.runs, tied.history)
    assert fig.empty == "only the tied arm finished: no other arm to compare"
    legend = [t.get_text() for t in fig_anisotropy(tied.runs, tied.history).legends[0].texts]
    assert legend[0] == "tied" and not any(label.startswith("untied") for label in legend)


def test_legends_name_only_the_arms_drawn(results):
    """A sweep of tied runs only: no figure's legend lists an untied arm it did not draw."""
    tied = results.select(results.runs["tie"] == True)  # noqa: E712
    for fig in (
        fig_loss_vs_params(tied.runs),
        fig_initial_loss(tied.runs),
        fig_embedding_geometry(tied.runs),
    ):
        labels = [t.get_text() for t in fig.legends[0].texts]
        assert "tied" in labels and "untied" not in labels, labels
    both = [t.get_text() for t in fig_loss_vs_params(results.runs).legends[0].texts]
    assert both[:2] == ["tied", "untied"]


def test_a_run_is_named_with_its_variant_so_a_t5_run_is_told_from_its_plain_twin():
    from tiedvsuntied.figures.style import run_label

    name = "tied_init1.0_nano_seed0"
    plain = pd.Series({"name": name, "run_id": "a", "variant": None})
    t5 = pd.Series({"name": name, "run_id": "b", "variant": "model.t5_rescale=True"})
    assert run_label(plain) == name
    assert run_label(t5) == f"{name} [model.t5_rescale=True]"
