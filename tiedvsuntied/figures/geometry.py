"""Figure 4: embedding geometry at the last probe (norms vs frequency, E·Eᵀ cosines per
vocabulary stratum, input-output cosines)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from scipy import stats

from tiedvsuntied.analysis.probes import load_stratum_cosines, load_token_probes
from tiedvsuntied.analysis.stats import representative_runs
from tiedvsuntied.figures import style

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
    probed = token_probes[token_probes["count"].notna()]
    probed = probed[probed["run_id"].isin(cell["run_id"])]
    if probed.empty:
        return style.note(ax, "no probe arrays with token frequencies for these runs")
    cell = cell[cell["run_id"].isin(probed["run_id"])]
    for _, r in cell.iterrows():
        tp, color = probed[probed["run_id"] == r["run_id"]], style.TIE_COLOR[bool(r["tie"])]
        for col, ls in [("emb_norm", "-")] + ([] if r["tie"] else [("head_norm", "--")]):
            b = _binned_norms(tp, col)
            ax.plot(b["x"], b["median"], color=color, ls=ls, marker="." if len(b) < 12 else None)
            if col == "emb_norm":
                ax.fill_between(b["x"], b["q25"], b["q75"], color=color, alpha=0.15, lw=0)
    init_norms = cell["init_std_resolved_emb"].astype(float) * np.sqrt(cell["n_embd"].astype(float))
    for init_norm in init_norms.dropna().iloc[-1:]:
        ax.axhline(init_norm, color=style.REF_COLOR, ls=":", lw=1)
    ax.set_xscale("log")
    ax.set_xlabel("token count in training split")
    style.plain_log(ax, "y", probed["emb_norm"], ratio=20)
    ax.set_xticks([UNSEEN_X], ["0"], minor=True)  # the decades: matplotlib's log ticks
    ax.set_xlim(UNSEEN_X / 1.6, max(1.0, probed["count"].max()) * 1.6)


STRATA = ["unseen", "rare", "frequent", "all"]  # "all": runs probed before the strata existed
# where a stratum's points sit: the init (which "0") and the last probe, tied then untied
STRATA_POINTS = list(
    zip((-0.25, -0.08, 0.08, 0.25), ("0", "last") * 2, (True, True, False, False), strict=True)
)


def _strata_panel(ax, cell: pd.DataFrame, cosines: pd.DataFrame, kind: str) -> None:
    """(b, c) off-diagonal cosines of E·Eᵀ per vocabulary stratum at the last probe: median and
    IQR, tied (filled) beside untied (open), the step-0 probe (init) in grey; asked for by step
    ("0"): a bundle that kept no step-0 probe draws no init, rather than its first kept probe."""
    c = cosines[cosines["run_id"].isin(cell["run_id"]) & (cosines["kind"] == kind)]
    if c.empty:
        return style.note(ax, f"no {kind} cosines per stratum (probes/*.npz) for these runs")
    strata = [s for s in STRATA if s in set(c["stratum"])]
    for (x, stratum), (dx, which, tie) in itertools.product(enumerate(strata), STRATA_POINTS):
        ids = cell.loc[cell["tie"] == tie, "run_id"]
        v = c[(c["stratum"] == stratum) & (c["which"] == which) & c["run_id"].isin(ids)]["cos"]
        if v.empty:
            continue
        low, mid, high = v.quantile([0.25, 0.5, 0.75])
        color = style.TIE_COLOR[tie] if which == "last" else style.REF_COLOR
        point = {"marker": "o", "ms": 3.5, "capsize": 2, "mfc": color if tie else "white"}
        ax.errorbar(x + dx, mid, yerr=[[mid - low], [high - mid]], color=color, **point)
    ax.axhline(0, color="black", lw=0.8, ls="--")
    ax.set_xticks(range(len(strata)), strata)
    ax.set_xlim(-0.5, len(strata) - 0.5)
    ax.grid(axis="x", visible=False)


def _in_out_panel(ax, cell: pd.DataFrame, token_probes: pd.DataFrame) -> None:
    """(c) untied: cosine between each token's input and output vector, against N(0, 1/d)."""
    untied = cell[cell["tie"].eq(False)]
    io = token_probes[token_probes["run_id"].isin(untied["run_id"])]["in_out_cos"].dropna()
    if untied.empty:
        return style.note(ax, "tied only: input and output vectors are one (cos = 1)")
    if io.empty:
        return style.note(ax, "no in_out_cos in the untied run's probes")
    lim = min(1.0, max(0.25, float(np.nanpercentile(np.abs(io), 99.5)) * 1.15))
    bins = np.linspace(-lim, lim, 61)
    ax.hist(io, bins=bins, density=True, color=style.TIE_COLOR[False], alpha=0.8)
    ax.axvline(0, color="black", lw=0.8, ls="--")
    # two independent random vectors in d dimensions: cos ~ N(0, 1/d)
    xs = np.linspace(-lim, lim, 200)
    random = stats.norm.pdf(xs, scale=1 / math.sqrt(untied["n_embd"].iloc[0]))
    ax.plot(xs, random, color=style.REF_COLOR, lw=1, ls=":")
    ax.set_xlabel("cos(input vector, output vector)")


