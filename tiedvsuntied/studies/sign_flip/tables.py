"""The third edition's tables (issue 40, experiments/sign_flip): per ladder point and init std
the effect beside the count models, the primary contrast, the crossover, H5, the ends' and
own-multiplier contrasts and the gap along training (H6), in one markdown file."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tiedvsuntied.analysis.stats import CONFIDENCE
from tiedvsuntied.figures import style
from tiedvsuntied.figures.labels import p_text
from tiedvsuntied.studies.sign_flip import analysis as sign_flip
from tiedvsuntied.studies.sign_flip import curve as sign_flip_curve
from tiedvsuntied.studies.sign_flip import tokens as sign_flip_tokens
from tiedvsuntied.studies.sign_flip.figures import NEEDS, PLAIN, SIGN, STUDY, n_drawn


def _family(effects: sign_flip.Effects) -> str:
    """Holm's families in words: the ladder's cells with the other contrasts (the ends' arms,
    arms at their own multipliers, the primary), and the cells beside the ladder if any."""
    table = effects.cells
    off_ladder = table["way"].eq(sign_flip.OFF_LADDER)
    off, tested = int(off_ladder.sum()), int(table.loc[~off_ladder, "p"].notna().sum())
    counts = {
        "of the ends' arms": len(effects.ends),
        "of arms at their own multipliers": len(effects.own),
        "of the primary slope": len(effects.primary),
    }
    members = [f"{tested} cells of the ladder with an interval"]
    members += [f"{n} contrast{'s' * (n != 1)} {what}" for what, n in counts.items() if n]
    ladder = ", ".join(members[:-1]) + f" and {members[-1]}" if len(members) > 1 else members[0]
    return f"{ladder}; apart, the {off} off it" if off else ladder


def _primary_part(primary: pd.DataFrame) -> list[str]:
    """The tables' first section: HYPOTHESES.md's primary contrast, once two V points have run."""
    if primary.empty:
        return []
    shown = p_text(primary.drop(columns=["seed_diffs", "method"], errors="ignore"))
    return [
        "## The primary contrast (HYPOTHESES.md: per seed, the least-squares slope of tied − "
        "untied test bpb on ln ρ over the V-ladder's points that every seed ran, at d^-0.5; "
        f"diff: the mean slope, bpb per unit of ln ρ; {CONFIDENCE:.0%} t over the seeds' slopes; "
        "p_holm in the family below)",
        shown.round(4).to_markdown(index=False),
        *(
            f"Per seed, {row.contrast}: " + ", ".join(f"{d:+.4f}" for d in row.seed_diffs) + "."
            for row in primary.itertuples()
        ),
    ]


ENDS_TITLE = "The ends' arms (H7: tied_input_grad − tied; H8: emb1_head_dsqrt − t5"
OWN_TITLE = (
    "Arms at their own multipliers (HYPOTHESES.md's multiplier rule, studies/sign_flip/pieces.py: "
    "an arm whose own emb x head multipliers beat the shared one by more than the seed sd at "
    "V = 8,192 runs at them at every point too; `_own`"
)


def _contrasts_part(contrasts: pd.DataFrame, title: str) -> list[str]:
    """The tables' section for the ends' arms (``ends_table``: HYPOTHESES.md's H7, H8) or the
    arms at their own multipliers, once any have run."""
    if contrasts.empty:
        return []
    shown = p_text(
        contrasts.drop(columns=["n_head", "block_size", "seed_diffs", "method"], errors="ignore")
    )
    return [
        f"## {title}; < 0: the first is better; {CONFIDENCE:.0%} t over seeds' paired "
        "differences; p_holm in the family above)",
        shown.round(4).to_markdown(index=False),
    ]


def _crossover_lines(runs: pd.DataFrame) -> list[str]:
    lines = []
    for std, (f, cross) in sign_flip_curve.fits(runs).items():
        if np.isnan(cross["rho"]):
            lines.append(f"- init {PLAIN.get(std, std)}: {cross['note']}")
            continue
        slope = f"slope {f.result.params[1]:+.3f} bpb per unit ln ρ" if f.degree == 1 else ""
        lines.append(
            f"- init {PLAIN.get(std, std)}: crossover ρ = {cross['rho']:.3f} "
            f"[{cross['low']:.3f}, {cross['high']:.3f}] ({CONFIDENCE:.0%}, delta method; OLS "
            f"over {f.n_pairs} pairs{', ' + slope if slope else ''}) {cross['note']}".rstrip()
        )
    return lines


def _h5_part(runs: pd.DataFrame) -> list[str]:
    """HYPOTHESES.md's H5: the body ladder's cells beside the V-ladder's own fit at their rho."""
    table = sign_flip_curve.body_against_v(runs)
    if table.empty:
        return []
    return [
        "## H5, ρ and not V: the cells of other bodies against the V-ladder's own fit (OLS of "
        f"tied − untied on ln ρ over the V-ladder's pairs at d^-0.5; fit: its value at the cell's "
        f"ρ, {CONFIDENCE:.0%} band; inside: the cell's mean lies in the band; off: cell − fit, "
        f"{CONFIDENCE:.0%} t of both standard errors over the cell's seeds − 1 degrees of "
        "freedom; in_range: the cell's ρ lies in the V-ladder's)",
        table.round(4).to_markdown(index=False),
    ]


def _slopes_part(runs: pd.DataFrame) -> list[str]:
    """Exploratory: each ladder's own slope on ln rho and their difference, per seed."""
    table = pd.concat([sign_flip_curve.ladder_slopes(runs, on) for on in sign_flip_curve.AXES])
    if table.empty:
        return []
    return [
        "## Exploratory, not committed: each ladder's own slope (per seed, the least-squares "
        "slope of tied − untied test bpb on the log of the axis (ρ, tokens per parameter, the tied "
        "model's parameters) over "
        "the ladder's points that every seed ran, at d^-0.5; diff: the mean, bpb per unit of "
        "the log; low_end, high_end: the axis's range; body − V: per seed the body ladder's "
        f"slope less the V-ladder's, 0 where that axis alone sets the effect; {CONFIDENCE:.0%} "
        "t over seeds, unadjusted, outside Holm's family)",
        p_text(table.drop(columns="seed_diffs")).round(4).to_markdown(index=False),
    ]


def _h6_part(runs: pd.DataFrame, history: pd.DataFrame) -> list[str]:
    """HYPOTHESES.md's H6: per cell, the gap in validation bpb at mid-training and at the end;
    then the same inside the schedule's stable phase (exploratory)."""
    h6, stable = (
        sign_flip_tokens.gap_change(runs, history, between=between)
        for between in (sign_flip_tokens.H6_BETWEEN, sign_flip_tokens.STABLE_BETWEEN)
    )
    if h6.empty:
        return []
    shown = [p_text(t.drop(columns=["n_head", "block_size", "seed_diffs"])) for t in (h6, stable)]
    return [
        "## H6, the token axis: tied − untied in validation bpb at the evaluation nearest the "
        "middle of training (from) and at the last (to), means over seeds; diff: per seed to − "
        f"from (< 0: the gap closes), {CONFIDENCE:.0%} t over seeds, unadjusted (not in the "
        "family)",
        shown[0].round(4).to_markdown(index=False),
        "## Exploratory, not committed: the same inside the stable phase (the evaluations nearest "
        "40% and 80% of the steps: one lr while the tokens seen double; the decay follows)",
        shown[1].round(4).to_markdown(index=False),
    ]


@style.table(
    "sign_flip_tables", "third edition: the map's cells, crossover (md)", needs=NEEDS, study=STUDY
)
def write_sign_flip_tables(runs: pd.DataFrame, history: pd.DataFrame) -> dict[str, str]:
    """``sign_flip_tables.md``: per ladder point and init std its shape, budget, each arm's test
    bits per byte beside the count models', clip_frac per arm, the effect with its interval, p
    and Holm's p (n: the seeds of each cell as drawn); then H4's crossover (the OLS over both
    ladders' pairs) per init std, the body ladder against the V-ladder's fit (H5), the ends' and
    own-multiplier contrasts, and the gap along training (H6)."""
    effects = sign_flip.effect_tables(runs)
    table = effects.cells.drop(columns=["seed_diffs", "method"], errors="ignore")
    shown = p_text(table.drop(columns=["n_head", "block_size"]))
    shown["non_embedding_params"] = shown["non_embedding_params"].round().astype("Int64")
    shown["interval"] = [
        f"[{lo:+.4f}, {hi:+.4f}]" if pd.notna(lo) else "none"
        for lo, hi in zip(shown.pop("low"), shown.pop("high"), strict=True)
    ]
    family = _family(effects)
    parts = [
        f"Runs: {style.describe_runs(sign_flip.grid(runs), n_drawn(effects.cells))}.",
        *_primary_part(effects.primary),
        f"## Tying's effect per ladder point ({SIGN}; {CONFIDENCE:.0%} t over seeds' paired "
        f"differences, unadjusted; p: the same t-test; p_holm: Holm over the {family}; "
        "floor: how far a cell's seed-0 difference moved when both arms ran again at another "
        "thread count, at a cell without its own the largest measured, empty before any)",
        shown.round(4).to_markdown(index=False),
        "## H4's crossover (HYPOTHESES.md, committed: where the OLS of tied − untied on ln ρ "
        "over every pair of both ladders' points crosses 0, per init std; the map gives it in its "
        "titles but draws no such pooled line, since the two ladders run opposite ways)",
        *_crossover_lines(runs),
        *_h5_part(runs),
        *_slopes_part(runs),
        *_contrasts_part(effects.ends, ENDS_TITLE),
        *_contrasts_part(effects.own, OWN_TITLE),
        *_h6_part(runs, history),
    ]
    return {"sign_flip_tables.md": "\n\n".join(parts) + "\n"}
