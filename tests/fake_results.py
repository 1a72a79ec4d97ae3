"""Hand-built results directories in the trainer's documented layout (docs/ARCHITECTURE.md).

Written with tiedvsuntied.results (the trainer's writer). Test data for the analysis and figure
code, above all for the inputs a real sweep rarely produces on demand: running, diverged and
failed runs, missing probes, mixed vocab sizes. The numbers are synthetic but shaped like a real
run's (loss falls from its initial value towards a floor; norms grow with token frequency).
"""

from __future__ import annotations

import json
import math
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from tiedvsuntied.results import records as results
from tiedvsuntied.results.io import write_json
from tiedvsuntied.train.evaluation import vocab_strata

SIZES = {"nano": (2, 2, 32), "micro": (4, 4, 128), "mini": (6, 6, 256)}  # n_layer, n_head, n_embd
SIZES |= {"d64": (2, 2, 64), "d256": (8, 4, 256)}  # the sign-flip ladder's other bodies


# libyaml's writer where PyYAML has it, as the package reads config.yaml (records.SAFE_LOADER):
# a fake run's config is written 4x and read 6x faster than by the pure-Python ones
DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def dump_config(run_dir: Path, config: dict) -> None:
    """Write ``run_dir``/config.yaml as the trainer's record holds it (plain YAML)."""
    (run_dir / "config.yaml").write_text(yaml.dump(config, Dumper=DUMPER))


def load_config(run_dir: Path) -> dict:
    """``run_dir``/config.yaml as a dict (a fake study's writer edits it in place)."""
    return yaml.load((run_dir / "config.yaml").read_text(), Loader=results.SAFE_LOADER)


def run_name(tie: bool, init_std: str, model: str, seed: int, replicate: int = 0) -> str:
    rep = f"_replicate={replicate}" if replicate else ""
    return f"tie={'true' if tie else 'false'}_init={init_std}_model={model}_seed={seed}{rep}"


@dataclass
class FakeRun:
    """What one fake run is (write_run's arguments) and what follows from it."""

    sweep_dir: Path
    tie: bool = True
    init_std: str = "0.02"
    model: str = "nano"
    seed: int = 0
    status: str = "finished"
    vocab_size: int = 512
    max_steps: int = 20
    eval_interval: int = 5
    log_interval: int = 2
    batch_tokens: int = 256
    diverged_at_step: int | None = None
    data_files: str = "input.txt"
    t5_rescale: bool = False
    lr: float | None = None
    floor_shift: float = 0.0
    n_windows: int = 40
    replicate: int = 0  # the same config trained again: its own noise, same everything else
    threads: int | None = None  # torch's CPU threads (summary.threads)
    bytes_per_token: float | None = None  # set: the third edition's fields (rho, bpb, bytes...)
    clip_frac: float | None = None
    input_grad_scale: float = 1.0  # head.tied_input_grad_scale (the ends' tied_in_grad arm: 4)
    head_init_std: str | None = None  # an untied head's own std (emb1_head_dsqrt: inv_sqrt_d)

    def __post_init__(self):
        self.n_layer, self.n_head, self.n_embd = SIZES[self.model]
        self.name = run_name(self.tie, self.init_std, self.model, self.seed, self.replicate)
        identity = f"{self.name}{self.vocab_size}{self.data_files}{self.t5_rescale}"
        identity += f"{self.max_steps}{self.lr}"
        if self.input_grad_scale != 1.0 or self.head_init_std:  # the ends' arms: ids of their own
            identity += f"{self.input_grad_scale}{self.head_init_std}"
        self.run_id = f"{self.name}-{zlib.crc32(identity.encode()):08x}"
        self.run_dir = self.sweep_dir / self.run_id
        self.rng = np.random.default_rng(zlib.crc32(self.run_id.encode()))
        self.std = self.n_embd**-0.5 if self.init_std == "inv_sqrt_d" else float(self.init_std)
        own = {None: self.std, "inv_sqrt_d": self.n_embd**-0.5}
        self.head_std = own.get(self.head_init_std, self.head_init_std)
        scale = self.n_embd**-0.5 if self.t5_rescale else 1.0
        self.logit_std = self.std * math.sqrt(self.n_embd) * scale
        self.last_step = {
            "finished": self.max_steps,
            "diverged": self.diverged_at_step or self.max_steps // 2,
            "running": self.max_steps // 2,
            "failed": self.max_steps // 3,
        }[self.status]

    def initial_loss(self) -> float:
        ln_v = math.log(self.vocab_size)
        if self.tie and self.std > 0.2 and not self.t5_rescale:
            return self.std**2 * self.n_embd  # the input token's own logit dominates
        if self.logit_std < math.sqrt(2 * ln_v):
            return ln_v + self.logit_std**2 / 2
        return self.logit_std * math.sqrt(2 * ln_v)


