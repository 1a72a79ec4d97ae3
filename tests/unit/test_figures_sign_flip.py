"""The third edition's figures and tables (studies.sign_flip.figures and .tables) on a fake
sign_flip sweep, their gate on other runs, and ``figures --paper`` drawing them from the study's
own bundle."""

from __future__ import annotations

import json

import numpy as np
import pytest
from fake_results import write_sweep
from fake_sign_flip import (
    LADDER,
    read_only_sign_flip,
    write_ends,
    write_gpu_sign_flip,
    write_own,
    write_sign_flip,
)
from helpers import caption_of, lines, texts

from tiedvsuntied.analysis.load import load_results
from tiedvsuntied.studies.sign_flip import analysis, figures, tables
from tiedvsuntied.studies.sign_flip import curve as sign_flip_curve
from tiedvsuntied.studies.sign_flip import tokens as sign_flip_tokens
from tiedvsuntied.studies.tie_x_init_books import figures as books


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return read_only_sign_flip(tmp_path_factory)[1]


def test_the_map_draws_each_point_by_how_rho_moved_the_v_ladders_fit_its_crossover_and_primary(
    results,
):
    """The V-ladder's fit solid with its band (committed), the body ladder's own line dash-dotted,
    no line over both ladders; H4's crossover in the title; each point named; n as drawn; the
    sign on the axis."""
    fig = figures.fig_map(results.runs)
    assert fig.empty is None
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and "> 0: tying costs" in ax.get_ylabel()
    drawn = {label: artist for artist, label in zip(*ax.get_legend_handles_labels(), strict=True)}
    committed, body = "V-ladder's OLS, 95% band (committed)", "body-ladder's own OLS (exploratory)"
    ways = {figures.WAY_STYLE[w][0] for w in ("V", "body", "both")}
    assert set(drawn) == ways | {committed, body}
    assert drawn[committed].get_linestyle() == "-" and drawn[body].get_linestyle() == "--"
    v_fit = sign_flip_curve.ladder_fits(results.runs)["V"]
    line = sign_flip_curve.band(v_fit, drawn[committed].get_xdata())["mean"]
    assert np.allclose(drawn[committed].get_ydata(), line)  # the V-ladder's own, not pooled
    assert not [line for line in lines(fig) if len(line.get_xdata()) == 100]  # no pooled curve
    cross = sign_flip_curve.fits(results.runs)["inv_sqrt_d"][1]
    text, caption = texts(fig), caption_of(fig)
    where = f"ρ = {cross['rho']:.2f} [{cross['low']:.2f}, {cross['high']:.2f}]"
    assert where in ax.get_title() and "H4" in ax.get_title()  # the title, off the points
    cells = analysis.effect_table(results.runs)
    assert all(figures._point_label(row) in text for row in cells.itertuples())
    primary = analysis.primary_table(results.runs).iloc[0]
    assert f"mean {primary['diff']:+.4f} [{primary['low']:+.4f}, {primary['high']:+.4f}]" in caption
    assert figures.SIGN in caption and "d=64, 2 layers" in caption and "n = 4 seeds/cell" in caption
    assert "V = 1,024, 2,048, 4,096, 8,192, 16,384" in caption and "0 at ρ" in text
    assert "Noise floor: not measured yet (no replicate pair)." in caption  # none ran again
    assert "Ringed" not in caption  # no cell broke the clip rule


def test_the_map_rings_and_names_a_cell_that_broke_the_clip_rule(results):
    runs = results.runs.copy()
    runs.loc[runs["tie"] & runs["vocab_size"].eq(1024), "clip_frac"] = 0.3
    fig = figures.fig_map(runs)
    drawn = dict(zip(*reversed(fig.axes[0].get_legend_handles_labels()), strict=True))
    ring = drawn["broke the clip rule (clipped on > 10% of steps)"]
    cell = analysis.effect_table(runs).query("vocab_size == 1024").iloc[0]
    assert list(ring.get_xdata()) == [cell["rho"]] and list(ring.get_ydata()) == [cell["diff"]]
    assert "Ringed: the cells that broke the committed clip rule" in caption_of(fig)
    assert f"{cell['body']}, V = 1,024, tied 30.0%" in caption_of(fig)


