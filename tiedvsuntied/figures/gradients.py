"""Figure 5: a tied matrix's input-side (lookup) vs output-side (head) gradient norm."""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from tiedvsuntied.figures.loss import set_x_axis, x_axis
from tiedvsuntied.figures.style import (
    REF_COLOR,
    TIE_COLOR,
    figure,
    init_label,
    init_order,
    legend,
    mean_line,
    model_order,
    new_figure,
    note,
    nothing_to_draw,
    plain_log,
    run_label,
    size_handles,
    size_markers,
    widths,
)

GRAD_KEYS = ("train/grad_norm_in", "train/grad_norm_out")


def _note_tied_runs_left_out(fig: Figure, runs: pd.DataFrame, logged: set) -> None:
    for _, run in runs[runs["tie"].eq(True)].iterrows():
        if run["run_id"] not in logged:
            fig.skipped.append(f"{run_label(run)}: no gradient norms logged ({run['status']})")
        elif run["status"] not in ("finished", "running", "interrupted"):
            fig.skipped.append(f"{run_label(run)}: {run['status']}, not averaged")


def _note_clipping(fig: Figure, runs: pd.DataFrame, init: str) -> None:
    clip = runs.loc[(runs["setting"] == init) & runs["tie"].eq(True), "clip_frac"].dropna()
    if len(clip):
        low, high = f"{clip.min():.0%}", f"{clip.max():.0%}"
        fig.flagged.append(
            f"{init_label(init, short=True)}: gradient clipped on {low}"
            + (f"–{high}" if high != low else "")
            + " of steps (the norms drawn are before clipping)"
        )


def _grad_column(axes, cell: pd.DataFrame, models: list[str], x: tuple[str, bool]) -> None:
    """Norms (top) and their ratio out/in (bottom) of one init std, a marker per size, against
    ``x`` (loss.x_axis)."""
    norms, ratio = axes
    for k, model in enumerate(models):
        sized = cell[cell["model"] == model]
        if sized.empty:
            continue
        markers = size_markers(k, models)
        for key, ls in zip(GRAD_KEYS, ("-", "--"), strict=True):
            mean_line(norms, sized, key, True, ["model"], ls=ls, x=x[0], **markers)
        mean_line(ratio, sized, "ratio", True, ["model"], 0.15, log=True, x=x[0], **markers)
    plain_log(norms, "y")
    ratio.axhline(1, color=REF_COLOR, ls=":", lw=1)
    plain_log(ratio, "y", cell["ratio"], ratio=3)
    set_x_axis(norms, *x, last_row=False)
    set_x_axis(ratio, *x, last_row=True)


@figure("fig5_grad_split", "tied: input- vs output-side gradient norm", uses=("runs", "history"))
def fig_grad_split(runs: pd.DataFrame, history: pd.DataFrame, x: str = "auto") -> Figure:
    """Tied runs: input-side (lookup, solid) vs output-side (head, dashed) gradient norm of the one
    embedding matrix, mean over seeds, a column per init std; below, their ratio out/in per size:
    geometric mean with a t-interval in log space (below 3 seeds: each seed). The norms are
    pre-clip; how often clipping acted is noted per init std (clip_frac). ``x`` as in figure 1
    (loss.x_axis: log steps for runs evaluated at log-spaced early steps)."""
    inits, models, x = init_order(runs), model_order(runs), x_axis(x, history)
    fig, axes = new_figure(2, len(inits), 1.8, sharex="col")
    if n := int(runs["tie"].eq(False).sum()):
        fig.skipped.append(f"{n} untied run(s) (the figure shows tied runs)")
    if missing := [k for k in GRAD_KEYS if k not in history.columns or history[k].isna().all()]:
        fig.skipped.append(f"all runs: {', '.join(missing)} not logged")
        return nothing_to_draw(fig, axes, "gradient split not logged")
    if not runs["tie"].eq(True).any():
        return nothing_to_draw(fig, axes, "no tied runs: the gradient split is a tied matrix's")
    fig.drawn = runs[runs["tie"].eq(True)]
    tied = history[history["tie"].eq(True)]
    tied = tied.assign(ratio=tied[GRAD_KEYS[1]] / tied[GRAD_KEYS[0]])
    _note_tied_runs_left_out(fig, runs, set(tied.loc[tied[GRAD_KEYS[0]].notna(), "run_id"]))
    for j, init in enumerate(inits):
        axes[0, j].set_title(init_label(init, widths=widths(runs, init)))
        cell = tied[tied["setting"] == init]
        if cell.empty:
            for ax in axes[:, j]:
                note(ax, "no runs")
            continue
        _grad_column(axes[:, j], cell, models, x)
        _note_clipping(fig, runs, init)
    axes[0, 0].set_ylabel("gradient norm")
    axes[1, 0].set_ylabel("output / input side")
    handles = [
        Line2D([], [], color=TIE_COLOR[True], ls=ls, label=f"tied: {side} side ({part})")
        for ls, side, part in (("-", "input", "lookup"), ("--", "output", "head"))
    ]
    handles += size_handles(runs, models)
    label = "pre-clip norms; ratio: geometric mean, log-space CI"
    handles.append(Line2D([], [], color="none", label=label))
    legend(fig, handles, 4)
    return fig
