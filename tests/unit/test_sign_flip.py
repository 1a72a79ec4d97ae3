"""The third edition's analysis (studies.sign_flip.analysis) on a fake sign_flip sweep
(fake_sign_flip) whose tying effect is designed to change sign at a known rho; the runs table's
new columns."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from fake_results import write_run
from fake_sign_flip import (
    CROSSOVER,
    END_ARMS,
    LADDER,
    TIED_SHIFT,
    designed_effect,
    read_only_sign_flip,
    write_ends,
    write_gpu_sign_flip,
    write_own,
    write_point,
    write_sign_flip,
)
from scipy import stats
from statsmodels.stats.multitest import multipletests

from tiedvsuntied.analysis.load import load_results
from tiedvsuntied.analysis.rows import HELDOUT_COLUMNS, SUMMARY_COLUMNS
from tiedvsuntied.results.metrics import VAL_BPB
from tiedvsuntied.studies.sign_flip import analysis as sign_flip
from tiedvsuntied.studies.sign_flip import curve as sign_flip_curve
from tiedvsuntied.studies.sign_flip import tokens as sign_flip_tokens


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    return read_only_sign_flip(tmp_path_factory)[0]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return read_only_sign_flip(tmp_path_factory)[1]


def summaries(sweep) -> pd.DataFrame:
    """Every run's summary.json, read here without the package's reader."""
    return pd.DataFrame([json.loads(p.read_text()) for p in sweep.glob("*/summary.json")])


def test_the_runs_table_reads_the_new_fields_and_old_runs_give_none(tmp_path, results, sweep):
    written = summaries(sweep).set_index("run_id")
    runs = results.runs.set_index("run_id")
    for column in ("rho", "rho_untied", "test_bpb", "train_bytes", "tokens_per_nonemb_param"):
        assert runs[column].to_numpy() == pytest.approx(written.loc[runs.index, column].to_numpy())
    bigram = written["heldout"].map(lambda h: h["test"]["bigram_bpb"])
    assert runs["test_bigram_bpb"].to_numpy() == pytest.approx(bigram[runs.index].to_numpy())
    assert set(runs["encoding"]) == {"bpe"} and not runs["git_dirty"].any()
    old = load_results(write_run(tmp_path / "old", vocab_size=512).parent).runs
    assert old[SUMMARY_COLUMNS].isna().all().all()


def test_adding_the_new_fields_changes_no_other_column(tmp_path):
    """The same run with and without the third edition's fields: every other column equal."""
    before = load_results(write_run(tmp_path / "a", seed=3).parent).runs
    after = load_results(write_run(tmp_path / "b", seed=3, bytes_per_token=3.0).parent).runs
    new = [*SUMMARY_COLUMNS, *HELDOUT_COLUMNS, "clip_frac", "path", "source", "sweep"]
    old = [c for c in before.columns if c not in new]
    pd.testing.assert_frame_equal(before[old], after[old])
    assert after[SUMMARY_COLUMNS].notna().all().all()


def test_each_point_says_which_way_rho_was_moved(results):
    ways = sign_flip.ladder(results.runs).groupby(["n_embd", "vocab_size"])["way"].first()
    assert ways[(128, 8192)] == "both"  # the micro body at V = 8192 is on both ladders
    assert ways[(64, 8192)] == ways[(256, 8192)] == "body"
    assert {ways[(128, v)] for v in (1024, 2048, 4096, 16384)} == {"V"}


