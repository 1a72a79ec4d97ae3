"""The fourth edition's figures (issue 55, experiments/size_or_tokens): the 2 × 2 against tokens
per parameter beside both readings' predictions (:mod:`.effects`, :mod:`.readings`), and the
exploratory reading at equal total parameters (:mod:`.analysis`), drawn from the third edition's
bundle and this edition's where shipped; and its section of the paper (its tables:
:mod:`.tables`)."""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd

from tiedvsuntied.analysis.stats import CONFIDENCE
from tiedvsuntied.figures import paper, style
from tiedvsuntied.studies.sign_flip.figures import CLIP_RING  # the third edition's mark
from tiedvsuntied.studies.size_or_tokens import (
    analysis,
    effects,
    maps,  # noqa: F401 (registers the map, token axis)
    readings,
)
from tiedvsuntied.study.rules import MAX_CLIP_FRAC, SEEDS

STUDY = __package__.rpartition(".")[2]  # the package's name
# the third edition's bundle is all this section needs today (its cells are the figure's); this
# edition's joins where shipped, so --paper works before the first run is bundled
SECTION = paper.register(
    paper.Section(
        STUDY,
        rank=2,
        bundles=("experiments/sign_flip/results",),
        more_bundles=("experiments/size_or_tokens/results",),
        required=False,
        sweeps=(STUDY,),
    )
)
size_or_tokens_figure = functools.partial(  # drawn from either edition's runs
    style.figure, mixed_data=True, needs=(analysis.has_cells, analysis.NOT_LADDER), study=STUDY
)
# each arm apart by colour (Okabe-Ito, as every figure's tied/untied), marker and face, and line
ARM_STYLE = {
    "tied": {"color": style.TIE_COLOR[True], "marker": "o", "mfc": style.MFC[True], "ls": "-"},
    "untied": {"color": style.TIE_COLOR[False], "marker": "s", "mfc": style.MFC[False], "ls": "--"},
}
LADDER_WIDTH = {"V": 1.4, "body": 0.7}  # a ladder's line: thick for the V-ladder, thin the body's
LADDER_NAME = {"V": "V-ladder", "body": "body ladder", "all": "pooled"}
# a cell's name: tied's left of its marker, untied's right (at equal parameters they share x);
# the leftmost's right of it, off the y axis
LABEL_AT = {"tied": ((-5, 3), "right"), "untied": ((5, -3), "left")}
LABEL_TEXT = {"fontsize": 5.5, "textcoords": "offset points", "va": "center"}
MATCH_STYLE = {"color": "#555555", "lw": 0.8, "ls": ":"}  # tied and untied at equal parameters


def _label(row) -> str:
    """A cell's name: its V on the V-ladder, its body on the body ladder, both on both."""
    v = f"V={row.vocab_size // 1024}k" if row.vocab_size >= 1024 else f"V={row.vocab_size}"
    body = f"{int(row.n_embd)}×{int(row.n_layer)}"
    return {"V": v, "body": body}.get(row.ladder, f"{body}, {v}")


def _points(ax, rows: pd.DataFrame) -> None:
    """Each (cell, arm)'s mean test bpb over seeds at its own parameter count, named."""
    for name, group in rows.groupby("arm"):
        kw = ARM_STYLE[name] | {"ls": "none", "ms": 5, "mec": ARM_STYLE[name]["color"]}
        ax.plot(group["params"], group["bpb"], **kw)
        for row in group.itertuples():
            at, ha = LABEL_AT["untied" if row.params == rows["params"].min() else name]
            ax.annotate(
                _label(row),
                (row.params, row.bpb),
                xytext=at,
                ha=ha,
                color=ARM_STYLE[name]["color"],
                **LABEL_TEXT,
            )


def _matches(ax, rows: pd.DataFrame, matches: pd.DataFrame) -> None:
    """A dotted segment between tied and untied cells of the same total parameters."""
    means = rows.set_index(["arm", "label"])["bpb"]
    for row in matches.itertuples():
        y = [means[("tied", row.label_tied)], means[("untied", row.label_untied)]]
        ax.plot([row.params, row.params], y, **MATCH_STYLE)


def _lines(ax, runs: pd.DataFrame, budget: int) -> None:
    """Each arm's OLS line on ln(own parameters) per ladder where fitted, over its own range."""
    for (at, ladder), group in analysis.by_ladder(analysis.ladder_runs(runs)):
        if at != budget or ladder == "all":
            continue
        for name, arm_runs in group.groupby("arm"):
            f = analysis.fit(arm_runs)
            if f is None:
                continue
            x = np.geomspace(arm_runs["params_total"].min(), arm_runs["params_total"].max(), 30)
            kw = {"color": ARM_STYLE[name]["color"], "ls": ARM_STYLE[name]["ls"]}
            ax.plot(x, f.params[0] + f.params[1] * np.log(x), lw=LADDER_WIDTH[ladder], **kw)


