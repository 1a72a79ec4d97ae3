"""Figures 6-11 (figures.paired, similarity) and the tables (figures.tables)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from fake_results import write_log_spaced_sweep, write_run, write_sweep
from helpers import caption_of, lines, texts
from matplotlib.colors import to_hex

from tiedvsuntied.analysis.arms import arms_table
from tiedvsuntied.analysis.early import early_steps, early_summary
from tiedvsuntied.analysis.load import load_results
from tiedvsuntied.analysis.stats import noise_floor, paired_table
from tiedvsuntied.figures import tables
from tiedvsuntied.figures.paired import fig_arms, fig_paired_difference
from tiedvsuntied.figures.similarity import fig_finetune
from tiedvsuntied.figures.style import (
    REGISTRY,
    TIE_COLOR,
)
from tiedvsuntied.figures.tables import write_param_tables, write_tables

TIED, UNTIED = TIE_COLOR[True].lower(), TIE_COLOR[False].lower()


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
    title = caption_of(fig)
    assert "95% t-interval over n = 2–3 seeds per cell" in title and "noise floor" in title
    assert "from 2 re-runs of a config" in title
    # every run's best validation step is its last: one panel, not two identical ones
    assert len(fig.axes) == 1 and "= best validation step" in fig.axes[0].get_title()
    assert "step 20" in fig.axes[0].get_title() and fig.axes[0].get_xlabel() == "init std (nano)"
    assert sum(len(ax.collections) for ax in fig.axes) >= 2 + 1  # error bars + the floor band
    t = paired_table(res.runs, ("final",))
    errorbar_means = [line.get_ydata()[0] for line in lines(fig) if line.get_marker() == "o"]
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
    caption = caption_of(fig_paired_difference(runs))
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
    assert "t-interval over n = 1 seed per cell (below 2 seeds: the mean only)" in caption_of(fig)
    assert "noise floor not measured" in caption_of(fig)
    assert not any(ax.collections for ax in fig.axes)  # one seed: a mean, no interval drawn
    legend = [h.get_text() for h in fig.legends[0].get_texts()]
    assert legend == ["fewer than 2 seeds: mean only, no interval", "one seed"]


def test_parameter_table_files(tmp_path):
    """GPT-2 small: 124,439,808 tied, 163,037,184 untied (the published counts)."""
    md, tex = write_param_tables(tmp_path)
    small = next(line for line in md.read_text().splitlines() if line.startswith("| small "))
    assert "124,439,808" in small and "163,037,184" in small
    assert r"\begin{tabular}" in tex.read_text() and "124{,}439{,}808" in tex.read_text()


def test_table_early_names_the_runs_and_gives_steps_per_cell(tmp_path):
    res = load_results(write_log_spaced_sweep(tmp_path / "sw"))
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


def test_finetune_figure_draws_one_trajectory_per_mode_from_the_logged_drift_and_retention():

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
            "variant": [f"finetune.trainable={t}, head.untie={u}" for u, t in modes + [modes[0]]],
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
    mode = "finetune.trainable=head, head.untie=keep"
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


def test_anisotropy_draws_tied_untied_input_and_output_per_row(drawn):

    fig = drawn.outputs["fig9_anisotropy"][1]
    colours = {(to_hex(line.get_color()), line.get_linestyle()) for line in lines(fig)}
    assert {(TIED, "-"), (UNTIED, "-"), (UNTIED, "--")} <= colours
    assert "rare and unseen strata" in caption_of(fig)


def test_geometry_figures_on_fine_tuning_runs_only_say_where_to_look_in_one_panel(fig_results):
    from tiedvsuntied.figures.similarity import fig_anisotropy, fig_cka

    history = fig_results.history.assign(
        **{"drift/emb_cos_seen": 0.99}
    )  # what fine-tuning runs log
    fig = fig_anisotropy(fig_results.runs, history)
    assert len(fig.axes) == 1 and "their embedding drift is figure 7" in texts(fig)
    assert len(fig.skipped) == len(fig_results.runs)
    tied_only = fig_results.runs[fig_results.runs["tie"] == True]  # noqa: E712 (no partners: no pairs)
    assert len(fig_cka(tied_only).axes) == 1


def test_crossover_compares_vocabularies_as_a_ratio_at_their_embedding_share(tmp_path):
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
        for line in lines(fig)
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


def test_arms_and_anisotropy_on_tied_runs_only_draw_and_name_nothing_else(fig_results):
    from tiedvsuntied.figures.similarity import fig_anisotropy

    tied = fig_results.select(fig_results.runs["tie"] == True)  # noqa: E712
    fig = fig_arms(tied.runs, tied.history)
    assert fig.empty == "only the tied arm finished: no other arm to compare"
    legend = [t.get_text() for t in fig_anisotropy(tied.runs, tied.history).legends[0].texts]
    assert legend[0] == "tied" and not any(label.startswith("untied") for label in legend)


def test_figures_6_and_10_give_the_tied_untied_pair_one_sign_and_say_it(tmp_path):
    """The untied arm's point in figure 10 (tied − arm) is figure 6's tied − untied, with its
    interval; each figure states its sign."""
    write_sweep(tmp_path / "s", init_stds=("0.02",), seeds=(0, 1, 2))
    results = load_results(tmp_path / "s")
    pair = paired_table(results.runs, ("final",)).iloc[0]
    six = fig_paired_difference(results.runs)
    ten = fig_arms(results.runs, results.history)
    assert "sign: tied − untied (> 0: tying costs)" in caption_of(six)
    assert "sign: tied − arm, as tied − untied in figure 6" in caption_of(ten)
    (bar,) = [c for c in ten.axes[1].containers]  # the untied arm's errorbar
    mean = bar.lines[0].get_ydata()[0]
    assert mean == pytest.approx(pair["diff"]) and pair["diff"] != 0
    (low, high) = sorted(bar.lines[2][0].get_segments()[0][:, 1])
    assert (low, high) == pytest.approx((pair["low"], pair["high"]))


def test_table_arms_gives_figure_6s_number_for_the_untied_arm_with_its_sign(tmp_path):
    """table_arms.md (and arms_table) is tied − arm, as figure 6's tied − untied: the untied arm's
    row is figure 6's point, the same number with the same sign, and its header says so."""
    sweep = write_sweep(tmp_path / "s", init_stds=("1.0",), seeds=(0, 1, 2))
    for seed in (0, 1, 2):  # a third arm, so table_arms.md is written
        write_run(sweep, tie=True, init_std="1.0", seed=seed, t5_rescale=True, floor_shift=-0.2)
    results = load_results(sweep)
    pair = paired_table(results.runs, ("final",)).iloc[0]
    six = [
        ln.get_ydata()[0]
        for ln in lines(fig_paired_difference(results.runs))
        if ln.get_marker() == "o"
    ]
    untied = arms_table(results.runs, ("final",)).set_index("arm").loc["untied"]
    assert six == pytest.approx([pair["diff"]]) and pair["diff"] != 0
    assert (untied["diff"], untied["low"], untied["high"]) == pytest.approx(
        (pair["diff"], pair["low"], pair["high"])
    )
    t5 = arms_table(results.runs, ("final",)).set_index("arm").loc["tied (t5 rescale: True)"]
    tied = results.runs[results.runs["tie"].eq(True) & results.runs["variant"].fillna("").eq("")]
    assert t5["diff"] > 0 and t5["mean_t"] == pytest.approx(tied["test_loss"].mean())
    text = (write_tables(tmp_path / "o", results.runs)[0].parent / "table_arms.md").read_text()
    assert "Sign: tied − arm (> 0: tying costs" in text and "| diff: tied − arm |" in (
        text.replace("  ", " ").replace("  ", " ")
    )
    row = next(ln for ln in text.splitlines() if "| untied " in ln and "| final " in ln)
    assert f"{pair['diff']:.4f}".rstrip("0") in row
