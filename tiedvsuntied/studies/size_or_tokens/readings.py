"""The fourth edition's committed predictions and verdicts (experiments/size_or_tokens/
HYPOTHESES.md, written before the first run): the size and tokens readings' values for the 2 × 2
and its contrasts, the primary's verdict (H1), and the sign test at d = 512 × 8 and d = 384 × 6
(H3, H4) beside the third edition's lines (experiments/sign_flip/PREDICTIONS.md). The numbers
are data, copied once from those files; :mod:`.effects` measures what they are compared with."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd

from tiedvsuntied.studies.size_or_tokens import effects
from tiedvsuntied.study.rules import SEEDS


class Reading(NamedTuple):
    """A cell's or contrast's value under the size reading and under the tokens reading
    (``tokens_v``: the tokens reading with the V-ladder's slope, HYPOTHESES.md's brackets)."""

    size: float
    tokens: float
    tokens_v: float | None = None


# HYPOTHESES.md, "Hypotheses and predictions (before the runs)": tied − untied test bpb
PREDICTIONS = {
    "micro-10mb": Reading(0.031, 0.031),
    "b256x8-10mb": Reading(0.013, 0.013),
    "b256x8-45mb": Reading(0.013, 0.031),
    "micro-45mb": Reading(0.031, 0.050, 0.057),
    "P": Reading(0.0, 0.0185),
    "S1": Reading(0.0, 0.019, 0.026),
    "S2": Reading(-0.0185, 0.0),
}
TOKENS_P = PREDICTIONS["P"].tokens  # HYPOTHESES.md: s = P / 0.0185, the tokens reading's share

# HYPOTHESES.md's verdicts on s's interval (in that order of the text)
SIZE, TOKENS, BOTH = "size reading", "tokens reading", "both variables"
BEYOND, UNDECIDED = "beyond the tokens reading", "undecided"
NOT_RUN, NO_INTERVAL = "not run yet", "no interval yet (one seed)"
# below 0 (the cost falls as the body's tokens grow) is none of HYPOTHESES.md's five verdicts
BELOW = "below the size reading (none of HYPOTHESES.md's verdicts)"


def verdict(low: float, high: float) -> str:
    """HYPOTHESES.md's verdict on the interval [low, high] of s = P / 0.0185: the size reading if
    it holds 0 and not 1; the tokens reading if it holds 1 and not 0; both variables if it lies
    between them; beyond the tokens reading if above 1; undecided if it holds both. (An interval
    holds a value at its ends too.)"""
    holds = {v: low <= v <= high for v in (0.0, 1.0)}
    if holds[0.0] and holds[1.0]:
        return UNDECIDED
    if holds[0.0]:
        return SIZE
    if holds[1.0]:
        return TOKENS
    if low > 1.0:
        return BEYOND
    return BOTH if low > 0.0 else BELOW


def primary(runs: pd.DataFrame, table: pd.DataFrame | None = None) -> dict:
    """P's row of the family (``table``: :func:`effects.family`'s, if made) with s = P /
    0.0185, its interval (s_low, s_high) and the ``verdict``; before HYPOTHESES.md's 4 seeds
    have run, the verdict its interval would give says so (no result yet)."""
    table = effects.family(runs) if table is None else table
    row = table[table["name"].eq("P")].iloc[0].to_dict()
    s = {f"s{k}": row[v] / TOKENS_P for k, v in (("", "diff"), ("_low", "low"), ("_high", "high"))}
    if row["n_seeds"] == 0:
        said = NOT_RUN
    elif np.isnan(row["low"]):
        said = NO_INTERVAL
    else:
        said = verdict(s["s_low"], s["s_high"])
    if row["n_seeds"] > 1 and row["n_seeds"] < SEEDS:
        said += f" so far ({row['n_seeds']} of {SEEDS} seeds: no result yet)"
    return row | s | {"verdict": said}


# ----------------------------------------------------------------------------- the sign test
class Line(NamedTuple):
    """A committed line's prediction of tied − untied at a body, with its 95% band."""

    line: str
    value: float
    low: float
    high: float


# HYPOTHESES.md's H3 table, from experiments/sign_flip/PREDICTIONS.md ("The GPU's bodies",
# `held_out.py experiments/sign_flip/results --model body512x8`, commit 9fd1506's bundle)
LINES = (
    "ρ alone",
    "body ladder's line on size",
    "V-ladder's line on tokens/param",
    "V-ladder's line on parameters",
)
SIGN_PREDICTIONS = {
    "b384x6-10mb": tuple(
        Line(name, *v)
        for name, v in zip(
            LINES,
            [
                (0.044, 0.037, 0.052),
                (0.004, -0.0005, 0.009),
                (0.001, -0.010, 0.011),
                (-0.006, -0.018, 0.007),
            ],
            strict=True,
        )
    ),
    "b512x8-10mb": tuple(
        Line(name, *v)
        for name, v in zip(
            LINES,
            [
                (0.053, 0.043, 0.063),
                (-0.005, -0.012, 0.001),
                (-0.011, -0.026, 0.003),
                (-0.021, -0.038, -0.004),
            ],
            strict=True,
        )
    ),
}
SIGN_COLUMNS = [
    "point",
    "contrast",
    "n_seeds",
    "diff",
    "low",
    "high",
    "line",
    "predicted",
    "predicted_low",
    "predicted_high",
    "holds_prediction",
    "marked",
]


