"""What every figure shares: style, colours, the output registry (``REGISTRY``: each output's
name and how it is made), panel helpers, the caption under every figure, saving. What a caption
says, and how runs left out (``fig.skipped``) or drawn apart (``fig.flagged``) are reported:
docs/figures.md."""

from __future__ import annotations

import functools
import re
import textwrap
from collections import namedtuple
from collections.abc import Callable, Iterable, Iterator, Sequence
from inspect import signature
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
from matplotlib import rc_context
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import EngFormatter, FuncFormatter, NullFormatter

from tiedvsuntied.analysis.load import Results, ResultsError, require_single_data
from tiedvsuntied.analysis.rows import key_label
from tiedvsuntied.analysis.stats import (
    GROUP_COLUMNS,
    MIN_BAND_SEEDS,
    aggregate_history,
    first_replicates,
)
from tiedvsuntied.figures.labels import corpora, init_std_aside

TIE_COLOR = {True: "#D55E00", False: "#0072B2"}  # Okabe-Ito vermillion and blue: colour-blind safe
MFC = {True: TIE_COLOR[True], False: "white"}  # marker face: tied filled, untied open (greyscale)
REF_COLOR = "#7f7f7f"  # references: ln V, init, identity
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]
LINESTYLES = ["-", "--", ":", "-."]
STATUS_MARKER = {"diverged": "x", "failed": "X", "unknown": "X"}
IN_MEAN = ["finished", "running", "interrupted"]  # averaged (partial runs: up to their step)
NOTE_TEXT = {"ha": "center", "va": "center", "fontsize": 7, "color": "#444444"}  # an empty panel's
STYLE = {
    "font.size": 8,
    "axes.titlesize": 8,
    "xtick.labelsize": 7,
    "ytick.labelsize": 7,
    "legend.fontsize": 7,
    "legend.frameon": False,
    "lines.linewidth": 1.3,
    "lines.markersize": 4,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.25,
    "grid.linewidth": 0.5,
    "savefig.dpi": 300,
    "pdf.fonttype": 42,
    "figure.dpi": 150,
}


# the runs-table columns describe_runs reads (a hand-made table may lack some)
DESCRIBED = ["model", "n_embd", "params_total", "max_steps", "vocab_size", "data", "data_id"]
DESCRIBED += ["path", "seed", "replicate", "variant", "tie", "init_std"]
CHARS_PER_INCH = 19  # of 7 pt caption text, to wrap it to the figure's width
MAX_FOOTNOTE_LINES = 3  # per list (not shown, marked): the console has the rest

# REGISTRY's entries: write(results, out_dir, formats) -> (files, the figure or None); study:
# the study package whose output it is (tiedvsuntied/studies/<study>/), None for every study's
Output = namedtuple("Output", ["description", "write", "study"])
REGISTRY: dict[str, Output] = {}


def _tables(func: Callable, results: Results) -> list[pd.DataFrame]:
    """The Results tables ``func`` reads: those its parameters name."""
    return [getattr(results, p) for p in signature(func).parameters if p in ("runs", "history")]


def figure(
    name: str, description: str, mixed_data: bool = False, needs=None, study: str | None = None
) -> Callable:
    """Register a figure function as output ``name``: called with the Results tables its
    parameters name, under STYLE (never the global rcParams), on runs of one dataset unless
    ``mixed_data``, its tables with a ``setting`` column, and then captioned. ``needs``: (a test
    of the runs, why nothing is drawn when they fail it); ``study``: the study it belongs to
    (:mod:`.paper` draws it from that study's bundles)."""

    def register(func: Callable) -> Callable:
        @functools.wraps(func)
        def styled(runs: pd.DataFrame, *args, **kwargs) -> Figure:
            if runs.empty:
                raise ResultsError(f"{name}: no runs to plot (the runs table is empty)")
            if not mixed_data:
                require_single_data(runs, name)
            with rc_context(STYLE):
                if needs and not needs[0](runs):
                    fig = nothing_to_draw(new_figure(1, 1, 2.2)[0], needs[1])
                else:
                    fig = func(with_setting(runs), *map(with_setting, args), **kwargs)
                finish(fig, runs)
            return fig

        def write(results: Results, out_dir: Path, formats: Sequence[str]):
            fig = styled(*_tables(func, results))
            return ([] if fig.empty else save_figure(fig, out_dir, name, formats)), fig

        REGISTRY[name] = Output(description, write, study)
        return styled

    return register


