"""Each arm's body lr at each ladder point, from the lr check (HYPOTHESES.md, "Learning rates").

    python experiments/sign_flip/choose_lr.py results/sign_flip --grid 1e-3,2e-3,4e-3

Reads the sweep's finished seed-0 runs (no torch) and writes ``lr_choice.tsv`` beside this file
(or ``--out``: the GPU slots' sweeps, scripts/gpu/slot.sh):
per point (body, V) and arm, the final validation loss in bits per byte at each ``optim.lr``
tried, the best, and ``run_next`` (x2 beyond it) while the best sits at an edge of what ran, so
that no chosen lr sits at an edge (none before the first grid, ``--grid``, has run whole);
``settled`` once neither holds back the arm's seeds.
run.sh's ``lr-edge`` piece runs ``run_next``; then rerun this. Once an arm's seeds have run at
its lr, ``clip_frac`` is their mean and ``clip_rerun`` says whether it binds on more than 10% of
steps (HYPOTHESES.md: such an arm is re-run with the clip raised; run.sh's ``clip`` piece). The
test split is never read.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from tiedvsuntied.analysis.arms import arm
from tiedvsuntied.analysis.load import ResultsError, load_results

OUT = Path(__file__).with_name("lr_choice.tsv")
POINT = ["model", "vocab_size", "arm", "init_std"]
SEEDS = 4  # an arm's seeds at its lr (HYPOTHESES.md): its clip_frac is judged once all have run
MAX_CLIP_FRAC = 0.10  # of steps, an arm's clip may bind on (HYPOTHESES.md, "Learning rates")
# the arms with an lr check; the ends' arms run at tied's lr (run.sh's ends piece), and a row of
# theirs here would send run.sh's grid piece an arm name Hydra does not know
CHECKED_ARMS = ("tied", "untied")


def chosen_lr(runs: pd.DataFrame, grid: list[float]) -> pd.DataFrame:
    """Per arm, seed 0's validation bpb at each lr, the best (``lr``) and ``run_next``; ``grid``:
    the lr check's first grid, which runs whole before any edge is named."""
    done = runs[runs["status"].eq("finished") & runs["replicate"].eq(0)]
    done = done.assign(arm=[arm(r) for r in done.to_dict("records")])
    done = done[done["arm"].isin(CHECKED_ARMS)]
    seed0 = done[done["seed"].eq(0)]
    table = seed0.pivot_table(index=POINT, columns="lr", values="val_bpb", aggfunc="min")
    best = table.idxmin(axis=1)
    tried = table.notna()
    low = [t[t].index.min() for _, t in tried.iterrows()]
    high = [t[t].index.max() for _, t in tried.iterrows()]
    # no edge before the first grid has run whole (a study killed mid-check is restarted with
    # some of it unfinished); an edge run killed earlier resumes when it is named again
    whole = tried.reindex(columns=grid, fill_value=False)
    run_next = [
        None if not ok else b / 2 if b == lo else b * 2 if b == hi else None
        for ok, b, lo, hi in zip(whole.all(axis=1), best, low, high, strict=True)
    ]
    # settled: the first grid ran whole and the best is inside what ran; the seeds may run at it
    settled = [ok and nxt is None for ok, nxt in zip(whole.all(axis=1), run_next, strict=True)]
    out = table.rename(columns=lambda lr: f"val_bpb_at_{lr:g}")
    out = out.assign(lr=best, settled=settled, run_next=run_next).reset_index()
    return out.merge(clip_at_lr(done, out), on=POINT, how="left")


def clip_at_lr(done: pd.DataFrame, chosen: pd.DataFrame) -> pd.DataFrame:
    """Per arm, the mean clip_frac of its seeds at its chosen lr, and whether it binds on more
    than MAX_CLIP_FRAC of steps once all SEEDS have run."""
    at_lr = done.merge(chosen[[*POINT, "lr"]], on=[*POINT, "lr"])
    clip = at_lr.groupby(POINT).agg(clip_frac=("clip_frac", "mean"), seeds=("seed", "nunique"))
    rerun = clip["clip_frac"].gt(MAX_CLIP_FRAC) & clip["seeds"].ge(SEEDS)
    return clip.assign(clip_rerun=rerun).reset_index()


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="choose_lr.py")
    parser.add_argument("sweep_dir", help="the study's sweep, e.g. results/sign_flip")
    parser.add_argument("--grid", required=True, help="the lr check's first grid (run.sh's LRS)")
    parser.add_argument("--out", type=Path, default=OUT, help=f"the table (default {OUT.name})")
    args = parser.parse_args(argv)
    grid = [float(lr) for lr in args.grid.split(",")]
    try:
        runs = load_results(args.sweep_dir).runs
    except ResultsError as err:
        sys.exit(f"choose_lr.py: {err}")
    table = chosen_lr(runs, grid)
    if table.empty:
        sys.exit(f"no finished seed-0 run in {args.sweep_dir}")
    table.to_csv(args.out, sep="\t", index=False)
    print(table.round(4).to_string(index=False))
    print(f"written: {args.out}")


if __name__ == "__main__":
    main(sys.argv[1:])
