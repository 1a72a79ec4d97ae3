"""The second edition's analysis (experiments/tie_x_init_books/HYPOTHESES.md): each run's arm,
the learning-rate rule, the contrast tables (A: tying per cell, B: interactions, C: the other
arms) with their floors and count baselines, and the held-out books as a variance component.

A replicate of this study is a seed *and* a held-out fold (``data.heldout_fold = seed``): the
per-seed paired differences vary with the init and with the books held out, so a t-interval
over them carries both. Runs are paired by (model, seed).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from tiedvsuntied.analysis.arms import head_arm
from tiedvsuntied.analysis.load import ResultsError
from tiedvsuntied.analysis.stats import first_replicates, holm, seed_summary

STDS = ("0.02", "inv_sqrt_d", "1.0")  # canonical init_std spellings, smallest first
LR_MULTS = (0.25, 1.0, 4.0)  # the lr check's first three multipliers
LR_STEP = 4.0  # the factor between neighbouring multipliers (one step out from an edge)
PRIMARY = ("A", "micro", "tied − untied, init 0.02")  # (table, model, contrast)
Cell = tuple[str, str]  # (arm, init_std)
Combination = Mapping[Cell, float]  # a contrast: coefficients on cells' per-seed losses


def with_arms(runs: pd.DataFrame) -> pd.DataFrame:
    done = runs[runs["status"] == "finished"]
    return done.assign(arm=[head_arm(r) for r in done.to_dict("records")])


# ----------------------------------------------------------------------------- learning rates
def lr_check_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The lr check's runs (nano, seed 0, replicate 0), with their ``arm``."""
    check = with_arms(first_replicates(runs))
    return check[(check["model"] == "nano") & (check["seed"] == 0)]


def lr_check(runs: pd.DataFrame) -> pd.DataFrame:
    """Final validation loss of the lr check's runs (nano, seed 0): (arm, init std) x mult."""
    return lr_check_runs(runs).pivot_table(
        index=["arm", "init_std"], columns="emb_lr_mult", values="final_val_loss"
    )


def chosen_lr(runs: pd.DataFrame) -> pd.DataFrame:
    """Per arm: the multiplier of the lowest final validation loss, and ``run_next``: one step
    out where that is an edge of the three first run (HYPOTHESES.md, "Learning rates")."""
    table = lr_check(runs)
    ran, best = table.notna(), table.idxmin(axis=1)
    # one step out, once, and only once the first three have all run (and no other)
    first = ran.reindex(columns=list(LR_MULTS), fill_value=False).all(axis=1)
    ready = first & (ran.sum(axis=1) == len(LR_MULTS))
    out_from = {min(LR_MULTS): 1 / LR_STEP, max(LR_MULTS): LR_STEP}
    run_next = [m * out_from[m] if m in out_from else None for m in best.where(ready)]
    out = table.rename(columns=lambda m: f"val_at_{m:g}")
    return out.assign(emb_lr_mult=best, run_next=run_next).reset_index()


def grid(runs: pd.DataFrame) -> pd.DataFrame:
    """The finished runs at their arm's chosen multiplier (replicates too)."""
    choice = chosen_lr(runs)[["arm", "init_std", "emb_lr_mult"]]
    if choice.empty:
        raise ResultsError(
            "no lr check among these runs (nano, seed 0, emb_lr_mult 0.25/1/4 per arm), which "
            "chooses each arm's multiplier: add experiments/tie_x_init_books/results"
        )
    return with_arms(runs).merge(choice, on=["arm", "init_std", "emb_lr_mult"])


def wide(runs: pd.DataFrame, value: str = "test_loss") -> pd.DataFrame:
    """(model, seed) rows, (arm, init_std) columns: ``value``."""
    return runs.pivot_table(index=["model", "seed"], columns=["arm", "init_std"], values=value)


