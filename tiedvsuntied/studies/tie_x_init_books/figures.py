"""The second edition's figures and tables (experiments/tie_x_init_books; each registered
description says what it shows) from the numbers of :mod:`.analysis`, and its section of the
paper."""

from __future__ import annotations

import functools
import itertools

import numpy as np
import pandas as pd

from tiedvsuntied.analysis.load import Results
from tiedvsuntied.analysis.stats import CONFIDENCE, PAIRED_SIGN, first_replicates, seed_interval
from tiedvsuntied.figures import paper, style
from tiedvsuntied.figures.labels import p_text
from tiedvsuntied.studies.tie_x_init_books import analysis as books

STUDY = __package__.rpartition(".")[2]  # the package's name
# the paper: the third edition's section first, then this one's outputs (numbered by name), then
# the parameter table, from the shipped bundle (docs/figures.md)
SECTION = paper.register(
    paper.Section(
        STUDY, rank=1, bundles=("experiments/tie_x_init_books/results",), also=("table_params",)
    )
)

ARMS = {  # label, colour (Okabe-Ito; tied and untied as in every figure), marker, x offset
    "tied": ("tied", style.TIE_COLOR[True], "o", -0.15),
    "untied": ("untied", style.TIE_COLOR[False], "s", 0.15),
    "t5": ("T5 (tied, 1.0, h·d$^{-1/2}$)", "#009E73", "^", -0.3),
    "emb1_head_dsqrt": ("untied, emb 1.0 / head d$^{-1/2}$", "#CC79A7", "D", 0.3),
}


NOT_BOOKS = "no runs of a document-split study (data.split=document): not the second edition"


def is_books(runs: pd.DataFrame) -> bool:
    """Whether the runs hold out whole documents (the second edition's design), other than
    another study's (a sweep of another section of the paper: its own figures draw those)."""
    if "heldout_fold" not in runs:
        return False
    others = paper.of_other_studies(runs, STUDY)
    return bool((runs["heldout_fold"].notna() & ~others).any())


NEEDS = (is_books, NOT_BOOKS)  # every output here: other runs draw nothing


def at_chosen_lr(results: Results) -> Results:
    """For the generic figures (notebooks 00-06, 08): the second edition's runs at each arm's
    chosen embedding-side multiplier, as its own figures draw them (its lr check's other runs,
    nano seed 0 at the multipliers not chosen, left out); other runs, or runs without the lr
    check that chooses, unchanged."""
    runs = results.runs
    if not is_books(runs) or books.chosen_lr(runs).empty:
        return results
    return results.select(runs["run_id"].isin(books.grid(runs)["run_id"]))


books_figure = functools.partial(style.figure, needs=NEEDS, study=STUDY)


def _references(ax, runs: pd.DataFrame) -> None:
    """The count models on the same held-out windows (mean over the seeds' held-out books)."""
    for column, ls, name in (("test_bigram", "--", "bigram"), ("test_unigram", ":", "unigram")):
        value = runs[column].mean()
        if np.isfinite(value):
            ax.axhline(value, color=style.REF_COLOR, ls=ls, lw=0.8)
            where = {"xycoords": ("axes fraction", "data"), "ha": "right", "va": "bottom"}
            ax.annotate(name, (1.0, value), fontsize=6, color=style.REF_COLOR, **where)


@books_figure("books_fig1_loss", "second edition: test loss per arm and init std, count baselines")
def fig_loss(runs: pd.DataFrame):
    """One panel per size: each arm's test loss (final weights) at each init std, per seed and
    as the mean with its t-interval; the bigram and unigram count models as lines."""
    chosen = first_replicates(books.grid(runs))
    models = [m for m in style.model_order(runs) if m in set(chosen["model"])]
    fig, axes = style.new_figure(1, max(len(models), 1), 2.4, sharey=False)
    if chosen.empty:
        return style.nothing_to_draw(fig, "no finished runs at their arm's chosen lr")
    for ax, model in zip(axes[0], models, strict=False):
        cell = chosen[chosen["model"] == model]
        for a, (i, std) in itertools.product(ARMS, enumerate(books.STDS)):
            label, color, marker, dx = ARMS[a]
            values = cell.loc[(cell["arm"] == a) & (cell["init_std"] == std), "test_loss"]
            if len(values):  # each seed a dot, and the mean with its t-interval over seeds
                values = values.dropna()
                arm = {"color": color, "marker": marker}
                ax.plot(np.full(len(values), i + dx), values, ls="none", ms=3, alpha=0.45, **arm)
                mean, low, high = seed_interval(values)
                yerr = None if np.isnan(low) else [[mean - low], [high - mean]]
                ax.errorbar(i + dx, mean, yerr=yerr, capsize=2, ms=5, label=label, **arm)
        _references(ax, cell)
        ax.set_xlim(-0.5, len(books.STDS) - 0.5)
        ax.set_xticks(range(len(books.STDS)), [style.init_label(s, prefix="") for s in books.STDS])
        ax.set_xlabel("init std of embedding / head")
        ax.set_title(model)
    axes[0][0].set_ylabel("test loss (nats/token), held-out books")
    style.legend(fig, None, 4)  # each arm once, wherever it first appears
    fig.drawn = chosen
    fig.captions.append(
        f"Mean and {CONFIDENCE:.0%} t-interval over seeds (each seed its own held-out books); "
        "dots: seeds. Lines: count models fitted on each run's training books, scored on the "
        "same windows (mean over seeds). Each arm at its chosen embedding-side lr."
    )
    return fig


