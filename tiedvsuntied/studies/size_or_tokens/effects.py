"""The fourth edition's committed reading (experiments/size_or_tokens/HYPOTHESES.md): per cell
(a point of the study: a body and its steps) and contrast, the per-seed paired differences of
test bits per byte; the Holm family of exactly 14 members; the primary's verdict (size or
tokens per parameter); the sign test at d = 512 × 8 and d = 384 × 6 beside its committed lines.

Every run is read at its arm's chosen setting (:func:`analysis.chosen`: the third edition's
rule, the lowest final validation loss at the cell's lowest seed, which is the lr table's choice,
min validation bpb at seed 0). Seeds pair within a cell and across cells: seed *s* holds out
the same books and trains the same tokenizer at every budget and body."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd

from tiedvsuntied.analysis.arms import arm
from tiedvsuntied.analysis.stats import holm, seed_summary
from tiedvsuntied.model.accounting import count_parameters_for
from tiedvsuntied.presets import presets
from tiedvsuntied.studies.size_or_tokens import KEY, POINTS, STUDY, TEN_MB, analysis
from tiedvsuntied.study import rules
from tiedvsuntied.study.rules import MAX_CLIP_FRAC

SWEEP = STUDY.sweep
VALUE = "test_bpb"  # the effect's unit: bits per byte of the held-out (test) books
# the count baselines beside every loss (data/baselines.py): fitted on a seed's fold's whole
# training split, so the same at both budgets, and scored on the same test windows
COUNT_MODELS = ["test_bigram_bpb", "test_unigram_bpb"]
ARMS = ("tied", "untied", "untied_own", "tie_untie")  # analysis.arms.arm's names
CONTRASTS = (("tied", "untied"), ("tied", "untied_own"), ("tie_untie", "untied"))
CONTRASTS += (("tie_untie", "tied"),)
TIE_COST = ("tied", "untied")  # the contrast of the 2 x 2 and the sign test
TWO_BY_TWO = ("micro-10mb", "b256x8-10mb", "micro-45mb", "b256x8-45mb")
BODY = {"micro": "micro", "body256x8": "d = 256 × 8", "body384x6": "d = 384 × 6"}
BODY |= {"body512x8": "d = 512 × 8"}
NO_RUNS = f"no runs of the {SWEEP} sweep (the fourth edition, issue 55)"


def has_runs(runs: pd.DataFrame) -> bool:
    """Whether any run is of this study's sweep."""
    return "sweep" in runs and runs["sweep"].astype(str).eq(SWEEP).any()


def body_of(point: str) -> str:
    return BODY.get(POINTS[point].model, POINTS[point].model)


def budget_of(point: str) -> str:
    return "10 MB" if POINTS[point].budget_bytes == TEN_MB else "45 MB"


def label(point: str) -> str:
    """'d = 256 × 8, 45 MB'."""
    return f"{body_of(point)}, {budget_of(point)}"


def planned_tokens_per_param(point: str) -> float:
    """The point's training tokens over its tied model's parameters (HYPOTHESES.md's cells)."""
    p = POINTS[point]
    shape = {**presets("model")[p.model], "vocab_size": p.vocab_size}
    return p.steps * p.tokens_per_step / count_parameters_for(shape, tie=True)["total"]


def point_of(run: dict) -> str | None:
    """The study's point a run trained at (its body, V and steps), None if none."""
    row = {k: str(run.get(k)) for k in ("model", "vocab_size", "max_steps")}
    return next((name for name, p in POINTS.items() if p.holds(row)), None)


def chosen(runs: pd.DataFrame) -> pd.DataFrame:
    """The study's finished replicate-0 runs of ARMS at each (cell, arm)'s chosen setting, with
    their ``point``; runs at no point of the study left out, and those of an arm whose lr check
    is still running (:func:`lr_check_running`): its best lr so far is not yet its chosen one."""
    done = analysis.chosen(settled(runs)[0], sweeps=(SWEEP,), arms=ARMS)
    done = done[done["sweep"].astype(str).eq(SWEEP)]
    points = [point_of(r) for r in done.to_dict("records")]
    return done.assign(point=points).dropna(subset=["point"])


