"""The one trainer shared by every run: its config, its state, and ``train(cfg)``.

``train`` is set-up -> loop -> finish. A run is identified by its config (records.run_id),
so calling it again with the same config skips a finished run and resumes an unfinished one
from its checkpoint with exactly the batches and losses an uninterrupted run would have had:
the batch order is a pure function of (seed, step) and the checkpoint holds the TrainState
and every RNG state. Status (records.Status): ``running`` while training (or killed),
``finished``, ``diverged`` (NaN/inf: a result, not an error), ``failed`` (an exception, or
Ctrl-C/SIGTERM after a checkpoint; a rerun resumes).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np
import torch
from omegaconf import OmegaConf

from tiedvsuntied import results as R
from tiedvsuntied.data import Corpus, DataConfig, check_data, prepare_data
from tiedvsuntied.data.batches import BatchSampler, iter_eval_batches
from tiedvsuntied.model import (
    GPT,
    ModelConfig,
    canonical_init_std,
    count_parameters,
    flops_per_token,
)
from tiedvsuntied.model import check_config as check_model
from tiedvsuntied.train import dist as D
from tiedvsuntied.train import finetune as FT
from tiedvsuntied.train.checkpoint import load_checkpoint, save_checkpoint
from tiedvsuntied.train.hardware import (
    Precision,
    autocast,
    measure_matmul_tflops,
    resolve_compile,
    resolve_device,
    resolve_precision,
)
from tiedvsuntied.train.optim import OptimConfig, build_optimizer, lr_at, untie, untie_step
from tiedvsuntied.train.probes import drift, probe

log = logging.getLogger(__name__)


class ConfigError(ValueError):
    """A config a run cannot start with; the message is one line naming the key."""


@dataclass
class TrainerConfig:
    max_steps: int = 2000
    batch_size: int = 8  # sequences per micro-batch
    grad_accum: int = 1  # micro-batches per optimizer step
    eval_interval: int = 100  # also at step 0 (the initial loss is a result) and the last step
    eval_windows: int = 0  # fixed validation/test windows, the same for every run; 0 = all that fit
    eval_batch_size: int = 16
    log_interval: int = 10
    ckpt_interval: int = 200  # also at the last step and on Ctrl-C / SIGTERM
    precision: Precision = Precision.auto
    compile: bool | None = None  # null: on CUDA, and on CPU for runs of >= 500 steps
    device: str = "auto"  # auto | cpu | cuda | cuda:N | cuda:free (a GPU no other job holds)
    loss_chunk: int = 1024  # rows per cross-entropy chunk; 0 materialises all logits
    test_eval: bool = True
    peak_tflops: float = 0.0  # MFU denominator; 0 measures this machine's matmul peak at start
    progress: bool = True


@dataclass
class Config:
    """The whole run, as Hydra composes it (conf/config.yaml). ``tie``, ``init_std`` and
    ``seed`` are top-level because they are what a sweep varies; the model node is the
    architecture only."""

    tie: bool = True  # lm_head.weight is wte.weight
    untie_at: float | None = (
        None  # tied until this step (>= 1) or fraction of training (< 1), then a copy
    )
    init_std: str = (
        "0.02"  # std of wte and the untied head: a number, or inv_sqrt_d (= n_embd^-0.5)
    )
    seed: int = 0  # model init, batch order, dropout: tied and untied share it
    sweep: str = "default"  # results/<sweep>/ and the W&B group
    results_dir: str = "results"
    init_from: str | None = (
        None  # fine-tune: a finished run (or its sweep) or a Hugging Face GPT-2 dir
    )
    finetune: FT.FinetuneConfig = field(default_factory=FT.FinetuneConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    wandb: R.WandbConfig = field(default_factory=R.WandbConfig)


@dataclass
class TrainState:
    """Everything of the loop that a checkpoint must carry besides weights and RNGs."""

    step: int = 0
    tokens: int = 0
    init_val_loss: float | None = None
    init_logit_std: float | None = None
    init_self_logit: float | None = None
    init_self_target_frac: float | None = None
    best_val_loss: float | None = None
    best_step: int | None = None
    last_val_loss: float | None = None
    clipped_steps: int = 0  # optimizer steps whose gradient norm was clipped

    def state_dict(self) -> dict:
        return dataclasses.asdict(self)

    def load_state_dict(self, d: dict) -> None:
        for k, v in d.items():
            setattr(self, k, v)


class Diverged(Exception):
    pass


# ---------------------------------------------------------------------------- checks

_SWEEP_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
# (key, valid?, what is valid): values the typed schema cannot refuse by type alone.
_RANGES = [
    ("seed", lambda v: v >= 0, ">= 0"),
    ("optim.lr", lambda v: v > 0, "> 0"),
    ("optim.min_lr_ratio", lambda v: 0 <= v <= 1, "in [0, 1]"),
    ("optim.warmup_steps", lambda v: v >= 0, ">= 0"),
    ("optim.weight_decay", lambda v: v >= 0, ">= 0"),
    ("optim.beta1", lambda v: 0 <= v < 1, "in [0, 1)"),
    ("optim.beta2", lambda v: 0 <= v < 1, "in [0, 1)"),
    ("optim.eps", lambda v: v > 0, "> 0"),
    ("optim.grad_clip", lambda v: v >= 0, ">= 0 (0 disables)"),
    *(
        (f"trainer.{k}", lambda v: v >= 1, ">= 1")
        for k in (
            "max_steps",
            "batch_size",
            "grad_accum",
            "eval_interval",
            "eval_batch_size",
            "log_interval",
            "ckpt_interval",
        )
    ),
    ("trainer.eval_windows", lambda v: v >= 0, ">= 0 (0 = the whole split)"),
    ("trainer.loss_chunk", lambda v: v >= 0, ">= 0 (0 = full logits)"),
    ("trainer.peak_tflops", lambda v: v >= 0, ">= 0 (0 = measure)"),
]


def check_config(cfg: Config, overrides: Sequence[str] = ()) -> None:
    """Refuse a config no run can start with, before any data is read or directory made. With
    ``init_from``, the config takes the start's shapes and tying (``overrides``: what the user
    set, which must not contradict them)."""
    tree = OmegaConf.structured(cfg)
    for key, ok, valid in _RANGES:
        value = OmegaConf.select(tree, key)
        if not ok(value):
            raise ConfigError(f"{key}={value} is invalid: it must be {valid}")
    if not _SWEEP_NAME.match(cfg.sweep):
        raise ConfigError(f"sweep={cfg.sweep!r} is invalid: use letters, digits, '.', '_' or '-'")
    try:
        if cfg.init_from:
            FT.adopt(cfg, FT.read_start(cfg.init_from), list(overrides))
        check_model(
            cfg.model, tie=cfg.tie, init_std=cfg.init_std
        )  # shapes and init stds, allocates nothing
        if untie_step(cfg.untie_at, cfg.trainer.max_steps) and not (cfg.tie and not cfg.init_from):
            raise ValueError(
                f"untie_at={cfg.untie_at} needs tie=true and no init_from (finetune.untie unties a start)"
            )
        resolve_device(D.device(cfg.trainer.device))
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if cfg.trainer.batch_size % D.world_size():
        raise ConfigError(
            f"trainer.batch_size={cfg.trainer.batch_size} does not split over {D.world_size()} "
            f"processes (torchrun): use a multiple of {D.world_size()}"
        )
    check_data(cfg.data)
    _check_writable(Path(cfg.results_dir))


def _check_writable(path: Path) -> None:
    existing = next(p for p in [path, *path.absolute().parents] if p.exists())
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(
            f"results_dir={str(path)!r} is not writable ({existing} is not a writable "
            f"directory): choose another results_dir"
        )


# ---------------------------------------------------------------------------- evaluation


@torch.no_grad()
def evaluate(
    model, tokens, block_size: int, tc: TrainerConfig, device, precision, first=False
) -> dict:
    """The loss of each of the split's fixed windows (the same windows every time, every run:
    paired comparisons and bootstrap intervals over them need that) and their mean. ``first``
    (step 0): also the logits' std and the mean logit of each input token at its own position
    (tied, h·e_x: at a large init std it dominates the initial loss)."""
    model.eval()
    windows, repeats, out = [], [], {}
    for i, (x, y) in enumerate(
        iter_eval_batches(tokens, block_size, tc.eval_batch_size, tc.eval_windows)
    ):
        x, y = x.to(device), y.to(device)
        with autocast(precision, device):
            logits, loss = model(
                x, y, loss_chunk=tc.loss_chunk, return_logits=first and i == 0, reduction="none"
            )
        if logits is not None:
            out["logit_std"] = logits.std().item()
            out["self_logit"] = logits.gather(-1, x[..., None]).mean().item()
        windows.append(loss.float().mean(1))
        repeats.append((x == y).float().mean(1))  # tied: the target is the input token itself
    model.train()
    w = torch.cat(windows).cpu().numpy()
    if first:
        out["self_target_frac"] = torch.cat(repeats).mean().item()
    return {
        **out,
        "loss": float(w.mean()),
        "windows": w.astype(np.float32),
    }  # windows are equally long


# ---------------------------------------------------------------------------- the run


@dataclass
class Run:
    """One run being trained: what the loop reads and updates."""

    cfg: Config
    run_dir: Path
    summary: R.RunSummary
    model: GPT
    optimizer: torch.optim.Optimizer
    sampler: BatchSampler
    corpus: Corpus
    device: torch.device
    precision: Precision
    state: TrainState
    step_model: torch.nn.Module  # the compiled model, or the model itself
    peak_tflops: float
    freq: np.ndarray  # token counts of the train split: the probes' vocabulary strata
    derived: dict  # values the config implies on this machine (config.yaml's "derived")
    resumed_from: int | None = None
    start_rows: dict | None = None  # fine-tuning: E (and H) at step 0, for drift
    retain: Corpus | None = None  # fine-tuning from a run of this harness: its data (retention)
    mlog: R.MetricsLog | None = None
    bar: object = None

    def write(self, msg: str) -> None:
        (self.bar.write if self.bar is not None and not self.bar.disable else log.info)(msg)


def resolved_config(cfg: Config) -> dict:
    """The config as a plain dict, init_std in its canonical spelling (run identity, config.yaml)."""
    tree = OmegaConf.to_container(OmegaConf.structured(cfg), enum_to_str=True)
    tree["init_std"] = canonical_init_std(cfg.init_std)
    return tree


def train(cfg: Config, overrides: list | None = None) -> R.RunSummary:
    """Train the run ``cfg`` describes (skip it if done, resume it if not); return its summary.
    Raises ConfigError/DataError before anything is written, and re-raises a failure after
    recording it."""
    from filelock import FileLock, Timeout

    check_config(cfg, overrides or ())
    D.init(resolve_device(D.device(cfg.trainer.device)))
    corpus = prepare_data(cfg.data)  # under torchrun one rank builds the cache, the others wait
    if cfg.init_from and corpus.vocab_size != cfg.model.vocab_size:
        raise ConfigError(
            f"init_from={cfg.init_from} has {cfg.model.vocab_size:,} tokens but data.encoding="
            f"{cfg.data.encoding} data.vocab={cfg.data.vocab.value} gives {corpus.vocab_size:,}: "
            "fine-tune with the start's tokenizer"
        )
    config = resolved_config(cfg)
    name = R.run_name(cfg.tie, config["init_std"], cfg.model.name, cfg.seed)
    run_id = R.run_id(config, name, corpus.fingerprint)
    sweep_dir = Path(cfg.results_dir) / cfg.sweep
    run_dir = sweep_dir / run_id
    summary = R.RunSummary(
        run_id=run_id,
        name=name,
        sweep=cfg.sweep,
        tie=cfg.tie,
        init_std=config["init_std"],
        model=cfg.model.name,
        seed=cfg.seed,
        n_layer=cfg.model.n_layer,
        n_head=cfg.model.n_head,
        n_embd=cfg.model.n_embd,
        vocab_size=corpus.vocab_size,
        block_size=cfg.model.block_size,
        t5_rescale=cfg.model.t5_rescale,
        data=cfg.data.name,
        data_fingerprint=corpus.fingerprint,
        max_steps=cfg.trainer.max_steps,
        untie_at=cfg.untie_at,
        untie_step=untie_step(cfg.untie_at, cfg.trainer.max_steps),
    )
    if not D.is_main():  # rank 0 decides whether the run trains; the others follow it
        return _train_worker(cfg, corpus, config, summary, run_dir) if D.from_main(None) else None
    run_dir.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(run_dir / ".lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        log.warning("[%s] is being trained by another process; skipping", name)
        return D.from_main(False) or R.read_summary(run_dir)
    try:
        previous = R.read_summary(run_dir)
        entry = R.IndexEntry(
            name=name, status=R.Status.running, path=run_id, overrides=list(overrides or [])
        )
        if previous and previous.status.done:
            log.info(
                "[%s] already %s at step %d; skipping (delete %s to train it again)",
                name,
                previous.status.value,
                previous.step,
                run_dir,
            )
            entry.status = previous.status
            R.update_index(sweep_dir, run_id, entry)
            return D.from_main(False) or previous
        summary.started_at = previous.started_at if previous else summary.started_at
        D.from_main(True)
        return _train_run(cfg, corpus, config, summary, run_dir, entry)
    finally:
        lock.release()


def _train_worker(cfg, corpus, config, summary, run_dir) -> None:
    """Ranks > 0 of a torchrun job: rank 0's set-up and steps, without records (rank 0 keeps them)."""
    with contextlib.suppress(Diverged):  # rank 0 records it
        _loop(_setup(cfg, corpus, config, summary, run_dir))


