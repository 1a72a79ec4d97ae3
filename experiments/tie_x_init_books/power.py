"""How many seeds: the power of a paired t-test over seeds, from the first edition's spread.

    python experiments/tie_x_init_books/power.py

Reads the first edition's bundle (experiments/tie_x_init/results), takes the standard deviation
over seeds of each cell's paired difference tied - untied (test loss) and of the interaction
(tying's effect at init 1.0 minus at d^-0.5), and prints, for n seeds, the smallest effect a
two-sided paired t-test at alpha = 0.05 detects with 80% power (noncentral t, scipy:
tiedvsuntied.study.rules). The second edition's replicates also change the held-out books
(data.heldout_fold = seed), so its spread holds text variance the first edition's did not: the sd
is also shown inflated by 1.5.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from tiedvsuntied.analysis.load import load
from tiedvsuntied.analysis.stats import detectable  # one definition

BUNDLE = Path(__file__).parents[1] / "tie_x_init" / "results"


def seed_spreads() -> pd.DataFrame:
    runs = load([BUNDLE]).runs
    runs = runs[(runs.status == "finished") & (runs.replicate == 0) & ~runs.t5_rescale]
    wide = runs.pivot_table(
        index=["model", "seed"], columns=["init_std", "tie"], values="test_loss"
    )
    diff = {std: wide[(std, True)] - wide[(std, False)] for std in ("1.0", "inv_sqrt_d")}
    rows = [
        {"model": m, "contrast": f"tied - untied, init {std}", "sd": d.loc[m].std(ddof=1)}
        for std, d in diff.items()
        for m in ("nano", "micro")
    ]
    inter = diff["1.0"] - diff["inv_sqrt_d"]
    rows += [
        {"model": m, "contrast": "interaction", "sd": inter.loc[m].std(ddof=1)}
        for m in ("nano", "micro")
    ]
    return pd.DataFrame(rows)


def main() -> None:
    spreads = seed_spreads()
    for n in (5, 8, 10):
        spreads[f"mde_n{n}"] = [detectable(sd, n) for sd in spreads.sd]
        spreads[f"mde_n{n}_sd1.5x"] = [detectable(1.5 * sd, n) for sd in spreads.sd]
    print(spreads.round(3).to_markdown(index=False))


if __name__ == "__main__":
    main()
