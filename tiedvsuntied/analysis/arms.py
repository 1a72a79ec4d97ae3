"""Every arm of a sweep (tie x untie_at x head init, scales ...) against its tied arm, paired by
seed, data, size and init std, with the intervals of :func:`stats.paired_interval`."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from tiedvsuntied.analysis.stats import INTERVAL_COLUMNS, match, paired_interval
from tiedvsuntied.results import NEUTRAL

ARM_KEYS = ["data_id", "model", "init_std", "seed"]  # an arm's run and its tied reference share
ARM_CELL = ["model", "init_std", "data_id"]


def arm_label(run: pd.Series) -> str:
    """'tied', 'untied' or 'untied at step N', then the run's other variant keys (head init,
    scales) except those at a value that changes nothing (None: a tied run's head_init_std;
    results.NEUTRAL: logit and embedding scale 1)."""
    parts = [p.strip().partition("=") for p in str(run["variant"] or "").split(",") if p.strip()]
    rest = ", ".join(
        f"{k.split('.')[-1].replace('_', ' ')}: {v}"
        for k, _, v in parts
        if k != "untie_at" and v != "None" and str(NEUTRAL.get(k)) != v
    )
    base = (
        f"untied at step {int(run['untie_step'])}"
        if pd.notna(run["untie_step"])
        else ("tied" if run["tie"] else "untied")
    )
    return base + (
        f" ({rest.replace('inv_sqrt_d', 'd^-1/2').replace('sqrt_d', 'd^1/2')})" if rest else ""
    )


def with_arms(runs: pd.DataFrame) -> tuple[pd.DataFrame, str | None]:
    """Finished runs with an ``arm`` column, and the reference arm: plain 'tied', else the tied
    runs' one arm (None when there is no tied arm, or several and none plain)."""
    finished = runs[runs["status"] == "finished"]
    finished = finished.assign(
        arm=[arm_label(r) for _, r in finished.iterrows()] if len(finished) else None
    ).astype({"arm": object})
    tied = finished.loc[finished["tie"].eq(True) & finished["untie_step"].isna(), "arm"].unique()
    return finished, ("tied" if "tied" in tied else tied[0] if len(tied) == 1 else None)


def arms_table(runs: pd.DataFrame, points: Sequence[str] = ("final", "best")) -> pd.DataFrame:
    """Every arm against the tied arm of the same seed, data, size and init std: mean difference
    arm − tied with its interval (as in :func:`stats.paired_table`), and for scheduled untying,
    ``share``: the part of the untied arm's difference that untying at that step reached (1: all
    of it; NaN without an untied arm)."""
    finished, ref = with_arms(runs)
    cols = [*ARM_CELL, "arm", "reference", "point", *INTERVAL_COLUMNS]
    if ref is None:
        return pd.DataFrame(columns=[*cols, "share"])
    reference = finished[finished["arm"] == ref]
    rows = []
    for (arm, *cell_key), cell in finished[finished["arm"] != ref].groupby(
        ["arm", *ARM_CELL], sort=True
    ):
        arm_pairs = match(cell, reference, ARM_KEYS)
        rows += [
            {
                **dict(zip(ARM_CELL, cell_key, strict=True)),
                "arm": arm,
                "reference": ref,
                "point": point,
                **paired_interval(arm_pairs, point),
            }
            for point in points
            if len(arm_pairs)
        ]
    table = pd.DataFrame(rows, columns=cols)
    untied = table[table["arm"] == "untied"].set_index([*ARM_CELL, "point"])["diff"]
    full = table.join(untied.rename("untied_diff"), on=[*ARM_CELL, "point"])
    scheduled = table["arm"].str.startswith("untied at step")
    return table.assign(share=(full["diff"] / full["untied_diff"]).where(scheduled))
