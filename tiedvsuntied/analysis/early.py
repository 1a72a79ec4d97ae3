"""The first steps of a run: when its loss first falls below ln V (the loss of predicting every
token alike) and below the loss of its d^-0.5 arm at the same step; why, and which loss is read:
docs/figures.md, "The first steps"."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tiedvsuntied.analysis.stats import CELL, GROUP_COLUMNS, first_replicates
from tiedvsuntied.results.metrics import TRAIN_LOSS, VAL_LOSS

ARM_INIT = "inv_sqrt_d"  # the arm every other init std is compared with
ARM_KEYS = ["data_id", "model", "variant", "tie", "seed"]  # a run and its d^-0.5 arm share these
MIN_DENSE_STEPS = 10  # train/loss at every step 1..k with k >= this: use it, not val/loss
STEP_COLUMNS = ("step_below_ln_v", "step_below_arm")
RUN_KEYS = [*ARM_KEYS, "init_std", "run_id", "name", "status"]  # copied from the runs table
RUN_STEPS = ["metric", "last_step", "ln_v", "step_below_ln_v"]
ARM_STEPS = ["arm_run_id", "arm_metric", "step_below_arm"]
EARLY_COLUMNS = [*RUN_KEYS, *RUN_STEPS, *ARM_STEPS]


def dense_steps(run_history: pd.DataFrame) -> int:
    """k such that one run's ``train/loss`` is logged at every step 1..k (0 if not at step 1)."""
    if TRAIN_LOSS not in run_history:
        return 0
    steps = np.unique(run_history.loc[run_history[TRAIN_LOSS].notna(), "step"].to_numpy())
    steps = steps[steps >= 1]
    gaps = np.flatnonzero(steps != np.arange(1, len(steps) + 1))
    return int(gaps[0] if len(gaps) else len(steps))


def dense_metric(*histories: pd.DataFrame) -> str:
    """train/loss where every one of ``histories`` logged it densely, else val/loss."""
    dense = min(dense_steps(h) for h in histories) >= MIN_DENSE_STEPS
    return TRAIN_LOSS if dense else VAL_LOSS


def loss_curve(run_history: pd.DataFrame, metric: str) -> pd.Series:
    """One run's ``metric`` by step."""
    if metric not in run_history:
        return pd.Series(dtype=float)
    logged = run_history[run_history[metric].notna()]
    return logged.groupby("step")[metric].last().astype(float)


def first_below(loss: pd.Series, threshold) -> float:
    """The first step (index) at which ``loss`` < ``threshold`` (a number, or a Series by step:
    compared on the steps both have); NaN if never."""
    if isinstance(threshold, pd.Series):
        loss, threshold = loss.align(threshold, join="inner")
    below = loss.index[(loss < threshold).to_numpy()]
    return float(below.min()) if len(below) else np.nan


def _run_row(run: pd.Series, h: pd.DataFrame, arm: pd.Series | None, arm_h) -> dict:
    ln_v = np.log(float(run["vocab_size"])) if pd.notna(run.get("vocab_size")) else np.nan
    metric, arm_metric, step_arm = dense_metric(h), None, np.nan
    if arm is not None:  # on train/loss only where both runs logged it densely
        arm_metric = dense_metric(h, arm_h)
        step_arm = first_below(loss_curve(h, arm_metric), loss_curve(arm_h, arm_metric))
    return {
        **{c: run.get(c) for c in RUN_KEYS},
        "metric": metric,
        "last_step": int(h["step"].max()) if len(h) else np.nan,
        "ln_v": ln_v,
        "step_below_ln_v": first_below(loss_curve(h, metric), ln_v),
        "arm_run_id": None if arm is None else arm["run_id"],
        "arm_metric": arm_metric,
        "step_below_arm": step_arm,
    }


def early_steps(runs: pd.DataFrame, history: pd.DataFrame) -> pd.DataFrame:
    """EARLY_COLUMNS per run of replicate 0 (the arm's own steps below the arm: NaN)."""
    runs = first_replicates(runs).astype({"variant": object}).fillna({"variant": ""})
    by_run = {rid: h.sort_values("step") for rid, h in history.groupby("run_id", sort=False)}
    arms = runs[runs["init_std"] == ARM_INIT].set_index(ARM_KEYS)
    arms = arms[~arms.index.duplicated()]
    rows = []
    for _, run in runs.iterrows():
        h = by_run.get(run["run_id"], history.iloc[:0])
        key = tuple(run[c] for c in ARM_KEYS)
        arm = arms.loc[key] if run["init_std"] != ARM_INIT and key in arms.index else None
        arm_h = None if arm is None else by_run.get(arm["run_id"], history.iloc[:0])
        rows.append(_run_row(run, h, arm, arm_h))
    out = pd.DataFrame(rows, columns=EARLY_COLUMNS)
    return out.sort_values([*CELL, "tie", "seed"], ignore_index=True)


def early_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per GROUP_COLUMNS cell of :func:`early_steps`: ``n`` and each of STEP_COLUMNS' median,
    min, max, ``_n`` and ``_never`` (docs/figures.md, "The first steps")."""
    groups = table.astype({"variant": object}).groupby(GROUP_COLUMNS, dropna=False, sort=True)
    out = groups.agg(n=("run_id", "size"), last_step=("last_step", "min"))
    for col in STEP_COLUMNS:
        applies = table["arm_run_id" if col == "step_below_arm" else "run_id"].notna()
        sub = table[applies].groupby(GROUP_COLUMNS, dropna=False, sort=True)[col]
        stats = sub.agg(["median", "min", "max", "size", "count"]).rename(columns={"size": "n"})
        stats["never"] = stats["n"] - stats.pop("count")
        out = out.join(stats.add_prefix(f"{col}_"))
    out = out.reset_index()
    counts = [f"{c}_{s}" for c in STEP_COLUMNS for s in ("n", "never")]
    return out.assign(**{c: out[c].fillna(0).astype(int) for c in counts})
