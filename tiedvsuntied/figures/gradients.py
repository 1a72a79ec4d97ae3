"""Figure 5: a tied matrix's input-side (lookup) vs output-side (head) gradient norm."""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from tiedvsuntied.figures import style
from tiedvsuntied.figures.loss import set_x_axis, x_axis

GRAD_KEYS = ("train/grad_norm_in", "train/grad_norm_out")


def _grad_column(axes, cell: pd.DataFrame, models: list[str], x: tuple[str, bool]) -> None:
    """Norms (top) and their ratio out/in (bottom) of one init std, a marker per size, against
    ``x`` (loss.x_axis)."""
    norms, ratio = axes
    for sized, markers in style.sizes(cell, models):
        for key, ls in zip(GRAD_KEYS, ("-", "--"), strict=True):
            style.mean_line(norms, sized, key, True, ["model"], ls=ls, x=x[0], **markers)
        style.mean_line(ratio, sized, "ratio", True, ["model"], 0.15, log=True, x=x[0], **markers)
    style.plain_log(norms, "y")
    ratio.axhline(1, color=style.REF_COLOR, ls=":", lw=1)
    style.plain_log(ratio, "y", cell["ratio"], ratio=3)
    set_x_axis(norms, *x, last_row=False)
    set_x_axis(ratio, *x, last_row=True)


@style.figure("fig5_grad_split", "tied: input- vs output-side gradient norm")
def fig_grad_split(runs: pd.DataFrame, history: pd.DataFrame, x: str = "auto") -> Figure:
    """Tied runs: input-side (lookup) vs output-side (head) gradient norm of the one embedding
    matrix, and their ratio; ``x`` as in figure 1 (docs/figures.md, figure 5)."""
    inits, models, x = style.init_order(runs), style.model_order(runs), x_axis(x, history)
    fig, axes = style.new_figure(2, len(inits), 1.8, sharex="col")
    if n := int(runs["tie"].eq(False).sum()):
        fig.skipped.append(f"{n} untied run(s) (the figure shows tied runs)")
    if missing := [k for k in GRAD_KEYS if k not in history.columns or history[k].isna().all()]:
        fig.skipped.append(f"all runs: {', '.join(missing)} not logged")
        return style.nothing_to_draw(fig, "gradient split not logged")
    if not runs["tie"].eq(True).any():
        return style.nothing_to_draw(fig, "no tied runs: the gradient split is a tied matrix's")
    tied_runs = fig.drawn = runs[runs["tie"].eq(True)]
    tied = history[history["tie"].eq(True)]
    tied = tied.assign(ratio=tied[GRAD_KEYS[1]] / tied[GRAD_KEYS[0]])
    has = tied_runs["run_id"].isin(tied.loc[tied[GRAD_KEYS[0]].notna(), "run_id"])
    style.leave_out(fig, tied_runs[~has], lambda run: f"no gradient norms logged ({run['status']})")
    not_averaged = tied_runs[has & ~tied_runs["status"].isin(style.IN_MEAN)]
    style.leave_out(fig, not_averaged, lambda run: f"{run['status']}, not averaged")
    for j, init in enumerate(inits):
        axes[0, j].set_title(style.setting_label(runs, init))
        if (cell := tied[tied["setting"] == init]).empty:
            for ax in axes[:, j]:
                style.note(ax, "no runs")
            continue
        _grad_column(axes[:, j], cell, models, x)
        clip = tied_runs.loc[tied_runs["setting"] == init, "clip_frac"].dropna()
        if len(clip):
            fig.flagged.append(
                f"{style.init_label(init, short=True)}: gradient clipped on "
                f"{style.span(clip, '{:.0%}')} of steps (the norms drawn are before clipping)"
            )
    axes[0, 0].set_ylabel("gradient norm")
    axes[1, 0].set_ylabel("output / input side")
    handles = [
        style.handle(f"tied: {side} side ({part})", style.TIE_COLOR[True], ls=ls)
        for ls, side, part in (("-", "input", "lookup"), ("--", "output", "head"))
    ]
    handles += style.size_handles(runs, models)
    handles.append(style.handle("pre-clip norms; ratio: geometric mean, log-space CI", "none"))
    style.legend(fig, handles, 4)
    return fig
