"""Figures 4 and 7-9, the embedding: its geometry at the last probe (norms vs frequency, E·Eᵀ
cosines per vocabulary stratum, input-output cosines) and over training which side a tied matrix
resembles (linear CKA with its untied partner's input and output; Lopardo et al. 2026: closer to
the *output*), its anisotropy, and its drift when fine-tuned. What CKA is and is not, and why the
input side starts at 1: docs/figures.md."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from scipy import stats

from tiedvsuntied.analysis.probes import load_stratum_cosines, load_token_probes
from tiedvsuntied.analysis.stats import PAIR_COLUMNS, first_replicates, match, representative_runs
from tiedvsuntied.figures import style
from tiedvsuntied.figures.loss import set_x_axis
from tiedvsuntied.results.metrics import (
    DRIFT_EMB_COS_SEEN,
    DRIFT_EMB_COS_UNSEEN,
    PROBE_,
    RETAIN_LOSS,
    VAL_LOSS,
)

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


SIDES = {
    "cka_in": ("tied vs untied input (wte)", {"color": style.TIE_COLOR[False], "ls": "-"}),
    "cka_out": ("tied vs untied output (lm_head)", {"color": style.TIE_COLOR[True], "ls": "-"}),
    "cka_untied": ("untied: input vs output", {"color": style.REF_COLOR, "ls": ":"}),
}


def linear_cka(x: np.ndarray, y: np.ndarray) -> float:
    """Linear CKA of two representations of the same n items (n x d1, n x d2): 1 for x = y up to
    a rotation and a scale, near 0 for unrelated ones."""
    x, y = (np.asarray(a, dtype=np.float64) for a in (x, y))
    x, y = x - x.mean(0), y - y.mean(0)
    return float(np.linalg.norm(y.T @ x) ** 2 / (np.linalg.norm(x.T @ x) * np.linalg.norm(y.T @ y)))


def _seen_rows(run: pd.Series) -> dict[int, dict[str, np.ndarray]]:
    """{probe step: {rows_seen, emb_seen[, head_seen]}} of a run's probe files that have them."""
    out = {}
    for path in sorted(Path(run.get("path") or "-", "probes").glob("step_*.npz")):
        with np.load(path) as z:
            if "emb_seen" in z.files:
                out[int(path.stem.removeprefix("step_"))] = {
                    k: z[k] for k in ("rows_seen", "emb_seen", "head_seen") if k in z.files
                }
    return out


def pair_cka(runs: pd.DataFrame) -> pd.DataFrame:
    """Per tied/untied pair (analysis.match on PAIR_COLUMNS; IN_MEAN statuses, replicate 0) and
    common probe step with the same seen rows: cka_in, cka_out and cka_untied (see SIDES). Pairs
    without the probe rows, or whose rows differ (other data), are in ``.attrs["missing"]``."""
    rows, missing = [], []
    usable = first_replicates(runs[runs["status"].isin(style.IN_MEAN)])
    both = match(usable[usable["tie"].eq(True)], usable[usable["tie"].eq(False)], PAIR_COLUMNS)
    for _, pair in both.iterrows():
        tied, untied = (
            pair.rename(lambda c, s=suffix: c.removesuffix(s)) for suffix in ("_t", "_u")
        )
        a, b = _seen_rows(tied), _seen_rows(untied)
        same = [
            s
            for s in sorted(set(a) & set(b))
            if np.array_equal(a[s]["rows_seen"], b[s]["rows_seen"])
        ]
        if not same:
            why = "and its untied partner: no common probe rows (emb_seen)"
            missing.append(f"{style.run_label(tied)} {why}")
        rows += [
            {
                **tied[[*PAIR_COLUMNS, "setting", "run_id"]].to_dict(),
                "step": step,
                "tokens": step * tied["tokens"] / max(tied["step"], 1),
                "cka_in": linear_cka(a[step]["emb_seen"], b[step]["emb_seen"]),
                "cka_out": linear_cka(a[step]["emb_seen"], b[step]["head_seen"]),
                "cka_untied": linear_cka(b[step]["emb_seen"], b[step]["head_seen"]),
                "status": "finished",
            }
            for step in same
        ]
    out = pd.DataFrame(
        rows, columns=[*PAIR_COLUMNS, "setting", "step", "tokens", *SIDES, "run_id", "status"]
    )
    out.attrs["missing"] = missing
    return out


