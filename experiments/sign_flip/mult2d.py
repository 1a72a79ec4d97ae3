"""Untied's own embedding and head multipliers (HYPOTHESES.md, "Learning rates"): at V = 8,192,
micro, seed 0, untied at its chosen lr with ``emb_lr_mult`` x ``head_lr_mult`` in {1, 4, 16}^2.

    python experiments/sign_flip/mult2d.py results/sign_flip_mult2d results/sign_flip

(4, 4), the one shared multiplier every other run uses, is the lr check's own run, in the study's
sweep; run.sh's ``mult2d`` piece runs the other eight in a sweep of their own. Writes
``mult2d.tsv`` beside this file (or ``--out``): each pair's final validation bits per byte and
how far it is ahead of the shared pair; prints the grid and the rule's verdict.

The rule: untied moves to its best pair at every point, both reported, when that pair is ahead of
the shared one by more than the seed sd, read here as the sd over seeds of tied - untied's paired
validation bpb at this point, each arm at its chosen lr (``lr_choice.tsv``): the paired sd of
HYPOTHESES.md's power calculation. So the verdict waits for the point's seeds. The test split is
never read.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from tiedvsuntied.analysis.load import load_results

HERE = Path(__file__).parent
POINT = {"model": "micro", "vocab_size": 8192}
MULTS = [1.0, 4.0, 16.0]  # emb_lr_mult and head_lr_mult each (HYPOTHESES.md)
SHARED = (4.0, 4.0)  # the study's optim.emb_lr_mult, which an untied head shares by default
SEEDS = 4  # the point's seeds, of which the seed sd is taken


def at_point(runs: pd.DataFrame) -> pd.DataFrame:
    """The point's finished runs of replicate 0."""
    done = runs["status"].eq("finished") & runs["replicate"].eq(0)
    mine = runs["model"].eq(POINT["model"]) & runs["vocab_size"].eq(POINT["vocab_size"])
    return runs[done & mine & runs["init_std"].eq("inv_sqrt_d")]


def grid(runs: pd.DataFrame, lr: float) -> pd.DataFrame:
    """Seed 0's validation bpb of untied at ``lr``: emb_lr_mult rows x head_lr_mult columns."""
    untied = at_point(runs).query("not tie and seed == 0 and lr == @lr")
    table = untied.pivot_table(
        index="emb_lr_mult", columns="head_lr_mult", values="val_bpb", aggfunc="min"
    )
    return table.reindex(index=MULTS, columns=MULTS)


def seed_sd(runs: pd.DataFrame, lrs: dict[bool, float]) -> tuple[float, int]:
    """The sd over seeds of tied - untied's validation bpb, each arm at its chosen lr (``lrs``:
    tie -> lr) and the shared multiplier, and how many seeds it pairs."""
    runs = at_point(runs)
    shared = runs["tie"] | runs["head_lr_mult"].eq(runs["emb_lr_mult"])
    arms = runs[shared & runs["emb_lr_mult"].eq(SHARED[0]) & runs["lr"].eq(runs["tie"].map(lrs))]
    wide = arms.pivot_table(index="seed", columns="tie", values="val_bpb", aggfunc="min")
    diff = (wide.get(True) - wide.get(False)).dropna() if len(wide.columns) == 2 else pd.Series()
    return float(diff.std()), len(diff)


def verdict(table: pd.DataFrame, sd: float, seeds: int) -> dict:
    """The best pair, its gain over the shared one, and whether untied moves to it; None where
    the grid or the seeds are not all in yet."""
    best = table.stack().idxmin() if table.notna().any().any() else (None, None)
    gain = table.loc[SHARED] - table.loc[best] if best[0] is not None else float("nan")
    ready = table.notna().all().all() and seeds >= SEEDS
    return {
        "best_emb_lr_mult": best[0],
        "best_head_lr_mult": best[1],
        "gain_over_shared": gain,
        "seed_sd": sd,
        "seeds": seeds,
        "untied_moves": bool(gain > sd) if ready else None,
    }


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="mult2d.py")
    parser.add_argument("sweep_dirs", nargs="+", help="results/sign_flip_mult2d results/sign_flip")
    parser.add_argument("--out", type=Path, default=HERE / "mult2d.tsv")
    args = parser.parse_args(argv)
    choice = pd.read_csv(HERE / "lr_choice.tsv", sep="\t").query(
        "model == @POINT['model'] and vocab_size == @POINT['vocab_size'] "
        "and init_std == 'inv_sqrt_d'"
    )
    lrs = {arm == "tied": lr for arm, lr in zip(choice["arm"], choice["lr"], strict=True)}
    if set(lrs) != {True, False}:
        sys.exit("mult2d.py: lr_choice.tsv has no tied and untied lr at V = 8,192 yet")
    runs = load_results(*args.sweep_dirs).runs
    table = grid(runs, lrs[False])
    rule = verdict(table, *seed_sd(runs, lrs))
    print(f"untied at lr {lrs[False]:g}, seed 0: validation bpb, emb_lr_mult x head_lr_mult")
    print(table.round(4).to_string())
    print(
        ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in rule.items())
    )
    out = table.stack(future_stack=True).rename("val_bpb").reset_index()
    out = out.assign(ahead_of_shared=table.loc[SHARED] - out["val_bpb"])
    out.to_csv(args.out, sep="\t", index=False)
    print(f"written: {args.out}")


if __name__ == "__main__":
    main(sys.argv[1:])
