"""The one trainer shared by every run: a plain function of the config, no Hydra inside.

``train(cfg)`` prepares the data (cached, shared by the sweep), builds the model, and trains
it with AdamW + warmup/cosine, recording everything through ``tracking.RunRecorder``. A run
is identified by its resolved config, so calling ``train`` again with the same config skips
a finished run and resumes an unfinished one from its last checkpoint, with exactly the
batches and losses an uninterrupted run would have had (the batch order is a pure function
of (seed, step) and the checkpoint holds every RNG state).

Status of a run (``summary.json``): ``running`` while it trains (or if it was killed),
``finished``, ``diverged`` (loss or gradient became NaN/inf: a result, not an error) or
``failed`` (an exception, or Ctrl-C after saving a checkpoint; a rerun resumes it).
"""
from __future__ import annotations

import contextlib
import logging
import math
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from tiedvsuntied.data import BatchSampler, iter_eval_batches, prepare_data
from tiedvsuntied.model import GPT, count_parameters, flops_per_token
from tiedvsuntied.probes import probe
from tiedvsuntied.tracking import RunRecorder, read_json, scrub

log = logging.getLogger(__name__)

PRECISIONS = ("auto", "bf16", "fp32")
DEVICES = ("auto", "cpu", "cuda")


@dataclass
class OptimConfig:
    """AdamW with warmup + cosine decay to ``lr * min_lr_ratio`` at ``trainer.max_steps``."""

    lr: float = 1e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 50
    weight_decay: float = 0.1
    decay_embeddings: bool = False  # also decay wte/lm_head (the shared matrix when tied)
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    grad_clip: float = 1.0  # 0 disables clipping (the norm is still measured and logged)

    def validate(self) -> None:
        if not self.lr > 0:
            raise ValueError(f"optim.lr must be > 0, got {self.lr}")
        if not 0 <= self.min_lr_ratio <= 1:
            raise ValueError(f"optim.min_lr_ratio must be in [0, 1], got {self.min_lr_ratio}")
        if self.warmup_steps < 0:
            raise ValueError(f"optim.warmup_steps must be >= 0, got {self.warmup_steps}")
        if self.weight_decay < 0:
            raise ValueError(f"optim.weight_decay must be >= 0, got {self.weight_decay}")
        for k in ("beta1", "beta2"):
            if not 0 <= getattr(self, k) < 1:
                raise ValueError(f"optim.{k} must be in [0, 1), got {getattr(self, k)}")
        if self.grad_clip < 0:
            raise ValueError(f"optim.grad_clip must be >= 0 (0 disables), got {self.grad_clip}")


@dataclass
class TrainerConfig:
    max_steps: int = 2000
    batch_size: int = 8  # sequences per micro-batch
    grad_accum: int = 1  # micro-batches per optimizer step
    eval_interval: int = 100  # also evaluates at step 0 and at the end
    eval_windows: int = 64  # fixed validation (and test) windows per evaluation
    eval_batch_size: int = 16
    log_interval: int = 10
    ckpt_interval: int = 200  # also at the end and on Ctrl-C
    precision: str = "auto"  # auto: bf16 where the hardware has fast bf16 (CUDA, AVX512-BF16/AMX CPUs)
    compile: str = "auto"  # auto: compile on CUDA, and on CPU for runs of >= 500 steps (compiling takes ~1 min)
    device: str = "auto"
    loss_chunk: int = 1024  # rows per cross-entropy chunk; 0 materialises all logits at once
    test_eval: bool = True  # test-split loss at the end
    peak_tflops: float = 0.0  # MFU denominator; 0: measure this machine's matmul peak at start
    progress: bool = True  # tqdm bar per run

    def validate(self) -> None:
        for k in ("max_steps", "batch_size", "grad_accum", "eval_interval", "eval_windows",
                  "eval_batch_size", "log_interval", "ckpt_interval"):
            if getattr(self, k) < 1:
                raise ValueError(f"trainer.{k} must be >= 1, got {getattr(self, k)}")
        if str(self.compile).lower() not in ("auto", "true", "false"):
            raise ValueError(f"trainer.compile={self.compile!r} is not valid; choose auto, true or false")
        if self.precision not in PRECISIONS:
            raise ValueError(f"trainer.precision={self.precision!r} is not valid; choose one of {', '.join(PRECISIONS)}")
        if self.device not in DEVICES and not self.device.startswith("cuda:"):
            raise ValueError(f"trainer.device={self.device!r} is not valid; choose one of {', '.join(DEVICES)} or cuda:N")
        if self.loss_chunk < 0:
            raise ValueError(f"trainer.loss_chunk must be >= 0 (0 = full logits), got {self.loss_chunk}")
        if self.peak_tflops < 0:
            raise ValueError(f"trainer.peak_tflops must be >= 0 (0 = measure), got {self.peak_tflops}")


