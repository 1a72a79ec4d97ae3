"""``metrics.jsonl``, one line per logged step, and its mirror on Weights & Biases. No torch."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import time
import urllib.parse
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from tiedvsuntied.results.identity import wandb_id
from tiedvsuntied.results.io import atomic_write, jsonable
from tiedvsuntied.results.records import RunSummary, read_metrics
from tiedvsuntied.results.secrets import scrub

log = logging.getLogger(__name__)

OFFLINE_HINT = "upload later with `wandb sync <run_dir>/wandb/offline-run-*`"
# auto's verdict that the server cannot be reached, kept in the sweep directory for this long
# so that the sweep's other jobs (other processes too) go offline without asking again.
UNREACHABLE_FILE, UNREACHABLE_FOR_S = ".wandb-unreachable", 900


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
    probe_timeout: float = 3.0  # auto: seconds to reach the server before going offline
    quiet: bool = True  # no `wandb:` banners and history blocks on the console (false: W&B's)


def has_credentials() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        return "wandb" in Path(os.environ.get("NETRC", Path.home() / ".netrc")).read_text()
    except OSError:
        return False


def resolve_wandb_mode(
    mode: WandbMode, sweep_dir: Path | None = None, probe_timeout: float = 3.0
) -> WandbMode | None:
    """The mode to ask ``wandb.init`` for (None: W&B's ``WANDB_MODE``; ``WANDB_MODE=disabled``
    disables it here, where wandb need not be installed). ``auto`` is offline,
    with a one-line warning, without credentials (an online start would prompt) or when the
    server cannot be reached (rather than waiting out ``init_timeout`` in ``wandb.init``)."""
    mode = WandbMode(mode)
    if mode != WandbMode.auto:
        return mode
    if os.environ.get("WANDB_MODE") == WandbMode.disabled:  # wandb is then never imported
        return WandbMode.disabled
    if os.environ.get("WANDB_MODE"):
        return None
    why = None if has_credentials() else "no credentials (WANDB_API_KEY or `wandb login`)"
    why = why or server_unreachable(sweep_dir, probe_timeout)
    if why:
        log.warning("W&B: %s: logging offline; %s", why, OFFLINE_HINT)
        return WandbMode.offline
    return WandbMode.online


def server_url() -> str:
    """The W&B server ``wandb.init`` would talk to: ``WANDB_BASE_URL``, else the host of
    ``wandb login --host`` (wandb's settings file), else wandb's default."""
    import wandb

    settings = wandb.Settings()
    with contextlib.suppress(Exception):  # an unreadable settings file: wandb's default
        settings.update_from_system_settings()
    settings.update_from_env_vars(dict(os.environ))
    return str(settings.base_url)


def server_unreachable(sweep_dir: Path | None, timeout: float) -> str | None:
    """Why the W&B server cannot be reached within ``timeout`` seconds (DNS and TCP), or None;
    kept in ``sweep_dir`` for UNREACHABLE_FOR_S seconds (see UNREACHABLE_FILE)."""
    cached = Path(sweep_dir) / UNREACHABLE_FILE if sweep_dir is not None else None
    with contextlib.suppress(OSError):
        if cached and time.time() - cached.stat().st_mtime < UNREACHABLE_FOR_S:
            return f"{cached.read_text().strip()} (decided earlier in this sweep, {cached})"
    url = urllib.parse.urlsplit(server_url())
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((url.hostname, port), timeout=timeout).close()
        return None
    except OSError as e:
        why = f"server {url.scheme}://{url.netloc} unreachable ({type(e).__name__}: {e})"
    if cached:
        with contextlib.suppress(OSError):
            atomic_write(cached, why + "\n")
    return why


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
        kept = [r for r in read_metrics(run_dir) if r.get("step", 0) <= (resume_step or 0)]
        atomic_write(self.path, "".join(json.dumps(r) + "\n" for r in kept))
        self._replay = kept if resume_step is not None else []  # W&B: the resumed run whole
        self._file = open(self.path, "a", buffering=1)  # noqa: SIM115 (closed by __exit__)
        self.failed = True  # until the run says otherwise

    def start_wandb(self, cfg: WandbConfig, record: RunSummary, config: dict) -> None:
        """Start the W&B mirror of ``record``'s run (``auto``: offline if online fails); its id,
        mode and folder go into ``record``."""
        run_dir = self.path.parent
        record.wandb_run_id = wandb_id(record.sweep, record.run_id)
        mode = resolve_wandb_mode(cfg.mode, run_dir.parent, cfg.probe_timeout)
        if mode == WandbMode.disabled:
            record.wandb_mode = mode.value
            return
        import wandb

        def start(mode: str | None):
            # No console capture (our log lines are not duplicated), no system-stats thread;
            # quiet: none of W&B's own lines (banners, the history block at the end).
            settings = wandb.Settings(
                console="off",
                init_timeout=cfg.init_timeout,
                x_disable_stats=True,
                save_code=False,
                silent=cfg.quiet,
            )
            return wandb.init(
                project=cfg.project,
                entity=cfg.entity,
                group=cfg.group or record.sweep,
                name=record.name,
                id=record.wandb_run_id,
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
        for rec in self._replay:  # one W&B run per run id holds the whole history: a resumed
            self._mirror(rec)  # run's own offline file too, not only with the killed one's
        mode = self.wandb.settings.mode
        record.wandb_mode = "offline" if mode == "dryrun" else mode
        record.wandb_dir = str(Path(self.wandb.dir).parent)

    def log(self, metrics: dict, step: int) -> None:
        rec = {"step": int(step), **{k: jsonable(v) for k, v in metrics.items()}}
        self._file.write(json.dumps(rec) + "\n")
        self._mirror(rec)

    def _mirror(self, rec: dict) -> None:
        if self.wandb is not None:
            try:
                self.wandb.log({k: v for k, v in rec.items() if k != "step"}, step=rec["step"])
            except Exception as e:  # the mirror must never kill the truth
                log.warning("W&B log failed at step %d: %s", rec["step"], scrub(str(e)))

    def wandb_summary(self, values: dict) -> None:
        """Mirror summary.json's values (dicts flattened to ``key/sub``) to the W&B run summary."""
        if self.wandb is None:
            return
        flat = {}
        for k, v in jsonable(values).items():
            flat |= {f"{k}/{kk}": vv for kk, vv in v.items()} if isinstance(v, dict) else {k: v}
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
