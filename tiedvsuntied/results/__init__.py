"""The results contract as code: what a run writes (summary.json, index.json, metrics.jsonl,
checkpoints) and the readers the analysis uses; docs/ARCHITECTURE.md draws the layout.

A run is identified by its config: ``run_id`` is its name plus a hash of every key that can
change the result, so the same command run again finds the same directory and resumes it.
The trainer writes through this module and the analysis reads through it; it imports neither.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import math
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, BinaryIO, List, Optional

import yaml

log = logging.getLogger(__name__)


class Status(str, Enum):
    """A run's state. ``diverged`` (NaN/inf loss) is a result of the study, not an error;
    ``failed`` and ``running`` (killed) runs resume when the command is run again."""

    running = "running"
    finished = "finished"
    diverged = "diverged"
    failed = "failed"

    @property
    def done(self) -> bool:
        return self in (Status.finished, Status.diverged)


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


@dataclass
class RunSummary:
    """``summary.json``: one run's identity, status and headline numbers."""

    run_id: str
    name: str
    sweep: str
    tie: bool
    init_std: str  # canonical spelling (model.canonical_init_std)
    model: str
    seed: int
    status: Status = Status.running
    error: str | None = None
    init_std_resolved: dict = field(default_factory=dict)  # {"emb": float, "head": float}
    n_layer: int = 0
    n_head: int = 0
    n_embd: int = 0
    vocab_size: int = 0
    block_size: int = 0
    t5_rescale: bool = False
    data: str = ""
    data_fingerprint: str = ""
    max_steps: int = 0
    params: dict = field(default_factory=dict)  # model.count_parameters
    untie_at: float | None = None  # scheduled untying: the config's value
    untie_step: int | None = None  # ... as a step
    params_untied: dict | None = (
        None  # model.count_parameters after the switch (or a resume past it)
    )
    flops_per_token: float | None = None
    step: int = 0
    tokens: int = 0
    init_val_loss: float | None = None
    init_logit_std: float | None = None
    init_self_logit: float | None = None  # step 0: mean logit of the input token itself
    init_self_target_frac: float | None = (
        None  # validation positions whose target is the input token
    )
    final_val_loss: float | None = None
    best_val_loss: float | None = None
    best_step: int | None = None
    test_loss: float | None = None
    test_loss_at_best: float | None = (
        None  # test split at best_step: early stopping on validation
    )
    seen_vocab_frac: float | None = (
        None  # of the vocabulary, the part that occurs in the train split
    )
    clip_frac: float | None = (
        None  # of the optimizer steps, those whose gradient norm was clipped
    )
    peak_tflops: float | None = None  # the MFU denominator used (trainer.peak_tflops pins it)
    diverged_at_step: int | None = None
    resumed_from_step: int | None = None
    wandb_run_id: str | None = None
    wandb_mode: str | None = None
    wandb_dir: str | None = None
    device: str | None = None
    precision: str | None = None
    compiled: bool | None = None
    started_at: str = field(default_factory=now)
    updated_at: str = field(default_factory=now)
    wall_time_s: float | None = None

    def to_dict(self) -> dict:
        d = {k: _jsonable(v) for k, v in dataclasses.asdict(self).items()}
        d["status"] = Status(self.status).value
        return d

    @classmethod
    def from_dict(cls, d: dict) -> RunSummary:
        names = {f.name for f in dataclasses.fields(cls)}
        kept = {k: v for k, v in d.items() if k in names}
        kept["status"] = Status(kept.get("status", "running"))
        for k, v in kept.items():  # nan/inf were written as strings (JSON has no such numbers)
            if isinstance(v, str) and v in ("nan", "inf", "-inf"):
                kept[k] = float(v)
        return cls(**kept)

    def update(self, **values) -> None:
        for k, v in values.items():
            setattr(self, k, v)

    def write(self, run_dir: Path) -> None:
        self.updated_at = now()
        write_json(Path(run_dir) / "summary.json", self.to_dict())


@dataclass
class IndexEntry:
    """One run in ``<sweep>/index.json``: how it was asked for and where it stands."""

    name: str
    status: Status
    path: str  # the run directory, relative to the sweep directory
    updated_at: str = field(default_factory=now)
    overrides: list = field(default_factory=list)  # the Hydra overrides that made it


# ---------------------------------------------------------------------------- writing