def test_the_token_axis_draws_one_line_per_ladder_point_and_states_the_init(results):
    fig = figures.fig_tokens(results.runs, results.history)
    # five evaluations: step 0 (the init) is in the caption, the four after it are drawn
    per_point = [line for line in lines(fig) if len(line.get_xdata()) == 4]
    assert len(per_point) == len(LADDER) and min(min(line.get_xdata()) for line in per_point) > 0
    at_init = sign_flip_tokens.token_axis(results.runs, results.history).query("step == 0")
    assert len(at_init) == len(LADDER)
    assert f"{at_init['mean'].iloc[0]:+.2f}" in caption_of(fig).split("At step 0")[1]
    assert max(max(line.get_xdata()) for line in per_point) == pytest.approx(
        results.runs["train_bytes"].max()
    )
    # the two ladders read apart: the bodies at V = 8,192 other than micro's are dashed
    dashed = {line.get_label() for line in per_point if line.get_linestyle() == "--"}
    assert len(dashed) == 2 and all("V=8,192" in label and "d=128" not in label for label in dashed)
    # any two lines read apart by their marker too (greyscale, colour-blind), and by colour
    assert len({line.get_marker() for line in per_point}) == len(per_point)
    assert len({line.get_color() for line in per_point}) == len(per_point)
    # the lr's decay (wsd: the last 20% of steps) shaded from where it starts
    (decay,) = [p for p in fig.axes[0].patches if p.get_x() > 0]
    assert decay.get_x() == pytest.approx(0.8 * results.runs["train_bytes"].min())
    assert "Shaded: the lr's decay (optim.schedule wsd, the last 20%" in caption_of(fig)


def test_the_exploratory_axis_draws_the_cells_at_their_tokens_per_param_with_each_ladders_line(
    results,
):
    fig = figures.fig_tokens_per_param(results.runs)
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and "tokens per parameter" in ax.get_xlabel()
    drawn = dict(zip(*reversed(ax.get_legend_handles_labels()), strict=True))
    ladders = [drawn[f"{way}-ladder's own OLS (exploratory)"] for way in ("V", "body")]
    cells = analysis.effect_table(results.runs)
    for line, ladder in zip(
        ladders, (cells[cells["n_embd"].eq(128)], cells[cells["vocab_size"].eq(8192)]), strict=True
    ):
        assert min(line.get_xdata()) == pytest.approx(ladder["tokens_per_param"].min())
        assert max(line.get_xdata()) == pytest.approx(ladder["tokens_per_param"].max())
    gap = sign_flip_curve.ladder_slopes(results.runs, "tokens_per_param").iloc[-1]
    assert f"body − V {gap['diff']:+.4f} [{gap['low']:+.4f}, {gap['high']:+.4f}]" in caption_of(fig)


def test_the_tables_give_every_cell_with_its_interval_holm_and_the_crossover(results, tmp_path):
    (path,) = tables.write_sign_flip_tables(tmp_path, results.runs, results.history)
    text = path.read_text()
    table = analysis.effect_table(results.runs)
    for column in ("rho_untied", "bytes_per_token", "bigram_bpb", "clip_frac_untied", "p_holm"):
        assert f"| {column}" in text or f" {column} |" in text
    for row in table.itertuples():
        assert f"[{row.low:+.4f}, {row.high:+.4f}]" in text
    cross = sign_flip_curve.fits(results.runs)["inv_sqrt_d"][1]
    assert f"crossover ρ = {cross['rho']:.3f} [{cross['low']:.3f}" in text
    h5 = text.split("## H5")[1].split("##")[0]  # a row per other body, with its fit beside it
    assert h5.count("| d=") == 2 and " fit |" in h5 and "| in_range" in h5
    slopes = text.split("## Exploratory")[1].split("##")[0]  # each ladder's own slope, apart
    assert "outside Holm's family" in slopes and slopes.count("| body − V ") == 3  # each axis
    h6 = text.split("## H6")[1].split("##")[0]  # a row per cell: its gap at mid-training, end
    assert h6.count("| inv_sqrt_d |") == len(table) and " gap_from |" in h6
    stable = text.split("inside the stable phase")[1]  # and a row per cell at 40% and 80%
    assert stable.count("| inv_sqrt_d |") == len(table) and "Exploratory" in text.split("## H6")[1]


def test_other_runs_draw_no_map_and_sign_flip_runs_no_books_figure(tmp_path, results):
    other = load_results(write_sweep(tmp_path / "sw", init_stds=("1.0",))).runs
    assert figures.fig_map(other).empty == analysis.NOT_SIGN_FLIP
    assert not books.is_books(results.runs)  # they hold out books, but they are not its runs


