"""Figures 1, 2, 3 and 5: the loss over training (log steps by default for log-spaced
evaluations), final loss against parameters, the initial (step 0) loss against ln V and the
Gaussian-logit prediction, and a tied matrix's input-side (lookup) vs output-side (head) gradient
norm over training (on figure 1's x axis)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import EngFormatter, FuncFormatter

from tiedvsuntied.analysis import theory
from tiedvsuntied.analysis.early import MIN_DENSE_STEPS, dense_steps
from tiedvsuntied.analysis.stats import CONFIDENCE, MIN_BAND_SEEDS, aggregate_runs, first_replicates
from tiedvsuntied.figures import style
from tiedvsuntied.results.metrics import (
    TRAIN_GRAD_NORM_IN,
    TRAIN_GRAD_NORM_OUT,
    TRAIN_LOSS,
    VAL_LOSS,
)

FEW_STEPS = 20  # curves with at most this many logged steps get markers
# Where tied and untied overlap both stay visible: untied solid and wider below, tied dashed on
# top and lighter; markers filled (tied) or open (untied) as everywhere.
TIE_LINE = {True: {"ls": "--", "lw": 1.3, "alpha": 0.85}, False: {"ls": "-", "lw": 1.8}}
X_AXES = ("auto", "log_step", "step", "tokens")
PARAMS_AXES = {
    "params_total": "parameters (total, unique)",
    "params_non_embedding": "parameters (non-embedding)",
}
EARLY_EVAL_STEPS = {1, 2, 4}  # evaluated there: trainer.eval_log_steps
GRAD_KEYS = (TRAIN_GRAD_NORM_IN, TRAIN_GRAD_NORM_OUT)
FEW_SEEDS = f"< {MIN_BAND_SEEDS} seeds: each seed, no CI"  # a legend entry: no band, no bar
DIAMOND = {"ls": "none", "marker": "D", "mfc": "none", "mec": "black"}  # a predicted loss


def _note_runs_drawn_apart(fig: Figure, runs: pd.DataFrame, logged: set, metric: str) -> None:
    for _, run in runs.iterrows():
        name, status = style.run_label(run), run["status"]
        if run["run_id"] not in logged:
            fig.skipped.append(f"{name}: no {metric} logged (status {status})")
        elif status in ("running", "interrupted"):
            fig.flagged.append(f"{name}: {status}, in the mean up to step {run['step']}")
        elif status != "finished":
            at = f" at step {run['diverged_at_step']}" if status == "diverged" else ""
            fig.flagged.append(f"{name}: {status}{at}, drawn alone (dashed), not in the mean")


def log_spaced(history: pd.DataFrame) -> bool:
    """Whether some run was evaluated at the log-spaced early steps (1, 2, 4, not 3)."""
    if VAL_LOSS not in history:
        return False
    steps = history.loc[history[VAL_LOSS].notna()].groupby("run_id")["step"]
    return any(set(s) >= EARLY_EVAL_STEPS and 3 not in set(s) for _, s in steps)


def _dense_train(history: pd.DataFrame) -> pd.DataFrame:
    """train/loss of each run at its steps 1..k logged at every step (analysis.dense_steps)."""
    k = history["run_id"].map(history.groupby("run_id")[["step", TRAIN_LOSS]].apply(dense_steps))
    return history[history[TRAIN_LOSS].notna() & (history["step"] <= k) & (k >= MIN_DENSE_STEPS)]


def _val_loss_handles(seed_counts: set, ended: set, train: pd.DataFrame) -> list:
    handles = [
        style.handle(label, style.TIE_COLOR[t], marker="o", ms=2.5, mfc=style.MFC[t], **TIE_LINE[t])
        for t, label in ((True, "tied"), (False, "untied"))
    ]
    if counts := [n for n in seed_counts if n >= MIN_BAND_SEEDS]:
        label = f"{CONFIDENCE:.0%} t-CI over seeds (n={style.span(map(int, counts))})"
        handles.append(Patch(color="#999999", alpha=0.4, label=label))
    if any(n < MIN_BAND_SEEDS for n in seed_counts):
        handles.append(style.handle(FEW_SEEDS, "#999999", lw=0.6))
    if len(train):
        label = f"thin: training loss, every step to {int(train['step'].max())}"
        handles.append(style.handle(label, "#bbbbbb", lw=0.6, ls="--"))
    return handles + [
        style.handle(f"{s} (run ends)", ls="none", marker=style.STATUS_MARKER[s])
        for s in sorted(ended & {"diverged", "failed"})
    ]


def x_axis(x: str, history: pd.DataFrame) -> tuple[str, bool]:
    """(history column drawn on x, log scale?) for ``x`` (X_AXES): "auto" is log steps when the
    runs were evaluated at log-spaced early steps (:func:`log_spaced`), else tokens."""
    if x not in X_AXES:
        raise ValueError(f"x={x!r}: valid are {', '.join(X_AXES)}")
    log = x == "log_step" or (x == "auto" and log_spaced(history))
    return ("step" if log else ("tokens" if x == "auto" else x)), log


def set_x_axis(ax, x: str, log: bool, last_row: bool) -> None:
    """Ticks and label of an x axis chosen by :func:`x_axis`; with ``log``, after the curves
    are drawn (it fixes the left limit at step 0)."""
    if x == "tokens":
        ax.xaxis.set_major_formatter(EngFormatter(sep=""))
    elif log and ax.has_data():  # symlog: linear from 0 to 1, so step 0 has a place
        ax.set_xscale("symlog", linthresh=1, linscale=0.4)
        ax.set_xlim(left=-0.05)  # steps are never negative; a curve from step 1 starts at 1
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    if last_row:
        label = "training step" + (" (log scale; 0 at the left)" if log else "")
        ax.set_xlabel("training tokens" if x == "tokens" else label)


def _val_loss_cell(ax, cell: pd.DataFrame, train: pd.DataFrame, x: str) -> set:
    """A panel's curves: each tie's mean validation loss (band from MIN_BAND_SEEDS), its ended
    runs alone, dashed, marked where they stopped, its dense training loss thin beneath."""
    seed_counts = set()
    for tie in (False, True):  # tied last: on top
        drawn, color = cell[cell["tie"] == tie], style.TIE_COLOR[tie]
        in_mean = drawn["status"].isin(style.IN_MEAN)
        few = drawn.loc[in_mean, "step"].nunique() <= FEW_STEPS
        line = {"marker": "o" if few else None, "ms": 2.5, "mfc": style.MFC[tie], **TIE_LINE[tie]}
        agg = style.mean_line(ax, drawn, VAL_LOSS, tie, ["tie"], 0.2, x=x, zorder=2 + tie, **line)
        seed_counts |= set(agg["n"])
        for _, run in drawn[~in_mean].groupby("run_id"):
            end = {"marker": style.STATUS_MARKER.get(run["status"].iloc[0], "x"), "markevery": [-1]}
            ax.plot(run[x], run[VAL_LOSS], color=color, lw=0.8, ls="--", ms=5, mew=1.2, **end)
        if len(dense := train[train["tie"] == tie]):
            line = {**TIE_LINE[tie], "lw": 0.6, "alpha": 0.5, "zorder": 1}
            style.mean_line(ax, dense, TRAIN_LOSS, tie, ["tie"], x=x, **line)
    style.plain_log(ax, "y", pd.concat([cell[VAL_LOSS], train[TRAIN_LOSS]]), ratio=4)
    return seed_counts


@style.figure("fig1_val_loss", "validation loss vs training steps (log) or tokens, per init std")
def fig_val_loss(runs: pd.DataFrame, history: pd.DataFrame, x: str = "auto") -> Figure:
    """Validation loss over training, tied vs untied, a panel per init std and size; ``x`` as
    :func:`x_axis` takes it (docs/figures.md, figure 1)."""
    metric, (x, log) = VAL_LOSS, x_axis(x, history)
    inits, models = style.init_order(runs), style.model_order(runs)
    fig, axes = style.new_figure(len(models), len(inits), 1.9 if len(inits) > 1 else 2.3)
    logged = history[history[metric].notna()] if metric in history else history.iloc[:0]
    _note_runs_drawn_apart(fig, runs, set(logged["run_id"]), metric)
    if logged.empty:
        return style.nothing_to_draw(fig, f"no {metric} logged yet")
    train = _dense_train(history) if x == "step" and TRAIN_LOSS in history else history.iloc[:0]
    seed_counts = set()
    for (i, model), (j, init) in itertools.product(enumerate(models), enumerate(inits)):
        ax, cell = axes[i, j], runs[(runs["model"] == model) & (runs["setting"] == init)]
        ax.set_title(style.setting_label(runs, init) if i == 0 else "")
        size = f"\n{style.model_label(runs, model)}" if len(models) > 1 else ""
        ax.set_ylabel("validation loss (nats)" + size if j == 0 else "")
        if (ids := cell["run_id"]).empty:
            style.note(ax, "no runs of this setting and size")
        elif not logged["run_id"].isin(ids).any():
            style.note(ax, f"no {metric} logged")
        else:
            cell_train = train[train["run_id"].isin(ids)]
            seed_counts |= _val_loss_cell(ax, logged[logged["run_id"].isin(ids)], cell_train, x)
        set_x_axis(ax, x, log, i == len(models) - 1)
    ended = set(logged.loc[~logged["status"].isin(style.IN_MEAN), "status"])
    style.legend(fig, _val_loss_handles(seed_counts, ended, train), 4 if len(inits) > 1 else 2)
    return fig


def _loss_vs_params_panel(ax, runs, agg, xcol: str, inits: list[str]) -> None:
    """Seed means with t-CI error bars (from MIN_BAND_SEEDS seeds), fewer seeds as dots."""
    for (k, init), tie in itertools.product(enumerate(inits), (True, False)):
        cell = agg[(agg["setting"] == init) & (agg["tie"] == tie)].sort_values(xcol)
        if cell.empty:
            continue
        yerr = cell["ci_half"].where(cell["n"] >= MIN_BAND_SEEDS)
        yerr = yerr if yerr.notna().any() else None
        line = {"color": style.TIE_COLOR[tie], "mfc": style.MFC[tie], **style.init_line(k)}
        ax.errorbar(cell[xcol], cell["mean"], yerr, capsize=2, **line)
        few = runs[runs["run_id"].isin(sum(cell.loc[cell["n"] < MIN_BAND_SEEDS, "run_ids"], []))]
        dots = {"ls": "none", "marker": ".", "ms": 3, "alpha": 0.7}
        ax.plot(few[xcol], few["final_val_loss"], color=style.TIE_COLOR[tie], **dots)
    ax.set_xlim(agg[xcol].min() / 1.5, agg[xcol].max() * 1.5)  # room around the points
    style.plain_log(ax, "x", eng=True)
    style.plain_log(ax, "y", agg["mean"], ratio=4)


@style.figure("fig2_loss_vs_params", "final validation loss vs parameters")
def fig_loss_vs_params(runs: pd.DataFrame) -> Figure:
    """Final validation loss vs parameters (total | non-embedding), log x; mean over finished
    seeds with t-CI error bars."""
    value = "final_val_loss"
    fig, axes = style.new_figure(1, 2, 2.5, sharey=True)
    unfinished = runs["status"] != "finished"
    style.leave_out(fig, runs[unfinished], lambda run: f"{run['status']}, no final loss")
    style.leave_out(fig, runs[~unfinished & runs[value].isna()], f"no {value} in summary")
    agg = style.with_setting(aggregate_runs(runs, value))
    agg = agg[agg["n"] > 0]
    if agg.empty:
        return style.nothing_to_draw(fig, f"no finished run with a {value}")
    fig.drawn = runs[~unfinished & runs[value].notna()]
    inits = style.init_order(runs)
    for ax, (xcol, xlabel) in zip(axes[0], PARAMS_AXES.items(), strict=True):
        _loss_vs_params_panel(ax, runs, agg, xcol, inits)
        ax.set_xlabel(xlabel)
    axes[0, 0].set_ylabel("final validation loss (nats)")
    handles = style.tie_handles(agg["tie"]) + [
        style.handle(style.setting_label(agg, init, short=True), **style.init_line(k))
        for k, init in enumerate(inits)
    ]
    if (agg["n"] >= MIN_BAND_SEEDS).any():
        handles.append(style.handle(f"mean ± {CONFIDENCE:.0%} t-CI over seeds", "none"))
    if (agg["n"] < MIN_BAND_SEEDS).any():
        handles.append(style.handle(FEW_SEEDS, marker=".", ls="none"))
    style.legend(fig, handles, 5)
    return fig


def _initial_loss_by_setting(ax, have: pd.DataFrame, vocab: int) -> None:
    """Left: measured loss per init std (x size), a dot per seed, tied left of untied, with ln V
    and as a diamond the prediction from each run's σ (tied: and its step-0 own-token logit)."""
    models, labels = style.model_order(have), []
    for init, model in itertools.product(style.init_order(have), models):
        if (cell := have[(have["setting"] == init) & (have["model"] == model)]).empty:
            continue
        for tie, x in ((True, len(labels) - 0.18), (False, len(labels) + 0.18)):
            c = cell[cell["tie"] == tie]
            jitter = np.linspace(-0.05, 0.05, len(c)) * (len(c) > 1)  # seeds side by side
            dots = {"color": style.TIE_COLOR[tie], "mfc": style.MFC[tie], "ms": 3.5, "alpha": 0.9}
            ax.plot(x + jitter, c["init_val_loss"], ls="none", marker="o", zorder=3, **dots)
            predicted = theory.initial_loss_table(c)["predicted_tied" if tie else "predicted"]
            ax.plot(np.full(len(c), x), predicted, ms=4.5, mew=0.7, zorder=4, **DIAMOND)
        label = style.init_label(init, prefix="", widths=cell["n_embd"])
        labels.append(label + (f"\n{model}" if len(models) > 1 else ""))
    ln_v = math.log(vocab)
    ax.axhline(ln_v, color=style.REF_COLOR, ls="--", lw=1)
    turn = len(labels) > 6  # a long row of labels is turned so they do not overlap
    ticks = {"fontsize": 6, "rotation": 30, "ha": "right"} if turn else {"fontsize": 7}
    ax.set_xticks(range(len(labels)), labels, **ticks)
    ax.set_xlim(-0.6, len(labels) - 0.4)
    size = f" ({models[0]}, d={int(have['n_embd'].iloc[0])})" if len(models) == 1 else " / size"
    ax.set_xlabel("init std" + size)
    ax.set_ylabel("initial validation loss (nats)")
    ax.grid(axis="x", visible=False)
    style.plain_log(ax, "y", list(have["init_val_loss"]) + [ln_v], ratio=3)