def test_each_cell_is_the_t_interval_of_its_seeds_paired_bpb_with_holm(results, sweep):
    table = sign_flip.effect_table(results.runs)
    assert len(table) == len(LADDER) and (table["n_seeds"] == 4).all()
    written = summaries(sweep)
    cell = written[(written["n_embd"] == 128) & (written["vocab_size"] == 1024)]
    tied, untied = (cell[cell["tie"] == t].set_index("seed")["test_bpb"] for t in (True, False))
    diffs = tied - untied
    row = table[(table["n_embd"] == 128) & (table["vocab_size"] == 1024)].iloc[0]
    ci = stats.ttest_1samp(diffs, 0).confidence_interval(0.95)
    assert (row["diff"], row["low"], row["high"]) == pytest.approx((diffs.mean(), *ci))
    assert row["p"] == pytest.approx(stats.ttest_1samp(diffs, 0).pvalue)
    family = [*table["p"], *sign_flip.primary_table(results.runs)["p"]]  # HYPOTHESES.md's
    assert table["p_holm"].tolist() == pytest.approx(multipletests(family, method="holm")[1][:-1])
    assert row["bpb_tied"] == pytest.approx(tied.mean())
    assert row["rho"] == pytest.approx(cell["rho"].iloc[0])
    assert table["clip_frac_tied"].to_numpy() == pytest.approx(np.full(len(table), 0.02))
    assert table["rho"].is_monotonic_increasing


def test_each_cell_counts_its_runs_below_their_own_bigram(results, sweep):
    """H9: per arm, the runs whose test bpb ends below the bigram of their own training split."""
    written = summaries(sweep)
    bigram = written["heldout"].map(lambda h: h["test"]["bigram_bpb"])
    below = (
        (written["test_bpb"] < bigram)
        .groupby([written["n_embd"], written["vocab_size"], written["tie"]])
        .sum()
    )
    table = sign_flip.effect_table(results.runs)
    for row in table.itertuples():
        counts = (row.below_bigram_tied, row.below_bigram_untied)
        assert counts == (
            below[row.n_embd, row.vocab_size, True],
            below[row.n_embd, row.vocab_size, False],
        )
    assert 0 < below.sum() < len(written)  # the fake's runs fall on both sides: a real count


def test_the_primary_is_the_t_interval_of_each_seeds_slope_along_the_v_ladder(results, sweep):
    """HYPOTHESES.md's primary contrast: per seed, the least-squares slope of tied − untied test
    bpb on ln rho over the micro body's V points (not the body-ladder's), t over the seeds."""
    primary = sign_flip.primary_table(results.runs).iloc[0]
    written = summaries(sweep).query("n_embd == 128 and init_std == 'inv_sqrt_d'")
    wide = written.pivot_table(index=["seed", "rho"], columns="tie", values="test_bpb")
    diffs = (wide[True] - wide[False]).reset_index()
    slopes = [np.polyfit(np.log(d["rho"]), d[0], 1)[0] for _, d in diffs.groupby("seed")]
    low, high = stats.t.interval(0.95, len(slopes) - 1, np.mean(slopes), stats.sem(slopes))
    micro = [v for model, v in LADDER if model == "micro"]
    assert primary["points"] == len(micro) and primary["n_seeds"] == 4
    assert primary[["diff", "low", "high"]].tolist() == pytest.approx([np.mean(slopes), low, high])
    assert primary["low"] > 0  # the fake's effect grows with rho


def test_the_fitted_crossover_lies_where_the_cells_change_sign(results):
    """The cells' means change sign between two neighbouring rho; the fitted crossover and the
    designed one (fake_sign_flip.CROSSOVER) lie in the span of the points around them."""
    table = sign_flip.effect_table(results.runs)
    f, cross = sign_flip_curve.fits(results.runs)["inv_sqrt_d"]
    negative, positive = table[table["diff"] < 0], table[table["diff"] > 0]
    assert negative["rho"].max() < positive["rho"].min()  # one sign change along rho
    assert negative["rho"].min() < CROSSOVER < positive["rho"].max()
    assert negative["rho"].min() < cross["low"] < cross["rho"] < cross["high"]
    assert cross["high"] < positive["rho"].max() and cross["note"] == ""
    curve = sign_flip_curve.band(f, [cross["rho"]])
    assert curve["mean"].iloc[0] == pytest.approx(0, abs=1e-9)
    assert curve["low"].iloc[0] < 0 < curve["high"].iloc[0]


