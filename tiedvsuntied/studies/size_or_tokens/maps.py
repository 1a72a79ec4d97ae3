"""The third edition's two figures with the fourth edition's cells (issue 55, item 4): the map of
tied − untied over rho with this edition's 10 MB cells (the new bodies, d = 384 × 6 and
d = 512 × 8, and the pinned-bf16 re-runs of micro and d = 256 × 8 beside their twins) and the
predictions committed for the sign test; and every cell of both editions against training tokens
per parameter, the 45 MB cells marked as another budget. The third edition's cells, lines and
caption lines are drawn by its own code (:mod:`tiedvsuntied.studies.sign_flip.figures`); this
edition's cells are :func:`effects.cells`' (each arm at its chosen lr, paired by seed).
:mod:`.figures` imports this module, so that both register in the study's section."""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd

from tiedvsuntied.analysis.stats import CONFIDENCE
from tiedvsuntied.figures import style
from tiedvsuntied.model.accounting import count_parameters_for
from tiedvsuntied.presets import presets
from tiedvsuntied.studies.sign_flip import analysis as sign_flip
from tiedvsuntied.studies.sign_flip import curve as sign_flip_curve
from tiedvsuntied.studies.sign_flip import figures as sign_flip_figures
from tiedvsuntied.studies.size_or_tokens import analysis, effects, readings
from tiedvsuntied.study.rules import MAX_CLIP_FRAC

STUDY = __package__.rpartition(".")[2]  # the package's name
maps_figure = functools.partial(
    style.figure, mixed_data=True, needs=(analysis.has_cells, analysis.NOT_LADDER), study=STUDY
)
TIE_COST = " − ".join(effects.TIE_COST)  # the contrast both figures draw
CELLS = [*effects.CELL_COLUMNS, "nudge", "side"]
PRIMARY_INIT = sign_flip.PRIMARY_INIT  # both editions' tied/untied cells are d^-0.5's
CORPUS = (
    "211 Project Gutenberg books held out by author (each seed its own books and its own BPE), "
    "init std d^-0.5, each arm at its chosen lr"
)
# this edition's cells: a hexagon (no third-edition cell's shape); 10 MB filled Okabe-Ito
# orange, 45 MB open black (apart in greyscale by the face)
BUDGET_STYLE = {
    "10 MB": ("fourth edition, 10 MB (bf16 pinned)", "#E69F00", "#E69F00"),
    "45 MB": ("fourth edition, 45 MB: another budget (bf16 pinned)", "#000000", "white"),
}
# where a cell is drawn and named: (the factor on its x, its name's side: left, right or under
# its interval); moved where another cell shares its x
MAP_AT = {
    "micro-10mb": (1 / 1.045, "left"),  # the re-runs beside their twins
    "b256x8-10mb": (1.045, "right"),
    "b512x8-10mb": (1 / 1.045, "under"),  # its rho (0.143) is V = 1,024's (0.142)
}
TOKENS_AT = {  # at 1.47: micro at 10 MB left of its twin, d = 256 x 8 at 45 MB right of it
    "micro-10mb": (1 / 1.12, "left"),
    "b256x8-10mb": (1 / 1.12, "left"),
    "b256x8-45mb": (1.12, "right"),
}
NAME_AT = {  # (offset in points, alignment) of a name on each side
    "left": {"xytext": (-6, 0), "ha": "right", "va": "center"},
    "right": {"xytext": (6, 0), "ha": "left", "va": "center"},
    "under": {"xytext": (0, -4), "ha": "center", "va": "top"},
}
NEW_LABEL = {"fontsize": 5.5, "textcoords": "offset points"}
NAME_BOX = {"bbox": {"fc": "white", "ec": "none", "alpha": 0.7, "pad": 0.3}}
# the committed predictions (readings.SIGN_PREDICTIONS): a short tick left of the cell's x,
# named by a mark at its left end
TICK, TICK_GAP = 1.11, 1.03  # a tick spans x / TICK .. x / TICK_GAP
TICK_STYLE = {"color": "#000000", "lw": 1.0}
LINE_MARK = dict(zip(readings.LINES, ("ρ", "b", "Vt", "Vp"), strict=True))
TICK_LABEL = (
    "committed prediction: ρ alone; b: body ladder, size; Vt, Vp: V-ladder, tok/param, params"
)
EXTENDED = {"ls": ":", "lw": 0.8}  # a ladder's line carried beyond its points