# ---------------------------------------------------------------------------------------
# Hardware helpers (also used by the benchmark)


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"trainer.device={name!r} but CUDA is not available here; use trainer.device=cpu or auto")
    return torch.device(name)


def cpu_has_fast_bf16() -> bool:
    """AVX512-BF16 or AMX: bf16 matmuls run several times faster than fp32 there."""
    cpu = getattr(torch, "cpu", None)
    for name in ("_is_amx_tile_supported", "_is_avx512_bf16_supported"):
        fn = getattr(cpu, name, None)
        if fn is not None and fn():
            return True
    return False


def resolve_precision(name: str, device: torch.device) -> str:
    if name != "auto":
        return name
    if device.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp32"
    return "bf16" if cpu_has_fast_bf16() else "fp32"


COMPILE_MIN_STEPS_CPU = 500


def resolve_compile(setting, device: torch.device, max_steps: int) -> bool:
    """``auto``: compile where it pays: always on CUDA; on CPU once a run is long enough to
    amortise the ~1 min compilation (micro, bf16: 2.5x the eager fp32 baseline vs 1.9x eager)."""
    setting = str(setting).lower()
    if setting == "auto":
        return device.type == "cuda" or max_steps >= COMPILE_MIN_STEPS_CPU
    return setting == "true"


def autocast_ctx(precision: str, device: torch.device):
    if precision == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def measure_matmul_tflops(device: torch.device, dtype: torch.dtype, n: int = 2048, seconds: float = 0.5) -> float:
    """This machine's dense matmul throughput (TFLOP/s) for ``dtype``: the MFU denominator."""
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    for _ in range(2):
        a @ b
    sync()
    iters, t0 = 0, time.perf_counter()
    while True:
        for _ in range(4):
            a @ b
        iters += 4
        sync()
        dt = time.perf_counter() - t0
        if dt >= seconds:
            return 2 * n**3 * iters / dt / 1e12


# ---------------------------------------------------------------------------------------
# Optimizer and schedule