# ----------------------------------------------------------------------------- contrasts
def _minus(first: str, second: str, std: str = "1.0") -> dict[Cell, float]:
    """The arm ``first`` − the arm ``second`` at one init std."""
    return {(first, std): 1.0, (second, std): -1.0}


def contrasts() -> list[tuple[str, str, Combination]]:
    """(table, name, combination) of HYPOTHESES.md's per-size contrasts: A and the init-std
    interactions of B, and C. B's size interactions are :func:`size_interactions`."""
    shown = {"0.02": "0.02", "inv_sqrt_d": "d^-0.5", "1.0": "1.0"}
    out = [("A", f"tied − untied, init {shown[s]}", _minus("tied", "untied", s)) for s in STDS]
    for std in ("1.0", "inv_sqrt_d"):
        both = {**_minus("tied", "untied", std), **_minus("untied", "tied", "0.02")}
        out.append(("B", f"tying at {shown[std]} − tying at 0.02", both))
    split = "emb1_head_dsqrt"  # emb 1.0, head d^-0.5
    out.append(("C", "T5 − tied, init 1.0", _minus("t5", "tied")))
    out.append(("C", "emb 1.0/head d^-0.5 − untied 1.0", _minus(split, "untied")))
    out.append(("C", "emb 1.0/head d^-0.5 − tied 1.0", _minus(split, "tied")))
    return out


def per_seed(table: pd.DataFrame, combination: Combination) -> pd.Series:
    """The combination's value per row (NaN where a cell is missing)."""
    missing = [cell for cell in combination if cell not in table.columns]
    if missing:
        return pd.Series(np.nan, index=table.index)
    return sum(table[cell] * coef for cell, coef in combination.items())


def _row(table: str, model: str, name: str, values: pd.Series) -> dict:
    row = seed_summary(values, "paired differences (each its own held-out books)")
    row["seed_diffs"] = [round(v, 4) for v in row["seed_diffs"]]
    return {"table": table, "model": model, "contrast": name, **row}


def _by_contrast(table: pd.DataFrame):
    """(model, table, contrast, its value per seed) of every contrast at each size of ``table``."""
    for model in table.index.get_level_values("model").unique():
        for name_table, name, combination in contrasts():
            yield model, name_table, name, per_seed(table.loc[model], combination)


