"""Tied − untied, paired, with intervals that include evaluation noise.

A tied run and its untied partner share data, seed and body init (PAIR_COLUMNS), and every
evaluation covers the same fixed windows of a split, so window i is the same text in both: the
paired difference can be taken window by window. Its interval is a two-way bootstrap: seeds are
resampled, and windows are resampled jointly for all seeds (they are one evaluation set). With
fewer than 3 seeds resampling seeds says nothing, so the interval then covers the evaluation
windows only, and says so. Neighbouring windows of one text are not independent: the window
bootstrap is, if anything, narrow. Runs without window losses fall back to their summary values
(a t-interval over seeds, evaluation noise not included).
"""

from __future__ import annotations

import itertools
import re
import textwrap
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import EngFormatter
from scipy import stats

from tiedvsuntied import results as R
from tiedvsuntied.analysis import CONFIDENCE, PAIR_COLUMNS
from tiedvsuntied.figures.style import (
    REF_COLOR,
    REGISTRY,
    TIE_COLOR,
    Output,
    _figure,
    _init_label,
    _legend,
    _mean_line,
    _note,
    _run_label,
    figure,
)

N_BOOT = 4000
MIN_SEEDS = 3  # below this: no resampling of seeds, no t-interval drawn as a band
CELL = ["data_id", "model", "variant", "init_std"]
# where each comparison point reads its numbers: (summary column, split, step of the windows)
POINTS = {
    "final": ("test_loss", "test", "step"),
    "best": ("test_loss_at_best", "test", "best_step"),
    "final_val": ("final_val_loss", "val", "step"),
}


def window_losses(run: pd.Series, split: str, step_col: str) -> np.ndarray | None:
    """The per-window losses of ``split`` at the run's ``step_col`` step, or None."""
    step = run.get(step_col)
    if not run.get("path") or pd.isna(step):
        return None
    path = Path(run["path"], "probes", f"step_{int(step):07d}.npz")
    if not path.exists():
        return None
    with np.load(path) as z:
        key = f"{split}_window_loss"
        return np.asarray(z[key], dtype=np.float64) if key in z.files else None


def bootstrap_mean(d: np.ndarray, n_boot: int = N_BOOT, seed: int = 0) -> tuple[float, float, str]:
    """CONFIDENCE percentile interval of the mean of ``d`` (seeds x windows): windows resampled
    jointly for all seeds, seeds resampled too when there are at least MIN_SEEDS."""
    rng = np.random.default_rng(seed)
    n_seeds, n_windows = d.shape
    per_seed = d[:, rng.integers(0, n_windows, (n_boot, n_windows))].mean(axis=2)  # (seeds, n_boot)
    if n_seeds >= MIN_SEEDS:
        pick = rng.integers(0, n_seeds, (n_boot, n_seeds))
        boot = per_seed[pick, np.arange(n_boot)[:, None]].mean(axis=1)
        method = f"bootstrap over {n_seeds} seeds x {n_windows} windows"
    else:
        boot = per_seed.mean(axis=0)
        method = f"bootstrap over {n_windows} windows only ({n_seeds} seed{'s' * (n_seeds > 1)}: seed noise not included)"
    alpha = (1 - CONFIDENCE) / 2
    return float(np.quantile(boot, alpha)), float(np.quantile(boot, 1 - alpha)), method