def _initial_loss_vs_sigma(ax, have: pd.DataFrame, vocab: int) -> None:
    """Right: measured loss against σ with E[logsumexp z] and its two regimes."""
    sig_runs, models = have[have["init_logit_std"].notna()], style.model_order(have)
    if sig_runs.empty:
        return style.note(ax, "no run recorded init_logit_std")
    ln_v, sigma_c = math.log(vocab), math.sqrt(2 * math.log(vocab))
    sig = sig_runs["init_logit_std"]
    grid = np.geomspace(min(sig.min() / 3, 0.05), max(sig.max() * 3, 3 * sigma_c), 80)
    exact = r"E[logsumexp $z$], $z\sim N(0,\sigma^2)^V$"
    ax.plot(grid, theory.gaussian_logit_loss(grid, vocab), color="black", lw=1.2, label=exact)
    approx = r"ln V + $\sigma^2$/2, then $\sigma\,$E[max of V normals]"
    ref = {"color": style.REF_COLOR, "ls": ":", "lw": 1.2, "label": approx}
    ax.plot(grid, theory.gaussian_logit_loss_approx(grid, vocab), **ref)
    ax.axhline(ln_v, color=style.REF_COLOR, ls="--", lw=1)
    for (k, model), tie in itertools.product(enumerate(models), (True, False)):
        c = sig_runs[(sig_runs["model"] == model) & (sig_runs["tie"] == tie)]
        dots = {"color": style.TIE_COLOR[tie], "mfc": style.MFC[tie], "alpha": 0.9, "ls": "none"}
        ax.plot(c["init_logit_std"], c["init_val_loss"], marker=style.marker(k), **dots)
    style.plain_log(ax, "x")
    ax.set_ylim(ln_v * 0.85, max(float(have["init_val_loss"].max()), ln_v) * 1.5)
    style.plain_log(ax, "y")
    ax.set_xlabel(r"initial logit std $\sigma$ (nats)")
    ax.set_ylabel("initial validation loss (nats)")
    handles = ax.get_legend_handles_labels()[0] + style.size_handles(have, models)
    ax.legend(handles=handles, loc="upper left", fontsize=6.5)


