"""Each arm's own embedding and head multipliers at V = 8,192, micro, seed 0, at the arm's chosen
lr (HYPOTHESES.md, "Learning rates"): untied over ``emb_lr_mult`` x ``head_lr_mult`` in
{1, 4, 16}^2, and tied over its one matrix's ``tied_lr_mult`` in {1, 4, 16} (an addition made
after untied's grid put its best pair at (4, 1): a fair check gives tied the same chance).

    python experiments/sign_flip/mult2d.py results/sign_flip_mult2d results/sign_flip

(4, 4), the one shared multiplier every other run uses, is the lr check's own run, in the study's
sweep; run.sh's ``mult2d`` pieces run the others in a sweep of their own. Writes ``mult2d.tsv``
beside this file (or ``--out``): each arm's final validation bits per byte per multiplier pair
and how far it is ahead of the shared pair; prints the grids and the rule's verdict per arm.

The rule: an arm moves to its best pair at every point, both reported, when that pair is ahead of
the shared one by more than the seed sd, read here as the sd over seeds of tied - untied's paired
validation bpb at this point, each arm at its chosen lr (``lr_choice.tsv``): the paired sd of
HYPOTHESES.md's power calculation. So the verdict waits for the point's seeds; ``at_edge`` says
whether the best pair sits at an edge of what ran. The test split is never read.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from tiedvsuntied.analysis.load import ResultsError, load_results

HERE = Path(__file__).parent
POINT = {"model": "micro", "vocab_size": 8192}
MULTS = [1.0, 4.0, 16.0]  # emb_lr_mult and head_lr_mult each (HYPOTHESES.md)
SHARED = (4.0, 4.0)  # the study's optim.emb_lr_mult, which the head shares by default
SEEDS = 4  # the point's seeds, of which the seed sd is taken


def at_point(runs: pd.DataFrame) -> pd.DataFrame:
    """The point's finished runs of replicate 0."""
    done = runs["status"].eq("finished") & runs["replicate"].eq(0)
    mine = runs["model"].eq(POINT["model"]) & runs["vocab_size"].eq(POINT["vocab_size"])
    return runs[done & mine & runs["init_std"].eq("inv_sqrt_d")]


def grid(runs: pd.DataFrame, lr: float, tie: bool = False) -> pd.DataFrame:
    """Seed 0's validation bpb of an arm at ``lr``: emb_lr_mult rows x head_lr_mult columns (the
    output matrix's multiplier: tied's one matrix has the one row of the study's emb_lr_mult),
    over the first grid and any multiplier beyond its edges that ran."""
    arm = at_point(runs).query("tie == @tie and seed == 0 and lr == @lr")
    table = arm.pivot_table(
        index="emb_lr_mult", columns="head_lr_mult", values="val_bpb", aggfunc="min"
    )
    rows = [SHARED[0]] if tie else sorted({*MULTS, *table.index})
    return table.reindex(index=rows, columns=sorted({*MULTS, *table.columns}))


def seed_sd(runs: pd.DataFrame, lrs: dict[bool, float]) -> tuple[float, int]:
    """The sd over seeds of tied - untied's validation bpb, each arm at its chosen lr (``lrs``:
    tie -> lr) and the shared multiplier, and how many seeds it pairs."""
    runs = at_point(runs)
    shared = runs["emb_lr_mult"].eq(SHARED[0]) & runs["head_lr_mult"].eq(SHARED[1])
    arms = runs[shared & runs["lr"].eq(runs["tie"].map(lrs))]
    wide = arms.pivot_table(index="seed", columns="tie", values="val_bpb", aggfunc="min")
    diff = (wide.get(True) - wide.get(False)).dropna() if len(wide.columns) == 2 else pd.Series()
    return float(diff.std()), len(diff)


