"""Figures 1-5 (figures.loss, similarity) on hand-built results."""

from __future__ import annotations

import math

import numpy as np
import pytest
from fake_results import (
    DIVERGED,
    FAILED,
    RUNNING,
    strip_probes,
    write_log_spaced_sweep,
    write_run,
    write_sweep,
)
from helpers import caption_of, lines, texts
from matplotlib.colors import to_hex

from tiedvsuntied.analysis.load import load_results
from tiedvsuntied.analysis.stats import aggregate_runs
from tiedvsuntied.analysis.theory import gaussian_logit_loss
from tiedvsuntied.figures.loss import fig_grad_split, fig_initial_loss, fig_val_loss
from tiedvsuntied.figures.similarity import fig_embedding_geometry
from tiedvsuntied.figures.style import (
    REF_COLOR,
    STATUS_MARKER,
    TIE_COLOR,
)

TIED, UNTIED = TIE_COLOR[True].lower(), TIE_COLOR[False].lower()


def test_val_loss_colours_and_flags(drawn):
    fig = drawn.outputs["fig1_val_loss"][1]
    colours = {to_hex(line.get_color()) for line in lines(fig)}
    assert TIED in colours and UNTIED in colours
    assert colours <= {TIED, UNTIED, to_hex(REF_COLOR)}
    assert len(fig.axes) == 2 * 2  # 2 sizes x 2 init stds
    flagged = " ".join(fig.flagged)
    assert f"{DIVERGED}: diverged at step 10" in flagged
    assert f"{RUNNING}: interrupted" in flagged  # no process holds it
    assert f"{FAILED}: failed" in flagged
    assert caption_of(fig).count("Marked:") == 1  # the footnote on the image


def test_diverged_curve_ends_where_it_diverged(fig_results, drawn):
    fig = drawn.outputs["fig1_val_loss"][1]
    div = fig_results.runs.set_index("name").loc[DIVERGED]
    ends = [line for line in lines(fig) if line.get_marker() == STATUS_MARKER["diverged"]]
    assert len(ends) == 1
    h = fig_results.history[
        (fig_results.history["run_id"] == div["run_id"]) & fig_results.history["val/loss"].notna()
    ]
    assert ends[0].get_xdata()[-1] == h["tokens"].iloc[-1]
    assert h["step"].max() <= div["diverged_at_step"]
    dashed = [
        line
        for line in lines(fig)
        if line.get_linestyle() == "--" and to_hex(line.get_color()) == TIED
    ]
    assert any(max(line.get_xdata()) == h["tokens"].max() for line in dashed)


def test_evaluations_at_a_fixed_interval_keep_the_token_axis(drawn):
    fig = drawn.outputs["fig1_val_loss"][1]
    assert fig.axes[0].get_xscale() == "linear" and "training tokens" in texts(fig)


def test_loss_vs_params_plots_seed_means_and_skips_unfinished(fig_results, drawn):
    fig = drawn.outputs["fig2_loss_vs_params"][1]
    skipped = " ".join(fig.skipped)
    for name, status in ((DIVERGED, "diverged"), (RUNNING, "interrupted"), (FAILED, "failed")):
        assert f"{name}: {status}, no final loss" in skipped
    agg = aggregate_runs(fig_results.runs)
    plotted = np.concatenate([line.get_ydata() for line in fig.axes[0].get_lines()])
    for mean in agg["mean"]:
        assert np.isclose(plotted, mean).any()
    xs = np.concatenate([line.get_xdata() for line in fig.axes[1].get_lines()])
    assert set(xs) <= set(fig_results.runs["params_non_embedding"].astype(float))
    assert fig.axes[0].get_xscale() == "log"


def test_initial_loss_against_ln_v_and_prediction(fig_results, drawn):
    fig = drawn.outputs["fig3_initial_loss"][1]
    ln_v = math.log(512)
    left = fig.axes[0]
    assert any(np.allclose(line.get_ydata(), ln_v) for line in left.get_lines())
    diamonds = np.concatenate(
        [line.get_ydata() for line in left.get_lines() if line.get_marker() == "D"]
    )
    sigmas = fig_results.runs["init_logit_std"].dropna().unique()
    for pred in gaussian_logit_loss(sigmas, 512):
        assert np.isclose(diamonds, pred).any()
    measured = np.concatenate(
        [line.get_ydata() for line in left.get_lines() if line.get_marker() == "o"]
    )
    assert sorted(measured) == pytest.approx(sorted(fig_results.runs["init_val_loss"]))


def test_no_initial_loss_yet_is_said_in_the_figure(fig_results):
    runs = fig_results.runs.assign(init_val_loss=np.nan)
    fig = fig_initial_loss(runs)
    assert "no run has an initial validation loss yet" in texts(fig)
    assert len(fig.skipped) == len(runs)


def test_a_zero_init_head_sits_at_ln_v_in_the_initial_loss_figure_and_off_the_log_sigma_axis(
    fig_results,
):
    runs = fig_results.runs.copy()
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