def table(name: str, description: str, needs=None, study: str | None = None) -> Callable:
    """Register ``func`` (tables -> {file name: text}) as output ``name``; it becomes
    ``func(out_dir, ...)``, which writes the files and returns their paths. ``needs``, ``study``:
    as in :func:`figure` (a notebook calling ``func`` checks ``needs`` itself)."""

    def register(func: Callable) -> Callable:
        @functools.wraps(func)
        def write_files(out_dir: str | Path, *args, **kwargs) -> list[Path]:
            Path(out_dir).mkdir(parents=True, exist_ok=True)
            texts = func(*args, **kwargs)
            for file, text in texts.items():
                Path(out_dir, file).write_text(text)
            return [Path(out_dir, file) for file in texts]

        def write(results: Results, out_dir: Path, formats: Sequence[str]):
            if needs and not needs[0](results.runs):
                return [], SimpleNamespace(empty=needs[1])
            return write_files(out_dir, *_tables(func, results)), None

        REGISTRY[name] = Output(description, write, study)
        return write_files

    return register


def new_figure(
    nrows: int, ncols: int, row_height: float, width: float | None = None, **kw
) -> tuple[Figure, np.ndarray]:
    """Two columns of a paper wide (7 in) if panels sit side by side, else one (3.4 in)."""
    width = width or (7.0 if ncols > 1 else 3.4)
    fig = Figure(figsize=(width, row_height * nrows + 0.5), layout="constrained")
    fig.skipped = []  # "name: reason" of runs left out
    fig.flagged = []  # "name: status" of runs drawn apart
    fig.captions = []  # the figure's own caption lines (method, interval, floor)
    fig.drawn = None  # the runs drawn, when fewer than those given (the caption describes them)
    fig.n = None  # the caption's n where the figure counts its own cells (else seeds_per_cell)
    fig.empty = None  # why nothing is drawn: then the figure is not written
    return fig, fig.subplots(nrows, ncols, squeeze=False, **kw)


def nothing_to_draw(fig: Figure, reason: str) -> Figure:
    """Every panel says ``reason``; the figure is marked empty (the CLI skips it, saying why)."""
    for ax in fig.axes:
        note(ax, reason)
    fig.empty = reason
    return fig


def leave_out(fig: Figure, runs: pd.DataFrame, reason: str | Callable) -> None:
    """List each of ``runs`` as not shown: 'name: reason' (``reason``: text, or of the run)."""
    fig.skipped += [
        f"{run_label(run)}: {reason(run) if callable(reason) else reason}"
        for _, run in runs.iterrows()
    ]


def span(values: Iterable, fmt: str = "{}") -> str:
    """'5', or '3–5' where ``values`` differ (NaN left out; '?' if none)."""
    kept = sorted(v for v in values if pd.notna(v))
    return "–".join(dict.fromkeys(fmt.format(v) for v in kept[:1] + kept[-1:])) or "?"


def seeds_per_cell(runs: pd.DataFrame) -> str:
    """'n = 5 seeds/cell' (or 'n = 3–5 ...' where cells differ): seeds of replicate 0 per data x
    size x variant x tie x init std; replicate runs (the noise floor) are counted apart."""
    first = first_replicates(runs)
    counts = first.groupby(GROUP_COLUMNS, dropna=False)["seed"].nunique()
    text = f"n = {span(counts) if len(counts) else 0} seed{'' if counts.max() == 1 else 's'}/cell"
    if extra := len(runs) - len(first):
        text += f" (+{extra} replicate run{'s' * (extra != 1)}: noise floor)"
    return text


