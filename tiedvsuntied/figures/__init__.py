"""The paper's figures from :mod:`tiedvsuntied.analysis` tables; ``python -m tiedvsuntied.figures SWEEP --out DIR``.

Every output is an entry of ``REGISTRY`` (tiedvsuntied.figures.style); the paired tied − untied
figure and tables are in tiedvsuntied.figures.paired. docs/figures.md lists them all."""

from __future__ import annotations

import argparse
import itertools
import math
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import EngFormatter, NullFormatter
from scipy import stats

from tiedvsuntied import analysis as A
from tiedvsuntied.figures import paired, similarity  # noqa: F401  (register their outputs)
from tiedvsuntied.figures.style import (
    LINESTYLES,
    MARKERS,
    MFC,
    REF_COLOR,
    REGISTRY,
    STATUS_MARKER,
    TIE_COLOR,
    Output,
    _figure,
    _init_label,
    _init_order,
    _legend,
    _mean_line,
    _model_label,
    _model_order,
    _note,
    _plain_log,
    _print_notes,
    _run_label,
    _tie_handles,
    _with_setting,
    caption,
    figure,
    publish,
    save_figure,
)


@figure("fig1_val_loss", "validation loss vs tokens, per init std", uses=("runs", "history"))
def fig_val_loss(runs: pd.DataFrame, history: pd.DataFrame) -> Figure:
    """Validation loss vs training tokens, tied vs untied; a panel per init std and size. Finished
    and running runs: mean over seeds, t-CI band when n ≥ 2. Diverged and failed runs: drawn
    alone, dashed, ending with × where they stopped."""
    metric = "val/loss"
    inits, models = _init_order(runs), _model_order(runs)
    fig, axes = _figure(len(models), len(inits), 1.9 if len(inits) > 1 else 2.3)
    history = (
        history[history[metric].notna()]
        if metric in history
        else history.iloc[:0].assign(**{metric: 1.0})
    )
    for _, r in runs.iterrows():
        if r["run_id"] not in set(history["run_id"]):
            fig.skipped.append(f"{_run_label(r)}: no {metric} logged (status {r['status']})")
        elif r["status"] == "running":
            fig.flagged.append(f"{_run_label(r)}: running, in the mean up to step {r['step']}")
        elif r["status"] != "finished":
            at = f" at step {r['diverged_at_step']}" if r["status"] == "diverged" else ""
            fig.flagged.append(
                f"{_run_label(r)}: {r['status']}{at}, drawn alone (dashed), not in the mean"
            )
    ended, band_n = set(), set()
    for (i, model), (j, init) in itertools.product(enumerate(models), enumerate(inits)):
        ax = axes[i, j]
        ax.set_title(_init_label(init) if i == 0 else "")
        ax.set_xlabel("training tokens" if i == len(models) - 1 else "")
        if j == 0:
            ax.set_ylabel(
                "validation loss (nats)"
                + (f"\n{_model_label(runs, model)}" if len(models) > 1 else "")
            )
        cell = runs[(runs["model"] == model) & (runs["setting"] == init)]
        h = history[history["run_id"].isin(cell["run_id"])]
        if h.empty:
            _note(ax, "no runs with this init std" if cell.empty else f"no {metric} logged")
            continue
        for tie in (True, False):
            ht = h[h["tie"] == tie]
            few = (
                ht.loc[ht["status"].isin(["finished", "running"]), "step"].nunique() <= 20
            )  # markers: short curves
            band_n.update(
                _mean_line(
                    ax,
                    ht,
                    metric,
                    tie,
                    ["tie"],
                    0.2,
                    marker="o" if few else None,
                    ms=2.5,
                    mfc=MFC[tie],
                )["n"]
            )
            for _, hr in ht[~ht["status"].isin(["finished", "running"])].groupby("run_id"):
                status = hr["status"].iloc[0]
                ax.plot(hr["tokens"], hr[metric], color=TIE_COLOR[tie], lw=0.8, ls="--", alpha=0.8)
                ax.plot(
                    hr["tokens"].iloc[-1:],
                    hr[metric].iloc[-1:],
                    color=TIE_COLOR[tie],
                    ls="none",
                    marker=STATUS_MARKER.get(status, "x"),
                    ms=5,
                    mew=1.2,
                )
                ended.add(status)
        _plain_log(ax, "y", h[metric], ratio=4)
        ax.xaxis.set_major_formatter(EngFormatter(sep=""))
    handles = _tie_handles()
    if ns := sorted({int(n) for n in band_n if n >= A.MIN_BAND_SEEDS}):
        n_range = "–".join(map(str, dict.fromkeys([ns[0], ns[-1]])))
        handles.append(
            Patch(
                color="#999999",
                alpha=0.4,
                label=f"{A.CONFIDENCE:.0%} t-CI over seeds (n={n_range})",
            )
        )
    if any(n < A.MIN_BAND_SEEDS for n in band_n):
        handles.append(
            Line2D(
                [],
                [],
                color="#999999",
                lw=0.6,
                label=f"< {A.MIN_BAND_SEEDS} seeds: each seed, no CI",
            )
        )
    handles += [
        Line2D([], [], color="#444444", ls="none", marker=STATUS_MARKER[s], label=f"{s} (run ends)")
        for s in ("diverged", "failed")
        if s in ended
    ]
    _legend(fig, handles, len(handles))
    return fig


