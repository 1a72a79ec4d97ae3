"""The typed run configuration, its validation, and run identity.

Each group's dataclass lives next to the code that consumes it (``ModelConfig`` in
``model.py``, ``DataConfig`` in ``data.py``, ...); ``Config`` assembles them and is
registered in Hydra's ConfigStore as ``base_config``, so every YAML file in ``conf/`` is
checked against it: unknown keys and wrong types (``tie=maybe``) are refused by Hydra, and
``validate`` refuses invalid values, all before any data is loaded.

``tie``, ``init_std`` and ``seed`` are top-level keys because they are what a sweep varies;
the model group reads ``tie`` and ``init_std`` from there by interpolation.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from hydra.core.config_store import ConfigStore

from tiedvsuntied.data import DataConfig
from tiedvsuntied.model import ModelConfig
from tiedvsuntied.tracking import WandbConfig, read_json, write_json_atomic
from tiedvsuntied.train import OptimConfig, TrainerConfig


def _model_from_top_level() -> ModelConfig:
    # OmegaConf accepts interpolation strings in typed fields; they resolve to the
    # top-level keys, so `tie=false` on the command line reaches the model.
    return ModelConfig(tie="${tie}", init_std="${init_std}")  # type: ignore[arg-type]


@dataclass
class Config:
    tie: bool = True  # lm_head.weight is wte.weight
    init_std: str = "0.02"  # std of wte and of the untied head: a number, or inv_sqrt_d (= n_embd^-0.5)
    seed: int = 0  # model init, batch order and dropout; tied and untied share it
    sweep: str = "default"  # results/<sweep>/ and the W&B group
    results_dir: str = "results"  # relative to the directory the command runs in
    model: ModelConfig = field(default_factory=_model_from_top_level)
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    wandb: WandbConfig = field(default_factory=WandbConfig)


def register_configs() -> None:
    ConfigStore.instance().store(name="base_config", node=Config)


_SWEEP_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def validate(cfg: Config) -> None:
    """Refuse invalid values, naming the key and what is valid. Allocates nothing."""
    if not isinstance(cfg.tie, bool):
        raise ValueError(f"tie must be true or false, got {cfg.tie!r}")
    if cfg.model.tie != cfg.tie or str(cfg.model.init_std) != str(cfg.init_std):
        raise ValueError("set tying and init with the top-level keys `tie=` and `init_std=`, "
                         "not model.tie / model.init_std (those follow the top-level keys)")
    if cfg.seed < 0:
        raise ValueError(f"seed must be >= 0, got {cfg.seed}")
    if not _SWEEP_NAME.match(cfg.sweep or ""):
        raise ValueError(f"sweep={cfg.sweep!r} is not a valid name: use letters, digits, '.', '_' or '-'")
    model_config(cfg, cfg.model.vocab_size).validate()
    if hasattr(cfg.data, "validate"):
        cfg.data.validate()
    cfg.optim.validate()
    cfg.trainer.validate()
    cfg.wandb.validate()


def model_config(cfg: Config, vocab_size: int) -> ModelConfig:
    """The model as this run builds it: top-level tie/init_std, vocabulary from the tokenizer."""
    return dataclasses.replace(cfg.model, tie=cfg.tie, init_std=str(cfg.init_std), vocab_size=vocab_size)


def to_container(cfg: Config) -> dict:
    return dataclasses.asdict(cfg)


# Keys that change where and how a run is recorded, not what it computes.
IDENTITY_EXCLUDE = (
    "sweep", "results_dir", "wandb", "trainer.progress", "trainer.log_interval",
    "trainer.ckpt_interval", "trainer.peak_tflops", "data.cache_dir", "data.num_threads",
    "data.files",  # replaced by the corpus fingerprint (content), so a moved file is the same run
)


def _canonical_init_std(value: str) -> str:
    try:
        return repr(float(value))  # "1", "1.0" and "1e0" are the same run
    except (TypeError, ValueError):
        return str(value)


def run_name(cfg: Config) -> str:
    init = _canonical_init_std(cfg.init_std).replace("/", "_")
    return f"tie={str(cfg.tie).lower()}_init={init}_model={cfg.model.name}_seed={cfg.seed}"


def run_identity(cfg: Config, data_fingerprint: str) -> tuple[str, str]:
    """``(run_id, name)``: the run id is the name plus a hash of everything that determines
    the result, so the same command run again finds the same run directory."""
    tree = to_container(cfg)
    tree["init_std"] = _canonical_init_std(tree["init_std"])
    tree["model"]["init_std"] = tree["init_std"]
    for key in IDENTITY_EXCLUDE:
        node, *rest = key.split(".")
        if rest:
            tree.get(node, {}).pop(rest[0], None)
        else:
            tree.pop(node, None)
    tree["data_fingerprint"] = data_fingerprint
    digest = hashlib.sha256(json.dumps(tree, sort_keys=True, default=str).encode()).hexdigest()[:8]
    name = run_name(cfg)
    return f"{name}-{digest}", name


def wandb_id(sweep: str, run_id: str) -> str:
    """A stable W&B run id, so a resumed run continues the same W&B run."""
    return "tvu-" + hashlib.sha256(f"{sweep}/{run_id}".encode()).hexdigest()[:16]


def check_eval_split(tokens, block_size: int, split: str) -> None:
    if len(tokens) < block_size + 1:
        raise ValueError(f"the {split} split has {len(tokens):,} tokens, fewer than one window of "
                         f"block_size+1 = {block_size + 1}; use a larger corpus or a smaller model.block_size")


def update_index(sweep_dir: Path, run_id: str, name: str, status: str, overrides: Optional[list]) -> None:
    """``<sweep>/index.json``: every run of the sweep, its status and the overrides that made it."""
    from filelock import FileLock

    sweep_dir.mkdir(parents=True, exist_ok=True)
    with FileLock(str(sweep_dir / ".index.lock")):
        index = read_json(sweep_dir / "index.json") or {}
        entry = index.get(run_id, {})
        entry.update({"name": name, "status": status, "path": run_id,
                      "updated_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
        if overrides is not None:
            entry["overrides"] = list(overrides)
        index[run_id] = entry
        write_json_atomic(sweep_dir / "index.json", index)