def lr_check_running(runs: pd.DataFrame) -> set[tuple[str, str]]:
    """(point, arm) whose lr check has run in part but is not settled (HYPOTHESES.md: each arm's
    first grid whole at seed 0 and its best lr with a run on both sides: rules.chosen_lr, over
    the runs alone). A point with no grid of its own (the 10 MB cells) takes the third edition's
    lr: no check. tie_untie's first grid is tied's settled lr / 2, x 1, x 2."""
    mine = runs[runs["sweep"].astype(str).eq(SWEEP)]
    if mine.empty:
        return set()
    arms = {a for a in (arm(r) for r in mine.to_dict("records")) if a in LR_CHECKED}
    if not arms:
        return set()
    table = rules.chosen_lr(mine, _first_grid, arm, ("tied", "untied"), key=KEY)
    if "tie_untie" in arms:
        tied = table[table["arm"].eq("tied") & table["settled"].astype(bool)]
        at = {point_of(r): r["lr"] for r in tied.to_dict("records")}

        def third(row: dict) -> list[float]:  # no grid before tied's lr is settled: never whole
            lr = at.get(point_of(row))
            return [lr * f for f in (0.5, 1, 2)] if lr else [np.nan]

        table = pd.concat([table, rules.chosen_lr(mine, third, arm, ("tie_untie",), key=KEY)])
    running = {
        (point_of(r), r["arm"]) for r in table[~table["settled"].astype(bool)].to_dict("records")
    }
    return {(p, a) for p, a in running if p is not None and POINTS[p].grids}


