"""The third edition's figures (issue 40, experiments/sign_flip): the map of tying's effect over
the head's share rho and the effect along training, from the numbers of :mod:`.analysis`,
:mod:`.curve` and :mod:`.tokens`; and its section of the paper (its tables: :mod:`.tables`)."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.ticker import EngFormatter

from tiedvsuntied.analysis.stats import CONFIDENCE
from tiedvsuntied.figures import paper, style
from tiedvsuntied.results.records import read_config
from tiedvsuntied.studies.sign_flip import analysis as sign_flip
from tiedvsuntied.studies.sign_flip import curve as sign_flip_curve
from tiedvsuntied.studies.sign_flip import tokens as sign_flip_tokens

STUDY = __package__.rpartition(".")[2]  # the package's name
# the paper's lead (its first section, its outputs by name): from its own bundle once shipped,
# with the GPU slots' bundles where those are (scripts/gpu/slot.sh: more points, marked)
SECTION = paper.register(
    paper.Section(
        STUDY,
        rank=0,
        bundles=("experiments/sign_flip/results",),
        more_bundles=("experiments/sign_flip/results_gpu", "experiments/sign_flip/results_small"),
        required=False,
        sweeps=(sign_flip.SWEEP,),
    )
)
NEEDS = (sign_flip.is_sign_flip, sign_flip.NOT_SIGN_FLIP)
# a point's rho moved by V at a fixed body, by the body at a fixed V, or on both ladders
WAY_STYLE = {
    "V": ("ρ moved by V at a fixed body", "#0072B2", "o"),
    "body": ("ρ moved by the body at a fixed V", "#D55E00", "s"),
    "both": ("a point of both ladders", "#009E73", "D"),
    "alone": ("a point of neither ladder", "#777777", "^"),
    sign_flip.OFF_LADDER: ("another tokenizer or set-up (not fitted)", "#CC79A7", "v"),
}
GPU_EDGE = "black"  # a point whose runs trained on a GPU (scripts/gpu/slot.sh) has this edge
SIGN = "tied − untied (bits per byte, test split): > 0 = tying costs, < 0 = tying pays"
PLAIN = {"inv_sqrt_d": "d^-0.5"}  # an init std in a markdown table (no mathtext)
Y_LABEL = "tied − untied (bits/byte)\n< 0: tying pays · > 0: tying costs"  # the sign, on the axis
# a cell whose runs broke the clip rule: ringed (a shape, so that it reads in greyscale too)
CLIP_RING = {"ls": "none", "marker": "o", "ms": 11, "mfc": "none", "mec": "black", "mew": 0.8}
LABEL_TEXT = {"fontsize": 6, "color": "#444444", "textcoords": "offset points", "va": "center"}
# where a point's name sits: a V-ladder point's to its right, a body's below left, a point of
# both ladders' above left (the ladders' points lie close in rho), the rest to the right
LABEL_AT = {"V": ((7, 0), "left"), "body": ((-2, -11), "right"), "both": ((-6, 9), "right")}
# the token axis's lines, one per point: Paul Tol's muted palette (colour-blind safe), each line
# with its own marker too, so that any two read apart in greyscale
LINE_COLORS = (
    "#332288",
    "#88CCEE",
    "#44AA99",
    "#117733",
    "#999933",
    "#DDCC77",
    "#CC6677",
    "#882255",
    "#AA4499",
)
LINE_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "h")
sign_flip_figure = functools.partial(style.figure, mixed_data=True, needs=NEEDS, study=STUDY)


def _init_stds(table: pd.DataFrame) -> list[str]:
    """The init stds of the table, d^-0.5 (the ladder's first arm) first."""
    stds = sorted(set(table["init_std"]), key=lambda s: (s != "inv_sqrt_d", s))
    return stds or ["inv_sqrt_d"]


def _points(ax, cells: pd.DataFrame, x: str = "rho") -> None:
    """Each cell's mean and t-interval at its ``x``, marked by how its rho was moved."""
    for (way, gpu), group in cells.groupby(["way", cells["device"].str.contains("cuda")]):
        label, color, marker = WAY_STYLE.get(way, WAY_STYLE["alone"])
        has = group["low"].notna()
        yerr = np.vstack([group["diff"] - group["low"], group["high"] - group["diff"]])
        kw = {"ls": "none", "marker": marker, "color": color, "ms": 5}
        kw |= {"mec": GPU_EDGE, "mew": 1.2} if gpu else {}
        ax.errorbar(
            group[x][has],
            group["diff"][has],
            yerr=yerr[:, has.to_numpy()],
            capsize=2,
            label=label,
            **kw,
        )
        ax.plot(group[x][~has], group["diff"][~has], mfc="white", **kw)  # one seed: no bar
    for row in cells.itertuples():  # what each point is, beside it
        at, ha = LABEL_AT.get(row.way, LABEL_AT["V"])
        where = (getattr(row, x), row.diff)
        ax.annotate(_point_label(row), where, xytext=at, ha=ha, **LABEL_TEXT)
    broke = sign_flip.clip_breaks(cells)
    if len(broke):
        label = f"broke the clip rule (clipped on > {sign_flip.CLIP_RULE:.0%} of steps)"
        ax.plot(broke[x], broke["diff"], label=label, **CLIP_RING)


def _point_label(row) -> str:
    """A point's name: its V on the V-ladder, its body on the body ladder, both where it is on
    both, its body and tokenizer off the ladder."""
    v = f"V={row.vocab_size:,}"
    names = {"V": v, "body": row.body, "both": f"{row.body}, {v}"}
    return names.get(row.way, f"{row.body}, {v}, {row.encoding}")


OWN_STYLE = {"ls": "none", "marker": "P", "color": "#555555", "ms": 5, "capsize": 2}
OWN_NUDGE = 1.04  # drawn a little right of the point's own marker, so that neither hides


def _own_points(ax, own: pd.DataFrame) -> None:
    """The OWN contrasts (an arm at its own multipliers, HYPOTHESES.md's rule) beside the cells."""
    for contrast, group in own[own["low"].notna()].groupby("contrast"):
        yerr = np.vstack([group["diff"] - group["low"], group["high"] - group["diff"]])
        label = f"{contrast} (own multipliers: the multiplier rule)"
        ax.errorbar(group["rho"] * OWN_NUDGE, group["diff"], yerr=yerr, label=label, **OWN_STYLE)


def _crossover(ax, f, cross: dict) -> str:
    """H4's crossover (the OLS over every pair of the init std, as committed; its line is not
    drawn: it pools two ladders that run opposite ways), marked where there is one; returns the
    title's words for it."""
    if f is None:
        return f"H4: {cross['note']}"
    if np.isnan(cross["rho"]):
        return f"H4 (all points pooled): crossover {cross['note']}"
    ax.axvline(cross["rho"], color="black", ls="--", lw=0.8)
    ax.axvspan(cross["low"], cross["high"], color="black", alpha=0.08, lw=0)
    where = f"ρ = {cross['rho']:.2f} [{cross['low']:.2f}, {cross['high']:.2f}]"
    ax.text(cross["rho"], 0.03, f" 0 at {where}", transform=ax.get_xaxis_transform(), fontsize=6)
    return f"H4 (all points pooled): crossover {where}" + (
        f" ({cross['note']})" if cross["note"] else ""
    )


# each ladder's own fit: dashed in its colour, the body ladder's dash-dotted (apart in greyscale)
LADDER_DASH = {"V": (0, (4, 2)), "body": (0, (6, 2, 1, 2))}


def _ladder_lines(ax, runs: pd.DataFrame, on: str = "rho", committed: str | None = None) -> None:
    """Each ladder's own OLS line on the log of ``on``, over its points' range in the colour of
    its markers, where it has two points or more: dashed (exploratory), but the ``committed``
    ladder's solid with its band (the V-ladder's on rho: the primary slope, H5's band)."""
    for way, f in sign_flip_curve.ladder_fits(runs, on).items():
        if f is None:
            continue
        line = sign_flip_curve.band(f, np.exp(np.linspace(*f.log_rho, 50)))
        color = WAY_STYLE[way][1]
        if way != committed:
            label = f"{way}-ladder's own OLS (exploratory)"
            ax.plot(
                line["rho"], line["mean"], color=color, label=label, ls=LADDER_DASH[way], lw=0.9
            )
            continue
        label = f"{way}-ladder's OLS, {CONFIDENCE:.0%} band (committed)"
        ax.plot(line["rho"], line["mean"], color=color, lw=1.2, label=label)
        ax.fill_between(line["rho"], line["low"], line["high"], color=color, alpha=0.15, lw=0)


@sign_flip_figure("sign_flip_fig1_map", "third edition: tied − untied in bits per byte against rho")
def fig_map(runs: pd.DataFrame):
    """Per init std: each ladder point's tied − untied (test bits per byte, mean and t-interval
    over seeds) against rho (log axis), marked by how rho was moved and named; the V-ladder's OLS
    in ln rho with its band (committed) and the body ladder's own line (exploratory); H4's
    crossover (the OLS over every pair) with its delta-method interval, or 'none in range', in
    the title; the cells that broke the clip rule ringed."""
    effects, fitted = sign_flip.effect_tables(runs), sign_flip_curve.fits(runs)
    table = effects.cells
    stds = _init_stds(table)
    fig, axes = style.new_figure(1, len(stds), 3.0, width=7.0, sharey=True)
    if table.empty:
        return style.nothing_to_draw(fig, "no tied/untied pair at any ladder point yet")
    for ax, std in zip(axes[0], stds, strict=True):
        said = map_panel(ax, runs, effects, fitted, std)
        ax.set_xscale("log")
        style.plain_log(ax, "x", table["rho"])
        ax.set_xlabel("ρ = V·d / (V·d + non-embedding params)")
        # the crossover in the title: inside the axes it would sit on a point
        ax.set_title(f"{style.init_label(std)}\n{said}", fontsize=7)
    axes[0][0].set_ylabel(Y_LABEL)
    style.legend(fig, None, 2)
    fig.drawn, fig.n = sign_flip.grid(runs), n_drawn(table)
    fig.captions += [
        f"{SIGN}. Bodies: {', '.join(sorted(set(table['body'])))}. Mean and {CONFIDENCE:.0%} "
        "t-interval over seeds' paired differences (each seed its own held-out books). Solid, "
        f"with its {CONFIDENCE:.0%} band: the V-ladder's OLS of each pair's difference on ln ρ "
        "(committed: the primary slope, H5's band); dash-dotted: the body ladder's own OLS "
        "(exploratory, not committed). No line pools the two ladders, which run opposite ways; "
        "the title gives H4's crossover of the OLS over every pair (committed), its interval by "
        "the delta method.",
        *map_words(effects),
    ]
    return fig


def map_panel(ax, runs: pd.DataFrame, effects: sign_flip.Effects, fitted: dict, std: str) -> str:
    """One init std's panel of the map, its x axis left linear: the cells (``effects``:
    :func:`sign_flip.effect_tables`) and the arms at their own multipliers, H4's crossover
    (``fitted``: :func:`sign_flip_curve.fits`), at d^-0.5 each ladder's line, the 0 line; returns
    the title's words for the crossover."""
    table = effects.cells
    _points(ax, table[table["init_std"] == std])
    _own_points(ax, effects.own[effects.own["init_std"] == std])
    f, cross = fitted.get(std, (None, sign_flip_curve.crossover(None)))
    said = _crossover(ax, f, cross)
    if std == sign_flip.PRIMARY_INIT:  # the ladders are d^-0.5's
        _ladder_lines(ax, runs, committed="V")
    ax.axhline(0, color=style.REF_COLOR, lw=0.8)
    return said


def map_words(effects: sign_flip.Effects) -> list[str]:
    """The map's caption lines after its first: the primary, the clip rule's breaks, the own
    multipliers, the noise floor, the GPU's points (each where there is one)."""
    table = effects.cells
    return [
        *_primary_words(effects.primary),
        *_clip_words(table),
        *_own_words(effects.own),
        _floor_words(table),
        *_device_words(table),
    ]


def n_drawn(cells: pd.DataFrame) -> str:
    """The caption's n: the seeds of each drawn cell (its tied and untied runs, paired)."""
    n = cells["n_seeds"]
    return (
        f"n = {style.span(n)} seed{'s' * bool(n.max() != 1)}/cell, tied and untied paired by seed"
    )


def _clip_words(cells: pd.DataFrame) -> list[str]:
    """The caption's line naming the cells that broke the clip rule, where any did."""
    broke = sign_flip.clip_breaks(cells)
    named = [
        f"{row.body}, V = {row.vocab_size:,}, {row.arm} {row.clip_frac:.1%}"
        for row in broke.itertuples()
    ]
    if not named:
        return []
    return [
        f"Ringed: the cells that broke the committed clip rule (an arm clipped on more than "
        f"{sign_flip.CLIP_RULE:.0%} of its steps is re-run with the clip raised; as drawn, the "
        f"share of steps clipped, mean over seeds): {'; '.join(named)}."
    ]


@sign_flip_figure(
    "sign_flip_fig3_tokens_per_param", "third edition (exploratory): the effect per token/param"
)
def fig_tokens_per_param(runs: pd.DataFrame):
    """Exploratory, not committed: the map's d^-0.5 cells against tokens per parameter (log),
    marked by how rho was moved, with each ladder's own OLS line: whether the two ladders, which
    run opposite ways on rho, share this axis. Each ladder's per-seed slopes in the caption."""
    table = sign_flip.effect_tables(runs).cells
    table = table[table["init_std"].eq(sign_flip.PRIMARY_INIT)]
    fig, axes = style.new_figure(1, 1, 3.0, width=7.0)
    if table.empty:
        return style.nothing_to_draw(fig, "no tied/untied pair at d^-0.5 yet")
    ax = axes[0][0]
    tokens_panel(ax, runs, table)
    ax.set_xscale("log")
    style.plain_log(ax, "x", table["tokens_per_param"])
    ax.set_xlabel("training tokens per parameter (tied model)")
    ax.set_ylabel(Y_LABEL)
    ax.set_title(f"{style.init_label(sign_flip.PRIMARY_INIT)}, exploratory", fontsize=7)
    style.legend(fig, None, 2)
    fig.drawn, fig.n = sign_flip.grid(runs), n_drawn(table)
    fig.captions += [
        f"{SIGN}. Exploratory, not committed in HYPOTHESES.md: the map's cells against tokens "
        f"per parameter; mean and {CONFIDENCE:.0%} t-interval over seeds' paired differences; "
        "dashed: the V-ladder's own OLS line, dash-dotted: the body ladder's. Every run reads "
        "10 MB of text, so tokens per parameter falls as the model's parameters grow: this "
        "figure cannot tell the two apart.",
        slope_words(runs),
    ]
    return fig


def tokens_panel(ax, runs: pd.DataFrame, cells: pd.DataFrame) -> None:
    """The token axis's panel, its x axis left linear: ``cells`` (the map's, at d^-0.5) at their
    tokens per parameter, each ladder's own OLS line on its log, the 0 line."""
    _points(ax, cells, x="tokens_per_param")
    _ladder_lines(ax, runs, on="tokens_per_param")
    ax.axhline(0, color=style.REF_COLOR, lw=0.8)


def slope_words(runs: pd.DataFrame) -> str:
    """The caption's line: each ladder's per-seed slope on ln tokens per parameter, their gap."""
    slopes = sign_flip_curve.ladder_slopes(runs, "tokens_per_param")
    said = [
        f"{row.ladder} {row.diff:+.4f} [{row.low:+.4f}, {row.high:+.4f}]"
        for row in slopes.itertuples()
        if pd.notna(row.low)
    ]
    return (
        "Per-seed slopes on ln tokens per parameter, bpb per unit, 95% t over seeds, "
        f"unadjusted: {'; '.join(said) or 'none yet'}."
    )


def _primary_words(primary: pd.DataFrame) -> list[str]:
    """The caption's line for HYPOTHESES.md's primary contrast, once it has an interval."""
    committed = primary[primary["contrast"].eq("tied − untied")]
    if committed.empty or committed["low"].isna().all():
        return []
    row = committed.iloc[0]
    return [
        f"Primary contrast (committed before the runs): the seeds' slopes of tied − untied on "
        f"ln ρ along the V-ladder ({row['body']}, {int(row['points'])} points, ρ "
        f"{row['rho_low']:.2f}–{row['rho_high']:.2f}), mean {row['diff']:+.4f} "
        f"[{row['low']:+.4f}, {row['high']:+.4f}] bpb per unit of ln ρ, {CONFIDENCE:.0%} t over "
        f"{int(row['n_seeds'])} seeds, Holm p {row['p_holm']:.3f}."
    ]


def _own_words(own: pd.DataFrame) -> list[str]:
    """The caption's line for the arms at their own multipliers, once any has an interval."""
    if not own["low"].notna().any():
        return []
    words = (
        "Grey crosses: an arm at its own multipliers (HYPOTHESES.md's multiplier rule, "
        "studies/sign_flip/pieces.py), drawn a little right of its point and not fitted."
    )
    mixed = own.loc[own["precision"].str.contains("+", regex=False), "vocab_size"]
    if len(mixed):  # trainer.precision=auto resolved to fp32 on a CPU without bf16 units
        words += f" At V = {', '.join(f'{v:,}' for v in mixed)} their runs mix bf16 and fp32."
    return [words]


def _device_words(table: pd.DataFrame) -> list[str]:
    """The caption's line for points trained on a GPU, where there are any."""
    gpu = table[table["device"].str.contains("cuda")]
    if gpu.empty:
        return []
    return [f"Black-edged: trained on a GPU ({len(gpu)} of {len(table)} cells); the rest on CPUs."]


def _floor_words(table: pd.DataFrame) -> str:
    """The caption's noise floor: the largest measured (``effect_table``'s floor column)."""
    if table["floor"].isna().all():
        return "Noise floor: not measured yet (no replicate pair)."
    return f"Noise floor (a replicate pair's change of tied − untied): {table['floor'].max():.4f}."


@sign_flip_figure("sign_flip_fig2_tokens", "third edition: tied − untied in bpb along training")
def fig_tokens(runs: pd.DataFrame, history: pd.DataFrame):
    """Per init std: tied − untied of the validation bits per byte at each evaluation against
    the train bytes seen, one line per ladder point (its own colour and marker, in the order of
    rho), mean over seeds paired by seed with its t-band, the schedule's decay shaded: whether
    tying's effect closes with training."""
    axis = sign_flip_tokens.token_axis(runs, history)
    stds = _init_stds(axis)
    # room beside the panels for the legend's column (one line per ladder point)
    width = min(7.0, 3.4 * len(stds) + 1.8)
    fig, axes = style.new_figure(1, len(stds), 2.6, width=width, sharey=True)
    if axis.empty:
        return style.nothing_to_draw(fig, "no paired val/bpb along training (runs before bpb)")
    cells = sign_flip.effect_table(runs).set_index(sign_flip.CELL)
    rhos, ways = cells["rho"], cells["way"]
    # step 0 is the init (tied's self-logit puts it up to ~1.5 bpb above untied): off the scale
    # of what training does to the gap, so it is stated in the caption, not drawn
    at_init = axis[axis["step"] == 0]
    axis = axis[axis["step"] > 0]
    decay = _decay_start(sign_flip.grid(runs))
    for ax, std in zip(axes[0], stds, strict=True):
        lines = axis[axis["init_std"] == std].groupby(sign_flip.CELL)
        for k, (key, line) in enumerate(sorted(lines, key=lambda kv: rhos.get(kv[0], np.nan))):
            rho = rhos.get(key, np.nan)
            body = sign_flip.body_label(line["n_embd"].iloc[0], key[0])
            label = f"ρ={rho:.2f} ({body}, V={key[4]:,})"
            # each line its colour and marker; dashed: rho moved by the body at a fixed V
            look = {
                "color": LINE_COLORS[k % len(LINE_COLORS)],
                "marker": LINE_MARKERS[k % len(LINE_MARKERS)],
            }
            look |= {"ls": "--" if ways.get(key) == "body" else "-", "ms": 3}
            ax.plot(line["bytes"], line["mean"], lw=1, label=label, **look)
            band = line[line["n"] >= style.MIN_BAND_SEEDS]
            ax.fill_between(
                band["bytes"], band["low"], band["high"], color=look["color"], alpha=0.1, lw=0
            )
        if decay:
            ax.axvspan(decay[1], axis["bytes"].max(), color=style.REF_COLOR, alpha=0.15, lw=0)
            where = {"transform": ax.get_xaxis_transform(), "ha": "left", "va": "top"}
            ax.text(decay[1], 0.99, " decay", fontsize=6, color="#444444", **where)
        ax.axhline(0, color=style.REF_COLOR, lw=0.8)
        ax.xaxis.set_major_formatter(EngFormatter())
        ax.set_xlabel("train bytes seen")
        ax.set_title(style.init_label(std))
    axes[0][0].set_ylabel(Y_LABEL.replace("untied (bits/byte)", "untied, val (bits/byte)"))
    style.legend(fig, None, 1, loc="outside right upper", fontsize=6)
    fig.drawn, fig.n = sign_flip.grid(runs), n_drawn(cells)
    fig.captions.append(
        f"{SIGN.replace('test split', 'validation windows')}. Mean over seeds paired by seed at "
        f"each evaluation, {CONFIDENCE:.0%} t-band where {style.MIN_BAND_SEEDS}+ seeds; dashed: "
        f"ρ moved by the body at a fixed V. {_decay_words(decay)}{_at_init(at_init, rhos)}"
    )
    return fig


def _decay_start(runs: pd.DataFrame) -> tuple[float, float, float] | None:
    """(share of steps, first, last train bytes) where the runs' lr decays: each run's config
    (optim.schedule wsd: its last optim.decay_frac of steps, of the train bytes it read); None
    where no run has a wsd schedule or its bytes are unknown."""
    starts = {}
    for run in runs.reindex(columns=["path", "train_bytes"]).dropna().itertuples():
        optim = read_config(Path(run.path)).get("optim") or {}
        if optim.get("schedule") == "wsd" and optim.get("decay_frac") is not None:
            starts[run.path] = (optim["decay_frac"], (1 - optim["decay_frac"]) * run.train_bytes)
    if not starts:
        return None
    fracs, at = zip(*starts.values(), strict=True)
    return max(fracs), min(at), max(at)


def _decay_words(decay: tuple | None) -> str:
    """The caption's words for the shaded decay phase."""
    if decay is None:
        return ""
    frac, first, last = decay
    span = style.span([first / 1e6, last / 1e6], "{:.1f}")
    return (
        f"Shaded: the lr's decay (optim.schedule wsd, the last {frac:.0%} of each run's steps, "
        f"from {span} MB of train bytes on). "
    )


def _at_init(at_init: pd.DataFrame, rhos: pd.Series) -> str:
    """The caption's words for the step-0 gaps that the token-axis figure leaves out."""
    gaps = sorted(
        (rhos.get(key, np.nan), PLAIN.get(key[-1], key[-1]), group["mean"].iloc[0])
        for key, group in at_init.groupby(sign_flip.CELL)
    )
    words = ", ".join(f"ρ={rho:.2f} ({std}) {gap:+.2f}" for rho, std, gap in gaps)
    return f"At step 0 (the init, not drawn): {words}." if gaps else ""