def describe_runs(runs: pd.DataFrame, n: str | None = None) -> str:
    """What a figure draws, for its caption: 'nano (d=64), micro (d=128), 500 steps · Tiny
    Shakespeare (text, GPT-2 tokens) · V = 50,257 · n = 5 seeds/cell' (``n``: in its place)."""
    runs = runs.reindex(columns=list(dict.fromkeys([*runs.columns, *DESCRIBED])))
    steps = runs["max_steps"].dropna().astype(int)
    models = ", ".join(model_label(runs, m) for m in model_order(runs))
    models += f", {span(steps)} steps" if len(steps) else ""
    vocab = sorted(runs["vocab_size"].dropna().astype(int).unique())
    vocab = ", ".join(f"{v:,}" for v in vocab) or "?"
    return " · ".join([models, corpora(runs), f"V = {vocab}", n or seeds_per_cell(runs)])


def footnote(fig: Figure, width: int) -> list[str]:
    """``fig.skipped`` and ``fig.flagged``, MAX_FOOTNOTE_LINES lines each: the rest counted."""
    lines = []
    for head, items in (("Not shown", fig.skipped), ("Marked", fig.flagged)):
        for keep in range(len(items), 0, -1):
            more = f"; and {len(items) - keep} more (the console lists them)" * (keep < len(items))
            wrapped = textwrap.wrap(f"{head}: " + "; ".join(items[:keep]) + more + ".", width)
            if len(wrapped) <= MAX_FOOTNOTE_LINES or keep == 1:
                lines += wrapped[:MAX_FOOTNOTE_LINES]
                break
    return lines


def finish(fig: Figure, runs: pd.DataFrame) -> None:
    """The caption under the panels: the runs drawn, ``fig.captions``, then the footnote."""
    fig.skipped, fig.flagged = (list(dict.fromkeys(fig.skipped)), list(dict.fromkeys(fig.flagged)))
    drawn = runs if fig.drawn is None or fig.drawn.empty else fig.drawn
    width = int(fig.get_figwidth() * CHARS_PER_INCH)
    texts = [describe_runs(drawn, fig.n), *fig.captions]
    lines = [line for text in texts for line in textwrap.wrap(text, width)]
    # below the figure, out of the layout (the panels keep their size); saving with
    # bbox_inches="tight" (save_figure, Jupyter) takes it in
    fig.caption_text = fig.text(
        0.01, 0, "\n".join(lines + footnote(fig, width)), fontsize=7, ha="left", va="top"
    )


def note(ax, text: str) -> None:
    """Say in the panel itself why it is empty."""
    ax.text(0.5, 0.5, "\n".join(textwrap.wrap(text, 40)), transform=ax.transAxes, **NOTE_TEXT)
    ax.grid(False)
    # an empty panel draws no axis of its own: its 0-1 ticks would read as data
    ax.tick_params(left=False, bottom=False, labelleft=False, labelbottom=False)
    ax.spines[["left", "bottom"]].set_visible(False)


def run_label(run) -> str:
    """A run's name, with its variant when it has one: a T5 run has its plain tied twin's name."""
    name = str(run.get("name") or run.get("run_id"))
    variant = run.get("variant")
    return f"{name} [{variant}]" if isinstance(variant, str) and variant else name


def with_setting(df: pd.DataFrame) -> pd.DataFrame:
    """Add ``setting``: the init std, plus the run's variant (head.t5_rescale=True, ...) if any;
    figures split by it, so runs differing in anything but tie, size, seed are never averaged."""
    variant = df["variant"].fillna("")
    init = df["init_std"].astype("string").fillna("?")
    return df.assign(setting=init.where(variant == "", init + " | " + variant))


def init_label(setting: str, short: bool = False, prefix: str = "init std ", widths=()) -> str:
    """'0.02 | optim.lr=0.001' -> 'init std 0.02\nlr: 0.001', with labels.init_std_aside of the
    widths (n_embd) of the runs drawn."""
    init, _, variant = str(setting).partition(" | ")
    parts = [p.strip().partition("=") for p in variant.split(",") if p.strip()]
    variant = ", ".join(f"{key_label(k)}: {v}" for k, _, v in parts)
    aside = init_std_aside(init, widths, "; " if short else ";\n").strip()
    init = r"$d^{-1/2}$" if init == "inv_sqrt_d" else init
    return (", " if short else "\n").join(filter(None, [prefix + init, aside, variant]))