def atomic_write(path: Path, data: bytes | str | Callable[[BinaryIO], Any]) -> None:
    """Write ``data`` (or what ``data(file)`` writes, e.g. ``lambda f: torch.save(obj, f)``)
    to ``path`` so that a reader, or a kill, sees the old file or the new one, never a torn
    one: temporary file, fsync, rename. The one writer of every result file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "wb") as f:
        if callable(data):
            data(f)
        else:
            f.write(data.encode() if isinstance(data, str) else data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _jsonable(value: Any) -> Any:
    """nan/inf become strings (JSON has no such numbers); enums their values; 0-d tensors numbers."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        return _jsonable(value.item())
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    return value


def write_json(path: Path, obj: Any) -> None:
    atomic_write(path, json.dumps(_jsonable(obj), indent=2, sort_keys=True, default=str) + "\n")


def update_index(sweep_dir: Path, run_id: str, entry: IndexEntry) -> None:
    """Record one run in ``<sweep>/index.json`` (locked: parallel jobs share the file)."""
    from filelock import FileLock

    sweep_dir = Path(sweep_dir)
    sweep_dir.mkdir(parents=True, exist_ok=True)
    with FileLock(str(sweep_dir / ".index.lock")):
        index = read_json(sweep_dir / "index.json") or {}
        if not entry.overrides:  # a rerun without overrides keeps those of the first call
            entry.overrides = index.get(run_id, {}).get("overrides", [])
        index[run_id] = {**dataclasses.asdict(entry), "status": Status(entry.status).value}
        write_json(sweep_dir / "index.json", index)


# ---------------------------------------------------------------------------- reading


def read_json(path: Path) -> dict | None:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def read_summary(run_dir: Path) -> RunSummary | None:
    d = read_json(Path(run_dir) / "summary.json")
    try:
        return RunSummary.from_dict(d) if d else None
    except (TypeError, ValueError):
        return None


def read_index(sweep_dir: Path) -> dict[str, IndexEntry]:
    index = read_json(Path(sweep_dir) / "index.json") or {}
    return {
        run_id: IndexEntry(**{**e, "status": Status(e["status"])}) for run_id, e in index.items()
    }


def read_metrics(run_dir: Path) -> list[dict]:
    """The lines of ``metrics.jsonl``; a line cut short by a kill is skipped."""
    try:
        lines = (Path(run_dir) / "metrics.jsonl").read_text().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        with contextlib.suppress(ValueError):
            out.append(json.loads(line))
    return out


def read_config(run_dir: Path) -> dict:
    try:
        return yaml.safe_load((Path(run_dir) / "config.yaml").read_text()) or {}
    except (OSError, yaml.YAMLError):
        return {}


# ---------------------------------------------------------------------------- identity

# Keys that change where and how a run is recorded, not what it computes.
IDENTITY_EXCLUDE = (
    "sweep",
    "results_dir",
    "wandb",
    "trainer.progress",
    "trainer.log_interval",
    "trainer.ckpt_interval",
    "trainer.peak_tflops",
    "trainer.device",
    "data.cache_dir",
    "data.num_threads",
    "data.files",  # files: replaced by the corpus fingerprint (content)
)


# Keys added after results existed, at the values that change nothing: left out of the hash, so
# runs made before a key existed keep their identity (a rerun still skips or resumes them).
NEUTRAL = {
    "init_from": None,
    "untie_at": None,
    "finetune": {"untie": "keep", "trainable": "all"},
    "model.logit_scale": "1",
    "model.emb_scale": "1",
}


def run_name(tie: bool, init_std: str, model: str, seed: int) -> str:
    return f"tie={str(tie).lower()}_init={init_std.replace('/', '_')}_model={model}_seed={seed}"


def run_id(config: dict, name: str, data_fingerprint: str) -> str:
    """``<name>-<hash>``: the hash covers every key of the resolved ``config`` (a plain dict,
    init_std already canonical) that can change the result, and the data's fingerprint."""
    tree = json.loads(json.dumps(config, default=str))
    for key in IDENTITY_EXCLUDE:
        node, _, leaf = key.partition(".")
        (tree.get(node, {}) if leaf else tree).pop(leaf or node, None)
    for key, neutral in NEUTRAL.items():
        node, _, leaf = key.partition(".")
        parent = tree.get(node, {}) if leaf else tree
        if (leaf or node) in parent and parent[leaf or node] == neutral:
            del parent[leaf or node]
    tree["data_fingerprint"] = data_fingerprint
    digest = hashlib.sha256(json.dumps(tree, sort_keys=True).encode()).hexdigest()[:8]
    return f"{name}-{digest}"