def test_embedding_geometry_says_when_probes_are_missing(tmp_path):
    sweep = tmp_path / "sw"
    write_run(sweep, tie=True, probes=False)
    write_run(sweep, tie=False, token_freq=False)
    runs = load_results(sweep).runs
    fig = fig_embedding_geometry(runs)
    text = texts(fig)
    assert "no probe arrays with token frequencies" in text
    assert "tie=true_init=0.02_model=nano_seed=0: no probes/step_*.npz" in " ".join(fig.skipped)
    assert "token_freq.npy missing" in " ".join(fig.skipped)
    # the untied run's cosines are still drawn
    assert any(p.get_height() > 0 for ax in fig.axes for p in ax.patches)


def test_embedding_geometry_one_run_per_tie_and_setting(fig_results, drawn):
    fig = drawn.outputs["fig4_embedding_geometry"][1]
    assert f"{len(fig_results.runs) - 4} other run(s)" in " ".join(fig.skipped)
    assert "micro" in fig.legends[0].get_title().get_text()  # the title rides on the legend
    assert len(fig.axes) == 4 * 2  # norms, cosines per stratum raw and centred, in/out cosines


def test_geometry_from_a_bundle_draws_no_init_it_did_not_keep(tmp_path):
    """A bundle keeps probe files at the best and last step only, per-token arrays and cosines
    for the lowest seed: the last probe is drawn, and no later probe passes for step 0."""
    sweep = write_sweep(tmp_path / "sw", init_stds=("1.0",), seeds=(0, 1))
    for path in sweep.glob("*/probes/step_0000000.npz"):
        path.unlink()
    strip_probes(sweep, runs="*seed=1-*")
    res = load_results(sweep)
    fig = fig_embedding_geometry(res.runs)
    assert not fig.empty
    strata = fig.axes[2]  # raw cosines of the first column
    colours = {to_hex(line.get_color()) for line in strata.get_lines() if line.get_marker() == "o"}
    assert colours == {TIED, UNTIED}  # the last probe, and no grey "init"
    assert "no probe at step 0" in caption_of(fig)


def test_grad_split_tied_only_and_missing_metrics(fig_results, drawn):
    fig = drawn.outputs["fig5_grad_split"][1]
    n_untied = int((fig_results.runs["tie"] == False).sum())  # noqa: E712
    assert f"{n_untied} untied run(s)" in " ".join(fig.skipped)
    assert {to_hex(line.get_color()) for line in lines(fig)} == {TIED, to_hex(REF_COLOR)}
    bare = fig_results.history.drop(columns=["train/grad_norm_in", "train/grad_norm_out"])
    fig = fig_grad_split(fig_results.runs, bare)
    assert "gradient split not logged" in texts(fig)
    assert "train/grad_norm_in, train/grad_norm_out not logged" in caption_of(fig)


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
    assert "pre-clip" in texts(fig)


@pytest.fixture(scope="module")
def log_spaced(tmp_path_factory):
    """Runs evaluated at the log-spaced early steps too, written and loaded once here."""
    return load_results(write_log_spaced_sweep(tmp_path_factory.mktemp("log") / "sw"))


def test_loss_curves_use_a_log_step_axis_for_log_spaced_evaluations(log_spaced):
    res = log_spaced
    fig = fig_val_loss(res.runs, res.history)
    ax = fig.axes[0]
    assert ax.get_xscale() == "symlog" and "log scale" in fig.axes[-1].get_xlabel()
    assert -0.1 < ax.get_xlim()[0] <= 0 and ax.get_xlim()[1] >= 20  # steps 0 to 20 in view
    curves = {(to_hex(line.get_color()), line.get_linewidth() < 1): line for line in lines(fig)}
    tied, untied = curves[(TIED, False)], curves[(UNTIED, False)]
    assert list(tied.get_xdata()[:4]) == [0, 1, 2, 4]  # step 0 has a place on the axis
    # where the arms overlap both stay visible: tied dashed and lighter, on top of untied solid
    assert tied.get_linestyle() == "--" and untied.get_linestyle() == "-"
    assert tied.get_zorder() > untied.get_zorder() and tied.get_alpha() < 1
    # the training loss at every step, thin, beneath
    train = curves[(TIED, True)]
    assert list(train.get_xdata()) == list(range(1, 21)) and train.get_zorder() < 2
    assert "thin: training loss, every step to 20" in texts(fig)
    tokens = fig_val_loss(res.runs, res.history, x="tokens")
    assert tokens.axes[0].get_xscale() == "linear" and "training tokens" in texts(tokens)
    assert not any(line.get_linewidth() < 1 for line in lines(tokens))  # no train loss
    with pytest.raises(ValueError, match="x='steps'"):
        fig_val_loss(res.runs, res.history, x="steps")


def test_gradient_split_follows_the_step_axis_of_figure_1(log_spaced):
    res = log_spaced
    fig = fig_grad_split(res.runs, res.history)
    assert fig.axes[0].get_xscale() == "symlog" and fig.axes[0].get_xlim()[0] > -0.1
    first = fig.axes[0].get_lines()[0]
    assert first.get_xdata()[0] == 1  # gradients from step 1, at their step
    tokens = fig_grad_split(res.runs, res.history, x="tokens")
    assert tokens.axes[0].get_xscale() == "linear"
