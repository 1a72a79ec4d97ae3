"""Figure 3: the initial (step 0) loss against ln V and the Gaussian-logit prediction."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from tiedvsuntied.analysis import theory
from tiedvsuntied.analysis.stats import first_replicates
from tiedvsuntied.figures import style

DIAMOND = {"ls": "none", "marker": "D", "mfc": "none", "mec": "black"}  # a predicted loss


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
