"""Statistics on the runs table: means over seeds with Student-t intervals, the one tied/untied
pairing, paired tables, the noise floor, the effect a number of seeds detects. Why a t over the
seeds' paired differences, and its coverage: docs/figures.md, "Statistics"."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import pandas as pd
from scipy import optimize, stats

from tiedvsuntied.analysis.load import ResultsError
from tiedvsuntied.results.metrics import VAL_LOSS

CONFIDENCE = 0.95  # of every interval the tables give and the figures draw
MIN_BAND_SEEDS = 3  # fewer: figures draw each seed, no band (n = 2 t-bands are uninformative)
MIN_INTERVAL_SEEDS = 2  # a paired difference's t-interval needs two seeds
GROUP_COLUMNS = ["data_id", "model", "variant", "tie", "init_std"]  # runs averaged over seeds
CELL = ["data_id", "model", "variant", "init_std"]  # a paired table's row: its pairs share these
PAIR_COLUMNS = [*CELL, "seed"]  # a tied/untied pair shares
# the summary column each comparison point reads
POINTS = {"final": "test_loss", "best": "test_loss_at_best", "final_val": "final_val_loss"}
# mean_t, mean_u: the compared value's mean in the _t (tied, or the arm) and _u (untied, or the
# reference) runs of the pairs: how far from the start both arms are, beside their difference
INTERVAL_COLUMNS = ["n_seeds", "mean_t", "mean_u", "diff", "low", "high", "method", "seed_diffs"]
FLOOR_COLUMNS = {point: f"floor_{point}" for point in POINTS}  # noise_floor's columns


class Contrast(NamedTuple):
    """(tied − untied at ``factor`` = levels[0]) − (at levels[1]), paired by seed, at ``point``
    (POINTS), in the cells of the largest size."""

    factor: str
    levels: tuple[str, str]
    point: str


# Fixed before running (issue 20): the study's headline question and the one contrast its
# conclusion rests on; every other interval of a table is secondary.
PAIRED_SIGN = "tied − untied (> 0: tying costs)"  # of every paired difference, figures and tables
PRIMARY_CONTRAST = Contrast("init_std", ("1.0", "inv_sqrt_d"), "final")


def seed_interval(values) -> tuple[float, float, float]:
    """Mean of one value per seed and its Student-t interval (NaN below MIN_INTERVAL_SEEDS)."""
    values = np.asarray(values, dtype=float)
    values = values[~np.isnan(values)]  # a run without the value (no test evaluation)
    if len(values) < MIN_INTERVAL_SEEDS:
        return (float(values.mean()) if len(values) else np.nan), np.nan, np.nan
    if np.ptp(values) == 0:  # identical differences (eager replicas): scipy's t is undefined
        return float(values[0]), float(values[0]), float(values[0])
    interval = stats.ttest_1samp(values, 0.0).confidence_interval(CONFIDENCE)
    return float(values.mean()), float(interval.low), float(interval.high)


def seed_p(values) -> float:
    """The two-sided p of the t-test that the seeds' mean is 0: the test whose inversion is
    :func:`seed_interval` (NaN where that has no interval or all values are equal)."""
    values = np.asarray(values, dtype=float)
    values = values[~np.isnan(values)]
    if len(values) < MIN_INTERVAL_SEEDS or np.ptp(values) == 0:
        return np.nan
    return float(stats.ttest_1samp(values, 0.0).pvalue)


ALPHA, POWER = 0.05, 0.8  # a planned study's test level and power (power.py of each study)


def power(effect: float, sd: float, n: int, alpha: float = ALPHA) -> float:
    """The power of the two-sided one-sample t-test at ``alpha`` of ``n`` paired differences
    whose mean is ``effect`` and standard deviation ``sd`` (the noncentral t)."""
    df, nc = n - 1, effect / (sd / np.sqrt(n))
    crit = stats.t.ppf(1 - alpha / 2, df)
    # the far tail is ~0 for a large nc, where scipy's series can return nan
    return float(stats.nct.sf(crit, df, nc) + np.nan_to_num(stats.nct.cdf(-crit, df, nc)))


def detectable(sd: float, n: int, alpha: float = ALPHA, target: float = POWER) -> float:
    """The smallest effect that :func:`power` detects with power ``target`` at ``n`` seeds."""
    return optimize.brentq(lambda e: power(e, sd, n, alpha) - target, 1e-6, 8 * sd)


def holm(p) -> pd.Series:
    """Holm's step-down adjustment of the p-values in ``p``, one family (the k-th smallest of m
    times m − k + 1, made monotone, at most 1: statsmodels' multipletests(method="holm") to the
    bit, whose Holm branch runs a full gc.collect() per call, 0.1–0.6 s in a process holding a
    bundle); a NaN (a row without an interval) is no member of it and stays NaN."""
    p = pd.Series(p, dtype=float)
    kept = p.dropna()
    adjusted = pd.Series(np.nan, index=p.index)
    if len(kept):
        values = kept.to_numpy()
        order = np.argsort(values)
        steps = np.maximum.accumulate(values[order] * np.arange(len(values), 0, -1))
        out = np.empty_like(steps)
        out[order] = np.minimum(steps, 1)
        adjusted[kept.index] = out
    return adjusted


def seed_summary(values: pd.Series, what: str = "paired differences") -> dict:
    """n_seeds, diff (the mean), low, high, p (of the same t), method and seed_diffs of one
    value per seed."""
    values = values.dropna()
    n = len(values)
    interval = dict(zip(("diff", "low", "high"), seed_interval(values), strict=True))
    method = f"{CONFIDENCE:.0%} t over {n} seeds' {what}"
    if n < MIN_INTERVAL_SEEDS:
        method = f"{n} seed{'s' * (n != 1)}: no interval (needs {MIN_INTERVAL_SEEDS})"
    row = {"n_seeds": n, **interval, "p": seed_p(values), "method": method}
    return {**row, "seed_diffs": values.tolist()}


def is_replicate(run: pd.Series) -> bool:
    value = run.get("replicate")
    return bool(pd.notna(value) and value > 0)


def first_replicates(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs of replicate 0: one run per config and seed. A replicate > 0 trains one config
    again (the noise floor); counted as another seed, it would shrink every interval."""
    if "replicate" not in runs:
        return runs
    return runs[pd.to_numeric(runs["replicate"], errors="coerce").fillna(0).eq(0)]


