"""The reuse floor (HYPOTHESES.md, "Which third-edition runs are reused"): piece a0 ran the
third edition's 10 MB cells again under the pinned bf16, at the lr that edition chose; each a0
run against its third-edition twin (the same body, V, steps, seed, arm, lr and init std, bf16
under ``auto``) says how far the re-run moved each arm and tying's effect. The floor of a seed
is |(tied − untied) here − (tied − untied) there|."""

from __future__ import annotations

import pandas as pd

from tiedvsuntied.analysis.arms import arms_of
from tiedvsuntied.analysis.stats import first_replicates
from tiedvsuntied.studies.size_or_tokens import effects, pieces

THIRD = "sign_flip"  # the third edition's sweep
SAME = ["model", "vocab_size", "max_steps", "seed", "arm", "lr", "init_std"]
TWIN_COLUMNS = [*SAME, "point", "fourth", "third", "shift", "cpu_s_fourth", "cpu_s_third"]
FLOOR_COLUMNS = ["point", "seed", "fourth", "third", "floor"]


def _third(runs: pd.DataFrame) -> pd.DataFrame:
    """The third edition's finished replicate-0 runs that trained bf16, with their arm."""
    done = first_replicates(
        runs[
            runs["sweep"].astype(str).eq(THIRD)
            & runs["status"].eq("finished")
            & runs["precision"].eq("bf16")
        ]
    )
    return done.assign(arm=arms_of(done))


def twins(runs: pd.DataFrame) -> pd.DataFrame:
    """TWIN_COLUMNS: each a0 run (``effects.chosen`` at pieces.REUSED's points) beside its twin;
    ``fourth``, ``third``: test bits per byte; ``shift``: fourth − third; CPU-seconds of each."""
    fourth = effects.chosen(runs)
    fourth = fourth[fourth["point"].isin(pieces.REUSED)]
    if fourth.empty or "precision" not in runs:
        return pd.DataFrame(columns=TWIN_COLUMNS)
    keep = [*SAME, effects.VALUE, "cpu_time_s"]
    both = fourth[[*keep, "point"]].merge(
        _third(runs)[keep], on=SAME, suffixes=("_fourth", "_third")
    )
    both = both.rename(
        columns={
            f"{effects.VALUE}_fourth": "fourth",
            f"{effects.VALUE}_third": "third",
            "cpu_time_s_fourth": "cpu_s_fourth",
            "cpu_time_s_third": "cpu_s_third",
        }
    )
    both["shift"] = both["fourth"] - both["third"]
    return both[TWIN_COLUMNS].sort_values(["point", "seed", "arm"]).reset_index(drop=True)


def floor(table: pd.DataFrame) -> pd.DataFrame:
    """FLOOR_COLUMNS: per point and seed where both arms have twins, tied − untied here
    (``fourth``) and there (``third``), and the reuse floor |fourth − third|."""
    wide = table.pivot_table(index=["point", "seed"], columns="arm", values=["fourth", "third"])
    if wide.empty or not {"tied", "untied"} <= set(wide.columns.get_level_values("arm")):
        return pd.DataFrame(columns=FLOOR_COLUMNS)
    out = pd.DataFrame(
        {e: wide[(e, "tied")] - wide[(e, "untied")] for e in ("fourth", "third")}
    ).dropna()
    out["floor"] = (out["fourth"] - out["third"]).abs()
    return out.reset_index()[FLOOR_COLUMNS]
