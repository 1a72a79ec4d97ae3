"""Setting a run up on this process: data order, model (new, or a fine-tuning start),
optimizer, the checkpoint to resume from, compilation and the numbers the config implies."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import torch

from tiedvsuntied.data.batches import BatchSampler, iter_eval_batches
from tiedvsuntied.data.cache import Corpus, prepare_data
from tiedvsuntied.model.accounting import count_parameters, flops_per_token
from tiedvsuntied.model.gpt import GPT
from tiedvsuntied.results import RunSummary, Status
from tiedvsuntied.train import dist
from tiedvsuntied.train.checkpoint import CheckpointMismatch, Checkpoints
from tiedvsuntied.train.config import OptimConfig, RunPlan, Sampling
from tiedvsuntied.train.finetune import build, retain_data, start_rows
from tiedvsuntied.train.hardware import (
    Precision,
    measure_matmul_tflops,
    resolve_compile,
    resolve_precision,
)
from tiedvsuntied.train.optim import build_optimizer, lr_scales, untie
from tiedvsuntied.train.state import Run, TrainState

log = logging.getLogger(__name__)


def build_model(plan: RunPlan, vocab_size: int) -> GPT:
    """A new model of the config's shapes, or the fine-tuning start, on the plan's device."""
    cfg = plan.cfg
    torch.manual_seed(cfg.seed)  # dropout; the init has its own per-tensor generators
    if plan.start is not None:
        return build(plan.start, cfg, cfg.seed).to(plan.device)
    model_cfg = dataclasses.replace(cfg.model, vocab_size=vocab_size)
    return GPT(model_cfg, tie=cfg.tie, init_std=cfg.init_std, seed=cfg.seed).to(plan.device)


def resume_on_every_rank(
    checkpoints: Checkpoints,
    model,
    optimizer,
    state: TrainState,
    switch: int | None,
    optim: OptimConfig,
) -> Path | None:
    """Rank 0 reads the newest usable checkpoint (setting aside one it cannot read) and tells
    the others which file it used, or why the run cannot resume; then they read that file.
    A checkpoint whose optimizer has other groups (one from before the named groups had two)
    is a CheckpointMismatch."""

    def layout(ckpt):  # a checkpoint from after the switch holds an untied model and optimizer
        if switch and model.tie and ckpt["train_state"]["step"] >= switch:
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


def derived_numbers(run: Run, params: dict) -> dict:
    """What the config implies on this machine: config.yaml's ``derived`` and W&B's."""
    cfg = run.cfg
    return {
        "vocab_size": run.corpus.vocab_size,
        "params": params,
        "flops_per_token": flops_per_token(run.model),
        "init_std_resolved": run.model.init_stds(),
        "lr_scales": lr_scales(run.optimizer),  # each group's multiple of the scheduled lr
        "device": str(run.device),
        "world_size": dist.world_size(),
        "threads": torch.get_num_threads(),
        "precision": run.precision.value,
        "compiled": run.record.compiled,
        "peak_tflops": run.peak_tflops,
        "data_fingerprint": run.corpus.fingerprint,
        "tokens_per_step": cfg.trainer.batch_size * cfg.trainer.grad_accum * cfg.model.block_size,
    }


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


def build_run(plan: RunPlan, corpus: Corpus, record: RunSummary, run_dir: Path) -> Run:
    """The run ready for its first (or next) step; raises CheckpointMismatch before
    anything is written if its checkpoint does not fit the code."""
    cfg, trainer, device = plan.cfg, plan.cfg.trainer, plan.device
    if trainer.threads:
        torch.set_num_threads(trainer.threads)
    precision = resolve_precision(trainer.precision, device)
    if device.type == "cuda":  # TF32 for the fp32 matmuls autocast leaves (all, in fp32 runs)
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    for split in ("val", "test") if trainer.test_eval else ("val",):  # a short split: now
        next(iter_eval_batches(corpus.tokens(split), cfg.model.block_size, 1, 1))
    model = build_model(plan, corpus.vocab_size)
    rows = start_rows(model) if plan.start else None  # before a resume changes them
    optimizer = build_optimizer(model, cfg.optim)
    params = {
        **count_parameters(model),
        "trainable": sum(p.numel() for p in model.parameters() if p.requires_grad),
    }
    state = TrainState()
    checkpoints = Checkpoints(run_dir / "checkpoints", trainer.ckpt_interval, trainer.max_steps)
    used = resume_on_every_rank(checkpoints, model, optimizer, state, record.untie_step, cfg.optim)
    if not dist.is_main():  # its own dropout stream
        torch.manual_seed(cfg.seed + 1_000_003 * dist.rank() + state.step)
    compiled = resolve_compile(trainer.compile, device, trainer.max_steps)
    run = Run(
        cfg=cfg,
        run_dir=run_dir,
        record=record,
        model=model,
        optimizer=optimizer,
        sampler=train_sampler(cfg, corpus),
        corpus=corpus,
        device=device,
        precision=precision,
        state=state,
        checkpoints=checkpoints,
        step_model=model,
        eval_model=model,
        peak_tflops=trainer.peak_tflops
        or measure_matmul_tflops(
            device, torch.bfloat16 if precision == Precision.bf16 else torch.float32
        ),
        freq=corpus.token_freq("train"),
        derived={},
        untie_step=record.untie_step,
        resumed_from=state.step if used else None,
        start_rows=rows,
        retain=retain(plan),
    )
    run.compile(compiled)
    run.derived = derived_numbers(run, params)
    fill_record(run, params, untied=bool(record.untie_step) and not model.tie)
    log_start(run, used, params)
    return run


def log_start(run: Run, used: Path | None, params: dict) -> None:
    if used:
        log.info("[%s] resuming from step %d (%s)", run.record.name, run.state.step, used)
    log.info(
        "[%s] %s params (non-embedding %s), %s %s, %s train tokens, peak %.2f TFLOP/s",
        run.record.name,
        f"{params['total']:,}",
        f"{params['non_embedding']:,}",
        run.device,
        run.precision.value,
        f"{len(run.corpus.tokens('train')):,}",
        run.peak_tflops,
    )


def retain(plan: RunPlan) -> Corpus | None:
    """Fine-tuning from a run of this harness: its data, whose validation loss rank 0 records."""
    start = plan.start
    if start is None or start.data is None or not dist.is_main():
        return None
    return prepare_data(retain_data(start))


def fill_record(run: Run, params: dict, untied: bool) -> None:
    """The summary's numbers that the set-up found."""
    stds = run.model.init_stds()
    run.record.update(
        params=params,
        flops_per_token=run.derived["flops_per_token"],
        device=str(run.device),
        init_std_resolved={"emb": stds["emb"], "head": stds["head"]},
        lr_scales=run.derived["lr_scales"],
        precision=run.precision.value,
        threads=torch.get_num_threads(),
        peak_tflops=run.peak_tflops,
        seen_vocab_frac=float((run.freq > 0).mean()),
        resumed_from_step=run.resumed_from,
        status=Status.running,
        error=None,
        params_untied=count_parameters(run.model) if untied else None,
    )