def test_a_curve_that_never_crosses_says_none_in_range(results):
    high = sign_flip.pairs(results.runs).query("rho_t > 0.6")
    cross = sign_flip_curve.crossover(sign_flip_curve.fit(high))
    span = f"{high['rho_t'].min():.2f}–{high['rho_t'].max():.2f}"
    assert np.isnan(cross["rho"]) and cross["note"] == f"none in range (ρ {span})"
    assert sign_flip_curve.crossover(
        sign_flip_curve.fit(high.query("vocab_size == 8192 and n_embd == 64"))
    )["note"].startswith("no fit")


@pytest.mark.parametrize("degree", [1, 2])
def test_the_crossovers_delta_interval_covers_the_truth_at_its_level(degree):
    """Coverage of the delta-method interval on 400 simulated ladders (7 points x 4 seeds, a
    linear or a curved truth crossing 0 at rho = 0.4, normal noise): within 0.90-0.99 of 95%."""
    rng = np.random.default_rng(degree)
    x = np.repeat(np.log([0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]), 4)
    x0 = np.log(0.4)
    truth = 0.15 * (x - x0) + (0.1 * (x - x0) ** 2 if degree == 2 else 0)
    covered = 0
    for _ in range(400):
        data = pd.DataFrame({"log_rho": x, "diff": truth + rng.normal(0, 0.03, len(x))})
        cross = sign_flip_curve.crossover(sign_flip_curve.fit(data, degree))
        covered += cross["low"] <= 0.4 <= cross["high"]
    assert 0.90 <= covered / 400 <= 0.99


def test_a_cells_offset_from_a_ladders_line_covers_zero_at_least_at_its_level():
    """Coverage of H5's (and held_out's) interval of cell − line on 400 simulated ladders (5
    points x 4 seeds, normal noise) and a cell of 4 seeds on the same line: the two standard
    errors add, and the t has the cell's 3 degrees of freedom, so it is conservative: 95-99%."""
    rng = np.random.default_rng(5)
    x = np.repeat(np.log([0.14, 0.28, 0.4, 0.57, 0.87]), 4)
    cell = {"seed": range(4), "rho_t": 0.25, "n_layer": 8, "n_embd": 256, "vocab_size": 8192}
    covered = 0
    for _ in range(400):
        line = sign_flip_curve.fit(
            pd.DataFrame({"log_rho": x, "diff": rng.normal(-0.018 * x, 0.008)})
        )
        diffs = rng.normal(-0.018 * np.log(0.25), 0.008, 4)
        row = sign_flip_curve._against(line, pd.DataFrame({**cell, "diff": diffs, "body_t": "b"}))
        covered += row["off_low"] <= 0 <= row["off_high"]
    assert 0.95 <= covered / 400 <= 0.99


def test_a_worse_lr_setting_of_one_arm_is_left_out_of_the_pairs(tmp_path):
    """Where the lr check ran a second setting, the cell keeps the one of the lower validation
    loss at its lowest seed, and its pairs stay one per seed (the cell and one other, not the
    whole ladder: 16 runs to write and read twice, not 56)."""
    import shutil

    sweep = write_sign_flip(tmp_path / "before", ladder=[("micro", 1024), ("micro", 8192)])
    copy = shutil.copytree(sweep, tmp_path / "after" / "sign_flip")
    write_point(copy, "micro", 1024, seed=0, tie=True, lr=0.01, floor_shift=1.0)
    again = sign_flip.effect_table(load_results(copy).runs)
    pd.testing.assert_frame_equal(again, sign_flip.effect_table(load_results(sweep).runs))


def test_the_token_axis_ends_at_each_cells_final_validation_effect(results, sweep):
    axis = sign_flip_tokens.token_axis(results.runs, results.history)
    written = summaries(sweep)
    cell = written[(written["n_embd"] == 256)]
    tied, untied = (cell[cell["tie"] == t].set_index("seed")["val_bpb"] for t in (True, False))
    last = axis[axis["n_embd"] == 256].sort_values("step").iloc[-1]
    assert last["mean"] == pytest.approx((tied - untied).mean()) and last["n"] == 4
    assert last["bytes"] == pytest.approx(cell["train_bytes"].mean())
    assert axis.groupby(sign_flip.CELL).size().eq(5).all()  # steps 0, 5, 10, 15, 20


