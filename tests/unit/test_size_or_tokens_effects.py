"""studies.size_or_tokens.effects, .readings, .tables and the 2 x 2 figure: the fourth edition's
committed reading (HYPOTHESES.md) on hand-made run tables whose per-seed differences are known
(the shipped bundle's: tests/e2e/test_size_or_tokens_shipped_e2e.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from statsmodels.stats.multitest import multipletests

from tiedvsuntied.figures.style import save_figure
from tiedvsuntied.presets import presets
from tiedvsuntied.studies.size_or_tokens import effects, figures, readings, tables

BASE = 2.0  # untied's test bpb before a seed's own offset
SEED_OFFSET = {0: 0.00, 1: -0.03, 2: 0.02, 3: 0.05}  # the books a seed holds out: both arms
BIGRAM = {0: 2.02, 1: 2.03, 2: 2.05, 3: 1.92}  # the bigram's test bpb, fitted on a seed's fold
# tied − untied per point and seed (no two seeds alike, so that a pairing by position shows)
EFFECT = {
    "micro-10mb": {0: 0.030, 1: 0.034, 2: 0.028, 3: 0.033},
    "b256x8-10mb": {0: 0.012, 1: 0.015, 2: 0.011, 3: 0.014},
    "b256x8-45mb": {0: 0.020, 1: 0.026, 2: 0.024, 3: 0.021},
    "micro-45mb": {0: 0.041, 1: 0.052, 2: 0.044, 3: 0.049},
}


def settled_lr(point: str, arm: str) -> float:
    """The middle of the arm's first lr grid at ``point`` (where its lr check settles in these
    fakes: :func:`lr_check`), 5e-4 where the point has none (the 10 MB cells)."""
    grid = effects.POINTS[point].grids.get("untied" if arm == "untied_own" else arm)
    return float(grid.split(",")[1]) if grid else 5e-4


def lr_check(point: str, arms=("tied", "untied")) -> list[dict]:
    """Seed 0's other runs of each arm's first lr grid at ``point`` (none where it has no grid),
    each worse than the settled lr's: with the settled run, the check is whole, its best inside."""
    grids = effects.POINTS[point].grids
    worse = {"final_val_loss": 5.0, "val_bpb": BASE + 0.1}
    return [
        fake_run(point, arm, 0, BASE + 0.1, lr=float(lr), **worse)
        for arm in arms
        if arm in grids
        for lr in grids[arm].split(",")
        if float(lr) != settled_lr(point, arm)
    ]


def fake_run(point: str, arm: str, seed: int, bpb: float, **kw) -> dict:
    """One finished run of the study's sweep, as the runs table has it (at its arm's settled lr
    unless ``kw`` say otherwise)."""
    p = effects.POINTS[point]
    shape = {k: v for k, v in presets("model")[p.model].items() if k != "name"}
    tie = arm in ("tied", "tie_untie")
    return (
        shape
        | {
            "sweep": "size_or_tokens",
            "status": "finished",
            "replicate": 0,
            "seed": seed,
            "tie": tie,
            "model": p.model,
            "vocab_size": p.vocab_size,
            "max_steps": p.steps,
            "init_std": "inv_sqrt_d",
            "init_std_resolved_emb": 0.06,
            "init_std_resolved_head": 0.06,
            "t5_rescale": False,
            "untie_step": 900 if arm == "tie_untie" else np.nan,
            "variant": "",
            "lr": settled_lr(point, arm),
            "emb_lr_mult": 4.0,
            "head_lr_mult": 1.0 if arm == "untied_own" else 4.0,
            "final_val_loss": 4.9,
            "test_bpb": bpb,
            "val_bpb": bpb,
            # the count models: a seed's fold's, whatever the arm, lr or budget
            "test_bigram_bpb": BIGRAM[seed],
            "test_unigram_bpb": BIGRAM[seed] + 0.7,
            "clip_frac": 0.01,
            "rho": 0.25,
            "rho_untied": 0.4,
            "tokens_per_param": 0.33 if tie else 0.26,
            "train_bytes": 1e7,
        }
        | kw
    )