def test_the_map_names_a_point_off_the_ladder_and_edges_a_gpu_point(tmp_path):
    cpu = write_sign_flip(tmp_path / "cpu", ladder=[("micro", 1024)])
    both = load_results(cpu, write_gpu_sign_flip(tmp_path / "gpu")).runs
    fig = figures.fig_map(both)
    ax = fig.axes[0]
    drawn = dict(zip(*reversed(ax.get_legend_handles_labels()), strict=True))
    off = drawn[figures.WAY_STYLE[analysis.OFF_LADDER][0]]
    assert off.lines[0].get_markeredgecolor() == figures.GPU_EDGE
    assert drawn[figures.WAY_STYLE["alone"][0]].lines[0].get_markeredgecolor() != figures.GPU_EDGE
    assert "d=128, 4 layers, V=50,257, gpt2" in texts(fig)
    assert "Black-edged: trained on a GPU (1 of 2 cells)" in caption_of(fig)


def test_the_tables_give_the_primary_and_the_ends_contrasts_in_the_ladders_holm_family(tmp_path):
    sweep = write_sign_flip(tmp_path / "sw", ladder=[("micro", 1024), ("micro", 8192)])
    write_ends(sweep, "micro", 1024)
    results = load_results(sweep)
    runs = results.runs
    (path,) = tables.write_sign_flip_tables(tmp_path, runs, results.history)
    text = path.read_text()
    family = "2 cells of the ladder with an interval, 2 contrasts of the ends' arms and 1 contrast"
    assert f"Holm over the {family} of the primary slope" in text
    primary = text.split("## The primary contrast")[1].split("##")[0]
    seeds = analysis.primary_table(runs)["seed_diffs"].iloc[0]
    assert len(seeds) == 4 and all(f"{d:+.4f}" in primary for d in seeds)
    assert "own multipliers" not in text  # no arm moved
    ends = text.split("## The ends' arms")[1]
    for row in analysis.ends_table(runs).itertuples():
        assert row.contrast in ends and str(round(row.diff, 4)) in ends


def test_the_map_draws_an_arm_at_its_own_multipliers_beside_each_cell(tmp_path):
    ladder = [("micro", 1024), ("micro", 8192)]
    sweep = write_sign_flip(tmp_path / "sw", ladder=ladder)
    for model, v in ladder:
        write_own(sweep, model, v)
    runs = load_results(sweep).runs
    fig = figures.fig_map(runs)
    drawn = dict(zip(*reversed(fig.axes[0].get_legend_handles_labels()), strict=True))
    own = analysis.effect_tables(runs).own
    (bars,) = [a for label, a in drawn.items() if label.startswith("tied − untied_own")]
    x, y = bars.lines[0].get_data()
    assert list(y) == pytest.approx(own.sort_values("rho")["diff"].tolist())
    assert list(x) == pytest.approx((own.sort_values("rho")["rho"] * figures.OWN_NUDGE).tolist())
    assert "Grey crosses: an arm at its own multipliers" in caption_of(fig)


def test_the_maps_caption_names_the_points_whose_own_contrast_mixes_precisions(tmp_path):
    ladder = [("micro", 1024), ("micro", 8192)]
    sweep = write_sign_flip(tmp_path / "sw", ladder=ladder)
    own = {v: write_own(sweep, model, v) for model, v in ladder}
    for path in sweep.glob("*/summary.json"):
        precision = "fp32" if path.parent in own[8192] else "bf16"
        path.write_text(json.dumps(json.loads(path.read_text()) | {"precision": precision}))
    caption = caption_of(figures.fig_map(load_results(sweep).runs))
    assert "At V = 8,192 their runs mix bf16 and fp32." in caption
    assert "1,024" not in caption.split("Grey crosses")[1].split("\n")[0]


def test_the_tables_count_the_seeds_of_each_drawn_cell_not_of_every_arm(tmp_path):
    """An ends' arm run at one seed leaves n as the tied/untied cells have it (4), as the map's."""
    sweep = write_sign_flip(tmp_path / "sw", ladder=[("micro", 1024)])
    write_ends(sweep, "micro", 1024, seeds=(0,))
    results = load_results(sweep)
    (path,) = tables.write_sign_flip_tables(tmp_path, results.runs, results.history)
    runs_line = path.read_text().splitlines()[0]
    assert runs_line.endswith("n = 4 seeds/cell, tied and untied paired by seed.")