def verdict(table: pd.DataFrame, sd: float, seeds: int) -> dict:
    """The best pair, its gain over the shared one, ``run_next`` (x2 beyond each of its
    multipliers at an edge of what ran, once the first grid has run whole), and whether the arm
    moves to it: None until the first grid, the edges and the point's seeds are all in."""
    ran = table.stack()
    if ran.empty:
        return {"best": None, "gain_over_shared": float("nan"), "run_next": [], "moves": None}
    best = tuple(float(m) for m in ran.idxmin())
    first = table.reindex(index=[m for m in MULTS if m in table.index], columns=MULTS)
    whole = first.notna().all().all()
    run_next = beyond_edges(ran.index, best) if whole else []
    gain = table.loc[SHARED] - ran[best]
    ready = whole and not run_next and seeds >= SEEDS
    return {
        "best": best,
        "gain_over_shared": gain,
        "seed_sd": sd,
        "seeds": seeds,
        "run_next": run_next,
        "moves": bool(gain > sd) if ready else None,
    }


def beyond_edges(ran: pd.MultiIndex, best: tuple[float, float]) -> list[tuple[float, float]]:
    """x2 beyond each multiplier of ``best`` that sits at an edge of what ran (a multiplier that
    ran at one value has no edge), the other kept: the lr check's rule for the multipliers."""
    out = []
    for level, value in enumerate(best):
        values = ran.get_level_values(level)
        step = 0.5 if value == values.min() else 2.0 if value == values.max() else None
        if values.nunique() > 1 and step:
            out.append(tuple(value * step if i == level else m for i, m in enumerate(best)))
    return out


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="mult2d.py")
    parser.add_argument("sweep_dirs", nargs="+", help="results/sign_flip_mult2d results/sign_flip")
    parser.add_argument("--out", type=Path, default=HERE / "mult2d.tsv")
    parser.add_argument(
        "--run-next", action="store_true", help="print 'arm emb head' per run beyond an edge"
    )
    parser.add_argument(
        "--moves", action="store_true", help="print 'arm emb head' per arm the rule moves"
    )
    args = parser.parse_args(argv)
    choice = pd.read_csv(HERE / "lr_choice.tsv", sep="\t").query(
        "model == @POINT['model'] and vocab_size == @POINT['vocab_size'] "
        "and init_std == 'inv_sqrt_d'"
    )
    lrs = {arm == "tied": lr for arm, lr in zip(choice["arm"], choice["lr"], strict=True)}
    if set(lrs) != {True, False}:
        sys.exit("mult2d.py: lr_choice.tsv has no tied and untied lr at V = 8,192 yet")
    try:
        runs = load_results(*args.sweep_dirs).runs
    except ResultsError as err:
        sys.exit(f"mult2d.py: {err}")
    sd, seeds = seed_sd(runs, lrs)
    tables = {name: grid(runs, lrs[tie], tie) for tie, name in ((False, "untied"), (True, "tied"))}
    rules = {name: verdict(table, sd, seeds) for name, table in tables.items()}
    if args.run_next or args.moves:
        for name, rule in rules.items():
            pairs = rule["run_next"] if args.run_next else [rule["best"]] * bool(rule["moves"])
            for emb, head in pairs:
                print(f"{name} {emb:g} {head:g}")
        return
    for name, table in tables.items():
        print(f"{name} at lr {lrs[name == 'tied']:g}, seed 0: validation bpb, emb x head mult")
        print(table.round(4).to_string())
        print(
            ", ".join(
                f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                for k, v in rules[name].items()
            )
        )
    long = {
        name: t.stack(future_stack=True).rename("val_bpb").reset_index()
        for name, t in tables.items()
    }
    out = pd.concat(
        d.assign(arm=name, ahead_of_shared=tables[name].loc[SHARED] - d["val_bpb"])
        for name, d in long.items()
    )
    out.to_csv(args.out, sep="\t", index=False)
    print(f"written: {args.out}")


if __name__ == "__main__":
    main(sys.argv[1:])
