"""The fourth edition's tables (issue 55, experiments/size_or_tokens), in one markdown file: the
primary's verdict, the 2 × 2 beside both readings' predictions, the Holm family of 14, the sign
test beside its committed lines, every cell with its clip fractions (HYPOTHESES.md) and the
reuse floor (a0's runs against their third-edition twins)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tiedvsuntied.analysis.stats import CONFIDENCE
from tiedvsuntied.figures import style
from tiedvsuntied.figures.labels import p_text
from tiedvsuntied.studies.size_or_tokens import effects, readings, twins
from tiedvsuntied.studies.size_or_tokens.figures import STUDY
from tiedvsuntied.study.rules import MAX_CLIP_FRAC

SIGN = "tied − untied (bits per byte of the held-out test books): > 0 = tying costs"
NEEDS = (effects.has_runs, effects.NO_RUNS)


def interval(low: float, high: float) -> str:
    return f"[{low:+.4f}, {high:+.4f}]" if pd.notna(low) else "none"


def signed(value: float) -> str:
    return f"{value:+.4g}" if value else "0"


def _shown(table: pd.DataFrame) -> pd.DataFrame:
    """A table as printed: the interval in one column, p's in two figures, no per-seed lists."""
    shown = p_text(table.drop(columns=["seed_diffs"], errors="ignore"))
    where = shown.columns.get_loc("low")
    pairs = zip(shown.pop("low"), shown.pop("high"), strict=True)
    shown.insert(where, "interval", [interval(lo, hi) for lo, hi in pairs])
    return shown.round(4)


def markdown(table: pd.DataFrame) -> str:
    """:func:`_shown` as markdown: an empty value blank, every value as written (a "+0.031"
    keeps its sign)."""
    shown = _shown(table).astype(object)
    shown = shown.where(shown.notna(), None)
    return shown.to_markdown(index=False, missingval="", disable_numparse=True)


def primary_lines(row: dict) -> list[str]:
    """H1: P, s = P / 0.0185 with its interval, and the verdict."""
    head = (
        "## H1, the primary (HYPOTHESES.md): P = per seed, (tied − untied at d = 256 × 8, 45 MB) − "
        f"(at 10 MB); {CONFIDENCE:.0%} Student t over the seeds; s = P / {readings.TOKENS_P} (the "
        "tokens reading's share): the size reading if s's interval holds 0 and not 1, the "
        "tokens reading if 1 and not 0, both variables between, beyond the tokens reading above "
        "1, undecided if it holds both"
    )
    said = f"**Verdict: {row['verdict']}**"
    if row["n_seeds"]:
        said += (
            f"; P = {row['diff']:+.4f} {interval(row['low'], row['high'])} over "
            f"{row['n_seeds']} seed{'s' * (row['n_seeds'] != 1)}, s = {row['s']:.2f} "
            f"{interval(row['s_low'], row['s_high']).replace('+', '')}"
        )
    said += f". Predicted: size reading P = 0, tokens reading P = +{readings.TOKENS_P}."
    return [head, said]


def two_by_two(cells: pd.DataFrame, family: pd.DataFrame) -> pd.DataFrame:
    """The 2 × 2's cells and its three contrasts, measured beside both readings' values."""
    tie = cells[cells["contrast"].eq("tied − untied")].set_index("point")
    rows = []
    for name, reading in readings.PREDICTIONS.items():
        if name in effects.POINTS:
            got = tie.loc[name] if name in tie.index else {}
            what = effects.label(name)
            per_param = effects.planned_tokens_per_param(name)
        else:
            got, what, per_param = family.set_index("name").loc[name], name, np.nan
        rows.append(
            {
                "cell or contrast": what,
                "tokens_per_param": per_param,
                "n_seeds": got.get("n_seeds", 0),
                "diff": got.get("diff", np.nan),
                "low": got.get("low", np.nan),
                "high": got.get("high", np.nan),
                "size reading": signed(reading.size),
                "tokens reading": signed(reading.tokens)
                + (f" ({signed(reading.tokens_v)})" if reading.tokens_v else ""),
                "marked": got.get("marked", ""),
            }
        )
    return pd.DataFrame(rows)