def contrast_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Every contrast of HYPOTHESES.md at each size on the test loss, with the noise floor
    (:func:`replicate_floor`), ``p`` (the interval's t-test) and ``p_holm`` (Holm-adjusted over
    the table's intervals) and ``primary``."""
    chosen = grid(runs)
    table, floors = wide(first_replicates(chosen)), replicate_floor(chosen)
    rows = [
        {**_row(name_table, model, name, values), "floor": floors.get((model, name), np.nan)}
        for model, name_table, name, values in _by_contrast(table)
    ]
    out = pd.DataFrame(rows + size_interactions(table))
    if "p" in out:  # one family: every row with an interval (HYPOTHESES.md's 19)
        out.insert(out.columns.get_loc("p") + 1, "p_holm", holm(out["p"]))
    out["primary"] = pd.MultiIndex.from_frame(out[["table", "model", "contrast"]]).isin([PRIMARY])
    return out


def size_interactions(table: pd.DataFrame) -> list[dict]:
    """B: tying's effect at micro minus at nano, per init std, paired by seed."""
    if not {"nano", "micro"} <= set(table.index.get_level_values("model")):
        return []
    micro, nano = table.loc["micro"], table.loc["nano"]
    return [
        _row("B", "micro − nano", name, per_seed(micro, comb) - per_seed(nano, comb))
        for name_table, name, comb in contrasts()
        if name_table == "A"
    ]


def replicate_floor(chosen: pd.DataFrame) -> dict:
    """{(model, contrast): |contrast(replicate k) − contrast(replicate 0)|} at the seeds where
    every cell of the contrast ran again (the floor of a difference, not of one run)."""
    again = chosen[chosen["replicate"].fillna(0) > 0]
    if again.empty:
        return {}
    first = {(m, name): v for m, _, name, v in _by_contrast(wide(first_replicates(chosen)))}
    deltas = {
        (m, name): (v - first[(m, name)]).abs() for m, _, name, v in _by_contrast(wide(again))
    }
    return {key: float(delta.mean()) for key, delta in deltas.items() if delta.notna().any()}


def hypothesis_checks(runs: pd.DataFrame) -> pd.DataFrame:
    """H2 and H5 of HYPOTHESES.md per size, each a t-interval over seeds (beyond the 19 intervals
    of tables A-C). H2: init 1.0 − init d^-0.5 of each head (predicted within 0.3 nats). H5:
    each arm's test loss − the registered bigram on the same windows (predicted < 0)."""
    chosen = first_replicates(grid(runs))
    loss, gap = wide(chosen), wide(chosen) - wide(chosen, "test_bigram")
    rows = []
    for model in loss.index.get_level_values("model").unique():
        for head in ("tied", "untied"):
            one = {(head, "1.0"): 1.0, (head, "inv_sqrt_d"): -1.0}
            name = f"{head}: init 1.0 − init d^-0.5"
            rows.append(_row("H2", model, name, per_seed(loss.loc[model], one)))
        for cell in gap.columns:
            rows.append(_row("H5", model, "{} {} − bigram".format(*cell), gap.loc[model, cell]))
    return pd.DataFrame(rows).query("n_seeds > 0").reset_index(drop=True)


def references(runs: pd.DataFrame) -> pd.DataFrame:
    """Per size: the count models' test loss and the share of test targets never seen in
    training, the mean over the seeds (each its own held-out books). Every run of a seed and
    size scores the same windows, so each seed counts once, however many runs it has (the lr
    check adds 32 runs of seed 0)."""
    columns = ["test_unigram", "test_bigram", "test_unseen"]
    per_seed = first_replicates(with_arms(runs)).groupby(["model", "seed"])[columns].first()
    return per_seed.groupby("model").mean()


# ----------------------------------------------------------------------------- books
def document_losses(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per run and test book: the run's loss on the book's windows, the count models'
    and the unseen share there (from each run's summary.json ``heldout``)."""
    rows = []
    for run in runs.to_dict("records"):
        summary = json.loads((Path(run["path"]) / "summary.json").read_text())
        books = ((summary.get("heldout") or {}).get("test") or {}).get("documents") or {}
        keys = ("model", "seed", "replicate", "arm", "init_std", "run_id")
        rows += [{**{k: run.get(k) for k in keys}, "document": d, **v} for d, v in books.items()]
    return pd.DataFrame(rows)


def book_effects(runs: pd.DataFrame, combination: Combination) -> pd.DataFrame:
    """The combination per (model, seed, test book): e.g. tied − untied on each."""
    books = document_losses(first_replicates(grid(runs)))
    if books.empty:
        return books
    table = books.pivot_table(
        index=["model", "seed", "document"], columns=["arm", "init_std"], values="loss"
    )
    return per_seed(table, combination).rename("effect").dropna().reset_index()


def text_variance(effects: pd.DataFrame) -> pd.DataFrame:
    """Per size: the spread of a per-book effect between the books of one seed (pooled sd) and
    between the seeds' means (sd), with the counts: H6 compares the two."""
    seeds = effects.groupby(["model", "seed"])["effect"]
    squares = (effects["effect"] - seeds.transform("mean")) ** 2
    by_model = effects.assign(squares=squares).groupby("model")
    out = by_model.agg(
        books=("document", "nunique"), seeds=("seed", "nunique"), n=("effect", "size")
    )
    within = by_model["squares"].sum() / (out.pop("n") - out["seeds"])
    out["sd_between_books"] = np.sqrt(within)
    out["sd_between_seed_means"] = seeds.mean().groupby("model").std(ddof=1)
    return out.reset_index()