# ----------------------------------------------------------------------------- means over seeds
def aggregate(
    df: pd.DataFrame, by: Sequence[str], value: str, *, carry: Sequence[str] = ()
) -> pd.DataFrame:
    """``value`` over each group of ``by`` (typically: seeds): n, mean, std, sem, the t interval
    (``ci_low``, ``ci_high``, ``ci_half``; NaN for n=1), ``ci_label``, ``carry``, ``run_ids``."""
    missing = [c for c in [*by, value, *carry] if c not in df.columns]
    if missing:
        raise KeyError(
            f"columns {missing} not in the table; available: {sorted(map(str, df.columns))}"
        )
    numbers = pd.to_numeric(df[value], errors="coerce").replace([np.inf, -np.inf], np.nan)
    df = df.assign(**{value: numbers})
    groups = df.groupby(list(by), dropna=False, sort=True)
    out = groups[value].agg(n="count", mean="mean", std="std", sem="sem")
    half = stats.t.ppf((1 + CONFIDENCE) / 2, out["n"] - 1) * out["sem"]  # NaN where n < 2
    out["ci_low"], out["ci_high"], out["ci_half"] = out["mean"] - half, out["mean"] + half, half
    out["ci_label"] = [
        f"{CONFIDENCE:.0%} t-CI, n={k}" if k > 1 else ("n=1: no CI" if k == 1 else "no data")
        for k in out["n"]
    ]
    if carry:
        out = out.join(groups[list(carry)].first())
    if "run_id" in df:
        out["run_ids"] = groups["run_id"].agg(list)
    return out.reset_index()


def aggregate_runs(runs: pd.DataFrame, value: str = "final_val_loss") -> pd.DataFrame:
    """:func:`aggregate` per GROUP_COLUMNS of the finished runs of replicate 0 (a diverged run
    has no meaningful final loss)."""
    carry = ["n_embd", "n_layer", "params_total", "params_non_embedding", "vocab_size"]
    finished = first_replicates(runs[runs["status"] == "finished"])
    return aggregate(finished, GROUP_COLUMNS, value, carry=carry)


def aggregate_history(
    history: pd.DataFrame,
    metric: str = VAL_LOSS,
    *,
    by: Sequence[str] = ("model", "tie", "init_std"),
) -> pd.DataFrame:
    """:func:`aggregate` of ``metric`` per group and step, with the mean ``tokens``. Diverged
    and failed runs are left out here: plot them one by one."""
    if metric not in history.columns:
        raise KeyError(
            f"metric {metric!r} not in the history; logged metrics: "
            f"{sorted(c for c in history.columns if '/' in str(c))}"
        )
    logged = first_replicates(history).dropna(subset=[metric])
    logged = logged[logged["status"].isin(["finished", "running", "interrupted"])]
    tokens = logged.groupby([*by, "step"], dropna=False)["tokens"].mean().reset_index()
    return aggregate(logged, [*by, "step"], metric).merge(tokens, on=[*by, "step"], how="left")


def largest_model(runs: pd.DataFrame) -> str | None:
    """The size with the most parameters (then the widest) among ``runs``."""
    sized = runs.sort_values(["params_total", "n_embd"], ascending=False, na_position="last")
    return sized.iloc[0]["model"] if len(sized) else None


