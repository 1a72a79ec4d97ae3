"""The third edition's token axis (issue 40, experiments/sign_flip): tying's effect at each
evaluation along training, paired by seed (HYPOTHESES.md's H6)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tiedvsuntied.analysis.stats import seed_summary
from tiedvsuntied.results.metrics import VAL_BPB
from tiedvsuntied.studies.sign_flip.analysis import CELL, pairs


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
GAP_COLUMNS = [
    *CELL,
    "rho",
    "step_from",
    "step_to",
    "gap_from",
    "gap_to",
    "n_seeds",
    "diff",
    "low",
    "high",
    "p",
    "seed_diffs",
]
H6_BETWEEN = (0.5, 1.0)  # HYPOTHESES.md's H6: from the middle of training to its end
# exploratory: inside the WSD schedule's stable phase (it decays over the last 20% of steps), one
# lr while the tokens seen double, so the schedule's decay does not stand in for the tokens
STABLE_BETWEEN = (0.4, 0.8)


def gap_change(
    runs: pd.DataFrame,
    history: pd.DataFrame,
    metric: str = VAL_BPB,
    between: tuple[float, float] = H6_BETWEEN,
) -> pd.DataFrame:
    """Per cell, tied − untied of ``metric`` at the evaluations nearest the two fractions
    ``between`` of the last step (``step_from``, ``step_to``; H6: the middle and the end), their
    means over seeds, and per seed the change to − from (``diff`` < 0: the gap closes) with its
    t-interval and p."""
    paired = paired_history(runs, history, metric)
    rows = []
    for key, cell in paired.groupby(CELL, sort=True):
        steps = np.sort(cell["step"].unique())
        at = [steps[np.abs(steps - fraction * steps[-1]).argmin()] for fraction in between]
        gaps = cell.pivot_table(index="seed", columns="step", values="diff")[at].dropna()
        change = seed_summary(gaps[at[1]] - gaps[at[0]], "changes of the paired gap")
        rows.append(
            {
                **dict(zip(CELL, key, strict=True)),
                "rho": cell["rho"].mean(),
                **{"step_from": at[0], "step_to": at[1]},
                **{"gap_from": gaps[at[0]].mean(), "gap_to": gaps[at[1]].mean()},
                **{k: change[k] for k in GAP_COLUMNS if k in change},
            }
        )
    return pd.DataFrame(rows, columns=GAP_COLUMNS).sort_values(
        ["init_std", "rho"], ignore_index=True
    )