def _train_run(cfg, corpus, config, summary, run_dir, entry) -> R.RunSummary:
    """Decides the run's status, whatever happens, and always closes the metrics log and W&B."""
    t0 = time.time()
    R.atomic_write(
        run_dir / "config.yaml", OmegaConf.to_yaml(config)
    )  # "derived" is added by _setup
    summary.write(run_dir)
    try:
        run = _setup(cfg, corpus, config, summary, run_dir)
        with R.MetricsLog(run_dir, run.resumed_from) as run.mlog:
            mode = run.mlog.start_wandb(
                cfg.wandb,
                run_id=R.wandb_id(cfg.sweep, summary.run_id),
                name=summary.name,
                group=cfg.sweep,
                run_dir=run_dir,
                config={**config, "derived": run.derived},
            )
            summary.wandb_mode, summary.wandb_run_id = (
                mode.value,
                R.wandb_id(cfg.sweep, summary.run_id),
            )
            if run.mlog.wandb is not None:
                summary.wandb_dir = str(Path(run.mlog.wandb.dir).parent)
            R.update_index(run_dir.parent, summary.run_id, entry)
            try:
                _loop(run)
                _finish(run)
            except Diverged as e:
                summary.status, summary.error, summary.diverged_at_step = (
                    R.Status.diverged,
                    str(e),
                    run.state.step,
                )
                log.warning("[%s] diverged: %s", summary.name, e)
            summary.wall_time_s = time.time() - t0
            run.mlog.failed = False
            run.mlog.summary(summary.to_dict())
        return summary
    except KeyboardInterrupt as e:
        summary.status = R.Status.failed
        summary.error = (
            f"interrupted ({e or 'Ctrl-C'}) at step {summary.step}; rerun the command to resume"
        )
        raise
    except Exception as e:
        summary.status, summary.error = R.Status.failed, R.scrub(f"{type(e).__name__}: {e}")
        log.error("[%s] failed: %s", summary.name, summary.error)
        raise
    finally:
        summary.write(run_dir)
        entry.status = summary.status
        R.update_index(run_dir.parent, summary.run_id, entry)


