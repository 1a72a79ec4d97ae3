"""The third edition's fitted curve (issue 40, experiments/sign_flip): tied − untied against
ln rho, an OLS polynomial over every pair of the ladder's points, its band, and where it crosses
0 (HYPOTHESES.md's H4)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats
from statsmodels.regression.linear_model import OLS

from tiedvsuntied.analysis.stats import CONFIDENCE, seed_summary
from tiedvsuntied.studies.sign_flip.analysis import (
    OFF_LADDER,
    POINT,
    PRIMARY_INIT,
    on_body_ladder,
    on_v_ladder,
    pairs,
    seed_slopes,
)


class Fit(NamedTuple):
    """tied − untied against ln rho: an OLS polynomial fitted to every pair's difference."""

    result: object  # statsmodels' RegressionResults
    degree: int
    log_rho: tuple[float, float]  # the range of the points: the fit says nothing outside it
    n_pairs: int


def design(log_rho, degree: int) -> np.ndarray:
    return np.vander(np.atleast_1d(np.asarray(log_rho, dtype=float)), degree + 1, increasing=True)


def fit(pairs_of_cell: pd.DataFrame, degree: int = 1) -> Fit | None:
    """OLS of each pair's difference on (1, ln rho[, ln² rho]); None with too few points (the
    points need more distinct rho than coefficients, and one degree of freedom left over)."""
    data = pairs_of_cell.dropna(subset=["diff", "log_rho"])
    if data["log_rho"].nunique() <= degree or len(data) <= degree + 1:
        return None
    result = OLS(data["diff"].to_numpy(), design(data["log_rho"], degree)).fit()
    span = (float(data["log_rho"].min()), float(data["log_rho"].max()))
    return Fit(result, degree, span, len(data))


def in_range(f: Fit, x: float) -> bool:
    """Whether ``x`` lies inside the fitted points' range (else the fit extrapolates)."""
    return bool(f.log_rho[0] <= np.log(x) <= f.log_rho[1])


def band(f: Fit, rho: Sequence[float]) -> pd.DataFrame:
    """The fitted effect at ``rho`` with its CONFIDENCE band (of the mean curve)."""
    x = np.log(np.asarray(rho, dtype=float))
    prediction = f.result.get_prediction(design(x, f.degree))
    low, high = prediction.conf_int(alpha=1 - CONFIDENCE).T
    return pd.DataFrame({"rho": rho, "mean": prediction.predicted_mean, "low": low, "high": high})


def _roots(f: Fit) -> list[float]:
    """The real roots of the fitted polynomial inside the points' range of ln rho."""
    coefs = np.asarray(f.result.params)[::-1]  # numpy's roots: highest power first
    low, high = f.log_rho
    return sorted(r.real for r in np.roots(coefs) if abs(r.imag) < 1e-12 and low <= r.real <= high)


def crossover(f: Fit | None) -> dict:
    """Where the fitted curve crosses 0 inside the points' range: rho with a CONFIDENCE interval
    by the delta method (d x0 / d beta = −(1, x0, x0²) / f'(x0), t with the fit's residual
    degrees of freedom), or ``note`` saying there is none in range (or no fit)."""
    none = {"rho": np.nan, "low": np.nan, "high": np.nan, "note": ""}
    if f is None:
        return none | {"note": "no fit (too few ladder points)"}
    roots = _roots(f)
    if not roots:
        lo, hi = np.exp(f.log_rho)
        return none | {"note": f"none in range (ρ {lo:.2f}–{hi:.2f})"}
    x0 = roots[0]
    slope = sum(k * b * x0 ** (k - 1) for k, b in enumerate(f.result.params) if k)
    gradient = -design(x0, f.degree)[0] / slope
    se = float(np.sqrt(gradient @ np.asarray(f.result.cov_params()) @ gradient))
    t = scipy_stats.t.ppf((1 + CONFIDENCE) / 2, f.result.df_resid)
    note = f"{len(roots)} crossings in range: the first" if len(roots) > 1 else ""
    return {
        "rho": np.exp(x0),
        "low": np.exp(x0 - t * se),
        "high": np.exp(x0 + t * se),
        "note": note,
    }


