"""The third edition's figures (issue 40, experiments/sign_flip): the map of tying's effect over
the head's share rho and the effect along training, from the numbers of :mod:`.analysis`,
:mod:`.curve` and :mod:`.tokens`; and its section of the paper (its tables: :mod:`.tables`)."""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.ticker import EngFormatter

from tiedvsuntied.analysis.stats import CONFIDENCE
from tiedvsuntied.figures import paper, style
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
        ax.errorbar(group[x][has], group["diff"][has], yerr=yerr[:, has.to_numpy()],
                    capsize=2, label=label, **kw)  # fmt: skip
        ax.plot(group[x][~has], group["diff"][~has], mfc="white", **kw)  # one seed: no bar
        if way == sign_flip.OFF_LADDER:  # what it is, beside it: its body and its tokenizer
            for row in group.itertuples():
                ax.annotate(f" {row.body}, {row.encoding}", (getattr(row, x), row.diff), fontsize=5)


OWN_STYLE = {"ls": "none", "marker": "P", "color": "#555555", "ms": 5, "capsize": 2}
OWN_NUDGE = 1.04  # drawn a little right of the point's own marker, so that neither hides


def _own_points(ax, own: pd.DataFrame) -> None:
    """The OWN contrasts (an arm at its own multipliers, HYPOTHESES.md's rule) beside the cells."""
    for contrast, group in own[own["low"].notna()].groupby("contrast"):
        yerr = np.vstack([group["diff"] - group["low"], group["high"] - group["diff"]])
        label = f"{contrast} (own multipliers: mult2d.py's rule)"
        ax.errorbar(group["rho"] * OWN_NUDGE, group["diff"], yerr=yerr, label=label, **OWN_STYLE)


def _curve(ax, f, cross: dict) -> str:
    """The fitted curve with its band and the crossover; returns the caption's words for it."""
    if f is None:
        return cross["note"]
    grid = np.exp(np.linspace(*f.log_rho, 100))
    curve = sign_flip_curve.band(f, grid)
    label = f"OLS on ln ρ, {CONFIDENCE:.0%} band"
    ax.plot(curve["rho"], curve["mean"], color="black", lw=1, label=label)
    ax.fill_between(curve["rho"], curve["low"], curve["high"], color="black", alpha=0.12, lw=0)
    if np.isnan(cross["rho"]):
        return f"crossover: {cross['note']}"
    ax.axvline(cross["rho"], color="black", ls="--", lw=0.8)
    ax.axvspan(cross["low"], cross["high"], color="black", alpha=0.08, lw=0)
    where = f"ρ = {cross['rho']:.2f} [{cross['low']:.2f}, {cross['high']:.2f}]"
    ax.text(cross["rho"], 0.03, f" 0 at {where}", transform=ax.get_xaxis_transform(), fontsize=6)
    return f"crossover {where}" + (f" ({cross['note']})" if cross["note"] else "")


LADDER_LINE = {"ls": (0, (4, 2)), "lw": 0.9}  # each ladder's own fit: dashed, in its colour


def _ladder_lines(ax, runs: pd.DataFrame, on: str = "rho") -> None:
    """Each ladder's own OLS line on the log of ``on`` (exploratory; the committed fit pools
    them), over its points' range in the colour of its markers, where it has two points or more."""
    for way, f in sign_flip_curve.ladder_fits(runs, on).items():
        if f is None:
            continue
        grid = np.exp(np.linspace(*f.log_rho, 50))
        label = f"{way}-ladder's own OLS (exploratory)"
        mean = sign_flip_curve.band(f, grid)["mean"]
        ax.plot(grid, mean, color=WAY_STYLE[way][1], label=label, **LADDER_LINE)


@sign_flip_figure("sign_flip_fig1_map", "third edition: tied − untied in bits per byte against rho")
def fig_map(runs: pd.DataFrame):
    """Per init std: each ladder point's tied − untied (test bits per byte, mean and t-interval
    over seeds) against rho (log axis), marked by how rho was moved; the OLS fit in ln rho over
    every pair with its band; the crossover with its delta-method interval, or 'none in range'."""
    effects, fitted = sign_flip.effect_tables(runs), sign_flip_curve.fits(runs)
    table = effects.cells
    stds = _init_stds(table)
    fig, axes = style.new_figure(1, len(stds), 2.6, sharey=True)
    if table.empty:
        return style.nothing_to_draw(fig, "no tied/untied pair at any ladder point yet")
    for ax, std in zip(axes[0], stds, strict=True):
        _points(ax, table[table["init_std"] == std])
        _own_points(ax, effects.own[effects.own["init_std"] == std])
        f, cross = fitted.get(std, (None, sign_flip_curve.crossover(None)))
        said = _curve(ax, f, cross)
        if std == sign_flip.PRIMARY_INIT:  # the ladders are d^-0.5's
            _ladder_lines(ax, runs)
        ax.axhline(0, color=style.REF_COLOR, lw=0.8)
        ax.set_xscale("log")
        style.plain_log(ax, "x", table["rho"])
        ax.set_xlabel("ρ = V·d / (V·d + non-embedding params)")
        # the crossover in the title: inside the axes it would sit on a point
        ax.set_title(f"{style.init_label(std)}\n{said}", fontsize=7)
    axes[0][0].set_ylabel("tied − untied (bits/byte)")
    style.legend(fig, None, 2)
    fig.drawn = sign_flip.grid(runs)
    fig.captions += [
        f"{SIGN}. Bodies: {', '.join(sorted(set(table['body'])))}. Mean and {CONFIDENCE:.0%} "
        "t-interval over seeds' paired differences (each seed its own held-out books); curve: "
        f"OLS of every pair's difference on ln ρ over the ladder's points (vocabularies trained "
        f"per fold), {CONFIDENCE:.0%} band of the mean; crossover interval by the delta method; "
        "dashed: each ladder's own OLS line (exploratory, not committed).",
        *_primary_words(effects.primary),
        *_own_words(effects.own),
        _floor_words(table),
        *_device_words(table),
    ]
    return fig


