"""The initial loss in theory (i.i.d. Gaussian logits; tied: the input token's own logit) and
the parameter and FLOP counts of every named size."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy import integrate, stats

from tiedvsuntied.model.accounting import count_parameters_for, flops_per_token
from tiedvsuntied.model.config import ModelConfig
from tiedvsuntied.presets import presets

# logit vectors: with the control variate, standard error < 0.1% (tests/unit/test_theory.py)
THEORY_DRAWS = 256


@functools.lru_cache(maxsize=4)
def expected_max_normal(n: int) -> float:
    """E[max of n i.i.d. standard normals], by quadrature: sigma * this is E[logsumexp] at large
    sigma (sqrt(2 ln n) is its limit, and 10% high at n = 50257)."""

    def density(x):  # x times the density of the largest of n
        return x * n * stats.norm.pdf(x) * np.exp((n - 1) * stats.norm.logcdf(x))

    return integrate.quad(density, -12, 12, points=[0, 2, 3, 4, 5], limit=200)[0]


@functools.lru_cache(maxsize=4)
def _logit_draws(vocab_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Fixed standard-normal logit vectors as (each minus its max, its max)."""
    g = np.random.default_rng(0).standard_normal((THEORY_DRAWS, vocab_size), dtype=np.float32)
    top = g.max(axis=1)
    return g - top[:, None], top.astype(np.float64)


def gaussian_logit_loss(sigma: float | Sequence[float], vocab_size: int, *, return_se=False):
    """Expected loss E[logsumexp(z)] when the V logits are i.i.d. N(0, sigma^2) and independent of
    the target. Monte Carlo over THEORY_DRAWS fixed logit vectors (the same for every sigma: a
    smooth curve), with the largest logit as control variate (its mean sigma * E[max] is known
    exactly), which removes most of the variance where the largest logits dominate."""
    d, top = _logit_draws(int(vocab_size))
    e_max, est, se = expected_max_normal(int(vocab_size)), [], []
    for s in np.atleast_1d(np.asarray(sigma, dtype=float)):
        lse = s * top + np.log(np.exp(np.float32(s) * d).sum(axis=1, dtype=np.float64))
        c = s * (top - e_max)
        v = lse - (np.cov(lse, c)[0, 1] / c.var() * c if c.var() > 0 else 0.0)
        est.append(v.mean())
        se.append(v.std(ddof=1) / math.sqrt(len(v)))
    return (np.array(est), np.array(se)) if return_se else np.array(est)


def gaussian_logit_loss_approx(sigma: float | Sequence[float], vocab_size: int) -> np.ndarray:
    """The two regimes of :func:`gaussian_logit_loss`: ln V + sigma^2/2 while the bulk of the logits
    dominates (up to sigma_c = sqrt(2 ln V)), sigma * E[max of V normals] once the largest does."""
    sig, ln_v = np.asarray(sigma, dtype=float), math.log(vocab_size)
    return np.where(
        sig <= math.sqrt(2 * ln_v), ln_v + sig**2 / 2, sig * expected_max_normal(int(vocab_size))
    )


def tied_initial_loss(self_logit, sigma, vocab_size: int, self_target_frac=0.0) -> np.ndarray:
    """Tied, the input token's own logit a = h·e_x is not one of V independent logits: after the
    final LayerNorm it is about sqrt(d)·|e_x|·cos(h, e_x), i.e. about std·d when the embedding
    dominates the residual stream. With G = E[logsumexp of V−1 N(0, sigma^2) logits], the loss is
    logaddexp(a, G) where the target is another token (its logit has mean 0), and softplus(G − a)
    where it is the input token itself (a fraction ``self_target_frac`` of positions: 2.4% of
    Tiny Shakespeare's). All from the logged step-0 a, sigma and that fraction."""
    a, p = (
        np.asarray(self_logit, dtype=float),
        np.nan_to_num(np.asarray(self_target_frac, dtype=float)),
    )
    g = gaussian_logit_loss(sigma, vocab_size - 1)
    return (1 - p) * np.logaddexp(a, g) + p * np.logaddexp(0.0, g - a)


def initial_loss_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per run: measured initial loss beside ln V and the predictions from its sigma: ``predicted``
    (i.i.d. Gaussian logits), ``predicted_tied`` (tied runs with ``init_self_logit``),
    ``predicted_approx``; ``excess`` = measured − the run's own prediction."""
    run = ["run_id", "name", "tie", "init_std", "variant", "model", "seed", "vocab_size"]
    init = ["ln_vocab", "init_logit_std", "init_self_logit", "init_self_target_frac"]
    t = runs[[*run, *init, "init_val_loss"]].assign(
        predicted=np.nan, predicted_approx=np.nan, predicted_tied=np.nan
    )
    for vocab, g in t[t["init_logit_std"].notna()].groupby("vocab_size"):  # V unknown: left out
        sigma = g["init_logit_std"].to_numpy(float)
        t.loc[g.index, "predicted"] = gaussian_logit_loss(sigma, int(vocab))
        t.loc[g.index, "predicted_approx"] = gaussian_logit_loss_approx(sigma, int(vocab))
        tied = g[g["tie"].eq(True) & g["init_self_logit"].notna()]
        if len(tied):
            logit_std, self_logit, frac = (tied[c].to_numpy(float) for c in init[1:])
            t.loc[tied.index, "predicted_tied"] = tied_initial_loss(
                self_logit, logit_std, int(vocab), frac
            )
    own = t["predicted_tied"].where(t["tie"].eq(True), t["predicted"])
    return t.assign(excess=t["init_val_loss"] - own)


def parameter_table(vocab_size: int = 50257) -> pd.DataFrame:
    """Every size in ``conf/model/*.yaml``, smallest first: shape, parameters tied and untied
    (unique: a tied matrix counts once), and training GFLOPs per token (the same tied or not)."""
    rows = []
    for preset in presets("model").values():
        cfg = ModelConfig(**{**preset, "vocab_size": vocab_size})
        tied, untied = count_parameters_for(cfg, True), count_parameters_for(cfg, False)
        rows.append(
            {
                "size": cfg.name,
                **{k: getattr(cfg, k) for k in ("n_layer", "n_head", "n_embd", "block_size")},
                "total (tied)": tied["total"],
                "total (untied)": untied["total"],
                "non-embedding": tied["non_embedding"],
                "embedding (wte)": tied["embedding"],
                "position (wpe)": tied["position"],
                "head (untied)": untied["head"],
                "GFLOPs/token": round(flops_per_token(cfg) / 1e9, 3),
            }
        )
    return pd.DataFrame(rows).sort_values("total (tied)", ignore_index=True)