@style.figure("fig3_initial_loss", "initial loss vs ln V and the Gaussian-logit prediction")
def fig_initial_loss(runs: pd.DataFrame) -> Figure:
    """Initial (step 0) validation loss against ln V and i.i.d. Gaussian-logit theory, per
    configuration and against the logit std σ (docs/figures.md, figure 3)."""
    fig, axes = style.new_figure(1, 2, 2.6, gridspec_kw={"width_ratios": [1.25, 1]})
    first = first_replicates(runs)  # a replicate starts where its replicate 0 did: no new dot
    why = "its step 0 is replicate 0's"
    style.leave_out(fig, runs.drop(first.index), lambda r: f"replicate {r['replicate']} ({why})")
    have = first[first["init_val_loss"].notna()]
    style.leave_out(fig, first.drop(have.index), lambda r: f"no init_val_loss ({r['status']})")
    if have.empty:
        return style.nothing_to_draw(fig, "no run has an initial validation loss yet")
    fig.drawn = have
    style.leave_out(fig, have[have["init_logit_std"].isna()], "no init_logit_std (right panel)")
    zero = have["init_logit_std"] <= 0  # a zero-init head: loss exactly ln V, no place on log σ
    style.leave_out(fig, have[zero], "σ = 0 (zero head), left panel only")
    vocab = int(have["vocab_size"].dropna().iloc[0])
    _initial_loss_by_setting(axes[0, 0], have, vocab)
    _initial_loss_vs_sigma(axes[0, 1], have[~zero], vocab)
    ln_v = f"ln V = {math.log(vocab):.2f} (V = {vocab:,})"
    predicted = r"predicted from the run's $\sigma$ (tied: and its own-token logit)"
    handles = [style.handle(ln_v, style.REF_COLOR, ls="--"), style.handle(predicted, **DIAMOND)]
    style.legend(fig, style.tie_handles(have["tie"]) + handles, 4)
    return fig


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
        if len(clip := tied_runs.loc[tied_runs["setting"] == init, "clip_frac"].dropna()):
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
