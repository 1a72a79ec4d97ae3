"""The third edition's token axis (issue 40, experiments/sign_flip): tying's effect at each
evaluation along training, paired by seed (HYPOTHESES.md's H6)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tiedvsuntied.analysis.sign_flip import CELL, pairs
from tiedvsuntied.analysis.stats import seed_summary
from tiedvsuntied.results.metrics import VAL_BPB


def token_axis(runs: pd.DataFrame, history: pd.DataFrame, metric: str = VAL_BPB) -> pd.DataFrame:
    """tied − untied of ``metric`` at each evaluation, paired by seed: per cell and step the mean
    over seeds with its t-interval, and the mean ``bytes`` (train bytes seen: tokens times the
    run's ``bytes_per_token``; tokens where neither is known) and ``tokens``."""
    both = pairs(runs)
    if metric not in history or both.empty:
        return pd.DataFrame(columns=[*CELL, "step", "n", "mean", "low", "high", "bytes", "tokens"])
    if "bytes" not in history and "bytes_per_token" in runs:  # train bytes = tokens x its rate
        rate = runs.set_index("run_id")["bytes_per_token"]
        history = history.assign(bytes=history["tokens"] * history["run_id"].map(rate))
    x = [c for c in ("tokens", "bytes") if c in history]
    logged = history.dropna(subset=[metric])[["run_id", "step", metric, *x]]
    tied = both[[*CELL, "seed", "run_id_t", "run_id_u"]].merge(
        logged, left_on="run_id_t", right_on="run_id"
    )
    untied = logged.rename(columns={"run_id": "run_id_u", metric: "untied"})
    paired = tied.merge(untied[["run_id_u", "step", "untied"]], on=["run_id_u", "step"])
    paired = paired.assign(diff=paired[metric] - paired["untied"])
    return _over_seeds(paired, x)


def _over_seeds(paired: pd.DataFrame, x: list[str]) -> pd.DataFrame:
    rows = []
    for key, group in paired.groupby([*CELL, "step"], sort=True):
        summary = seed_summary(group["diff"])
        where = {c: group[c].mean() for c in x}
        rows.append({**dict(zip([*CELL, "step"], key, strict=True)), **where, **summary})
    out = pd.DataFrame(rows).rename(columns={"n_seeds": "n", "diff": "mean"})
    if "bytes" not in out:
        out["bytes"] = np.nan
    out["bytes"] = out["bytes"].fillna(out.get("tokens"))
    return out
