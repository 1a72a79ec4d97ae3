"""Contrasts beyond one cell's tied − untied, each paired by seed with the t-intervals of
:mod:`.stats`: every arm of a sweep (tie x untie_at x head init, scales ...) against its tied arm;
each arm at its own best learning rate (the classic comparison); and the interaction of tying
with a factor (the tie effect at init std 1.0 minus at d^-0.5, or at one size minus another).
And a run's arm by its conf/arm option (:func:`head_arm`, :func:`arm`), as studies name them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd

from tiedvsuntied.analysis import stats
from tiedvsuntied.analysis.rows import key_label
from tiedvsuntied.model.config import canonical_init_std
from tiedvsuntied.train.config import NEUTRAL

ARM_KEYS = ["data_id", "model", "init_std", "seed"]  # an arm's run and its tied reference share
ARM_CELL = ["model", "init_std", "data_id"]
ARMS_SIGN = "tied − arm (> 0: tying costs, the arm beats the tied one), as tied − untied"


def arm_label(run: pd.Series) -> str:
    """'tied', 'untied' or 'untied at step N', then the run's other variant keys (head init,
    scales) except those at a value that changes nothing (None: a tied run's head.init_std;
    train.config.NEUTRAL: logit and embedding scale 1)."""
    parts = [p.strip().partition("=") for p in str(run["variant"] or "").split(",") if p.strip()]
    rest = ", ".join(
        f"{key_label(k)}: {v}"
        for k, _, v in parts
        if k != "head.untie_at" and v != "None" and str(NEUTRAL.get(k)) != v
    )
    base = "tied" if run["tie"] else "untied"
    if pd.notna(run["untie_step"]):
        base = f"untied at step {int(run['untie_step'])}"
    rest = rest.replace("inv_sqrt_d", "d^-1/2").replace("sqrt_d", "d^1/2")
    return f"{base} ({rest})" if rest else base


def head_arm(run: Mapping) -> str:
    """A run's arm by its head: t5 (tied, rescaled), emb1_head_dsqrt (untied, the head at
    another std than the embedding), else tied or untied."""
    if run.get("t5_rescale") is True:
        return "t5"
    emb, head = run.get("init_std_resolved_emb"), run.get("init_std_resolved_head")
    if run.get("tie") is False and pd.notna(emb) and pd.notna(head) and emb != head:
        return "emb1_head_dsqrt"
    return "tied" if run.get("tie") else "untied"


# the columns head_arm and arm read (a wide runs table's other ~80 need not become dicts)
ARM_INPUTS = [
    "variant",
    "t5_rescale",
    "init_std_resolved_emb",
    "init_std_resolved_head",
    "tie",
    "untie_step",
    "head_lr_mult",
    "emb_lr_mult",
]


def arms_of(runs: pd.DataFrame) -> list[str]:
    """:func:`arm` of each run (row) of ``runs``."""
    return [arm(r) for r in runs[[c for c in ARM_INPUTS if c in runs]].to_dict("records")]


def arm(run) -> str:
    """:func:`head_arm`, with three arms of their own: tied with its input-side gradient scaled
    (head.tied_input_grad_scale, conf/arm/tied_in_grad.yaml), tied then untied (``tie_untie``,
    head.untie_at), and an arm at its own multipliers,
    ``<arm>_own`` (its output matrix at another lr multiplier than its embedding)."""
    variant = run.get("variant")
    if isinstance(variant, str) and "tied_input_grad_scale" in variant:
        return "tied_input_grad"
    name = head_arm(run)
    if name == "tied" and pd.notna(run.get("untie_step")):  # conf/arm/tie_untie.yaml
        return "tie_untie"
    head, emb = run.get("head_lr_mult"), run.get("emb_lr_mult")
    own = name in ("tied", "untied") and pd.notna(head) and pd.notna(emb) and head != emb
    return f"{name}_own" if own else name


def with_arms(runs: pd.DataFrame) -> tuple[pd.DataFrame, str | None]:
    """Finished runs with an ``arm`` column, and the reference arm: plain 'tied', else the tied
    runs' one arm (None when there is no tied arm, or several and none plain)."""
    finished = stats.first_replicates(runs[runs["status"] == "finished"])
    arms = [arm_label(r) for _, r in finished.iterrows()]
    finished = finished.assign(arm=arms).astype({"arm": object})
    tied = finished.loc[finished["tie"].eq(True) & finished["untie_step"].isna(), "arm"].unique()
    return finished, ("tied" if "tied" in tied else tied[0] if len(tied) == 1 else None)


