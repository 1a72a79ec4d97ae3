"""The second edition's analysis (studies.tie_x_init_books.analysis) on a runs table built here
with known effects: the lr rule, the grid at the chosen multipliers, the contrasts with their
intervals and floors, and the books as a variance component."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from tiedvsuntied.analysis.arms import head_arm
from tiedvsuntied.studies.tie_x_init_books import analysis as books

ARMS = {  # arm -> (tie, t5_rescale, emb std, head std) at init std 1.0 of a d = 64 model
    "tied": (True, False, None, None),
    "untied": (False, False, None, None),
    "t5": (True, True, None, None),
    "emb1_head_dsqrt": (False, False, 1.0, 0.125),
}
EFFECT = {"0.02": 0.10, "inv_sqrt_d": 0.03, "1.0": -0.05}  # tied − untied, the truth


def run(arm, std, model, seed, loss, mult=1.0, replicate=0, val=None) -> dict:
    tie, t5, emb, head = ARMS[arm]
    resolved = {"0.02": 0.02, "inv_sqrt_d": 0.125, "1.0": 1.0}[std]
    return {
        "status": "finished",
        "tie": tie,
        "t5_rescale": t5,
        "init_std": std,
        "init_std_resolved_emb": emb or resolved,
        "init_std_resolved_head": head or resolved,
        "model": model,
        "seed": seed,
        "replicate": replicate,
        "emb_lr_mult": mult,
        "final_val_loss": loss if val is None else val,
        "test_loss": loss,
        "test_bigram": 5.0,  # the registered count baseline on the same windows
    }


@pytest.fixture(scope="module")
def study() -> pd.DataFrame:
    """Both sizes x 5 seeds of every cell at multiplier 1, seed-dependent noise shared by the
    arms of a seed (the pairing cancels it), and the lr check's other multipliers at nano."""
    rng = np.random.default_rng(0)
    rows = []
    for model in ("nano", "micro"):
        for seed in range(5):
            base = 5.0 + rng.normal(0, 0.2)
            for std, effect in EFFECT.items():
                noise = rng.normal(0, 0.01)
                rows.append(run("untied", std, model, seed, base))
                rows.append(run("tied", std, model, seed, base + effect + noise))
            rows.append(run("t5", "1.0", model, seed, base - 0.2))
            rows.append(run("emb1_head_dsqrt", "1.0", model, seed, base + 0.1))
    # the lr check: at nano seed 0, 0.25 and 4 are worse than 1, except for untied at 0.02,
    # whose best is the edge 4 (so the rule asks for 16)
    for std in EFFECT:
        for a in ("tied", "untied"):
            for mult in (0.25, 4.0):
                better = a == "untied" and std == "0.02" and mult == 4.0
                rows.append(run(a, std, "nano", 0, 9.0, mult, val=4.0 if better else 9.0))
    return pd.DataFrame(rows)


def test_each_arm_is_named_by_its_head_and_init():
    assert [head_arm(run(a, "1.0", "nano", 0, 5.0)) for a in ARMS] == list(ARMS)


def test_the_lr_rule_takes_the_lowest_validation_loss_and_steps_out_from_an_edge(study):
    choice = books.chosen_lr(study).set_index(["arm", "init_std"])
    assert choice.loc[("tied", "1.0"), "emb_lr_mult"] == 1.0
    assert choice.loc[("untied", "0.02"), "emb_lr_mult"] == 4.0
    assert choice.loc[("untied", "0.02"), "run_next"] == 16.0
    assert choice["run_next"].notna().sum() == 1
    stepped = pd.concat([study, pd.DataFrame([run("untied", "0.02", "nano", 0, 9, 16.0, val=3)])])
    after = books.chosen_lr(stepped).set_index(["arm", "init_std"])
    assert after.loc[("untied", "0.02"), "emb_lr_mult"] == 16.0  # the best of the four, once
    assert pd.isna(after.loc[("untied", "0.02"), "run_next"])


