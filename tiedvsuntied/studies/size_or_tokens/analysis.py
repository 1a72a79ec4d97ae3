"""The fourth edition's exploratory reading at equal total parameters (issue 55, item 3;
HYPOTHESES.md, "Exploratory ... equal total parameters"): should a practitioner tie and spend the
saved V·d on the body, or untie? Each arm's test bits per byte against its OWN total parameter
count (tied counts the V·d table once, untied twice: each run's recorded ``params_total``, never
recomputed), over every cell of the third edition (experiments/sign_flip/results) and this one.

Exploratory and unadjusted: read, not tested; not in HYPOTHESES.md's Holm family. The two arms'
fits are made apart and their interval treats them as independent, though tied and untied of
one seed share its held-out books (so the interval errs wide)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats
from statsmodels.regression.linear_model import OLS
from statsmodels.tools.tools import add_constant

from tiedvsuntied.analysis.arms import arms_of
from tiedvsuntied.analysis.stats import CONFIDENCE, first_replicates, seed_summary

SWEEPS = ("sign_flip", "size_or_tokens")  # the third edition's and this one's runs
ARMS = ("tied", "untied")  # untied at the shared multipliers (not untied_own)
PRIMARY_INIT = "inv_sqrt_d"  # the init std both editions' tied/untied cells share
CELL = ["sweep", "n_layer", "n_head", "n_embd", "block_size", "vocab_size", "init_std", "max_steps"]
SETTING = ["lr", "emb_lr_mult", "head_lr_mult", "variant"]  # what an lr check varies in an arm
VALUE = "test_bpb"
MB = 1_000_000
MIN_CELLS = 3  # an arm's line is fitted over at least this many cells
LADDERS = ("V", "body", "all")  # a ladder's cells (its own and the shared point); all: pooled
ROW_COLUMNS = [*CELL, "arm", "ladder", "budget_mb", "params", "bpb", "n_seeds", "rho"]
ROW_COLUMNS += ["tokens_per_param", "label"]
CROSS_COLUMNS = ["budget_mb", "ladder", "n_cells_tied", "n_cells_untied", "params", "low", "high"]
CROSS_COLUMNS += ["slope_tied", "slope_untied", "tied_lower_above", "note"]
MATCH_COLUMNS = ["budget_mb", "params", "label_tied", "label_untied", "n_seeds", "diff", "low"]
MATCH_COLUMNS += ["high", "p"]
NOT_LADDER = "no tied/untied runs of the third or fourth edition (sign_flip, size_or_tokens sweeps)"


def has_cells(runs: pd.DataFrame) -> bool:
    """Whether any run is of either edition's sweeps."""
    return "sweep" in runs and runs["sweep"].astype(str).str.startswith(SWEEPS).any()


def _ladder_of(cells: pd.DataFrame) -> pd.Series:
    """Per cell (one edition, one budget): V where its body has other V's, body where its V has
    other bodies, both, or alone."""
    body = ["sweep", "budget_mb", "n_layer", "n_head", "n_embd", "block_size"]
    by_v = cells.groupby(body)["vocab_size"].transform("nunique") > 1
    by_body = cells.groupby(["sweep", "budget_mb", "vocab_size"])["n_embd"].transform("size") > 1
    ways = {(True, False): "V", (False, True): "body", (True, True): "both"}
    return pd.Series(
        [ways.get((v, b), "alone") for v, b in zip(by_v, by_body, strict=True)], index=cells.index
    )


def chosen(runs: pd.DataFrame, sweeps=SWEEPS, arms=ARMS) -> pd.DataFrame:
    """The finished replicate-0 runs of ``arms`` (tied and untied) at the primary init std in
    ``sweeps`` (either edition's), at each (cell, arm)'s chosen setting: the one of the lowest
    final validation loss at the cell's lowest seed (the lr check's other settings left out; the
    third edition's rule, sign_flip.analysis.grid)."""
    done = first_replicates(runs[runs["status"].eq("finished")])
    done = done[done["sweep"].astype(str).str.startswith(sweeps)]
    done = done.assign(arm=arms_of(done))
    done = done[done["arm"].isin(arms) & done["init_std"].astype(str).eq(PRIMARY_INIT)]
    done = _latest_edition(done, sweeps)
    setting = done[SETTING].astype("string").fillna("").agg("|".join, axis=1)
    done, keys = done.assign(setting=setting), [*CELL, "arm"]
    lowest = done[done["seed"] == done.groupby(keys)["seed"].transform("min")]
    pick = lowest.sort_values("final_val_loss").drop_duplicates(keys)[[*keys, "setting"]]
    return done.merge(pick, on=[*keys, "setting"])


