"""A job's plan: ``check_config`` refuses a config no run can start with and works out once
what it implies (a RunPlan). Above ``config`` (which loads no torch): it reads the start and
the device."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from tiedvsuntied.data.config import Vocab
from tiedvsuntied.data.sources import check_data
from tiedvsuntied.model.accounting import count_parameters_for
from tiedvsuntied.model.config import Trainable, init_std_notes
from tiedvsuntied.model.config import check_config as check_model
from tiedvsuntied.train import dist
from tiedvsuntied.train.config import Config, ConfigError, Precision, Schedule
from tiedvsuntied.train.finetune import Start, adopt, read_start
from tiedvsuntied.train.hardware import resolve_device, resolve_precision

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunPlan:
    """What a checked config implies, worked out once per job: the config with the start's
    shapes and tying (``init_from``), the start itself, this process's device, the precision
    the run computes in there (``trainer.precision`` resolved: the one place it is, and what the
    run's id hashes), the schedule."""

    cfg: Config
    start: Start | None
    device: torch.device
    precision: Precision
    schedule: Schedule


def check_config(
    cfg: Config, overrides: Sequence[str] = (), checked: set[str] | None = None
) -> RunPlan:
    """Refuse a config no run can start with, before any data is read. With ``init_from`` the
    plan's config takes the start's shapes and tying (``overrides``, what the user set, must not
    contradict them). ``checked``: shared by a sweep's jobs, checked before the first starts, so
    that each data config and results_dir is checked once (a 100-job sweep in seconds); it
    claims no GPU (each job claims its own) and leaves the init_std notes to the jobs."""
    try:
        start = read_start(cfg.init_from) if cfg.init_from else None
        if start is not None:
            cfg = adopt(cfg, start, list(overrides))
        check_model(cfg.model, tie=cfg.tie, init_std=cfg.init_std, head=cfg.head)  # no alloc
        name = cfg.trainer.device if checked is None else cfg.trainer.device.replace(":free", "")
        device = resolve_device(dist.device(name))
    except ValueError as e:
        raise ConfigError(str(e)) from None
    precision = resolve_precision(cfg.trainer.precision, device)
    if cfg.trainer.batch_size % dist.world_size():
        raise ConfigError(
            f"trainer.batch_size={cfg.trainer.batch_size} does not split over "
            f"{dist.world_size()} processes (torchrun): use a multiple of {dist.world_size()}"
        )
    check_memory(cfg, device, precision)
    done = set() if checked is None else checked
    for check, value in ((check_data, cfg.data), (check_writable, Path(cfg.results_dir))):
        if (key := f"{check.__name__} {value!r}") not in done:
            done.add(key)
            check(value)
    for note in init_std_notes(cfg.model.n_embd, cfg.init_std, cfg.head) if checked is None else ():
        log.warning(note)  # 0.036 is d^-0.5 only at d = 768
    return RunPlan(cfg, start, device, precision, Schedule.of(cfg))


def least_memory(cfg: Config, precision: Precision) -> dict[str, int]:
    """Bytes one process's training step needs at the least, from the shapes alone: what the
    backward pass keeps of each block (10 d per token: the inputs of its matmuls, q k v and the
    MLP's 4d hidden; eager fp32 keeps several times this), one chunk of fp32 logits with its
    gradient, and the parameters with their gradients and AdamW's two moments (16 bytes each,
    fp32; only the weights when finetune.trainable leaves some frozen). A vocabulary known only
    from the corpus (a tiktoken encoding's, or the seen tokens) counts 0. ``precision``: the
    run's, resolved (bf16 activations take 2 bytes, fp32 4)."""
    m, trainer = cfg.model, cfg.trainer
    vocab = cfg.data.vocab_size or 0
    if cfg.data.encoding == "bytes" and cfg.data.vocab != Vocab.seen:
        vocab = 257
    size = 2 if precision == Precision.bf16 else 4
    tokens = -(-trainer.batch_size // dist.world_size()) * m.block_size
    counts = count_parameters_for(m, tie=cfg.tie)
    params = counts["non_embedding"] + counts["position"] + vocab * m.n_embd * (2 - cfg.tie)
    per_param = 16 if cfg.finetune.trainable == Trainable.all else 4  # else: trainable's share
    return {
        "activations": tokens * m.n_layer * 10 * m.n_embd * size,
        "logits": 2 * 4 * vocab * (min(trainer.loss_chunk, tokens) or tokens),
        "parameters and AdamW": per_param * params,
    }


def check_memory(cfg: Config, device: torch.device, precision: Precision) -> None:
    """Refuse a step that cannot fit in the device's whole memory (least_memory), before any
    allocation: one line with what it needs."""
    if device.type == "cuda":
        total = torch.cuda.get_device_properties(device).total_memory  # no context made
    elif device.type == "cpu":
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    else:
        return
    need = least_memory(cfg, precision)
    if sum(need.values()) > total:
        parts = ", ".join(f"{k} {v / 2**30:.1f}" for k, v in need.items())
        raise ConfigError(
            f"trainer.batch_size={cfg.trainer.batch_size} needs at least "
            f"{sum(need.values()) / 2**30:.1f} GiB per process ({parts}) but {device} has "
            f"{total / 2**30:.1f} GiB: lower trainer.batch_size (trainer.grad_accum keeps the "
            "tokens per step) or model.block_size"
        )


def check_writable(path: Path) -> None:
    """Whether ``results_dir`` can be written is known only by trying: make it, then remove
    what was made (nothing is left behind by a check)."""
    made = [p for p in [path, *path.absolute().parents] if not p.exists()]
    try:
        path.mkdir(parents=True, exist_ok=True)
        if not os.access(path, os.W_OK | os.X_OK):
            raise PermissionError(errno.EACCES, "not writable")
    except OSError as e:
        raise ConfigError(
            f"results_dir={str(path)!r} cannot be written ({e.strerror or e}): "
            "choose another results_dir"
        ) from None
    finally:
        for folder in made:  # the deepest first
            with contextlib.suppress(OSError):
                folder.rmdir()