def _handles() -> list:
    """The legend: each arm's marker, each arm's line per ladder, the equal-parameter pairs."""
    marks = [
        style.handle(f"{a} (at its own parameters)", ms=5, **ARM_STYLE[a] | {"ls": "none"})
        for a in analysis.ARMS
    ]
    lines = [
        style.handle(
            f"{a}, OLS over the {LADDER_NAME[w]}",
            color=ARM_STYLE[a]["color"],
            ls=ARM_STYLE[a]["ls"],
            lw=LADDER_WIDTH[w],
        )
        for a in analysis.ARMS
        for w in ("V", "body")
    ]
    return [*marks, *lines, style.handle("tied and untied at the same parameters", **MATCH_STYLE)]


def _millions(value: float) -> str:
    return f"{value / 1e6:.3g} M" if value >= 1e6 else f"{value / 1e3:.3g} k"


def _cross_words(cross: pd.DataFrame, budget: int) -> str:
    """The title's words: each ladder's crossover of the lines, or why none."""
    words = []
    for row in cross[cross["budget_mb"] == budget].itertuples():
        if np.isnan(row.params):
            said = "none in range" if row.note.startswith("none") else "no fit"
        else:
            lower = "tied" if row.tied_lower_above else "untied"
            said = (
                f"{_millions(row.params)} [{_millions(row.low)}, {_millions(row.high)}],"
                f" {lower}'s line lower above"
            )
        words.append(f"{LADDER_NAME[row.ladder]}: {said}")
    return "where the lines cross:\n" + "\n".join(words)


def _match_words(matches: pd.DataFrame) -> str:
    """The caption's line: each equal-parameter pair's tied − untied with its interval."""
    said = [
        f"{r.label_tied} − {r.label_untied} ({_millions(r.params)}): {r.diff:+.3f} "
        f"[{r.low:+.3f}, {r.high:+.3f}]"
        for r in matches.itertuples()
    ]
    return (
        (
            "Dotted: tied and untied cells of the same total parameters (tied at 2V, untied at V); "
            f"tied − untied test bpb, paired by seed, {CONFIDENCE:.0%} t over seeds, unadjusted: "
            + "; ".join(said)
            + "."
        )
        if said
        else "No tied and untied cells share a parameter count."
    )


@size_or_tokens_figure(
    "size_or_tokens_fig_equal_params",
    "exploratory: each arm's test bits per byte against its own total parameters",
)
def fig_equal_params(runs: pd.DataFrame):
    """Per text budget: each arm's test bpb (mean over seeds) against its own total parameters
    (log x; tied counts V·d once, untied twice), one marker per cell named body/V, each arm's
    OLS line per ladder, the crossovers (or 'none in range') in the title."""
    runs, checking = effects.settled(runs)  # an arm still in its lr check has no chosen lr
    rows, cross = analysis.equal_params(runs), analysis.crossovers(runs)
    matches = analysis.matched(runs)
    budgets = sorted(set(rows["budget_mb"]))
    fig, axes = style.new_figure(1, max(len(budgets), 1), 3.4, width=7.0, sharey=True)
    if rows.empty:
        return style.nothing_to_draw(fig, "no tied/untied cell at the primary init std yet")
    for ax, budget in zip(axes[0], budgets, strict=True):
        here = rows[rows["budget_mb"] == budget]
        _points(ax, here)
        _matches(ax, here, matches[matches["budget_mb"] == budget])
        _lines(ax, runs, budget)
        ax.set_xscale("log")
        style.plain_log(ax, "x", rows["params"], eng=True)
        ax.set_xlabel("the arm's own total parameters (tied: V·d once; untied: twice)")
        ax.set_title(f"{budget} MB of text\n{_cross_words(cross, budget)}", fontsize=7)
    axes[0][0].set_ylabel("test bits per byte (mean over seeds)")
    style.legend(fig, _handles(), 3)
    fig.drawn = analysis.chosen(runs)
    n = rows["n_seeds"]
    fig.n = f"n = {style.span(n)} seed{'s' * bool(n.max() != 1)}/cell and arm"
    fig.captions += [
        "Exploratory, not in the Holm family (HYPOTHESES.md): should one tie and spend the "
        "saved V·d on the body, or untie? Each arm at its own chosen lr, init std d^-0.5. Lines: "
        "each arm's OLS of every seed's test bpb on ln(own parameters) per ladder (thick: the "
        "V-ladder, V moved at d = 128 × 4; thin: the body ladder at V = 8,192). Crossover: where "
        "tied's and untied's lines meet inside both arms' parameter range, its "
        f"{CONFIDENCE:.0%} interval by the delta method (the two fits taken as independent); "
        "pooled: both ladders in one line per arm. Held-out test split: Gutenberg books held out "
        "by author, each seed its own books (the same in every cell). Labels: V on the V-ladder, "
        "width × layers on the body ladder. The V-ladder's points bend away from a straight "
        "line: where its lines and the equal-parameter pairs disagree, the pairs are the direct "
        "reading.",
        _match_words(matches),
    ]
    if checking:
        fig.captions.append(f"Still in its lr check, not drawn: {'; '.join(checking)}.")
    return fig


