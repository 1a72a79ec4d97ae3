"""Figures 1 and 2: validation loss over training, and final loss against parameters."""

from __future__ import annotations

import itertools

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import EngFormatter

from tiedvsuntied.analysis import CONFIDENCE, MIN_BAND_SEEDS, aggregate_runs
from tiedvsuntied.figures.style import (
    LINESTYLES,
    MARKERS,
    MFC,
    STATUS_MARKER,
    TIE_COLOR,
    figure,
    init_label,
    init_order,
    legend,
    mean_line,
    model_label,
    model_order,
    new_figure,
    note,
    plain_log,
    run_label,
    tie_handles,
    with_setting,
)

DRAWN_IN_MEAN = ["finished", "running"]
FEW_STEPS = 20  # curves with at most this many logged steps get markers


def _note_runs_drawn_apart(fig: Figure, runs: pd.DataFrame, logged: set, metric: str) -> None:
    for _, run in runs.iterrows():
        if run["run_id"] not in logged:
            fig.skipped.append(f"{run_label(run)}: no {metric} logged (status {run['status']})")
        elif run["status"] == "running":
            fig.flagged.append(f"{run_label(run)}: running, in the mean up to step {run['step']}")
        elif run["status"] != "finished":
            at = f" at step {run['diverged_at_step']}" if run["status"] == "diverged" else ""
            fig.flagged.append(
                f"{run_label(run)}: {run['status']}{at}, drawn alone (dashed), not in the mean"
            )


def _val_loss_curves(ax, cell: pd.DataFrame, metric: str, tie: bool) -> tuple[set, set]:
    """One tie's mean curve (band from MIN_BAND_SEEDS) and its ended runs, each alone, dashed,
    with a marker where it stopped; returns (seed counts averaged, statuses of ended runs)."""
    drawn = cell[cell["tie"] == tie]
    in_mean = drawn["status"].isin(DRAWN_IN_MEAN)
    few = drawn.loc[in_mean, "step"].nunique() <= FEW_STEPS
    style = {"marker": "o" if few else None, "ms": 2.5, "mfc": MFC[tie]}
    counts = set(mean_line(ax, drawn, metric, tie, ["tie"], 0.2, **style)["n"])
    ended = set()
    for _, run in drawn[~in_mean].groupby("run_id"):
        status = run["status"].iloc[0]
        ax.plot(run["tokens"], run[metric], color=TIE_COLOR[tie], lw=0.8, ls="--", alpha=0.8)
        last = run.iloc[-1:]
        marker = STATUS_MARKER.get(status, "x")
        end = {"color": TIE_COLOR[tie], "ls": "none", "marker": marker, "ms": 5, "mew": 1.2}
        ax.plot(last["tokens"], last[metric], **end)
        ended.add(status)
    return counts, ended


def _val_loss_handles(seed_counts: set, ended: set) -> list:
    handles = tie_handles()
    if counts := sorted({int(n) for n in seed_counts if n >= MIN_BAND_SEEDS}):
        n_range = "–".join(map(str, dict.fromkeys([counts[0], counts[-1]])))
        label = f"{CONFIDENCE:.0%} t-CI over seeds (n={n_range})"
        handles.append(Patch(color="#999999", alpha=0.4, label=label))
    if any(n < MIN_BAND_SEEDS for n in seed_counts):
        label = f"< {MIN_BAND_SEEDS} seeds: each seed, no CI"
        handles.append(Line2D([], [], color="#999999", lw=0.6, label=label))
    return handles + [
        Line2D([], [], color="#444444", ls="none", marker=STATUS_MARKER[s], label=f"{s} (run ends)")
        for s in ("diverged", "failed")
        if s in ended
    ]


@figure("fig1_val_loss", "validation loss vs tokens, per init std", uses=("runs", "history"))
def fig_val_loss(runs: pd.DataFrame, history: pd.DataFrame) -> Figure:
    """Validation loss vs training tokens, tied vs untied; a panel per init std and size. Finished
    and running runs: mean over seeds, t-CI band when n ≥ 2. Diverged and failed runs: drawn
    alone, dashed, ending with × where they stopped."""
    metric = "val/loss"
    inits, models = init_order(runs), model_order(runs)
    fig, axes = new_figure(len(models), len(inits), 1.9 if len(inits) > 1 else 2.3)
    if metric in history:
        history = history[history[metric].notna()]
    else:
        history = history.iloc[:0].assign(**{metric: 1.0})
    _note_runs_drawn_apart(fig, runs, set(history["run_id"]), metric)
    ended, seed_counts = set(), set()
    for (i, model), (j, init) in itertools.product(enumerate(models), enumerate(inits)):
        ax = axes[i, j]
        ax.set_title(init_label(init) if i == 0 else "")
        ax.set_xlabel("training tokens" if i == len(models) - 1 else "")
        if j == 0:
            size = f"\n{model_label(runs, model)}" if len(models) > 1 else ""
            ax.set_ylabel("validation loss (nats)" + size)
        cell_runs = runs[(runs["model"] == model) & (runs["setting"] == init)]
        cell = history[history["run_id"].isin(cell_runs["run_id"])]
        if cell.empty:
            note(ax, "no runs with this init std" if cell_runs.empty else f"no {metric} logged")
            continue
        for tie in (True, False):
            counts, ended_here = _val_loss_curves(ax, cell, metric, tie)
            seed_counts |= counts
            ended |= ended_here
        plain_log(ax, "y", cell[metric], ratio=4)
        ax.xaxis.set_major_formatter(EngFormatter(sep=""))
    handles = _val_loss_handles(seed_counts, ended)
    legend(fig, handles, len(handles))
    return fig