def _latest_edition(done: pd.DataFrame, sweeps) -> pd.DataFrame:
    """Where both editions ran a cell (the fourth's piece a0 re-ran the third's 10 MB cells under
    its pinned bf16), the later edition's runs alone: one cell is one point, never fitted, drawn
    or matched twice."""
    edition = (
        done["sweep"]
        .astype(str)
        .map(lambda s: max(i for i, prefix in enumerate(sweeps) if s.startswith(prefix)))
    )
    same = [*[c for c in CELL if c != "sweep"], "arm"]
    return done[edition.eq(edition.groupby([done[c] for c in same]).transform("max"))]


def equal_params(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per (cell, arm) of :func:`chosen`'s runs (ROW_COLUMNS): the arm's own total
    parameters (its runs' recorded ``params_total``), its mean test bpb over seeds, n seeds, rho,
    tokens per parameter, the text budget (max_steps; budget_mb: the bytes read, in MB, rounded)
    and the ladder the cell is on. Exploratory, unadjusted."""
    done = chosen(runs)
    done = done.assign(budget_mb=(done["train_bytes"] / MB).round().astype(int))
    agg = {"params": ("params_total", "mean"), "bpb": (VALUE, "mean"), "rho": ("rho", "mean")}
    agg |= {"n_seeds": ("seed", "nunique"), "tokens_per_param": ("tokens_per_param", "mean")}
    keys = [*CELL, "budget_mb", "arm"]
    rows = done.groupby(keys, as_index=False).agg(**agg)
    cells = rows[[*CELL, "budget_mb"]].drop_duplicates()
    cells = cells.assign(ladder=_ladder_of(cells))
    rows = rows.merge(cells, on=[*CELL, "budget_mb"])
    label = [
        f"{_body(r)}/V={r.vocab_size // 1024}k" if r.vocab_size >= 1024 else f"V={r.vocab_size}"
        for r in rows.itertuples()
    ]
    return rows.assign(label=label)[ROW_COLUMNS].sort_values(["budget_mb", "arm", "params"])


def _body(row) -> str:
    return f"{int(row.n_embd)}×{int(row.n_layer)}"


def on_ladder(rows: pd.DataFrame, ladder: str) -> pd.DataFrame:
    """The rows on ``ladder`` (its own and the point of both ladders); 'all': every row."""
    return rows if ladder == "all" else rows[rows["ladder"].isin([ladder, "both"])]


def fit(runs: pd.DataFrame):
    """OLS of each run's test bpb on (1, ln params_total) over one arm's runs; None under
    MIN_CELLS distinct parameter counts."""
    if runs["params_total"].nunique() < MIN_CELLS:
        return None
    x = add_constant(np.log(runs["params_total"].to_numpy(dtype=float)), has_constant="add")
    return OLS(runs[VALUE].to_numpy(dtype=float), x).fit()


def cross(tied, untied, span: tuple[float, float]) -> dict:
    """Where two fitted lines (statsmodels results on (1, ln params)) cross: the parameter count
    with a CONFIDENCE interval by the delta method (var x* = (var ŷ_t(x*) + var ŷ_u(x*)) / Δb²,
    the fits independent, t with the smaller residual df), if x* lies in ``span`` (ln params
    where both arms have data), else ``note`` says none in range."""
    (a_t, b_t), (a_u, b_u) = tied.params, untied.params
    out = {"params": np.nan, "low": np.nan, "high": np.nan, "slope_tied": b_t, "slope_untied": b_u}
    out["tied_lower_above"] = bool(b_t < b_u)  # past the crossover, the steeper line is lower
    lo, hi = np.exp(span)
    if b_t == b_u:
        return out | {"note": "parallel lines: none"}
    x = -(a_t - a_u) / (b_t - b_u)
    if not span[0] <= x <= span[1]:
        where = f"at {np.exp(x):,.3g}" if np.isfinite(x) else "nowhere"
        return out | {"note": f"none in range {lo:,.3g}–{hi:,.3g} (lines meet {where})"}
    at = np.array([[1.0, x]])
    var = sum(float(f.get_prediction(at).se_mean[0]) ** 2 for f in (tied, untied))
    half = scipy_stats.t.ppf(0.5 + CONFIDENCE / 2, min(tied.df_resid, untied.df_resid))
    half *= np.sqrt(var) / abs(b_t - b_u)
    return out | {
        "params": np.exp(x),
        "low": np.exp(x - half),
        "high": np.exp(x + half),
        "note": f"in range {lo:,.3g}–{hi:,.3g}",
    }


def crossovers(runs: pd.DataFrame) -> pd.DataFrame:
    """Per budget and ladder (LADDERS; 'all' pools both, the practitioner's question), whether
    tied's and untied's lines of test bpb on ln(own parameters) cross inside the data
    (CROSS_COLUMNS). Exploratory, unadjusted."""
    out = []
    for (budget, ladder), group in by_ladder(ladder_runs(runs)):
        arms = {a: group[group["arm"] == a] for a in ARMS}
        fits = {a: fit(arms[a]) for a in ARMS}
        n = {f"n_cells_{a}": arms[a]["params_total"].nunique() for a in ARMS}
        row = {"budget_mb": budget, "ladder": ladder, **n}
        if None in fits.values():
            out.append(row | {"note": f"no fit (an arm has < {MIN_CELLS} cells)"})
            continue
        logs = {a: np.log(arms[a]["params_total"].astype(float)) for a in ARMS}
        span = (max(s.min() for s in logs.values()), min(s.max() for s in logs.values()))
        out.append(row | cross(fits["tied"], fits["untied"], span))
    return pd.DataFrame(out, columns=CROSS_COLUMNS)


def ladder_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """:func:`chosen`'s runs with their cell's ``ladder`` and ``budget_mb``."""
    rows = equal_params(runs)[[*CELL, "arm", "ladder", "budget_mb"]]
    return chosen(runs).merge(rows, on=[*CELL, "arm"])


def by_ladder(done: pd.DataFrame):
    """((budget_mb, ladder), runs) for each budget and LADDERS' each ladder with runs."""
    for budget, runs in done.groupby("budget_mb"):
        for ladder in LADDERS:
            group = on_ladder(runs, ladder)
            if not group.empty:
                yield (budget, ladder), group


def matched(runs: pd.DataFrame) -> pd.DataFrame:
    """The tied and untied cells of one budget with the same total parameters (MATCH_COLUMNS;
    on the V-ladder tied at 2V meets untied at V): tied − untied test bpb paired by seed (a
    seed holds out the same books in every cell), its t-interval over seeds. Exploratory,
    unadjusted."""
    done = ladder_runs(runs)
    tied, untied = (done[done["arm"] == a] for a in ARMS)
    both = tied.merge(untied, on=["budget_mb", "params_total", "seed"], suffixes=("_t", "_u"))
    names = equal_params(runs).set_index([*CELL, "arm"])["label"]
    cells = {s: [f"{c}_{s}" for c in CELL] for s in "tu"}
    out = []
    for (budget, params), pairs in both.groupby(["budget_mb", "params_total"]):
        for key, pair in pairs.groupby([*cells["t"], *cells["u"]]):
            diff = (pair[f"{VALUE}_t"] - pair[f"{VALUE}_u"]).set_axis(pair["seed"])
            label_t = names[(*key[: len(CELL)], "tied")]
            label_u = names[(*key[len(CELL) :], "untied")]
            row = {"budget_mb": budget, "params": params, "label_tied": label_t}
            out.append(row | {"label_untied": label_u, **seed_summary(diff, "paired differences")})
    return pd.DataFrame(out, columns=MATCH_COLUMNS)