def _setup(cfg: Config, corpus: Corpus, config: dict, summary: R.RunSummary, run_dir: Path) -> Run:
    tc = cfg.trainer
    device, main = resolve_device(D.device(tc.device)), D.is_main()
    precision = resolve_precision(tc.precision, device)
    if (
        device.type == "cuda"
    ):  # TF32 for the fp32 matmuls autocast leaves (and all of them in fp32 runs)
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    train_tokens = corpus.tokens("train")
    sampler = BatchSampler(train_tokens, cfg.model.block_size, tc.batch_size, cfg.seed)
    for split in ("val", "test") if tc.test_eval else ("val",):  # a short split fails now, named
        next(iter_eval_batches(corpus.tokens(split), cfg.model.block_size, 1, 1))
    model_cfg = dataclasses.replace(cfg.model, vocab_size=corpus.vocab_size)
    torch.manual_seed(cfg.seed)  # dropout; the init has its own per-tensor generators
    start = FT.read_start(cfg.init_from) if cfg.init_from else None
    model = (
        FT.build(start, cfg, cfg.seed)
        if start
        else GPT(model_cfg, tie=cfg.tie, init_std=cfg.init_std, seed=cfg.seed)
    ).to(device)
    rows = FT.start_rows(model) if start else None  # before a resume changes them
    optimizer = build_optimizer(model, cfg.optim)
    params = {
        **count_parameters(model),
        "trainable": sum(p.numel() for p in model.parameters() if p.requires_grad),
    }
    state, switch = TrainState(), untie_step(cfg.untie_at, tc.max_steps)

    def layout(ckpt):  # a checkpoint from after the switch holds an untied model and its optimizer
        if switch and model.tie and ckpt["train_state"]["step"] >= switch:
            untie(model, optimizer)

    used = (
        load_checkpoint(run_dir / "checkpoints", model, optimizer, state, layout) if main else None
    )
    D.from_main(None)  # the other ranks read the checkpoint after rank 0 has set a bad one aside
    if not main:
        used = load_checkpoint(run_dir / "checkpoints", model, optimizer, state, layout)
        torch.manual_seed(cfg.seed + 1_000_003 * D.rank() + state.step)  # its own dropout stream
    compiled = resolve_compile(tc.compile, device, tc.max_steps)
    peak = tc.peak_tflops or measure_matmul_tflops(
        device, torch.bfloat16 if precision == Precision.bf16 else torch.float32
    )
    derived = {
        "vocab_size": corpus.vocab_size,
        "params": params,
        "flops_per_token": flops_per_token(model),
        "init_std_resolved": model.init_stds(),
        "device": str(device),
        "precision": precision.value,
        "compiled": compiled,
        "peak_tflops": peak,
        "data_fingerprint": corpus.fingerprint,
        "tokens_per_step": tc.batch_size * tc.grad_accum * cfg.model.block_size,
    }
    freq = corpus.token_freq("train")
    if main:
        R.atomic_write(run_dir / "config.yaml", OmegaConf.to_yaml({**config, "derived": derived}))
        np.save(run_dir / "token_freq.npy", freq)
    stds = model.init_stds()
    summary.update(
        params=params,
        flops_per_token=derived["flops_per_token"],
        device=str(device),
        init_std_resolved={"emb": stds["emb"], "head": stds["head"]},
        precision=precision.value,
        compiled=compiled,
        peak_tflops=peak,
        seen_vocab_frac=float((freq > 0).mean()),
        resumed_from_step=state.step if used else None,
        status=R.Status.running,
        error=None,
        params_untied=count_parameters(model) if switch and not model.tie else None,
    )
    _sync(summary, state)
    if main:
        summary.write(run_dir)
    if used:
        log.info("[%s] resuming from step %d (%s)", summary.name, state.step, used)
    log.info(
        "[%s] %s params (non-embedding %s), %s %s, %s train tokens, peak %.2f TFLOP/s",
        summary.name,
        f"{params['total']:,}",
        f"{params['non_embedding']:,}",
        device,
        precision.value,
        f"{len(train_tokens):,}",
        peak,
    )
    return Run(
        cfg=cfg,
        run_dir=run_dir,
        summary=summary,
        model=model,
        optimizer=optimizer,
        sampler=sampler,
        corpus=corpus,
        device=device,
        precision=precision,
        state=state,
        step_model=D.wrap(torch.compile(model) if compiled else model),
        peak_tflops=peak,
        freq=freq,
        derived=derived,
        resumed_from=state.step if used else None,
        start_rows=rows,
        retain=prepare_data(FT.retain_data(start)) if start and start.data and main else None,
    )


