"""The third edition's analysis (issue 40, experiments/sign_flip): where tying's effect changes
sign on a map over the head's share rho = V·d / (V·d + non-embedding parameters).

A ladder point is a model body (layers, heads, width, context) and a vocabulary V; rho moves by
V at a fixed body (the V-ladder) or by the body at a fixed V (the body-ladder). Tied and untied
runs pair by (point, init std, seed); each seed holds out its own books, so the t-interval over
the seeds' paired differences carries the init and the text. The effect is tied − untied in
bits per byte of the test split (> 0: tying costs)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import pandas as pd

from tiedvsuntied.analysis.arms import arms_of
from tiedvsuntied.analysis.stats import first_replicates, holm, match, seed_summary

SWEEP = "sign_flip"  # the study's sweep name (and prefix: sign_flip_gpu, ...)
BODY = ["n_layer", "n_head", "n_embd", "block_size"]  # a model body: everything but V
POINT = [*BODY, "vocab_size"]  # a ladder point
CELL = [*POINT, "init_std"]  # one map cell: its tied and untied runs pair by seed
VALUE = "test_bpb"  # the effect's unit: bits per byte, comparable across vocabularies
PRIMARY_INIT = "inv_sqrt_d"  # the init std of the primary contrast and the ladder's first arm
WAYS = {(True, False): "V", (False, True): "body", (True, True): "both", (False, False): "alone"}
# the ladder's vocabularies are BPEs trained on each fold (data.encoding=bpe); a point on another
# (GPT-2's, scripts/gpu/slot.sh's pieces) is drawn beside the ladder, not in its ways or its fit
LADDER_ENCODING = "bpe"
OFF_LADDER = "other"
# HYPOTHESES.md's clip rule: an arm whose gradient clip binds on more than this share of its
# steps is re-run with the clip raised, and that is said
CLIP_RULE = 0.10
NOT_SIGN_FLIP = f"no runs of a {SWEEP} sweep (issue 40's map over rho): not the third edition"


def is_sign_flip(runs: pd.DataFrame) -> bool:
    """Whether any run belongs to a sign_flip sweep."""
    return "sweep" in runs and runs["sweep"].astype(str).str.startswith(SWEEP).any()


def body_label(n_embd, n_layer) -> str:
    return f"d={int(n_embd)}, {int(n_layer)} layers"


def ladder(runs: pd.DataFrame) -> pd.DataFrame:
    """The finished runs of replicate 0 of the sign_flip sweeps with ``arm``, ``body`` and
    ``way``: how the point's rho was moved among the ladder's points (V: its body has other V's;
    body: its V has other bodies; both; alone: neither), OFF_LADDER for a point on another
    tokenizer than the ladder's."""
    done = first_replicates(runs[runs["status"].eq("finished")])
    done = done[done["sweep"].astype(str).str.startswith(SWEEP)]
    done = done.assign(arm=arms_of(done))
    body = [body_label(d, n) for d, n in zip(done["n_embd"], done["n_layer"], strict=True)]
    done = done.assign(body=body)
    points = done.loc[done["encoding"].eq(LADDER_ENCODING), POINT].drop_duplicates()
    by_v = points.groupby(BODY)["vocab_size"].transform("nunique") > 1
    by_body = points.groupby("vocab_size")["n_embd"].transform("size") > 1
    ways = [WAYS[(bool(v), bool(b))] for v, b in zip(by_v, by_body, strict=True)]
    done = done.merge(points.assign(way=ways), on=POINT, how="left")
    return done.assign(way=done["way"].fillna(OFF_LADDER))


SETTING = ["lr", "emb_lr_mult", "variant"]  # what the lr check varies within one arm


def grid(runs: pd.DataFrame) -> pd.DataFrame:
    """:func:`ladder`'s runs at each (cell, arm)'s chosen setting (SETTING): where the lr check
    ran several, the one of the lowest final validation loss at the cell's lowest seed."""
    runs = ladder(runs)
    parts = runs[SETTING].astype("string").fillna("")
    setting = (parts["lr"] + "|" + parts["emb_lr_mult"] + "|" + parts["variant"]).astype("str")
    runs, keys = runs.assign(setting=setting), [*CELL, "arm"]
    lowest = runs[runs["seed"] == runs.groupby(keys)["seed"].transform("min")]
    chosen = lowest.sort_values("final_val_loss").drop_duplicates(keys)[[*keys, "setting"]]
    return runs.merge(chosen, on=[*keys, "setting"])