# ----------------------------------------------------------------------------- the 2 x 2
two_by_two_figure = functools.partial(
    style.figure, mixed_data=True, needs=(effects.has_runs, effects.NO_RUNS), study=STUDY
)
BODY_MARKER = {"micro": "o", "body256x8": "s"}  # one marker per body
BUDGET_COLOR = {"10 MB": "#E69F00", "45 MB": "#009E73"}  # Okabe-Ito orange, bluish green
# d = 256 x 8 at 45 MB shares micro-at-10 MB's tokens per parameter (the design): the bodies are
# drawn a little apart on the log x axis, micro left, d = 256 x 8 right
DODGE = {"micro": 0.88, "body256x8": 1.12}
TICK = 1.13  # a reading's tick spans x / TICK .. x (size reading) or x .. x * TICK (tokens)
READING_STYLE = {
    "size reading": {"color": "#000000", "ls": "-", "lw": 1.6},
    "tokens reading": {"color": "#CC79A7", "ls": (0, (2, 1)), "lw": 1.6},  # reddish purple
}
# a cell's name, under it, on a faint white ground where it crosses a bar
NAME_TEXT = {"fontsize": 6, "ha": "center", "va": "top"}
NAME_TEXT |= {"bbox": {"fc": "white", "ec": "none", "alpha": 0.7, "pad": 0.3}}


def _cell_x(point: str, cells: pd.DataFrame) -> float:
    """A cell's tokens per parameter (its runs', else the planned), dodged by its body."""
    here = cells[cells["point"].eq(point)]
    x = here["tokens_per_param"].iloc[0] if len(here) else effects.planned_tokens_per_param(point)
    return float(x) * DODGE[effects.POINTS[point].model]


def _readings(ax, point: str, x: float) -> None:
    """The two readings' predicted values as short ticks: size left of x, tokens right of it,
    named where they part."""
    reading = readings.PREDICTIONS[point]
    values = {"size reading": reading.size, "tokens reading": reading.tokens}
    spans = {"size reading": (x / TICK, x), "tokens reading": (x, x * TICK)}
    for name, value in values.items():
        ax.plot(spans[name], [value, value], **READING_STYLE[name])
        if reading.size != reading.tokens:
            ha = "right" if name == "size reading" else "left"
            at = spans[name][0] if name == "size reading" else spans[name][1]
            ax.annotate(
                name.split()[0],
                (at, value),
                xytext=(-2 if ha == "right" else 2, 0),
                textcoords="offset points",
                ha=ha,
                va="center",
                fontsize=6,
                color=READING_STYLE[name]["color"],
            )


def _measured(ax, point: str, x: float, cells: pd.DataFrame, checking: set[str]) -> None:
    """A cell's seeds (faint) and their mean with its t-interval (no bar under two seeds);
    ``checking``: the points whose lr check is running (named so where nothing is drawn)."""
    here = cells[cells["point"].eq(point)]
    kw = {"marker": BODY_MARKER[effects.POINTS[point].model], "ls": "none"}
    color = BUDGET_COLOR[effects.budget_of(point)]
    reading = readings.PREDICTIONS[point]
    lowest = min(reading.size, reading.tokens, *here["low"].dropna(), *here["diff"].dropna())
    waiting = "lr check running" if point in checking else "not run"
    name = effects.label(point) + (f"\n{waiting}" if here.empty else "")
    ax.annotate(
        name,
        (x, lowest),
        xytext=(0, -5),
        textcoords="offset points",
        **NAME_TEXT | {"color": color},
    )
    if here.empty:
        return
    cell = here.iloc[0]
    seeds = cell["seed_diffs"]
    ax.plot([x] * len(seeds), seeds, color=color, alpha=0.35, ms=3.5, **kw)
    if cell["marked"]:  # the clip rule's mark (HYPOTHESES.md: marked, nothing replaced)
        ax.plot([x], [cell["diff"]], **CLIP_RING)
    if pd.notna(cell["low"]):
        yerr = [[cell["diff"] - cell["low"]], [cell["high"] - cell["diff"]]]
        ax.errorbar([x], [cell["diff"]], yerr=yerr, color=color, ms=6, capsize=3, **kw)
    else:
        ax.plot([x], [cell["diff"]], color=color, mfc="white", ms=6, **kw)


