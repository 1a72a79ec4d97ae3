"""``metrics.jsonl``, one line per logged step, and its mirror on Weights & Biases. No torch."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from tiedvsuntied.results.records import atomic_write, jsonable, read_metrics, scrub

log = logging.getLogger(__name__)

OFFLINE_HINT = "upload later with `wandb sync <run_dir>/wandb/offline-run-*`"


class WandbMode(str, Enum):
    auto = "auto"  # online where credentials exist and the server answers, else offline
    online = "online"
    offline = "offline"
    disabled = "disabled"


@dataclass
class WandbConfig:
    """The W&B mirror of ``metrics.jsonl``. Offline runs are written inside the run directory;
    ``wandb sync <run_dir>/wandb/offline-run-*`` uploads them later."""

    mode: WandbMode = WandbMode.auto
    project: str = "tiedvsuntied"
    entity: str | None = None
    group: str | None = None  # None: the sweep name, so one W&B group per sweep
    tags: list[str] = field(default_factory=list)
    init_timeout: float = 60.0  # seconds an online W&B may take to start


def has_credentials() -> bool:
    """An API key in the environment or a ``wandb login`` entry in the netrc file."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        return "wandb" in Path(os.environ.get("NETRC", Path.home() / ".netrc")).read_text()
    except OSError:
        return False


def resolve_wandb_mode(mode: WandbMode) -> WandbMode | None:
    """The mode to ask ``wandb.init`` for; None: W&B decides from ``WANDB_MODE``. ``auto``
    without credentials is offline, with a one-line warning (an online start would prompt)."""
    mode = WandbMode(mode)
    if mode != WandbMode.auto:
        return mode
    if os.environ.get("WANDB_MODE"):
        return None
    if not has_credentials():
        log.warning(
            "W&B: no credentials (WANDB_API_KEY or `wandb login`): logging offline; %s",
            OFFLINE_HINT,
        )
        return WandbMode.offline
    return WandbMode.online


class MetricsLog:
    """``metrics.jsonl`` (the truth, one line per logged step, flushed at once) mirrored to
    W&B under the same names. A context manager: leaving it closes both, with W&B told
    whether the run failed, whatever happened inside.

    ``resume_step``: the step the run continues from. Lines past it belong to steps that will
    be trained again and are dropped, so the file keeps one line per logged step. A run that
    starts over (None) while the file holds lines keeps them in ``metrics.jsonl.old``: the
    file's lines are never thrown away."""

    def __init__(self, run_dir: Path, resume_step: int | None):
        self.path = Path(run_dir) / "metrics.jsonl"
        self.wandb = None
        if resume_step is None and self.path.is_file() and self.path.stat().st_size:
            os.replace(self.path, self.path.with_name("metrics.jsonl.old"))
            log.warning("training from step 0: the earlier lines are kept in metrics.jsonl.old")
        lines = [
            json.dumps(r)
            for r in read_metrics(run_dir)
            if resume_step is not None and r.get("step", 0) <= resume_step
        ]
        atomic_write(self.path, "".join(line + "\n" for line in lines))
        self._file = open(self.path, "a", buffering=1)  # noqa: SIM115 (closed by __exit__)
        self.failed = True  # until the run says otherwise

    def start_wandb(
        self, cfg: WandbConfig, *, run_id: str, name: str, group: str, config: dict, run_dir: Path
    ) -> WandbMode:
        """Start the W&B mirror; the mode it runs in. ``auto`` with credentials tries online
        for ``init_timeout`` seconds, then goes offline with a warning."""
        mode = resolve_wandb_mode(cfg.mode)
        if mode == WandbMode.disabled:
            return mode
        import wandb

        def start(mode: str | None):
            # No console capture (our log lines are not duplicated), no system-stats thread.
            settings = wandb.Settings(
                console="off", init_timeout=cfg.init_timeout, x_disable_stats=True, save_code=False
            )
            return wandb.init(
                project=cfg.project,
                entity=cfg.entity,
                group=cfg.group or group,
                name=name,
                id=run_id,
                resume="allow",
                dir=str(run_dir),
                config=config,
                tags=list(cfg.tags),
                mode=mode,
                settings=settings,
                reinit="finish_previous",
            )

        try:
            self.wandb = start(mode and mode.value)
        except wandb.errors.Error as e:
            if cfg.mode != WandbMode.auto:
                raise
            log.warning(
                "W&B server unreachable (%s): logging offline; %s", scrub(str(e)), OFFLINE_HINT
            )
            wandb.teardown()  # the failed start still holds the run id
            self.wandb = start(WandbMode.offline.value)
        return WandbMode(
            {"dryrun": "offline"}.get(self.wandb.settings.mode, self.wandb.settings.mode)
        )

    def log(self, metrics: dict, step: int) -> None:
        rec = {"step": int(step), **{k: jsonable(v) for k, v in metrics.items()}}
        self._file.write(json.dumps(rec) + "\n")
        if self.wandb is not None:
            try:
                self.wandb.log({k: v for k, v in rec.items() if k != "step"}, step=int(step))
            except Exception as e:  # the mirror must never kill the truth
                log.warning("W&B log failed at step %d: %s", step, scrub(str(e)))

    def summary(self, values: dict) -> None:
        """Mirror summary values (dicts flattened to ``key/sub``) to the W&B run summary."""
        if self.wandb is None:
            return
        flat = {}
        for k, v in jsonable(values).items():
            flat.update(
                {f"{k}/{kk}": vv for kk, vv in v.items()} if isinstance(v, dict) else {k: v}
            )
        try:
            self.wandb.summary.update(flat)
        except Exception as e:
            log.warning("W&B summary update failed: %s", scrub(str(e)))

    def __enter__(self) -> MetricsLog:
        return self

    def __exit__(self, *exc) -> None:
        self._file.close()
        if self.wandb is not None:
            try:
                self.wandb.finish(exit_code=1 if self.failed or exc[0] is not None else 0)
            except Exception as e:
                log.warning("W&B finish failed: %s", scrub(str(e)))
            self.wandb = None
