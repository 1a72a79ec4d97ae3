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

from tiedvsuntied.data.sources import check_data
from tiedvsuntied.model.config import check_config as check_model
from tiedvsuntied.model.config import init_std_notes
from tiedvsuntied.train import dist
from tiedvsuntied.train.config import Config, ConfigError, Schedule
from tiedvsuntied.train.finetune import Start, adopt, read_start
from tiedvsuntied.train.hardware import resolve_device

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunPlan:
    """What a checked config implies, worked out once per job: the config with the start's
    shapes and tying (``init_from``), the start itself, this process's device, the schedule."""

    cfg: Config
    start: Start | None
    device: torch.device
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
    if cfg.trainer.batch_size % dist.world_size():
        raise ConfigError(
            f"trainer.batch_size={cfg.trainer.batch_size} does not split over "
            f"{dist.world_size()} processes (torchrun): use a multiple of {dist.world_size()}"
        )
    done = set() if checked is None else checked
    for check, value in ((check_data, cfg.data), (check_writable, Path(cfg.results_dir))):
        if (key := f"{check.__name__} {value!r}") not in done:
            done.add(key)
            check(value)
    for note in init_std_notes(cfg.model.n_embd, cfg.init_std, cfg.head) if checked is None else ():
        log.warning(note)  # 0.036 is d^-0.5 only at d = 768
    return RunPlan(cfg, start, device, Schedule.of(cfg))


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