def _two_by_two_handles() -> list:
    bodies = [
        style.handle(effects.BODY[m], marker=k, ls="none", ms=5) for m, k in BODY_MARKER.items()
    ]
    budgets = [style.handle(b, c, marker="o", ls="none", ms=5) for b, c in BUDGET_COLOR.items()]
    marks = [
        style.handle("a seed", marker="o", ls="none", ms=3.5, alpha=0.35),
        style.handle(f"mean, {CONFIDENCE:.0%} t over seeds", marker="o", ls="-", ms=5),
    ]
    said = [style.handle(f"{n} (predicted)", **kw) for n, kw in READING_STYLE.items()]
    return [*bodies, *budgets, *marks, *said]


@two_by_two_figure(
    "size_or_tokens_fig_2x2",
    "fourth edition: the 2 × 2, tied − untied against tokens per parameter",
)
def fig_2x2(runs: pd.DataFrame):
    """HYPOTHESES.md's 2 × 2 (micro and d = 256 × 8 at 10 MB and 45 MB): each cell's tied −
    untied test bpb (its seeds faint, their mean with its 95% t-interval) against the tied
    model's tokens per parameter (log x), beside the size and the tokens readings' predicted
    values; cells not run yet said so; the primary's verdict in the title."""
    cells = effects.cells(runs)
    cells = cells[cells["contrast"].eq("tied − untied") & cells["point"].isin(effects.TWO_BY_TWO)]
    fig, axes = style.new_figure(1, 1, 3.6, width=5.0)
    ax = axes[0][0]
    ax.axhline(0, color=style.REF_COLOR, lw=0.8)
    checking = {point for point, _ in effects.lr_check_running(runs)}
    for point in effects.TWO_BY_TWO:
        x = _cell_x(point, cells)
        _readings(ax, point, x)
        _measured(ax, point, x, cells, checking)
    ax.set_xscale("log")
    ax.margins(y=0.14)  # room under the lowest cell for its name
    ax.set_xlim(0.22, 12)  # the planned cells span 0.33-6.7 (HYPOTHESES.md), with room for names
    style.plain_log(ax, "x", [0.25, 8.0])
    ax.set_xlabel("training tokens per parameter (of the tied model)")
    ax.set_ylabel("tied − untied (bits/byte, test books)\n> 0: tying costs · < 0: tying pays")
    primary = readings.primary(runs)
    said = primary["verdict"]
    if primary["n_seeds"]:
        s_range = f" [{primary['s_low']:.2f}, {primary['s_high']:.2f}]" * bool(
            pd.notna(primary["s_low"])
        )
        said = f"P = {primary['diff']:+.4f}, s = {primary['s']:.2f}{s_range}: {said}"
    ax.set_title(
        f"Size or tokens per parameter? The 2 × 2 at V = 8,192\nprimary: {said}", fontsize=8
    )
    style.legend(fig, _two_by_two_handles(), 4)
    done = effects.chosen(runs)
    fig.drawn = done[done["point"].isin(effects.TWO_BY_TWO) & done["arm"].isin(effects.TIE_COST)]
    fig.n = f"n = {style.span(cells['n_seeds'])} seeds/cell" if len(cells) else "n = 0"
    v_slope = readings.PREDICTIONS["micro-45mb"].tokens_v
    fig.captions += [
        "211 Project Gutenberg books held out by author (each seed its own books and BPE at "
        "V = 8,192), each arm at its chosen lr, bf16. Ticks: HYPOTHESES.md's committed "
        "predictions (left half: the size reading; right half: the tokens reading; they coincide "
        f"at 10 MB; the tokens reading at micro, 45 MB: {v_slope:+.3f} with the V-ladder's "
        "slope). Bodies drawn a little apart where they share tokens per parameter "
        f"({effects.planned_tokens_per_param('micro-10mb'):.2f}).",
        *(
            effects.unread(runs, cells, effects.TWO_BY_TWO)
            or [f"Every cell has its {SEEDS} seeds."]
        ),
    ]
    if cells["marked"].astype(bool).any():
        fig.captions.append(
            f"Ringed: a cell with an arm whose clip bound on more than {MAX_CLIP_FRAC:.0%} of its "
            "seeds' steps (HYPOTHESES.md: marked, nothing replaced)."
        )
    return fig