def sign_lines(cells: pd.DataFrame) -> list[str]:
    """H3 and H4: each cell's interval beside each committed line, and their verdicts."""
    table = readings.sign_table(cells)
    bands = zip(table.pop("predicted_low"), table.pop("predicted_high"), strict=True)
    table.insert(table.columns.get_loc("predicted") + 1, "band", [interval(*b) for b in bands])
    h4 = cells[cells["point"].eq("b384x6-10mb") & cells["contrast"].eq("tied − untied")]
    h4_sign = readings.sign_of(h4["low"].iloc[0], h4["high"].iloc[0]) if len(h4) else None
    return [
        "## H3, H4: the sign test at 10 MB (committed lines: experiments/sign_flip/PREDICTIONS.md, "
        "as HYPOTHESES.md's H3 table; holds_prediction: the cell's interval holds the line's "
        "value, exploratory; the committed judgement is each line's `off` interval, "
        "`experiments/sign_flip/held_out.py --point`)",
        f"H3: {readings.sign_verdict(cells)}. "
        f"H4: {effects.label('b384x6-10mb')}: {h4_sign or readings.NOT_RUN}.",
        markdown(table),
    ]


def h5_lines(cells: pd.DataFrame) -> list[str]:
    """H5's verdict at each of its cells (d = 256 × 8 at 45 MB, d = 512 × 8 at 10 MB)."""
    verdicts = " ".join(f"{readings.h5_verdict(cells, p)}." for p in readings.H5_POINTS)
    return [
        "## H5: tie, then untie (HYPOTHESES.md: at least as good as the better of tied and "
        "untied, i.e. tie_untie − untied ≤ 0 and tie_untie − tied ≤ 0 within their intervals; "
        "the Holm family's members 11–14)",
        verdicts,
    ]


def reuse_lines(runs: pd.DataFrame) -> list[str]:
    """The reuse floor's section: each a0 run beside its third-edition twin, then per seed the
    floor of tying's effect (:mod:`.twins`); nothing where no twin has run again."""
    table = twins.twins(runs)
    if table.empty:
        return []
    floors = twins.floor(table)
    worst = f"; largest {floors['floor'].max():.5f} bpb" if len(floors) else ""
    return [
        "## The reuse floor (HYPOTHESES.md, 'Which third-edition runs are reused'): a0's runs, "
        "the third edition's 10 MB cells again under the pinned bf16, each beside its twin "
        "(same body, V, steps, seed, arm, lr; bf16 under auto); test bpb, shift = fourth − "
        f"third, CPU-seconds of each{worst}",
        table.to_markdown(index=False, floatfmt=".6f"),
        floors.to_markdown(index=False, floatfmt=".6f") if len(floors) else "",
    ]


@style.table(
    "size_or_tokens_tables",
    "fourth edition: the primary's verdict, the 2 × 2, the Holm family, the sign test (md)",
    needs=NEEDS,
    study=STUDY,
)
def write_size_or_tokens_tables(runs: pd.DataFrame) -> dict[str, str]:
    """``size_or_tokens_tables.md``: what the runs say of HYPOTHESES.md's committed contrasts."""
    cells, family = effects.cells(runs), effects.family(runs)
    row = readings.primary(runs, family)
    done = effects.chosen(runs)
    n = f"n = {style.span(cells['n_seeds'])} seeds/cell" if len(cells) else "n = 0"
    parts = [
        f"Runs: {style.describe_runs(done, n) if len(done) else effects.NO_RUNS}. "
        f"Sign: {SIGN}. Each arm at its chosen lr; seeds paired by their held-out books.",
        *primary_lines(row),
        "## The 2 × 2 beside both readings (HYPOTHESES.md, 'Hypotheses and predictions'; "
        "tokens reading in brackets: with the V-ladder's slope; tokens per parameter: planned, "
        f"of the tied model; marked: arms whose clip bound on more than {MAX_CLIP_FRAC:.0%} of "
        "their seeds' steps, in every table)",
        markdown(two_by_two(cells, family)),
        f"## The Holm family: {effects.family_size(family)} (HYPOTHESES.md, 'Intervals and "
        f"multiplicity'; {CONFIDENCE:.0%} t over seeds, p unadjusted, p_holm: Holm "
        "(statsmodels) over the members that ran)",
        markdown(family),
        *sign_lines(cells),
        *h5_lines(cells),
        f"## Every cell and contrast ({CONFIDENCE:.0%} t over the seeds' paired differences, p "
        "unadjusted; rho and tokens per parameter of the tied model; test_bigram_bpb, "
        "test_unigram_bpb: the count models beside the arms' losses, fitted on each seed's "
        "fold's whole training split (the same at both budgets), on the same test windows, "
        "the mean over the cell's seeds; clip_first, clip_second: "
        "the share of each arm's seeds' steps on which the gradient clip bound; marked: the arms "
        f"over HYPOTHESES.md's {MAX_CLIP_FRAC:.0%}, nothing replaced)",
        markdown(cells) if len(cells) else "No cell has run.",
        *reuse_lines(runs),
    ]
    return {"size_or_tokens_tables.md": "\n\n".join(parts) + "\n"}