def settled(runs: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """``runs`` less this study's runs of each (point, arm) whose lr check is still running
    (:func:`lr_check_running`: its best lr so far is not yet its chosen one), and the cells
    left out, named (``label``), for a caption."""
    running = lr_check_running(runs)
    keys = [(point_of(r), arm(r)) for r in runs.to_dict("records")]
    held = pd.Series([key in running for key in keys], index=runs.index, dtype=bool)
    held &= runs["sweep"].astype(str).eq(SWEEP)
    return runs[~held], sorted({label(point) for point, _ in running})


LR_CHECKED = ("tied", "untied", "tie_untie")  # the arms with an lr check of their own


def _first_grid(row: dict) -> list[float]:
    """An arm's first lr grid at a row's point (HYPOTHESES.md, "Learning rates")."""
    point = point_of(row)
    grid = POINTS[point].grids.get(row["arm"], STUDY.grid) if point else ""
    return [float(x) for x in grid.split(",") if x]


def unread(runs: pd.DataFrame, cells: pd.DataFrame, points, who: str = "") -> list[str]:
    """A caption's words for the ``points`` with no cell in ``cells`` (``who``: a suffix to
    "Not run yet"): those whose lr check is running apart from those not run; and those drawn
    with fewer than the rules' seeds, which are no result yet."""
    checking = {point for point, _ in lr_check_running(runs)}
    absent = [p for p in points if p not in set(cells["point"])]
    short = cells[cells["point"].isin(points) & cells["n_seeds"].lt(rules.SEEDS)]
    words = []
    if not_run := [label(p) for p in absent if p not in checking]:
        words.append(f"Not run yet{who}: {'; '.join(not_run)}.")
    if running := [label(p) for p in absent if p in checking]:
        words.append(
            "Still in its lr check, read once each arm's best lr has a run on both sides"
            f"{who}: {'; '.join(running)}."
        )
    if short := [f"{label(p)} ({n})" for p, n in short.groupby("point")["n_seeds"].max().items()]:
        words.append(f"Drawn short of {rules.SEEDS} seeds, no result yet{who}: {'; '.join(short)}.")
    return words


# what a cell and a member read of each run: filtering these columns, not the runs table's
# every one, once a cell and arm (the family's 14 members filter some 60 times)
READ = [
    "point",
    "arm",
    "seed",
    VALUE,
    *COUNT_MODELS,
    "rho",
    "rho_untied",
    "tokens_per_param",
    "lr",
    "clip_frac",
]


def seed_diffs(done: pd.DataFrame, point: str, first: str, second: str) -> pd.Series:
    """first − second test bpb at ``point`` per seed (indexed by seed), where both ran."""
    at = done[done["point"].eq(point)]
    a, b = (at[at["arm"].eq(arm)].set_index("seed")[VALUE] for arm in (first, second))
    return (a - b).dropna().astype(float).sort_index()


# ----------------------------------------------------------------------------- the cells
CELL_COLUMNS = [
    "point",
    "body",
    "budget",
    "max_steps",
    "contrast",
    "n_seeds",
    "diff",
    "low",
    "high",
    "p",
    "rho",
    "rho_untied",
    "tokens_per_param",
    "bpb_first",
    "bpb_second",
    *COUNT_MODELS,
    "lr_first",
    "lr_second",
    "clip_first",
    "clip_second",
    "marked",
    "seed_diffs",
]


def clip(done: pd.DataFrame, point: str, arm: str) -> float:
    """The arm's clip_frac at ``point``: the mean over its seeds (each run the same steps, so the
    share of all its seeds' steps on which the clip bound)."""
    at = done[done["point"].eq(point) & done["arm"].eq(arm)]
    return float(at["clip_frac"].mean()) if len(at) else np.nan


def marked(clips: dict[str, float]) -> str:
    """HYPOTHESES.md's clip rule: an arm whose clip binds on more than MAX_CLIP_FRAC of its
    seeds' steps is marked (nothing is replaced): the arms so marked, joined."""
    return ", ".join(arm for arm, frac in clips.items() if frac > MAX_CLIP_FRAC)


def _cell(done: pd.DataFrame, point: str, first: str, second: str) -> dict | None:
    diffs = seed_diffs(done, point, first, second)
    if diffs.empty:
        return None
    at = done[done["point"].eq(point)]
    arms = {a: at[at["arm"].eq(a) & at["seed"].isin(diffs.index)] for a in (first, second)}
    tied = at[at["arm"].eq("tied")]  # tokens per parameter: the tied model's (planned if none)
    per_param = tied["tokens_per_param"].mean() if len(tied) else planned_tokens_per_param(point)
    clips = {a: clip(done, point, a) for a in (first, second)}
    return {
        "point": point,
        "body": body_of(point),
        "budget": budget_of(point),
        "max_steps": POINTS[point].steps,
        "contrast": f"{first} − {second}",
        **{k: v for k, v in seed_summary(diffs).items() if k != "method"},
        "rho": at["rho"].mean(),  # every arm's record: the tied definition, and the untied one
        "rho_untied": at["rho_untied"].mean(),
        "tokens_per_param": per_param,
        "bpb_first": arms[first][VALUE].mean(),
        "bpb_second": arms[second][VALUE].mean(),
        **at[at["seed"].isin(diffs.index)].groupby("seed")[COUNT_MODELS].first().mean(),
        "lr_first": arms[first]["lr"].iloc[0],
        "lr_second": arms[second]["lr"].iloc[0],
        "clip_first": clips[first],
        "clip_second": clips[second],
        "marked": marked(clips),
    }


def cells(runs: pd.DataFrame) -> pd.DataFrame:
    """CELL_COLUMNS per point (the study's order) and contrast (CONTRASTS) whose two arms ran at
    a seed: n, mean, the 95% Student-t interval over the seeds' paired differences, the
    unadjusted p, rho and tokens per parameter (the tied model's), each arm's mean bpb, lr and
    clip fraction; ``marked``: the arms over the clip rule's line."""
    done = chosen(runs)[READ]
    rows = [_cell(done, point, *pair) for point in POINTS for pair in CONTRASTS]
    return pd.DataFrame([r for r in rows if r], columns=CELL_COLUMNS)


# ----------------------------------------------------------------------------- the family
class Member(NamedTuple):
    """A member of the Holm family: per seed, the contrast ``first`` (point, arm, arm) less
    ``second`` (the same at another point) where given, paired by seed."""

    name: str
    words: str  # what it subtracts, where its name does not say
    first: tuple[str, str, str]
    second: tuple[str, str, str] | None = None


def _tie(point: str) -> tuple[str, str, str]:
    return (point, *TIE_COST)


# HYPOTHESES.md, "Intervals and multiplicity: the Holm family": exactly these 14, in its order
FAMILY = (
    Member(
        "P",
        "primary: d = 256 × 8, 45 MB − 10 MB, of tied − untied",
        _tie("b256x8-45mb"),
        _tie("b256x8-10mb"),
    ),
    Member("S1", "micro, 45 MB − 10 MB, of tied − untied", _tie("micro-45mb"), _tie("micro-10mb")),
    Member(
        "S2",
        "d = 256 × 8 at 45 MB − micro at 10 MB, of tied − untied",
        _tie("b256x8-45mb"),
        _tie("micro-10mb"),
    ),
    *(
        Member(f"{a} − {b}, {label(p)}", "", (p, a, b))
        for p, a, b in (
            ("micro-10mb", *TIE_COST),
            ("b256x8-10mb", *TIE_COST),
            ("micro-45mb", *TIE_COST),
            ("b256x8-45mb", *TIE_COST),
            ("b512x8-10mb", *TIE_COST),
            ("b512x8-10mb", "tied", "untied_own"),
            ("b384x6-10mb", *TIE_COST),
            ("b256x8-45mb", "tie_untie", "untied"),
            ("b256x8-45mb", "tie_untie", "tied"),
            ("b512x8-10mb", "tie_untie", "untied"),
            ("b512x8-10mb", "tie_untie", "tied"),
        )
    ),
)
NOT_RUN = "not run"
FAMILY_COLUMNS = ["member", "name", "definition", "status", "n_seeds", "diff", "low", "high", "p"]
FAMILY_COLUMNS += ["p_holm", "marked", "seed_diffs"]


def member_diffs(done: pd.DataFrame, member: Member) -> pd.Series:
    """The member's value per seed: its first contrast, less its second (seeds of both)."""
    first = seed_diffs(done, *member.first)
    if member.second is None:
        return first
    return (first - seed_diffs(done, *member.second)).dropna()


def member_marks(done: pd.DataFrame, member: Member) -> str:
    """The arms of the member's cells over the clip rule's line, each with its cell."""
    parts = [member.first, *([member.second] if member.second else [])]
    marks = [
        f"{arm} at {label(point)}"
        for point, *arms in parts
        for arm in marked({a: clip(done, point, a) for a in arms}).split(", ")
        if arm
    ]
    return "; ".join(dict.fromkeys(marks))


def family(runs: pd.DataFrame) -> pd.DataFrame:
    """FAMILY_COLUMNS for each of the 14 members in HYPOTHESES.md's order: the t-interval over
    seeds and its p; ``status`` 'not run' (no seed has both), 'no interval' (one seed) or 'run';
    ``p_holm``: Holm (statsmodels) over the members with a p, the others NaN; ``marked``: the
    arms of its cells over the clip rule's line."""
    done = chosen(runs)[READ]
    rows = []
    for k, member in enumerate(FAMILY, start=1):
        summary = seed_summary(member_diffs(done, member))
        n = summary["n_seeds"]
        status = NOT_RUN if n == 0 else "no interval" if np.isnan(summary["p"]) else "run"
        keep = {c: summary[c] for c in ("n_seeds", "diff", "low", "high", "p", "seed_diffs")}
        row = {"member": k, "name": member.name, "definition": member.words, "status": status}
        rows.append(row | keep | {"marked": member_marks(done, member)})
    table = pd.DataFrame(rows)
    table["p_holm"] = holm(table["p"]).to_numpy()
    return table[FAMILY_COLUMNS]


def family_size(table: pd.DataFrame) -> str:
    """'14 named, k run' (k: the members in Holm's adjustment), and those with one seed."""
    k, one = int(table["p_holm"].notna().sum()), int(table["status"].eq("no interval").sum())
    text = f"{len(table)} named, {k} run"
    return text + (f" ({one} more with one seed: no interval yet)" if one else "")
