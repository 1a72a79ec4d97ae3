"""Figure 3: the initial (step 0) loss against ln V and the Gaussian-logit prediction."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from tiedvsuntied.analysis.stats import first_replicates
from tiedvsuntied.analysis.theory import (
    gaussian_logit_loss,
    gaussian_logit_loss_approx,
    initial_loss_table,
)
from tiedvsuntied.figures.style import (
    MARKERS,
    MFC,
    REF_COLOR,
    TIE_COLOR,
    figure,
    init_label,
    init_order,
    legend,
    model_order,
    new_figure,
    note,
    nothing_to_draw,
    plain_log,
    run_label,
    size_handles,
    tie_handles,
)


def _initial_loss_cell(ax, x: float, cell: pd.DataFrame) -> None:
    """One init std x size: each seed's loss as a dot, tied left and untied right, and each
    run's predicted loss as an open diamond (NaN without init_logit_std: not drawn)."""
    for tie, dx in ((True, -0.18), (False, 0.18)):
        c = cell[cell["tie"] == tie]
        jitter = np.linspace(-0.05, 0.05, len(c)) * (len(c) > 1)  # seeds side by side
        ax.plot(
            x + dx + jitter,
            c["init_val_loss"],
            ls="none",
            marker="o",
            ms=3.5,
            color=TIE_COLOR[tie],
            mfc=MFC[tie],
            alpha=0.9,
            zorder=3,
        )
        predicted = initial_loss_table(c)["predicted_tied" if tie else "predicted"]
        diamond = {"marker": "D", "ms": 4.5, "mfc": "none", "mec": "black", "mew": 0.7}
        ax.plot(np.full(len(c), x + dx), predicted, ls="none", zorder=4, **diamond)


def _initial_loss_by_setting(ax, have: pd.DataFrame, vocab: int) -> None:
    """Left: measured loss per init std (x size), seeds as dots, tied and untied side by side,
    with the prediction from each run's σ (open diamonds; tied: with its step-0 own-token logit,
    tied_initial_loss) and ln V."""
    models, inits = model_order(have), init_order(have)
    ticks, labels = [], []
    for init in inits:
        for model in models:
            cell = have[(have["setting"] == init) & (have["model"] == model)]
            if cell.empty:
                continue
            _initial_loss_cell(ax, len(ticks), cell)
            ticks.append(len(ticks))
            label = init_label(init, prefix="", widths=cell["n_embd"].unique())
            labels.append(label + (f"\n{model}" if len(models) > 1 else ""))
    ln_v = math.log(vocab)
    ax.axhline(ln_v, color=REF_COLOR, ls="--", lw=1)
    turn = len(ticks) > 6  # a long row of labels is turned so they do not overlap
    ax.set_xticks(
        ticks,
        labels,
        fontsize=6 if turn else 7,
        rotation=30 if turn else 0,
        ha="right" if turn else "center",
    )
    ax.set_xlim(-0.6, len(ticks) - 0.4)
    ax.set_xlabel(
        "init std"
        + (" / size" if len(models) > 1 else f" ({models[0]}, d={int(have['n_embd'].iloc[0])})")
    )
    ax.set_ylabel("initial validation loss (nats)")
    ax.grid(axis="x", visible=False)
    plain_log(ax, "y", list(have["init_val_loss"]) + [ln_v], ratio=3)


