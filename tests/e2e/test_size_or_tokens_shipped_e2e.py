"""The fourth edition's shipped bundle (experiments/size_or_tokens/results) as it stands: its
runs pinned to bf16, its 10 MB cell paired by seed at the third edition's chosen lr, and both
maps drawn and written from it. The unit tier's tests of the same code use hand-made runs
(tests/unit/test_size_or_tokens_effects.py, test_size_or_tokens_map.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import caption_of, texts

from tiedvsuntied.analysis.load import load_results
from tiedvsuntied.figures.style import save_figure
from tiedvsuntied.studies.size_or_tokens import analysis, effects, figures, maps, pieces, twins
from tiedvsuntied.study import registry

STUDY = registry.study("size_or_tokens")
SHIPPED = Path(__file__).resolve().parents[2] / "experiments" / "size_or_tokens" / "results"
pytestmark = pytest.mark.slow


@pytest.mark.parametrize("bundle", ["results", "results_processor"])
def test_every_shipped_run_was_asked_for_bf16_and_trained_in_it_at_every_start(bundle):
    """HYPOTHESES.md pins the precision: each shipped run's config says bf16 (part of its id) and
    every start its summary records (a resume is a start) trained bf16."""
    from tiedvsuntied.results import records

    bundle = STUDY.home / bundle
    runs = sorted(p for p in bundle.iterdir() if (p / "summary.json").is_file())
    assert runs, f"no shipped run in {bundle}"
    for run in runs:
        config, summary = records.read_config(run), records.read_summary(run).to_dict()
        assert config["trainer"]["precision"] == "bf16", run.name
        assert summary["starts"] and {s["precision"] for s in summary["starts"]} == {"bf16"}


def test_the_shipped_bundles_256x8_10mb_cell_has_one_pair_per_shipped_seed():
    runs = load_results(SHIPPED).runs
    at = runs[runs["model"].eq("body256x8") & runs["max_steps"].eq(1347)]
    both = at.groupby("seed")["tie"].nunique()
    cell = effects.cells(runs).set_index(["point", "contrast"])
    assert cell.loc[("b256x8-10mb", "tied − untied"), "n_seeds"] == int((both == 2).sum()) > 0


def test_the_shipped_10mb_cell_is_read_at_the_third_editions_chosen_lr():
    runs = load_results(SHIPPED).runs
    cell = (
        effects.cells(runs).set_index(["point", "contrast"]).loc[("b256x8-10mb", "tied − untied")]
    )
    lrs = pieces.third_lr(effects.POINTS["b256x8-10mb"])  # its lr table (sign_flip's)
    assert (cell["lr_first"], cell["lr_second"]) == (float(lrs["tied"]), float(lrs["untied"]))


def test_both_maps_draw_the_shipped_bundle_and_write_it(tmp_path):
    runs = load_results(SHIPPED).runs
    for name in ("fig_map", "fig_tokens_per_param"):
        fig = getattr(maps, name)(runs)
        assert fig.empty is None, name
        (png,) = save_figure(fig, tmp_path, name, ["png"])  # rendered whole, as --paper writes it
        assert png.stat().st_size
        # every 10 MB cell has shipped whole (b2 last): each drawn with its seeds, none named unread
        assert "(fourth edition):" not in caption_of(fig), name
        assert "d = 384 × 6 10 MB, n = 4" in texts(fig), name  # its label breaks after the body
        assert "d = 256 × 8, 10 MB, n = 4" in texts(fig), name


def test_the_equal_parameter_reading_draws_both_editions_bundles_each_cell_once(tmp_path):
    """a0 re-ran the third edition's 10 MB cells: with both bundles loaded each such cell is one
    point (matching tied and untied at equal parameters once), and the figure is written."""
    third = SHIPPED.parents[1] / "sign_flip" / "results"
    runs = load_results(third, SHIPPED).runs
    fig = figures.fig_equal_params(runs)
    (png,) = save_figure(fig, tmp_path, "size_or_tokens_fig_equal_params", ["png"])
    assert png.stat().st_size
    rows = analysis.equal_params(effects.settled(runs)[0])
    assert not rows.duplicated(["budget_mb", "arm", "label"]).any()


def test_the_processor_floor_sets_each_rerun_beside_its_shipped_run_on_another_processor():
    """results_processor/ (the study README, 'The processor floor'): shipped runs trained again on
    another CPU; each has the shipped run of its id as its twin, computed on another processor,
    and the README's floor is what ``twins`` prints of them."""
    again = STUDY.home / "results_processor"
    table = twins.again(load_results(SHIPPED).runs, load_results(again).runs)
    assert len(table) == len(list(again.glob("*/summary.json"))) >= 2
    assert table["hardware_shipped"].ne(table["hardware_again"]).all()
    floor = twins.floor(table, ("again", "shipped"))
    readme = (STUDY.home / "README.md").read_text()
    assert len(floor) and all(f"floor of {f:.5f} bpb" in readme for f in floor["floor"])