@figure("fig2_loss_vs_params", "final validation loss vs parameters")
def fig_loss_vs_params(runs: pd.DataFrame) -> Figure:
    """Final validation loss vs parameters (total | non-embedding), log x. Colour: tied/untied;
    marker and line style: init std; points: mean over finished seeds with t-CI error bars."""
    value = "final_val_loss"
    fig, axes = _figure(1, 2, 2.5, sharey=True)
    fig.skipped += [
        f"{_run_label(r)}: "
        + (
            f"{r['status']}, no final loss"
            if r["status"] != "finished"
            else f"no {value} in summary"
        )
        for _, r in runs[(runs["status"] != "finished") | runs[value].isna()].iterrows()
    ]
    agg = _with_setting(A.aggregate_runs(runs, value))
    agg = agg[agg["n"] > 0]
    inits = _init_order(runs)
    for ax, xcol, xlabel in (
        (axes[0, 0], "params_total", "parameters (total, unique)"),
        (axes[0, 1], "params_non_embedding", "parameters (non-embedding)"),
    ):
        if agg.empty:
            _note(ax, f"no finished run with a {value}")
            continue
        for k, init in enumerate(inits):
            for tie in (True, False):
                a = agg[(agg["setting"] == init) & (agg["tie"] == tie)].sort_values(xcol)
                if a.empty:
                    continue
                yerr = a["ci_half"].where(a["n"] >= A.MIN_BAND_SEEDS)
                ax.errorbar(
                    a[xcol],
                    a["mean"],
                    yerr=yerr if yerr.notna().any() else None,
                    color=TIE_COLOR[tie],
                    marker=MARKERS[k % len(MARKERS)],
                    ls=LINESTYLES[k % len(LINESTYLES)],
                    capsize=2,
                    ms=4,
                    mfc=MFC[tie],
                )
                few = runs[
                    runs["run_id"].isin(sum(a.loc[a["n"] < A.MIN_BAND_SEEDS, "run_ids"], []))
                ]
                ax.plot(
                    few[xcol],
                    few[value],
                    ls="none",
                    marker=".",
                    ms=3,
                    color=TIE_COLOR[tie],
                    alpha=0.7,
                )
        ax.set_xlim(agg[xcol].min() / 1.5, agg[xcol].max() * 1.5)  # room around the points
        _plain_log(ax, "x", eng=True)
        ax.set_xlabel(xlabel)
        _plain_log(ax, "y", agg["mean"], ratio=4)
    axes[0, 0].set_ylabel("final validation loss (nats)")
    handles = _tie_handles(marker="o")
    handles += [
        Line2D(
            [],
            [],
            color="#444444",
            marker=MARKERS[k % len(MARKERS)],
            ls=LINESTYLES[k % len(LINESTYLES)],
            label=_init_label(init, short=True),
        )
        for k, init in enumerate(inits)
    ]
    if (agg["n"] >= A.MIN_BAND_SEEDS).any():
        handles.append(
            Line2D([], [], color="none", label=f"mean ± {A.CONFIDENCE:.0%} t-CI over seeds")
        )
    if (agg["n"] < A.MIN_BAND_SEEDS).any():
        handles.append(
            Line2D(
                [],
                [],
                color="#444444",
                marker=".",
                ls="none",
                label=f"< {A.MIN_BAND_SEEDS} seeds: each seed, no CI",
            )
        )
    _legend(fig, handles, 5)
    return fig