def pairs(
    runs: pd.DataFrame, arms: tuple[str, str] = ("tied", "untied"), chosen=None
) -> pd.DataFrame:
    """Tied and untied runs of :func:`grid` (or ``arms``' two) matched on (cell, seed),
    suffixed _t and _u (``chosen``: ``grid(runs)``, where the caller has made it)."""
    chosen = grid(runs) if chosen is None else chosen
    tied, untied = (chosen[chosen["arm"] == a] for a in arms)
    both = match(tied, untied, [*CELL, "seed"])
    return both.assign(diff=both[f"{VALUE}_t"] - both[f"{VALUE}_u"], log_rho=np.log(both["rho_t"]))


def floors(runs: pd.DataFrame, first: pd.DataFrame) -> pd.Series:
    """Per cell, the noise floor of its effect: |tied − untied of a replicate − of replicate 0| at
    the seeds where both arms ran again at their chosen lr (the floor piece: another thread
    count), the mean over those seeds; cells without a replicate are absent. ``first``: the
    runs' :func:`pairs` (replicate 0)."""
    done = runs[runs["status"].eq("finished") & runs["sweep"].astype(str).str.startswith(SWEEP)]
    again = done[pd.to_numeric(done["replicate"], errors="coerce").fillna(0) > 0]
    if again.empty:
        return pd.Series(dtype=float, index=pd.MultiIndex.from_tuples([], names=CELL))
    again = again.assign(arm=arms_of(again))
    keys = [*CELL, "seed"]
    repeat = match(*(again[again["arm"] == a] for a in ("tied", "untied")), [*keys, "replicate"])
    repeat = repeat[[*keys, f"{VALUE}_t", f"{VALUE}_u", "lr_t", "lr_u"]]
    both = repeat.merge(first[[*keys, "diff", "lr_t", "lr_u"]], on=[*keys, "lr_t", "lr_u"])
    delta = (both[f"{VALUE}_t"] - both[f"{VALUE}_u"] - both["diff"]).abs()
    return delta.groupby([both[c] for c in CELL]).mean()


# ----------------------------------------------------------------------------- the effect table
EFFECT_COLUMNS = [
    *CELL,
    "body",
    "way",
    "rho",
    "rho_untied",
    "non_embedding_params",
    "tokens_per_param",
    "bytes_per_token",
    "bpb_tied",
    "bpb_untied",
    "bigram_bpb",
    "unigram_bpb",
    "below_bigram_tied",
    "below_bigram_untied",
    "clip_frac_tied",
    "clip_frac_untied",
    "n_seeds",
    "diff",
    "low",
    "high",
    "p",
    "p_holm",
    "floor",
    "encoding",
    "device",
    "precision",
    "seed_diffs",
]


# the pairs' columns whose means over a cell's seeds its row gives
MEANS = [f"{c}_t" for c in ("rho", "rho_untied", "bytes_per_token", "non_embedding_params")]
MEANS += [f"{c}_t" for c in ("tokens_per_param", "test_bigram_bpb", "test_unigram_bpb")]
MEANS += [f"{c}_{s}" for c in (VALUE, "clip_frac") for s in "tu"]