def _initial_loss_vs_sigma(ax, have: pd.DataFrame, vocab: int) -> None:
    """Right: measured loss against σ with E[logsumexp z] and its two regimes."""
    sig_runs, models = have[have["init_logit_std"].notna()], model_order(have)
    if sig_runs.empty:
        return note(ax, "no run recorded init_logit_std")
    ln_v, sigma_c = math.log(vocab), math.sqrt(2 * math.log(vocab))
    sig = sig_runs["init_logit_std"]
    grid = np.geomspace(min(sig.min() / 3, 0.05), max(sig.max() * 3, 3 * sigma_c), 80)
    ax.plot(
        grid,
        gaussian_logit_loss(grid, vocab),
        color="black",
        lw=1.2,
        label=r"E[logsumexp $z$], $z\sim N(0,\sigma^2)^V$",
    )
    ax.plot(
        grid,
        gaussian_logit_loss_approx(grid, vocab),
        color=REF_COLOR,
        ls=":",
        lw=1.2,
        label=r"ln V + $\sigma^2$/2, then $\sigma\,$E[max of V normals]",
    )
    ax.axhline(ln_v, color=REF_COLOR, ls="--", lw=1)
    for k, model in enumerate(models):
        for tie in (True, False):
            c = sig_runs[(sig_runs["model"] == model) & (sig_runs["tie"] == tie)]
            ax.plot(
                c["init_logit_std"],
                c["init_val_loss"],
                ls="none",
                marker=MARKERS[k % len(MARKERS)],
                color=TIE_COLOR[tie],
                ms=4,
                alpha=0.9,
                mfc=MFC[tie],
            )
    plain_log(ax, "x")
    ax.set_ylim(ln_v * 0.85, max(float(have["init_val_loss"].max()), ln_v) * 1.5)
    plain_log(ax, "y")
    ax.set_xlabel(r"initial logit std $\sigma$ (nats)")
    ax.set_ylabel("initial validation loss (nats)")
    handles = ax.get_legend_handles_labels()[0] + size_handles(have, models)
    ax.legend(handles=handles, loc="upper left", fontsize=6.5)


@figure("fig3_initial_loss", "initial loss vs ln V and the Gaussian-logit prediction")
def fig_initial_loss(runs: pd.DataFrame) -> Figure:
    """Initial (step 0) validation loss against ln V and i.i.d. Gaussian-logit theory: per
    configuration (dots: seeds; diamonds: predicted from each run's logit std σ), and against σ
    with E[logsumexp z]."""
    fig, axes = new_figure(1, 2, 2.6, gridspec_kw={"width_ratios": [1.25, 1]})
    first = first_replicates(runs)  # a replicate starts where its replicate 0 did: no new dot
    fig.skipped += [
        f"{run_label(r)}: replicate {r['replicate']} (its step 0 is replicate 0's)"
        for _, r in runs.drop(first.index).iterrows()
    ]
    have = first[first["init_val_loss"].notna()]
    fig.skipped += [
        f"{run_label(r)}: no init_val_loss ({r['status']})"
        for _, r in first.drop(have.index).iterrows()
    ]
    if have.empty:
        return nothing_to_draw(fig, axes, "no run has an initial validation loss yet")
    fig.drawn = have
    fig.skipped += [
        f"{run_label(r)}: no init_logit_std (right panel)"
        for _, r in have[have["init_logit_std"].isna()].iterrows()
    ]
    # a zero-init head: loss exactly ln V, no place on a log σ axis
    zero = have["init_logit_std"] <= 0
    fig.skipped += [
        f"{run_label(r)}: σ = 0 (zero head), left panel only" for _, r in have[zero].iterrows()
    ]
    vocab = int(have["vocab_size"].dropna().iloc[0])
    _initial_loss_by_setting(axes[0, 0], have, vocab)
    _initial_loss_vs_sigma(axes[0, 1], have[~zero], vocab)
    legend(
        fig,
        tie_handles(marker="o", ties=have["tie"])
        + [
            Line2D(
                [],
                [],
                color=REF_COLOR,
                ls="--",
                label=f"ln V = {math.log(vocab):.2f} (V = {vocab:,})",
            ),
            Line2D(
                [],
                [],
                ls="none",
                marker="D",
                mfc="none",
                mec="black",
                label=r"predicted from the run's $\sigma$ (tied: and its own-token logit)",
            ),
        ],
        4,
    )
    return fig