def _accumulate(run: Run, grad_split: dict | None) -> torch.Tensor:
    """Forward and backward over the step's micro-batches; the mean loss, a tensor (reading it
    waits for the GPU: the loop does that once per step). A compilation failure (it shows on
    the first call) falls back to eager once, with a warning."""
    tc, pin = run.cfg.trainer, run.device.type == "cuda"  # pinned: the copy overlaps with compute
    try:
        total = torch.zeros((), device=run.device)
        for micro in range(tc.grad_accum):  # this rank's share of the global micro-batch
            x, y = (
                (D.shard(t).pin_memory() if pin else D.shard(t)).to(run.device, non_blocking=True)
                for t in run.sampler.get(run.state.step, micro)
            )
            with D.no_sync(run.step_model, last=micro == tc.grad_accum - 1):
                with autocast(run.precision, run.device):
                    _, loss = run.step_model(
                        x, y, loss_chunk=tc.loss_chunk, return_logits=False, grad_split=grad_split
                    )
                (loss / tc.grad_accum).backward()
            total += loss.detach().float()
        return D.mean_(total / tc.grad_accum)
    except Exception as e:
        if not run.summary.compiled:
            raise
        log.warning(
            "[%s] torch.compile failed (%s); continuing eagerly",
            run.summary.name,
            R.scrub(f"{type(e).__name__}: {e}")[:300],
        )
        run.step_model = D.wrap(run.model)
        run.summary.compiled = False
        run.optimizer.zero_grad(set_to_none=True)
        if grad_split is not None:
            grad_split.clear()
        return _accumulate(run, grad_split)


