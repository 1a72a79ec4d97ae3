"""What an evaluation measures: the loss of the fixed windows, the embedding-geometry probes,
and the test losses at the end of a run. The loop in train/trainer.py decides what of it is
kept, written and logged."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch
from torch.nn import functional as F

from tiedvsuntied.data.baselines import bits_per_byte
from tiedvsuntied.data.batches import EvalSet
from tiedvsuntied.results.io import atomic_write
from tiedvsuntied.results.metrics import (
    DRIFT_,
    INIT_,
    PROBE_,
    RETAIN_LOSS,
    TEST_BPB,
    TEST_LOSS,
    TEST_LOSS_AT_BEST,
    TEST_PPL,
    VAL_BPB,
    VAL_LOSS,
    VAL_PPL,
)
from tiedvsuntied.train.config import Precision
from tiedvsuntied.train.setup import Run

log = logging.getLogger(__name__)

INIT_KEYS = ("logit_std", "self_logit", "self_target_frac")  # step 0: TrainState.init_<key>


@torch.no_grad()
def evaluate(run: Run, model, held: EvalSet, first: bool = False) -> dict:
    """The loss of each of the split's fixed windows (the same windows every time, every run:
    paired comparisons and bootstrap intervals over them need that) and their mean. ``first``
    (step 0): also the logits' std and the mean logit of each input token at its own position
    (tied, h·e_x: at a large init std it dominates the initial loss)."""
    trainer, device = run.cfg.trainer, run.device
    size = trainer.eval_batch_size
    model.eval()
    windows, repeats, out = [], [], {}
    for i in range(0, len(held.windows), size):
        w = torch.from_numpy(held.windows[i : i + size].astype(np.int64))
        x, y = (t.contiguous().to(device) for t in (w[:, :-1], w[:, 1:]))
        with torch.autocast(
            device.type, torch.bfloat16, enabled=run.derived.precision == Precision.bf16
        ):
            logits, loss = model(
                x,
                y,
                loss_chunk=trainer.loss_chunk,
                return_logits=first and i == 0,
                reduction="none",
            )
        if logits is not None:
            out["logit_std"] = logits.std().item()
            out["self_logit"] = logits.gather(-1, x[..., None]).mean().item()
        windows.append(loss.float().mean(1))
        repeats.append((x == y).float().mean(1))  # tied: the target is the input token itself
    model.train()
    losses = torch.cat(windows).cpu().numpy()
    if first:
        out["self_target_frac"] = torch.cat(repeats).mean().item()
    # the windows are equally long: their mean is the split's loss
    return {**out, "loss": float(losses.mean()), "windows": losses.astype(np.float32)}


@dataclass
class Evaluation:
    """What one evaluation measured; the loop decides what of it to keep."""

    loss: float  # the validation split's: the mean of ``windows``
    windows: np.ndarray  # the loss of each fixed validation window
    metrics: dict  # name (results.metrics) -> value, the loss's first, in the order logged
    arrays: dict  # the probes' per-token arrays, for probes/step_*.npz
    init: dict  # first only: logit_std, self_logit, self_target_frac
    heldout: dict | None  # last only: the validation loss beside the count models'


def measure(run: Run, first: bool = False, last: bool = False) -> Evaluation:
    """The validation loss and the probes at this step (``first``: also the initial logits'
    statistics; ``last``: also the count models' losses on the same windows). Writes nothing."""
    val = run.eval_sets["val"]
    result = evaluate(run, run.eval_model, val, first=first)
    loss = result["loss"]
    metrics = {VAL_LOSS: loss, VAL_PPL: math.exp(min(loss, 700))}
    metrics[VAL_BPB] = bits_per_byte(loss, val.bytes_per_token)
    init = {key: result[key] for key in INIT_KEYS} if first else {}
    metrics.update({f"{INIT_}{key}": value for key, value in init.items()})
    with run.clock(run.state, "probes"):
        scalars, arrays = probe(run.model, run.freq)
        if run.start_rows is not None:
            scalars.update(drift(run.model, run.start_rows, run.freq))
    if "retain" in run.eval_sets:  # the fine-tuning start's own validation split
        scalars[RETAIN_LOSS] = evaluate(run, run.model, run.eval_sets["retain"])["loss"]
    held = heldout(val, result) if last else None
    return Evaluation(loss, result["windows"], {**metrics, **scalars}, arrays, init, held)


def save_arrays(run: Run, step: int, **arrays) -> None:
    path = run.run_dir / "probes" / f"step_{step:07d}.npz"
    if path.exists() and "val_window_loss" not in arrays:
        with np.load(path) as saved:
            arrays = {**{k: saved[k] for k in saved.files}, **arrays}
    atomic_write(path, lambda f: np.savez(f, **arrays))


def four_decimals(loss: float | None) -> str:
    return "none" if loss is None else f"{loss:.4f}"


def heldout(held: EvalSet, result: dict) -> dict:
    """The held-out split's loss beside the count models' (unigram, bigram: fitted on train)
    on the same windows' targets, the share of those targets never seen in training, and the
    same per document (a window belongs to the document it starts in)."""
    table = {"loss": result["windows"], **held.baselines}
    out = {key: float(np.mean(values)) for key, values in table.items()}
    out["n_windows"] = len(result["windows"])
    out["bytes_per_token"] = held.bytes_per_token
    for key in ("loss", "unigram", "bigram"):
        out[f"{key}_bpb"] = bits_per_byte(out[key], out["bytes_per_token"])
    if held.documents is None:
        return out
    which, names = held.documents
    count = np.bincount(which, minlength=len(names))
    sums = {key: np.bincount(which, values, len(names)) for key, values in table.items()}
    out["documents"] = {
        name: {"n_windows": int(count[d]), **{k: float(v[d] / count[d]) for k, v in sums.items()}}
        for d, name in enumerate(names)
        if count[d]
    }
    return out


@dataclass
class TestLosses:
    """What the test split measured at the end of a run; the loop records it."""

    loss: float  # the final weights': the mean of ``windows``
    windows: np.ndarray  # the final weights' loss of each fixed test window
    heldout: dict  # the final weights' beside the count models (:func:`heldout`)
    at_best: float | None  # the best step's weights' (None: best.pt is not that step's)
    best_windows: np.ndarray | None  # ... of each window, where best.pt held other weights
    metrics: dict  # name (results.metrics) -> value, in the order logged


def measure_test(run: Run) -> TestLosses:
    """The test loss of the final weights (beside the count models') and of the best ones
    (early stopping's, from best.pt: the model ends with them). Writes nothing."""
    state, test = run.state, run.eval_sets["test"]
    final = evaluate(run, run.eval_model, test)
    held = heldout(test, final)
    best = None if state.best_step == state.step else run.checkpoints.best_weights(state.best_step)
    if best is not None:
        run.model.load_state_dict(best)
        at = evaluate(run, run.eval_model, test)
    else:  # the last step is the best, or best.pt is not that step's (a resume diverged from it)
        at = final if state.best_step == state.step else {"loss": None}
    metrics = {
        TEST_LOSS: final["loss"],
        TEST_PPL: math.exp(min(final["loss"], 700)),
        TEST_LOSS_AT_BEST: at["loss"],
        TEST_BPB: held["loss_bpb"],
    }
    windows = at["windows"] if best is not None else None
    return TestLosses(final["loss"], final["windows"], held, at["loss"], windows, metrics)


def bpb(heldout: dict) -> dict:
    """The last validation and the test loss in bits per byte, where they were measured."""
    return {
        f"{split}_bpb": heldout[split].get("loss_bpb")
        for split in ("val", "test")
        if split in heldout
    }


# -------------------------------------------------------------------------- the embedding probes
# Embedding-geometry probes per vocabulary stratum: scalars for the logs, per-token arrays for
# figures (the keys and their meaning: docs/model.md#probes). E is the token embedding (wte,
# V x d), H the head (lm_head; E when tied).
#
# Why strata: a token never seen in training behaves differently from one seen. Untied, its
# embedding row never gets a gradient and stays at init; tied, the softmax pushes every unseen
# row the same way and they collapse onto one direction, and a uniform sample of a 50k BPE
# vocabulary of which a small corpus uses ~20% would mostly measure vocabulary coverage. No probe
# touches the global RNG or autograd.

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