def fits(runs: pd.DataFrame, degree: int = 1) -> dict[str, tuple[Fit | None, dict]]:
    """Per init std: the fitted curve over every pair of the ladder's points and its crossover."""
    both = pairs(runs)
    both = both[both["way_t"] != OFF_LADDER]  # the ladder's own points: one set-up, one tokenizer
    out = {}
    for std, cell in both.groupby("init_std", sort=True):
        f = fit(cell, degree)
        out[std] = (f, crossover(f))
    return out


# ----------------------------------------------------------------------------- H5: rho, not V
H5_COLUMNS = [
    *["n_layer", "n_embd", "vocab_size", "body", "rho", "n_seeds", "diff", "low", "high"],
    *["fit", "fit_low", "fit_high", "inside", "off", "off_low", "off_high", "in_range"],
]


def body_against_v(runs: pd.DataFrame) -> pd.DataFrame:
    """HYPOTHESES.md's H5 (rho, not V): each d^-0.5 cell of another body than the V-ladder's
    beside the V-ladder's own fit (OLS on ln rho over its pairs) at the cell's rho. ``inside``:
    the cell's mean lies in the fit's CONFIDENCE band (H5 as committed); ``off``: the cell's mean
    − the fit, with a t-interval of both standard errors at the cell's seeds − 1 degrees of
    freedom (conservative: 95-99% coverage simulated in the tests); ``in_range``: the cell's rho
    lies inside the V-ladder's (else the fit extrapolates)."""
    both = pairs(runs).rename(columns={"way_t": "way"})
    v_ladder = on_v_ladder(both)
    f = fit(v_ladder)
    if f is None:
        return pd.DataFrame(columns=H5_COLUMNS)
    others = both[both["init_std"].eq(PRIMARY_INIT) & both["way"].isin(["body", "both"])]
    others = others[~others["body_t"].isin(v_ladder["body_t"])]
    rows = [_against(f, cell) for _, cell in others.groupby(POINT, sort=True)]
    return pd.DataFrame(rows, columns=H5_COLUMNS).sort_values("rho", ignore_index=True)


def _against(f: Fit, cell: pd.DataFrame, on: str = "rho") -> dict:
    """One cell of H5's table (:func:`body_against_v`): the cell beside ``f`` at the cell's value
    of ``on`` (a key of AXES; ``f`` was fitted on its log)."""
    x, first = float(cell[f"{on}_t"].mean()), cell.iloc[0]
    own = seed_summary(cell.set_index("seed")["diff"])
    at = f.result.get_prediction(design(np.log(x), f.degree))
    fit_low, fit_high = at.conf_int(alpha=1 - CONFIDENCE)[0]
    fitted, n = float(at.predicted_mean[0]), own["n_seeds"]
    t = scipy_stats.t.ppf((1 + CONFIDENCE) / 2, n - 1) if n > 1 else np.nan
    half = t * np.hypot(cell["diff"].sem(), at.se_mean[0])  # the cell's and the fit's se
    return {
        **{c: first[c] for c in ["n_layer", "n_embd", "vocab_size"]},
        "body": first["body_t"],
        on: x,
        **{k: own[k] for k in ("n_seeds", "diff", "low", "high")},
        "fit": fitted,
        "fit_low": fit_low,
        "fit_high": fit_high,
        "inside": bool(fit_low <= own["diff"] <= fit_high),
        "off": own["diff"] - fitted,
        "off_low": own["diff"] - fitted - half,
        "off_high": own["diff"] - fitted + half,
        "in_range": in_range(f, x),
    }


# ------------------------------------------------- exploratory: each ladder's own slope (not H5)
# what a ladder's points may be read against: each pair's tied-model value, on a log axis
AXES = {"rho": "ρ", "tokens_per_param": "tokens per parameter", "params_total": "parameters"}
SLOPE_COLUMNS = [
    "axis",
    "ladder",
    "held",
    "points",
    "low_end",
    "high_end",
    "n_seeds",
    "diff",
    "low",
    "high",
    "p",
    "seed_diffs",
]


def _ladders(runs: pd.DataFrame, on: str) -> dict[str, pd.DataFrame]:
    """Each ladder's pairs at d^-0.5 (``V``: micro's vocabularies; ``body``: the bodies at
    V = 8,192), with ``log_x``, the log of ``on`` (a key of AXES)."""
    both = pairs(runs).rename(columns={"way_t": "way"})
    both = both.assign(log_x=np.log(both[f"{on}_t"]))
    return {"V": on_v_ladder(both), "body": on_body_ladder(both)}