def _loop(run: Run) -> None:
    tc, oc, st = run.cfg.trainer, run.cfg.optim, run.state
    tokens_per_step = tc.batch_size * tc.grad_accum * run.cfg.model.block_size
    fpt, main = run.summary.flops_per_token, D.is_main()
    if st.step == 0 and main:
        _evaluate(run, first=True)
    window_s, window_steps, window_clipped = (
        0.0,
        0,
        0,
    )  # training time only: no evaluations, checkpoints
    saved = st.step if run.resumed_from is not None else None  # the step of the newest checkpoint
    from tqdm.auto import tqdm

    run.bar = tqdm(
        total=tc.max_steps,
        initial=st.step,
        desc=run.summary.name[:48],
        unit="step",
        dynamic_ncols=True,
        disable=not (tc.progress and main),
    )
    with D.signals(hold=False), run.bar:
        try:
            while st.step < tc.max_steps:
                t0 = time.perf_counter()
                lr = lr_at(st.step, oc, tc.max_steps)
                for g in run.optimizer.param_groups:
                    g["lr"] = lr
                logging = (st.step + 1) % tc.log_interval == 0 or st.step + 1 == tc.max_steps
                split = {} if logging else None  # two (V, d) buffers: only on steps that log them
                loss = _accumulate(run, split)
                for side in (
                    split or ()
                ):  # each rank tapped its share: the global split is their mean
                    D.mean_(split[side])
                grad_norm = torch.nn.utils.clip_grad_norm_(
                    run.model.parameters(), oc.grad_clip or math.inf
                )
                loss, grad_norm = torch.stack(
                    [loss, grad_norm.float()]
                ).tolist()  # the step's one GPU sync
                if not (math.isfinite(loss) and math.isfinite(grad_norm)):
                    raise Diverged(
                        f"non-finite loss or gradient at step {st.step} (loss {loss}, grad norm {grad_norm})"
                    )
                clipped = int(0 < oc.grad_clip < grad_norm)
                st.clipped_steps, window_clipped = (
                    st.clipped_steps + clipped,
                    window_clipped + clipped,
                )
                run.optimizer.step()
                run.optimizer.zero_grad(set_to_none=True)
                st.step, st.tokens = st.step + 1, st.tokens + tokens_per_step
                if st.step == untie_step(run.cfg.untie_at, tc.max_steps):
                    _untie(run)
                window_s, window_steps = window_s + time.perf_counter() - t0, window_steps + 1
                run.bar.update(1)
                if logging and main:
                    tps = window_steps * tokens_per_step / max(window_s, 1e-9)
                    run.mlog.log(
                        {
                            "tokens": st.tokens,
                            "train/loss": loss,
                            "train/lr": lr,
                            "train/tokens_per_s": tps,
                            "train/grad_norm": grad_norm,
                            "train/mfu": fpt * tps / (run.peak_tflops * 1e12 * D.world_size()),
                            "train/clip_frac": window_clipped / window_steps,
                            # pre-clip, summed over micro-batches of loss / grad_accum: the scale of .grad
                            **{
                                f"train/grad_norm_{side}": g.norm().item()
                                for side, g in split.items()
                            },
                        },
                        st.step,
                    )
                    run.bar.set_postfix(loss=f"{loss:.3f}", tok_s=f"{tps:,.0f}")
                    window_s, window_steps, window_clipped = 0.0, 0, 0
                if st.step % tc.eval_interval == 0 or st.step == tc.max_steps:
                    if not math.isfinite(D.from_main(_evaluate(run) if main else None)):
                        raise Diverged(f"non-finite validation loss at step {st.step}")
                if main and (st.step % tc.ckpt_interval == 0 or st.step == tc.max_steps):
                    with D.signals(hold=True):
                        save_checkpoint(run.run_dir / "checkpoints", run.model, run.optimizer, st)
                        saved = st.step
        except KeyboardInterrupt as e:
            if (
                main and saved != st.step
            ):  # a second copy of this step would rotate the older one out of prev.pt
                with D.signals(hold=True):
                    save_checkpoint(run.run_dir / "checkpoints", run.model, run.optimizer, st)
            run.summary.step, run.summary.tokens = st.step, st.tokens
            if getattr(
                e, "then", None
            ):  # saved: now submitit may requeue the job, which resumes here
                e.then()
            raise