def setting_label(runs: pd.DataFrame, setting: str, short: bool = False) -> str:
    """:func:`init_label` of ``setting``, compared with the widths of its runs."""
    return init_label(setting, short, widths=runs.loc[runs["setting"] == setting, "n_embd"])


def init_order(runs: pd.DataFrame) -> list[str]:
    """Settings from the largest init std down (inv_sqrt_d placed by its resolved value)."""

    def key(setting):
        init, _, variant = str(setting).partition(" | ")
        resolved = runs.loc[runs["setting"] == setting, "init_std_resolved_emb"].median()
        return (-float(np.nan_to_num(pd.to_numeric(init, errors="coerce"), nan=resolved)), variant)

    return sorted(runs["setting"].dropna().unique(), key=key)


def model_order(runs: pd.DataFrame) -> list[str]:
    sizes = runs.groupby("model")[["params_total", "n_embd"]].max()
    return list(sizes.sort_values(["params_total", "n_embd"]).index)


def model_label(runs: pd.DataFrame, model: str) -> str:
    d = runs.loc[runs["model"] == model, "n_embd"].dropna()
    return f"{model} (d={int(d.iloc[0])})" if len(d) else str(model)


def plain_log(ax, axis: str = "y", values=None, ratio: float = 1.0, eng: bool = False) -> None:
    """Log scale with plain tick labels (20, not 2x10^1; 100k with ``eng``), minor ticks 2 and 5
    labelled under two decades. With ``values``: only if their max/min exceeds ``ratio``."""
    if values is not None:
        v = np.asarray(list(values), dtype=float)
        if not (v := v[np.isfinite(v) & (v > 0)]).size or v.max() / v.min() <= ratio:
            return
    (ax.set_yscale if axis == "y" else ax.set_xscale)("log")
    a, (lo, hi) = (ax.yaxis, ax.get_ylim()) if axis == "y" else (ax.xaxis, ax.get_xlim())
    fmt = EngFormatter(sep="") if eng else FuncFormatter(lambda v, _: f"{v:g}")
    a.set_major_formatter(fmt)
    # which minor ticks get a label: all of them in a span under 3x; under a decade all but
    # 7 and 9 (0.7, 0.8, 0.9 print on top of each other); up to two decades 2 and 5
    shown = "23456789" if hi / lo < 3 else "234568" if hi / lo < 10 else "25"
    a.set_minor_formatter(
        NullFormatter()
        if lo <= 0 or hi / lo >= 100
        else FuncFormatter(lambda v, p: fmt(v, p) if f"{v:.0e}"[0] in shown else "")
    )


def legend(
    fig: Figure, handles: list | None, ncols: int, loc: str = "outside upper center", **kw
) -> None:
    """One legend above all panels (a suptitle would collide with it), or at ``loc``;
    ``handles`` None: the panels' labelled artists, each label once, where it first appears."""
    if handles is None:
        labelled = {}
        for ax in fig.axes:
            for artist, label in zip(*ax.get_legend_handles_labels(), strict=True):
                labelled.setdefault(label, artist)
        handles = list(labelled.values())
    fig.legend(handles=handles, loc=loc, ncols=min(len(handles), ncols), **kw)


def handle(label: str, color: str = "#444444", **kw) -> Line2D:
    """A legend entry drawn as ``kw`` say."""
    return Line2D([], [], label=label, color=color, **kw)


def tie_handles(ties: Iterable[bool]) -> list:
    """Tied filled, untied open, as in the plots; only the arms in ``ties`` (those drawn)."""
    return [
        handle(label, TIE_COLOR[t], marker="o", mfc=MFC[t], ls="none")
        for t, label in ((True, "tied"), (False, "untied"))
        if t in set(ties)
    ]


