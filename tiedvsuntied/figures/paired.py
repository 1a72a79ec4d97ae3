"""Figures 6, 10 and 11: tied − untied, paired by seed, with the t-intervals over seeds of
:mod:`tiedvsuntied.analysis.stats` (which explains them); the tables are in :mod:`.tables`."""

from __future__ import annotations

import itertools
import textwrap

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from tiedvsuntied.analysis import stats
from tiedvsuntied.analysis.arms import arms_table, with_arms
from tiedvsuntied.analysis.stats import CONFIDENCE, MIN_INTERVAL_SEEDS
from tiedvsuntied.figures import style
from tiedvsuntied.figures.loss import set_x_axis
from tiedvsuntied.results.metrics import VAL_LOSS

ARM_COLORS = ["#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442"]  # Okabe-Ito
SEED_DOT = {"ls": "none", "marker": ".", "color": "#777777", "ms": 4}


def _difference(ax, x: float, row: pd.Series, scale: float = 1.0, seeds: bool = True, **kw):
    """One cell's mean difference with its interval (``low``, ``high``), times ``scale``; the mean
    alone (open) where there is no interval (one seed); with ``seeds``, each seed's beside it."""
    if seeds:
        values = np.asarray(row["seed_diffs"], dtype=float)
        ax.plot(x + np.linspace(-0.12, 0.12, len(values)) * (len(values) > 1), values, **SEED_DOT)
    if pd.isna(row["low"]):
        ax.plot(x, row["diff"] * scale, marker="o", ms=5, ls="none", **{**kw, "mfc": "white"})
        return
    yerr = [[(row["diff"] - row["low"]) * scale], [(row["high"] - row["diff"]) * scale]]
    ax.errorbar(x, row["diff"] * scale, yerr=yerr, marker="o", capsize=3, ms=5, **kw)


def _interval_handles(table: pd.DataFrame) -> list:
    """Legend entries for what ``table``'s rows draw: the mean with its interval, and (fewer
    than MIN_INTERVAL_SEEDS seeds) the mean alone, open."""
    handles = []
    if table["low"].notna().any():
        label = f"mean, {CONFIDENCE:.0%} t-interval over seeds (paired by seed)"
        handles.append(style.handle(label, "black", marker="o"))
    if (table["low"].isna() & table["diff"].notna()).any():
        label = f"fewer than {MIN_INTERVAL_SEEDS} seeds: mean only, no interval"
        handles.append(style.handle(label, "black", marker="o", mfc="white", ls="none"))
    return handles


def _floor_text(runs: pd.DataFrame) -> str:
    """The noise floor of test loss (final weights) in words, for a caption."""
    floors = stats.noise_floor(runs)
    if floors.empty:
        return "noise floor not measured (no replicate runs)"
    n = int(floors["n"].sum())
    return (
        "noise floor (mean |replicate 0 − replicate k| of one config at another thread count, "
        f"shaded ±) {style.span(floors['floor_final'], '{:.3f}')} nats, "
        f"from {n} re-run{'s' * (n != 1)} of a config"
    )


def _paired_panel(fig: Figure, ax, cells: pd.DataFrame, several: bool, point: str) -> None:
    ax.axhline(0, color=style.REF_COLOR, ls="--", lw=1)
    for x, row in cells.iterrows():
        _difference(ax, x, row, color="black", zorder=3)
        # both arms' means, right of the seed dots (±0.12): 0.5 nats means little at 18
        means = f"tied {row['mean_t']:.2f}\nuntied {row['mean_u']:.2f}"
        ax.annotate(means, (x + 0.15, row["diff"]), va="center", fontsize=6, color="#444444")
        if pd.notna(floor := row["floor"]):
            band = {"color": style.REF_COLOR, "alpha": 0.2, "lw": 0}
            ax.fill_between([x - 0.3, x + 0.3], -floor, floor, **band)
        if row["n_seeds"] < cells["n_seeds"].max():  # the caption gives the common n
            label = f"{style.init_label(row['setting'], short=True)} ({row['model']}, {point})"
            fig.flagged.append(f"{label}: {row['method']}")
    labels = [
        style.init_label(row["setting"], prefix="", widths=[row["n_embd"]])
        + (f"\n{row['model']}" if several else "")
        for _, row in cells.iterrows()
    ]
    ax.set_xticks(range(len(cells)), labels)
    ax.set_xlim(-0.6, len(cells) - 0.1)  # room for the arms' means right of the last point
    ax.grid(axis="x", visible=False)


