"""studies.size_or_tokens.maps: the third edition's map and token axis with the fourth edition's
cells, on a fake sign_flip sweep (tests/fake_sign_flip.py) and hand-made size_or_tokens runs
(test_size_or_tokens_effects.fake_run) whose per-seed differences are known."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from fake_sign_flip import read_only_sign_flip
from helpers import caption_of, lines, texts
from scipy import stats
from test_size_or_tokens_effects import BASE, SEED_OFFSET, fake_run, lr_check

from tiedvsuntied.studies.sign_flip import figures as sign_flip_figures
from tiedvsuntied.studies.size_or_tokens import effects, maps, readings

# tied − untied per point and seed: every cell of the fourth edition, no two seeds alike
EFFECT = {
    "micro-10mb": {0: 0.030, 1: 0.034, 2: 0.028, 3: 0.033},
    "b256x8-10mb": {0: 0.012, 1: 0.015, 2: 0.011, 3: 0.014},
    "b256x8-45mb": {0: 0.020, 1: 0.026, 2: 0.024},  # three seeds
    "micro-45mb": {0: 0.041, 1: 0.052, 2: 0.044, 3: 0.049},
    "b512x8-10mb": {0: -0.004, 1: 0.001, 2: -0.007, 3: -0.002},
    "b384x6-10mb": {0: 0.006},  # one seed: no interval
}
TEN, FORTY_FIVE = (maps.BUDGET_STYLE[b][0] for b in ("10 MB", "45 MB"))  # their legend labels


def fourth(effect=EFFECT) -> pd.DataFrame:
    """Tied and untied at each of ``effect``'s points and seeds, each run at its point's planned
    rho and tokens per parameter."""
    rows = []
    for point, per_seed in effect.items():
        at = {"rho": maps.planned_rho(point)}
        at |= {"tokens_per_param": effects.planned_tokens_per_param(point)}
        rows += [run | at for run in lr_check(point)]
        for seed, diff in per_seed.items():
            untied = BASE + SEED_OFFSET[seed]
            rows.append(fake_run(point, "untied", seed, untied, **at))
            rows.append(fake_run(point, "tied", seed, untied + diff, **at))
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def third(tmp_path_factory) -> pd.DataFrame:
    return read_only_sign_flip(tmp_path_factory)[1].runs


@pytest.fixture(scope="module")
def both(third) -> pd.DataFrame:
    return pd.concat([third, fourth()], ignore_index=True)


@pytest.fixture(scope="module")
def figs(both) -> dict:
    """Both figures drawn once from both editions' runs, for the tests that read them."""
    return {name: getattr(maps, name)(both) for name in ("fig_map", "fig_tokens_per_param")}


def drawn(fig) -> dict:
    """The panel's labelled artists by label."""
    return dict(zip(*reversed(fig.axes[0].get_legend_handles_labels()), strict=True))


def points(artist) -> list[float]:
    """An errorbar's (or a line's) marker positions, x and y of each in turn."""
    line = artist.lines[0] if hasattr(artist, "lines") else artist
    return list(np.ravel(line.get_xydata()))


def intervals(container) -> list[float]:
    """An errorbar's vertical bars, low and high of each in turn."""
    return [y for seg in container.lines[2][0].get_segments() for y in sorted(seg[:, 1])]


def expected(point: str, x: str, places: dict) -> tuple[float, float, float, float]:
    """A cell's x as drawn, its mean and the t-interval of its seeds' differences."""
    diffs = list(EFFECT[point].values())
    interval = stats.ttest_1samp(diffs, 0.0).confidence_interval(0.95) if len(diffs) > 1 else None
    at = maps.planned_rho(point) if x == "rho" else effects.planned_tokens_per_param(point)
    nudge = places.get(point, (1.0,))[0]
    low, high = (interval.low, interval.high) if interval else (np.nan, np.nan)
    return at * nudge, float(np.mean(diffs)), low, high


def test_the_maps_new_cells_land_at_their_rho_with_their_mean_interval_and_n(figs):
    fig = figs["fig_map"]
    ten = drawn(fig)[TEN]
    with_bars = ["micro-10mb", "b256x8-10mb", "b512x8-10mb"]  # the study's order; 384 x 6: 1 seed
    want = [expected(p, "rho", maps.MAP_AT) for p in with_bars]
    assert points(ten) == pytest.approx([v for x, y, *_ in want for v in (x, y)])
    assert intervals(ten) == pytest.approx([v for *_, low, high in want for v in (low, high)])
    one = [line for line in lines(fig) if line.get_marker() == "h" and len(line.get_xdata()) == 1]
    x, y, *_ = expected("b384x6-10mb", "rho", maps.MAP_AT)
    assert [points(line) for line in one] == [pytest.approx([x, y])]  # no bar at one seed
    text = texts(fig)
    assert "d = 512 × 8 10 MB, n = 4" in text and "d = 384 × 6 10 MB, n = 1" in text
    assert "micro, 10 MB, n = 4" in text and "d = 256 × 8, 10 MB, n = 4" in text