@sign_flip_figure(
    "sign_flip_fig3_tokens_per_param", "third edition (exploratory): the effect per token/param"
)
def fig_tokens_per_param(runs: pd.DataFrame):
    """Exploratory, not committed: the map's d^-0.5 cells against tokens per parameter (log),
    marked by how rho was moved, with each ladder's own OLS line: whether the two ladders, which
    run opposite ways on rho, share this axis. Each ladder's per-seed slopes in the caption."""
    table = sign_flip.effect_tables(runs).cells
    table = table[table["init_std"].eq(sign_flip.PRIMARY_INIT)]
    fig, axes = style.new_figure(1, 1, 2.6)
    if table.empty:
        return style.nothing_to_draw(fig, "no tied/untied pair at d^-0.5 yet")
    ax = axes[0][0]
    _points(ax, table, x="tokens_per_param")
    _ladder_lines(ax, runs, on="tokens_per_param")
    ax.axhline(0, color=style.REF_COLOR, lw=0.8)
    ax.set_xscale("log")
    style.plain_log(ax, "x", table["tokens_per_param"])
    ax.set_xlabel("training tokens per parameter (tied model)")
    ax.set_ylabel("tied − untied (bits/byte)")
    ax.set_title(f"{style.init_label(sign_flip.PRIMARY_INIT)}, exploratory", fontsize=7)
    style.legend(fig, None, 2)
    fig.drawn = sign_flip.grid(runs)
    slopes = sign_flip_curve.ladder_slopes(runs, "tokens_per_param")
    said = [
        f"{row.ladder} {row.diff:+.4f} [{row.low:+.4f}, {row.high:+.4f}]"
        for row in slopes.itertuples()
        if pd.notna(row.low)
    ]
    fig.captions += [
        f"{SIGN}. Exploratory, not committed in HYPOTHESES.md: the map's cells against tokens "
        f"per parameter; mean and {CONFIDENCE:.0%} t-interval over seeds' paired differences; "
        "dashed: each ladder's own OLS line. Every run reads 10 MB of text, so tokens per "
        "parameter falls as the model's parameters grow: this figure cannot tell the two apart.",
        "Per-seed slopes on ln tokens per parameter, bpb per unit, 95% t over seeds, "
        f"unadjusted: {'; '.join(said) or 'none yet'}.",
    ]
    return fig


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
        "Grey crosses: an arm at its own multipliers (HYPOTHESES.md's rule, mult2d.py), drawn a "
        "little right of its point and not fitted."
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
    the train bytes seen, one line per ladder point (coloured by rho), mean over seeds paired by
    seed with its t-band: whether tying's effect closes with training."""
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
    norm = np.log(rhos.min()), np.log(rhos.max())
    cmap = colormaps["viridis"]
    for ax, std in zip(axes[0], stds, strict=True):
        lines = axis[axis["init_std"] == std].groupby(sign_flip.CELL)
        for key, line in sorted(lines, key=lambda kv: rhos.get(kv[0], np.nan)):
            rho = rhos.get(key, np.nan)
            color = cmap((np.log(rho) - norm[0]) / ((norm[1] - norm[0]) or 1))
            body = sign_flip.body_label(line["n_embd"].iloc[0], key[0])
            label = f"ρ={rho:.2f} ({body}, V={key[4]:,})"
            # dashed: rho moved by the body at a fixed V, so the two ladders read apart
            ls = "--" if ways.get(key) == "body" else "-"
            ax.plot(line["bytes"], line["mean"], color=color, lw=1, ls=ls, label=label)
            band = line[line["n"] >= style.MIN_BAND_SEEDS]
            ax.fill_between(band["bytes"], band["low"], band["high"], color=color, alpha=0.15, lw=0)
        ax.axhline(0, color=style.REF_COLOR, lw=0.8)
        ax.xaxis.set_major_formatter(EngFormatter())
        ax.set_xlabel("train bytes seen")
        ax.set_title(style.init_label(std))
    axes[0][0].set_ylabel("tied − untied, val (bits/byte)")
    style.legend(fig, None, 1, loc="outside right upper", fontsize=6)
    fig.drawn = sign_flip.grid(runs)
    fig.captions.append(
        f"{SIGN.replace('test split', 'validation windows')}. Mean over seeds paired by seed at "
        f"each evaluation, {CONFIDENCE:.0%} t-band where {style.MIN_BAND_SEEDS}+ seeds; dashed: "
        f"ρ moved by the body at a fixed V. {_at_init(at_init, rhos)}"
    )
    return fig


def _at_init(at_init: pd.DataFrame, rhos: pd.Series) -> str:
    """The caption's words for the step-0 gaps that the token-axis figure leaves out."""
    gaps = sorted(
        (rhos.get(key, np.nan), PLAIN.get(key[-1], key[-1]), group["mean"].iloc[0])
        for key, group in at_init.groupby(sign_flip.CELL)
    )
    words = ", ".join(f"ρ={rho:.2f} ({std}) {gap:+.2f}" for rho, std, gap in gaps)
    return f"At step 0 (the init, not drawn): {words}." if gaps else ""