def _cell_row(cell: pd.DataFrame) -> dict:
    """One map cell: its shape, budget and references (means over its pairs), the effect."""
    numbers = cell.select_dtypes("number")
    mean = numbers[[c for c in numbers if c in MEANS]].mean()  # not the other ~150 columns'
    first = cell.iloc[0]
    summary = seed_summary(cell.set_index("seed")["diff"], "paired differences (own books)")
    return {
        **{c: first[c] for c in [*CELL, "way"]},
        "body": first["body_t"],
        **{c: mean.get(f"{c}_t", np.nan) for c in ("rho", "rho_untied", "bytes_per_token")},
        "non_embedding_params": mean.get("non_embedding_params_t", np.nan),
        "tokens_per_param": mean.get("tokens_per_param_t", np.nan),
        "bpb_tied": mean.get(f"{VALUE}_t", np.nan),
        "bpb_untied": mean.get(f"{VALUE}_u", np.nan),
        "bigram_bpb": mean.get("test_bigram_bpb_t", np.nan),
        "unigram_bpb": mean.get("test_unigram_bpb_t", np.nan),
        # H9: how many of the cell's runs end below the bigram fitted on their own training split
        "below_bigram_tied": int((cell[f"{VALUE}_t"] < cell["test_bigram_bpb_t"]).sum()),
        "below_bigram_untied": int((cell[f"{VALUE}_u"] < cell["test_bigram_bpb_u"]).sum()),
        "clip_frac_tied": mean.get("clip_frac_t", np.nan),
        "clip_frac_untied": mean.get("clip_frac_u", np.nan),
        "encoding": first.get("encoding_t"),
        # where the cell's runs trained: "cpu", "cuda" or both ("cpu+cuda")
        "device": "+".join(sorted({_device(d) for d in [*cell["device_t"], *cell["device_u"]]})),
        "precision": precisions(cell),
        **summary,
    }


def precisions(both: pd.DataFrame) -> str:
    """What the pairs' runs trained in: "bf16", "fp32", or "bf16+fp32" where a contrast mixes
    them (``auto`` on a CPU without bf16 units; unrecorded runs count as neither)."""
    return "+".join(sorted({*both["precision_t"].dropna(), *both["precision_u"].dropna()}))


def _device(name) -> str:
    """A run's device as the map marks it: "cuda" for any GPU, "cpu" (and unrecorded) else."""
    return "cuda" if str(name).startswith("cuda") else "cpu"


