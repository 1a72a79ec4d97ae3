"""Embedding-geometry probes: scalars for the logs, per-token arrays for figures.

E is the token embedding (wte, V x d), H the head (lm_head, V x d; H is E when tied).
- row norms of E and H (do they track token frequency?);
- off-diagonal cosines of the row-normalised E·Eᵀ (is it close to the identity?), on a FIXED
  sample of rows, because the full V x V matrix is too big; the sample depends on V only;
- untied: the cosine between each token's input and output rows (do they drift apart?).

No probe touches the global RNG or autograd. The gradient split lives in the model
(`model(..., grad_split=dict)`), since it needs the backward pass.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch
from torch.nn import functional as F

SAMPLE_ROWS = 2048      # rows of E sampled for the off-diagonal cosines
SAMPLE_SEED = 0         # the sample is a function of V alone: the same rows at every evaluation
MAX_OFFDIAG = 100_000   # off-diagonal cosines kept in the arrays (probes/step_*.npz)


def _matrices(model) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(E, H) as detached fp32; H is None when tied. Accepts compiled / DDP-wrapped models."""
    model = getattr(model, "_orig_mod", model)
    model = getattr(model, "module", model)
    e, h = model.transformer.wte.weight, model.lm_head.weight
    tied = h is e
    return e.detach().float(), (None if tied else h.detach().float())


def sample_rows(n_rows: int, k: int = SAMPLE_ROWS, seed: int = SAMPLE_SEED) -> torch.Tensor:
    """A fixed, sorted sample of min(k, n_rows) row indices, from a private generator."""
    if n_rows <= k:
        return torch.arange(n_rows)
    g = torch.Generator().manual_seed(seed)
    return torch.randperm(n_rows, generator=g)[:k].sort().values


def _cosine_gram(w: torch.Tensor, rows: torch.Tensor | None) -> torch.Tensor:
    """Row-normalised W[rows]·W[rows]ᵀ: the cosines between the sampled rows."""
    x = w if rows is None else w[rows.to(w.device)]
    x = F.normalize(x.float(), dim=1)  # a zero row has cosine 0 with everything
    return x @ x.t()


@lru_cache(maxsize=8)
def _kept_pairs(n: int, k: int = MAX_OFFDIAG) -> tuple[torch.Tensor, torch.Tensor]:
    """A fixed sample of at most k pairs i < j of n rows (computed once per n)."""
    i, j = torch.triu_indices(n, n, offset=1)
    if len(i) > k:
        keep = torch.randperm(len(i), generator=torch.Generator().manual_seed(SAMPLE_SEED))[:k].sort().values
        i, j = i[keep], j[keep]
    return i, j


def _cos_stats(prefix: str, gram: torch.Tensor) -> dict[str, float]:
    """Statistics of the off-diagonal entries, straight from the (symmetric) matrix."""
    n = len(gram)
    off = gram.clone().fill_diagonal_(0.0)
    count = n * (n - 1)
    absolute = off.abs()
    return {
        f"probe/{prefix}_offdiag_cos_mean": (off.sum() / count).item(),
        f"probe/{prefix}_offdiag_cos_abs_mean": (absolute.sum() / count).item(),
        f"probe/{prefix}_offdiag_cos_rms": (torch.linalg.vector_norm(off) / count ** 0.5).item(),
        f"probe/{prefix}_offdiag_cos_abs_max": absolute.max().item(),
    }


@torch.no_grad()
def probe(model) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    """(scalars, arrays) of one evaluation, from one pass.

    scalars (metrics.jsonl, prefixed "probe/"): emb_norm_{mean,std}, head_norm_{mean,std} (tied:
    emb's), emb_offdiag_cos_{mean,abs_mean,rms,abs_max} on the fixed row sample; untied also
    head_offdiag_cos_*, in_out_cos_{mean,std}. arrays (probes/step_*.npz, float32): emb_norm (V),
    head_norm (V), in_out_cos (V, untied), offdiag_cos (at most MAX_OFFDIAG cosines of the
    sample, the same pairs every time)."""
    e, h = _matrices(model)
    rows = sample_rows(e.size(0))
    emb_norm = torch.linalg.vector_norm(e, dim=1)
    head_norm = emb_norm if h is None else torch.linalg.vector_norm(h, dim=1)
    emb_gram = _cosine_gram(e, rows)

    scalars = {
        "probe/emb_norm_mean": emb_norm.mean().item(),
        "probe/emb_norm_std": emb_norm.std().item(),
        "probe/head_norm_mean": head_norm.mean().item(),
        "probe/head_norm_std": head_norm.std().item(),
        **_cos_stats("emb", emb_gram),
    }
    arrays = {
        "emb_norm": emb_norm.cpu().numpy().astype(np.float32),
        "head_norm": head_norm.cpu().numpy().astype(np.float32),
    }
    if h is not None:
        # cos(e_v, h_v) per token, reusing the norms; einsum avoids a (V, d) temporary
        in_out = torch.einsum("vd,vd->v", e, h) / (emb_norm * head_norm).clamp_min(1e-12)
        scalars.update(_cos_stats("head", _cosine_gram(h, rows)))
        scalars["probe/in_out_cos_mean"] = in_out.mean().item()
        scalars["probe/in_out_cos_std"] = in_out.std().item()
        arrays["in_out_cos"] = in_out.cpu().numpy().astype(np.float32)
    i, j = _kept_pairs(len(emb_gram))
    arrays["offdiag_cos"] = emb_gram[i.to(emb_gram.device), j.to(emb_gram.device)].cpu().numpy().astype(np.float32)
    return scalars, arrays