def fake_runs(effect=EFFECT, seeds=(0, 1, 2, 3)) -> pd.DataFrame:
    """Tied and untied at each of ``effect``'s points and seeds: tied − untied as designed, each
    arm's lr check settled where the point has one."""
    rows = []
    for point, per_seed in effect.items():
        rows += lr_check(point)
        for seed in seeds:
            if seed in per_seed:
                untied = BASE + SEED_OFFSET[seed]
                rows.append(fake_run(point, "untied", seed, untied))
                rows.append(fake_run(point, "tied", seed, untied + per_seed[seed]))
    return pd.DataFrame(rows)


def test_a_cells_interval_is_scipys_t_over_the_seeds_paired_differences():
    cell = effects.cells(fake_runs()).set_index(["point", "contrast"])
    got = cell.loc[("b256x8-45mb", "tied − untied")]
    diffs = list(EFFECT["b256x8-45mb"].values())
    test = stats.ttest_1samp(diffs, 0.0)
    interval = test.confidence_interval(0.95)
    assert got["n_seeds"] == 4 and got["diff"] == pytest.approx(np.mean(diffs))
    assert (got["low"], got["high"]) == pytest.approx((interval.low, interval.high))
    assert got["p"] == pytest.approx(test.pvalue)
    assert got["tokens_per_param"] == 0.33 and got["rho"] == 0.25  # the tied model's


def test_a_cell_sets_its_seeds_count_baselines_beside_its_arms_losses(tmp_path):
    runs = fake_runs(seeds=(0, 1, 3))  # seed 2's fold's bigram is in no cell
    cell = effects.cells(runs).set_index(["point", "contrast"])
    got = cell.loc[("b256x8-45mb", "tied − untied")]
    assert got["test_bigram_bpb"] == pytest.approx(np.mean([BIGRAM[s] for s in (0, 1, 3)]))
    assert got["test_unigram_bpb"] == pytest.approx(got["test_bigram_bpb"] + 0.7)
    (md,) = tables.write_size_or_tokens_tables(tmp_path, runs)
    header = next(line for line in md.read_text().splitlines() if "| bpb_second" in line)
    columns = [c.strip() for c in header.strip("|").split("|")]
    at = columns.index("bpb_second")
    assert columns[at + 1 : at + 3] == ["test_bigram_bpb", "test_unigram_bpb"]


def test_a_run_at_a_losing_lr_is_left_out_of_its_cell():
    runs = fake_runs()
    # the lr check's other point for tied at d = 256 x 8, 45 MB: worse validation, absurd test
    losing = fake_run("b256x8-45mb", "tied", 0, 9.0, lr=1e-3, final_val_loss=5.5)
    cells = effects.cells(pd.concat([runs, pd.DataFrame([losing])], ignore_index=True))
    got = cells.set_index(["point", "contrast"]).loc[("b256x8-45mb", "tied − untied")]
    assert got["seed_diffs"] == pytest.approx(list(EFFECT["b256x8-45mb"].values()))
    assert got["lr_first"] == 5e-4


def test_an_arm_is_read_once_its_lr_check_is_settled_and_the_2x2_says_which_are_waiting():
    """HYPOTHESES.md: an arm's lr is chosen once its first grid has run whole at seed 0 with the
    best inside it. Until then its cell is not read (its best lr so far is no chosen lr), and the
    2 x 2 names it apart from the cells not run; the 10 MB cells take the third edition's lr."""
    runs = fake_runs({p: EFFECT[p] for p in ("b256x8-10mb", "b256x8-45mb")})
    missing = runs["lr"].eq(1e-3) & ~runs["tie"]
    partial = runs[~missing]  # untied's 1e-3 at seed 0 still running: its grid is not whole
    assert effects.lr_check_running(partial) == {("b256x8-45mb", "untied")}
    assert set(effects.cells(partial)["point"]) == {"b256x8-10mb"}
    caption = " ".join(figures.fig_2x2(partial).caption_text.get_text().split())
    assert "Not run yet: micro, 10 MB; micro, 45 MB." in caption
    waiting = "Still in its lr check, read once each arm's best lr has a run on both sides"
    assert f"{waiting}: d = 256 × 8, 45 MB." in caption
    assert effects.lr_check_running(runs) == set()  # whole: read at 5e-4, all four seeds
    got = effects.cells(runs).set_index("point").loc["b256x8-45mb"]
    assert got["n_seeds"] == 4 and got["lr_second"] == 5e-4