def test_the_grid_keeps_each_arm_at_its_chosen_multiplier(study):
    chosen = books.grid(study)
    untied = chosen[(chosen["arm"] == "untied") & (chosen["init_std"] == "0.02")]
    assert set(untied["emb_lr_mult"]) == {4.0} and len(untied) == 1  # only the lr check's run
    assert len(chosen[chosen["arm"] == "tied"]) == 30


def test_each_contrast_is_the_t_interval_of_its_per_seed_paired_differences(study):
    plain = study[study["emb_lr_mult"] == 1.0]  # every cell at one multiplier: all pairs
    table = books.contrast_table(plain.assign(final_val_loss=plain["test_loss"]))
    primary = table[table["primary"]].iloc[0]
    assert (primary["table"], primary["model"]) == ("A", "micro")
    wide = plain[plain["model"] == "micro"].pivot_table(
        index="seed", columns=["tie", "init_std"], values="test_loss"
    )
    diffs = wide[(True, "0.02")] - wide[(False, "0.02")]
    ci = stats.ttest_1samp(diffs, 0).confidence_interval(0.95)
    assert primary["diff"] == pytest.approx(diffs.mean())
    assert (primary["low"], primary["high"]) == pytest.approx((ci.low, ci.high))
    assert primary["n_seeds"] == 5 and primary["low"] < 0.10 < primary["high"]
    t5 = table[(table["contrast"] == "T5 − tied, init 1.0") & (table["model"] == "nano")]
    assert t5["diff"].iloc[0] == pytest.approx(-0.2 - EFFECT["1.0"], abs=0.02)
    sizes = table[table["model"] == "micro − nano"]
    assert len(sizes) == 3 and sizes["diff"].abs().max() < 0.05  # the truth is the same


def test_each_contrast_has_its_t_tests_p_and_holms_adjustment_over_the_table(study):
    """p is the two-sided p of the t-test the interval inverts (p < 0.05 exactly where the
    interval excludes 0); p_holm adjusts the table's p-values as one family."""
    from statsmodels.stats.multitest import multipletests

    plain = study[study["emb_lr_mult"] == 1.0]
    table = books.contrast_table(plain.assign(final_val_loss=plain["test_loss"]))
    wide = plain[plain["model"] == "nano"].pivot_table(
        index="seed", columns=["tie", "init_std"], values="test_loss"
    )
    diffs = wide[(True, "0.02")] - wide[(False, "0.02")]
    row = table[(table["model"] == "nano") & (table["contrast"] == "tied − untied, init 0.02")]
    assert row["p"].iloc[0] == pytest.approx(stats.ttest_1samp(diffs, 0).pvalue)
    tested = table[table["p"].notna()]  # not the rows of identical differences (no t)
    assert len(tested) == 17 and table["p_holm"].isna().sum() == 2
    assert ((tested["p"] < 0.05) == ((tested["low"] > 0) | (tested["high"] < 0))).all()
    reject, adjusted, *_ = multipletests(tested["p"], method="holm")
    assert tested["p_holm"].to_numpy() == pytest.approx(adjusted)
    assert (tested["p_holm"] >= tested["p"]).all() and 0 < reject.sum() < len(tested)


def test_the_floor_is_the_contrast_on_a_replicate_against_replicate_zero(study):
    plain = study[study["emb_lr_mult"] == 1.0]
    again = plain[(plain["seed"] == 0) & (plain["model"] == "nano")].copy()
    again["replicate"] = 1
    again.loc[again["tie"] & (again["init_std"] == "0.02"), "test_loss"] += 0.004
    table = books.contrast_table(pd.concat([plain, again]))
    floor = table.set_index(["model", "contrast"])["floor"]
    assert floor[("nano", "tied − untied, init 0.02")] == pytest.approx(0.004)
    assert floor[("nano", "tied − untied, init 1.0")] == pytest.approx(0.0)
    assert np.isnan(floor[("micro", "tied − untied, init 0.02")])  # no replicate there


