"""The protocol's rules, on a sweep's runs table (no torch): the lr rule (the best value of the lr
check, x2 beyond it while it sits at an edge of what ran, none before the first grid ran whole),
the clip rule (an arm whose clip binds on more than a tenth of its seeds' steps runs again with
it raised). The power of a paired t-test over seeds: tiedvsuntied.analysis.stats."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import pandas as pd

POINT = ["model", "vocab_size", "arm", "init_std"]  # one row of the lr table
SEEDS = 4  # an arm's seeds at its lr: its clip_frac is judged once all have run
MAX_CLIP_FRAC = 0.10  # of steps, an arm's clip may bind on


def chosen_lr(
    runs: pd.DataFrame,
    grid: list[float] | Callable[[dict], list[float]],
    arm: Callable[[Mapping], str],
    arms: tuple[str, ...],
    seeds: int = SEEDS,
    key: list[str] = POINT,
) -> pd.DataFrame:
    """Per point and arm (``arms``: those with an lr check; ``arm``: a run's arm), seed 0's
    validation bpb at each lr, the best (``lr``), ``run_next`` (x2 beyond it while it is an edge of
    what ran, once ``grid``, the first grid, ran whole) and ``settled`` (the grid whole, the best
    inside what ran: the seeds may run at it); then the clip rule's columns (:func:`clip_at_lr`).
    ``key``: the columns of one row (a study of two budgets at one body adds ``max_steps``);
    ``grid`` may be a function of a row's key (a dict) where points and arms have their own."""
    done = runs[runs["status"].eq("finished") & runs["replicate"].eq(0)]
    done = done.assign(arm=[arm(r) for r in done.to_dict("records")])
    done = done[done["arm"].isin(arms)]
    seed0 = done[done["seed"].eq(0)]
    table = seed0.pivot_table(index=key, columns="lr", values="val_bpb", aggfunc="min")
    best = table.idxmin(axis=1)
    tried = table.notna()
    low = [t[t].index.min() for _, t in tried.iterrows()]
    high = [t[t].index.max() for _, t in tried.iterrows()]
    # no edge before the first grid has run whole (a study killed mid-check is restarted with
    # some of it unfinished); an edge run killed earlier resumes when it is named again
    firsts = [grid(dict(zip(key, i, strict=True))) if callable(grid) else grid for i in table.index]
    whole = [
        all(row.get(g, False) for g in first)
        for (_, row), first in zip(tried.iterrows(), firsts, strict=True)
    ]
    run_next = [
        None if not ok else b / 2 if b == lo else b * 2 if b == hi else None
        for ok, b, lo, hi in zip(whole, best, low, high, strict=True)
    ]
    settled = [ok and nxt is None for ok, nxt in zip(whole, run_next, strict=True)]
    out = table.rename(columns=lambda lr: f"val_bpb_at_{lr:g}")
    out = out.assign(lr=best, settled=settled, run_next=run_next).reset_index()
    return out.merge(clip_at_lr(done, out, seeds, key), on=key, how="left")


def lr_rule(arm: Callable[[Mapping], str], arms: tuple[str, ...] = ("tied", "untied")):
    """A study's ``choose``: :func:`chosen_lr` over its first grid (``study.grid``)."""
    return lambda study, runs: chosen_lr(runs, [float(x) for x in study.grid.split(",")], arm, arms)


def clip_at_lr(
    done: pd.DataFrame, chosen: pd.DataFrame, seeds: int = SEEDS, key: list[str] = POINT
) -> pd.DataFrame:
    """Per arm, the mean clip_frac of its seeds at its chosen lr, and ``clip_rerun``: whether it
    binds on more than MAX_CLIP_FRAC of steps once all ``seeds`` have run."""
    at_lr = done.merge(chosen[[*key, "lr"]], on=[*key, "lr"])
    clip = at_lr.groupby(key).agg(clip_frac=("clip_frac", "mean"), seeds=("seed", "nunique"))
    rerun = clip["clip_frac"].gt(MAX_CLIP_FRAC) & clip["seeds"].ge(seeds)
    return clip.assign(clip_rerun=rerun).reset_index()
