"""Statistics on the runs table: means over seeds with Student-t intervals, the one tied/untied
pairing, and paired differences with intervals that include evaluation noise.

A tied run and its untied partner share data, seed and body init (PAIR_COLUMNS), and every
evaluation covers the same fixed windows of a split, so window i is the same text in both: the
paired difference can be taken window by window. Its interval is a two-way bootstrap: seeds are
resampled, and windows are resampled jointly for all seeds (they are one evaluation set). With
fewer than MIN_SEEDS seeds resampling seeds says nothing, so the interval then covers the
evaluation windows only, and says so. Neighbouring windows of one text are not independent: the
window bootstrap is, if anything, narrow. Runs without window losses fall back to their summary
values (a t-interval over seeds, evaluation noise not included).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy import stats

from tiedvsuntied.analysis.load import ResultsError
from tiedvsuntied.analysis.probes import window_losses

CONFIDENCE = 0.95  # of every interval the tables give and the figures draw
# Fewer seeds: figures draw each seed, no interval (n = 2 t-bands are uninformative), and the
# paired bootstrap does not resample seeds.
MIN_BAND_SEEDS = 3
MIN_SEEDS = MIN_BAND_SEEDS
N_BOOT = 4000
GROUP_COLUMNS = ["data_id", "model", "variant", "tie", "init_std"]  # runs averaged over seeds
PAIR_COLUMNS = ["data_id", "model", "variant", "init_std", "seed"]  # a tied/untied pair shares
CELL = ["data_id", "model", "variant", "init_std"]  # a paired table's row: its pairs share these
# where each comparison point reads its numbers: (summary column, split, step of the windows)
POINTS = {
    "final": ("test_loss", "test", "step"),
    "best": ("test_loss_at_best", "test", "best_step"),
    "final_val": ("final_val_loss", "val", "step"),
}
INTERVAL_COLUMNS = ["n_seeds", "n_windows", "diff", "low", "high", "method"]
INTERVAL_COLUMNS += ["t_low", "t_high", "seed_diffs"]


def t_interval(mean, sem, n) -> tuple[np.ndarray, np.ndarray]:
    """The CONFIDENCE Student-t interval of a mean over ``n`` values with standard error ``sem``
    (arrays; NaN where n < 2)."""
    dof = np.atleast_1d(np.asarray(n, dtype=float)) - 1
    quantile = np.full(dof.shape, np.nan)
    quantile[dof > 0] = stats.t.interval(CONFIDENCE, dof[dof > 0])[1]
    mean, sem = np.asarray(mean, dtype=float), np.asarray(sem, dtype=float)
    return mean - quantile * sem, mean + quantile * sem


# ----------------------------------------------------------------------------- means over seeds
def aggregate(
    df: pd.DataFrame, by: Sequence[str], value: str, *, carry: Sequence[str] = ()
) -> pd.DataFrame:
    """``value`` over each group of ``by`` (typically: seeds): n, mean, std, sem, the CONFIDENCE
    t interval (``ci_low``, ``ci_high``, ``ci_half``; NaN for n=1), ``ci_label``, ``carry``,
    ``run_ids``."""
    missing = [c for c in [*by, value, *carry] if c not in df.columns]
    if missing:
        raise KeyError(
            f"columns {missing} not in the table; available: {sorted(map(str, df.columns))}"
        )
    df = df.assign(
        **{value: pd.to_numeric(df[value], errors="coerce").replace([np.inf, -np.inf], np.nan)}
    )
    groups = df.groupby(list(by), dropna=False, sort=True)
    out = groups[value].agg(n="count", mean="mean", std="std", sem="sem")
    if carry:
        out = out.join(groups[list(carry)].first())
    if "run_id" in df:
        out["run_ids"] = groups["run_id"].agg(list)
    out = out.reset_index()
    out["ci_low"], out["ci_high"] = t_interval(out["mean"], out["sem"], out["n"])
    out["ci_half"] = (out["ci_high"] - out["ci_low"]) / 2
    out["ci_label"] = [
        f"{CONFIDENCE:.0%} t-CI, n={k}" if k > 1 else ("n=1: no CI" if k == 1 else "no data")
        for k in out["n"]
    ]
    cols = [*by, "n", "mean", "std", "sem", "ci_low", "ci_high", "ci_half", "ci_label", *carry]
    return out[cols + (["run_ids"] if "run_id" in df else [])]


def aggregate_runs(runs: pd.DataFrame, value: str = "final_val_loss") -> pd.DataFrame:
    """Mean and CI of a summary value over seeds, per data/size/variant/tie/init std; only
    finished runs count (a diverged run has no meaningful final loss)."""
    carry = ["n_embd", "n_layer", "params_total", "params_non_embedding", "vocab_size"]
    return aggregate(runs[runs["status"] == "finished"], GROUP_COLUMNS, value, carry=carry)


def aggregate_history(
    history: pd.DataFrame,
    metric: str = "val/loss",
    *,
    by: Sequence[str] = ("model", "tie", "init_std"),
) -> pd.DataFrame:
    """Per group and step: mean and CI of ``metric`` over the group's runs (seeds), plus the
    mean ``tokens``. Diverged and failed runs are left out here: plot them one by one."""
    if metric not in history.columns:
        raise KeyError(
            f"metric {metric!r} not in the history; logged metrics: "
            f"{sorted(c for c in history.columns if '/' in str(c))}"
        )
    logged = history[history["status"].isin(["finished", "running"]) & history[metric].notna()]
    tokens = logged.groupby([*by, "step"], dropna=False)["tokens"].mean().reset_index()
    return aggregate(logged, [*by, "step"], metric).merge(tokens, on=[*by, "step"], how="left")


def representative_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """One run per (tie, init std, variant) of the largest size that has a usable run: the
    lowest seed, finished first (for figures that show single runs)."""
    if runs.empty:
        return runs
    rank = runs["status"].map({"finished": 0, "running": 1, "diverged": 1}).fillna(2)
    pool = runs[rank < 2] if (rank < 2).any() else runs  # failed, unknown: only if nothing else
    biggest = pool.sort_values(
        ["params_total", "n_embd"], ascending=False, na_position="last"
    ).iloc[0]["model"]
    candidates = runs.assign(_rank=rank)[runs["model"] == biggest].sort_values(
        ["_rank", "seed"], kind="stable"
    )
    return (
        candidates.groupby(["tie", "init_std", "variant"], dropna=False, sort=False)
        .head(1)
        .drop(columns="_rank")
    )


# ----------------------------------------------------------------------------- the pairing
def match(first: pd.DataFrame, second: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    """Rows of ``first`` and ``second`` that share ``keys``: one row per pair, the other columns
    suffixed _t (first) and _u (second). Two rows in one slot (two sweeps of the same runs)
    cannot be paired: :class:`ResultsError`."""
    for side in (first, second):
        duplicated = side[side.duplicated(list(keys), keep=False)]
        if not duplicated.empty:
            raise ResultsError(
                f"several runs share {'/'.join(keys)}, so they cannot be paired: "
                + ", ".join(f"{r.run_id} (sweep {r.sweep})" for r in duplicated.itertuples())
                + "; select one sweep first"
            )
    return first.merge(second, on=list(keys), suffixes=("_t", "_u"))


def pairs(runs: pd.DataFrame, keys: Sequence[str] = PAIR_COLUMNS) -> pd.DataFrame:
    """Finished tied runs matched with their finished untied partners on ``keys`` (:func:`match`:
    columns suffixed _t for tied, _u for untied). The one tied/untied pairing of the package."""
    finished = runs[runs["status"] == "finished"]
    return match(finished[finished["tie"].eq(True)], finished[finished["tie"].eq(False)], keys)


def unpaired(runs: pd.DataFrame, paired: pd.DataFrame) -> list[str]:
    """Why each run of ``runs`` is in no pair of ``paired`` (from :func:`pairs`)."""
    ids = set(paired["run_id_t"]) | set(paired["run_id_u"])
    notes = []
    for _, run in runs[~runs["run_id"].isin(ids)].iterrows():
        label = run["name"] or run["run_id"]
        if run["status"] != "finished" or pd.isna(run["tie"]):
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
    out = pd.DataFrame(
        {
            **{c: both[c] for c in PAIR_COLUMNS},
            "tied": both[f"{value}_t"],
            "untied": both[f"{value}_u"],
            "diff": both[f"{value}_t"] - both[f"{value}_u"],
            "tied_run_id": both["run_id_t"],
            "untied_run_id": both["run_id_u"],
        }
    )
    out = out.sort_values(PAIR_COLUMNS).reset_index(drop=True)
    out.attrs.update(unpaired=unpaired(runs, both), value=value)
    return out


def summarize_differences(pairs: pd.DataFrame) -> pd.DataFrame:
    """Mean paired difference (tied − untied) over seeds with its t CI, per data/size/variant/init
    std."""
    return aggregate(pairs, CELL, "diff")


# ------------------------------------------------------------------------ with evaluation noise
def bootstrap_mean(d: np.ndarray, n_boot: int = N_BOOT, seed: int = 0) -> tuple[float, float, str]:
    """CONFIDENCE percentile interval of the mean of ``d`` (seeds x windows): windows resampled
    jointly for all seeds, seeds resampled too when there are at least MIN_SEEDS."""
    rng = np.random.default_rng(seed)
    n_seeds, n_windows = d.shape
    per_seed = d[:, rng.integers(0, n_windows, (n_boot, n_windows))].mean(axis=2)  # seeds x boot
    if n_seeds >= MIN_SEEDS:
        pick = rng.integers(0, n_seeds, (n_boot, n_seeds))
        boot = per_seed[pick, np.arange(n_boot)[:, None]].mean(axis=1)
        method = f"bootstrap over {n_seeds} seeds x {n_windows} windows"
    else:
        boot = per_seed.mean(axis=0)
        seeds = f"{n_seeds} seed{'s' * (n_seeds > 1)}"
        method = f"bootstrap over {n_windows} windows only ({seeds}: seed noise not included)"
    alpha = (1 - CONFIDENCE) / 2
    return float(np.quantile(boot, alpha)), float(np.quantile(boot, 1 - alpha)), method


def _side_windows(pairs: pd.DataFrame, suffix: str, split: str, step_col: str) -> list:
    """The window losses of one side of ``pairs`` (suffix _t or _u)."""
    side = pairs.rename(columns=lambda c: c.removesuffix(suffix))
    return [window_losses(run, split, step_col) for _, run in side.iterrows()]


def paired_interval(pairs: pd.DataFrame, point: str) -> dict:
    """Mean difference _t − _u of one cell's pairs at one comparison point (POINTS), with its
    interval: window bootstrap when every run has window losses, else t over seeds."""
    col, split, step_col = POINTS[point]
    diffs = (pairs[f"{col}_t"] - pairs[f"{col}_u"]).astype(float)
    n = len(pairs)
    t_low, t_high = t_interval(diffs.mean(), diffs.sem() if n > 1 else np.nan, n)
    out = {
        "n_seeds": n,
        "diff": diffs.mean(),
        "t_low": float(t_low[0]),
        "t_high": float(t_high[0]),
        "seed_diffs": diffs.tolist(),
    }
    tied, untied = (_side_windows(pairs, s, split, step_col) for s in ("_t", "_u"))
    if n and all(
        a is not None and b is not None and len(a) == len(b) == len(tied[0])
        for a, b in zip(tied, untied, strict=True)
    ):
        d = np.stack(tied) - np.stack(untied)
        low, high, method = bootstrap_mean(d)
        out.update(diff=float(d.mean()), low=low, high=high, n_windows=d.shape[1], method=method)
    else:
        out.update(
            low=out["t_low"],
            high=out["t_high"],
            n_windows=0,
            method=f"{CONFIDENCE:.0%} t over seeds of summary values "
            "(no window losses: evaluation noise not included)",
        )
    return out


def paired_table(runs: pd.DataFrame, points: Sequence[str] = ("final", "best")) -> pd.DataFrame:
    """Per data/size/variant/init std and comparison point ("final": test loss of the final
    weights; "best": test loss of the weights of the best validation step; "final_val"): the
    mean paired difference tied − untied, its interval (``low``, ``high``, ``method``), the
    t-interval over seeds (``t_low``, ``t_high``) and each seed's difference."""
    rows = [
        {**dict(zip(CELL, key, strict=True)), "point": point, **paired_interval(cell, point)}
        for key, cell in pairs(runs).groupby(CELL, dropna=False, sort=True)
        for point in points
    ]
    return pd.DataFrame(rows, columns=[*CELL, "point", *INTERVAL_COLUMNS])