def test_h2_and_h5_are_paired_by_seed_against_d_sqrt_and_the_bigram(study):
    plain = study[study["emb_lr_mult"] == 1.0]
    checks = books.hypothesis_checks(plain).set_index(["table", "model", "contrast"])
    h2 = checks.loc[("H2", "micro", "tied: init 1.0 − init d^-0.5")]
    assert h2["n_seeds"] == 5
    assert h2["diff"] == pytest.approx(EFFECT["1.0"] - EFFECT["inv_sqrt_d"], abs=0.02)
    untied = plain[(plain["model"] == "nano") & ~plain["tie"] & (plain["init_std"] == "0.02")]
    gap = untied.sort_values("seed")["test_loss"] - 5.0
    ci = stats.ttest_1samp(gap, 0).confidence_interval(0.95)
    h5 = checks.loc[("H5", "nano", "untied 0.02 − bigram")]
    assert (h5["diff"], h5["low"], h5["high"]) == pytest.approx((gap.mean(), ci.low, ci.high))
    assert len(checks.loc["H5"]) == 2 * 8  # every arm at both sizes


def test_the_count_baselines_are_a_mean_over_seeds_however_many_runs_a_seed_has(study):
    bigram = {0: 5.5, 1: 5.0, 2: 5.0, 3: 5.0, 4: 5.0}  # seed 0 also has the lr check's 12 runs
    counts = {"test_bigram": study["seed"].map(bigram), "test_unigram": 7.0, "test_unseen": 0.0}
    table = books.references(study.assign(**counts))
    assert len(study[(study["model"] == "nano") & (study["seed"] == 0)]) > 10
    assert table.loc["nano", "test_bigram"] == pytest.approx(5.1)
    assert table.loc["micro", "test_bigram"] == pytest.approx(5.1)


def test_text_variance_separates_books_within_a_seed_from_seed_means():
    rng = np.random.default_rng(1)
    effects = pd.DataFrame(
        [
            {"model": "micro", "seed": s, "document": f"b{s}-{j}", "effect": 0.05 + m + e}
            for s, m in enumerate(rng.normal(0, 0.01, 5))
            for j, e in enumerate(rng.normal(0, 0.2, 20))
        ]
    )
    row = books.text_variance(effects).iloc[0]
    assert (row["books"], row["seeds"]) == (100, 5)
    assert 0.15 < row["sd_between_books"] < 0.25
    assert row["sd_between_seed_means"] < row["sd_between_books"] / 2


def drawable(study: pd.DataFrame) -> pd.DataFrame:
    """The table as the loader gives it: the columns every figure's caption reads."""
    return study.assign(
        variant="",
        data_id="docs-test",
        data="gutenberg",
        vocab_size=50257,
        max_steps=500,
        n_embd=study["model"].map({"nano": 64, "micro": 128}),
        params_total=study["model"].map({"nano": 3_324_736, "micro": 7_262_080}),
        heldout_fold=study["seed"],
        test_bigram=5.3,
        test_unigram=7.0,
        path=None,
    )


def test_the_figures_draw_every_arm_each_contrast_and_the_lr_check(study):
    from tiedvsuntied.studies.tie_x_init_books import figures

    runs = drawable(study[study["emb_lr_mult"] == 1.0])  # every cell at its chosen lr
    loss = figures.fig_loss(runs)
    labels = {t.get_text() for t in loss.legends[0].get_texts()}
    assert labels == {figures.ARMS[a][0] for a in ARMS}
    contrasts = figures.fig_contrasts(runs)
    ticks = contrasts.axes[0].get_yticklabels()
    primary = [t.get_text() for t in ticks if "PRIMARY" in t.get_text()]
    assert primary == ["A  micro: tied − untied, init 0.02 [PRIMARY]"]
    ax = contrasts.axes[0]  # a title, the sign on the axis, and what A, B and C are
    assert ax.get_title() and "< 0, the first is better" in ax.get_xlabel()
    said = " ".join(contrasts.captions)
    assert all(f"{table}: " in said for table in "ABC")
    assert len(ticks) == len(books.contrast_table(runs).query("n_seeds > 0"))
    lr = figures.fig_lr(drawable(study))
    assert not lr.empty and lr.axes[0].get_xscale() == "log"