def test_the_equal_parameter_figure_leaves_out_an_arm_still_in_its_lr_check():
    """An arm's best lr so far is not its chosen lr: the exploratory reading at equal parameters
    (figures.fig_equal_params) draws none of its runs and names its cell."""
    runs = fake_runs({p: EFFECT[p] for p in ("b256x8-10mb", "b256x8-45mb")})
    runs = runs.assign(
        params_total=np.where(runs["tie"], 8.48e6, 10.58e6),
        train_bytes=np.where(runs["max_steps"].eq(effects.POINTS["b256x8-45mb"].steps), 45e6, 1e7),
    )
    partial = runs[~(runs["lr"].eq(1e-3) & ~runs["tie"])]  # untied's 45 MB grid not whole
    kept, named = effects.settled(partial)
    left = partial.drop(kept.index)
    assert named == ["d = 256 × 8, 45 MB"] and len(left) == 5  # untied's 2.5e-4 and 4 seeds
    assert set(left["max_steps"]) == {effects.POINTS["b256x8-45mb"].steps} and not left["tie"].any()
    caption = " ".join(figures.fig_equal_params(partial).caption_text.get_text().split())
    assert "Still in its lr check, not drawn: d = 256 × 8, 45 MB." in caption
    assert effects.settled(runs)[1] == [] and len(effects.settled(runs)[0]) == len(runs)


def test_the_2x2_names_a_cell_drawn_short_of_its_seeds_as_no_result_yet():
    """A cell read before its fourth seed is drawn, and its caption says it is no result yet."""
    runs = fake_runs()
    point = runs.apply(lambda run: effects.point_of(run.to_dict()), axis=1)
    short = runs[~(point.eq("b256x8-45mb") & runs["seed"].eq(3))]
    said = {
        name: " ".join(figures.fig_2x2(table).caption_text.get_text().split())
        for name, table in [("whole", runs), ("short", short)]
    }
    assert "Every cell has its 4 seeds." in said["whole"] and "short of" not in said["whole"]
    assert "Drawn short of 4 seeds, no result yet: d = 256 × 8, 45 MB (3)." in said["short"]
    assert "Every cell" not in said["short"]


def test_p_s1_and_s2_pair_each_seed_with_itself_across_budgets_and_bodies():
    effect = dict(EFFECT)
    effect["b256x8-45mb"] = {s: v for s, v in EFFECT["b256x8-45mb"].items() if s != 2}  # no 2
    family = effects.family(fake_runs(effect)).set_index("name")
    at = {name: EFFECT[name] for name in EFFECT}
    expected = {
        "P": [at["b256x8-45mb"][s] - at["b256x8-10mb"][s] for s in (0, 1, 3)],
        "S1": [at["micro-45mb"][s] - at["micro-10mb"][s] for s in (0, 1, 2, 3)],
        "S2": [at["b256x8-45mb"][s] - at["micro-10mb"][s] for s in (0, 1, 3)],
    }
    for name, values in expected.items():
        assert family.loc[name, "seed_diffs"] == pytest.approx(values), name
        assert family.loc[name, "n_seeds"] == len(values)


@pytest.mark.parametrize(
    "low, high, said",
    [
        (-0.2, 0.6, readings.SIZE),
        (0.0, 0.6, readings.SIZE),  # an interval holds its ends
        (0.4, 1.3, readings.TOKENS),
        (0.4, 1.0, readings.TOKENS),
        (0.2, 0.8, readings.BOTH),
        (1.05, 1.6, readings.BEYOND),
        (-0.1, 1.1, readings.UNDECIDED),
        (0.0, 1.0, readings.UNDECIDED),
        (-0.6, -0.1, readings.BELOW),
    ],
)
def test_the_primarys_verdict_follows_hypotheses_md_at_each_boundary(low, high, said):
    assert readings.verdict(low, high) == said


def test_the_primary_divides_p_by_the_tokens_readings_value_and_says_its_verdict():
    effect = dict(EFFECT)  # P = 45 MB − 10 MB at d = 256 x 8: the tokens reading's 0.0185 each
    effect["b256x8-45mb"] = {
        s: v + 0.0185 + 0.001 * (-1) ** s for s, v in EFFECT["b256x8-10mb"].items()
    }
    row = readings.primary(fake_runs(effect))
    diffs = [effect["b256x8-45mb"][s] - EFFECT["b256x8-10mb"][s] for s in range(4)]
    interval = stats.ttest_1samp(diffs, 0.0).confidence_interval(0.95)
    assert row["s"] == pytest.approx(np.mean(diffs) / 0.0185)
    assert (row["s_low"], row["s_high"]) == pytest.approx(
        (interval.low / 0.0185, interval.high / 0.0185)
    )
    assert row["verdict"] == readings.TOKENS