def test_h5_holds_each_other_body_against_the_v_ladders_own_fit(results):
    """The fit is the V-ladder's alone (micro, recomputed with np.polyfit); a cell's ``off`` is
    its mean − that fit at its rho; a rho beyond the V-ladder's is flagged, not hidden."""
    both = sign_flip.pairs(results.runs)
    micro = both[both["n_embd"].eq(128)]
    line = np.polyfit(micro["log_rho"], micro["diff"], 1)
    table = sign_flip_curve.body_against_v(results.runs).set_index("n_embd")
    assert sorted(table.index) == [64, 256]  # the bodies other than the V-ladder's
    assert table["fit"].to_numpy() == pytest.approx(np.polyval(line, np.log(table["rho"])))
    assert table["off"].to_numpy() == pytest.approx((table["diff"] - table["fit"]).to_numpy())
    in_range = table["rho"].between(micro["rho_t"].min(), micro["rho_t"].max())
    assert table["in_range"].tolist() == in_range.tolist()
    assert (table["off_low"] < table["off"]).all() and (table["off"] < table["off_high"]).all()


def test_h5_flags_a_body_whose_effect_is_not_the_v_ladders_at_its_rho(tmp_path):
    """A body whose tied runs lose 0.5 nats more than their rho predicts: outside the band, and
    its interval of cell − fit excludes 0."""
    sweep = write_sign_flip(tmp_path, ladder=[("micro", v) for v in (1024, 4096, 8192, 16384)])
    for seed, tie in ((seed, tie) for seed in range(4) for tie in (True, False)):
        shift = designed_effect("d256", 8192) - TIED_SHIFT + 0.5 if tie else 0.0
        write_point(sweep, "d256", 8192, seed, tie, floor_shift=shift)
    (row,) = sign_flip_curve.body_against_v(load_results(sweep).runs).itertuples()
    assert row.n_seeds == 4 and row.in_range and not row.inside
    assert 0 < row.off_low < row.off


@pytest.mark.parametrize("on", list(sign_flip_curve.AXES))
def test_each_ladders_own_slope_is_a_per_seed_fit_and_their_gap_is_paired_by_seed(results, on):
    """Exploratory: on the log of rho or of tokens per parameter, the V-ladder's slopes (micro)
    and the body ladder's (the bodies at V = 8,192, micro's among them), recomputed with
    np.polyfit, and their per-seed difference."""
    both = sign_flip.pairs(results.runs)

    def slopes(points: pd.DataFrame) -> pd.Series:
        return points.groupby("seed").apply(
            lambda d: np.polyfit(np.log(d[f"{on}_t"]), d["diff"], 1)[0]
        )

    v, body = slopes(both[both["n_embd"].eq(128)]), slopes(both[both["vocab_size"].eq(8192)])
    table = sign_flip_curve.ladder_slopes(results.runs, on).set_index("ladder")
    assert table.loc["V", "seed_diffs"] == pytest.approx(v.tolist())
    assert table.loc["body", "seed_diffs"] == pytest.approx(body.tolist())
    assert table.loc["body", "points"] == 3 and table.loc["body", "held"] == "V = 8,192"
    gap = table.loc["body − V"]
    assert gap["seed_diffs"] == pytest.approx((body - v).tolist())
    assert (table["axis"] == on).all()
    fitted = sign_flip_curve.ladder_fits(results.runs, on)
    assert fitted["body"].n_pairs == 3 * 4
    assert np.exp(fitted["V"].log_rho[1]) == pytest.approx(
        both.loc[both["n_embd"].eq(128), f"{on}_t"].max()
    )