def _pairs(runs: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    """Finished tied/untied runs matched on ``keys``: one row per pair, columns suffixed _t / _u."""
    ok = runs[runs["status"] == "finished"]
    tied, untied = ok[ok["tie"] == True], ok[ok["tie"] == False]  # noqa: E712 (nullable booleans)
    return tied.merge(untied, on=list(keys), suffixes=("_t", "_u"))


def _interval(pairs: pd.DataFrame, point: str) -> dict:
    """Mean paired difference of one cell at one comparison point, with its intervals."""
    col, split, step_col = POINTS[point]
    diffs = (pairs[f"{col}_t"] - pairs[f"{col}_u"]).astype(float)
    n = len(pairs)
    half = stats.t.ppf((1 + CONFIDENCE) / 2, n - 1) * diffs.std() / np.sqrt(n) if n > 1 else np.nan
    out = {
        "n_seeds": n,
        "diff": diffs.mean(),
        "t_low": diffs.mean() - half,
        "t_high": diffs.mean() + half,
        "seed_diffs": diffs.tolist(),
    }
    t = [window_losses(r, split, f"{step_col}_t") for _, r in _side(pairs, "_t").iterrows()]
    u = [window_losses(r, split, f"{step_col}_u") for _, r in _side(pairs, "_u").iterrows()]
    if n and all(
        a is not None and b is not None and len(a) == len(b) == len(t[0]) for a, b in zip(t, u)
    ):
        d = np.stack(t) - np.stack(u)
        low, high, method = bootstrap_mean(d)
        out.update(diff=float(d.mean()), low=low, high=high, n_windows=d.shape[1], method=method)
    else:
        out.update(
            low=out["t_low"],
            high=out["t_high"],
            n_windows=0,
            method=f"{CONFIDENCE:.0%} t over seeds of summary values (no window losses: evaluation noise not included)",
        )
    return out


def _side(pairs: pd.DataFrame, suffix: str) -> pd.DataFrame:
    """One side of the pairs with its own columns un-suffixed (path_t -> path, step_t -> step_t kept)."""
    return pairs.assign(path=pairs[f"path{suffix}"])


def paired_table(runs: pd.DataFrame, points: Sequence[str] = ("final", "best")) -> pd.DataFrame:
    """Per data/size/variant/init std and comparison point ("final": test loss of the final
    weights; "best": test loss of the weights of the best validation step; "final_val"): the
    mean paired difference tied − untied, its interval (``low``, ``high``, ``method``), the
    t-interval over seeds (``t_low``, ``t_high``) and each seed's difference."""
    pairs = _pairs(runs, PAIR_COLUMNS)
    rows = [
        {**dict(zip(CELL, key)), "point": point, **_interval(cell, point)}
        for key, cell in pairs.groupby(CELL, dropna=False, sort=True)
        for point in points
    ]
    return pd.DataFrame(
        rows,
        columns=[
            *CELL,
            "point",
            "n_seeds",
            "n_windows",
            "diff",
            "low",
            "high",
            "method",
            "t_low",
            "t_high",
            "seed_diffs",
        ],
    )


def best_lr_comparison(runs: pd.DataFrame) -> pd.DataFrame:
    """The classic comparison (Press & Wolf 2017; Inan et al. 2017): each arm at its OWN best
    learning rate (lowest mean best validation loss over its finished seeds), then tied − untied
    paired by seed at those rates, for the test loss at the best validation step (early
    stopping) and at the final step. One row per data/size/init std/other variant keys."""
    ok = runs[(runs["status"] == "finished") & runs["lr"].notna()]
    ok = ok.assign(
        base=ok["variant"]
        .fillna("")
        .map(lambda v: re.sub(r"(, )?optim\.lr=[^,]*", "", v).strip(", "))
    )
    keys = ["data_id", "model", "init_std", "base"]
    rows = []
    for key, cell in ok.groupby(keys, dropna=False, sort=True):
        means = cell.groupby(["tie", "lr"])["best_val_loss"].agg(["mean", "count"]).reset_index()
        best = {
            t: means[means["tie"] == t].sort_values("mean").iloc[0]
            for t in (True, False)
            if (means["tie"] == t).any()
        }
        if len(best) < 2:
            continue
        chosen = cell[
            ((cell["tie"] == True) & (cell["lr"] == best[True]["lr"]))  # noqa: E712
            | ((cell["tie"] == False) & (cell["lr"] == best[False]["lr"]))
        ]  # noqa: E712
        pairs = _pairs(chosen, ["data_id", "model", "init_std", "base", "seed"])
        for point in ("best", "final"):
            rows.append(
                {
                    **dict(zip(keys, key)),
                    "point": point,
                    "lr_tied": best[True]["lr"],
                    "lr_untied": best[False]["lr"],
                    "lrs": int(means["lr"].nunique()),
                    "val_tied": best[True]["mean"],
                    "val_untied": best[False]["mean"],
                    **_interval(pairs, point),
                }
            )
    return pd.DataFrame(rows)


def markdown(table: pd.DataFrame) -> str:
    """A paired table as markdown, numbers rounded, the interval as one column."""
    t = table.drop(columns=["seed_diffs", "t_low", "t_high"], errors="ignore").copy()
    t["interval"] = [f"[{lo:+.3f}, {hi:+.3f}]" for lo, hi in zip(t.pop("low"), t.pop("high"))]
    return t.round(4).to_markdown(index=False)


# ----------------------------------------------------------------------------- outputs
def _cell_label(row: pd.Series, several_models: bool) -> str:
    return _init_label(row["setting"], prefix="") + (f"\n{row['model']}" if several_models else "")


@figure("fig6_paired_difference", "tied − untied test loss, paired, with bootstrap intervals")
def fig_paired_difference(runs: pd.DataFrame) -> Figure:
    """The study's headline: tied − untied test loss per init std (and size), paired by seed, at
    the final weights and at the best validation step; mean with its interval (seeds x windows,
    or windows only below MIN_SEEDS seeds), every seed's own difference as a small dot."""
    table = paired_table(runs, ("final", "best"))
    fig, axes = _figure(1, 2, 2.4, sharey=True)
    paired_ids = set(_pairs(runs, PAIR_COLUMNS)[["run_id_t", "run_id_u"]].stack())
    fig.skipped += [
        f"{_run_label(r)}: {r['status']}, no partner"
        if r["status"] == "finished"
        else f"{_run_label(r)}: {r['status']}"
        for _, r in runs[~runs["run_id"].isin(paired_ids)].iterrows()
    ]
    table = table.assign(
        setting=table["init_std"]
        .astype("string")
        .where(
            table["variant"].fillna("") == "",
            table["init_std"].astype("string") + " | " + table["variant"].fillna(""),
        )
    )
    several = table["model"].nunique() > 1
    for ax, point, title in zip(
        axes[0], ("final", "best"), ("final weights", "best validation step (early stopping)")
    ):
        t = table[table["point"] == point].reset_index(drop=True)
        ax.set_title(f"test loss, {title}")
        ax.axhline(0, color=REF_COLOR, ls="--", lw=1)
        if t.empty:
            _note(ax, "no tied/untied pair finished")
            continue
        for x, row in t.iterrows():
            seeds = np.asarray(row["seed_diffs"], dtype=float)
            ax.plot(
                x + np.linspace(-0.12, 0.12, len(seeds)) * (len(seeds) > 1),
                seeds,
                ls="none",
                marker=".",
                color="#777777",
                ms=4,
                zorder=2,
            )
            full = row["n_seeds"] >= MIN_SEEDS and row["n_windows"] > 0
            ax.errorbar(
                x,
                row["diff"],
                yerr=[[row["diff"] - row["low"]], [row["high"] - row["diff"]]],
                marker="o",
                color="black",
                mfc="black" if full else "white",
                capsize=3,
                ms=5,
                zorder=3,
            )
        ax.set_xticks(range(len(t)), [_cell_label(r, several) for _, r in t.iterrows()])
        ax.set_xlim(-0.6, len(t) - 0.4)
        ax.grid(axis="x", visible=False)
        fig.flagged += [
            f"{_init_label(r['setting'], short=True)} ({r['model']}, {point}): {r['method']}"
            for _, r in t.iterrows()
        ]
    axes[0, 0].set_ylabel("tied − untied (nats)")
    _legend(
        fig,
        [
            Line2D(
                [],
                [],
                color="black",
                marker="o",
                label=f"mean, {CONFIDENCE:.0%} bootstrap over seeds × windows",
            ),
            Line2D(
                [],
                [],
                color="black",
                marker="o",
                mfc="white",
                label=f"fewer than {MIN_SEEDS} seeds: windows only",
            ),
            Line2D([], [], color="#777777", marker=".", ls="none", label="one seed"),
        ],
        3,
    )
    return fig


# ----------------------------------------------------------------------------- arms vs the tied arm
ARM_KEYS = [
    "data_id",
    "model",
    "init_std",
    "seed",
]  # an arm's run and its tied reference share these
ARM_COLORS = [
    "#009E73",
    "#CC79A7",
    "#E69F00",
    "#56B4E9",
    "#000000",
    "#F0E442",
]  # Okabe-Ito, after the tie colours


def _arm(run: pd.Series) -> str:
    """'tied', 'untied' or 'untied at step N', then the run's other variant keys (head init,
    scales) except those at a value that changes nothing (None: a tied run's head_init_std;
    records.NEUTRAL: logit and embedding scale 1)."""
    parts = [p.strip().partition("=") for p in str(run["variant"] or "").split(",") if p.strip()]
    rest = ", ".join(
        f"{k.split('.')[-1].replace('_', ' ')}: {v}"
        for k, _, v in parts
        if k != "untie_at" and v != "None" and str(R.NEUTRAL.get(k)) != v
    )
    base = (
        f"untied at step {int(run['untie_step'])}"
        if pd.notna(run["untie_step"])
        else ("tied" if run["tie"] else "untied")
    )
    return base + (
        f" ({rest.replace('inv_sqrt_d', 'd^-1/2').replace('sqrt_d', 'd^1/2')})" if rest else ""
    )


def _with_arms(runs: pd.DataFrame) -> tuple[pd.DataFrame, str | None]:
    """Finished runs with an ``arm`` column, and the reference arm: plain 'tied', else the tied
    runs' one arm (None when there is no tied arm, or several and none plain)."""
    ok = runs[runs["status"] == "finished"]
    ok = (
        ok.assign(arm=[_arm(r) for _, r in ok.iterrows()])
        if len(ok)
        else ok.assign(arm=pd.Series(dtype=str))
    )
    tied = ok.loc[(ok["tie"] == True) & ok["untie_step"].isna(), "arm"].unique()  # noqa: E712
    return ok, ("tied" if "tied" in tied else tied[0] if len(tied) == 1 else None)


def arms_table(runs: pd.DataFrame, points: Sequence[str] = ("final", "best")) -> pd.DataFrame:
    """Every arm of a sweep (tie x untie_at x head init, scales ...) against the tied arm of the
    same seed, data, size and init std: mean difference arm − tied with its interval (as in
    :func:`paired_table`), and for scheduled untying, ``share``: the part of the untied arm's
    difference that untying at that step reached (1: all of it; NaN without an untied arm)."""
    ok, ref = _with_arms(runs)
    cols = [
        "model",
        "init_std",
        "data_id",
        "arm",
        "reference",
        "point",
        "n_seeds",
        "n_windows",
        "diff",
        "low",
        "high",
        "method",
        "t_low",
        "t_high",
        "seed_diffs",
        "share",
    ]
    if ref is None:
        return pd.DataFrame(columns=cols)
    rows = []
    for (arm, *_), cell in ok[ok["arm"] != ref].groupby(
        ["arm", "model", "init_std", "data_id"], sort=True
    ):
        pairs = cell.merge(ok[ok["arm"] == ref], on=ARM_KEYS, suffixes=("_t", "_u"))
        rows += [
            {
                "model": cell["model"].iloc[0],
                "init_std": cell["init_std"].iloc[0],
                "data_id": cell["data_id"].iloc[0],
                "arm": arm,
                "reference": ref,
                "point": point,
                **_interval(pairs, point),
            }
            for point in points
            if len(pairs)
        ]
    table = pd.DataFrame(rows, columns=cols[:-1])
    untied = table[table["arm"] == "untied"].set_index(["model", "init_std", "data_id", "point"])[
        "diff"
    ]
    full = table.join(untied.rename("untied_diff"), on=["model", "init_std", "data_id", "point"])
    scheduled = table["arm"].str.startswith("untied at step")
    return table.assign(share=(full["diff"] / full["untied_diff"]).where(scheduled))


def _arm_curves(ax, runs: pd.DataFrame, history: pd.DataFrame, colors: dict) -> None:
    """Validation loss per arm (mean over seeds, t-band from MIN_BAND_SEEDS), each switch marked."""
    for arm, color in colors.items():
        ids = runs.loc[runs["arm"] == arm, "run_id"]
        h = history[history["run_id"].isin(ids) & history["val/loss"].notna()]
        _mean_line(ax, h.assign(arm=arm), "val/loss", True, ["arm"], 0.2, color=color, label=arm)
        steps = history[history["run_id"].isin(ids)].groupby("step")["tokens"].mean().dropna()
        for step in runs.loc[runs["arm"] == arm, "untie_step"].dropna().unique():
            if len(steps):  # the switch need not be a logged step
                ax.axvline(
                    np.interp(step, steps.index, steps.to_numpy()), color=color, ls=":", lw=1
                )
    late = history.loc[
        history["run_id"].isin(runs["run_id"]) & (history["step"] >= history["step"].max() / 4),
        "val/loss",
    ].dropna()
    if len(late):  # the first quarter (from ln V down) would flatten the part where arms differ
        pad = 0.1 * (late.max() - late.min()) + 1e-3
        ax.set_ylim(late.min() - pad, late.max() + pad)
    ax.xaxis.set_major_formatter(EngFormatter(sep=""))
    ax.set_xlabel("training tokens")
    ax.set_ylabel("validation loss (nats)")


@figure(
    "fig10_arms",
    "every arm (scheduled untying, head init ...) against the tied arm, paired",
    uses=("runs", "history"),
)
def fig_arms(runs: pd.DataFrame, history: pd.DataFrame) -> Figure:
    """Sweeps with more than two arms (tied, untied, untie_at, untied head inits): (a) validation
    loss per arm over training, the switch of scheduled untying dotted; (b) test loss of the
    final weights, arm − tied, paired by seed, with :func:`arms_table`'s interval, each seed as a
    dot. One cell (size, init std, data); runs of the others are listed as not shown."""
    fig, axes = _figure(1, 2, 2.6)
    ok, ref = _with_arms(runs)
    fig.skipped += [
        f"{_run_label(r)}: {r['status']}" for _, r in runs[runs["status"] != "finished"].iterrows()
    ]
    if ref is None or ok.empty:
        for ax in axes[0]:
            _note(
                ax,
                "needs a tied arm to compare with: plain tied runs, or tied runs of one variant; here: "
                + (", ".join(sorted(ok.loc[ok["tie"] == True, "arm"].unique())) or "none"),
            )  # noqa: E712
        return fig
    first = ok.sort_values(["model", "init_std"]).iloc[0]
    cell = ok[(ok["model"] == first["model"]) & (ok["init_std"] == first["init_std"])]
    fig.skipped += [
        f"{_run_label(r)}: another size or init std (one cell per figure)"
        for _, r in ok.drop(cell.index).iterrows()
    ]
    others = sorted(
        set(cell["arm"]) - {ref, "untied"}, key=lambda a: (not a.startswith("untied at"), a)
    )
    colors = {
        ref: TIE_COLOR[True],
        **dict(zip(others, itertools.cycle(ARM_COLORS))),
        **({"untied": TIE_COLOR[False]} if "untied" in set(cell["arm"]) else {}),
    }
    _arm_curves(axes[0, 0], cell, history, colors)
    axes[0, 0].set_title(f"{first['model']}, {_init_label(first['init_std'], short=True)}")
    ax, table = axes[0, 1], arms_table(cell, ("final",))
    ax.axhline(0, color=REF_COLOR, ls="--", lw=1)
    for x, row in (
        table.set_index("arm")
        .reindex([a for a in colors if a != ref])
        .dropna(subset=["diff"])
        .reset_index()
        .iterrows()
    ):
        seeds = np.asarray(row["seed_diffs"], dtype=float)
        ax.plot(
            x + np.linspace(-0.12, 0.12, len(seeds)) * (len(seeds) > 1),
            seeds,
            ls="none",
            marker=".",
            color="#777777",
            ms=4,
        )
        ax.errorbar(
            x,
            row["diff"],
            yerr=[[row["diff"] - row["low"]], [row["high"] - row["diff"]]],
            marker="o",
            color=colors[row["arm"]],
            capsize=3,
            ms=5,
        )
        fig.flagged.append(f"{row['arm']}: {row['method']}")
    labels = [a for a in colors if a != ref and a in set(table["arm"])]
    if len(labels) > 4:  # long names would overlap: the colours name the arms, as in the legend
        ax.set_xticks(range(len(labels)), [""] * len(labels))
        ax.set_xlabel("arm (colour as in the legend)")
    else:
        ax.set_xticks(range(len(labels)), ["\n".join(textwrap.wrap(a, 16)) for a in labels])
    ax.set_xlim(-0.6, len(labels) - 0.4)
    ax.set_ylabel(f"test loss, final weights: arm − {ref} (nats)")
    ax.grid(axis="x", visible=False)
    _legend(
        fig,
        [Line2D([], [], color=c, label=a) for a, c in colors.items()]
        + [Line2D([], [], color="#777777", marker=".", ls="none", label="one seed")],
        min(len(colors) + 1, 4),
    )
    return fig


@figure(
    "fig11_crossover",
    "tied − untied relative to the untied loss vs the embedding's share of parameters",
    mixed_data=True,
)
def fig_crossover(runs: pd.DataFrame) -> Figure:
    """Where tying stops paying: tied − untied test loss (final weights) as a percentage of the
    untied arm's, against the share of the tied model's parameters in its embedding, one point per
    vocabulary, size and init std (other variants are listed as not shown). A ratio because losses
    per token of different tokenizations are in different units; on one text both arms share the
    tokens-per-byte factor, so the ratio is the same per token and per byte."""
    fig, axes = _figure(1, 1, 2.8)
    ax = axes[0, 0]
    table = paired_table(runs[runs["variant"].fillna("") == ""], ("final",))
    fig.skipped += [
        f"{_run_label(r)}: variant {r['variant']} (only runs without one are compared)"
        for _, r in runs[runs["variant"].fillna("") != ""].iterrows()
    ]
    tied = runs[(runs["tie"] == True) & runs["params_total"].notna()]  # noqa: E712
    share = (
        (tied["params_embedding"] / tied["params_total"])
        .groupby([tied[c] for c in ("data_id", "model")])
        .first()
    )
    untied = runs[(runs["tie"] == False) & (runs["status"] == "finished")]  # noqa: E712
    base = untied.groupby(["data_id", "model", "init_std"])["test_loss"].mean()
    ax.axhline(0, color=REF_COLOR, ls="--", lw=1)
    for _, row in table.iterrows():
        key = (row["data_id"], row["model"])
        if key not in share.index or (*key, row["init_std"]) not in base.index:
            continue
        scale, x = 100 / base[(*key, row["init_std"])], 100 * share[key]
        vocab = runs.loc[runs["data_id"] == row["data_id"], "vocab_size"].iloc[0]
        full = row["n_seeds"] >= MIN_SEEDS and row["n_windows"] > 0
        ax.errorbar(
            x,
            row["diff"] * scale,
            yerr=[[(row["diff"] - row["low"]) * scale], [(row["high"] - row["diff"]) * scale]],
            marker="o",
            color="black",
            mfc="black" if full else "white",
            capsize=3,
            ms=5,
        )
        ax.annotate(
            f"V={vocab:,}, {row['model']}\n{_init_label(row['init_std'], short=True)}",
            (x, row["diff"] * scale),
            textcoords="offset points",
            xytext=(6, 4),
            fontsize=6,
        )
        fig.flagged.append(f"V={vocab}, {row['model']}, init {row['init_std']}: {row['method']}")
    if not ax.lines[1:]:
        _note(ax, "no finished tied/untied pair")
    ax.set_xlabel("embedding share of the tied model's parameters (%)")
    ax.set_ylabel("(tied − untied) / untied test loss (%)")
    ax.set_xlim(0, 100)
    _legend(
        fig,
        [
            Line2D(
                [],
                [],
                color="black",
                marker="o",
                label=f"mean, {CONFIDENCE:.0%} bootstrap over seeds × windows",
            ),
            Line2D(
                [],
                [],
                color="black",
                marker="o",
                mfc="white",
                label=f"< {MIN_SEEDS} seeds: windows only",
            ),
        ],
        1,
    )
    return fig


def write_tables(out_dir: str | Path, runs: pd.DataFrame) -> list[Path]:
    """``table_paired.md`` (every cell, final and best), ``table_classic.md`` (each arm at its
    own best learning rate) and ``table_arms.md`` (every arm against the tied one) in ``out_dir``."""
    classic, arms = best_lr_comparison(runs), arms_table(runs)
    texts = {
        "table_paired.md": markdown(paired_table(runs, ("final", "best", "final_val"))),
        "table_classic.md": markdown(classic)
        if len(classic)
        else "No learning-rate grid in these runs: no arm can be compared at its own best rate.",
        "table_arms.md": markdown(arms)
        if len(arms)
        else "No tied arm to compare the other arms with.",
    }
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    for name, text in texts.items():
        Path(out_dir, name).write_text(text + "\n")
    return [Path(out_dir, name) for name in texts]


REGISTRY["table_paired"] = Output(
    "tied − untied per cell, and at each arm's best lr (md)",
    lambda results, out_dir, formats: (write_tables(out_dir, results.runs), None),
)
