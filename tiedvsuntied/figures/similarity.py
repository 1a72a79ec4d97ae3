"""Figures 8 and 9 of the study axes: which side a tied matrix resembles (linear CKA with its
untied partner's input and output; Lopardo et al. 2026: closer to the *output*), and anisotropy
over training. What CKA is and is not, and why the input side starts at 1: docs/figures.md."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from tiedvsuntied.analysis.stats import PAIR_COLUMNS, first_replicates, match
from tiedvsuntied.figures import style
from tiedvsuntied.figures.loss import set_x_axis

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
            key = f"probe/frequent/{side}_{ANISOTROPY[row]}"
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
    drift = history.reindex(columns=["run_id", "drift/emb_cos_seen"]).dropna()  # fine-tuning's
    tuned = runs["run_id"].isin(drift["run_id"])
    inits, models = style.init_order(runs[~tuned]), style.model_order(runs[~tuned])
    fig, axes = style.new_figure(1 + bool(inits), max(len(inits), 1), 1.8, sharex="col")
    style.leave_out(fig, runs[tuned], "a fine-tuning run (its embedding drift is figure 7)")
    if tuned.all():
        why = "only fine-tuning runs: their embedding drift is figure 7"
        return style.nothing_to_draw(fig, why)
    fig.skipped.append("rare and unseen strata (logged as probe/rare/*, probe/unseen/*)")
    if "probe/frequent/emb_cos_mean" not in history.columns:
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