def test_the_lr_figure_marks_an_edge_choice_and_each_caption_gives_its_own_seeds_and_sizes(study):
    """Untied at 0.02 chose m = 4, the highest run: an arrow and a note; the lr figure draws nano
    seed 0 alone and says so, the contrasts figure both sizes and the grid's seeds per cell."""
    from tiedvsuntied.figures.style import finish
    from tiedvsuntied.studies.tie_x_init_books import figures

    runs = drawable(study)
    choice = books.chosen_lr(study).set_index(["arm", "init_std"])["emb_lr_mult"]
    grids = {cell: row.dropna().index for cell, row in books.lr_check(study).iterrows()}
    edges = [c for c, ms in grids.items() if len(ms) > 1 and choice[c] in (ms.min(), ms.max())]
    assert edges == [("untied", "0.02")]  # the study's one edge choice
    lr = figures.fig_lr(runs)
    assert lr.flagged == ["untied, init 0.02: m = 4 is the highest m run"]
    arrows = [t for ax in lr.axes for t in ax.texts if t.arrow_patch is not None]
    assert len(arrows) == 1 and arrows[0].axes.get_title() == "init std 0.02"
    finish(lr, runs)
    said = " ".join(lr.caption_text.get_text().split())
    assert said.startswith("nano (d=64), 500 steps") and "n = 1 seed/cell" in said
    assert "seed 0 alone" in said and "an arrow: the chosen m is its grid's edge" in said
    contrasts = figures.fig_contrasts(runs)
    finish(contrasts, runs)
    said = " ".join(contrasts.caption_text.get_text().split())
    # the grid: 5 seeds per cell at m = 1; untied at 0.02 chose m = 4, which seed 0 alone ran
    assert said.startswith("nano (d=64), micro (d=128)") and "n = 1–5 seeds/cell" in said


def test_the_figures_skip_runs_that_hold_out_no_documents(study):
    from tiedvsuntied.studies.tie_x_init_books import figures

    runs = drawable(study).assign(heldout_fold=np.nan)  # the first edition's tail split
    assert figures.fig_loss(runs).empty == figures.NOT_BOOKS
    assert figures.fig_contrasts(runs).empty == figures.NOT_BOOKS


def test_the_contrast_figure_counts_only_rows_with_an_interval(study):
    from tiedvsuntied.studies.tie_x_init_books import figures

    runs = drawable(study[study["emb_lr_mult"] == 1.0])
    runs = runs[(runs["model"] == "nano") | (runs["seed"] == 0)]  # micro: one seed
    caption = " ".join(figures.fig_contrasts(runs).captions)
    assert caption.startswith("8 intervals (11 rows of one seed: no interval)")


def test_the_generic_figures_get_each_arm_at_its_chosen_multiplier_and_other_runs_whole(study):
    """at_chosen_lr (notebooks 02, 04, 06, 08): the lr check's runs at the multipliers not chosen
    are left out, history with them; runs that hold out no documents come back unchanged."""
    from tiedvsuntied.analysis.load import Results
    from tiedvsuntied.studies.tie_x_init_books import figures

    runs = drawable(study).assign(run_id=[f"r{i}" for i in range(len(study))])
    history = pd.DataFrame({"run_id": runs["run_id"], "step": 0})
    kept = figures.at_chosen_lr(Results(runs, history, []))
    assert sorted(kept.runs["run_id"]) == sorted(books.grid(runs)["run_id"])
    assert set(kept.history["run_id"]) == set(kept.runs["run_id"]) and len(kept.runs) < len(runs)
    other = Results(runs.assign(heldout_fold=np.nan), history, [])
    assert figures.at_chosen_lr(other) is other
