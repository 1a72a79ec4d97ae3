"""Hand-built results directories in the trainer's documented layout (docs/ARCHITECTURE.md).

Written with tiedvsuntied.results (the trainer's writer). Test data for the analysis and figure code, above all for the inputs a real sweep rarely
produces on demand: running, diverged and failed runs, missing probes, mixed vocab sizes.
The numbers are synthetic but shaped like a real run's (loss falls from its initial value
towards a floor; norms grow with token frequency).
"""

from __future__ import annotations

import json
import math
import zlib
from pathlib import Path

import numpy as np
import yaml

from tiedvsuntied import results as R
from tiedvsuntied.train.probes import vocab_strata

SIZES = {"nano": (2, 2, 32), "micro": (4, 4, 128), "mini": (6, 6, 256)}  # n_layer, n_head, n_embd


def run_name(tie: bool, init_std: str, model: str, seed: int) -> str:
    return f"tie={'true' if tie else 'false'}_init={init_std}_model={model}_seed={seed}"


def write_run(
    sweep_dir: Path,
    *,
    tie: bool = True,
    init_std: str = "0.02",
    model: str = "nano",
    seed: int = 0,
    status: str = "finished",
    vocab_size: int = 512,
    max_steps: int = 20,
    eval_interval: int = 5,
    log_interval: int = 2,
    batch_tokens: int = 256,
    diverged_at_step: int | None = None,
    probes: bool = True,
    token_freq: bool = True,
    data_files: str = "input.txt",
    index: bool = True,
    t5_rescale: bool = False,
    lr: float | None = None,
    floor_shift: float = 0.0,
    n_windows: int = 40,
) -> Path:
    """Write one run directory (and its index.json entry); return the run directory."""
    n_layer, n_head, n_embd = SIZES[model]
    name = run_name(tie, init_std, model, seed)
    run_id = f"{name}-{zlib.crc32(f'{name}{vocab_size}{data_files}{t5_rescale}{max_steps}{lr}'.encode()):08x}"
    run_dir = sweep_dir / run_id
    (run_dir / "probes").mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(zlib.crc32(run_id.encode()))
    std = n_embd**-0.5 if init_std == "inv_sqrt_d" else float(init_std)
    V = vocab_size
    logit_std = std * math.sqrt(n_embd) * (n_embd**-0.5 if t5_rescale else 1.0)
    init_loss = (
        math.log(V) + logit_std**2 / 2
        if logit_std < math.sqrt(2 * math.log(V))
        else logit_std * math.sqrt(2 * math.log(V))
    )
    if tie and std > 0.2 and not t5_rescale:
        init_loss = std**2 * n_embd  # the input token's own logit dominates
    floor = (
        4.5
        + (0.15 if tie else 0.0)
        - 0.3 * math.log2(n_embd / 32)
        + 0.05 * rng.standard_normal()
        + floor_shift
    )

    last_step = {
        "finished": max_steps,
        "diverged": diverged_at_step or max_steps // 2,
        "running": max_steps // 2,
        "failed": max_steps // 3,
    }[status]
    lines = []
    for step in range(0, last_step + 1):
        rec = {"step": step, "tokens": step * batch_tokens}
        progress = (1 + step / 3) ** -0.8
        if step % log_interval == 0 and step > 0:
            rec["train/loss"] = floor + (init_loss - floor) * progress + 0.1 * rng.standard_normal()
            rec["train/lr"] = 1e-3
            g_in = 0.5 * progress + 0.05
            g_out = (3.0 if tie else 2.0) * progress + 0.1
            rec["train/grad_norm_in"], rec["train/grad_norm_out"] = g_in, g_out
            rec["train/grad_norm"] = math.hypot(g_in, g_out)
            if status == "diverged" and step >= last_step:
                rec["train/loss"] = "nan"
        if step % eval_interval == 0 or step == last_step and status == "finished":
            rec["val/loss"] = floor + (init_loss - floor) * progress + 0.02 * rng.standard_normal()
            rec["val/ppl"] = math.exp(min(rec["val/loss"], 700))
            if step == 0:
                rec["init/logit_std"] = logit_std
            grow = step / max_steps  # anisotropy grows with training, more for the tied matrix
            rec["probe/frequent/emb_cos_mean"] = 0.01 + grow * (0.3 if tie else 0.1)
            rec["probe/frequent/emb_ccos_abs_mean"] = 0.07 + grow * (0.1 if tie else 0.05)
            if not tie:
                rec["probe/frequent/head_cos_mean"], rec["probe/frequent/head_ccos_abs_mean"] = (
                    0.01 + grow * 0.2,
                    0.07 + grow * 0.08,
                )
        if len(rec) > 2:
            lines.append(rec)
    if status == "diverged":
        # after the divergence point the trainer may still have flushed a line: analysis must cut it
        # (the trainer writes non-finite floats as strings)
        lines.append(
            {"step": last_step + 1, "tokens": (last_step + 1) * batch_tokens, "train/loss": "inf"}
        )
    if status == "finished":
        lines.append(
            {
                "step": max_steps,
                "tokens": max_steps * batch_tokens,
                "test/loss": lines[-1].get("val/loss", floor),
            }
        )
    with open(run_dir / "metrics.jsonl", "w") as f:
        for rec in lines:
            f.write(json.dumps(rec) + "\n")

    val = [r["val/loss"] for r in lines if "val/loss" in r]
    val_steps = [r["step"] for r in lines if "val/loss" in r]
    best_step = val_steps[int(np.argmin(val))] if val else None
    # Per-window losses: a difficulty per window that is a property of the text (the same for every
    # run on this data), plus run noise; centred so each evaluation's mean is its logged loss.
    text = np.random.default_rng(zlib.crc32(data_files.encode())).gamma(
        4.0, 0.25, size=(2, n_windows)
    )
    windows = {split: text[k] - text[k].mean() for k, split in enumerate(("val", "test"))}

    def window_loss(split, mean):
        noise = 0.05 * rng.standard_normal(n_windows)
        return (mean + windows[split] + noise - noise.mean()).astype(np.float32)

    test = {best_step: val[val_steps.index(best_step)] + 0.1 if val else None}
    if status == "finished":
        test[last_step] = val[-1] + 0.1
    emb = V * n_embd
    params = {
        "total": 1000 * n_embd * n_layer + emb * (1 if tie else 2),
        "embedding": emb,
        "position": 64 * n_embd,
        "head": 0 if tie else emb,
    }
    params["non_embedding"] = (
        params["total"] - params["embedding"] - params["position"] - params["head"]
    )
    summary = {
        "run_id": run_id,
        "name": name,
        "sweep": sweep_dir.name,
        "status": status,
        "error": {"failed": "RuntimeError: out of memory", "diverged": "loss is nan"}.get(status),
        "tie": tie,
        "init_std": init_std if init_std == "inv_sqrt_d" else float(init_std),
        "init_std_resolved": {"emb": std, "head": std},
        "model": model,
        "n_layer": n_layer,
        "n_embd": n_embd,
        "n_head": n_head,
        "vocab_size": V,
        "block_size": 64,
        "seed": seed,
        "params": params,
        "flops_per_token": 6.0 * params["total"],
        "step": last_step,
        "tokens": last_step * batch_tokens,
        "init_val_loss": val[0],
        "init_logit_std": logit_std,
        "final_val_loss": val[-1] if status == "finished" else None,
        "best_val_loss": min(val) if status != "failed" else None,
        "test_loss": test.get(last_step) if status == "finished" else None,
        "best_step": best_step,
        "test_loss_at_best": test.get(best_step) if status == "finished" else None,
        "diverged_at_step": last_step if status == "diverged" else None,
        "data": "text",
        "data_fingerprint": f"fp{zlib.crc32(f'{data_files}{vocab_size}'.encode()):08x}",
        "t5_rescale": t5_rescale,
        "max_steps": max_steps,
        "wandb_run_id": f"wb{seed}{int(tie)}",
        "wandb_mode": "offline",
        "started_at": "2026-01-01T00:00:00Z",
        "updated_at": "2026-01-01T00:10:00Z",
    }
    # through the contract's own dataclass and writer, so a key it does not know fails here
    R.write_json(run_dir / "summary.json", R.RunSummary(**summary).to_dict())
    config = {
        "tie": tie,
        "init_std": init_std,
        "seed": seed,
        "sweep": sweep_dir.name,
        "model": {
            "name": model,
            "n_layer": n_layer,
            "n_head": n_head,
            "n_embd": n_embd,
            "vocab_size": V,
            "t5_rescale": t5_rescale,
        },
        "data": {"name": "text", "files": [data_files], "cache_dir": str(sweep_dir / ".cache")},
        "trainer": {"max_steps": max_steps, "eval_interval": eval_interval},
        **({"optim": {"lr": lr}} if lr is not None else {}),
    }
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config))

    counts = np.zeros(V, dtype=np.int64)
    seen = V * 3 // 4
    counts[:seen] = np.maximum(1, (20000 / np.arange(1, seen + 1) ** 1.1)).astype(np.int64)
    if token_freq:
        np.save(run_dir / "token_freq.npy", counts)
    if probes:
        for step in sorted(set(range(0, last_step + 1, eval_interval)) | set(val_steps)):
            grow = step / max_steps
            base = std * math.sqrt(n_embd)
            emb_norm = base * (1 + 0.05 * rng.standard_normal(V)) + grow * 0.3 * np.log1p(counts)
            head_norm = (
                emb_norm
                if tie
                else base * (1 + 0.05 * rng.standard_normal(V)) + grow * 0.5 * np.log1p(counts)
            )
            arrays = {
                "emb_norm": emb_norm.astype(np.float32),
                "head_norm": head_norm.astype(np.float32),
            }
            for stratum, ids in vocab_strata(
                counts
            ).items():  # tied, unseen rows collapse onto one direction
                shift = grow * (0.9 if tie and stratum == "unseen" else 0.05)
                cos = rng.standard_normal(500) / math.sqrt(n_embd) * (1 - shift) + shift
                arrays.update(
                    {
                        f"cos_{stratum}": cos.astype(np.float32),
                        f"rows_{stratum}": ids[:64],
                        f"ccos_{stratum}": (rng.standard_normal(500) / math.sqrt(n_embd)).astype(
                            np.float32
                        ),
                    }
                )
            # seen rows for CKA: an input-side and an output-side structure shared by a tied run and its
            # untied partner (same seed and data); the tied matrix is mostly the output one
            pair = np.random.default_rng([seed, vocab_size, step, n_embd])
            ins, outs = (pair.standard_normal((64, n_embd)) for _ in range(2))
            mix = (0.3 * ins + outs) if tie else ins
            arrays.update(
                rows_seen=np.arange(64),
                emb_seen=(mix + 0.3 * rng.standard_normal((64, n_embd))).astype(np.float16),
            )
            if not tie:
                arrays["head_seen"] = (outs + 0.3 * rng.standard_normal((64, n_embd))).astype(
                    np.float16
                )
            if step in val_steps:
                arrays["val_window_loss"] = window_loss("val", val[val_steps.index(step)])
            if step in test and status == "finished":
                arrays["test_window_loss"] = window_loss("test", test[step])
            if not tie:
                arrays["in_out_cos"] = np.clip(
                    rng.standard_normal(V) / math.sqrt(n_embd)
                    + grow * 0.3 * np.tanh(np.log1p(counts) / 5),
                    -1,
                    1,
                ).astype(np.float32)
            np.savez(run_dir / "probes" / f"step_{step:07d}.npz", **arrays)
    if index:
        overrides = [
            f"tie={str(tie).lower()}",
            f"init_std={init_std}",
            f"model={model}",
            f"seed={seed}",
        ]
        R.update_index(
            sweep_dir, run_id, R.IndexEntry(name, R.Status(status), run_id, overrides=overrides)
        )
    return run_dir


def write_sweep(
    sweep_dir: Path,
    *,
    ties=(True, False),
    init_stds=("1.0", "0.036"),
    models=("nano",),
    seeds=(0,),
    statuses: dict | None = None,
    **kw,
) -> Path:
    """A full grid; ``statuses`` maps (tie, init_std, model, seed) to a non-finished status."""
    statuses = statuses or {}
    for model in models:
        for init_std in init_stds:
            for tie in ties:
                for seed in seeds:
                    write_run(
                        sweep_dir,
                        tie=tie,
                        init_std=init_std,
                        model=model,
                        seed=seed,
                        status=statuses.get((tie, init_std, model, seed), "finished"),
                        **kw,
                    )
    return sweep_dir
