"""One run being trained (Run) and its loop state (TrainState).

One state: the loop updates ``run.state`` only; the summary is written from it
(``Run.summary``), never kept beside it, and the checkpoint carries it.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from tiedvsuntied.data.batches import BatchSampler
from tiedvsuntied.data.cache import Corpus
from tiedvsuntied.model.gpt import GPT
from tiedvsuntied.results import MetricsLog, RunSummary
from tiedvsuntied.train import dist
from tiedvsuntied.train.checkpoint import Checkpoints
from tiedvsuntied.train.config import Config
from tiedvsuntied.train.hardware import Precision

log = logging.getLogger(__name__)


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

    def summary_fields(self) -> dict:
        """The summary's numbers that are the loop's."""
        fields = self.state_dict()
        del fields["last_val_loss"], fields["clipped_steps"]
        return {
            **fields,
            "final_val_loss": self.last_val_loss,
            "clip_frac": self.clipped_steps / self.step if self.step else None,
        }


@dataclass
class Run:
    """One run being trained: what the loop reads and updates."""

    cfg: Config
    run_dir: Path
    record: RunSummary  # the summary's identity and outcome; the loop's numbers are the state's
    model: GPT
    optimizer: torch.optim.Optimizer
    sampler: BatchSampler
    corpus: Corpus
    device: torch.device
    precision: Precision
    state: TrainState
    checkpoints: Checkpoints
    step_model: torch.nn.Module  # the compiled model, or the model itself (in DDP: wrapped)
    eval_model: torch.nn.Module  # the compiled model (no DDP: rank 0 evaluates alone), or model
    peak_tflops: float
    freq: np.ndarray  # token counts of the train split: the probes' vocabulary strata
    derived: dict  # values the config implies on this machine (config.yaml's "derived")
    untie_step: int | None = None  # scheduled untying: the step of the switch
    resumed_from: int | None = None
    start_rows: dict | None = None  # fine-tuning: E (and H) at step 0, for drift
    retain: Corpus | None = None  # fine-tuning from a run of this harness: its data (retention)
    metrics: MetricsLog | None = None
    bar: object = None

    def summary(self) -> RunSummary:
        """The run's summary now: its record with the loop's numbers from the state."""
        return dataclasses.replace(self.record, **self.state.summary_fields())

    def write_summary(self) -> RunSummary:
        summary = self.summary()
        summary.write(self.run_dir)
        return summary

    def write(self, msg: str) -> None:
        """A line for the user, above the progress bar if there is one."""
        if self.bar is not None and not self.bar.disable:
            self.bar.write(msg)
        else:
            log.info(msg)

    def compile(self, compiled: bool) -> None:
        """The model the steps call: compiled or not, and wrapped for DDP."""
        self.step_model = dist.wrap(torch.compile(self.model) if compiled else self.model)
        # Evaluation compiled too: eager, its forward over the (rows x V) logits ran at the
        # speed of a compiled training step (measured 3x slower than compiled, nano, V=50257).
        # Fixed shapes: one graph per batch shape, no dynamic-shape recompile.
        self.eval_model = torch.compile(self.model, dynamic=False) if compiled else self.model
        self.record.compiled = compiled