def _untie(run: Run) -> None:
    """The scheduled switch: from here on the head is a parameter of its own."""
    untie(run.model, run.optimizer)
    run.step_model = D.wrap(torch.compile(run.model) if run.summary.compiled else run.model)
    run.summary.params_untied = count_parameters(run.model)
    if D.is_main():
        log.info(
            "[%s] untied at step %d: %s parameters",
            run.summary.name,
            run.state.step,
            f"{run.summary.params_untied['total']:,}",
        )
        run.mlog.log(
            {f"params/{k}": v for k, v in run.summary.params_untied.items()}, run.state.step
        )


def _sync(s: R.RunSummary, st: TrainState) -> None:
    """The summary's copy of the loop's numbers."""
    s.update(
        step=st.step,
        tokens=st.tokens,
        init_val_loss=st.init_val_loss,
        init_logit_std=st.init_logit_std,
        init_self_logit=st.init_self_logit,
        init_self_target_frac=st.init_self_target_frac,
        final_val_loss=st.last_val_loss,
        best_val_loss=st.best_val_loss,
        best_step=st.best_step,
        clip_frac=st.clipped_steps / st.step if st.step else None,
    )


def _evaluate(run: Run, first: bool = False) -> float:
    """Validation loss (per window, beside the probes) and probes at this step, into metrics,
    probes/ and the summary. A new best keeps its weights (checkpoints/best.pt): _finish takes
    their test loss, early stopping's, without evaluating the test split during training."""
    st, s, tc = run.state, run.summary, run.cfg.trainer
    ev = evaluate(
        run.model,
        run.corpus.tokens("val"),
        run.cfg.model.block_size,
        tc,
        run.device,
        run.precision,
        first=first,
    )
    vl = ev["loss"]
    metrics = {"tokens": st.tokens, "val/loss": vl, "val/ppl": math.exp(min(vl, 700))}
    if first:
        st.init_val_loss, st.init_logit_std, st.init_self_logit = (
            vl,
            ev["logit_std"],
            ev["self_logit"],
        )
        st.init_self_target_frac = ev["self_target_frac"]
        metrics.update(
            {f"init/{k}": ev[k] for k in ("logit_std", "self_logit", "self_target_frac")}
        )
    if math.isfinite(vl) and (st.best_val_loss is None or vl < st.best_val_loss):
        st.best_val_loss, st.best_step = vl, st.step
        if tc.test_eval:
            weights = {"step": st.step, "model": run.model.state_dict()}
            R.atomic_write(
                run.run_dir / "checkpoints" / "best.pt", lambda f: torch.save(weights, f)
            )
    scalars, arrays = probe(run.model, run.freq)
    if run.start_rows is not None:
        scalars.update(drift(run.model, run.start_rows, run.freq))
    if run.retain is not None:  # the start's own validation split
        scalars["retain/loss"] = evaluate(
            run.model,
            run.retain.tokens("val"),
            run.cfg.model.block_size,
            tc,
            run.device,
            run.precision,
        )["loss"]
    _save_arrays(run, st.step, val_window_loss=ev["windows"], **arrays)
    run.mlog.log({**metrics, **scalars}, st.step)
    st.last_val_loss = vl
    _sync(s, st)
    s.write(run.run_dir)
    run.write(
        f"[{s.name}] step {st.step:>6d} | val loss {vl:.4f} | ppl {math.exp(min(vl, 700)):.4g} | "
        f"tokens {st.tokens:,}"
    )
    return vl