def sign_of(low: float, high: float) -> str:
    """An interval's side of 0: 'below 0 (tying pays)', 'above 0 (tying costs)', 'holds 0'."""
    if np.isnan(low):
        return NO_INTERVAL
    return "below 0 (tying pays)" if high < 0 else "above 0 (tying costs)" if low > 0 else "holds 0"


def sign_table(cells: pd.DataFrame) -> pd.DataFrame:
    """SIGN_COLUMNS: at d = 384 × 6 and d = 512 × 8 (10 MB), each run contrast of tied against an
    untied arm (``cells``: :func:`effects.cells`) beside each committed line's prediction;
    ``holds_prediction``: the cell's interval holds the line's value (exploratory: the committed
    judgement is held_out.py --point's ``off`` interval); a cell not run yet: one row per line,
    its measured columns empty."""
    rows = []
    for point, lines in SIGN_PREDICTIONS.items():
        here = cells[cells["point"].eq(point) & cells["contrast"].str.startswith("tied − untied")]
        measured = here.to_dict("records") or [{"contrast": "tied − untied: " + NOT_RUN}]
        for cell in measured:
            low, high = cell.get("low", np.nan), cell.get("high", np.nan)
            for line in lines:
                rows.append(
                    {
                        "point": effects.label(point),
                        "contrast": cell["contrast"],
                        "n_seeds": cell.get("n_seeds", 0),
                        "diff": cell.get("diff", np.nan),
                        "low": low,
                        "high": high,
                        "line": line.line,
                        "predicted": line.value,
                        "predicted_low": line.low,
                        "predicted_high": line.high,
                        "holds_prediction": low <= line.value <= high if pd.notna(high) else None,
                        "marked": cell.get("marked", ""),
                    }
                )
    return pd.DataFrame(rows, columns=SIGN_COLUMNS)


SIGN_OPEN = "no sign"  # an interval holds 0, or the two contrasts part


def sign_verdict(cells: pd.DataFrame, point: str = "b512x8-10mb") -> str:
    """H3's verdict at ``point``: tying pays only if tied − untied and tied − untied_own both lie
    below 0 (HYPOTHESES.md), costs if both lie above, else SIGN_OPEN; without untied_own (cut),
    tied − untied alone, said beside it."""
    here = cells[cells["point"].eq(point)].set_index("contrast")
    against = {
        a: here.loc[f"tied − {a}"] if f"tied − {a}" in here.index else None
        for a in ("untied", "untied_own")
    }
    if against["untied"] is None:
        return f"{effects.label(point)}: {NOT_RUN}"
    signs = {a: sign_of(c["low"], c["high"]) for a, c in against.items() if c is not None}
    said = "; ".join(f"tied − {a}: {s}" for a, s in signs.items())
    if against["untied_own"] is None:
        said += " (untied_own not run: the sign stands on tied − untied alone)"
    sides = {s.split(" ")[0] for s in signs.values()}
    sign = {"below": "tying pays", "above": "tying costs"}.get(sides.pop(), SIGN_OPEN)
    return f"{effects.label(point)}: {sign if not sides else SIGN_OPEN} ({said})"


H5_POINTS = ("b256x8-45mb", "b512x8-10mb")  # HYPOTHESES.md's H5: c1's cell, then c2's
H5_AGAINST = ("untied", "tied")


def h5_verdict(cells: pd.DataFrame, point: str) -> str:
    """H5 at ``point`` (HYPOTHESES.md): tie-then-untie is at least as good as the better of tied
    and untied, i.e. tie_untie − untied ≤ 0 and tie_untie − tied ≤ 0 within their intervals. It
    holds while neither interval lies above 0, is contradicted by one that does; each contrast's
    side of 0 is said beside it, and a cell short of its seeds is no result yet."""
    here = cells[cells["point"].eq(point)].set_index("contrast")
    found = {a: here.loc[c] for a in H5_AGAINST if (c := f"tie_untie − {a}") in here.index}
    if len(found) < len(H5_AGAINST):
        return f"{effects.label(point)}: {NOT_RUN}"
    if any(np.isnan(c["low"]) for c in found.values()):
        return f"{effects.label(point)}: {NO_INTERVAL}"
    sides = {
        a: "above 0" if c["low"] > 0 else "below 0" if c["high"] < 0 else "holds 0"
        for a, c in found.items()
    }
    worse = [a for a, side in sides.items() if side == "above 0"]
    said = "contradicted: worse than " + " and ".join(worse) if worse else "holds"
    n = int(min(c["n_seeds"] for c in found.values()))
    if n < SEEDS:
        said += f" so far ({n} of {SEEDS} seeds: no result yet)"
    each = "; ".join(f"tie_untie − {a}: {side}" for a, side in sides.items())
    return f"{effects.label(point)}: {said} ({each})"
