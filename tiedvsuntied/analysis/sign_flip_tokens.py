"""The third edition's token axis (issue 40, experiments/sign_flip): tying's effect at each
evaluation along training, paired by seed (HYPOTHESES.md's H6)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tiedvsuntied.analysis.sign_flip import CELL, pairs
from tiedvsuntied.analysis.stats import seed_summary
from tiedvsuntied.results.metrics import VAL_BPB


def paired_history(
    runs: pd.DataFrame, history: pd.DataFrame, metric: str = VAL_BPB
) -> pd.DataFrame:
    """tied − untied of ``metric`` (``diff``) at each evaluation of each pair of :func:`pairs`:
    per cell, seed and step, with the cell's ``rho``, the ``tokens`` and the train ``bytes`` seen
    (tokens times the run's ``bytes_per_token``) where known; empty without the metric."""
    both = pairs(runs)
    if metric not in history or both.empty:
        return pd.DataFrame(columns=[*CELL, "seed", "step", "rho", "diff"])
    if "bytes" not in history and "bytes_per_token" in runs:  # train bytes = tokens x its rate
        rate = runs.set_index("run_id")["bytes_per_token"]
        history = history.assign(bytes=history["tokens"] * history["run_id"].map(rate))
    x = [c for c in ("tokens", "bytes") if c in history]
    logged = history.dropna(subset=[metric])[["run_id", "step", metric, *x]]
    tied = both[[*CELL, "seed", "rho_t", "run_id_t", "run_id_u"]].merge(
        logged, left_on="run_id_t", right_on="run_id"
    )
    untied = logged.rename(columns={"run_id": "run_id_u", metric: "untied"})
    paired = tied.merge(untied[["run_id_u", "step", "untied"]], on=["run_id_u", "step"])
    return paired.assign(diff=paired[metric] - paired["untied"]).rename(columns={"rho_t": "rho"})


def token_axis(runs: pd.DataFrame, history: pd.DataFrame, metric: str = VAL_BPB) -> pd.DataFrame:
    """tied − untied of ``metric`` at each evaluation, paired by seed: per cell and step the mean
    over seeds with its t-interval, and the mean ``bytes`` (train bytes seen; tokens where the
    rate is unknown) and ``tokens``."""
    paired = paired_history(runs, history, metric)
    if paired.empty:
        return pd.DataFrame(columns=[*CELL, "step", "n", "mean", "low", "high", "bytes", "tokens"])
    return _over_seeds(paired, [c for c in ("tokens", "bytes") if c in paired])


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


# ----------------------------------------------------------------------------- H6
GAP_COLUMNS = [*CELL, "rho", "step_mid", "step_end", "gap_mid", "gap_end", "n_seeds", "diff",
               "low", "high", "p", "seed_diffs"]  # fmt: skip


def gap_change(runs: pd.DataFrame, history: pd.DataFrame, metric: str = VAL_BPB) -> pd.DataFrame:
    """HYPOTHESES.md's H6 per cell: tied − untied of ``metric`` at the evaluation nearest the
    middle of training (``step_mid``) and at the last (``step_end``), their means over seeds, and
    per seed the change end − mid (``diff`` < 0: the gap closes) with its t-interval and p."""
    paired = paired_history(runs, history, metric)
    rows = []
    for key, cell in paired.groupby(CELL, sort=True):
        steps = np.sort(cell["step"].unique())
        end = steps[-1]
        mid = steps[np.abs(steps - end / 2).argmin()]
        gaps = cell.pivot_table(index="seed", columns="step", values="diff")[[mid, end]].dropna()
        change = seed_summary(gaps[end] - gaps[mid], "changes of the paired gap")
        rows.append(
            {
                **dict(zip(CELL, key, strict=True)),
                "rho": cell["rho"].mean(),
                **{"step_mid": mid, "step_end": end},
                **{"gap_mid": gaps[mid].mean(), "gap_end": gaps[end].mean()},
                **{k: change[k] for k in GAP_COLUMNS if k in change},
            }
        )
    return pd.DataFrame(rows, columns=GAP_COLUMNS).sort_values(
        ["init_std", "rho"], ignore_index=True
    )