def _save_arrays(run: Run, step: int, **arrays) -> None:
    """Add arrays to probes/step_<step>.npz (written whole, atomically)."""
    path = run.run_dir / "probes" / f"step_{step:07d}.npz"
    if path.exists() and "val_window_loss" not in arrays:
        with np.load(path) as z:
            arrays = {**{k: z[k] for k in z.files}, **arrays}
    R.atomic_write(path, lambda f: np.savez(f, **arrays))


def _test(run: Run, step: int) -> float:
    """The test loss of the model as it is, its windows beside step ``step``'s probes."""
    ev = evaluate(
        run.model,
        run.corpus.tokens("test"),
        run.cfg.model.block_size,
        run.cfg.trainer,
        run.device,
        run.precision,
    )
    _save_arrays(run, step, test_window_loss=ev["windows"])
    return ev["loss"]


def _finish(run: Run) -> None:
    """Test loss of the final weights and of the best ones, status ``finished``, and only the
    final weights kept: resuming is over, so the optimizer state (2/3 of a checkpoint) goes."""
    s, st, ckpt_dir = run.summary, run.state, run.run_dir / "checkpoints"
    if run.cfg.trainer.test_eval:
        s.test_loss = _test(run, st.step)
    weights = {"model": run.model.state_dict(), "train_state": st.state_dict()}
    R.atomic_write(
        ckpt_dir / "model.pt", lambda f: torch.save(weights, f)
    )  # before best.pt overwrites them
    if run.cfg.trainer.test_eval:
        best_path = ckpt_dir / "best.pt"
        best = (
            torch.load(best_path, map_location="cpu", weights_only=True)
            if best_path.exists()
            else {}
        )
        if st.best_step != st.step and best.get("step") == st.best_step:
            run.model.load_state_dict(best["model"])
            s.test_loss_at_best = _test(run, st.best_step)
        else:  # the last step is the best, or best.pt is not that step's (a resume that diverged from it)
            s.test_loss_at_best = s.test_loss if st.best_step == st.step else None
        run.mlog.log(
            {
                "tokens": st.tokens,
                "test/loss": s.test_loss,
                "test/ppl": math.exp(min(s.test_loss, 700)),
                "test/loss_at_best": s.test_loss_at_best,
            },
            st.step,
        )
    _sync(s, st)
    s.status = R.Status.finished
    s.write(run.run_dir)
    for name in ("last.pt", "prev.pt", "best.pt"):
        (ckpt_dir / name).unlink(missing_ok=True)
    log.info(
        "[%s] finished: val %.4f (best %.4f at step %s), test %s (at the best step %s)",
        s.name,
        st.last_val_loss,
        st.best_val_loss,
        st.best_step,
        s.test_loss,
        s.test_loss_at_best,
    )