def planned_rho(point: str) -> float:
    """The point's rho as the third edition defines it (the tied model's V·d over V·d and the
    non-embedding parameters), from its body's preset: where its cell has not run."""
    p = effects.POINTS[point]
    count = count_parameters_for({**presets("model")[p.model], "vocab_size": p.vocab_size}, True)
    return count["embedding"] / (count["embedding"] + count["non_embedding"])


def editions(runs: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The third edition's runs (its sweeps') and this edition's: each part reads its own (the
    same numbers as from all, sooner)."""
    sweep = runs["sweep"].astype(str)
    return runs[sweep.str.startswith(sign_flip.SWEEP)], runs[sweep.eq(effects.SWEEP)]


def new_cells(runs: pd.DataFrame, budgets: tuple[str, ...], places: dict) -> pd.DataFrame:
    """The tied − untied cells of this edition's ``runs`` at ``budgets`` (:func:`effects.cells`:
    n, mean and the t-interval over the seeds' paired differences, rho, tokens per parameter),
    with ``nudge``, the factor on x each is drawn at, and ``side``, its name's (``places``:
    MAP_AT, TOKENS_AT; a cell not there at its own x, named under its interval)."""
    cells = effects.cells(runs) if len(runs) else pd.DataFrame(columns=CELLS)
    cells = cells[cells["contrast"].eq(TIE_COST) & cells["budget"].isin(budgets)]
    nudge = [places.get(p, (1.0, "under"))[0] for p in cells["point"]]
    side = [places.get(p, (1.0, "under"))[1] for p in cells["point"]]
    return cells.assign(nudge=pd.Series(nudge, index=cells.index, dtype=float), side=side)[CELLS]


def third_cells(runs: pd.DataFrame) -> tuple[sign_flip.Effects | None, pd.DataFrame]:
    """The third edition's effect tables and its d^-0.5 cells (None and no cells without its
    runs)."""
    if runs.empty:
        return None, pd.DataFrame(columns=sign_flip.EFFECT_COLUMNS)
    third = sign_flip.effect_tables(runs)
    return third, third.cells[third.cells["init_std"].eq(PRIMARY_INIT)]


def _new_points(ax, cells: pd.DataFrame, x: str) -> None:
    """Each new cell's mean with its t-interval (no bar under two seeds) at its nudged ``x``,
    named with its n; a cell over the clip rule's line ringed."""
    for budget, group in cells.groupby("budget"):
        label, color, face = BUDGET_STYLE[budget]
        kw = {"ls": "none", "marker": "h", "ms": 6, "color": color, "mfc": face, "mec": color}
        at, has = group[x] * group["nudge"], group["low"].notna().to_numpy()
        yerr = np.vstack([group["diff"] - group["low"], group["high"] - group["diff"]])
        first = {"label": label}
        if has.any():
            ax.errorbar(at[has], group["diff"][has], yerr=yerr[:, has], capsize=2, **kw, **first)
            first = {}
        if not has.all():
            ax.plot(at[~has], group["diff"][~has], **kw, **first)
    for row in cells.itertuples():
        at, y = getattr(row, x) * row.nudge, row.diff
        y = row.low if row.side == "under" and pd.notna(row.low) else y
        name = f"{effects.label(row.point)}, n = {row.n_seeds}"
        name = name.replace(", ", "\n", 1) if row.side == "under" else name
        look = NAME_AT[row.side] | NEW_LABEL | NAME_BOX
        ax.annotate(name, (at, y), color=BUDGET_STYLE[row.budget][1], **look)
        if row.marked:
            ring = sign_flip_figures.CLIP_RING
            said = f"broke the clip rule (clipped on > {MAX_CLIP_FRAC:.0%} of steps)"
            ax.plot([at], [row.diff], label=said, **ring)