def _without_lr(variant) -> str:
    return re.sub(r"(, )?optim\.lr=[^,]*", "", variant or "").strip(", ")


def best_lr_comparison(runs: pd.DataFrame) -> pd.DataFrame:
    """The classic comparison (Press & Wolf 2017; Inan et al. 2017): each arm at its OWN best
    learning rate (lowest mean best validation loss over its finished seeds), then tied − untied
    paired by seed at those rates, for the test loss at the best validation step (early
    stopping) and at the final step. One row per data/size/init std/other variant keys."""
    finished = runs[(runs["status"] == "finished") & runs["lr"].notna()]
    finished = finished.assign(base=finished["variant"].map(_without_lr))
    keys = ["data_id", "model", "init_std", "base"]
    rows = []
    for key, cell in finished.groupby(keys, dropna=False, sort=True):
        means = cell.groupby(["tie", "lr"])["best_val_loss"].agg(["mean", "count"]).reset_index()
        best = {
            tie: means[means["tie"] == tie].sort_values("mean").iloc[0]
            for tie in (True, False)
            if (means["tie"] == tie).any()
        }
        if len(best) < 2:
            continue
        at_best = cell["lr"] == cell["tie"].map({True: best[True]["lr"], False: best[False]["lr"]})
        cell_pairs = pairs(cell[at_best], [*keys, "seed"])
        rows += [
            {
                **dict(zip(keys, key, strict=True)),
                "point": point,
                "lr_tied": best[True]["lr"],
                "lr_untied": best[False]["lr"],
                "lrs": int(means["lr"].nunique()),
                "val_tied": best[True]["mean"],
                "val_untied": best[False]["mean"],
                **paired_interval(cell_pairs, point),
            }
            for point in ("best", "final")
        ]
    return pd.DataFrame(rows)


def markdown(table: pd.DataFrame) -> str:
    """A paired table as markdown, numbers rounded, the interval as one column."""
    shown = table.drop(columns=["seed_diffs", "t_low", "t_high"], errors="ignore").copy()
    shown["interval"] = [
        f"[{lo:+.3f}, {hi:+.3f}]"
        for lo, hi in zip(shown.pop("low"), shown.pop("high"), strict=True)
    ]
    return shown.round(4).to_markdown(index=False)