def wandb_id(sweep: str, run_id: str) -> str:
    """A stable W&B run id, so a resumed run continues the same W&B run."""
    return "tvu-" + hashlib.sha256(f"{sweep}/{run_id}".encode()).hexdigest()[:16]


# ---------------------------------------------------------------------------- secrets

_SECRET = re.compile(r"(?i)(api[_-]?key|token|secret|password)(\s*[=:]\s*)\S+")
_KEY_SHAPE = re.compile(r"\b[0-9a-f]{40}\b")  # the shape of a W&B API key


def scrub(text: str) -> str:
    """``text`` without credentials: secret-looking environment values, key=value secrets."""
    for name, value in os.environ.items():
        if len(value) >= 8 and any(
            s in name.upper() for s in ("KEY", "TOKEN", "SECRET", "PASSWORD")
        ):
            text = text.replace(value, "***")
    return _KEY_SHAPE.sub("***", _SECRET.sub(r"\1\2***", text))


# ---------------------------------------------------------------------------- metrics log


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


def _has_credentials() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:  # `wandb login` writes a netrc entry for the W&B host
        return "wandb" in Path(os.environ.get("NETRC", Path.home() / ".netrc")).read_text()
    except OSError:
        return False


def _server_reachable(timeout: float = 3.0) -> bool:
    import socket
    from urllib.parse import urlparse

    import wandb

    url = urlparse(os.environ.get("WANDB_BASE_URL") or wandb.Settings().base_url)
    try:
        socket.create_connection((url.hostname, url.port or 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def resolve_wandb_mode(mode: WandbMode) -> WandbMode:
    """``auto`` -> the mode a run really uses. An explicit ``WANDB_MODE`` wins; online needs
    credentials and a server that answers within seconds (else offline, with a warning)."""
    mode = WandbMode(mode)
    if mode != WandbMode.auto:
        return mode
    env = {"dryrun": "offline"}.get(
        os.environ.get("WANDB_MODE", ""), os.environ.get("WANDB_MODE", "")
    )
    if env in ("online", "offline", "disabled"):
        return WandbMode(env)
    if not _has_credentials():
        return WandbMode.offline
    if not _server_reachable():
        log.warning(
            "W&B server unreachable: logging offline; upload later with "
            "`wandb sync <run_dir>/wandb/offline-run-*`"
        )
        return WandbMode.offline
    return WandbMode.online


class MetricsLog:
    """``metrics.jsonl`` (the truth, one line per logged step, flushed at once) mirrored to
    W&B under the same names. A context manager: leaving it closes both, with W&B told
    whether the run failed, whatever happened inside."""

    def __init__(self, run_dir: Path, resume_step: int | None):
        self.path = Path(run_dir) / "metrics.jsonl"
        self.wandb = None
        lines = (
            []
            if resume_step is None
            else [json.dumps(r) for r in read_metrics(run_dir) if r.get("step", 0) <= resume_step]
        )
        # Lines past the checkpoint belong to steps that will be trained again: drop them, so
        # the file keeps exactly one line per logged step.
        atomic_write(self.path, "".join(line + "\n" for line in lines))
        self._file = open(self.path, "a", buffering=1)
        self.failed = True  # until the run says otherwise

    def start_wandb(
        self, cfg: WandbConfig, *, run_id: str, name: str, group: str, config: dict, run_dir: Path
    ) -> WandbMode:
        mode = resolve_wandb_mode(cfg.mode)
        if mode == WandbMode.disabled:
            return mode
        import wandb

        # No console capture (our log lines are not duplicated), no system-stats thread.
        settings = wandb.Settings(
            console="off", init_timeout=cfg.init_timeout, x_disable_stats=True, save_code=False
        )
        self.wandb = wandb.init(
            project=cfg.project,
            entity=cfg.entity,
            group=cfg.group or group,
            name=name,
            id=run_id,
            resume="allow",
            dir=str(run_dir),
            config=config,
            tags=list(cfg.tags),
            mode=mode.value,
            settings=settings,
            reinit="finish_previous",
        )
        return mode

    def log(self, metrics: dict, step: int) -> None:
        rec = {"step": int(step), **{k: _jsonable(v) for k, v in metrics.items()}}
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
        for k, v in _jsonable(values).items():
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