@style.figure(
    "fig4_embedding_geometry",
    "norms vs frequency, E·Eᵀ cosines per vocabulary stratum, input-output cosines",
)
def fig_embedding_geometry(runs: pd.DataFrame) -> Figure:
    """Embedding geometry at the last probe of one run per tie and init std (docs/figures.md,
    figure 4). The strata keep apart what a uniform sample mixes: tokens never seen in training
    (untied: at init; tied: pushed onto one direction)."""
    shown = representative_runs(runs)
    token_probes, inits = load_token_probes(shown), style.init_order(shown)
    cosines = load_stratum_cosines(shown, (0, "last"))
    fig, axes = style.new_figure(4, len(inits), 1.6)
    fig.skipped += token_probes.attrs["missing"] + cosines.attrs["missing"]
    fig.drawn = shown
    if token_probes.empty and cosines.empty:
        return style.nothing_to_draw(fig, "no probe arrays (norms, cosines) for these runs")
    if n_other := len(runs) - len(shown):
        why = "one run per tie and init std is shown (largest size, lowest seed, finished first)"
        fig.skipped.append(f"{n_other} other run(s): {why}")
    if len(seen := shown["seen_vocab_frac"].dropna()):
        fig.flagged.append(
            f"{seen.iloc[0]:.1%} of the vocabulary occurs in the training split (seen_vocab_frac)"
        )
    for (norms, raw, centred, in_out), init in zip(axes.T, inits, strict=True):
        cell = shown[shown["setting"] == init]
        norms.set_title(style.setting_label(shown, init))
        _norms_panel(norms, cell, token_probes)
        _strata_panel(raw, cell, cosines, "raw")
        _strata_panel(centred, cell, cosines, "centred")
        _in_out_panel(in_out, cell, token_probes)
    labels = ("row norm", "cos of E·Eᵀ", "centred cos", "density (untied)")
    for ax, label in zip(axes[:, 0], labels, strict=True):
        ax.set_ylabel(label)
    handles = style.tie_handles(shown["tie"]) + [
        style.handle("init (step 0): median, IQR", style.REF_COLOR, marker="o"),
        style.handle("head (untied)", ls="--"),
        style.handle(r"init norm $\sigma_\mathrm{init}\sqrt{d}$", style.REF_COLOR, ls=(0, (1, 3))),
        style.handle("independent random: N(0, 1/d)", style.REF_COLOR, ls=":", lw=1),
    ]
    steps = token_probes["probe_step"].unique()  # the title rides on the legend
    probe = f" (step {steps[0]})" if len(steps) == 1 else " per run"
    title = f"{shown['model'].iloc[0]}, last probe{probe}" if len(steps) else None
    style.legend(fig, handles, 3, title=title, title_fontsize=8)
    return fig
