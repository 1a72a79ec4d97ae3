"""Embedding-geometry probes per vocabulary stratum: scalars for the logs, per-token arrays for
figures (the keys and their meaning: docs/model.md#probes). E is the token embedding (wte,
V x d), H the head (lm_head; E when tied).

Why strata: a token never seen in training behaves differently from one seen. Untied, its
embedding row never gets a gradient and stays at init; tied, the softmax pushes every unseen
row the same way and they collapse onto one direction, and a uniform sample of a 50k BPE
vocabulary of which a small corpus uses ~20% would mostly measure vocabulary coverage. No probe
touches the global RNG or autograd.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch
from torch.nn import functional as F

from tiedvsuntied.results.metrics import DRIFT_, PROBE_

STRATA = ("unseen", "rare", "frequent")
SAMPLE_ROWS = 1024  # rows per stratum for the cosines: the same rows at every evaluation
SAMPLE_SEED = 0
MAX_PAIRS = 20_000  # sampled cosines kept per stratum in probes/step_*.npz


def vocab_strata(freq: np.ndarray) -> dict[str, np.ndarray]:
    """Token ids per stratum, sorted: unseen (count 0), and the seen tokens ordered by count
    (ties by id) split into a "frequent" and a "rare" half."""
    freq = np.asarray(freq)
    seen = np.flatnonzero(freq > 0)
    by_count = seen[np.argsort(-freq[seen], kind="stable")]
    half = len(by_count) // 2
    return {
        "unseen": np.flatnonzero(freq == 0),
        "rare": np.sort(by_count[half:]),
        "frequent": np.sort(by_count[:half]),
    }


def sample_rows(ids: np.ndarray, k: int = SAMPLE_ROWS, seed: int = SAMPLE_SEED) -> np.ndarray:
    """A fixed, sorted sample of min(k, len(ids)) of ``ids``, from a private generator."""
    if len(ids) <= k:
        return np.asarray(ids, dtype=np.int64)
    return np.sort(np.random.default_rng(seed).choice(ids, size=k, replace=False)).astype(np.int64)


@lru_cache(maxsize=16)
def _kept_pairs(n: int, k: int = MAX_PAIRS) -> tuple[torch.Tensor, torch.Tensor]:
    """A fixed sample of at most k pairs i < j of n rows (computed once per n)."""
    i, j = torch.triu_indices(n, n, offset=1)
    if len(i) > k:
        generator = torch.Generator().manual_seed(SAMPLE_SEED)
        keep = torch.randperm(len(i), generator=generator)[:k].sort().values
        i, j = i[keep], j[keep]
    return i, j


def _cosines(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Cosine matrices of the rows of x, raw and after subtracting their mean row; the
    diagonal is zeroed so sums over the matrix are sums over the off-diagonal pairs."""
    raw = F.normalize(x, dim=1)  # a zero row has cosine 0 with everything
    centred = F.normalize(x - x.mean(0), dim=1)
    return (raw @ raw.t()).fill_diagonal_(0.0), (centred @ centred.t()).fill_diagonal_(0.0)


@torch.no_grad()
def probe(model, freq: np.ndarray) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    """(scalars, arrays) of one evaluation (docs/model.md#probes); ``freq``: the train-split
    count of every token. emb_seen (and untied head_seen): the rows of the rare and frequent
    samples (rows_seen) in fp16, for similarities between runs (linear CKA of a tied and an
    untied run of one seed)."""
    e, h = model.transformer.wte.weight.float(), model.lm_head.weight.float()
    h = None if model.tie else h
    emb_norm = torch.linalg.vector_norm(e, dim=1)
    head_norm = emb_norm if h is None else torch.linalg.vector_norm(h, dim=1)
    arrays = {"emb_norm": emb_norm, "head_norm": head_norm}
    scalars = {
        f"{PROBE_}{name}_{stat}": getattr(norms, stat)().item()
        for name, norms in arrays.items()
        for stat in ("mean", "std")
    }
    if h is not None:
        # cos(e_v, h_v) per token, reusing the norms; einsum avoids a (V, d) temporary
        norms = (emb_norm * head_norm).clamp_min(1e-12)
        arrays["in_out_cos"] = torch.einsum("vd,vd->v", e, h) / norms
    for stratum, ids in vocab_strata(freq).items():
        if len(ids) >= 2:
            _probe_stratum(stratum, ids, e, h, scalars, arrays)
    if parts := [arrays[f"rows_{s}"] for s in ("rare", "frequent") if f"rows_{s}" in arrays]:
        seen = torch.cat(parts).sort().values
        arrays.update(rows_seen=seen, emb_seen=e[seen.to(e.device)])
        if h is not None:
            arrays["head_seen"] = h[seen.to(h.device)]
    out = {k: v.cpu().numpy() for k, v in arrays.items()}
    # row ids exact (int64), the rows of the seen samples in half precision, the rest fp32
    for k in (k for k in out if not k.startswith("rows_")):
        out[k] = out[k].astype(np.float16 if k.endswith("_seen") else np.float32)
    return scalars, out


def _probe_stratum(s: str, ids: np.ndarray, e, h, scalars: dict, arrays: dict) -> None:
    ids_t = torch.from_numpy(ids).to(e.device)
    p = f"{PROBE_}{s}/"
    scalars[p + "emb_norm_mean"] = arrays["emb_norm"][ids_t].mean().item()
    scalars[p + "head_norm_mean"] = arrays["head_norm"][ids_t].mean().item()
    rows = sample_rows(ids)
    n_pairs = len(rows) * (len(rows) - 1)
    i, j = (t.to(e.device) for t in _kept_pairs(len(rows)))
    for name, w in (("emb", e), ("head", h)):
        if w is None:
            continue
        raw, centred = _cosines(w[torch.from_numpy(rows).to(w.device)])
        scalars[p + f"{name}_cos_mean"] = (raw.sum() / n_pairs).item()
        scalars[p + f"{name}_ccos_abs_mean"] = (centred.abs().sum() / n_pairs).item()
        if name == "emb":
            scalars[p + "emb_cos_abs_mean"] = (raw.abs().sum() / n_pairs).item()
            arrays.update({f"cos_{s}": raw[i, j], f"ccos_{s}": centred[i, j]})
    if h is not None:
        scalars[p + "in_out_cos_mean"] = arrays["in_out_cos"][ids_t].mean().item()
    arrays[f"rows_{s}"] = torch.from_numpy(rows)


@torch.no_grad()
def drift(model, start: dict[str, torch.Tensor], freq: np.ndarray) -> dict[str, float]:
    """Fine-tuning: how far the rows of E ("emb") and H ("head") moved from their step-0 values
    ``start``, for tokens seen and unseen in the training split: the mean cosine of each row to
    its start, and the mean relative change of its norm."""
    now = {"emb": model.transformer.wte.weight, "head": model.lm_head.weight}
    seen = torch.from_numpy(np.asarray(freq) > 0)
    out = {}
    for side, w0 in start.items():
        w, w0 = now[side].float(), w0.float()
        cos = F.cosine_similarity(w, w0, dim=1).cpu()
        rel = (w.norm(dim=1) / w0.norm(dim=1) - 1).cpu()
        for name, mask in (("seen", seen), ("unseen", ~seen)):
            if mask.any():
                out[f"{DRIFT_}{side}_cos_{name}"] = cos[mask].mean().item()
                out[f"{DRIFT_}{side}_norm_{name}"] = rel[mask].mean().item()
    return out
