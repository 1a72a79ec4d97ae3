"""Evaluation on the fixed windows: what each evaluation measures (the loop in train/trainer.py
decides what of it is kept, written and logged), and the test losses at the end of a run."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np
import torch

from tiedvsuntied.data.batches import EvalSet
from tiedvsuntied.results.metrics import (
    INIT_,
    RETAIN_LOSS,
    TEST_BPB,
    TEST_LOSS,
    TEST_LOSS_AT_BEST,
    TEST_PPL,
    VAL_BPB,
    VAL_LOSS,
    VAL_PPL,
)
from tiedvsuntied.results.records import atomic_write
from tiedvsuntied.train.config import Precision
from tiedvsuntied.train.probes import drift, probe
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


def bits_per_byte(nats_per_token: float, bytes_per_token: float) -> float:
    """A loss comparable across vocabularies: the windows' nats over ln 2 and their bytes."""
    return nats_per_token / math.log(2) / bytes_per_token


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