def representative_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """One run per (tie, init std, variant) of the largest size that has a usable run: the
    lowest seed, finished first (for figures that show single runs)."""
    if runs.empty:
        return runs
    runs = first_replicates(runs)
    usable = {"finished": 0, "running": 1, "interrupted": 1, "diverged": 1}
    rank = runs["status"].map(usable).fillna(2)
    pool = runs[rank < 2] if (rank < 2).any() else runs  # failed, unknown: only if nothing else
    ranked = runs.assign(_rank=rank).sort_values(["_rank", "seed"], kind="stable")
    candidates = ranked[ranked["model"] == largest_model(pool)].drop(columns="_rank")
    return candidates.groupby(["tie", "init_std", "variant"], dropna=False, sort=False).head(1)


# ----------------------------------------------------------------------------- the pairing
def match(
    first: pd.DataFrame,
    second: pd.DataFrame,
    keys: Sequence[str],
    suffixes: tuple[str, str] = ("_t", "_u"),
) -> pd.DataFrame:
    """Rows of ``first`` and ``second`` that share ``keys``, the other columns suffixed. Two rows
    in one slot (two sweeps of the same runs) cannot be paired: :class:`ResultsError`."""
    for side in (first, second):
        duplicated = side[side.duplicated(list(keys), keep=False)]
        if not duplicated.empty:
            raise ResultsError(
                f"several runs share {'/'.join(keys)}, so they cannot be paired: "
                + ", ".join(f"{r.run_id} (sweep {r.sweep})" for r in duplicated.itertuples())
                + "; select one sweep first"
            )
    return first.merge(second, on=list(keys), suffixes=suffixes)


def pairs(runs: pd.DataFrame, keys: Sequence[str] = PAIR_COLUMNS) -> pd.DataFrame:
    """Finished tied runs of replicate 0 matched with their untied partners on ``keys`` (columns
    suffixed _t and _u): the one tied/untied pairing of the package."""
    finished = first_replicates(runs[runs["status"] == "finished"])
    return match(finished[finished["tie"].eq(True)], finished[finished["tie"].eq(False)], keys)


def unpaired(runs: pd.DataFrame, paired: pd.DataFrame) -> list[str]:
    """Why each run of ``runs`` is in no pair of ``paired`` (from :func:`pairs`)."""
    ids = set(paired["run_id_t"]) | set(paired["run_id_u"])
    notes = []
    for _, run in runs[~runs["run_id"].isin(ids)].iterrows():
        label = run["name"] or run["run_id"]
        if is_replicate(run):
            notes.append(f"{label}: replicate {run['replicate']} (noise floor only)")
        elif run["status"] != "finished" or pd.isna(run["tie"]):
            notes.append(f"{label}: status {run['status']}")
        else:
            notes.append(
                f"{label}: no {'untied' if run['tie'] else 'tied'} partner "
                "with the same data, size, variant, init std and seed"
            )
    return notes


def paired_differences(runs: pd.DataFrame, value: str = "final_val_loss") -> pd.DataFrame:
    """tied − untied (``diff``) of one summary ``value`` per pair (:func:`pairs`); the runs in no
    pair are listed in ``.attrs["unpaired"]``."""
    both = pairs(runs)
    tied, untied = both[f"{value}_t"], both[f"{value}_u"]
    out = both[PAIR_COLUMNS].assign(tied=tied, untied=untied, diff=tied - untied)
    out = out.assign(tied_run_id=both["run_id_t"], untied_run_id=both["run_id_u"])
    out = out.sort_values(PAIR_COLUMNS).reset_index(drop=True)
    out.attrs.update(unpaired=unpaired(runs, both), value=value)
    return out


def summarize_differences(pairs: pd.DataFrame) -> pd.DataFrame:
    """:func:`aggregate` of the paired differences per CELL."""
    return aggregate(pairs, CELL, "diff")


# ----------------------------------------------------------------------------- intervals
def paired_interval(pairs: pd.DataFrame, point: str) -> dict:
    """INTERVAL_COLUMNS of one cell's pairs at one comparison point (POINTS)."""
    col = POINTS[point]
    diffs = (pairs[f"{col}_t"] - pairs[f"{col}_u"]).astype(float).dropna()
    both = pairs.loc[diffs.index]
    mean_t, mean_u = (float(both[f"{col}{s}"].astype(float).mean()) for s in ("_t", "_u"))
    return {"mean_t": mean_t, "mean_u": mean_u, **seed_summary(diffs)}