def test_where_rho_alone_sets_the_effect_the_ladders_slopes_on_it_agree(results):
    """The fake's effect is a line in ln rho alone: the ladders' per-seed gap holds 0 on rho."""
    gap = sign_flip_curve.ladder_slopes(results.runs, "rho").set_index("ladder").loc["body − V"]
    assert gap["low"] < 0 < gap["high"]


def test_a_held_out_point_is_predicted_by_each_ladders_line_made_without_it(results):
    """Exploratory (experiments/sign_flip/held_out.py): with d256 held out, each ladder's line
    on each axis is np.polyfit over the other points' pairs, read at d256's value on that axis,
    and ``off`` is d256's mean effect − that."""
    both = sign_flip.pairs(results.runs)
    cell, rest = both[both["n_embd"].eq(256)], both[~both["n_embd"].eq(256)]
    ladders = {"V": rest[rest["n_embd"].eq(128)], "body": rest[rest["vocab_size"].eq(8192)]}
    table = sign_flip_curve.held_out(results.runs, 256, 8, 8192)
    assert len(table) == len(sign_flip_curve.AXES) * len(ladders)
    for row in table.itertuples():
        points, at = ladders[row.ladder], cell[f"{row.axis}_t"].iloc[0]
        line = np.polyfit(np.log(points[f"{row.axis}_t"]), points["diff"], 1)
        assert row.at == pytest.approx(at) and row.fit == pytest.approx(
            np.polyval(line, np.log(at))
        )
        assert row.n_seeds == 4 and row.off == pytest.approx(cell["diff"].mean() - row.fit)


def test_h6_is_each_seeds_change_of_the_gap_from_mid_training_to_the_end(results):
    """Recomputed from the history: per seed tied − untied validation bpb at the middle
    evaluation (step 10 of 20) and the last, and the change between them."""
    table = sign_flip_tokens.gap_change(results.runs, results.history)
    row = table[table["n_embd"].eq(256)].iloc[0]
    assert (row.step_from, row.step_to) == (10, 20)
    bpb = results.history.set_index(["run_id", "step"])[VAL_BPB]
    cell = sign_flip.pairs(results.runs).query("n_embd == 256").sort_values("seed")
    runs = list(zip(cell.run_id_t, cell.run_id_u, strict=True))
    mid, end = (np.array([bpb[t, step] - bpb[u, step] for t, u in runs]) for step in (10, 20))
    assert [row.gap_from, row.gap_to] == pytest.approx([mid.mean(), end.mean()])
    assert row.seed_diffs == pytest.approx((end - mid).tolist())
    assert row["diff"] == pytest.approx((end - mid).mean())
    assert row["low"] < row["diff"] < row["high"]
    assert len(table) == len(LADDER)


def test_the_stable_phase_change_compares_the_evaluations_nearest_40_and_80_percent(results):
    """Exploratory: of evaluations at steps 0, 5, ... 20, the nearest to 8 and to 16."""
    between = sign_flip_tokens.STABLE_BETWEEN
    table = sign_flip_tokens.gap_change(results.runs, results.history, between=between)
    assert set(zip(table.step_from, table.step_to, strict=True)) == {(10, 15)}
    h6 = sign_flip_tokens.gap_change(results.runs, results.history).set_index(sign_flip.CELL)
    stable = table.set_index(sign_flip.CELL)
    assert stable["gap_from"].to_numpy() == pytest.approx(h6.loc[stable.index, "gap_from"])


