"""analysis.stats and analysis.arms: means over seeds, the pairing, paired tables with their
t-intervals, the noise floor, interactions and each arm at its best lr."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from fake_results import write_run, write_sweep
from scipy import stats

from tiedvsuntied.analysis.arms import best_lr_comparison, interaction_table
from tiedvsuntied.analysis.load import (
    ResultsError,
    load_results,
)
from tiedvsuntied.analysis.stats import (
    aggregate,
    aggregate_history,
    aggregate_runs,
    detectable,
    holm,
    markdown,
    noise_floor,
    paired_differences,
    paired_table,
    power,
    representative_runs,
    reruns,
    seed_summary,
    summarize_differences,
)


def test_aggregate_t_interval_single_seed_and_labels():
    df = pd.DataFrame(
        {
            "g": ["a", "a", "a", "b", "b"],
            "x": [1.0, 2.0, 4.0, 5.0, float("nan")],
            "run_id": ["r1", "r2", "r3", "r4", "r5"],
        }
    )
    out = aggregate(df, ["g"], "x").set_index("g")
    a, b = out.loc["a"], out.loc["b"]
    sem = np.std([1, 2, 4], ddof=1) / math.sqrt(3)
    assert a["n"] == 3 and a["mean"] == pytest.approx(7 / 3) and a["run_ids"] == ["r1", "r2", "r3"]
    p = 0.975  # Student's t with 2 dof has a closed-form quantile: (2p - 1) / sqrt(2p(1 - p))
    assert a["ci_high"] - a["mean"] == pytest.approx((2 * p - 1) / math.sqrt(2 * p * (1 - p)) * sem)
    assert a["ci_label"] == "95% t-CI, n=3"
    assert (
        b["n"] == 1 and b["mean"] == 5.0 and b["ci_label"] == "n=1: no CI"
    )  # the NaN is not a seed
    assert math.isnan(b["ci_half"]) and math.isnan(b["std"])
    with pytest.raises(KeyError, match="nope"):
        aggregate(df, ["g"], "nope")


def test_paired_differences(fake_sweep):
    runs = load_results(fake_sweep).runs
    pairs = paired_differences(runs)
    # finished pairs: (0.036, seed 0) and (1.0, seed 0); seed 1 partners are diverged/running/failed
    assert sorted(zip(pairs["init_std"], pairs["seed"], strict=True)) == [("0.036", 0), ("1.0", 0)]
    p = pairs.iloc[0]
    by_id = runs.set_index("run_id")
    assert p["diff"] == pytest.approx(
        by_id.loc[p["tied_run_id"], "final_val_loss"]
        - by_id.loc[p["untied_run_id"], "final_val_loss"]
    )
    assert by_id.loc[p["tied_run_id"], "tie"] == True  # noqa: E712
    unpaired = " ".join(pairs.attrs["unpaired"])
    assert (
        "status diverged" in unpaired
        and "status interrupted" in unpaired  # running, lock not held
        and "status failed" in unpaired
    )
    assert "tie=true_init=0.036_model=nano_seed=1: no untied partner" in unpaired
    summary = summarize_differences(pairs)
    assert (summary["n"] == 1).all() and (summary["ci_label"] == "n=1: no CI").all()


def test_paired_differences_refuse_duplicates(tmp_path):
    write_sweep(tmp_path / "a", init_stds=("0.02",))
    write_sweep(tmp_path / "b", init_stds=("0.02",), max_steps=30)  # same slots, other run ids
    runs = load_results(tmp_path / "a", tmp_path / "b").runs
    runs = runs.assign(variant="")  # pretend the sweeps only differ in bookkeeping
    with pytest.raises(ResultsError, match="select one sweep"):
        paired_differences(runs)
    with pytest.raises(ResultsError, match="select one sweep"):  # the one pairing
        paired_table(runs)


def test_aggregate_runs_counts_only_finished(fake_sweep):
    runs = load_results(fake_sweep).runs
    agg = aggregate_runs(runs).set_index(["tie", "init_std"])
    assert agg.loc[(True, "1.0"), "n"] == 1  # seed 1 diverged
    assert agg.loc[(True, "0.036"), "n"] == 2
    both = runs[(runs["tie"] == True) & (runs["init_std"] == "0.036")]["final_val_loss"]  # noqa: E712
    assert agg.loc[(True, "0.036"), "mean"] == pytest.approx(both.mean())


def test_aggregate_history_over_seeds(fake_sweep):
    res = load_results(fake_sweep)
    agg = aggregate_history(res.history, "val/loss", by=["tie", "init_std"])
    cell = agg[(agg["tie"] == True) & (agg["init_std"] == "0.036")].set_index("step")  # noqa: E712
    h = res.history
    vals = h[(h["tie"] == True) & (h["init_std"] == "0.036") & (h["step"] == 5)]["val/loss"]  # noqa: E712
    assert cell.loc[5, "n"] == 2 and cell.loc[5, "mean"] == pytest.approx(vals.mean())
    assert cell.loc[5, "tokens"] == 5 * 256
    with pytest.raises(KeyError, match="logged metrics"):
        aggregate_history(res.history, "val/nope")


def test_representative_runs_largest_size_lowest_finished_seed(tmp_path):
    sweep = write_sweep(
        tmp_path / "sw",
        models=("nano", "micro"),
        seeds=(0, 1),
        statuses={(True, "1.0", "micro", 0): "failed"},
    )
    runs = load_results(sweep).runs
    rep = representative_runs(runs)
    assert len(rep) == 4 and set(rep["model"]) == {"micro"}
    tied_big = rep[(rep["tie"] == True) & (rep["init_std"] == "1.0")].iloc[0]  # noqa: E712
    assert tied_big["seed"] == 1 and tied_big["status"] == "finished"  # seed 0 failed
    assert set(rep[rep["init_std"] == "0.036"]["seed"]) == {0}


def test_paired_table_pairs_by_seed(tmp_path):
    sweep = write_sweep(tmp_path / "sw", init_stds=("1.0",), seeds=(0, 1, 2))
    write_run(sweep, tie=True, init_std="1.0", seed=3)  # no untied partner
    runs = load_results(sweep).runs
    t = paired_table(runs).set_index("point")
    fin = runs[runs["status"] == "finished"]
    by_seed = fin.pivot_table(index="seed", columns="tie", values="test_loss")
    expected = (by_seed[True] - by_seed[False]).dropna()
    assert t.loc["final", "n_seeds"] == 3
    assert t.loc["final", "diff"] == pytest.approx(expected.mean(), abs=1e-5)
    assert sorted(t.loc["final", "seed_diffs"]) == pytest.approx(
        sorted(expected.tolist()), abs=1e-5
    )
    # the primary interval: Student's t over the 3 seeds' differences (scipy's, by hand here)
    half = stats.t.ppf(0.975, 2) * expected.std() / np.sqrt(3)
    assert t.loc["final", "low"] == pytest.approx(expected.mean() - half, abs=1e-5)
    assert t.loc["final", "high"] == pytest.approx(expected.mean() + half, abs=1e-5)
    assert t.loc["final", "method"] == "95% t over 3 seeds' paired differences"
    assert t["floor"].isna().all()  # no replicates: no floor
    best = runs.pivot_table(index="seed", columns="tie", values="test_loss_at_best").dropna()
    assert t.loc["best", "diff"] == pytest.approx((best[True] - best[False]).mean(), abs=1e-5)


def test_one_seed_has_no_interval(tmp_path):
    sweep = write_sweep(tmp_path / "sw", init_stds=("1.0",), seeds=(0,))
    t = paired_table(load_results(sweep).runs).set_index("point")
    assert np.isnan(t.loc["final", "low"]) and np.isnan(t.loc["final", "high"])
    assert t.loc["final", "method"] == "1 seed: no interval (needs 2)"
    text = markdown(t.reset_index())
    assert text.startswith("0 intervals at 95% each") and "| none " in text


def _with_replicates(tmp_path, seeds=(0, 1, 2), models=("nano",)):
    """tie x init std {1.0, inv_sqrt_d} x seeds, and a second replicate of seed 0 at init 1.0."""
    sweep = write_sweep(
        tmp_path / "sw", init_stds=("1.0", "inv_sqrt_d"), seeds=seeds, models=models
    )
    for tie in (True, False):
        write_run(sweep, tie=tie, init_std="1.0", seed=0, replicate=1)
    return load_results(sweep).runs


def test_replicates_measure_the_floor_and_enter_no_seed_statistic(tmp_path):
    runs = _with_replicates(tmp_path)
    assert runs["replicate"].dtype == "Int64" and sorted(runs["replicate"].unique()) == [0, 1]
    floors = noise_floor(runs).set_index("init_std")
    assert list(floors.index) == ["1.0"] and floors.loc["1.0", "n"] == 2
    by = runs[runs["init_std"] == "1.0"].set_index(["tie", "seed", "replicate"])["test_loss"]
    expected = np.mean([abs(by[(tie, 0, 0)] - by[(tie, 0, 1)]) for tie in (True, False)])
    assert floors.loc["1.0", "floor_final"] == pytest.approx(expected)
    assert floors.loc["1.0", "floor_final"] > 0  # the fake replicate trains its own noise
    # replicates are no extra seeds: pairs, means and single-run picks see replicate 0 only
    t = paired_table(runs, ("final",)).set_index("init_std")
    assert (t["n_seeds"] == 3).all()
    assert t.loc["1.0", "floor"] == pytest.approx(expected) and np.isnan(
        t.loc["inv_sqrt_d", "floor"]
    )
    assert (aggregate_runs(runs)["n"] == 3).all()
    assert (representative_runs(runs)["replicate"] == 0).all()
    unpaired = paired_differences(runs).attrs["unpaired"]
    assert len(unpaired) == 2 and all("replicate 1 (noise floor only)" in u for u in unpaired)
    text = markdown(t.reset_index())
    assert (
        "noise floor (mean |replicate 0 − replicate k| of one config, another thread count)" in text
    )
    assert "| not measured " in text
    hist = load_results(tmp_path / "sw").history
    assert (aggregate_history(hist, by=["tie", "init_std"])["n"] <= 3).all()


def test_a_rerun_at_the_same_thread_count_is_a_determinism_check_not_a_floor(tmp_path):
    sweep = write_sweep(tmp_path / "sw", init_stds=("1.0",), seeds=(0, 1), threads=2)
    write_run(sweep, tie=True, init_std="1.0", seed=0, replicate=1, threads=1)
    write_run(sweep, tie=True, init_std="1.0", seed=0, replicate=2, threads=2)
    runs = load_results(sweep).runs
    pairs = reruns(runs)
    assert dict(zip(pairs["replicate_k"], pairs["same_threads"], strict=True)) == {
        1: False,
        2: True,
    }
    floors = noise_floor(runs)
    assert floors["n"].tolist() == [1]  # replicate 1 (another thread count) alone
    by = runs.set_index(["tie", "seed", "replicate"])["test_loss"]
    assert floors["floor_final"].iloc[0] == pytest.approx(abs(by[True, 0, 0] - by[True, 0, 1]))


def test_classic_comparison_picks_each_arms_own_best_learning_rate(tmp_path):
    sweep = tmp_path / "classic"
    shift = {
        (True, 1e-3): 0.6,
        (True, 3e-3): 0.0,
        (False, 1e-3): 0.0,
        (False, 3e-3): 0.6,
    }  # tied best at 3e-3
    for (tie, lr), s in shift.items():
        for seed in (0, 1, 2):
            write_run(sweep, tie=tie, init_std="0.02", seed=seed, lr=lr, floor_shift=s)
    runs = load_results(sweep).runs
    assert (
        sorted(runs["lr"].unique()) == [1e-3, 3e-3]
        and runs["variant"].str.contains("optim.lr").all()
    )
    t = best_lr_comparison(runs).set_index("point")
    assert t.loc["best", "lr_tied"] == 3e-3 and t.loc["best", "lr_untied"] == 1e-3

    def pick(tie, lr):
        chosen = runs[(runs["tie"] == tie) & (runs["lr"] == lr)]
        return chosen.set_index("seed")["test_loss_at_best"]

    assert t.loc["best", "diff"] == pytest.approx(
        (pick(True, 3e-3) - pick(False, 1e-3)).mean(), abs=1e-5
    )
    assert t.loc["best", "n_seeds"] == 3 and t.loc["best", "lrs"] == 2


def test_interaction_is_the_tie_effect_at_one_init_minus_at_the_other_paired_by_seed(tmp_path):
    runs = _with_replicates(tmp_path, models=("nano", "micro"))
    table = interaction_table(runs, levels=("1", "d^-0.5"))  # spellings made canonical
    assert list(table["contrast"]) == ["init_std: 1.0 − inv_sqrt_d"] * 2
    first = runs[(runs["replicate"] == 0) & (runs["model"] == "micro")]
    effect = first.pivot_table(index="seed", columns=["init_std", "tie"], values="test_loss")
    per_seed = (effect[("1.0", True)] - effect[("1.0", False)]) - (
        effect[("inv_sqrt_d", True)] - effect[("inv_sqrt_d", False)]
    )
    row = table.set_index("model").loc["micro"]
    assert row["n_seeds"] == 3 and row["diff"] == pytest.approx(per_seed.mean())
    half = stats.t.ppf(0.975, 2) * per_seed.std() / np.sqrt(3)
    assert (row["low"], row["high"]) == pytest.approx(
        (per_seed.mean() - half, per_seed.mean() + half)
    )
    # the primary contrast is the row of the largest size
    assert table.set_index("model")["primary"].to_dict() == {"micro": True, "nano": False}
    sizes = interaction_table(runs, "model", ("micro", "nano")).set_index("init_std")
    assert list(sizes["contrast"]) == ["model: micro − nano"] * 2 and not sizes["primary"].any()
    with pytest.raises(KeyError, match="valid factors are data_id, model, variant, init_std"):
        interaction_table(runs, "tie")
    assert interaction_table(runs, levels=("1.0", "0.02")).empty
    assert markdown(table).startswith("2 intervals at 95% each")
    assert "primary contrast: interaction of tying with init std at the largest size" in (
        markdown(table)
    )


def test_holm_adjusts_one_family_step_down_and_leaves_rows_without_an_interval_out():
    """Holm by its definition (the k-th smallest of m p-values times m − k + 1, made monotone,
    at most 1) on p-values of t-tests drawn here; a NaN is no member of the family."""
    rng = np.random.default_rng(3)
    p = [stats.ttest_1samp(rng.normal(mu, 1, 6), 0).pvalue for mu in (0, 0.5, 1, 2, 3)]
    adjusted = holm([p[0], np.nan, *p[1:]])
    m, order = len(p), np.argsort(p)
    steps = np.maximum.accumulate(np.sort(p) * (m - np.arange(m)))
    expected = np.empty(m)
    expected[order] = np.minimum(steps, 1)
    assert np.isnan(adjusted[1])
    assert adjusted.drop(1).to_numpy() == pytest.approx(expected)


def test_seed_summary_gives_the_p_of_the_t_test_its_interval_inverts():
    values = pd.Series([0.1, 0.3, 0.2, 0.25])
    row = seed_summary(values)
    assert row["p"] == pytest.approx(stats.ttest_1samp(values, 0).pvalue)
    assert np.isnan(seed_summary(pd.Series([0.1]))["p"])
    assert np.isnan(seed_summary(pd.Series([0.2, 0.2]))["p"])  # identical: no t


def test_the_detectable_effect_is_found_with_the_planned_power_and_shrinks_with_seeds():
    """detectable(sd, n): simulated paired t-tests at that mean find it in 80% of 20,000 draws;
    at no effect they reject at alpha; more seeds detect a smaller effect."""
    sd, n = 0.02, 5
    effect = detectable(sd, n)
    draws = np.random.default_rng(0).normal(effect, sd, size=(20_000, n))
    found = (stats.ttest_1samp(draws, 0.0, axis=1).pvalue < 0.05).mean()
    assert found == pytest.approx(0.8, abs=0.01) and power(effect, sd, n) == pytest.approx(0.8)
    assert power(0.0, sd, n) == pytest.approx(0.05)
    assert detectable(sd, 10) < effect < detectable(sd, 4)