def _train_record(run: FakeRun, rec: dict, loss: float, progress: float) -> None:
    rec["train/loss"] = loss + 0.1 * run.rng.standard_normal()
    rec["train/lr"] = 1e-3
    g_in = 0.5 * progress + 0.05
    g_out = (3.0 if run.tie else 2.0) * progress + 0.1
    rec["train/grad_norm_in"], rec["train/grad_norm_out"] = g_in, g_out
    rec["train/grad_norm"] = math.hypot(g_in, g_out)
    if run.status == "diverged" and rec["step"] >= run.last_step:
        rec["train/loss"] = "nan"


def _eval_record(run: FakeRun, rec: dict, loss: float) -> None:
    rec["val/loss"] = loss + 0.02 * run.rng.standard_normal()
    rec["val/ppl"] = math.exp(min(rec["val/loss"], 700))
    if run.bytes_per_token:
        rec["val/bpb"] = rec["val/loss"] / (math.log(2) * run.bytes_per_token)
    if rec["step"] == 0:
        rec["init/logit_std"] = run.logit_std
    grow = rec["step"] / run.max_steps  # anisotropy grows with training, more for the tied matrix
    rec["probe/frequent/emb_cos_mean"] = 0.01 + grow * (0.3 if run.tie else 0.1)
    rec["probe/frequent/emb_ccos_abs_mean"] = 0.07 + grow * (0.1 if run.tie else 0.05)
    if not run.tie:
        rec["probe/frequent/head_cos_mean"] = 0.01 + grow * 0.2
        rec["probe/frequent/head_ccos_abs_mean"] = 0.07 + grow * 0.08


def _metrics(run: FakeRun, floor: float) -> list[dict]:
    """metrics.jsonl: the loss falls from its initial value towards ``floor``."""
    init_loss, lines = run.initial_loss(), []
    for step in range(0, run.last_step + 1):
        # tokens only, as the trainer logs them: the reader turns them into bytes
        rec = {"step": step, "tokens": step * run.batch_tokens}
        progress = (1 + step / 3) ** -0.8
        loss = floor + (init_loss - floor) * progress
        if step % run.log_interval == 0 and step > 0:
            _train_record(run, rec, loss, progress)
        if step % run.eval_interval == 0 or step == run.last_step and run.status == "finished":
            _eval_record(run, rec, loss)
        if len(rec) > 2:
            lines.append(rec)
    end = {"step": run.last_step + 1, "tokens": (run.last_step + 1) * run.batch_tokens}
    if run.status == "diverged":
        # after the divergence point the trainer may still have flushed a line: analysis must
        # cut it (the trainer writes non-finite floats as strings)
        lines.append({**end, "train/loss": "inf"})
    if run.status == "finished":
        last = {"step": run.max_steps, "tokens": run.max_steps * run.batch_tokens}
        lines.append({**last, "test/loss": lines[-1].get("val/loss", floor)})
    return lines


def _params(run: FakeRun) -> dict:
    emb = run.vocab_size * run.n_embd
    params = {
        "total": 1000 * run.n_embd * run.n_layer + emb * (1 if run.tie else 2),
        "embedding": emb,
        "position": 64 * run.n_embd,
        "head": 0 if run.tie else emb,
    }
    params["non_embedding"] = (
        params["total"] - params["embedding"] - params["position"] - params["head"]
    )
    return params