def arms_table(runs: pd.DataFrame, points: Sequence[str] = ("final", "best")) -> pd.DataFrame:
    """Every arm against the tied arm of the same seed, data, size and init std: mean difference
    tied − arm (ARMS_SIGN: the sign of tied − untied, so the untied arm's row is figure 6's point;
    mean_t is the tied arm's mean, mean_u the arm's) with its interval (as in
    :func:`stats.paired_table`), and for scheduled untying, ``share``: the part of the untied
    arm's difference that untying at that step reached (1: all of it; NaN without an untied arm)."""
    finished, ref = with_arms(runs)
    cols = [*ARM_CELL, "arm", "reference", "point", *stats.INTERVAL_COLUMNS]
    if ref is None:
        return pd.DataFrame(columns=[*cols, "share"])
    reference, others = finished[finished["arm"] == ref], finished[finished["arm"] != ref]
    rows = []
    for (arm, *cell_key), cell in others.groupby(["arm", *ARM_CELL], sort=True):
        arm_pairs = stats.match(reference, cell, ARM_KEYS)  # _t: the reference, _u: the arm
        head = {**dict(zip(ARM_CELL, cell_key, strict=True)), "arm": arm, "reference": ref}
        rows += [
            {**head, "point": point, **stats.paired_interval(arm_pairs, point)}
            for point in points
            if len(arm_pairs)
        ]
    table = pd.DataFrame(rows, columns=cols)
    untied = table[table["arm"] == "untied"].set_index([*ARM_CELL, "point"])["diff"]
    full = table.join(untied.rename("untied_diff"), on=[*ARM_CELL, "point"])
    scheduled = table["arm"].str.startswith("untied at step")
    return table.assign(share=(full["diff"] / full["untied_diff"]).where(scheduled))


def best_lr_comparison(runs: pd.DataFrame) -> pd.DataFrame:
    """The classic comparison (Press & Wolf 2017; Inan et al. 2017): each arm at its OWN best
    learning rate (lowest mean best validation loss over its finished seeds), then tied − untied
    paired by seed at those rates, for the test loss at the best validation step (early
    stopping) and at the final step. One row per data/size/init std/other variant keys."""
    finished = stats.first_replicates(runs[(runs["status"] == "finished") & runs["lr"].notna()])
    without_lr = finished["variant"].fillna("").str.replace(r"(, )?optim\.lr=[^,]*", "", regex=True)
    finished = finished.assign(base=without_lr.str.strip(", "))
    keys = ["data_id", "model", "init_std", "base"]
    rows = []
    for key, cell in finished.groupby(keys, dropna=False, sort=True):
        means = cell.groupby(["tie", "lr"])["best_val_loss"].agg(["mean", "count"]).reset_index()
        best = means.sort_values("mean").groupby("tie").head(1).set_index("tie")
        if len(best) < 2:
            continue
        cell_pairs = stats.pairs(cell[cell["lr"] == cell["tie"].map(best["lr"])], [*keys, "seed"])
        at_best = {
            "lr_tied": best.loc[True, "lr"],
            "lr_untied": best.loc[False, "lr"],
            "lrs": int(means["lr"].nunique()),
            "val_tied": best.loc[True, "mean"],
            "val_untied": best.loc[False, "mean"],
        }
        cell_key = dict(zip(keys, key, strict=True))
        rows += [
            {**cell_key, "point": point, **at_best, **stats.paired_interval(cell_pairs, point)}
            for point in ("best", "final")
        ]
    return pd.DataFrame(rows)


def interaction_interval(at_first: pd.Series, at_second: pd.Series) -> dict:
    """Tie effects per seed (Series indexed by seed) at two levels of a factor -> the mean of
    their difference over the seeds that have both, with :func:`seed_interval`'s t-interval."""
    diffs = at_first.sub(at_second).dropna()  # aligned by seed: NaN where a level lacks it
    return {
        "effect_first": at_first[diffs.index].mean(),
        "effect_second": at_second[diffs.index].mean(),
        **stats.seed_summary(diffs, "differences of paired differences"),
    }


def interaction_table(
    runs: pd.DataFrame,
    factor: str = stats.PRIMARY_CONTRAST.factor,
    levels: Sequence[str] = stats.PRIMARY_CONTRAST.levels,
    points: Sequence[str] = (stats.PRIMARY_CONTRAST.point,),
) -> pd.DataFrame:
    """Per cell of the other CELL columns and point: the tie effect (tied − untied, paired) at
    ``factor`` = levels[0] minus at levels[1], paired by seed, with its t-interval; ``primary``
    marks the row of PRIMARY_CONTRAST. ``factor="model"`` contrasts sizes."""
    if factor not in stats.CELL:
        raise KeyError(f"factor={factor!r}: valid factors are {', '.join(stats.CELL)}")
    first, second = (canonical_init_std(v) if factor == "init_std" else str(v) for v in levels)
    keys = [c for c in stats.CELL if c != factor]
    rows = []
    for key, cell in stats.pairs(runs).groupby(keys, dropna=False, sort=True):
        level = cell[factor].astype(str).to_numpy()
        if not {first, second} <= set(level):
            continue
        head = {**dict(zip(keys, key, strict=True)), "contrast": f"{factor}: {first} − {second}"}
        for point in points:
            col = stats.POINTS[point]
            effect = (cell[f"{col}_t"] - cell[f"{col}_u"]).set_axis(cell["seed"]).astype(float)
            at_levels = interaction_interval(effect[level == first], effect[level == second])
            rows.append({**head, "point": point, **at_levels})
    columns = [*keys, "contrast", "point", "n_seeds", "effect_first", "effect_second"]
    table = pd.DataFrame(rows, columns=[*columns, "diff", "low", "high", "method", "seed_diffs"])
    primary = (factor, (first, second)) == stats.PRIMARY_CONTRAST[:2]
    largest = stats.largest_model(runs[runs["status"] == "finished"])
    return table.assign(
        primary=primary
        & (table["point"] == stats.PRIMARY_CONTRAST.point)
        & (table.get("model", largest) == largest)
    )
