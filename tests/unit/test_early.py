"""early: the first step below ln V and below the d^-0.5 arm, on handmade histories whose
answers are known step by step."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from tiedvsuntied.analysis.early import dense_steps, early_steps, early_summary, first_below

V = 50257
LN_V = math.log(V)  # 10.8249


def _run(run_id, tie, init_std, seed=0, variant="", replicate=0, status="finished"):
    return {
        "run_id": run_id,
        "name": run_id,
        "status": status,
        "data_id": "d",
        "model": "nano",
        "variant": variant,
        "tie": tie,
        "init_std": init_std,
        "seed": seed,
        "replicate": replicate,
        "vocab_size": V,
    }


def _dense(run_id, losses, after=()):
    """train/loss at steps 1, 2, ... (one value each), then (step, loss) pairs every 10 steps."""
    rows = [{"run_id": run_id, "step": s, "train/loss": v} for s, v in enumerate(losses, 1)]
    return rows + [{"run_id": run_id, "step": s, "train/loss": v} for s, v in after]


def _val(run_id, points):
    return [{"run_id": run_id, "step": s, "val/loss": v} for s, v in points]


# tied, seed 0: init 1.0 sits at 60 nats for 5 steps, collapses, is below ln V from step 12;
# its d^-0.5 arm starts at 11.3 and falls 0.1 a step (10.8 < ln V at step 6).
TIED_BIG = [60.0] * 5 + [40.0, 30.0, 20.0, 12.0, 11.0, LN_V, 10.0] + [9.0] * 8  # steps 1..20
TIED_ARM = [11.3 - 0.1 * k for k in range(20)]  # steps 1..20: 11.3, 11.2, ..., 9.4


def _study():
    runs = [
        _run("t1", True, "1.0"),
        _run("ta", True, "inv_sqrt_d"),
        _run("u1", False, "1.0"),
        _run("ua", False, "inv_sqrt_d"),
        _run("t1s1", True, "1.0", seed=1),  # never below ln V by its last step (30)
        _run("ta1", True, "inv_sqrt_d", seed=1),
        _run("t5", True, "1.0", variant="head.t5_rescale=True"),  # no d^-0.5 arm of its variant
        _run("t1r", True, "1.0", replicate=1),  # the noise floor: left out
    ]
    history = [
        *_dense("t1", TIED_BIG, after=[(30, 8.0)]),
        *_val("t1", [(0, 61.0), (1, 60.9), (2, 60.8), (4, 60.0), (8, 25.0), (16, 9.5)]),
        *_dense("ta", TIED_ARM, after=[(30, 9.0)]),
        # untied: evaluations only (no dense train loss), log-spaced
        *_val("u1", [(0, 30.0), (1, 29.0), (2, 20.0), (4, 10.9), (8, 10.5), (16, 9.0), (32, 8.0)]),
        *_val("ua", [(0, 11.3), (1, 11.2), (2, 10.9), (4, 10.7), (8, 10.0), (16, 9.5), (32, 8.5)]),
        *_dense("t1s1", [60.0] * 20, after=[(30, 20.0)]),
        *_dense("ta1", TIED_ARM),
        *_dense("t5", [12.0, 11.0, 10.0] + [9.0] * 17),
        *_dense("t1r", [1.0] * 20),
    ]
    return pd.DataFrame(runs), pd.DataFrame(history)


def _by_id(table):
    return table.set_index("run_id")


def test_dense_steps_counts_the_unbroken_run_of_train_losses_from_step_one():
    h = pd.DataFrame(_dense("x", [5.0] * 12, after=[(20, 4.0), (30, 3.0)]))
    assert dense_steps(h) == 12
    assert dense_steps(h[h["step"] != 1]) == 0  # no step 1: not dense at all
    assert dense_steps(h[h["step"] != 7]) == 6
    assert dense_steps(pd.DataFrame(_val("x", [(0, 1.0), (1, 1.0)]))) == 0


def test_first_below_is_strict_and_compares_curves_on_common_steps():
    loss = pd.Series([12.0, LN_V, 10.0], index=[1, 2, 3])
    assert first_below(loss, LN_V) == 3  # equal to ln V is not below it
    other = pd.Series([11.0, 10.5, 9.0, 8.0], index=[1, 3, 4, 5])
    assert first_below(loss, other) == 3  # step 2 has no partner value
    assert np.isnan(first_below(loss, 5.0))


def test_early_steps_on_dense_train_loss_and_on_evaluations():
    runs, history = _study()
    table = _by_id(early_steps(runs, history))
    assert "t1r" not in table.index  # a replicate is the noise floor, not a seed
    t1 = table.loc["t1"]
    assert t1["metric"] == "train/loss" and t1["last_step"] == 30
    assert t1["step_below_ln_v"] == 12  # 11.0 at step 10, exactly ln V at 11, 10.0 at 12
    # below the arm: 11.0 vs 10.4 at step 10, ln V vs 10.3 at 11, 10.0 vs 10.2 at step 12
    assert t1["arm_run_id"] == "ta" and t1["arm_metric"] == "train/loss"
    assert t1["step_below_arm"] == 12
    ta = table.loc["ta"]
    assert ta["step_below_ln_v"] == 6 and np.isnan(ta["step_below_arm"])  # 10.8 at step 6
    assert pd.isna(ta["arm_run_id"])
    u1 = table.loc["u1"]  # evaluations only: val/loss at 0, 1, 2, 4, 8 ...
    assert u1["metric"] == "val/loss" and u1["step_below_ln_v"] == 8
    assert u1["arm_metric"] == "val/loss" and u1["step_below_arm"] == 16  # 9.0 < 9.5
    assert table.loc["ua", "step_below_ln_v"] == 4  # 10.7


def test_runs_that_never_get_there_and_runs_without_an_arm():
    runs, history = _study()
    table = _by_id(early_steps(runs, history))
    never = table.loc["t1s1"]
    assert np.isnan(never["step_below_ln_v"]) and np.isnan(never["step_below_arm"])
    assert never["last_step"] == 30 and never["arm_run_id"] == "ta1"
    t5 = table.loc["t5"]
    assert t5["step_below_ln_v"] == 3 and pd.isna(t5["arm_run_id"])
    assert np.isnan(t5["step_below_arm"])


def test_a_dense_run_against_an_arm_with_evaluations_only_compares_evaluations():
    runs = pd.DataFrame([_run("a", True, "1.0"), _run("b", True, "inv_sqrt_d")])
    history = pd.DataFrame(
        [
            *_dense("a", [50.0] * 10 + [9.0] * 10),
            *_val("a", [(0, 60.0), (4, 40.0), (8, 20.0), (16, 9.2)]),
            *_val("b", [(0, 11.3), (4, 10.5), (8, 10.0), (16, 9.5)]),
        ]
    )
    table = _by_id(early_steps(runs, history))
    assert table.loc["a", "metric"] == "train/loss" and table.loc["a", "step_below_ln_v"] == 11
    assert table.loc["a", "arm_metric"] == "val/loss" and table.loc["a", "step_below_arm"] == 16


def test_summary_gives_median_and_range_over_seeds_and_counts_the_runs_that_never_got_there():
    runs, history = _study()
    runs = pd.concat([runs, pd.DataFrame([_run("t1s2", True, "1.0", seed=2)])])
    extra = pd.DataFrame(_dense("t1s2", [60.0] * 15 + [10.0] * 5))  # below ln V at step 16
    table = early_steps(runs, pd.concat([history, extra]))
    summary = early_summary(table).set_index(["tie", "init_std", "variant"])
    big = summary.loc[(True, "1.0", "")]
    assert big["n"] == 3 and big["last_step"] == 20
    assert big["step_below_ln_v_median"] == 14 and big["step_below_ln_v_min"] == 12
    assert big["step_below_ln_v_max"] == 16 and big["step_below_ln_v_never"] == 1
    # seed 2 has no d^-0.5 arm: the arm's column covers seeds 0 and 1, one never got there
    assert big["step_below_arm_n"] == 2 and big["step_below_arm_never"] == 1
    assert big["step_below_arm_median"] == 12
    t5 = summary.loc[(True, "1.0", "head.t5_rescale=True")]
    assert t5["step_below_arm_n"] == 0 and t5["step_below_ln_v_median"] == 3


def test_early_steps_of_no_history_are_nan_not_an_error():
    runs, _ = _study()
    table = early_steps(runs, pd.DataFrame(columns=["run_id", "step"]))
    assert len(table) == 7 and table["step_below_ln_v"].isna().all()


@pytest.mark.parametrize("losses, expected", [([11.0, 10.0], 2), ([10.0], 1), ([11.0], np.nan)])
def test_the_first_dense_step_can_be_step_one(losses, expected):
    curve = pd.Series(losses, index=range(1, len(losses) + 1))
    found = first_below(curve, LN_V)
    assert found == expected or (np.isnan(found) and np.isnan(expected))