def test_the_primarys_verdict_before_its_fourth_seed_says_it_is_no_result_yet():
    three = {k: {s: v for s, v in e.items() if s < 3} for k, e in EFFECT.items()}
    row = readings.primary(fake_runs(three))
    assert row["n_seeds"] == 3
    said = readings.verdict(row["s_low"], row["s_high"])
    assert row["verdict"] == f"{said} so far (3 of 4 seeds: no result yet)"


def test_the_primary_not_run_says_so():
    no_45 = {k: v for k, v in EFFECT.items() if k != "b256x8-45mb"}
    assert readings.primary(fake_runs(no_45))["verdict"] == readings.NOT_RUN


def test_the_holm_family_names_14_in_order_and_adjusts_over_those_that_ran():
    runs = fake_runs({k: EFFECT[k] for k in ("micro-10mb", "b256x8-10mb", "micro-45mb")})
    family = effects.family(runs)
    assert len(family) == 14 and list(family["member"]) == list(range(1, 15))
    assert list(family["name"][:3]) == ["P", "S1", "S2"]
    assert family["name"].iloc[8] == "tied − untied_own, d = 512 × 8, 10 MB"
    ran = family["status"].eq("run")
    # S1 and the three cells of tied − untied that ran: micro 10, d = 256 x 8 10, micro 45
    assert list(family.loc[ran, "member"]) == [2, 4, 5, 6]
    assert family.loc[~ran, "status"].eq(effects.NOT_RUN).all()
    assert family.loc[~ran, "p_holm"].isna().all()
    adjusted = multipletests(family.loc[ran, "p"].to_numpy(), method="holm")[1]
    assert family.loc[ran, "p_holm"].to_numpy() == pytest.approx(adjusted)
    assert effects.family_size(family) == "14 named, 4 run"


def test_h5_reads_tie_then_untie_against_both_arms_by_seed_once_its_own_check_settles():
    """H5 (members 11, 12): tie_untie's lr check is tied's chosen lr x {1/2, 1, 2} at seed 0;
    until it is whole the arm is held out (members not run); then each of its seeds is paired
    with the same seed of untied and of tied."""
    point, gain = "b256x8-45mb", {0: -0.004, 1: -0.001, 2: -0.006, 3: 0.002}
    runs = fake_runs({point: EFFECT[point]})
    untied = {s: BASE + SEED_OFFSET[s] for s in range(4)}
    third = [fake_run(point, "tie_untie", s, untied[s] + g) for s, g in gain.items()]
    worse = {"final_val_loss": 5.0, "val_bpb": BASE + 0.1}
    third += [fake_run(point, "tie_untie", 0, BASE + 0.1, lr=lr, **worse) for lr in (2.5e-4, 1e-3)]
    whole = pd.concat([runs, pd.DataFrame(third)], ignore_index=True)
    partial = whole[~(whole["untie_step"].notna() & whole["lr"].eq(1e-3))]
    assert effects.lr_check_running(partial) == {(point, "tie_untie")}
    held = effects.family(partial).set_index("member")
    assert held.loc[[11, 12], "status"].eq(effects.NOT_RUN).all()
    assert effects.lr_check_running(whole) == set()
    family = effects.family(whole).set_index("member")
    over_untied = [gain[s] for s in range(4)]
    over_tied = [gain[s] - EFFECT[point][s] for s in range(4)]
    assert family.loc[11, "name"] == "tie_untie − untied, d = 256 × 8, 45 MB"
    assert family.loc[11, "seed_diffs"] == pytest.approx(over_untied)
    assert family.loc[12, "seed_diffs"] == pytest.approx(over_tied)
    assert family.loc[[13, 14], "status"].eq(effects.NOT_RUN).all()
    said = readings.h5_verdict(effects.cells(whole), point)
    assert said == (
        "d = 256 × 8, 45 MB: holds (tie_untie − untied: holds 0; tie_untie − tied: below 0)"
    )
    assert readings.h5_verdict(effects.cells(partial), point).endswith(readings.NOT_RUN)