def effect_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per map cell (EFFECT_COLUMNS): tied − untied in bits per byte with its t-interval over
    seeds and p, p_holm adjusted over the ladder's cells and the ends' contrasts (HYPOTHESES.md's
    one family; the cells off the ladder another), sorted by rho."""
    return effect_tables(runs)[0]


class Effects(NamedTuple):
    """The map's cells, the ends' contrasts, the arms at their own multipliers' contrasts and the
    primary contrast: one Holm family."""

    cells: pd.DataFrame  # EFFECT_COLUMNS
    ends: pd.DataFrame  # ENDS_COLUMNS
    own: pd.DataFrame  # ENDS_COLUMNS, the OWN contrasts
    primary: pd.DataFrame  # PRIMARY_COLUMNS


def effect_tables(runs: pd.DataFrame) -> Effects:
    """:func:`effect_table`, :func:`ends_table` and :func:`primary_table`, made together: their
    p_holm is one family (HYPOTHESES.md's intervals)."""
    chosen = grid(runs)  # once: every part reads the same runs at their chosen settings
    both = pairs(runs, chosen=chosen).rename(columns={"way_t": "way"})
    rows = [_cell_row(cell) for _, cell in both.groupby(CELL, sort=True)]
    table = pd.DataFrame(rows, columns=EFFECT_COLUMNS).drop(columns="p_holm")
    ends, own = _contrasts(chosen, ENDS), _contrasts(chosen, OWN)
    ran = set(chosen["arm"])  # an OWN arm not run yet pairs nothing
    moved = [
        pairs(runs, arms[:2], chosen).rename(columns={"way_t": "way"})
        for arms in OWN
        if ran.issuperset(arms[:2])
    ]
    # infer_objects: an empty part (no arm moved yet) would leave the numbers as objects
    primary = pd.concat([_primary(b) for b in [both, *moved]], ignore_index=True).infer_objects()
    parts = (table, ends, own, primary)
    for part, adjusted in zip(parts, _holm_families(*parts), strict=True):
        part.insert(part.columns.get_loc("p") + 1, "p_holm", adjusted.to_numpy())
    ends, own = (t.sort_values(["contrast", "rho"]).reset_index(drop=True) for t in (ends, own))
    # a cell's own floor where its seed 0 ran again, else the largest measured (HYPOTHESES.md:
    # the replicate pairs run at the ladder's ends)
    measured = floors(runs, both)
    at_cell = table.set_index(CELL).index.map(measured.to_dict())
    table["floor"] = pd.Series(at_cell, index=table.index, dtype=float).fillna(measured.max())
    table = table.sort_values(["init_std", "rho"]).reset_index(drop=True)
    return Effects(table, ends, own, primary)


# ----------------------------------------------------------------------------- the ends' arms
# HYPOTHESES.md's contrasts at the V-ladder's two ends, first − second (< 0: the first is better):
# H7, the remedy (tied with its lookup-side gradient x4) against tied; H8, untied embedding 1.0 /
# head d^-0.5 against T5's tied 1.0 with its rescale. (first, second, the init std the contrast
# is defined at: a run of these arms at another init std is another question, in no contrast)
ENDS = (("tied_input_grad", "tied", "inv_sqrt_d"), ("emb1_head_dsqrt", "t5", "1.0"))
# HYPOTHESES.md's multiplier rule: an arm whose own multipliers beat the shared one by more than
# the seed sd (pieces.seed_sd) runs at them at every point too, and both are reported
OWN = tuple(
    (first, second, PRIMARY_INIT)
    for first, second in (
        ("tied", "untied_own"),
        ("tied_own", "untied"),
        ("tied_own", "untied_own"),
    )
)
ENDS_COLUMNS = [
    *CELL,
    "contrast",
    "rho",
    "bpb_first",
    "bpb_second",
    "n_seeds",
    "diff",
    "low",
    "high",
    "p",
    "p_holm",
    "precision",
    "seed_diffs",
]


def _contrasts(chosen: pd.DataFrame, contrasts: Sequence[tuple[str, str, str]]) -> pd.DataFrame:
    """Each contrast (ENDS, OWN) per cell of its init std where both arms ran (``chosen``: the
    runs' :func:`grid`): paired by seed, t over seeds."""
    rows = []
    for first, second, std in contrasts:
        at = chosen[chosen["init_std"] == std]
        sides = [at[at["arm"] == a] for a in (first, second)]
        if any(side.empty for side in sides):  # an arm not run: no pair (and no wide merge)
            continue
        both = match(*sides, [*CELL, "seed"])
        both = both.assign(diff=both[f"{VALUE}_t"] - both[f"{VALUE}_u"])
        for key, cell in both.groupby(CELL, sort=True):
            rows.append(
                {
                    **dict(zip(CELL, key, strict=True)),
                    "contrast": f"{first} − {second}",
                    "rho": cell["rho_t"].mean(),
                    "bpb_first": cell[f"{VALUE}_t"].mean(),
                    "bpb_second": cell[f"{VALUE}_u"].mean(),
                    "precision": precisions(cell),
                    **seed_summary(cell.set_index("seed")["diff"], "paired differences"),
                }
            )
    return pd.DataFrame(rows, columns=[c for c in ENDS_COLUMNS if c != "p_holm"])


def _holm_families(cells: pd.DataFrame, *others: pd.DataFrame) -> list[pd.Series]:
    """Holm's p of the map's cells and of each of ``others`` (the ends' contrasts, the primary):
    the ladder's cells and the others are one family (HYPOTHESES.md), the cells off the ladder
    another."""
    ladder = ~cells["way"].eq(OFF_LADDER)
    family = holm(pd.concat([cells.loc[ladder, "p"], *(t["p"] for t in others)], ignore_index=True))
    adjusted = holm(cells["p"].where(~ladder))
    adjusted[ladder.to_numpy()] = family.iloc[: int(ladder.sum())].to_numpy()
    out, start = [adjusted], int(ladder.sum())
    for t in others:
        out.append(family.iloc[start : start + len(t)].reset_index(drop=True))
        start += len(t)
    return out


def ends_table(runs: pd.DataFrame) -> pd.DataFrame:
    """ENDS_COLUMNS per contrast and cell: first − second in test bits per byte, its t-interval
    over seeds, p and Holm's p in :func:`effect_table`'s family."""
    return effect_tables(runs).ends


# ----------------------------------------------------------------------------- the primary
# HYPOTHESES.md's primary contrast: per seed, the least-squares slope of tied − untied test bpb
# on ln rho over the V-ladder's points (one body, V moved), at d^-0.5; the t-interval over the
# seeds' slopes
PRIMARY_COLUMNS = [
    "contrast",
    "init_std",
    "body",
    "points",
    "rho_low",
    "rho_high",
    "n_seeds",
    "diff",
    "low",
    "high",
    "p",
    "p_holm",
    "precision",
    "seed_diffs",
]


def _on_ladder(both: pd.DataFrame, way: str, held: str, moved: str) -> pd.DataFrame:
    """The pairs of one ladder at d^-0.5: its ``way``'s points and those of both ladders, at the
    value of ``held`` under which ``moved`` took the most values."""
    ladder = both[both["way"].isin([way, WAYS[(True, True)]]) & both["init_std"].eq(PRIMARY_INIT)]
    if ladder.empty:
        return ladder
    at = ladder.groupby(held)[moved].nunique().idxmax()
    return ladder[ladder[held].eq(at)]


def on_v_ladder(both: pd.DataFrame) -> pd.DataFrame:
    """The pairs (:func:`pairs` with ``way``) of the V-ladder at d^-0.5: the body whose V moved
    the most (micro's), at every V it ran."""
    return _on_ladder(both, WAYS[(True, False)], held="body_t", moved="vocab_size")


def on_body_ladder(both: pd.DataFrame) -> pd.DataFrame:
    """The pairs (:func:`pairs` with ``way``) of the body ladder at d^-0.5: the V at which the
    body moved the most (8,192's), every body that ran at it."""
    return _on_ladder(both, WAYS[(False, True)], held="vocab_size", moved="body_t")


def seed_slopes(ladder: pd.DataFrame, x: str = "log_rho") -> tuple[pd.Series, np.ndarray]:
    """Each seed's least-squares slope of ``diff`` on ``x`` (ln rho) over the ladder's points
    that every seed ran (a point some seeds lack yet leaves the slope, so that every seed's slope
    spans the same points), and those points' ``x``; no slopes below two such points."""
    wide = ladder.pivot_table(index="seed", columns=x, values="diff").dropna(axis=1)
    x = wide.columns.to_numpy(dtype=float)
    if wide.shape[1] < 2:
        return pd.Series(dtype=float), x
    return pd.Series(np.polyfit(x, wide.to_numpy().T, 1)[0], index=wide.index), x


def _primary(both: pd.DataFrame) -> pd.DataFrame:
    """The primary contrast from the cells' pairs (``both``, :func:`pairs` with ``way``): each
    seed's slope over the V-ladder (:func:`seed_slopes`). Of OWN's pairs: the same slope with
    an arm at its own multipliers."""
    v_ladder = on_v_ladder(both)
    slopes, x = seed_slopes(v_ladder)
    rows = []
    if len(slopes):
        rows.append(
            {
                "contrast": f"{v_ladder['arm_t'].iloc[0]} − {v_ladder['arm_u'].iloc[0]}",
                "init_std": PRIMARY_INIT,
                "body": v_ladder["body_t"].iloc[0],
                "points": len(x),
                "rho_low": float(np.exp(x.min())),
                "rho_high": float(np.exp(x.max())),
                "precision": precisions(v_ladder[v_ladder["log_rho"].isin(x)]),
                **seed_summary(slopes, "slopes on ln ρ"),
            }
        )
    return pd.DataFrame(rows, columns=[c for c in PRIMARY_COLUMNS if c != "p_holm"])


def primary_table(runs: pd.DataFrame) -> pd.DataFrame:
    """PRIMARY_COLUMNS: the primary contrast (``diff``: the mean of the seeds' slopes, bpb per
    unit of ln rho), its t-interval, p and Holm's p in :func:`effect_table`'s family."""
    return effect_tables(runs).primary


def clip_breaks(cells: pd.DataFrame) -> pd.DataFrame:
    """The cells of :func:`effect_table` whose tied or untied runs broke the clip rule (clipped
    on more than CLIP_RULE of their steps, the mean over the cell's runs), with the ``arm`` that
    broke it and its ``clip_frac``."""
    rows = []
    for head in ("tied", "untied"):
        broke = cells[cells[f"clip_frac_{head}"] > CLIP_RULE]
        rows.append(broke.assign(arm=head, clip_frac=broke[f"clip_frac_{head}"]))
    return pd.concat(rows).sort_values(["init_std", "rho"])