def _predictions(ax) -> list[float]:
    """The sign test's committed predictions as ticks left of each cell's x (nudged as its cell
    on the map), each named, the body over them; the ticks' x."""
    xs = []
    for k, (point, lines) in enumerate(readings.SIGN_PREDICTIONS.items()):
        x = planned_rho(point) * MAP_AT.get(point, (1.0,))[0]
        for j, line in enumerate(lines):
            label = {"label": TICK_LABEL} if k == j == 0 else {}
            ax.plot([x / TICK, x / TICK_GAP], [line.value] * 2, **TICK_STYLE, **label)
            mark = (x / TICK, line.value)
            where = {"xytext": (-1.5, 0), "ha": "right", "va": "center"}
            ax.annotate(LINE_MARK[line.line], mark, **where, **NEW_LABEL)
        top = (np.sqrt(x / TICK * x / TICK_GAP), max(line.value for line in lines))
        where = {"xytext": (0, 3), "ha": "center", "va": "bottom"}
        ax.annotate(f"{effects.body_of(point)}:\npredicted", top, **where, **NEW_LABEL)
        xs += [x / TICK**1.5, x]
    return xs


def _prediction_words() -> str:
    """The caption's line: each committed prediction's value and band."""
    said = [
        f"{effects.label(point)}: "
        + ", ".join(
            f"{LINE_MARK[line.line]} ({line.line}) {line.value:+.3f} "
            f"[{line.low:+.3f}, {line.high:+.3f}]"
            for line in lines
        )
        for point, lines in readings.SIGN_PREDICTIONS.items()
    ]
    return (
        "Ticks left of d = 384 × 6 and d = 512 × 8: the predictions committed before their runs "
        "(experiments/sign_flip/PREDICTIONS.md; HYPOTHESES.md's H3, H4), each line's value "
        f"[{CONFIDENCE:.0%} band]: " + "; ".join(said) + "."
    )


def _drawn(third: pd.DataFrame, runs: pd.DataFrame, cells: pd.DataFrame) -> pd.DataFrame:
    """The runs drawn: the third edition's at d^-0.5 at each arm's chosen setting, and this
    edition's tied and untied runs of ``cells``."""
    parts = []
    if len(third):
        third = sign_flip.grid(third)
        parts.append(third[third["init_std"].eq(PRIMARY_INIT)])
    if len(runs):
        done = effects.chosen(runs)
        parts.append(done[done["point"].isin(cells["point"]) & done["arm"].isin(effects.TIE_COST)])
    return pd.concat(parts, ignore_index=True)


def _n(third: pd.DataFrame, new: pd.DataFrame) -> str:
    """The caption's n: seeds per cell of each edition, tied and untied paired by seed."""
    said = [
        f"{style.span(cells['n_seeds'])} seeds/cell ({name})"
        for name, cells in (("third edition", third), ("fourth edition", new))
        if len(cells)
    ]
    return f"n = {', '.join(said) or 0}, tied and untied paired by seed"


def _not_run(runs: pd.DataFrame, cells: pd.DataFrame, budgets: tuple[str, ...]) -> list[str]:
    """The caption's lines naming this edition's cells at ``budgets`` not drawn yet: not run, or
    their lr check running."""
    points = [p for p in effects.POINTS if effects.budget_of(p) in budgets]
    return effects.unread(runs, cells, points, " (fourth edition)")