@style.figure(
    "fig8_cka",
    "which side the tied matrix resembles: CKA with the untied partner's input and output",
)
def fig_cka(runs: pd.DataFrame) -> Figure:
    """Linear CKA over training between a tied run's matrix and its untied partner's input and
    output matrices, the untied run's own pair as a reference (docs/figures.md, figure 8)."""
    cka, models = pair_cka(runs), style.model_order(runs)
    inits = [i for i in style.init_order(runs) if i in set(cka["setting"])] or ["none"]
    fig, axes = style.new_figure(1, len(inits), 2.4, sharey=True)
    fig.skipped += cka.attrs["missing"]
    if cka.empty:
        why = "runs made before them, a bundle (it keeps none), or unpaired"
        return style.nothing_to_draw(fig, f"no tied/untied pairs with probe rows (emb_seen): {why}")
    for j, init in enumerate(inits):
        ax, cell = axes[0, j], cka[cka["setting"] == init]
        ax.set_title(style.setting_label(runs, init))
        if cell.empty:
            style.note(ax, "no tied/untied pairs with probe rows (emb_seen) at this init std")
            continue
        for sized, markers in style.sizes(cell, models):
            for side, (_, line) in SIDES.items():
                style.mean_line(ax, sized, side, True, ["model"], 0.15, **line, **markers)
        set_x_axis(ax, "tokens", log=False, last_row=True)
        ax.set_ylim(0, 1.02)
    axes[0, 0].set_ylabel("linear CKA (seen tokens)")
    handles = [style.handle(label, **line) for label, line in SIDES.values()]
    style.legend(fig, handles + style.size_handles(runs, models), 3)
    return fig


ANISOTROPY = ("cos_mean", "ccos_abs_mean")  # of probe/frequent/{emb,head}_: raw, centred


def _anisotropy_column(axes, h: pd.DataFrame, markers: dict) -> None:
    """Raw (top) and centred (bottom) anisotropy of one init std and size: tied, untied input
    (solid) and untied output (dashed), each where logged."""
    for row, ax in enumerate(axes):
        for tie, side, ls in ((True, "emb", "-"), (False, "emb", "-"), (False, "head", "--")):
            key = f"{PROBE_}frequent/{side}_{ANISOTROPY[row]}"
            if key in h and len(hs := h[(h["tie"] == tie) & h[key].notna()]):
                style.mean_line(ax, hs, key, tie, ["model"], 0.15, ls=ls, **markers)


@style.figure(
    "fig9_anisotropy",
    "anisotropy over training: mean cosine of embedding rows, raw and mean-centred",
)
def fig_anisotropy(runs: pd.DataFrame, history: pd.DataFrame) -> Figure:
    """The mean cosine between rows of the frequent seen tokens (raw: one common direction shows
    here) and the mean |cosine| after removing their mean row (centred: anisotropy beyond it),
    over training (docs/figures.md, figure 9)."""
    drift = history.reindex(columns=["run_id", DRIFT_EMB_COS_SEEN]).dropna()  # fine-tuning's
    tuned = runs["run_id"].isin(drift["run_id"])
    inits, models = style.init_order(runs[~tuned]), style.model_order(runs[~tuned])
    fig, axes = style.new_figure(1 + bool(inits), max(len(inits), 1), 1.8, sharex="col")
    style.leave_out(fig, runs[tuned], "a fine-tuning run (its embedding drift is figure 7)")
    if tuned.all():
        why = "only fine-tuning runs: their embedding drift is figure 7"
        return style.nothing_to_draw(fig, why)
    fig.skipped.append("rare and unseen strata (logged as probe/rare/*, probe/unseen/*)")
    if f"{PROBE_}frequent/emb_cos_mean" not in history.columns:
        why = "no stratified probes logged (probe/frequent/emb_cos_mean)"
        return style.nothing_to_draw(fig, why)
    runs = fig.drawn = runs[~tuned]
    for j, init in enumerate(inits):
        axes[0, j].set_title(style.setting_label(runs, init))
        for h, markers in style.sizes(history[history["setting"] == init], models):
            _anisotropy_column(axes[:, j], h, markers)
        set_x_axis(axes[1, j], "tokens", log=False, last_row=True)
    axes[0, 0].set_ylabel("mean cosine (raw)")
    axes[1, 0].set_ylabel("mean |cosine|, centred")
    handles = [
        style.handle(label, style.TIE_COLOR[tie], ls=ls)
        for tie, ls, label in (
            (True, "-", "tied"),
            (False, "-", "untied input (wte)"),
            (False, "--", "untied output (lm_head)"),
        )
        if runs["tie"].eq(tie).any()  # the legend names what is drawn
    ]
    style.legend(fig, handles + style.size_handles(runs, models), 3)
    return fig