def _panels(runs: pd.DataFrame) -> list[tuple[str, str]]:
    """(point, title) of each panel: final weights, and the best validation step unless every
    paired run's best step is its last (then both are one set of weights: one panel)."""
    both = stats.pairs(runs)
    best, last = both[["best_step_t", "best_step_u"]], both[["step_t", "step_u"]]
    final = f"test loss, final weights (step {style.span(last.stack(), '{:.0f}')})"
    if len(both) and (best.to_numpy() == last.to_numpy()).all():
        return [("final", final + " = best validation step")]
    best_steps = style.span(best.stack(), "{:.0f}")
    return [("final", final), ("best", f"test loss, best validation step ({best_steps})")]


def _unpaired(run: pd.Series) -> str:
    if stats.is_replicate(run):
        return f"replicate {run['replicate']} (noise floor only)"
    return run["status"] + (", no partner" if run["status"] == "finished" else "")


@style.figure(
    "fig6_paired_difference", "tied − untied test loss, paired, with t-intervals over seeds"
)
def fig_paired_difference(runs: pd.DataFrame) -> Figure:
    """The study's headline: tied − untied test loss per init std (and size), paired by seed,
    at the final weights and at the best validation step (docs/figures.md, figure 6)."""
    panels = _panels(runs)
    table = stats.paired_table(runs, [point for point, _ in panels])
    fig, axes = style.new_figure(1, len(panels), 2.4, width=7.0, sharey=True)
    paired_ids = set(stats.pairs(runs)[["run_id_t", "run_id_u"]].stack())
    fig.drawn = runs[runs["run_id"].isin(paired_ids)]
    style.leave_out(fig, runs[~runs["run_id"].isin(paired_ids)], _unpaired)
    if table.empty:
        return style.nothing_to_draw(fig, "no tied/untied pair finished")
    seeds = table["n_seeds"]
    below = seeds.min() < MIN_INTERVAL_SEEDS
    fig.captions.append(
        f"sign: {stats.PAIRED_SIGN}, paired by seed: mean and "
        f"{CONFIDENCE:.0%} t-interval over "
        f"n = {style.span(seeds)} seed{'' if seeds.max() == 1 else 's'} per cell"
        + (f" (below {MIN_INTERVAL_SEEDS} seeds: the mean only)" if below else "")
        + "; beside it both arms' mean test loss (nats); "
        + _floor_text(runs)
    )
    widths = runs.groupby("model")["n_embd"].first()
    table = style.with_setting(table).assign(n_embd=table["model"].map(widths))
    rank = {v: k for k, v in enumerate([*style.model_order(runs), *style.init_order(runs)])}
    table = table.sort_values(  # sizes small to large, init std large to small within each
        ["model", "setting"], key=lambda col: col.map(rank), kind="stable"
    )
    several = table["model"].nunique() > 1
    for ax, (point, title) in zip(axes[0], panels, strict=True):
        ax.set_title(title)
        cells = table[table["point"] == point].reset_index(drop=True)
        _paired_panel(fig, ax, cells, several, point)
        ax.set_xlabel("init std" + (" and size" if several else f" ({table['model'].iloc[0]})"))
    axes[0, 0].set_ylabel("tied − untied (nats)")
    handles = [*_interval_handles(table), style.handle("one seed", **SEED_DOT)]
    if table["floor"].notna().any():
        handles.append(Patch(color=style.REF_COLOR, alpha=0.3, label="noise floor (±)"))
    style.legend(fig, handles, 4)
    return fig