def _clip_words(cells: pd.DataFrame) -> list[str]:
    """The caption's line for this edition's cells over the clip rule's line."""
    marked = [f"{effects.label(r.point)} ({r.marked})" for r in cells.itertuples() if r.marked]
    if not marked:
        return []
    return [
        f"Ringed hexagon: an arm whose clip bound on more than {MAX_CLIP_FRAC:.0%} of its seeds' "
        f"steps (HYPOTHESES.md: marked, nothing replaced): {'; '.join(marked)}."
    ]


@maps_figure(
    "size_or_tokens_fig_map",
    "fourth edition: the third's map over rho with the 10 MB cells and the sign test's predictions",
)
def fig_map(runs: pd.DataFrame):
    """The third edition's map at d^-0.5 (its cells, lines, H4's crossover in the title; drawn by
    sign_flip's own code) with this edition's 10 MB cells at their rho (orange hexagons, mean and
    t-interval, named with n; the re-runs a little left of their twins) and ticks at the sign
    test's committed predictions; the 45 MB cells are not drawn (another budget)."""
    before, runs = editions(runs)
    third, table = third_cells(before)
    new = new_cells(runs, ("10 MB",), MAP_AT)
    fig, axes = style.new_figure(1, 1, 4.2, width=7.0)
    ax = axes[0][0]
    said = ""
    if third is not None:
        fitted = sign_flip_curve.fits(before)
        said = "\n" + sign_flip_figures.map_panel(ax, before, third, fitted, PRIMARY_INIT)
    else:
        ax.axhline(0, color=style.REF_COLOR, lw=0.8)
    _new_points(ax, new, "rho")
    ticks = _predictions(ax)
    ax.set_xscale("log")
    ax.margins(y=0.1)  # room under the lowest cell for its name
    style.plain_log(ax, "x", [*table["rho"], *(new["rho"] * new["nudge"]), *ticks])
    ax.set_xlabel("ρ = V·d / (V·d + non-embedding params)")
    ax.set_ylabel(sign_flip_figures.Y_LABEL)
    title = f"{style.init_label(PRIMARY_INIT)}: the third edition's map, the fourth's 10 MB cells"
    ax.set_title(title + said, fontsize=7)
    style.legend(fig, None, 2)
    fig.drawn, fig.n = _drawn(before, runs, new), _n(table, new)
    fig.captions += [
        f"{sign_flip_figures.SIGN}. {CORPUS}. Third edition (10 MB, markers by how ρ moved, "
        "precision auto): its cells and lines as in sign_flip_fig1_map (solid, with its band: the "
        "V-ladder's OLS on ln ρ, committed; dash-dotted: the body ladder's own, exploratory; the "
        "title: H4's crossover).",
        "Hexagons: the fourth edition's 10 MB cells at V = 8,192, bf16 pinned, mean and "
        f"{CONFIDENCE:.0%} t-interval over the seeds' paired differences, n beside each, fitted "
        "by no line. The re-runs of micro and d = 256 × 8 (the third edition's set-up, pinned) "
        "are drawn a little beside their twins (micro left, d = 256 × 8 right), d = 512 × 8 "
        "(ρ 0.143) left of V = 1,024 (0.142).",
        _prediction_words(),
        "Not on this map: the 45 MB cells (another text budget, 4.5× the tokens at the same ρ): "
        "size_or_tokens_fig_tokens_per_param and size_or_tokens_fig_2x2 draw them.",
        *_not_run(runs, new, ("10 MB",)),
        *_clip_words(new),
        *(sign_flip_figures.map_words(third) if third is not None else []),
    ]
    return fig