def _interval_count(table: pd.DataFrame) -> str:
    """'19 intervals', and the rows of one seed, which have a point and no interval."""
    alone = int(table["low"].isna().sum())
    counted = f"{len(table) - alone} intervals"
    return f"{counted} ({alone} rows of one seed: no interval)" if alone else counted


@books_figure("books_fig2_contrasts", "second edition: every contrast with its interval and floor")
def fig_contrasts(runs: pd.DataFrame):
    """Tables A, B and C as one forest plot: per-seed values, mean, t-interval, floor band; the
    primary contrast marked [PRIMARY] and drawn thick."""
    table = books.contrast_table(runs)
    table = table[table["n_seeds"] > 0]
    fig, axes = style.new_figure(1, 1, 0.22 * max(len(table), 4), width=7.0)
    ax = axes[0][0]
    if table.empty:
        return style.nothing_to_draw(fig, "no contrast has a pair of runs yet")
    fig.drawn = books.grid(runs)  # the contrasts' runs: each arm at its chosen lr
    for y, row in enumerate(table.itertuples()):
        ax.plot(row.seed_diffs, np.full(len(row.seed_diffs), y), ".", color="#777777", ms=3)
        if np.isfinite(row.low):
            ax.plot([row.low, row.high], [y, y], color="black", lw=2.2 if row.primary else 1.0)
        ax.plot(row.diff, y, marker="o", color="black", ms=4)
        if np.isfinite(row.floor):
            ax.fill_betweenx([y - 0.35, y + 0.35], -row.floor, row.floor, color="#cccccc", lw=0)
    primary = table["primary"].map({True: " [PRIMARY]", False: ""})
    labels = table["table"] + "  " + table["model"] + ": " + table["contrast"] + primary
    ax.set_yticks(range(len(table)), labels, fontsize=6)
    ax.axvline(0, color=style.REF_COLOR, lw=0.8)
    ax.invert_yaxis()
    ax.set_xlabel(
        "first − second in test loss (nats/token): < 0, the first is better; > 0, it costs"
    )
    ax.set_title("Every contrast of HYPOTHESES.md, paired by seed (second edition)")
    fig.captions += [
        f"{_interval_count(table)} ({CONFIDENCE:.0%} t over seeds' paired differences, "
        "unadjusted; Holm-adjusted p in books_tables.md); [PRIMARY], thick: the contrast named "
        "before the runs; grey dots: the seeds; grey "
        "band: the noise floor of the difference (a replicate at another thread count).",
        "A: tying's effect, tied − untied, at each init std and size. B: interactions, tying's "
        "effect at init 1.0 or d^-0.5 minus at 0.02 (per size), and at micro minus at nano (per "
        "init std). C: the other arms at init 1.0, T5 (tied, rescaled) − tied and untied with "
        "its embedding at 1.0 and head at d^-0.5 − untied and − tied.",
    ]
    return fig


@books_figure("books_fig3_lr", "second edition: the learning-rate check, per arm")
def fig_lr(runs: pd.DataFrame):
    """Final validation loss against the embedding-side multiplier (nano, seed 0), per arm;
    the chosen multiplier circled."""
    fig, axes = style.new_figure(1, len(books.STDS), 2.2, sharey=False)
    check = books.lr_check(runs)
    if check.empty:
        return style.nothing_to_draw(fig, "no lr-check runs (nano, seed 0)")
    chosen = books.chosen_lr(runs).set_index(["arm", "init_std"])["emb_lr_mult"]
    for ax, std in zip(axes[0], books.STDS, strict=True):
        for (a, s), losses in check[check.index.get_level_values(1) == std].iterrows():
            losses, best = losses.dropna(), chosen[(a, s)]
            label, color, marker, _ = ARMS[a]
            ax.plot(losses.index, losses.values, label=label, color=color, marker=marker)
            ax.plot(best, losses[best], marker="o", ms=10, mfc="none", color=color)
            if len(losses) > 1 and best in (losses.index.min(), losses.index.max()):
                _mark_edge(fig, ax, (a, s, best, losses), color)
        ax.set_xscale("log", base=2)
        ax.set_title(style.init_label(std))
        ax.set_xlabel("embedding-side lr multiplier m")
    axes[0][0].set_ylabel("final validation loss")
    style.legend(fig, None, 4)
    fig.drawn = books.lr_check_runs(runs)
    fig.captions.append(
        "lr = 1e-3 × (init std / 0.02) × m on wte, lm_head or the tied matrix; the body at "
        "1e-3. The lr check: nano, seed 0 alone. Chosen: the lowest final validation loss "
        "(circled), before any grid run"
        + (
            "; an arrow: the chosen m is its grid's edge (the best may lie beyond it)."
            if fig.flagged
            else "; no chosen m is at its grid's edge."
        )
    )
    return fig