UNTIE_COLOR = {"keep": style.TIE_COLOR[True], "copy": style.TIE_COLOR[False], "fresh": "#009E73"}
TRAINABLE_STYLE = {
    "all": ("-", "o"),
    "head": ("--", "s"),
    "body": (":", "^"),
    "embedding": ("-.", "D"),
}


@style.figure(
    "fig7_finetune",
    "fine-tuning: retention and embedding drift vs fine-tuning loss, per untie x trainable",
)
def fig_finetune(runs: pd.DataFrame, history: pd.DataFrame) -> Figure:
    """Fine-tuning runs (init_from): retention and embedding drift against the fine-tuning
    validation loss, one run per mode (the lowest seed) (docs/figures.md, figure 7)."""
    fig, axes = style.new_figure(1, 2, 2.8)
    keys = (VAL_LOSS, RETAIN_LOSS, DRIFT_EMB_COS_SEEN)
    if missing := [k for k in keys if k not in history.columns]:
        return style.nothing_to_draw(fig, f"not fine-tuning runs: no {', '.join(missing)} logged")
    variant = runs["variant"].fillna("").astype(str)  # "finetune.trainable=head, head.untie=copy"
    untie = variant.str.extract(r"head\.untie=(\w+)", expand=False).fillna("keep")
    trainable = variant.str.extract(r"finetune\.trainable=(\w+)", expand=False).fillna("all")
    runs = runs.assign(untie=untie, trainable=trainable)
    shown = runs.sort_values("seed").drop_duplicates(["untie", "trainable"])
    style.leave_out(fig, runs.drop(shown.index), "another seed of a mode shown")
    fig.drawn = shown
    for _, r in shown.iterrows():
        h = history[(history["run_id"] == r["run_id"]) & history[VAL_LOSS].notna()]
        h = h.sort_values("step")
        color = UNTIE_COLOR.get(r["untie"], "#444444")
        ls, marker = TRAINABLE_STYLE.get(r["trainable"], ("-", "o"))
        kw = {"color": color, "marker": marker, "ms": 3, "lw": 1}
        kw["mfc"] = "white" if r["untie"] == "fresh" else color
        axes[0, 0].plot(h[VAL_LOSS], h[RETAIN_LOSS], ls=ls, **kw)
        axes[0, 1].plot(h[VAL_LOSS], 1 - h[DRIFT_EMB_COS_SEEN], ls="-", **kw)
        if DRIFT_EMB_COS_UNSEEN in h:
            unseen = 1 - h[DRIFT_EMB_COS_UNSEEN]
            axes[0, 1].plot(h[VAL_LOSS], unseen, ls="--", **{**kw, "mfc": "white"})
    axes[0, 0].set_ylabel("loss on the start's data (nats)")
    axes[0, 1].set_ylabel("embedding drift: 1 − cos(row, step-0 row)")
    axes[0, 1].set_yscale("symlog", linthresh=1e-4)
    for ax in axes[0]:
        ax.set_xlabel("fine-tuning validation loss (nats)")
        ax.invert_xaxis()  # training runs left to right
    handles = [style.handle(f"untie={u}", c, lw=2) for u, c in UNTIE_COLOR.items()]
    handles += [
        style.handle(f"trainable={t}", ls=ls, marker=m, ms=3)
        for t, (ls, m) in TRAINABLE_STYLE.items()
    ]
    handles.append(style.handle("(b) dashed: tokens unseen", ls="--", mfc="white"))
    style.legend(fig, handles, 4)
    return fig