def _extended(ax, runs: pd.DataFrame, span: tuple[float, float]) -> None:
    """Each ladder's own line on ln tokens per parameter carried, dotted, from its points to
    ``span``'s ends (an extrapolation: where the new cells would lie if the line held)."""
    for way, f in sign_flip_curve.ladder_fits(runs, "tokens_per_param").items():
        if f is None:
            continue
        low, high = np.exp(f.log_rho)
        for ends in ((span[0], low), (high, span[1])):
            if ends[0] < ends[1]:
                line = sign_flip_curve.band(f, np.geomspace(*ends, 20))
                color = sign_flip_figures.WAY_STYLE[way][1]
                ax.plot(line["rho"], line["mean"], color=color, **EXTENDED)
    label = "a ladder's line carried beyond its points"
    ax.plot([], [], color=style.REF_COLOR, label=label, **EXTENDED)  # its legend entry


@maps_figure(
    "size_or_tokens_fig_tokens_per_param",
    "both editions: tied − untied against tokens per parameter, the 45 MB cells another budget",
)
def fig_tokens_per_param(runs: pd.DataFrame):
    """Every d^-0.5 cell of both editions (tied − untied, mean and t-interval) against training
    tokens per parameter (log x): the third edition's as its sign_flip_fig3 draws them, with
    each ladder's own line, dotted beyond its points; this edition's at 10 MB (filled orange
    hexagons) and at 45 MB (open black hexagons: another budget), named with n."""
    before, runs = editions(runs)
    third, table = third_cells(before)
    new = new_cells(runs, ("10 MB", "45 MB"), TOKENS_AT)
    fig, axes = style.new_figure(1, 1, 3.4, width=7.0)
    ax = axes[0][0]
    # the axis holds every planned cell, so that it stays as cells land
    planned = [
        effects.planned_tokens_per_param(p) * TOKENS_AT.get(p, (1.0,))[0] for p in effects.POINTS
    ]
    xs = [*table["tokens_per_param"], *(new["tokens_per_param"] * new["nudge"]), *planned]
    if third is not None:
        sign_flip_figures.tokens_panel(ax, before, table)
        _extended(ax, before, (min(xs), max(xs)))
    else:
        ax.axhline(0, color=style.REF_COLOR, lw=0.8)
    _new_points(ax, new, "tokens_per_param")
    ax.set_xscale("log")
    ax.margins(y=0.1)  # room under the lowest cell for its name
    ax.set_xlim(min(xs) / 1.25, max(xs) * 1.25)  # and beside the outermost
    style.plain_log(ax, "x", xs)
    ax.set_xlabel("training tokens per parameter (tied model)")
    ax.set_ylabel(sign_flip_figures.Y_LABEL)
    ax.set_title(f"{style.init_label(PRIMARY_INIT)}, both editions, exploratory", fontsize=7)
    style.legend(fig, None, 2)
    fig.drawn, fig.n = _drawn(before, runs, new), _n(table, new)
    fig.captions += [
        f"{sign_flip_figures.SIGN}. {CORPUS}. Exploratory, not in either edition's Holm family: "
        f"each cell's mean and {CONFIDENCE:.0%} t-interval over the seeds' paired differences. "
        "Third edition (10 MB, markers by how ρ moved): dashed, the V-ladder's own OLS on ln "
        "tokens per parameter, dash-dotted the body ladder's, dotted where carried beyond their "
        "points. Hexagons: the fourth edition at V = 8,192, bf16 pinned, n beside each; filled "
        "orange 10 MB, open black 45 MB.",
        "At one budget a body's tokens per parameter fall as its parameters grow, so the third "
        "edition's lines cannot tell size from tokens per parameter; at 45 MB the same bodies "
        "read 4.5× the tokens: where the 45 MB cells lie on the 10 MB lines, the effect follows "
        "tokens per parameter; where they stay at their 10 MB cells' values, it follows size. At "
        "1.47 tokens per parameter micro at 10 MB (left), the third edition's micro at V = 8,192 "
        "and d = 256 × 8 at 45 MB (right) are drawn a little apart, and the d = 256 × 8 re-run "
        "left of its twin.",
        *_not_run(runs, new, ("10 MB", "45 MB")),
        *_clip_words(new),
        *([sign_flip_figures.slope_words(before)] if third is not None else []),
    ]
    return fig