def _loss_vs_params_panel(ax, runs, agg, xcol: str, value: str, inits: list[str]) -> None:
    """Seed means with t-CI error bars (from MIN_BAND_SEEDS seeds), fewer seeds as dots."""
    for (k, init), tie in itertools.product(enumerate(inits), (True, False)):
        cell = agg[(agg["setting"] == init) & (agg["tie"] == tie)].sort_values(xcol)
        if cell.empty:
            continue
        yerr = cell["ci_half"].where(cell["n"] >= MIN_BAND_SEEDS)
        ax.errorbar(
            cell[xcol],
            cell["mean"],
            yerr=yerr if yerr.notna().any() else None,
            color=TIE_COLOR[tie],
            marker=MARKERS[k % len(MARKERS)],
            ls=LINESTYLES[k % len(LINESTYLES)],
            capsize=2,
            ms=4,
            mfc=MFC[tie],
        )
        few_ids = sum(cell.loc[cell["n"] < MIN_BAND_SEEDS, "run_ids"], [])
        few = runs[runs["run_id"].isin(few_ids)]
        style = {"ls": "none", "marker": ".", "ms": 3, "alpha": 0.7}
        ax.plot(few[xcol], few[value], color=TIE_COLOR[tie], **style)
    ax.set_xlim(agg[xcol].min() / 1.5, agg[xcol].max() * 1.5)  # room around the points
    plain_log(ax, "x", eng=True)
    plain_log(ax, "y", agg["mean"], ratio=4)


def _loss_vs_params_handles(agg: pd.DataFrame, inits: list[str]) -> list:
    handles = tie_handles(marker="o") + [
        Line2D(
            [],
            [],
            color="#444444",
            marker=MARKERS[k % len(MARKERS)],
            ls=LINESTYLES[k % len(LINESTYLES)],
            label=init_label(init, short=True),
        )
        for k, init in enumerate(inits)
    ]
    if (agg["n"] >= MIN_BAND_SEEDS).any():
        label = f"mean ± {CONFIDENCE:.0%} t-CI over seeds"
        handles.append(Line2D([], [], color="none", label=label))
    if (agg["n"] < MIN_BAND_SEEDS).any():
        label = f"< {MIN_BAND_SEEDS} seeds: each seed, no CI"
        handles.append(Line2D([], [], color="#444444", marker=".", ls="none", label=label))
    return handles


@figure("fig2_loss_vs_params", "final validation loss vs parameters")
def fig_loss_vs_params(runs: pd.DataFrame) -> Figure:
    """Final validation loss vs parameters (total | non-embedding), log x. Colour: tied/untied;
    marker and line style: init std; points: mean over finished seeds with t-CI error bars."""
    value = "final_val_loss"
    fig, axes = new_figure(1, 2, 2.5, sharey=True)
    fig.skipped += [
        f"{run_label(run)}: "
        + (
            f"{run['status']}, no final loss"
            if run["status"] != "finished"
            else f"no {value} in summary"
        )
        for _, run in runs[(runs["status"] != "finished") | runs[value].isna()].iterrows()
    ]
    agg = with_setting(aggregate_runs(runs, value))
    agg = agg[agg["n"] > 0]
    inits = init_order(runs)
    for ax, xcol, xlabel in (
        (axes[0, 0], "params_total", "parameters (total, unique)"),
        (axes[0, 1], "params_non_embedding", "parameters (non-embedding)"),
    ):
        if agg.empty:
            note(ax, f"no finished run with a {value}")
            continue
        _loss_vs_params_panel(ax, runs, agg, xcol, value, inits)
        ax.set_xlabel(xlabel)
    axes[0, 0].set_ylabel("final validation loss (nats)")
    legend(fig, _loss_vs_params_handles(agg, inits), 5)
    return fig