# ----------------------------------------------------------------------------- arms vs the tied arm
def _arm_curves(ax, runs: pd.DataFrame, history: pd.DataFrame, colors: dict) -> None:
    """Validation loss per arm (mean over seeds, t-band from MIN_BAND_SEEDS), each switch marked."""
    for arm, color in colors.items():
        ids = runs.loc[runs["arm"] == arm, "run_id"]
        logged = history[history["run_id"].isin(ids) & history[VAL_LOSS].notna()]
        line = {"color": color, "label": arm}
        style.mean_line(ax, logged.assign(arm=arm), VAL_LOSS, True, ["arm"], 0.2, **line)
        steps = history[history["run_id"].isin(ids)].groupby("step")["tokens"].mean().dropna()
        for step in runs.loc[runs["arm"] == arm, "untie_step"].dropna().unique():
            if len(steps):  # the switch need not be a logged step
                tokens = np.interp(step, steps.index, steps.to_numpy())
                ax.axvline(tokens, color=color, ls=":", lw=1)
    late = history["run_id"].isin(runs["run_id"]) & (history["step"] >= history["step"].max() / 4)
    if len(late := history.loc[late, VAL_LOSS].dropna()):
        # the first quarter (from ln V down) would flatten the part where arms differ
        pad = 0.1 * (late.max() - late.min()) + 1e-3
        ax.set_ylim(late.min() - pad, late.max() + pad)
    set_x_axis(ax, "tokens", log=False, last_row=True)
    ax.set_ylabel("validation loss (nats)")


def _arm_differences(fig: Figure, ax, cell: pd.DataFrame, colors: dict, ref: str) -> None:
    """Test loss of the final weights, the tied reference − each arm, one column per arm: the
    sign of figure 6 (tied − untied, > 0: tying costs), so the untied arm is figure 6's point."""
    table = arms_table(cell, ("final",))  # reference − arm (ARMS_SIGN), as figure 6
    ax.axhline(0, color=style.REF_COLOR, ls="--", lw=1)
    shown = table.set_index("arm").reindex([a for a in colors if a != ref])
    for x, row in shown.dropna(subset=["diff"]).reset_index().iterrows():
        _difference(ax, x, row, color=colors[row["arm"]])
        fig.flagged.append(f"{row['arm']}: {row['method']}")
    labels = [a for a in colors if a != ref and a in set(table["arm"])]
    # long names would overlap: then the colours name the arms, as in the legend
    ticks = [""] * len(labels) if len(labels) > 4 else [textwrap.fill(a, 16) for a in labels]
    ax.set_xticks(range(len(labels)), ticks)
    ax.set_xlabel("arm (colour as in the legend)" if len(labels) > 4 else "")
    ax.set_xlim(-0.6, len(labels) - 0.4)
    ax.set_ylabel(f"test loss, final weights: {ref} − arm (nats)")
    fig.captions.append(
        f"sign: {ref} − arm, as tied − untied in figure 6 (> 0: the arm beats {ref}; the untied "
        "arm's point is figure 6's tied − untied)"
    )
    ax.grid(axis="x", visible=False)


def _arm_colors(arms: set, ref: str) -> dict:
    """The reference in the tied colour, untied in the untied one, scheduled untying first."""
    others = sorted(arms - {ref, "untied"}, key=lambda a: (not a.startswith("untied at"), a))
    return {
        ref: style.TIE_COLOR[True],
        **dict(zip(others, itertools.cycle(ARM_COLORS))),
        **({"untied": style.TIE_COLOR[False]} if "untied" in arms else {}),
    }


