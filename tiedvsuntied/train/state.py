"""One run being trained (Run), its loop state (TrainState), what it derives on this machine
(Derived) and its identity: what trainer.summary builds summary.json from."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from tiedvsuntied.data.batches import BatchSampler
from tiedvsuntied.data.cache import Corpus
from tiedvsuntied.model.gpt import GPT
from tiedvsuntied.results.metrics_log import MetricsLog
from tiedvsuntied.results.records import RunSummary, find_run_dir
from tiedvsuntied.train import dist
from tiedvsuntied.train.checkpoint import Checkpoints
from tiedvsuntied.train.config import Config, Schedule, config_run_id, resolved_config
from tiedvsuntied.train.plan import RunPlan


@dataclass
class TrainState:
    """Everything of the loop that a checkpoint must carry besides weights and RNGs: the
    step and tokens seen, the step-0 evaluation, the best and the last validation loss, and
    how many steps were clipped. Test losses are not in it: they are taken once, at the end."""

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


@dataclass
class Derived:
    """What the config implies on this machine, worked out once at set-up: config.yaml's
    ``derived`` (in this order), W&B's config, and the summary's copies."""

    vocab_size: int
    params: dict  # model.count_parameters and "trainable"
    flops_per_token: float
    init_std_resolved: dict  # model.init_stds()
    lr_scales: dict  # each optimizer group's multiple of the scheduled lr (untie_at: + head)
    device: str
    world_size: int
    threads: int
    precision: str  # bf16: the forward passes under autocast; fp32: none
    compiled: bool  # False from the step torch.compile failed on (the run goes on eagerly)
    peak_tflops: float
    data_fingerprint: str
    tokens_per_step: int


def identity(plan: RunPlan, corpus: Corpus) -> tuple[RunSummary, Path]:
    """The summary of a run as it starts (identity only), and its directory (an existing run
    keeps its directory and name, whatever naming scheme made them)."""
    cfg, config = plan.cfg, resolved_config(plan.cfg)
    run_dir = find_run_dir(
        Path(cfg.results_dir) / cfg.sweep, config_run_id(cfg, corpus.fingerprint)
    )
    m = cfg.model
    record = RunSummary(
        run_id=run_dir.name,
        name=run_dir.name.rsplit("-", 1)[0],
        sweep=cfg.sweep,
        tie=cfg.tie,
        init_std=config["init_std"],
        model=m.name,
        seed=cfg.seed,
        replicate=cfg.replicate,
        n_layer=m.n_layer,
        n_head=m.n_head,
        n_embd=m.n_embd,
        vocab_size=corpus.vocab_size,
        block_size=m.block_size,
        t5_rescale=cfg.head.t5_rescale,
        data=cfg.data.name,
        data_fingerprint=corpus.fingerprint,
        max_steps=cfg.trainer.max_steps,
        untie_at=cfg.head.untie_at,
        untie_step=plan.schedule.untie_step,
        world_size=dist.world_size(),
    )
    return record, run_dir


@dataclass
class Run:
    """One run being trained: what the loop reads and updates."""

    cfg: Config
    schedule: Schedule
    run_dir: Path
    record: RunSummary  # identity and outcome; the rest of the summary is derived and state
    derived: Derived
    model: GPT
    optimizer: torch.optim.Optimizer
    sampler: BatchSampler
    corpus: Corpus
    device: torch.device
    state: TrainState
    checkpoints: Checkpoints
    freq: np.ndarray  # token counts of the train split: the probes' vocabulary strata
    resumed_from: int | None = None
    start_rows: dict | None = None  # fine-tuning: E (and H) at step 0, for drift
    retain: Corpus | None = None  # fine-tuning from a run of this harness: its data (retention)
    step_model: torch.nn.Module | None = None  # compiled or not, in DDP wrapped (compile)
    eval_model: torch.nn.Module | None = None  # compiled or not, never wrapped (rank 0 alone)
    metrics: MetricsLog | None = None
    bar: object = None
