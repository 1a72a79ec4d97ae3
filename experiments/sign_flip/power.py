"""How many seeds for the third edition: the power of a paired t-test over seeds, from the
second edition's spread (its bundle, experiments/tie_x_init_books/results).

    python experiments/sign_flip/power.py

The second edition's paired difference tied - untied (test loss, same seed: same body init,
batches and held-out books) at init d^-0.5 and 0.02, per size: its standard deviation over the
5 seeds, converted from nats per token to bits per byte with GPT-2's bytes per token on the
held-out Gutenberg books (BYTES_PER_TOKEN, docs/data.md: 3.63-3.89 by split; 3.8 used), and for
n seeds the smallest effect a two-sided paired t-test at alpha = 0.05 detects with 80% power
(tiedvsuntied.analysis.stats.detectable: the noncentral t of scipy).
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from tiedvsuntied.analysis.load import load
from tiedvsuntied.analysis.stats import detectable  # one definition

BUNDLE = Path(__file__).parents[1] / "tie_x_init_books" / "results"
BYTES_PER_TOKEN = 3.8


def seed_spreads() -> pd.DataFrame:
    runs = load([BUNDLE]).runs
    runs = runs[(runs.status == "finished") & (runs.replicate == 0) & ~runs.t5_rescale]
    chosen = pd.read_csv(BUNDLE.parent / "lr_choice.tsv", sep="\t", dtype={"init_std": str})
    chosen = chosen[chosen.arm.isin(["tied", "untied"])].assign(tie=lambda c: c.arm == "tied")
    keys = ["tie", "init_std", "emb_lr_mult"]  # the grid's runs: each arm at its chosen lr
    runs = runs.merge(chosen[keys], on=keys)
    runs = runs[runs.init_std.isin(["0.02", "inv_sqrt_d"])]
    wide = runs.pivot_table(index=["model", "init_std", "seed"], columns="tie", values="test_loss")
    diff = (wide[True] - wide[False]).dropna() / (math.log(2) * BYTES_PER_TOKEN)
    grouped = diff.groupby(level=["model", "init_std"])
    return grouped.agg(["std", "count"]).rename(columns={"std": "sd_bpb", "count": "seeds"})


def main() -> None:
    spreads = seed_spreads()
    for n in (4, 5, 6, 8):
        spreads[f"mde_n{n}"] = [detectable(sd, n) for sd in spreads.sd_bpb]
        spreads[f"mde_n{n}_sd2x"] = [detectable(2 * sd, n) for sd in spreads.sd_bpb]
    print(spreads.round(4).to_markdown())


if __name__ == "__main__":
    main()