def _third_edition(run: FakeRun, params: dict, summary: dict) -> dict:
    """The third edition's summary fields (CONTRACT.md) of a run whose ``bytes_per_token`` is set;
    the count models at 5.5 (unigram) and 5.0 (bigram) nats per token."""
    vd, rest, per_byte = run.vocab_size * run.n_embd, params["non_embedding"], math.log(2)
    per_byte *= run.bytes_per_token
    losses = {"test": summary["test_loss"], "val": summary["final_val_loss"]}
    bpb = {k: None if v is None else v / per_byte for k, v in losses.items()}
    counts = {"unigram": 5.5, "bigram": 5.0, "unigram_bpb": 5.5 / per_byte}
    counts["bigram_bpb"] = 5.0 / per_byte
    heldout = {
        k: {**counts, "loss_bpb": bpb[k], "bytes_per_token": run.bytes_per_token} for k in bpb
    }
    return {
        "rho": vd / (vd + rest),
        "rho_untied": 2 * vd / (2 * vd + rest),
        "non_embedding_params": rest,
        "tokens_per_param": summary["tokens"] / params["total"],
        "tokens_per_nonemb_param": summary["tokens"] / rest,
        "bytes_per_token": run.bytes_per_token,
        "train_bytes": summary["tokens"] * run.bytes_per_token,
        "test_bpb": bpb["test"],
        "val_bpb": bpb["val"],
        "heldout": heldout,
        "clip_frac": run.clip_frac,
        "encoding": "bpe",
        "git_commit": "0" * 40,
        "git_dirty": False,
        "starts": [{"step": 0, "at": None, "git_commit": "0" * 40, "git_dirty": False}],
    }


def _summary(run: FakeRun, val: list, best_step, test: dict) -> dict:
    params, finished = _params(run), run.status == "finished"
    fingerprint = zlib.crc32(f"{run.data_files}{run.vocab_size}".encode())
    return {
        "run_id": run.run_id,
        "name": run.name,
        "sweep": run.sweep_dir.name,
        "status": run.status,
        "error": {"failed": "RuntimeError: out of memory", "diverged": "loss is nan"}.get(
            run.status
        ),
        "tie": run.tie,
        "init_std": run.init_std if run.init_std == "inv_sqrt_d" else float(run.init_std),
        "init_std_resolved": {"emb": run.std, "head": run.head_std},
        "model": run.model,
        "n_layer": run.n_layer,
        "n_embd": run.n_embd,
        "n_head": run.n_head,
        "vocab_size": run.vocab_size,
        "block_size": 64,
        "seed": run.seed,
        "replicate": run.replicate,
        "threads": run.threads,
        "device": "cpu",
        "params": params,
        "flops_per_token": 6.0 * params["total"],
        "step": run.last_step,
        "tokens": run.last_step * run.batch_tokens,
        "init_val_loss": val[0],
        "init_logit_std": run.logit_std,
        "final_val_loss": val[-1] if finished else None,
        "best_val_loss": min(val) if run.status != "failed" else None,
        "test_loss": test.get(run.last_step) if finished else None,
        "best_step": best_step,
        "test_loss_at_best": test.get(best_step) if finished else None,
        "diverged_at_step": run.last_step if run.status == "diverged" else None,
        "data": "text",
        "data_fingerprint": f"fp{fingerprint:08x}",
        "t5_rescale": run.t5_rescale,
        "max_steps": run.max_steps,
        "wandb_run_id": f"wb{run.seed}{int(run.tie)}",
        "wandb_mode": "offline",
        "started_at": "2026-01-01T00:00:00Z",
        "updated_at": "2026-01-01T00:10:00Z",
    }


