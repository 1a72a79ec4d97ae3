"""Setting a run up on this process: data order, model, optimizer, the checkpoint to resume
from and the numbers the config implies (Derived)."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path

import torch

from tiedvsuntied.data.batches import BatchSampler
from tiedvsuntied.data.cache import Corpus, prepare_data
from tiedvsuntied.model.accounting import count_parameters, flops_per_token
from tiedvsuntied.model.gpt import GPT
from tiedvsuntied.results.records import RunSummary
from tiedvsuntied.train import dist
from tiedvsuntied.train.checkpoint import CheckpointMismatch, Checkpoints
from tiedvsuntied.train.config import OptimConfig, Precision, Sampling, Schedule
from tiedvsuntied.train.finetune import build, retain_data, start_rows
from tiedvsuntied.train.hardware import measure_matmul_tflops, resolve_compile, resolve_precision
from tiedvsuntied.train.optim import build_optimizer, lr_scales, untie
from tiedvsuntied.train.plan import RunPlan
from tiedvsuntied.train.state import Derived, Run, TrainState

log = logging.getLogger(__name__)


def build_model(plan: RunPlan, vocab_size: int) -> GPT:
    """A new model of the config's shapes, or the fine-tuning start, on the plan's device."""
    cfg = plan.cfg
    torch.manual_seed(cfg.seed)  # dropout; the init has its own per-tensor generators
    if plan.start is not None:
        return build(plan.start, cfg, cfg.seed).to(plan.device)
    model_cfg = dataclasses.replace(cfg.model, vocab_size=vocab_size)
    model = GPT(model_cfg, tie=cfg.tie, init_std=cfg.init_std, head=cfg.head, seed=cfg.seed)
    return model.to(plan.device)


def resume_on_every_rank(
    checkpoints: Checkpoints,
    model,
    optimizer,
    state: TrainState,
    schedule: Schedule,
    optim: OptimConfig,
) -> Path | None:
    """Rank 0 reads the newest usable checkpoint and tells the others which file it used, or
    why the run cannot resume (CheckpointMismatch); then they read that file."""

    def layout(ckpt):  # a checkpoint from after the switch holds an untied model and optimizer
        if schedule.untie_step and model.tie and ckpt["train_state"]["step"] >= schedule.untie_step:
            untie(model, optimizer, optim)

    used, error = None, None
    if dist.is_main():
        try:
            used = checkpoints.load(model, optimizer, state, layout)
        except CheckpointMismatch as e:
            error = str(e)
    used, error = dist.from_main((used, error))
    if error is not None:
        raise CheckpointMismatch(error)
    if not dist.is_main() and used is not None:
        checkpoints.load(model, optimizer, state, layout, only=used)
    return used


def train_sampler(cfg, corpus: Corpus) -> BatchSampler:
    """The training batches: the same for every run of one seed (tied and untied alike)."""
    trainer = cfg.trainer
    once = trainer.sampling == Sampling.once
    return BatchSampler(
        corpus.tokens("train"),
        cfg.model.block_size,
        trainer.batch_size,
        cfg.seed,
        once=once,
        grad_accum=trainer.grad_accum,
    )


@dataclass
class Data:
    """The tokens a run reads: its corpus, and for a fine-tuning start of this harness the
    start's own (whose validation loss is the retention; rank 0 alone reads it)."""

    corpus: Corpus
    retain: Corpus | None = None


def build_run(plan: RunPlan, data: Data, record: RunSummary, run_dir: Path) -> Run:
    """The run ready for its first (or next) step; a CheckpointMismatch before anything is
    written if its checkpoint does not fit the code."""
    cfg, trainer, device, corpus = plan.cfg, plan.cfg.trainer, plan.device, data.corpus
    if trainer.threads:
        torch.set_num_threads(trainer.threads)
    if device.type == "cuda":  # TF32 for the fp32 matmuls autocast leaves (all, in fp32 runs)
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    sampler = train_sampler(cfg, corpus)
    model = build_model(plan, corpus.vocab_size)
    rows = start_rows(model) if plan.start else None  # before a resume changes them
    optimizer = build_optimizer(model, cfg.optim)
    params = {
        **count_parameters(model),
        "trainable": sum(p.numel() for p in model.parameters() if p.requires_grad),
    }
    state, schedule = TrainState(), plan.schedule
    checkpoints = Checkpoints(run_dir / "checkpoints")
    used = resume_on_every_rank(checkpoints, model, optimizer, state, schedule, cfg.optim)
    untied = bool(schedule.untie_step) and not model.tie  # resumed past the switch
    record.params_untied = count_parameters(model) if untied else None
    if not dist.is_main():  # its own dropout stream
        torch.manual_seed(cfg.seed + 1_000_003 * dist.rank() + state.step)
    precision = resolve_precision(trainer.precision, device)
    run = Run(
        cfg=cfg,
        schedule=schedule,
        run_dir=run_dir,
        record=record,
        derived=derive(plan, corpus, model, optimizer, params, precision),
        model=model,
        optimizer=optimizer,
        sampler=sampler,
        corpus=corpus,
        device=device,
        state=state,
        checkpoints=checkpoints,
        freq=corpus.token_freq("train"),
        resumed_from=state.step if used else None,
        start_rows=rows,
        retain=data.retain,
    )
    log_start(run, used)
    return run


def derive(plan: RunPlan, corpus: Corpus, model, optimizer, params, precision) -> Derived:
    """What the config implies on this machine (Derived)."""
    cfg, trainer, device = plan.cfg, plan.cfg.trainer, plan.device
    dtype = torch.bfloat16 if precision == Precision.bf16 else torch.float32
    return Derived(
        vocab_size=corpus.vocab_size,
        params=params,
        flops_per_token=flops_per_token(model),
        init_std_resolved=model.init_stds(),
        lr_scales=lr_scales(optimizer),
        device=str(device),
        world_size=dist.world_size(),
        threads=torch.get_num_threads(),
        precision=precision.value,
        compiled=resolve_compile(trainer.compile, device, trainer.max_steps),
        peak_tflops=trainer.peak_tflops or measure_matmul_tflops(device, dtype),
        data_fingerprint=corpus.fingerprint,
        tokens_per_step=trainer.batch_size * trainer.grad_accum * cfg.model.block_size,
    )


def log_start(run: Run, used: Path | None) -> None:
    if used:
        log.info("[%s] resuming from step %d (%s)", run.record.name, run.state.step, used)
    log.info(
        "[%s] %s params (non-embedding %s), %s %s, %s train tokens, peak %.2f TFLOP/s",
        run.record.name,
        f"{run.derived.params['total']:,}",
        f"{run.derived.params['non_embedding']:,}",
        run.device,
        run.derived.precision,
        f"{len(run.corpus.tokens('train')):,}",
        run.derived.peak_tflops,
    )


def retain_corpus(plan: RunPlan) -> Corpus | None:
    """Fine-tuning from a run of this harness: its data, whose validation loss rank 0 records."""
    start = plan.start
    if start is None or start.data is None or not dist.is_main():
        return None
    return prepare_data(retain_data(start))