@pytest.mark.parametrize(
    "over_untied, seeds, said",
    [
        ((0.010, 0.012), 4, "contradicted: worse than untied"),
        ((-0.012, -0.010), 4, "holds"),
        ((0.010, 0.012), 3, "contradicted: worse than untied so far (3 of 4 seeds: no result yet)"),
    ],
)
def test_h5_is_contradicted_by_an_interval_above_0_and_short_of_seeds_is_no_result(
    over_untied, seeds, said
):
    rows = [
        {"point": "b512x8-10mb", "contrast": f"tie_untie − {a}", "n_seeds": seeds}
        | dict(zip(("low", "high"), bounds, strict=True))
        for a, bounds in [("untied", over_untied), ("tied", (-0.03, -0.02))]
    ]
    got = readings.h5_verdict(pd.DataFrame(rows), "b512x8-10mb")
    assert got.startswith(f"d = 512 × 8, 10 MB: {said} (tie_untie − untied: ")


def test_an_arm_whose_clip_binds_on_more_than_a_tenth_of_its_steps_is_marked_not_replaced():
    runs = fake_runs({"b256x8-10mb": EFFECT["b256x8-10mb"]})
    tied = runs["tie"].eq(True)
    runs.loc[tied, "clip_frac"] = [0.05, 0.15, 0.12, 0.14]  # mean 0.115: over the line
    runs.loc[~tied, "clip_frac"] = [0.10, 0.10, 0.10, 0.10]  # at it: not over
    cell = effects.cells(runs).iloc[0]
    assert cell["marked"] == "tied"
    assert cell["clip_first"] == pytest.approx(0.115) and cell["clip_second"] == pytest.approx(0.1)
    assert cell["seed_diffs"] == pytest.approx(list(EFFECT["b256x8-10mb"].values()))
    family = effects.family(runs).set_index("name")
    assert family.loc["tied − untied, d = 256 × 8, 10 MB", "marked"] == "tied at d = 256 × 8, 10 MB"
    assert family.loc["P", "marked"] == "tied at d = 256 × 8, 10 MB"  # P reads that cell too
    assert family.loc["S1", "marked"] == ""


def sign_runs(own_gain: float | None) -> pd.DataFrame:
    """d = 512 x 8: tying pays 0.01 against untied; untied_own ``own_gain`` better than untied."""
    rows = lr_check("b512x8-10mb")
    for seed, offset in SEED_OFFSET.items():
        untied = BASE + offset
        rows.append(fake_run("b512x8-10mb", "untied", seed, untied))
        rows.append(fake_run("b512x8-10mb", "tied", seed, untied - 0.010 + 0.001 * seed))
        if own_gain is not None:
            own = untied - own_gain - 0.001 * (-1) ** seed
            rows.append(fake_run("b512x8-10mb", "untied_own", seed, own))
    return pd.DataFrame(rows)


def test_tying_pays_at_512_only_if_it_beats_both_untied_arms():
    said = {gain: readings.sign_verdict(effects.cells(sign_runs(gain))) for gain in (0.0, 0.01)}
    assert said[0.0].startswith("d = 512 × 8, 10 MB: tying pays")
    assert said[0.01].startswith(f"d = 512 × 8, 10 MB: {readings.SIGN_OPEN}")  # own: holds 0
    alone = readings.sign_verdict(effects.cells(sign_runs(None)))
    assert "tying pays" in alone and "untied_own not run" in alone


def test_the_sign_table_sets_the_cell_beside_each_committed_line():
    table = readings.sign_table(effects.cells(sign_runs(0.0)))
    at_512 = table[table["point"].eq("d = 512 × 8, 10 MB")]
    assert set(at_512["contrast"]) == {"tied − untied", "tied − untied_own"}
    line = at_512[at_512["line"].eq("ρ alone") & at_512["contrast"].eq("tied − untied")].iloc[0]
    assert line["predicted"] == 0.053 and not line["holds_prediction"]  # the cell lies below 0
    assert table[table["point"].eq("d = 384 × 6, 10 MB")]["n_seeds"].eq(0).all()