def test_the_committed_predictions_are_named_ticks_beside_the_sign_tests_cells(figs):
    fig = figs["fig_map"]
    ticks = [line for line in lines(fig) if line.get_color() == maps.TICK_STYLE["color"]]
    ticks = [line for line in ticks if line.get_marker() in ("None", None, "")]
    ends = {(round(line.get_xdata()[1], 9), line.get_ydata()[0]) for line in ticks}
    for point, predicted in readings.SIGN_PREDICTIONS.items():
        x = maps.planned_rho(point) * maps.MAP_AT.get(point, (1.0,))[0] / maps.TICK_GAP
        assert {(round(x, 9), line.value) for line in predicted} <= ends, point
    assert maps.TICK_LABEL in drawn(fig)
    caption = caption_of(fig)
    assert "ρ (ρ alone) +0.053 [+0.043, +0.063]" in caption  # d = 512 x 8, PREDICTIONS.md
    assert "Vp (V-ladder's line on parameters) -0.006 [-0.018, +0.007]" in caption


def test_the_45mb_cells_are_on_the_token_axis_open_and_not_on_the_map(figs):
    on_map, on_axis = figs["fig_map"], figs["fig_tokens_per_param"]
    assert FORTY_FIVE not in drawn(on_map) and "45 MB, n =" not in texts(on_map)
    assert "Not on this map: the 45 MB cells" in caption_of(on_map)
    open_ = drawn(on_axis)[FORTY_FIVE]
    want = [expected(p, "tokens_per_param", maps.TOKENS_AT) for p in ("b256x8-45mb", "micro-45mb")]
    assert points(open_) == pytest.approx([v for x, y, *_ in want for v in (x, y)])
    assert intervals(open_) == pytest.approx([v for *_, low, high in want for v in (low, high)])
    assert open_.lines[0].get_markerfacecolor() == "white"  # filled: 10 MB; open: 45 MB
    ten = drawn(on_axis)[TEN]
    assert ten.lines[0].get_markerfacecolor() != "white"
    assert ten.lines[0].get_color() != open_.lines[0].get_color()  # and apart by colour
    assert "micro 45 MB, n = 4" in texts(on_axis)  # named under its interval


@pytest.mark.parametrize("name", ["fig_map", "fig_tokens_per_param"])
def test_the_third_editions_cells_and_lines_are_drawn_as_its_own_figure_draws_them(
    both, figs, name
):
    """Every line of sign_flip's figure (cells, intervals, lines, rings), drawn from the third
    edition's runs alone, is in the fourth edition's, drawn from both editions' runs."""
    third_only = both[both["sweep"].str.startswith("sign_flip")]
    theirs = getattr(sign_flip_figures, name)(third_only)
    ours = figs[name]
    mine = [line.get_xydata().round(12).tolist() for line in lines(ours)]
    for line in lines(theirs):
        assert line.get_xydata().round(12).tolist() in mine, line.get_label()
    assert sign_flip_figures.SIGN in caption_of(ours)


@pytest.mark.parametrize("name", ["fig_map", "fig_tokens_per_param"])
def test_each_caption_states_model_corpus_v_n_and_the_sign(figs, name):
    fig = figs[name]
    caption = caption_of(fig)
    assert "211 Project Gutenberg books held out by author" in caption
    assert "V = 1,024, 2,048, 4,096, 8,192, 16,384" in caption and "body512x8 (d=512)" in caption
    assert "n = 4 seeds/cell (third edition), 1–4 seeds/cell (fourth edition)" in caption
    assert "> 0 = tying costs" in caption and "> 0: tying costs" in fig.axes[0].get_ylabel()
    assert "Not run yet" not in caption  # every planned cell has run here


def test_both_draw_on_a_partial_table():
    """One fourth-edition cell run: both figures draw it and name the cells not run (the shipped
    bundle as it stands: tests/e2e/test_size_or_tokens_shipped_e2e.py)."""
    runs = fourth({"b256x8-10mb": EFFECT["b256x8-10mb"]})
    for name in ("fig_map", "fig_tokens_per_param"):
        fig = getattr(maps, name)(runs)
        assert fig.empty is None, name
        assert "d = 384 × 6, 10 MB" in caption_of(fig).split("Not run yet (fourth edition):")[1]
        assert "d = 256 × 8, 10 MB, n = " in texts(fig)