def _config(run: FakeRun) -> dict:
    return {
        "tie": run.tie,
        "init_std": run.init_std,
        "seed": run.seed,
        "replicate": run.replicate,
        "sweep": run.sweep_dir.name,
        "model": {
            "name": run.model,
            "n_layer": run.n_layer,
            "n_head": run.n_head,
            "n_embd": run.n_embd,
            "vocab_size": run.vocab_size,
            "t5_rescale": run.t5_rescale,
        },
        "head": {"tied_input_grad_scale": run.input_grad_scale},
        "data": {
            "name": "text",
            "files": [run.data_files],
            "cache_dir": str(run.sweep_dir / ".cache"),
        },
        "trainer": {"max_steps": run.max_steps, "eval_interval": run.eval_interval},
        **({"optim": {"lr": run.lr}} if run.lr is not None else {}),
    }


def _geometry_arrays(run: FakeRun, step: int, counts: np.ndarray) -> dict:
    """Norms that grow with token frequency, cosines per stratum, seen rows for CKA."""
    rng, n_embd, V = run.rng, run.n_embd, run.vocab_size
    grow, base = step / run.max_steps, run.std * math.sqrt(n_embd)
    emb_norm = base * (1 + 0.05 * rng.standard_normal(V)) + grow * 0.3 * np.log1p(counts)
    head_norm = (
        emb_norm
        if run.tie
        else base * (1 + 0.05 * rng.standard_normal(V)) + grow * 0.5 * np.log1p(counts)
    )
    arrays = {"emb_norm": emb_norm.astype(np.float32), "head_norm": head_norm.astype(np.float32)}
    for stratum, ids in vocab_strata(counts).items():  # tied, unseen rows collapse onto one
        shift = grow * (0.9 if run.tie and stratum == "unseen" else 0.05)
        cos = rng.standard_normal(500) / math.sqrt(n_embd) * (1 - shift) + shift
        centred = rng.standard_normal(500) / math.sqrt(n_embd)
        arrays[f"cos_{stratum}"] = cos.astype(np.float32)
        arrays[f"rows_{stratum}"] = ids[:64]
        arrays[f"ccos_{stratum}"] = centred.astype(np.float32)
    # seen rows for CKA: an input-side and an output-side structure shared by a tied run and its
    # untied partner (same seed and data); the tied matrix is mostly the output one
    pair = np.random.default_rng([run.seed, V, step, n_embd])
    ins, outs = (pair.standard_normal((64, n_embd)) for _ in range(2))
    mix = (0.3 * ins + outs) if run.tie else ins
    arrays["rows_seen"] = np.arange(64)
    arrays["emb_seen"] = (mix + 0.3 * rng.standard_normal((64, n_embd))).astype(np.float16)
    if not run.tie:
        arrays["head_seen"] = (outs + 0.3 * rng.standard_normal((64, n_embd))).astype(np.float16)
    return arrays


def _write_probes(run: FakeRun, counts, val: list, val_steps: list, test: dict) -> None:
    # Per-window losses: a difficulty per window that is a property of the text (the same for
    # every run on this data), plus run noise; centred so each evaluation's mean is its loss.
    text = np.random.default_rng(zlib.crc32(run.data_files.encode())).gamma(
        4.0, 0.25, size=(2, run.n_windows)
    )
    windows = {split: text[k] - text[k].mean() for k, split in enumerate(("val", "test"))}

    def window_loss(split, mean):
        noise = 0.05 * run.rng.standard_normal(run.n_windows)
        return (mean + windows[split] + noise - noise.mean()).astype(np.float32)

    steps = set(range(0, run.last_step + 1, run.eval_interval)) | set(val_steps)
    for step in sorted(steps):
        arrays = _geometry_arrays(run, step, counts)
        if step in val_steps:
            arrays["val_window_loss"] = window_loss("val", val[val_steps.index(step)])
        if step in test and run.status == "finished":
            arrays["test_window_loss"] = window_loss("test", test[step])
        if not run.tie:
            drift = step / run.max_steps * 0.3 * np.tanh(np.log1p(counts) / 5)
            cos = run.rng.standard_normal(run.vocab_size) / math.sqrt(run.n_embd) + drift
            arrays["in_out_cos"] = np.clip(cos, -1, 1).astype(np.float32)
        np.savez(run.run_dir / "probes" / f"step_{step:07d}.npz", **arrays)