@style.figure(
    "fig10_arms", "every arm (scheduled untying, head init ...) against the tied arm, paired"
)
def fig_arms(runs: pd.DataFrame, history: pd.DataFrame) -> Figure:
    """Sweeps with more than two arms (untie_at, untied head inits): validation loss per arm,
    and tied − arm test loss paired by seed, for one cell (docs/figures.md, figure 10)."""
    fig, axes = style.new_figure(1, 2, 2.6)
    finished, ref = with_arms(runs)
    style.leave_out(fig, runs[runs["status"] != "finished"], lambda run: run["status"])
    if ref is None or finished.empty:
        tied_arms = ", ".join(sorted(finished.loc[finished["tie"].eq(True), "arm"].unique()))
        needs = "needs a tied arm to compare with: plain tied runs, or tied runs of one variant"
        return style.nothing_to_draw(fig, f"{needs}; here: {tied_arms or 'none'}")
    keys = ["model", "init_std"]
    first = finished.sort_values(keys).iloc[0]
    fig.drawn = cell = finished[finished[keys].eq(first[keys]).all(axis=1)]
    other = "another size or init std (one cell per figure)"
    style.leave_out(fig, finished.drop(cell.index), other)
    if set(cell["arm"]) == {ref}:
        return style.nothing_to_draw(fig, f"only the {ref} arm finished: no other arm to compare")
    colors = _arm_colors(set(cell["arm"]), ref)
    _arm_curves(axes[0, 0], cell, history, colors)
    init = style.init_label(first["init_std"], short=True, widths=[first["n_embd"]])
    axes[0, 0].set_title(f"{first['model']}, {init}")
    _arm_differences(fig, axes[0, 1], cell, colors, ref)
    handles = [style.handle(a, c) for a, c in colors.items()]
    style.legend(fig, [*handles, style.handle("one seed", **SEED_DOT)], 4)
    return fig


# ----------------------------------------------------------------------------- across vocabularies
def _crossover_points(fig: Figure, ax, runs: pd.DataFrame, table: pd.DataFrame) -> None:
    """Each cell's difference as a percentage of its untied mean, at its embedding share."""
    tied = runs[runs["tie"].eq(True) & runs["params_total"].notna()]
    share = tied["params_embedding"] / tied["params_total"]
    share = share.groupby([tied["data_id"], tied["model"]]).first()
    untied = runs[runs["tie"].eq(False) & (runs["status"] == "finished")]
    base = untied.groupby(["data_id", "model", "init_std"])["test_loss"].mean()
    for _, row in table.iterrows():
        key = (row["data_id"], row["model"])
        if key not in share.index or (*key, row["init_std"]) not in base.index:
            continue
        scale, x = 100 / base[(*key, row["init_std"])], 100 * share[key]
        vocab = runs.loc[runs["data_id"] == row["data_id"], "vocab_size"].iloc[0]
        _difference(ax, x, row, scale, seeds=False, color="black")
        widths = tied.loc[tied["model"] == row["model"], "n_embd"]
        init = style.init_label(row["init_std"], short=True, widths=widths)
        label = f"V={vocab:,}, {row['model']}\n{init}"
        point = (x, row["diff"] * scale)
        ax.annotate(label, point, textcoords="offset points", xytext=(6, 4), fontsize=6)
        fig.flagged.append(f"V={vocab}, {row['model']}, init {row['init_std']}: {row['method']}")


@style.figure(
    "fig11_crossover",
    "tied − untied relative to the untied loss vs the embedding's share of parameters",
    mixed_data=True,
)
def fig_crossover(runs: pd.DataFrame) -> Figure:
    """Where tying stops paying: (tied − untied) / untied test loss against the embedding's
    share of the tied model's parameters. A ratio because losses per token of different
    tokenizations are in different units; on one text both arms share the tokens-per-byte
    factor, so the ratio is the same per token and per byte."""
    fig, axes = style.new_figure(1, 1, 2.8)
    ax, plain = axes[0, 0], runs["variant"].fillna("") == ""
    table = stats.paired_table(runs[plain], ("final",))
    compared = "(only runs without one are compared)"
    style.leave_out(fig, runs[~plain], lambda run: f"variant {run['variant']} {compared}")
    ax.axhline(0, color=style.REF_COLOR, ls="--", lw=1)
    _crossover_points(fig, ax, runs, table)
    if not ax.lines[1:]:
        return style.nothing_to_draw(fig, "no finished tied/untied pair")
    fig.drawn = runs[plain]
    ax.set_xlabel("embedding share of the tied model's parameters (%)")
    ax.set_ylabel("(tied − untied) / untied test loss (%)")
    fig.captions.append(f"sign: {stats.PAIRED_SIGN}, as a percentage of the untied mean")
    ax.set_xlim(0, 100)
    style.legend(fig, _interval_handles(table), 1)
    return fig
