"""The run's config as Hydra composes it (conf/config.yaml), each field with its doc, its role
in the run's identity (``option(role=..., neutral=...)``) and its rule (``checked``, applied by
``__post_init__`` as torchtitan's config does). The lists of keys by role and ``run_id`` derive
from the declarations here: the reading side imports them (no torch here)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields
from enum import Enum

from omegaconf import OmegaConf

from tiedvsuntied.data.config import DataConfig
from tiedvsuntied.model.config import HeadConfig, ModelConfig, Trainable, canonical_init_std
from tiedvsuntied.results import identity
from tiedvsuntied.results.identity import Role, keys, option, run_name
from tiedvsuntied.results.metrics_log import WandbConfig


class ConfigError(ValueError):
    """A config a run cannot start with; the message is one line naming the key."""


def show(value) -> str:
    """A value as the user would have typed it: ``5``, not ``5.0``."""
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


Rule = tuple[Callable[[float], bool], str]  # (is the value valid?, what is valid)


def checked(default, rule: Rule, **role):
    """A config field (:func:`results.identity.option`) with the rule its value must meet."""
    f = option(default, **role)
    return field(default=f.default, metadata={**f.metadata, "rule": rule})


def check_fields(prefix: str, obj) -> None:
    """Raise a one-line ConfigError for the first field of ``obj`` its rule refuses."""
    for f in fields(obj):
        ok, valid = f.metadata.get("rule", (lambda v: True, ""))
        if not ok(value := getattr(obj, f.name)):
            raise ConfigError(f"{prefix}{f.name}={show(value)} is invalid: it must be {valid}")


def one_of(enum: type[Enum]) -> Rule:
    values = [m.value for m in enum]
    return (lambda v: v in values, " or ".join(values))


def zero_means(what: str) -> Rule:
    return (lambda v: v >= 0, f">= 0 (0 = {what})")


AT_LEAST_0: Rule = (lambda v: v >= 0, ">= 0")
AT_LEAST_1: Rule = (lambda v: v >= 1, ">= 1")
POSITIVE: Rule = (lambda v: v > 0, "> 0")
POSITIVE_OR_NULL: Rule = (lambda v: v is None or v > 0, "> 0, or null (emb_lr_mult's value)")
BETA: Rule = (lambda v: 0 <= v < 1, "in [0, 1)")
SWEEP_NAME: Rule = (
    lambda v: re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", v) is not None,
    "letters, digits, '.', '_' or '-' (a letter or digit first)",
)


class LrScaling(str, Enum):
    """How an embedding-side group's lr follows its tensor's init std (why: train/optim.py)."""

    none = "none"  # every group at optim.lr (times its multiplier)
    init_std = "init_std"  # times (the tensor's init std / model.body_init_std); 1 for std 0


class LrSchedule(str, Enum):
    """The learning rate after the linear warmup (train/optim.py lr_at), down to
    ``lr * min_lr_ratio`` at ``trainer.max_steps``."""

    cosine = "cosine"  # a cosine from the end of warmup
    wsd = "wsd"  # warmup-stable-decay: lr until the last decay_frac of steps, then 1 - sqrt


@dataclass
class OptimConfig:
    """AdamW, linear warmup, then ``schedule`` down to ``lr * min_lr_ratio`` at
    ``trainer.max_steps``."""

    lr: float = checked(1e-3, POSITIVE)
    min_lr_ratio: float = checked(0.1, (lambda v: 0 <= v <= 1, "in [0, 1]"))
    warmup_steps: int = checked(50, AT_LEAST_0)
    weight_decay: float = checked(0.1, AT_LEAST_0)
    decay_embeddings: bool = False  # also decay wte/lm_head (the shared matrix when tied)
    beta1: float = checked(0.9, BETA)
    beta2: float = checked(0.95, BETA)
    eps: float = checked(1e-8, POSITIVE)
    # 0 disables clipping (the pre-clip norm is logged either way)
    grad_clip: float = checked(1.0, (lambda v: v >= 0, ">= 0 (0 disables)"))
    # Learning rates of the embedding side, as multiples of the scheduled lr (the body's):
    emb_lr_mult: float = checked(1.0, POSITIVE, neutral=1.0)  # wte (untied)
    # lm_head (untied, or after head.untie_at); null: emb_lr_mult, after untie_at the tied one's
    head_lr_mult: float | None = checked(None, POSITIVE_OR_NULL, neutral=None)
    # the tied matrix: one lr for both roles; null: emb_lr_mult
    tied_lr_mult: float | None = checked(None, POSITIVE_OR_NULL, neutral=None)
    lr_scaling: LrScaling = checked(LrScaling.none, one_of(LrScaling), neutral="none")
    schedule: LrSchedule = checked(LrSchedule.cosine, one_of(LrSchedule), neutral="cosine")
    # wsd: the share of trainer.max_steps in the final decay (never before warmup ends)
    decay_frac: float = checked(0.2, (lambda v: 0 < v <= 1, "in (0, 1]"), neutral=0.2)

    def __post_init__(self) -> None:
        check_fields("optim.", self)


class Precision(str, Enum):
    auto = "auto"  # bf16 where the hardware has fast bf16 (CUDA, AVX512-BF16/AMX CPUs)
    bf16 = "bf16"
    fp32 = "fp32"


@dataclass
class FinetuneConfig:
    """Applies with ``init_from`` (train/finetune.py); how a tied start is untied: head.untie."""

    trainable: Trainable = Trainable.all


class Sampling(str, Enum):
    """Which training windows a step takes (tiedvsuntied.data.batches.BatchSampler)."""

    random = "random"  # uniform offsets, with replacement: windows overlap and repeat
    once = "once"  # back-to-back windows in a seeded order: no token is a target twice


@dataclass
class TrainerConfig:
    max_steps: int = checked(2000, AT_LEAST_1)
    batch_size: int = checked(8, AT_LEAST_1)  # sequences per micro-batch (of all processes)
    grad_accum: int = checked(1, AT_LEAST_1)  # micro-batches per optimizer step
    # once: under one pass over the training tokens, checked before training (a memorised
    # corpus turns tying into a question about regularisation)
    sampling: Sampling = option(Sampling.random, neutral="random")
    # also at step 0 (the initial loss is a result) and the last step
    eval_interval: int = checked(100, AT_LEAST_1, role=Role.identity)
    # Also evaluate at steps 1, 2, 4, 8, ... below eval_interval: an init-1.0 run collapses
    # from ~60 nats within the first 50-100 steps, between two evaluations otherwise.
    eval_log_steps: bool = option(True, role=Role.identity, neutral=False)
    # fixed validation/test windows, the same for every run; 0 = all that fit
    eval_windows: int = checked(0, zero_means("the whole split"))
    eval_batch_size: int = checked(16, AT_LEAST_1, role=Role.identity)
    log_interval: int = checked(10, AT_LEAST_1, role=Role.record)
    # log the training loss at every one of the first N steps as well
    log_first: int = checked(100, AT_LEAST_0, role=Role.record)
    # also at the last step and on a signal
    ckpt_interval: int = checked(200, AT_LEAST_1, role=Role.record)
    precision: Precision = Precision.auto
    # null: on CUDA, and on CPU for runs of >= 500 steps
    compile: bool | None = option(None, role=Role.identity)
    # auto | cpu | cuda | cuda:N | cuda:free (a GPU no other job holds)
    device: str = option("auto", role=Role.record)
    # rows per cross-entropy chunk; 0: all logits at once
    loss_chunk: int = checked(1024, zero_means("full logits"), role=Role.identity)
    test_eval: bool = option(True, role=Role.identity)
    # MFU denominator; 0 measures this machine's matmul peak at start
    peak_tflops: float = checked(0.0, zero_means("measure"), role=Role.record)
    progress: bool = option(True, role=Role.record)
    # CPU threads of torch's intra-op pool; 0 keeps torch's choice (OMP_NUM_THREADS, or the
    # cores). Compiled CPU runs are bitwise equal at one thread count and drift apart from
    # about step 6 at another (a 1e-6 difference that training amplifies): the count used is
    # recorded in the summary, and pinning it makes runs under any launcher comparable.
    threads: int = checked(0, zero_means("torch's choice"), role=Role.record)

    def __post_init__(self) -> None:
        check_fields("trainer.", self)


def check_budget(trainer: TrainerConfig, train_tokens: int, block_size: int) -> None:
    """``sampling=once`` must fit in one pass over the training windows."""
    per_step = trainer.batch_size * trainer.grad_accum
    available = (train_tokens - 1) // block_size // per_step
    if trainer.sampling == Sampling.once and trainer.max_steps > available:
        raise ConfigError(
            f"trainer.max_steps={trainer.max_steps} is more than one pass over the training "
            f"split with trainer.sampling=once ({available} steps of {per_step} windows of "
            f"{block_size} tokens): use at most {available} steps, or sampling=random"
        )


def untie_step(untie_at: float | None, max_steps: int) -> int | None:
    """``head.untie_at`` as a step: a fraction of training (< 1) or a whole number >= 1.
    Raises ConfigError, naming the key, where that is not a step inside training."""
    if untie_at is None:
        return None
    step = round(untie_at * max_steps) if untie_at < 1 else int(untie_at)
    if untie_at <= 0 or (untie_at >= 1 and untie_at != step) or not 1 <= step < max_steps:
        raise ConfigError(
            f"head.untie_at={show(untie_at)} is invalid: use a fraction in (0, 1) or a whole "
            f"step in [1, trainer.max_steps={max_steps}) (here it gives step {step})"
        )
    return step


@dataclass(frozen=True)
class Schedule:
    """When the loop does what, for a run of ``trainer`` untied at ``untie_step`` (or never):
    every decision of the loop about a step (counted after that many updates) is asked here."""

    trainer: TrainerConfig
    untie_step: int | None = None

    @classmethod
    def of(cls, cfg: Config) -> Schedule:
        return cls(cfg.trainer, untie_step(cfg.head.untie_at, cfg.trainer.max_steps))

    def done(self, step: int) -> bool:
        return step >= self.trainer.max_steps

    def logs(self, step: int) -> bool:
        """The training loss of step ``step``: each of the first ``log_first`` steps, every
        ``log_interval`` and the last."""
        t = self.trainer
        return step <= t.log_first or step % t.log_interval == 0 or step == t.max_steps

    def evaluates(self, step: int) -> bool:
        """Every ``eval_interval`` and the last step, and with ``eval_log_steps`` the powers of
        two below ``eval_interval`` (step 0 is evaluated before the loop)."""
        t = self.trainer
        early = t.eval_log_steps and step < t.eval_interval and step & (step - 1) == 0
        return step % t.eval_interval == 0 or step == t.max_steps or early

    def saves(self, step: int) -> bool:
        """``last.pt``: every ``ckpt_interval`` and the last step (and when a signal stops)."""
        return step % self.trainer.ckpt_interval == 0 or step == self.trainer.max_steps

    def unties(self, step: int) -> bool:
        return step == self.untie_step


@dataclass
class Config:
    """The whole run, as Hydra composes it. ``tie``, ``init_std`` and ``seed`` are top-level
    because they are what a sweep varies; the head's other options are the head node, the model
    node is the architecture only. A node's role in the identity is its fields'."""

    tie: bool = option(True, role=Role.identity)  # lm_head.weight is wte.weight
    # std of wte and the untied head: a number, or inv_sqrt_d
    init_std: str = option("0.02", role=Role.identity)
    # model init, batch order, dropout: tied and untied share it
    seed: int = checked(0, AT_LEAST_0, role=Role.identity)
    # A second run of one config (the noise floor): it enters the run's identity, so the run
    # is not skipped as done, and changes nothing else (same seed, data, init).
    replicate: int = checked(0, AT_LEAST_0, role=Role.identity, neutral=0)
    sweep: str = checked("default", SWEEP_NAME, role=Role.record)  # results/<sweep>/, W&B group
    results_dir: str = option("results", role=Role.record)
    # fine-tune: a finished run (or its sweep) or a HF GPT-2 dir
    init_from: str | None = option(None, neutral=None)
    head: HeadConfig = field(default_factory=HeadConfig)
    # neutral: the node as it was written before head.untie moved out of it
    finetune: FinetuneConfig = option(
        factory=FinetuneConfig, neutral={"untie": "keep", "trainable": "all"}
    )
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = option(factory=DataConfig, role=Role.identity)
    optim: OptimConfig = field(default_factory=OptimConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    wandb: WandbConfig = option(factory=WandbConfig, role=Role.record)

    def __post_init__(self) -> None:
        check_fields("", self)
        if untie_step(self.head.untie_at, self.trainer.max_steps) and not (
            self.tie and not self.init_from
        ):
            raise ConfigError(
                f"head.untie_at={show(self.head.untie_at)} needs tie=true and no init_from "
                "(head.untie unties a start)"
            )


def resolved_config(cfg: Config) -> dict:
    """The config as a plain dict, init_std canonical (run identity, config.yaml)."""
    tree = OmegaConf.to_container(OmegaConf.structured(cfg), enum_to_str=True)
    tree["init_std"] = canonical_init_std(cfg.init_std)
    return tree


# Every list of keys by role, derived from the declarations.
KEYS = keys(Config)
VARIANT = {k for k, v in KEYS.items() if v.role is Role.variant}  # labelled where runs differ
NEUTRAL = {k: v.neutral for k, v in KEYS.items() if v.neutral is not MISSING}


def run_id(config: dict, name: str, data_fingerprint: str, precision: Precision) -> str:
    """The id of a run of ``config`` (resolved: :func:`resolved_config`) trained in
    ``precision`` (``trainer.precision`` as resolved where it trains): results.identity.run_id
    over this schema's keys."""
    return identity.run_id(config, name, data_fingerprint, precision, KEYS)


def config_run_id(cfg: Config, data_fingerprint: str, precision: Precision) -> str:
    """The id of ``cfg``'s run on data of that fingerprint, trained in ``precision`` (its
    ``trainer.precision`` resolved on the machine that trains it: the plan's): a sweep's plan,
    the trainer's."""
    config = resolved_config(cfg)
    name = run_name(cfg.tie, config["init_std"], cfg.model.name, cfg.seed, cfg.replicate)
    return run_id(config, name, data_fingerprint, precision)