def _mark_edge(fig, ax, choice: tuple, color: str) -> None:
    """An arrow from the chosen multiplier outward, where it is the first or last one run: the
    lowest loss may lie beyond the grid (HYPOTHESES.md: one step out)."""
    arm, std, best, losses = choice
    outward = -1 if best == losses.index.min() else 1
    ax.annotate(
        "",
        (best * 2 ** (0.6 * outward), losses[best]),
        (best, losses[best]),
        arrowprops={"arrowstyle": "->", "color": color, "lw": 1.2},
    )
    edge = "lowest" if outward < 0 else "highest"
    fig.flagged.append(f"{ARMS[arm][0]}, init {std}: m = {best:g} is the {edge} m run")


@books_figure("books_fig4_per_book", "second edition: the primary contrast on each held-out book")
def fig_per_book(runs: pd.DataFrame):
    """Tied − untied at init 0.02, per held-out book (dots), per seed (its own books), with the
    seed's mean: how much of the effect's spread is the text."""
    combination = dict(books.contrasts()[0][2])  # table A, init 0.02: the primary's cells
    effects = books.book_effects(runs, combination)
    models = [m for m in style.model_order(runs) if m in set(effects.get("model", []))]
    fig, axes = style.new_figure(1, max(len(models), 1), 2.2, sharey=True)
    if not models:
        return style.nothing_to_draw(fig, "no per-book losses of paired tied/untied runs at 0.02")
    for ax, model in zip(axes[0], models, strict=False):
        cell = effects[effects["model"] == model]
        for seed, group in cell.groupby("seed"):
            jitter = np.linspace(-0.3, 0.3, len(group))
            ax.plot(seed + jitter, group["effect"], ls="none", marker=".", ms=3, color="#777777")
            ax.plot([seed - 0.35, seed + 0.35], [group["effect"].mean()] * 2, color="black")
        ax.axhline(0, color=style.REF_COLOR, lw=0.8)
        ax.set_xticks(sorted(cell["seed"].unique()))
        ax.set_xlim(cell["seed"].min() - 0.6, cell["seed"].max() + 0.6)
        ax.set_title(model)
        ax.set_xlabel("seed (each holds out its own books)")
    axes[0][0].set_ylabel("tied − untied, init 0.02 (nats/token)")
    spread = books.text_variance(effects)
    fig.captions.append(
        f"Sign: {PAIRED_SIGN}. Per book: the mean over its evaluation windows. "
        + "; ".join(
            f"{r.model}: sd between books {r.sd_between_books:.3f}, between seed means "
            + (f"{r.sd_between_seed_means:.3f}" if r.seeds > 1 else "none (one seed)")
            + f" ({r.books} books)"
            for r in spread.itertuples()
        )
    )
    return fig


@style.table(
    "books_tables",
    "second edition: contrasts, count baselines, lr check, text variance (md)",
    needs=NEEDS,
    study=STUDY,
)
def write_book_tables(runs: pd.DataFrame) -> dict[str, str]:
    """``books_tables.md``: the contrasts (A, B, C; the primary marked), the count baselines and
    unseen share per size, the lr check and its choice, and the text's variance component."""
    contrasts = books.contrast_table(runs)
    primary = contrasts[contrasts["primary"]]
    effects = books.book_effects(runs, dict(books.contrasts()[0][2]))
    parts = [
        f"Runs: {style.describe_runs(first_replicates(books.grid(runs)))}.",
        f"## Contrasts ({_interval_count(contrasts[contrasts['n_seeds'] > 0])}, "
        f"{CONFIDENCE:.0%} t over seeds, "
        "unadjusted; p: the same paired t-test, p_holm: Holm-adjusted over these intervals; "
        "floor: |replicate − replicate 0| of the difference)",
        p_text(contrasts.drop(columns=["method"])).round(4).to_markdown(index=False),
        f"Primary contrast: {primary.iloc[0]['contrast']} at {primary.iloc[0]['model']}."
        if len(primary)
        else "Primary contrast: not yet run.",
        "## Hypothesis checks (H2: init 1.0 − d^-0.5 per head, predicted within 0.3; H5: arm − "
        "bigram, predicted < 0; beyond the 19 intervals)",
        books.hypothesis_checks(runs).drop(columns=["method"]).round(4).to_markdown(index=False),
        "## Count baselines on the same test windows (mean over seeds)",
        books.references(runs).round(4).to_markdown(),
        "## Learning-rate check (nano, seed 0, final validation loss)",
        books.chosen_lr(runs).round(4).to_markdown(index=False),
        "## Held-out books as a variance component (tied − untied at 0.02)",
        books.text_variance(effects).round(4).to_markdown(index=False)
        if not effects.empty
        else "no per-book losses yet",
    ]
    return {"books_tables.md": "\n\n".join(parts) + "\n"}