def test_the_figure_and_the_tables_draw_a_partial_study(tmp_path):
    runs = fake_runs({"b256x8-10mb": EFFECT["b256x8-10mb"]})
    fig = figures.fig_2x2(runs)
    assert not fig.empty
    files = save_figure(fig, tmp_path, "size_or_tokens_fig_2x2", ["png"])
    assert [f.name for f in files] == ["size_or_tokens_fig_2x2.png"] and files[0].stat().st_size
    caption = fig.caption_text.get_text()
    assert "Not run yet: micro, 10 MB; micro, 45 MB; d = 256 × 8, 45 MB." in " ".join(
        caption.split()
    )
    (md,) = tables.write_size_or_tokens_tables(tmp_path, runs)
    text = md.read_text()
    assert "14 named, 1 run" in text and f"Verdict: {readings.NOT_RUN}" in text


def test_the_reuse_floor_pairs_each_a0_run_with_its_bf16_twin_and_no_other():
    """Each a0 run beside the third-edition run of its body, V, steps, seed, arm and lr that
    trained bf16 (an fp32 run of the same config is no twin; nor is another lr); the floor is
    |(tied − untied) here − there| per seed."""
    from tiedvsuntied.studies.size_or_tokens import twins

    shift = {("tied", 0): 0.0004, ("untied", 0): 0.0001, ("tied", 1): -0.0002, ("untied", 1): 0.0}
    rows = []
    for (arm, seed), moved in shift.items():
        third = BASE + SEED_OFFSET[seed] + (0.012 if arm == "tied" else 0.0)
        common = {"precision": "bf16", "cpu_time_s": 1000.0}
        rows.append(fake_run("b256x8-10mb", arm, seed, third + moved, **common))
        rows.append(fake_run("b256x8-10mb", arm, seed, third, sweep="sign_flip", **common))
        rows.append(fake_run("b256x8-10mb", arm, seed, 9.0, sweep="sign_flip", precision="fp32"))
        rows.append(fake_run("b256x8-10mb", arm, seed, 8.0, sweep="sign_flip", lr=1e-3, **common))
    table = twins.twins(pd.DataFrame(rows))
    assert len(table) == 4 and set(table["third"]) < {r["test_bpb"] for r in rows}
    assert table["third"].lt(3).all()  # neither the fp32 run nor the other lr
    got = table.set_index(["arm", "seed"])["shift"]
    assert got.to_dict() == pytest.approx(shift)
    floor = twins.floor(table).set_index("seed")["floor"]
    assert floor.to_dict() == pytest.approx({0: 0.0003, 1: 0.0002})


def test_the_processor_floor_sets_each_rerun_beside_the_shipped_run_of_its_id(capsys, tmp_path):
    """A shipped run trained again elsewhere (its own results directory) beside the shipped run of
    the same id, with both processors; a re-run of another id (fp32), or unfinished, is left out."""
    from tiedvsuntied.studies.size_or_tokens import twins

    shipped, rerun = [], []
    for arm, moved in (("tied", 0.0003), ("untied", -0.0001)):
        bpb = BASE + SEED_OFFSET[2] + (0.011 if arm == "tied" else 0.0)
        common = {"run_id": f"{arm}-2", "precision": "bf16"}
        shipped.append(fake_run("b256x8-10mb", arm, 2, bpb, hardware="Xeon", **common))
        rerun.append(fake_run("b256x8-10mb", arm, 2, bpb + moved, hardware="EPYC", **common))
    fp32 = {"run_id": "tied-2-fp32", "precision": "fp32", "hardware": "EPYC"}  # another id
    rerun.append(fake_run("b256x8-10mb", "tied", 2, 7.0, **fp32))
    rerun.append(fake_run("micro-10mb", "tied", 2, 8.0, run_id="m-2", status="running"))
    shipped.append(fake_run("micro-10mb", "tied", 2, 2.0, run_id="m-2", hardware="Xeon"))
    table = twins.again(pd.DataFrame(shipped), pd.DataFrame(rerun))
    assert len(table) == 2  # the fp32 run is of another id; m-2 did not finish again
    assert table.set_index("arm")["shift"].to_dict() == pytest.approx(
        {"tied": 3e-4, "untied": -1e-4}
    )
    assert set(table["hardware_shipped"]) == {"Xeon"} and set(table["hardware_again"]) == {"EPYC"}
    floor = twins.floor(table, ("again", "shipped"))
    assert floor[["again", "shipped", "floor"]].iloc[0].tolist() == pytest.approx(
        [0.0114, 0.011, 0.0004]
    )
    assert twins.main([str(tmp_path / "none")]) == 2
    assert capsys.readouterr().err.startswith("error: results directory")