# ----------------------------------------------------------------------------- the noise floor
def reruns(runs: pd.DataFrame) -> pd.DataFrame:
    """Every finished replicate k >= 1 matched with replicate 0 of its config and seed (suffixes
    _0 and _k), and ``same_threads``: both at one known CPU thread count, a determinism check
    (compiled CPU runs are then bitwise equal), not a floor."""
    finished = runs[runs["status"] == "finished"]
    replicate = pd.to_numeric(finished.get("replicate", pd.Series(0, finished.index))).fillna(0)
    first, keys = finished[replicate.eq(0)], [*PAIR_COLUMNS, "tie"]
    pairs = [
        match(first, finished[replicate.eq(k)], keys, suffixes=("_0", "_k"))
        for k in sorted(replicate[replicate > 0].unique())
    ]
    if not pairs:
        return pd.DataFrame(columns=[*CELL, "same_threads"])
    pairs = pd.concat(pairs, ignore_index=True)
    threads = [pd.to_numeric(pairs.get(f"threads{s}"), errors="coerce") for s in ("_0", "_k")]
    return pairs.assign(same_threads=threads[0].eq(threads[1]) & threads[0].notna())


def noise_floor(runs: pd.DataFrame) -> pd.DataFrame:
    """Per CELL: ``n`` re-runs (:func:`reruns` at another thread count) and the mean
    |replicate 0 − replicate k| at every comparison point (FLOOR_COLUMNS). At another thread
    count the two runs differ by ~1e-6 from the first steps, and what training makes of that is
    the floor: an effect below it is not a finding."""
    again = reruns(runs)
    again = again[~again["same_threads"]]
    if again.empty:
        return pd.DataFrame(columns=[*CELL, "n", *FLOOR_COLUMNS.values()])
    floors = again[CELL].copy()
    for point, col in POINTS.items():
        floors[FLOOR_COLUMNS[point]] = (again[f"{col}_0"] - again[f"{col}_k"]).abs()
    groups = floors.groupby(CELL, dropna=False, sort=True)
    return groups.size().rename("n").to_frame().join(groups.mean()).reset_index()


def paired_table(runs: pd.DataFrame, points: Sequence[str] = ("final", "best")) -> pd.DataFrame:
    """Per CELL and point (POINTS): INTERVAL_COLUMNS of tied − untied and the noise ``floor``."""
    rows = [
        {**dict(zip(CELL, key, strict=True)), "point": point, **paired_interval(cell, point)}
        for key, cell in pairs(runs).groupby(CELL, dropna=False, sort=True)
        for point in points
    ]
    table = pd.DataFrame(rows, columns=[*CELL, "point", *INTERVAL_COLUMNS])
    floors = noise_floor(runs).rename(columns={v: k for k, v in FLOOR_COLUMNS.items()})
    if floors.empty:
        return table.assign(floor=np.nan)
    long = floors.melt(CELL, list(POINTS), var_name="point", value_name="floor")
    return table.merge(long, on=[*CELL, "point"], how="left")


# ----------------------------------------------------------------------------- tables as text
def caption(table: pd.DataFrame) -> str:
    """A table's first line: its intervals' count and method, the primary contrast, the floor."""
    k = int(table["low"].notna().sum()) if "low" in table else 0
    factor, (first, second), point = PRIMARY_CONTRAST
    text = (
        f"{k} interval{'s' * (k != 1)} at {CONFIDENCE:.0%} each ({CONFIDENCE:.0%} t over seeds, "
        f"paired by seed; none below {MIN_INTERVAL_SEEDS} seeds; not corrected for multiplicity); "
        f"primary contrast: interaction of tying with {factor.replace('_', ' ')} at the largest "
        f"size: (tied − untied at {factor}={first}) − (tied − untied at {factor}={second}), test "
        f"loss of the {point} weights, paired by seed"
    )
    if "primary" in table and table["primary"].any():
        text += " (the row marked primary)"
    if "floor" in table:
        text += (
            "; noise floor (mean |replicate 0 − replicate k| of one config, another thread count): "
            "column floor"
            if table["floor"].notna().any()
            else "; noise floor: none measured (no replicate runs)"
        )
    return text + "."


def markdown(table: pd.DataFrame, sign: str = PAIRED_SIGN) -> str:
    """A table as markdown under its :func:`caption` and ``sign`` (what ``diff`` subtracts from
    what), the interval as one column, the column ``diff`` headed by the sign's subtraction."""
    shown = table.drop(columns=["seed_diffs"], errors="ignore").copy()
    shown = shown.rename(columns={"diff": f"diff: {sign.split(' (>')[0]}"})
    shown["interval"] = [
        f"[{lo:+.3f}, {hi:+.3f}]" if pd.notna(lo) else "none"
        for lo, hi in zip(shown.pop("low"), shown.pop("high"), strict=True)
    ]
    if "floor" in shown:
        shown["floor"] = shown["floor"].map(lambda f: f"{f:.4f}" if pd.notna(f) else "not measured")
    head = f"{caption(table)} Sign: {sign}."
    return head + "\n\n" + shown.round(4).to_markdown(index=False)