def write_run(
    sweep_dir: Path,
    *,
    probes: bool = True,
    token_freq: bool = True,
    index: bool = True,
    **kw,
) -> Path:
    """Write one run directory (and its index.json entry); return the run directory. ``kw``:
    the fields of :class:`FakeRun`."""
    run = FakeRun(sweep_dir, **kw)
    (run.run_dir / "probes").mkdir(parents=True, exist_ok=True)
    floor = (
        4.5
        + (0.15 if run.tie else 0.0)
        - 0.3 * math.log2(run.n_embd / 32)
        + 0.05 * run.rng.standard_normal()
        + run.floor_shift
    )
    lines = _metrics(run, floor)
    with open(run.run_dir / "metrics.jsonl", "w") as f:
        for rec in lines:
            f.write(json.dumps(rec) + "\n")
    val = [r["val/loss"] for r in lines if "val/loss" in r]
    val_steps = [r["step"] for r in lines if "val/loss" in r]
    best_step = val_steps[int(np.argmin(val))] if val else None
    test = {best_step: val[val_steps.index(best_step)] + 0.1 if val else None}
    if run.status == "finished":
        test[run.last_step] = val[-1] + 0.1
    # through the contract's own dataclass and writer, so a key it does not know fails here
    summary = _summary(run, val, best_step, test)
    if run.bytes_per_token:
        summary |= _third_edition(run, _params(run), summary)
    summary = results.RunSummary(**summary)
    write_json(run.run_dir / "summary.json", summary.to_dict())
    dump_config(run.run_dir, _config(run))
    counts = np.zeros(run.vocab_size, dtype=np.int64)
    seen = run.vocab_size * 3 // 4
    counts[:seen] = np.maximum(1, (20000 / np.arange(1, seen + 1) ** 1.1)).astype(np.int64)
    if token_freq:
        np.save(run.run_dir / "token_freq.npy", counts)
    if probes:
        _write_probes(run, counts, val, val_steps, test)
    if index:
        overrides = [f"tie={str(run.tie).lower()}", f"init_std={run.init_std}"]
        overrides += [f"model={run.model}", f"seed={run.seed}"]
        entry = results.IndexEntry(
            run.name, results.Status(run.status), run.run_id, overrides=overrides
        )
        results.update_index(sweep_dir, run.run_id, entry)
    return run.run_dir


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


# ----------------------------------------------------------------------- the runs figures read
# runs of the figures' session results (conftest.fig_results) that did not finish
DIVERGED = "tie=true_init=1.0_model=micro_seed=1"
RUNNING = "tie=false_init=0.036_model=nano_seed=1"
FAILED = "tie=false_init=1.0_model=nano_seed=1"


def write_log_spaced_sweep(path):
    """Fake runs with the training loss at every step and evaluations at 1, 2, 4 as well (what
    trainer.log_first and trainer.eval_log_steps give)."""
    sweep = write_sweep(path, init_stds=("1.0", "inv_sqrt_d"), seeds=(0, 1, 2), log_interval=1)
    for metrics in sweep.glob("*/metrics.jsonl"):
        first = json.loads(metrics.read_text().splitlines()[0])
        extra = [
            {"step": s, "tokens": 256 * s, "val/loss": first["val/loss"] - s} for s in (1, 2, 4)
        ]
        with open(metrics, "a") as f:
            f.writelines(json.dumps(rec) + "\n" for rec in extra)
    return sweep


def strip_probes(sweep, runs="*", keep=("val_window_loss", "test_window_loss")):
    """What a bundle keeps of most runs (those matching ``runs``): window losses only."""
    for path in sweep.glob(f"{runs}/probes/*.npz"):
        with np.load(path) as z:
            arrays = {k: z[k] for k in z.files if k in keep}
        np.savez(path, **arrays)