def test_a_cells_floor_is_its_replicate_pairs_change_else_the_largest_measured(tmp_path):
    """Seed 0 of both arms trained again (the floor piece) at one of two points: that cell's
    floor is how far its seed-0 difference moved, and the other cell's is the same (the largest
    measured) until it has its own."""
    sweep = write_sign_flip(tmp_path, ladder=[("micro", 1024), ("micro", 8192)])
    for tie in (True, False):
        write_point(sweep, "micro", 1024, seed=0, tie=tie, replicate=1)
    table = sign_flip.effect_table(load_results(sweep).runs)
    written = summaries(sweep)
    seed0 = written[(written["vocab_size"] == 1024) & (written["seed"] == 0)]
    diff = {r: seed0[seed0["replicate"] == r].set_index("tie")["test_bpb"] for r in (0, 1)}
    floor = abs((diff[1][True] - diff[1][False]) - (diff[0][True] - diff[0][False]))
    assert floor > 0 and table["floor"].to_numpy() == pytest.approx([floor, floor])
    assert table["n_seeds"].eq(4).all()  # the replicates are no extra seeds


def test_a_gpu_point_on_another_tokenizer_stands_apart_and_leaves_the_fit_alone(tmp_path):
    """scripts/gpu/slot.sh's piece a: micro at GPT-2's vocabulary, trained on a GPU, in a sweep of
    its own. Its cell is marked (way, encoding, device) and the ladder's ways, Holm and fit are
    those of the ladder alone."""
    ladder = [("micro", 1024), ("micro", 8192), ("d64", 8192)]
    sweep = write_sign_flip(tmp_path / "cpu", ladder=ladder)
    gpu = write_gpu_sign_flip(tmp_path / "gpu")
    alone, both = load_results(sweep).runs, load_results(sweep, gpu).runs
    table = sign_flip.effect_table(both).set_index("vocab_size")
    assert table.loc[50257, ["way", "encoding", "device"]].tolist() == ["other", "gpt2", "cuda"]
    assert (table.drop(index=50257)["device"] == "cpu").all()
    ladder_only = sign_flip.effect_table(alone).set_index("vocab_size")
    for column in ("way", "p_holm"):  # Holm's family: the ladder's cells alone
        pd.testing.assert_series_equal(table.drop(index=50257)[column], ladder_only[column])
    fitted, fitted_alone = (sign_flip_curve.fits(r)["inv_sqrt_d"][0] for r in (both, alone))
    assert fitted.n_pairs == fitted_alone.n_pairs == 12
    assert np.allclose(fitted.result.params, fitted_alone.result.params)


def test_the_ends_contrasts_pair_by_seed_and_share_the_ladders_holm_family(tmp_path):
    """HYPOTHESES.md's H7 (tied_input_grad − tied) and H8 (emb1_head_dsqrt − t5) at one end: each
    the t-interval of its seeds' paired test bpb, Holm over the ladder's cells and these two
    together; the ends' arms change no tied − untied cell."""
    sweep = write_sign_flip(tmp_path, ladder=[("micro", 1024), ("micro", 8192)])
    before = sign_flip.effect_table(load_results(sweep).runs)
    arms = write_ends(sweep, "micro", 1024)
    runs = load_results(sweep).runs
    ends, cells = sign_flip.ends_table(runs), sign_flip.effect_table(runs)
    test_bpb = summaries(sweep).set_index("run_id")["test_bpb"]
    ladder = {t: summaries(sweep).query(f"vocab_size == 1024 and tie == {t}") for t in (True,)}
    tied = ladder[True][~ladder[True]["run_id"].isin([p.name for v in arms.values() for p in v])]
    tied = tied[tied["init_std"] == "inv_sqrt_d"].sort_values("seed")["test_bpb"].to_numpy()
    for first, second, _ in sign_flip.ENDS:
        row = ends.set_index("contrast").loc[f"{first} − {second}"]
        mine = test_bpb[[p.name for p in arms[first]]].to_numpy()
        other = tied if second == "tied" else test_bpb[[p.name for p in arms[second]]].to_numpy()
        diffs = mine - other
        low, high = stats.t.interval(0.95, 3, diffs.mean(), stats.sem(diffs))
        assert row["n_seeds"] == 4 and (row["diff"] < 0 or second != "tied")  # the remedy helps
        assert row[["diff", "low", "high"]].tolist() == pytest.approx([diffs.mean(), low, high])
    primary = sign_flip.primary_table(runs)
    family = multipletests([*cells["p"], *ends["p"], *primary["p"]], method="holm")[1]
    assert [*cells["p_holm"], *ends["p_holm"], *primary["p_holm"]] == pytest.approx(family)
    pd.testing.assert_frame_equal(cells.drop(columns="p_holm"), before.drop(columns="p_holm"))
    # the T5 pair at another init std than H8's 1.0 (as a sweep whose experiment's init_std won
    # over the arm's composed them) is another question: in no contrast
    for seed in range(4):
        write_point(sweep, "micro", 1024, seed, True, t5_rescale=True, floor_shift=0.3)
        emb1 = write_point(sweep, "micro", 1024, seed, **END_ARMS["emb1_head_dsqrt"][0], lr=1e-3)
        summary = json.loads((emb1 / "summary.json").read_text())  # its init_std "unused"
        (emb1 / "summary.json").write_text(json.dumps(summary | {"init_std": "inv_sqrt_d"}))
    again = sign_flip.ends_table(load_results(sweep).runs)
    pd.testing.assert_frame_equal(again.drop(columns="p_holm"), ends.drop(columns="p_holm"))


