"""The one trainer shared by every run (``train``), its config, loop and checkpoints.

config.py      Config, TrainerConfig, OptimConfig (fields, docs, checks), check_config
trainer.py     train(): skip, resume or start a run; its records; the rank protocol
setup.py       the run on this process: model, optimizer, checkpoint to resume from
loop.py        Run, TrainState, the steps
evaluation.py  fixed-window evaluation, what each records, the end of a run
checkpoint.py  last/prev/best/model.pt: the whole policy
optim.py       AdamW groups (named, each at its lr scale), the schedule, scheduled untying
dist.py        torchrun: sharding, rank 0's decisions, signals as a stop request
hardware.py    device, precision, compilation, peak FLOP/s
finetune.py    init_from: a finished run or Hugging Face GPT-2
probes.py      embedding-geometry probes
"""

from tiedvsuntied.train.checkpoint import (
    CheckpointMismatch,
    Checkpoints,
    load_checkpoint,
    save_checkpoint,
)
from tiedvsuntied.train.config import (
    Config,
    ConfigError,
    LrScaling,
    OptimConfig,
    RunPlan,
    TrainerConfig,
    check_config,
    resolved_config,
    untie_step,
)
from tiedvsuntied.train.evaluation import evaluate
from tiedvsuntied.train.loop import Diverged, Interrupted
from tiedvsuntied.train.optim import build_optimizer, group_lr_scales, lr_at, set_lr, untie
from tiedvsuntied.train.state import Run, TrainState
from tiedvsuntied.train.trainer import train

__all__ = [
    "CheckpointMismatch",
    "Checkpoints",
    "Config",
    "ConfigError",
    "Diverged",
    "Interrupted",
    "LrScaling",
    "OptimConfig",
    "Run",
    "RunPlan",
    "TrainState",
    "TrainerConfig",
    "build_optimizer",
    "check_config",
    "evaluate",
    "group_lr_scales",
    "load_checkpoint",
    "lr_at",
    "resolved_config",
    "save_checkpoint",
    "set_lr",
    "train",
    "untie",
    "untie_step",
]
