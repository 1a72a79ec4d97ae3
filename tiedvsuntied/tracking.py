"""Run records: ``metrics.jsonl`` and ``summary.json`` are the truth, W&B mirrors them.

Every value is written locally first (one JSON line per logged step, flushed at once) and
then handed to W&B under the same name, so analysis is plain pandas over local files and the
dashboards show exactly the same numbers. ``summary.json`` is rewritten atomically whenever
the run's state changes, so a kill never leaves a half-written summary behind.

No secret reaches these files: W&B gets the resolved experiment config and derived values
only, never the environment, and ``scrub`` removes anything that looks like a credential
from error messages before they are recorded.
"""
from __future__ import annotations

import json
import logging
import math
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

log = logging.getLogger(__name__)

WANDB_MODES = ("auto", "online", "offline", "disabled")


@dataclass
class WandbConfig:
    """W&B mirror of the local records.

    ``mode: auto`` means ``online`` where credentials exist (``WANDB_API_KEY`` or a
    ``~/.netrc`` entry for the W&B host), otherwise ``offline``; an explicit ``WANDB_MODE``
    in the environment wins over ``auto``. Offline runs are written inside the run
    directory; ``wandb sync <run_dir>/wandb/offline-run-*`` uploads them later.
    """

    mode: str = "auto"
    project: str = "tiedvsuntied"
    entity: Optional[str] = None
    group: Optional[str] = None  # None: the sweep name, so one W&B group per sweep
    tags: list = field(default_factory=list)
    init_timeout: float = 60.0  # seconds W&B may take to start before the run fails

    def validate(self) -> None:
        if self.mode not in WANDB_MODES:
            raise ValueError(f"wandb.mode={self.mode!r} is not valid; choose one of {', '.join(WANDB_MODES)}")
        if not self.project:
            raise ValueError("wandb.project must be a non-empty string")


def _has_wandb_credentials() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    netrc = Path(os.environ.get("NETRC", Path.home() / ".netrc"))
    try:
        return "wandb" in netrc.read_text()  # e.g. "machine api.wandb.ai" after `wandb login`
    except OSError:
        return False


def resolve_wandb_mode(mode: str) -> str:
    """``auto`` -> the mode a run will really use (online needs credentials)."""
    if mode != "auto":
        return mode
    env = os.environ.get("WANDB_MODE")
    if env in ("online", "offline", "disabled"):
        return env
    if env == "dryrun":
        return "offline"
    return "online" if _has_wandb_credentials() else "offline"


_SECRET_PATTERNS = [
    re.compile(r"(?i)(api[_-]?key|token|secret|password)(\s*[=:]\s*)\S+"),
    re.compile(r"\b[0-9a-f]{40}\b"),  # the shape of a W&B API key
]


def scrub(text: str) -> str:
    """Remove credentials (W&B key values from the environment, key=value secrets)."""
    for name, value in os.environ.items():
        if value and len(value) >= 8 and any(s in name.upper() for s in ("KEY", "TOKEN", "SECRET", "PASSWORD")):
            text = text.replace(value, "***")
    for pat in _SECRET_PATTERNS:
        text = pat.sub(lambda m: (m.group(1) + m.group(2) + "***") if m.lastindex else "***", text)
    return text


def _jsonable(value: Any) -> Any:
    """Floats that JSON can't hold (nan, inf) become strings, never a crash or invalid JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        return _jsonable(value.item())
    return value


def write_json_atomic(path: Path, obj: Any) -> None:
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=True, default=str)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_json(path: Path) -> Optional[dict]:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError):
        return None


class RunRecorder:
    """Writes one run's ``metrics.jsonl`` and ``summary.json`` and mirrors them to W&B."""

    def __init__(self, run_dir: Path, summary: dict):
        self.run_dir = Path(run_dir)
        self.metrics_path = self.run_dir / "metrics.jsonl"
        self.summary_path = self.run_dir / "summary.json"
        self.summary = dict(summary)
        self._wandb_run = None
        self._metrics_file = None

    # -- local truth ---------------------------------------------------------------------
    def open_metrics(self, resume_step: Optional[int]) -> None:
        """Open metrics.jsonl for appending; on resume drop lines past the checkpoint.

        Lines logged after the last checkpoint belong to steps that will be trained again,
        so they are removed to keep exactly one line per (step, kind) in the file.
        """
        if resume_step is None:
            self.metrics_path.write_text("")
        elif self.metrics_path.exists():
            kept = []
            for line in self.metrics_path.read_text().splitlines():
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut short by a kill
                if rec.get("step", 0) <= resume_step and not any(k.startswith("test/") for k in rec):
                    kept.append(line)
            tmp = self.metrics_path.with_suffix(".jsonl.tmp")
            tmp.write_text("".join(l + "\n" for l in kept))
            os.replace(tmp, self.metrics_path)
        self._metrics_file = open(self.metrics_path, "a", buffering=1)

    def log(self, metrics: dict, step: int) -> None:
        rec = {"step": int(step)}
        rec.update({k: _jsonable(v) for k, v in metrics.items()})
        self._metrics_file.write(json.dumps(rec) + "\n")
        if self._wandb_run is not None:
            try:
                self._wandb_run.log({k: v for k, v in rec.items() if k != "step"}, step=int(step))
            except Exception as e:  # the mirror must never kill the truth
                log.warning("W&B log failed at step %d: %s", step, scrub(str(e)))

    def update_summary(self, **values) -> None:
        self.summary.update({k: _jsonable(v) for k, v in values.items()})
        self.summary["updated_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        write_json_atomic(self.summary_path, self.summary)
        if self._wandb_run is not None:
            try:
                for k, v in values.items():
                    if isinstance(v, (int, float, str, bool)) or v is None:
                        self._wandb_run.summary[k] = v
                    elif isinstance(v, dict):
                        for kk, vv in v.items():
                            self._wandb_run.summary[f"{k}/{kk}"] = vv
            except Exception as e:
                log.warning("W&B summary update failed: %s", scrub(str(e)))

    # -- W&B mirror ----------------------------------------------------------------------
    def start_wandb(self, cfg: WandbConfig, *, run_id: str, name: str, group: str, config: dict) -> str:
        """Start (or resume) the W&B run; returns the mode used. ``disabled`` starts nothing."""
        mode = resolve_wandb_mode(cfg.mode)
        self.summary["wandb_mode"] = mode
        if mode == "disabled":
            return mode
        import wandb

        # No console capture: our progress bar and log lines are not duplicated into W&B's
        # output.log; no system-stats sampling thread.
        settings = wandb.Settings(
            console="off",
            init_timeout=cfg.init_timeout,
            x_disable_stats=True,
            save_code=False,
        )
        self._wandb_run = wandb.init(
            project=cfg.project,
            entity=cfg.entity,
            group=cfg.group or group,
            name=name,
            id=run_id,
            resume="allow",
            dir=str(self.run_dir),
            config=config,
            tags=list(cfg.tags),
            mode=mode,
            settings=settings,
            reinit="finish_previous",
        )
        self.summary["wandb_run_id"] = run_id
        self.summary["wandb_dir"] = str(Path(self._wandb_run.dir).parent)  # .../wandb/<offline-run-*>
        return mode

    def finish(self, exit_code: int = 0) -> None:
        if self._metrics_file is not None:
            self._metrics_file.close()
            self._metrics_file = None
        if self._wandb_run is not None:
            try:
                self._wandb_run.finish(exit_code=exit_code)
            except Exception as e:
                log.warning("W&B finish failed: %s", scrub(str(e)))
            self._wandb_run = None