def test_an_arm_at_its_own_multipliers_is_reported_beside_the_shared_one(tmp_path):
    """HYPOTHESES.md's multiplier rule: untied at its own multipliers at every point, both
    reported: tied − untied_own per point and its slope, in the one Holm family; the committed
    cells and primary unchanged."""
    ladder = [("micro", 1024), ("micro", 4096), ("micro", 8192)]
    sweep = write_sign_flip(tmp_path, ladder=ladder)
    before = sign_flip.effect_tables(load_results(sweep).runs)
    own = {v: write_own(sweep, model, v) for model, v in ladder}
    after = sign_flip.effect_tables(load_results(sweep).runs)
    written = summaries(sweep).set_index("run_id")["test_bpb"]
    for v, runs in own.items():
        row = after.own[after.own["vocab_size"] == v].iloc[0]
        cell = before.cells[before.cells["vocab_size"] == v].iloc[0]
        mine = written[[r.name for r in runs]].mean()  # seeds 0-3 in order
        assert row["contrast"] == "tied − untied_own" and row["n_seeds"] == 4
        assert row["diff"] == pytest.approx(cell["bpb_tied"] - mine)
        assert row["diff"] > cell["diff"]  # untied is better at its own multipliers
    pd.testing.assert_frame_equal(
        after.cells.drop(columns="p_holm"), before.cells.drop(columns="p_holm")
    )
    assert after.primary["contrast"].tolist() == ["tied − untied", "tied − untied_own"]
    assert after.primary.iloc[0]["diff"] == pytest.approx(before.primary.iloc[0]["diff"])
    family = [*after.cells["p"], *after.own["p"], *after.primary["p"]]
    held = [*after.cells["p_holm"], *after.own["p_holm"], *after.primary["p_holm"]]
    assert held == pytest.approx(multipletests(family, method="holm")[1])


def test_a_contrast_whose_runs_trained_in_two_precisions_says_so(tmp_path):
    """trainer.precision=auto trains fp32 on a CPU without bf16 units: untied's own runs there,
    against bf16 runs of the shared arms, mark their contrasts and slope "bf16+fp32"."""
    ladder = [("micro", 1024), ("micro", 8192)]
    sweep = write_sign_flip(tmp_path, ladder=ladder)
    own = {run for model, v in ladder for run in write_own(sweep, model, v)}
    for path in sweep.glob("*/summary.json"):
        precision = "fp32" if path.parent in own else "bf16"
        path.write_text(json.dumps(json.loads(path.read_text()) | {"precision": precision}))
    tables = sign_flip.effect_tables(load_results(sweep).runs)
    assert set(tables.cells["precision"]) == {"bf16"}
    assert set(tables.own["precision"]) == {"bf16+fp32"}
    assert tables.primary["precision"].tolist() == ["bf16", "bf16+fp32"]
