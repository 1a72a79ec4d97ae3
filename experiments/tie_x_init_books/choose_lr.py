"""Each arm's embedding-side lr multiplier, from the lr check (HYPOTHESES.md, "Learning rates").

    python experiments/tie_x_init_books/choose_lr.py results/tie_x_init_books

Reads the finished runs of the lr check (nano, seed 0, replicate 0 of the study's sweep: the
grid's nano seed-0 run at the chosen multiplier is one of them; no torch), and writes
``lr_choice.tsv`` beside this file: per arm, the final validation loss at each multiplier and
the one with the lowest. An arm whose best is at the edge of what ran is listed with the next
multiplier out, which run.sh's ``lr-edge`` piece runs; rerun this afterwards. Never reads the
test split.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from tiedvsuntied import results

OUT = Path(__file__).with_name("lr_choice.tsv")
STEP = 4.0  # the factor between neighbouring multipliers


def arm(config: dict) -> str:
    """The conf/arm option a run's config is."""
    model = config["model"]
    if model.get("t5_rescale"):
        return "t5"
    if model.get("head_init_std") is not None:
        return "emb1_head_dsqrt"
    return "tied" if config["tie"] else "untied"


def lr_runs(sweep_dir: Path) -> pd.DataFrame:
    rows = []
    for run_dir in sorted(p for p in sweep_dir.iterdir() if (p / "summary.json").is_file()):
        summary, config = results.read_summary(run_dir), results.read_config(run_dir)
        if summary is None or summary.status.value != "finished":
            continue
        if (summary.model, summary.seed, summary.replicate) != ("nano", 0, 0):
            continue
        rows.append(
            {
                "arm": arm(config),
                "init_std": config["init_std"],
                "model": config["model"]["name"],
                "emb_lr_mult": float(config["optim"]["emb_lr_mult"]),
                "final_val_loss": summary.final_val_loss,
            }
        )
    return pd.DataFrame(rows)


def choose(runs: pd.DataFrame) -> pd.DataFrame:
    """Per arm: the losses by multiplier, the best, and the next one out if the best is an edge
    of the three first run."""
    table = runs.pivot_table(
        index=["arm", "init_std"], columns="emb_lr_mult", values="final_val_loss"
    )
    best = table.idxmin(axis=1)
    out = table.round(4).rename(columns=lambda m: f"val_at_{m:g}")
    out["emb_lr_mult"] = best
    ran = table.notna()
    low = [ran.columns[ran.loc[i]].min() for i in table.index]
    high = [ran.columns[ran.loc[i]].max() for i in table.index]
    # one step out from an edge, once: after it, the best of the four is taken
    extended = ran.sum(axis=1) > 3
    out["run_next"] = [
        None if done else m / STEP if m == lo else m * STEP if m == hi else None
        for m, lo, hi, done in zip(best, low, high, extended, strict=True)
    ]
    return out.reset_index()


def main(argv: list[str]) -> None:
    if len(argv) != 1:
        sys.exit("usage: choose_lr.py SWEEP_DIR (e.g. results/tie_x_init_books)")
    runs = lr_runs(Path(argv[0]))
    if runs.empty:
        sys.exit(f"no finished runs in {argv[0]}")
    table = choose(runs)
    table.to_csv(OUT, sep="\t", index=False)
    print(table.to_string(index=False))
    print(f"written: {OUT}")


if __name__ == "__main__":
    main(sys.argv[1:])