def mean_line(
    ax, h: pd.DataFrame, metric: str, tie: bool, by: list[str], band: float = 0, **kw
) -> pd.DataFrame:
    """The mean of ``metric`` over seeds vs ``x`` (a keyword: tokens, or step). With ``band``: its
    t-interval where at least MIN_BAND_SEEDS runs are averaged; where fewer are, each run is drawn
    thin instead (with two seeds a t-band spans tens of nats). ``log``: mean and interval of
    log(metric), exponentiated (for ratios: a geometric mean, an interval that stays positive)."""
    x, log, color = kw.pop("x", "tokens"), kw.pop("log", False), kw.pop("color", TIE_COLOR[tie])
    h = h.assign(**{metric: np.log(h[metric].where(h[metric] > 0))}) if log else h
    agg = aggregate_history(h, metric, by=by)
    if log:
        agg[["mean", "ci_low", "ci_high"]] = np.exp(agg[["mean", "ci_low", "ci_high"]])
    ax.plot(agg[x], agg["mean"], color=color, **kw)
    if band and (ok := agg["n"] >= MIN_BAND_SEEDS).any():
        ci = agg[ok]
        ax.fill_between(ci[x], ci["ci_low"], ci["ci_high"], color=color, alpha=band, lw=0)
    elif band:
        drawn = first_replicates(h)  # a replicate is the noise floor, not another seed
        drawn = drawn[drawn[metric].notna() & drawn["status"].isin(IN_MEAN)]
        thin = {"lw": 0.6, "alpha": 0.6, "ls": kw.get("ls", "-"), "zorder": kw.get("zorder")}
        for _, run in drawn.groupby("run_id"):
            ax.plot(run[x], np.exp(run[metric]) if log else run[metric], color=color, **thin)
    return agg


def marker(k: int) -> str:
    """The k-th marker, to tell sizes or init stds apart."""
    return MARKERS[k % len(MARKERS)]


def init_line(k: int) -> dict:
    """Line keywords that tell the k-th of several init stds apart."""
    return {"marker": marker(k), "ls": LINESTYLES[k % len(LINESTYLES)]}


def sizes(df: pd.DataFrame, models: Sequence[str]) -> Iterator[tuple[pd.DataFrame, dict]]:
    """Each size's rows in ``df`` with line keywords that tell sizes apart (none for one size)."""
    several = len(models) > 1
    for k, model in enumerate(models):
        if len(sized := df[df["model"] == model]):
            yield sized, {"marker": marker(k), "ms": 3, "markevery": 0.2} if several else {}


def size_handles(runs: pd.DataFrame, models: Sequence[str]) -> list:
    """Legend entries for the size markers of :func:`sizes` (none for one size)."""
    return [
        handle(model_label(runs, m), marker=marker(k), ls="none")
        for k, m in enumerate(models)
        if len(models) > 1
    ]


def save_figure(fig: Figure, out_dir: str | Path, name: str, formats: Sequence[str]) -> list[Path]:
    """Write ``fig`` as ``out_dir/name.<fmt>`` for each format; return the paths."""
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    paths = [Path(out_dir, f"{name}.{fmt}") for fmt in formats]
    with rc_context(STYLE):  # some settings (PDF font type, dpi) are read when saving
        for path in paths:
            fig.savefig(path, bbox_inches="tight", pad_inches=0.03, dpi=STYLE["savefig.dpi"])
    return paths


def print_notes(fig: Figure | None, indent: str = "") -> None:
    """What a figure leaves out and draws apart, one line each, mathtext as plain text."""
    for head, items in (("not shown", fig.skipped), ("marked", fig.flagged)) if fig else ():
        for item in items:
            plain = re.sub(r"\$([^$]*)\$", lambda m: re.sub(r"[{}]", "", m.group(1)), item)
            print(f"{indent}{head}: {plain}")


def publish(fig: Figure, out_dir: str | Path, name: str, formats: Sequence[str]) -> Figure:
    """For notebooks: save ``fig``, print where and what it leaves out; an empty one is shown,
    not written, and says why."""
    if fig.empty:
        print(f"{name}: not written: {fig.empty}")
    else:
        print(*(f"wrote {path}" for path in save_figure(fig, out_dir, name, formats)), sep="\n")
    print_notes(fig)
    return fig