def build_optimizer(model: torch.nn.Module, cfg: OptimConfig) -> torch.optim.AdamW:
    """AdamW with two groups. ``named_parameters`` lists a tied matrix once, so it is one
    parameter of one group; embeddings/head are decayed only with ``decay_embeddings``."""
    emb_ids = {id(p) for n, p in model.named_parameters() if n.endswith(("wte.weight", "lm_head.weight", "wpe.weight"))}
    decay, no_decay = [], []
    for _, p in model.named_parameters():
        if not p.requires_grad:
            continue
        if p.dim() < 2 or (id(p) in emb_ids and not cfg.decay_embeddings):
            no_decay.append(p)
        else:
            decay.append(p)
    groups = [
        {"params": decay, "weight_decay": cfg.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    kwargs = dict(lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps)
    try:  # one fused kernel per step where this torch has it for the device (CPU and CUDA do)
        return torch.optim.AdamW(groups, fused=True, **kwargs)
    except (RuntimeError, TypeError, ValueError):
        return torch.optim.AdamW(groups, **kwargs)


def lr_at(step: int, cfg: OptimConfig, max_steps: int) -> float:
    """Linear warmup over ``warmup_steps``, then cosine to ``lr * min_lr_ratio`` at ``max_steps``."""
    if cfg.warmup_steps and step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    span = max(1, max_steps - cfg.warmup_steps)
    progress = min(1.0, (step - cfg.warmup_steps) / span)
    min_lr = cfg.lr * cfg.min_lr_ratio
    return min_lr + 0.5 * (1 + math.cos(math.pi * progress)) * (cfg.lr - min_lr)


# ---------------------------------------------------------------------------------------
# Checkpoints (atomic; loaded with weights_only=True)


def save_checkpoint(path: Path, *, model, optimizer, step: int, tokens: int, state: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "step": step,
        "tokens": tokens,
        "state": state,
        "rng_cpu": torch.get_rng_state(),
        "rng_cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    torch.save(payload, tmp)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)


def save_npz_atomic(path: Path, arrays: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "wb") as f:
        np.savez(f, **arrays)
    os.replace(tmp, path)


def load_checkpoint(path: Path, *, model, optimizer) -> dict:
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    model.load_state_dict(ckpt["model"], strict=True)
    optimizer.load_state_dict(ckpt["optimizer"])
    torch.set_rng_state(ckpt["rng_cpu"])
    if torch.cuda.is_available() and ckpt["rng_cuda"]:
        torch.cuda.set_rng_state_all(ckpt["rng_cuda"])
    return ckpt


# ---------------------------------------------------------------------------------------
# Evaluation


@torch.no_grad()
def evaluate(model, tokens, *, block_size: int, batch_size: int, max_windows: int, device, precision,
             logit_std: bool = False) -> dict:
    """Mean loss over the split's fixed windows (the same windows every time, every run)."""
    model.eval()
    total, n, out = 0.0, 0, {}
    for i, (x, y) in enumerate(iter_eval_batches(tokens, block_size, batch_size, max_windows)):
        x, y = x.to(device), y.to(device)
        with autocast_ctx(precision, device):
            if logit_std and i == 0:
                logits, loss = model(x, y, return_logits=True)
                out["logit_std"] = logits.float().std().item()
            else:
                _, loss = model(x, y, return_logits=False)
        total += loss.item() * x.shape[0]
        n += x.shape[0]
    model.train()
    out["loss"] = total / n
    return out


# ---------------------------------------------------------------------------------------
# The trainer


class Diverged(Exception):
    pass


@contextlib.contextmanager
def _graceful_sigterm():
    """Turn SIGTERM (a scheduler's stop) into KeyboardInterrupt so a checkpoint is saved."""
    def handler(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")
    try:
        old = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not in the main thread (e.g. some launchers)
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def train(cfg, overrides: Optional[list] = None) -> dict:
    """Train one run described by ``cfg`` (a ``config.Config``); return its summary.

    Skips a finished (or diverged) run, resumes an unfinished one. Raises on failure after
    recording ``failed`` with the error in ``summary.json`` and W&B.
    """
    from filelock import FileLock, Timeout

    from tiedvsuntied import config as C  # config imports this module's dataclasses

    C.validate(cfg)  # every key, before any data is touched
    t_start = time.time()
    corpus = prepare_data(cfg.data)
    model_cfg = C.model_config(cfg, corpus.vocab_size)
    model_cfg.validate()
    run_id, name = C.run_identity(cfg, corpus.fingerprint)
    sweep_dir = Path(cfg.results_dir) / cfg.sweep
    run_dir = sweep_dir / run_id
    run_dir.mkdir(parents=True, exist_ok=True)

    lock = FileLock(str(run_dir / ".lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        log.warning("[%s] is being trained by another process; skipping", name)
        return read_json(run_dir / "summary.json") or {"run_id": run_id, "status": "running"}
    try:
        previous = read_json(run_dir / "summary.json")
        if previous and previous.get("status") in ("finished", "diverged"):
            log.info("[%s] already %s at step %s; skipping (delete %s to train it again)",
                     name, previous["status"], previous.get("step"), run_dir)
            C.update_index(sweep_dir, run_id, name, previous["status"], overrides)
            return previous
        return _train_run(cfg, overrides, corpus, model_cfg, run_id, name, sweep_dir, run_dir, t_start)
    finally:
        lock.release()


def _train_run(cfg, overrides, corpus, model_cfg, run_id, name, sweep_dir, run_dir, t_start) -> dict:
    from omegaconf import OmegaConf

    from tiedvsuntied import config as C

    tc, oc = cfg.trainer, cfg.optim
    block = model_cfg.block_size
    previous = read_json(run_dir / "summary.json") or {}
    ckpt_path = run_dir / "checkpoints" / "last.pt"
    rec = RunRecorder(run_dir, {
        "run_id": run_id, "name": name, "sweep": cfg.sweep, "status": "running", "error": None,
        "tie": bool(cfg.tie), "init_std": str(cfg.init_std),
        "init_std_resolved": model_cfg.resolved_init_stds(), "model": model_cfg.name,
        "n_layer": model_cfg.n_layer, "n_embd": model_cfg.n_embd, "n_head": model_cfg.n_head,
        "vocab_size": corpus.vocab_size, "block_size": block, "seed": cfg.seed, "params": None,
        "flops_per_token": None, "t5_rescale": bool(model_cfg.t5_rescale), "data": cfg.data.name,
        "data_fingerprint": corpus.fingerprint, "max_steps": tc.max_steps,
        "step": 0, "tokens": 0, "init_val_loss": None, "init_logit_std": None, "final_val_loss": None,
        "best_val_loss": None, "test_loss": None, "diverged_at_step": None,
        "resumed_from_step": None, "wandb_run_id": None, "wandb_mode": None,
        "started_at": previous.get("started_at") or time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    })
    resolved = C.to_container(cfg)
    OmegaConf.save(OmegaConf.create(resolved), run_dir / "config.yaml")  # derived values added below
    exit_code = 1
    step, tokens = 0, 0
    state = {"best_val_loss": None, "init_val_loss": None, "init_logit_std": None, "last_val_loss": None}
    try:
        device = resolve_device(tc.device)
        precision = resolve_precision(tc.precision, device)
        train_tokens = corpus.tokens("train")
        val_tokens = corpus.tokens("val")
        # Short corpora fail here, before any training, naming the split.
        for split, toks in (("train", train_tokens), ("val", val_tokens)):
            C.check_eval_split(toks, block, split)
        sampler = BatchSampler(train_tokens, block, tc.batch_size, cfg.seed)

        # The same seed gives tied and untied runs the same body init and the same batches.
        torch.manual_seed(cfg.seed)
        model = GPT(model_cfg, seed=cfg.seed).to(device)
        model.loss_chunk = tc.loss_chunk or None
        params = count_parameters(model)
        fpt = flops_per_token(model)
        optimizer = build_optimizer(model, oc)
        compiled = resolve_compile(tc.compile, device, tc.max_steps)
        step_model = torch.compile(model) if compiled else model  # evaluations run eagerly

        derived = {
            "run_id": run_id, "name": name, "vocab_size": corpus.vocab_size,
            "init_std_resolved": model_cfg.resolved_init_stds(), "params": params,
            "flops_per_token": fpt, "device": str(device), "precision": precision, "compiled": compiled,
            "data_fingerprint": corpus.fingerprint,
            "tokens_per_step": tc.batch_size * tc.grad_accum * block,
        }
        OmegaConf.save(OmegaConf.create({**resolved, "derived": derived}), run_dir / "config.yaml")
        np.save(run_dir / "token_freq.npy", corpus.token_freq("train"))

        resumed_from = None
        if ckpt_path.exists():
            ckpt = load_checkpoint(ckpt_path, model=model, optimizer=optimizer)
            step, tokens, state = ckpt["step"], ckpt["tokens"], dict(ckpt["state"])
            resumed_from = step
            log.info("[%s] resuming from step %d (%s)", name, step, ckpt_path)
        rec.summary.update(params=params, flops_per_token=fpt, step=step, tokens=tokens,
                           resumed_from_step=resumed_from, init_val_loss=state["init_val_loss"],
                           init_logit_std=state["init_logit_std"], best_val_loss=state["best_val_loss"])
        rec.open_metrics(resumed_from)
        rec.start_wandb(cfg.wandb, run_id=C.wandb_id(cfg.sweep, run_id), name=name, group=cfg.sweep,
                        config={**resolved, **derived})
        # Parameter counts and the resolved init go to the W&B summary at the start, too.
        rec.update_summary(status="running", params=params, flops_per_token=fpt,
                           init_std_resolved=model_cfg.resolved_init_stds())
        C.update_index(sweep_dir, run_id, name, "running", overrides)
        peak = tc.peak_tflops or measure_matmul_tflops(
            device, torch.bfloat16 if precision == "bf16" else torch.float32)
        log.info("[%s] %s params (non-embedding %s), %s %s, data %s (%s train tokens), peak %.2f TFLOP/s",
                 name, f"{params['total']:,}", f"{params['non_embedding']:,}", device, precision,
                 cfg.data.name, f"{len(train_tokens):,}", peak)

        def run_eval(at_step: int, first: bool = False) -> float:
            ev = evaluate(model, val_tokens, block_size=block, batch_size=tc.eval_batch_size,
                          max_windows=tc.eval_windows, device=device, precision=precision,
                          logit_std=first)
            vl = ev["loss"]
            metrics = {"tokens": tokens, "val/loss": vl, "val/ppl": math.exp(min(vl, 700))}
            if first:
                metrics["init/logit_std"] = ev["logit_std"]
                state["init_val_loss"], state["init_logit_std"] = vl, ev["logit_std"]
            scalars, arrays = probe(model)
            metrics.update(scalars)
            save_npz_atomic(run_dir / "probes" / f"step_{at_step:07d}.npz", arrays)
            rec.log(metrics, at_step)
            if math.isfinite(vl):
                state["best_val_loss"] = vl if state["best_val_loss"] is None else min(state["best_val_loss"], vl)
            state["last_val_loss"] = vl
            rec.update_summary(step=at_step, tokens=tokens, init_val_loss=state["init_val_loss"],
                               init_logit_std=state["init_logit_std"], best_val_loss=state["best_val_loss"])
            bar_write(f"[{name}] step {at_step:>6d} | val loss {vl:.4f} | ppl {math.exp(min(vl, 700)):.4g}"
                      f" | tokens {tokens:,}")
            return vl

        bar = None
        if tc.progress:
            from tqdm.auto import tqdm
            bar = tqdm(total=tc.max_steps, initial=step, desc=name[:48], unit="step", dynamic_ncols=True)

        def bar_write(msg: str) -> None:
            (bar.write if bar is not None else log.info)(msg)

        if step == 0:
            run_eval(0, first=True)
        tokens_per_step = tc.batch_size * tc.grad_accum * block

        def accumulate(m, at_step: int) -> float:
            """Forward and backward over the step's micro-batches; returns the mean loss."""
            model.reset_grad_split()
            total = 0.0
            for micro in range(tc.grad_accum):
                x, y = sampler.get(at_step, micro)
                x, y = x.to(device), y.to(device)
                with autocast_ctx(precision, device):
                    _, loss = m(x, y, return_logits=False)
                (loss / tc.grad_accum).backward()
                total += loss.item()
            return total / tc.grad_accum

        window_s, window_tokens = 0.0, 0  # training time only: evals and checkpoints excluded
        with _graceful_sigterm():
            try:
                while step < tc.max_steps:
                    t_step = time.perf_counter()
                    lr = lr_at(step, oc, tc.max_steps)
                    for g in optimizer.param_groups:
                        g["lr"] = lr
                    # The gradient split costs two (V, d) accumulators: only on steps that log it.
                    logging_step = (step + 1) % tc.log_interval == 0 or step + 1 == tc.max_steps
                    model.track_grad_split = logging_step
                    try:
                        train_loss = accumulate(step_model, step)
                    except Exception as e:  # compilation fails on the first call, if at all
                        if step_model is model:
                            raise
                        log.warning("[%s] torch.compile failed (%s); continuing eagerly", name,
                                    scrub(f"{type(e).__name__}: {e}")[:300])
                        step_model = model
                        optimizer.zero_grad(set_to_none=True)
                        train_loss = accumulate(model, step)
                    grad_norm = torch.nn.utils.clip_grad_norm_(
                        model.parameters(), oc.grad_clip if oc.grad_clip > 0 else float("inf")).item()
                    if not (math.isfinite(train_loss) and math.isfinite(grad_norm)):
                        raise Diverged(f"non-finite {'loss' if not math.isfinite(train_loss) else 'gradient norm'}"
                                       f" at step {step} (loss {train_loss}, grad norm {grad_norm})")
                    optimizer.step()
                    optimizer.zero_grad(set_to_none=True)
                    step += 1
                    tokens += tokens_per_step
                    window_s += time.perf_counter() - t_step
                    window_tokens += tokens_per_step
                    if bar is not None:
                        bar.update(1)
                    if logging_step:
                        tps = window_tokens / max(window_s, 1e-9)
                        window_s, window_tokens = 0.0, 0
                        split = model.grad_split
                        rec.log({
                            "tokens": tokens, "train/loss": train_loss, "train/lr": lr,
                            "train/grad_norm": grad_norm, "train/tokens_per_s": tps,
                            "train/mfu": fpt * tps / (peak * 1e12),
                            # summed over micro-batches of loss / grad_accum: the scale of .grad
                            "train/grad_norm_in": split["in"].norm().item(),
                            "train/grad_norm_out": split["out"].norm().item(),
                        }, step)
                        if bar is not None:
                            bar.set_postfix(loss=f"{train_loss:.3f}", tok_s=f"{tps:,.0f}")
                    if step % tc.eval_interval == 0 or step == tc.max_steps:
                        vl = run_eval(step)
                        if not math.isfinite(vl):
                            raise Diverged(f"non-finite validation loss at step {step}")
                    if step % tc.ckpt_interval == 0 or step == tc.max_steps:
                        save_checkpoint(ckpt_path, model=model, optimizer=optimizer, step=step,
                                        tokens=tokens, state=state)
                        rec.update_summary(step=step, tokens=tokens)
            except KeyboardInterrupt as e:
                save_checkpoint(ckpt_path, model=model, optimizer=optimizer, step=step, tokens=tokens, state=state)
                msg = f"interrupted ({e or 'Ctrl-C'}) at step {step}; checkpoint saved, rerun the command to resume"
                rec.update_summary(status="failed", error=msg, step=step, tokens=tokens)
                C.update_index(sweep_dir, run_id, name, "failed", overrides)
                log.warning("[%s] %s", name, msg)
                raise
            finally:
                if bar is not None:
                    bar.close()
                model.track_grad_split = False

        test_loss = None
        if tc.test_eval:
            test_loss = evaluate(model, corpus.tokens("test"), block_size=block, batch_size=tc.eval_batch_size,
                                 max_windows=tc.eval_windows, device=device, precision=precision)["loss"]
            rec.log({"tokens": tokens, "test/loss": test_loss, "test/ppl": math.exp(min(test_loss, 700))}, step)
        rec.update_summary(status="finished", step=step, tokens=tokens, final_val_loss=state["last_val_loss"],
                           best_val_loss=state["best_val_loss"], test_loss=test_loss,
                           wall_time_s=time.time() - t_start)
        C.update_index(sweep_dir, run_id, name, "finished", overrides)
        log.info("[%s] finished: val %.4f (best %.4f), test %s", name, state["last_val_loss"],
                 state["best_val_loss"], f"{test_loss:.4f}" if test_loss is not None else "-")
        exit_code = 0
        return rec.summary
    except Diverged as e:
        msg = str(e)
        rec.update_summary(status="diverged", error=msg, diverged_at_step=step, step=step, tokens=tokens,
                           final_val_loss=state["last_val_loss"], best_val_loss=state["best_val_loss"])
        C.update_index(sweep_dir, run_id, name, "diverged", overrides)
        log.warning("[%s] diverged: %s", name, msg)
        exit_code = 0  # a diverged run is a result of the study, not a crash of the sweep
        return rec.summary
    except KeyboardInterrupt:
        exit_code = 255
        raise
    except Exception as e:
        msg = scrub(f"{type(e).__name__}: {e}")
        rec.update_summary(status="failed", error=msg)
        C.update_index(sweep_dir, run_id, name, "failed", overrides)
        log.error("[%s] failed: %s", name, msg)
        raise
    finally:
        rec.finish(exit_code)
