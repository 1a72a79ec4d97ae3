"""Which side a tied matrix resembles, and anisotropy over training: two figures of the study axes.

Lopardo et al. (2026) find that a tied matrix ends up closer to an untied model's *output*
embedding than to its input embedding, the output-side gradient dominating early. Here a tied run
and its untied partner (same seed, data and body init: analysis.PAIR_COLUMNS) are compared at each
evaluation with linear CKA (Kornblith et al. 2019) on the seen-token rows the probes keep
(probes: emb_seen, head_seen). CKA is invariant to rotations and isotropic scaling of the
d-dimensional space, which two independently trained models are free to differ by; it is not a
distance, and with about 2k rows of d columns it is biased upwards for large d (a reference line:
the untied run's own input vs output matrix). At step 0 the tied matrix *is* its partner's input
matrix (one seed, one draw), so the input-side CKA starts at 1: what the figure shows is how far
training moves the tied matrix from there towards the output side.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import EngFormatter

from tiedvsuntied import analysis as A
from tiedvsuntied.figures.style import (
    MARKERS,
    REF_COLOR,
    TIE_COLOR,
    _figure,
    _init_label,
    _init_order,
    _legend,
    _mean_line,
    _model_label,
    _model_order,
    _note,
    _run_label,
    figure,
)

SIDES = {
    "cka_in": ("tied vs untied input (wte)", TIE_COLOR[False], "-"),
    "cka_out": ("tied vs untied output (lm_head)", TIE_COLOR[True], "-"),
    "cka_untied": ("untied: input vs output", REF_COLOR, ":"),
}


def _size_handles(runs: pd.DataFrame, models: list[str]) -> list:
    return [
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
    """Per tied/untied pair and common probe step: cka_in, cka_out and cka_untied (see SIDES).
    Pairs without the probe rows, or whose rows differ (other data), are in ``.attrs["missing"]``."""
    rows, missing = [], []
    ok = runs[runs["status"].isin(["finished", "running"])]
    for key, pair in ok.groupby(A.PAIR_COLUMNS, dropna=False):
        if set(pair["tie"]) != {True, False} or len(pair) != 2:
            continue
        tied, untied = (pair[pair["tie"] == t].iloc[0] for t in (True, False))
        a, b = _seen_rows(tied), _seen_rows(untied)
        steps = [
            s
            for s in sorted(set(a) & set(b))
            if np.array_equal(a[s]["rows_seen"], b[s]["rows_seen"])
        ]
        if not steps:
            missing.append(
                f"{_run_label(tied)} and its untied partner: no common probe rows (emb_seen)"
            )
        for s in steps:
            t, u = a[s]["emb_seen"], b[s]
            rows.append(
                {
                    **dict(zip(A.PAIR_COLUMNS, key)),
                    "setting": tied["setting"],
                    "step": s,
                    "tokens": s * tied["tokens"] / max(tied["step"], 1),
                    "cka_in": linear_cka(t, u["emb_seen"]),
                    "cka_out": linear_cka(t, u["head_seen"]),
                    "cka_untied": linear_cka(u["emb_seen"], u["head_seen"]),
                    "run_id": tied["run_id"],
                    "status": "finished",
                }
            )
    out = pd.DataFrame(
        rows, columns=[*A.PAIR_COLUMNS, "setting", "step", "tokens", *SIDES, "run_id", "status"]
    )
    out.attrs["missing"] = missing
    return out


@figure(
    "fig8_cka",
    "which side the tied matrix resembles: CKA with the untied partner's input and output",
    uses=("runs",),
)
def fig_cka(runs: pd.DataFrame) -> Figure:
    """Linear CKA over training between a tied run's matrix and its untied partner's input (wte)
    and output (lm_head) matrices, on the seen tokens the probes sample; the untied run's input vs
    output as a reference. A column per init std; mean over seeds with a t-band from 3 seeds
    (fewer: each seed drawn thin), a marker per size."""
    cka, models = pair_cka(runs), _model_order(runs)
    inits = [i for i in _init_order(runs) if i in set(cka["setting"])] or ["none"]
    fig, axes = _figure(1, len(inits), 2.4, sharey=True)
    fig.skipped += cka.attrs["missing"]
    for j, init in enumerate(inits):
        ax, cell = axes[0, j], cka[cka["setting"] == init]
        if cell.empty:
            _note(
                ax,
                "no tied/untied pairs with probe rows (emb_seen): runs made before them, or unpaired",
            )
            continue
        ax.set_title(_init_label(init))
        for k, model in ((k, m) for k, m in enumerate(models) if m in set(cell["model"])):
            mk = (
                {"marker": MARKERS[k % len(MARKERS)], "ms": 3, "markevery": 0.2}
                if len(models) > 1
                else {}
            )
            for side, (_, color, ls) in SIDES.items():
                _mean_line(
                    ax,
                    cell[cell["model"] == model],
                    side,
                    True,
                    ["model"],
                    0.15,
                    ls=ls,
                    color=color,
                    **mk,
                )
        ax.set_xlabel("training tokens")
        ax.xaxis.set_major_formatter(EngFormatter(sep=""))
        ax.set_ylim(0, 1.02)
    axes[0, 0].set_ylabel("linear CKA (seen tokens)")
    _legend(
        fig,
        [Line2D([], [], color=c, ls=ls, label=label) for label, c, ls in SIDES.values()]
        + _size_handles(runs, models),
        3,
    )
    return fig


ANISOTROPY = {
    "emb": ("probe/frequent/emb_cos_mean", "probe/frequent/emb_ccos_abs_mean"),
    "head": ("probe/frequent/head_cos_mean", "probe/frequent/head_ccos_abs_mean"),
}


@figure(
    "fig9_anisotropy",
    "anisotropy over training: mean cosine of embedding rows, raw and mean-centred",
    uses=("runs", "history"),
)
def fig_anisotropy(runs: pd.DataFrame, history: pd.DataFrame) -> Figure:
    """The mean cosine between rows of the frequent half of the seen tokens (raw: one common
    direction shows here) and the mean |cosine| after removing their mean row (centred:
    anisotropy beyond it), over training: tied (its one matrix), untied input (solid) and untied
    output (dashed). A column per init std, a marker per size; the rare and unseen strata are in
    the logs (probe/rare/..., probe/unseen/...)."""
    key = "drift/emb_cos_seen"  # fine-tuning runs log it
    tuned = runs["run_id"].isin(
        history.loc[history[key].notna(), "run_id"] if key in history else []
    )
    skipped = [
        f"{_run_label(r)}: a fine-tuning run (its embedding drift is figure 7)"
        for _, r in runs[tuned].iterrows()
    ]
    if tuned.all():
        fig, axes = _figure(1, 1, 1.8)
        fig.skipped += skipped
        _note(axes[0, 0], "only fine-tuning runs: their embedding drift is figure 7")
        return fig
    runs = runs[~tuned]
    inits, models = _init_order(runs), _model_order(runs)
    fig, axes = _figure(2, len(inits), 1.8, sharex="col")
    fig.skipped += [*skipped, "rare and unseen strata (logged as probe/rare/*, probe/unseen/*)"]
    if ANISOTROPY["emb"][0] not in history.columns:
        for ax in axes.flat:
            _note(ax, "no stratified probes logged (probe/frequent/emb_cos_mean)")
        return fig
    for j, init in enumerate(inits):
        axes[0, j].set_title(_init_label(init))
        for k, model in enumerate(models):
            h = history[(history["setting"] == init) & (history["model"] == model)]
            mk = (
                {"marker": MARKERS[k % len(MARKERS)], "ms": 3, "markevery": 0.2}
                if len(models) > 1
                else {}
            )
            for row, ax in enumerate(axes[:, j]):
                for tie, side, ls in (
                    (True, "emb", "-"),
                    (False, "emb", "-"),
                    (False, "head", "--"),
                ):
                    hs = (
                        h[(h["tie"] == tie) & h[ANISOTROPY[side][row]].notna()]
                        if ANISOTROPY[side][row] in h
                        else h[:0]
                    )
                    if not hs.empty:
                        _mean_line(ax, hs, ANISOTROPY[side][row], tie, ["model"], 0.15, ls=ls, **mk)
        axes[1, j].set_xlabel("training tokens")
        axes[1, j].xaxis.set_major_formatter(EngFormatter(sep=""))
    axes[0, 0].set_ylabel("mean cosine (raw)")
    axes[1, 0].set_ylabel("mean |cosine|, centred")
    handles = [
        Line2D([], [], color=TIE_COLOR[True], label="tied"),
        Line2D([], [], color=TIE_COLOR[False], label="untied input (wte)"),
        Line2D([], [], color=TIE_COLOR[False], ls="--", label="untied output (lm_head)"),
    ]
    _legend(fig, handles + _size_handles(runs, models), 3)
    return fig
