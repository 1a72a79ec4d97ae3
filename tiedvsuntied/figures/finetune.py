"""Figure 7: fine-tuning runs, retention and embedding drift per untie x trainable mode."""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from tiedvsuntied.figures import style

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
    keys = ("val/loss", "retain/loss", "drift/emb_cos_seen")
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
        h = history[(history["run_id"] == r["run_id"]) & history["val/loss"].notna()]
        h = h.sort_values("step")
        color = UNTIE_COLOR.get(r["untie"], "#444444")
        ls, marker = TRAINABLE_STYLE.get(r["trainable"], ("-", "o"))
        kw = {"color": color, "marker": marker, "ms": 3, "lw": 1}
        kw["mfc"] = "white" if r["untie"] == "fresh" else color
        axes[0, 0].plot(h["val/loss"], h["retain/loss"], ls=ls, **kw)
        axes[0, 1].plot(h["val/loss"], 1 - h["drift/emb_cos_seen"], ls="-", **kw)
        if "drift/emb_cos_unseen" in h:
            unseen = 1 - h["drift/emb_cos_unseen"]
            axes[0, 1].plot(h["val/loss"], unseen, ls="--", **{**kw, "mfc": "white"})
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