def _initial_loss_by_setting(ax, have: pd.DataFrame, vocab: int) -> None:
    """Left: measured loss per init std (x size), seeds as dots, tied and untied side by side,
    with the prediction from each run's σ (open diamonds; tied: with its step-0 own-token logit,
    A.tied_initial_loss) and ln V."""
    models, inits = _model_order(have), _init_order(have)
    ticks, labels = [], []
    for init in inits:
        for model in models:
            cell = have[(have["setting"] == init) & (have["model"] == model)]
            if cell.empty:
                continue
            x = len(ticks)
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
                predicted = A.initial_loss_table(c)["predicted_tied" if tie else "predicted"]
                ax.plot(
                    np.full(len(c), x + dx),
                    predicted,
                    ls="none",
                    marker="D",
                    ms=4.5,
                    mfc="none",
                    mec="black",
                    mew=0.7,
                    zorder=4,
                )  # NaN where a run has no init_logit_std: not drawn
            ticks.append(x)
            labels.append(
                "\n".join([_init_label(init, prefix="")] + ([model] if len(models) > 1 else []))
            )
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
    _plain_log(ax, "y", list(have["init_val_loss"]) + [ln_v], ratio=3)


def _initial_loss_vs_sigma(ax, have: pd.DataFrame, vocab: int) -> None:
    """Right: measured loss against σ with E[logsumexp z] and its two regimes."""
    sig_runs, models = have[have["init_logit_std"].notna()], _model_order(have)
    if sig_runs.empty:
        return _note(ax, "no run recorded init_logit_std")
    ln_v, sigma_c = math.log(vocab), math.sqrt(2 * math.log(vocab))
    sig = sig_runs["init_logit_std"]
    grid = np.geomspace(min(sig.min() / 3, 0.05), max(sig.max() * 3, 3 * sigma_c), 80)
    ax.plot(
        grid,
        A.gaussian_logit_loss(grid, vocab),
        color="black",
        lw=1.2,
        label=r"E[logsumexp $z$], $z\sim N(0,\sigma^2)^V$",
    )
    ax.plot(
        grid,
        A.gaussian_logit_loss_approx(grid, vocab),
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
        if len(models) > 1:
            ax.plot(
                [],
                [],
                ls="none",
                marker=MARKERS[k % len(MARKERS)],
                color="#444444",
                label=_model_label(have, model),
            )
    _plain_log(ax, "x")
    ax.set_ylim(ln_v * 0.85, max(float(have["init_val_loss"].max()), ln_v) * 1.5)
    _plain_log(ax, "y")
    ax.set_xlabel(r"initial logit std $\sigma$ (nats)")
    ax.set_ylabel("initial validation loss (nats)")
    ax.legend(loc="upper left", fontsize=6.5)


@figure("fig3_initial_loss", "initial loss vs ln V and the Gaussian-logit prediction")
def fig_initial_loss(runs: pd.DataFrame) -> Figure:
    """Initial (step 0) validation loss against ln V and i.i.d. Gaussian-logit theory: per configuration
    (dots: seeds; diamonds: predicted from each run's logit std σ), and against σ with E[logsumexp z]."""
    fig, axes = _figure(1, 2, 2.6, gridspec_kw={"width_ratios": [1.25, 1]})
    have = runs[runs["init_val_loss"].notna()]
    fig.skipped += [
        f"{_run_label(r)}: no init_val_loss ({r['status']})"
        for _, r in runs.drop(have.index).iterrows()
    ]
    if have.empty:
        for ax in axes[0]:
            _note(ax, "no run has an initial validation loss yet")
        return fig
    fig.skipped += [
        f"{_run_label(r)}: no init_logit_std (right panel)"
        for _, r in have[have["init_logit_std"].isna()].iterrows()
    ]
    zero = (
        have["init_logit_std"] <= 0
    )  # a zero-init head: loss exactly ln V, no place on a log σ axis
    fig.skipped += [
        f"{_run_label(r)}: σ = 0 (zero head), left panel only" for _, r in have[zero].iterrows()
    ]
    vocab = int(have["vocab_size"].dropna().iloc[0])
    _initial_loss_by_setting(axes[0, 0], have, vocab)
    _initial_loss_vs_sigma(axes[0, 1], have[~zero], vocab)
    _legend(
        fig,
        _tie_handles(marker="o")
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


UNSEEN_X = 0.2  # where tokens that never occur in the training split sit on the log count axis


def _binned_norms(df: pd.DataFrame, col: str, n_bins: int = 12) -> pd.DataFrame:
    """Median and IQR of ``col`` per quantile bin of log count (each bin holds about as many
    tokens, so the few very frequent ones are no bin of their own); count 0 sits at UNSEEN_X."""
    d = df[df["count"].notna() & df[col].notna()].astype({"count": float})
    seen = d[d["count"] > 0]
    groups = [(UNSEEN_X, d.loc[d["count"] == 0, col])] if (d["count"] == 0).any() else []
    bins = pd.qcut(np.log10(seen["count"]), n_bins, duplicates="drop") if len(seen) else []
    groups += [(float(g["count"].median()), g[col]) for _, g in seen.groupby(bins, observed=True)]
    return pd.DataFrame(
        [(x, v.median(), v.quantile(0.25), v.quantile(0.75), len(v)) for x, v in groups],
        columns=["x", "median", "q25", "q75", "n"],
    )


def _norms_panel(ax, cell: pd.DataFrame, token_probes: pd.DataFrame) -> None:
    """(a) row norm vs train-split count: median per log bin (embedding: IQR band), head dashed."""
    drawn, max_count, init_norm = False, 1.0, None
    for _, r in cell.iterrows():
        tp = token_probes[token_probes["run_id"] == r["run_id"]]
        if tp.empty or tp["count"].isna().all():
            continue
        color = TIE_COLOR[bool(r["tie"])]
        for col, ls in [("emb_norm", "-")] + ([] if r["tie"] else [("head_norm", "--")]):
            b = _binned_norms(tp, col)
            ax.plot(b["x"], b["median"], color=color, ls=ls, marker="." if len(b) < 12 else None)
            if col == "emb_norm":
                ax.fill_between(b["x"], b["q25"], b["q75"], color=color, alpha=0.15, lw=0)
        drawn, max_count = True, max(max_count, float(tp["count"].max()))
        if pd.notna(r["init_std_resolved_emb"]) and pd.notna(r["n_embd"]):
            init_norm = float(r["init_std_resolved_emb"]) * math.sqrt(int(r["n_embd"]))
    if not drawn:
        return _note(ax, "no probe arrays with token frequencies for these runs")
    if init_norm:
        ax.axhline(init_norm, color=REF_COLOR, ls=":", lw=1)
    ax.set_xscale("log")
    ax.set_xlabel("token count in training split")
    _plain_log(
        ax, "y", token_probes.loc[token_probes["run_id"].isin(cell["run_id"]), "emb_norm"], ratio=20
    )
    n_decades = int(math.ceil(math.log10(max(max_count, 10)))) + 1
    decades = list(range(n_decades))[:: 2 if n_decades > 5 else 1]
    ax.set_xticks(
        [UNSEEN_X] + [10.0**k for k in decades], ["0"] + [f"$10^{{{k}}}$" for k in decades]
    )
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlim(UNSEEN_X / 1.6, max_count * 1.6)


STRATA = ["unseen", "rare", "frequent", "all"]  # "all": runs probed before the strata existed


def _strata_panel(ax, cell: pd.DataFrame, cosines: pd.DataFrame, kind: str) -> None:
    """(b, c) off-diagonal cosines of E·Eᵀ per vocabulary stratum at the last probe: median and
    interquartile range, tied (filled) beside untied (open); the first probe (init) in grey."""
    c = cosines[cosines["run_id"].isin(cell["run_id"]) & (cosines["kind"] == kind)]
    if c.empty:
        return _note(ax, f"no {kind} cosines per stratum (probes/*.npz) for these runs")
    strata = [s for s in STRATA if s in set(c["stratum"])]
    for x, stratum in enumerate(strata):
        for dx, (which, tie) in zip(
            (-0.25, -0.08, 0.08, 0.25),
            (("first", True), ("last", True), ("first", False), ("last", False)),
        ):
            v = c[
                (c["stratum"] == stratum)
                & (c["which"] == which)
                & c["run_id"].isin(cell.loc[cell["tie"] == tie, "run_id"])
            ]["cos"]
            if v.empty:
                continue
            q = v.quantile([0.25, 0.5, 0.75]).to_numpy()
            color = TIE_COLOR[tie] if which == "last" else REF_COLOR
            ax.errorbar(
                x + dx,
                q[1],
                yerr=[[q[1] - q[0]], [q[2] - q[1]]],
                marker="o",
                ms=3.5,
                capsize=2,
                color=color,
                mfc=color if tie else "white",
            )
    ax.axhline(0, color="black", lw=0.8, ls="--")
    ax.set_xticks(range(len(strata)), strata)
    ax.set_xlim(-0.5, len(strata) - 0.5)
    ax.grid(axis="x", visible=False)


def _in_out_panel(ax, cell: pd.DataFrame, token_probes: pd.DataFrame) -> None:
    """(c) untied: cosine between each token's input and output vector, against N(0, 1/d)."""
    untied = cell[cell["tie"] == False]
    io = token_probes[token_probes["run_id"].isin(untied["run_id"])]["in_out_cos"].dropna()
    if untied.empty or io.empty:
        return _note(
            ax,
            "tied only: input and output vectors are one (cos = 1)"
            if untied.empty
            else "no in_out_cos in the untied run's probes",
        )
    lim = min(1.0, max(0.25, float(np.nanpercentile(np.abs(io), 99.5)) * 1.15))
    ax.hist(io, bins=np.linspace(-lim, lim, 61), density=True, color=TIE_COLOR[False], alpha=0.8)
    ax.axvline(0, color="black", lw=0.8, ls="--")
    xs = np.linspace(
        -lim, lim, 200
    )  # two independent random vectors in d dimensions: cos ~ N(0, 1/d)
    ax.plot(
        xs,
        stats.norm.pdf(xs, scale=1 / math.sqrt(untied["n_embd"].iloc[0])),
        color=REF_COLOR,
        lw=1,
        ls=":",
    )
    ax.set_xlabel("cos(input vector, output vector)")


@figure(
    "fig4_embedding_geometry",
    "norms vs frequency, E·Eᵀ cosines per vocabulary stratum, input-output cosines",
)
def fig_embedding_geometry(runs: pd.DataFrame) -> Figure:
    """Embedding geometry at the last probe of one run per tie and init std (a column each): (a) row
    norm vs token count, (b) off-diagonal cosines of E·Eᵀ per vocabulary stratum, (c) the same
    mean-centred, (d) untied: input-output cosine per token. The strata keep apart what a uniform
    sample mixes: tokens never seen in training (untied: at init; tied: pushed onto one direction)."""
    shown = A.representative_runs(runs)
    token_probes, cosines, inits = (
        A.load_token_probes(shown),
        A.load_stratum_cosines(shown),
        _init_order(shown),
    )
    fig, axes = _figure(4, len(inits), 1.6)
    fig.skipped += token_probes.attrs["missing"] + cosines.attrs["missing"]
    if n_other := len(runs) - len(shown):
        fig.skipped.append(
            f"{n_other} other run(s): one run per tie and init std is shown "
            f"(largest size, lowest seed, finished first)"
        )
    seen = shown["seen_vocab_frac"].dropna()
    if len(seen):
        fig.flagged.append(
            f"{seen.iloc[0]:.1%} of the vocabulary occurs in the training split (seen_vocab_frac)"
        )
    for j, init in enumerate(inits):
        cell = shown[shown["setting"] == init]
        axes[0, j].set_title(_init_label(init))
        _norms_panel(axes[0, j], cell, token_probes)
        _strata_panel(axes[1, j], cell, cosines, "raw")
        _strata_panel(axes[2, j], cell, cosines, "centred")
        _in_out_panel(axes[3, j], cell, token_probes)
    for ax, label in zip(
        axes[:, 0], ("row norm", "cos of E·Eᵀ", "centred cos", "density (untied)")
    ):
        ax.set_ylabel(label)
    handles = _tie_handles(marker="o") + [
        Line2D([], [], color=REF_COLOR, marker="o", label="init (first probe): median, IQR"),
        Line2D([], [], color="#444444", ls="--", label="head (untied)"),
        Line2D(
            [],
            [],
            color=REF_COLOR,
            ls=(0, (1, 3)),
            label=r"init norm $\sigma_\mathrm{init}\sqrt{d}$",
        ),
        Line2D([], [], color=REF_COLOR, ls=":", lw=1, label="independent random: N(0, 1/d)"),
    ]
    steps = token_probes["probe_step"].unique()  # the title rides on the legend
    title = f"{shown['model'].iloc[0]}, last probe" + (
        f" (step {steps[0]})" if len(steps) == 1 else " per run"
    )
    _legend(fig, handles, 3, title=title if len(steps) else None, title_fontsize=8)
    return fig


@figure("fig5_grad_split", "tied: input- vs output-side gradient norm", uses=("runs", "history"))
def fig_grad_split(runs: pd.DataFrame, history: pd.DataFrame) -> Figure:
    """Tied runs: input-side (lookup, solid) vs output-side (head, dashed) gradient norm of the one
    embedding matrix, mean over seeds, a column per init std; below, their ratio out/in per size:
    geometric mean with a t-interval in log space (below 3 seeds: each seed). The norms are
    pre-clip; how often clipping acted is noted per init std (clip_frac)."""
    inits, models = _init_order(runs), _model_order(runs)
    fig, axes = _figure(2, len(inits), 1.8, sharex="col")
    if n := int((runs["tie"] == False).sum()):
        fig.skipped.append(f"{n} untied run(s) (the figure shows tied runs)")
    keys = ("train/grad_norm_in", "train/grad_norm_out")
    if missing := [k for k in keys if k not in history.columns or history[k].isna().all()]:
        fig.skipped.append(f"all runs: {', '.join(missing)} not logged")
        for ax in axes.flat:
            _note(ax, "gradient split not logged")
        return fig
    h = history[history["tie"] == True]
    h = h.assign(ratio=h[keys[1]] / h[keys[0]])
    logged = set(h.loc[h[keys[0]].notna(), "run_id"])
    for _, r in runs[runs["tie"] == True].iterrows():
        if r["run_id"] not in logged or r["status"] not in ("finished", "running"):
            fig.skipped.append(
                f"{_run_label(r)}: "
                + (
                    f"{r['status']}, not averaged"
                    if r["run_id"] in logged
                    else f"no gradient norms logged ({r['status']})"
                )
            )
    for j, init in enumerate(inits):
        ax, axr = axes[0, j], axes[1, j]
        ax.set_title(_init_label(init))
        hc = h[h["setting"] == init]
        if hc.empty:
            for a in (ax, axr):
                _note(a, "no runs")
            continue
        for k, model in enumerate(models):
            hm = hc[hc["model"] == model]
            if hm.empty:
                continue
            mk = (
                {"marker": MARKERS[k % len(MARKERS)], "ms": 3, "markevery": 0.2}
                if len(models) > 1
                else {}
            )
            for key, ls in zip(keys, ("-", "--")):
                _mean_line(ax, hm, key, True, ["model"], ls=ls, **mk)
            _mean_line(axr, hm, "ratio", True, ["model"], 0.15, log=True, **mk)
        _plain_log(ax, "y")
        clip = runs.loc[(runs["setting"] == init) & (runs["tie"] == True), "clip_frac"].dropna()  # noqa: E712
        if len(clip):
            fig.flagged.append(
                f"{_init_label(init, short=True)}: gradient clipped on {clip.min():.0%}–{clip.max():.0%} "
                "of steps (the norms drawn are before clipping)"
            )
        axr.axhline(1, color=REF_COLOR, ls=":", lw=1)
        _plain_log(axr, "y", hc["ratio"], ratio=3)
        axr.set_xlabel("training tokens")
        axr.xaxis.set_major_formatter(EngFormatter(sep=""))
    axes[0, 0].set_ylabel("gradient norm")
    axes[1, 0].set_ylabel("output / input side")
    handles = [
        Line2D([], [], color=TIE_COLOR[True], ls=ls, label=f"tied: {side} side ({part})")
        for ls, side, part in (("-", "input", "lookup"), ("--", "output", "head"))
    ]
    handles += [
        Line2D(
            [],
            [],
            color="#444444",
            marker=MARKERS[k % len(MARKERS)],
            ls="none",
            label=_model_label(runs, m),
        )
        for k, m in enumerate(models)
        if len(models) > 1
    ]
    handles.append(
        Line2D([], [], color="none", label="pre-clip norms; ratio: geometric mean, log-space CI")
    )
    _legend(fig, handles, 4)
    return fig


UNTIE_COLOR = {"keep": TIE_COLOR[True], "copy": TIE_COLOR[False], "fresh": "#009E73"}
TRAINABLE_STYLE = {
    "all": ("-", "o"),
    "head": ("--", "s"),
    "body": (":", "^"),
    "embedding": ("-.", "D"),
}


def _finetune_mode(variant: str) -> tuple[str, str]:
    """(untie, trainable) from a run's variant ("finetune.trainable=head, finetune.untie=copy")."""
    kv = dict(p.split("=", 1) for p in str(variant or "").split(", ") if "=" in p)
    return kv.get("finetune.untie", "keep"), kv.get("finetune.trainable", "all")


@figure(
    "fig7_finetune",
    "fine-tuning: retention and embedding drift vs fine-tuning loss, per untie x trainable",
    uses=("runs", "history"),
)
def fig_finetune(runs: pd.DataFrame, history: pd.DataFrame) -> Figure:
    """Fine-tuning runs (init_from) as trajectories over their evaluations, from the start (step 0,
    shared) on: (a) the loss on the start's own data (retention) and (b) 1 − cosine of each
    embedding row to its step-0 value, tokens seen (solid) and unseen (dashed) in the fine-tuning
    data, against the fine-tuning validation loss. Colour: finetune.untie; line and marker:
    finetune.trainable. One run per mode (the lowest seed); others are listed as left out."""
    fig, axes = _figure(1, 2, 2.8)
    keys = ("val/loss", "retain/loss", "drift/emb_cos_seen")
    if missing := [k for k in keys if k not in history.columns]:
        for ax in axes.flat:
            _note(ax, f"not fine-tuning runs: no {', '.join(missing)} logged")
        return fig
    shown = (
        runs.sort_values("seed")
        .assign(mode=runs["variant"].map(_finetune_mode))
        .drop_duplicates("mode")
    )
    fig.skipped += [
        f"{_run_label(r)}: another seed of a mode shown"
        for _, r in runs.drop(shown.index).iterrows()
    ]
    for _, r in shown.iterrows():
        h = history[(history["run_id"] == r["run_id"]) & history["val/loss"].notna()].sort_values(
            "step"
        )
        (untie, trainable), color = r["mode"], UNTIE_COLOR.get(r["mode"][0], "#444444")
        ls, marker = TRAINABLE_STYLE.get(trainable, ("-", "o"))
        kw = dict(
            color=color, marker=marker, ms=3, lw=1, mfc="white" if untie == "fresh" else color
        )
        axes[0, 0].plot(h["val/loss"], h["retain/loss"], ls=ls, **kw)
        axes[0, 1].plot(h["val/loss"], 1 - h["drift/emb_cos_seen"], ls="-", **kw)
        if "drift/emb_cos_unseen" in h:
            axes[0, 1].plot(
                h["val/loss"], 1 - h["drift/emb_cos_unseen"], ls="--", **{**kw, "mfc": "white"}
            )
    axes[0, 0].set_ylabel("loss on the start's data (nats)")
    axes[0, 1].set_ylabel("embedding drift: 1 − cos(row, step-0 row)")
    axes[0, 1].set_yscale("symlog", linthresh=1e-4)
    for ax in axes[0]:
        ax.set_xlabel("fine-tuning validation loss (nats)")
        ax.invert_xaxis()  # training runs left to right
    handles = [Line2D([], [], color=c, lw=2, label=f"untie={u}") for u, c in UNTIE_COLOR.items()]
    handles += [
        Line2D([], [], color="#444444", ls=ls, marker=m, ms=3, label=f"trainable={t}")
        for t, (ls, m) in TRAINABLE_STYLE.items()
    ]
    handles.append(
        Line2D([], [], color="#444444", ls="--", mfc="white", label="(b) dashed: tokens unseen")
    )
    _legend(fig, handles, 4)
    return fig


def write_param_tables(out_dir: str | Path, runs: pd.DataFrame | None = None) -> list[Path]:
    """:func:`analysis.parameter_table` as ``table_params.md`` and ``.tex`` in ``out_dir`` (counts
    with thousands separators), for the runs' vocabulary when they share one, else GPT-2's 50257."""
    vocab = runs["vocab_size"].dropna().unique() if runs is not None else []
    table = A.parameter_table(int(vocab[0]) if len(vocab) == 1 else 50257).rename(
        columns=lambda c: c.replace("_", " ")
    )
    tex = table.to_latex(
        index=False, float_format="%.3f", formatters={c: "{:,}".format for c in table.columns[5:-1]}
    )
    texts = {
        "md": table.to_markdown(index=False, intfmt=",") + "\n",
        "tex": tex.replace(",", "{,}"),
    }
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    paths = [Path(out_dir, f"table_params.{ext}") for ext in texts]
    for path, text in zip(paths, texts.values()):
        path.write_text(text)
    return paths


REGISTRY["table_params"] = Output(
    "parameters of every named size, tied and untied (md, tex)",
    lambda results, out_dir, formats: (write_param_tables(out_dir, results.runs), None),
)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m tiedvsuntied.figures",
        description="Regenerate every figure of the paper from sweep directories (or a W&B project).",
        epilog="Outputs: " + "; ".join(f"{k} ({v.description})" for k, v in REGISTRY.items()),
    )
    ap.add_argument(
        "sweep_dirs",
        nargs="*",
        metavar="SWEEP_DIR",
        help="sweep directories (results/<sweep>/), run directories, or a results directory",
    )
    ap.add_argument(
        "--out", required=True, help="directory for the figure files (created if missing)"
    )
    ap.add_argument(
        "--formats", default="pdf,png", help="comma-separated: pdf, png, svg (default: pdf,png)"
    )
    ap.add_argument(
        "--only", default=None, help=f"comma-separated subset of: {', '.join(REGISTRY)}"
    )
    ap.add_argument(
        "--data-id", default=None, help="use only runs with this data_id (for mixed sweeps)"
    )
    ap.add_argument(
        "--wandb",
        default=None,
        metavar="ENTITY/PROJECT",
        help="read runs from W&B instead (online)",
    )
    ap.add_argument("--group", default=None, help="with --wandb: one W&B group (= sweep)")
    args = ap.parse_args(argv)
    formats, only = (
        args.formats.lower().split(","),
        args.only.split(",") if args.only else list(REGISTRY),
    )
    if set(formats) - {"pdf", "png", "svg"}:
        ap.error(f"--formats {args.formats!r}: valid formats are pdf, png, svg")
    if unknown := [s for s in only if s not in REGISTRY]:
        ap.error(f"--only: unknown figure(s) {unknown}; valid: {', '.join(REGISTRY)}")
    if bool(args.sweep_dirs) == bool(args.wandb):
        ap.error("give one or more SWEEP_DIRs or --wandb ENTITY/PROJECT (not both)")
    try:
        results = A.load(
            args.sweep_dirs, wandb_project=args.wandb, wandb_group=args.group, data_id=args.data_id
        )
    except (A.ResultsError, A.WandbUnavailableError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(
        f"{len(results.runs)} runs: "
        + ", ".join(f"{n} {s}" for s, n in results.runs["status"].value_counts().items())
    )
    for note in results.notes:
        print(f"note: {note}")
    failed = False
    for name in only:  # one output failing does not stop the others
        try:
            files, fig = REGISTRY[name].write(results, Path(args.out), formats)
        except (A.ResultsError, KeyError, ValueError, ImportError, OSError) as e:
            print(f"{name}: NOT MADE: {type(e).__name__}: {e}", file=sys.stderr)
            failed = True
            continue
        print(f"{name}: " + ", ".join(str(p) for p in files))
        _print_notes(fig, "    ")
    return int(failed)