def ladder_fits(runs: pd.DataFrame, on: str = "rho") -> dict[str, Fit | None]:
    """Each ladder's own OLS fit on the log of ``on`` (a key of AXES), to draw beside the
    committed fit over them all; its ``log_rho`` span is then that axis's."""
    ladders = _ladders(runs, on)
    return {name: fit(ladder.assign(log_rho=ladder["log_x"])) for name, ladder in ladders.items()}


def ladder_slopes(runs: pd.DataFrame, on: str = "rho") -> pd.DataFrame:
    """Exploratory, not committed in HYPOTHESES.md: each seed's slope of tied − untied on the log
    of ``on`` (a key of AXES) along the V-ladder and along the body ladder
    (:func:`sign_flip.seed_slopes`), and per seed their difference, body − V (0 where that axis
    alone sets the effect; on rho: H5 asked of the slopes). t over seeds, unadjusted, outside
    Holm's family."""
    slopes, rows = {}, []
    for name, ladder in _ladders(runs, on).items():
        slopes[name], x = seed_slopes(ladder, "log_x")
        if not len(slopes[name]):
            continue
        held = ladder["body_t"].iloc[0] if name == "V" else f"V = {ladder['vocab_size'].iloc[0]:,}"
        span = {"points": len(x), "low_end": np.exp(x.min()), "high_end": np.exp(x.max())}
        rows.append(
            {"axis": on, "ladder": name, "held": held, **span, **seed_summary(slopes[name])}
        )
    if all(len(s) for s in slopes.values()):
        gap = (slopes["body"] - slopes["V"]).dropna()
        rows.append({"axis": on, "ladder": "body − V", "held": "per seed", **seed_summary(gap)})
    return pd.DataFrame(rows, columns=SLOPE_COLUMNS)


HELD_OUT_COLUMNS = ["axis", "ladder", "at", *H5_COLUMNS[H5_COLUMNS.index("n_seeds") :]]


def held_out(runs: pd.DataFrame, n_embd: int, n_layer: int, vocab_size: int) -> pd.DataFrame:
    """Exploratory: one ladder point predicted from all the others, by each ladder's own fit
    (:func:`ladder_fits`) on each axis of AXES, beside what the point's own seeds measured (H5's
    columns, :func:`_against`; no seeds yet: NaN). A reading whose prediction ``off``'s interval
    excludes 0 is contradicted by the point."""
    where = {"n_embd": n_embd, "n_layer": n_layer, "vocab_size": vocab_size}
    mask = np.logical_and.reduce([runs[k].eq(v) for k, v in where.items()])
    if not mask.any():
        points = sorted({tuple(map(int, p)) for p in runs[list(where)].dropna().to_numpy()})
        raise ValueError(f"no runs at {where}; (n_embd, n_layer, vocab_size) ran: {points}")
    cell = pairs(runs[mask])
    cell = cell[cell["init_std"].eq(PRIMARY_INIT)]
    if cell.empty:
        raise ValueError(f"no tied/untied pair at {where}: nothing to hold out")
    rows = []
    for on in AXES:
        for name, f in ladder_fits(runs[~mask], on).items():
            if f is not None:
                row = _against(f, cell, on)
                rows.append({"axis": on, "ladder": name, "at": row.pop(on), **row})
    return pd.DataFrame(rows, columns=HELD_OUT_COLUMNS)


PREDICT_COLUMNS = ["axis", "ladder", "at", "fit", "fit_low", "fit_high", "in_range"]


def predict(runs: pd.DataFrame, at: dict[str, float]) -> pd.DataFrame:
    """Exploratory: a point not run yet, read off each ladder's own line (:func:`ladder_fits`)
    on each axis of AXES at its value there (``at``: axis -> value), with the line's CONFIDENCE
    band; ``in_range``: the value lies inside the ladder's points (else it extrapolates)."""
    rows = []
    for on in AXES:
        for name, f in ladder_fits(runs, on).items():
            if f is None:
                continue
            line = band(f, [at[on]]).iloc[0]
            fitted = {"fit": line["mean"], "fit_low": line["low"], "fit_high": line["high"]}
            rows.append(
                {
                    "axis": on,
                    "ladder": name,
                    "at": at[on],
                    **fitted,
                    "in_range": in_range(f, at[on]),
                }
            )
    return pd.DataFrame(rows, columns=PREDICT_COLUMNS)
