"""The model's settings and their checks: ModelConfig (the architecture), HeadConfig (the
output head), the init-std spellings, check_config. No torch: the reading side imports this to
name runs and count parameters. Errors are one line naming the key.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from enum import Enum

from tiedvsuntied.results.identity import Role, option

INV_SQRT_D = ("inv_sqrt_d", "d^-0.5")  # init_std spellings meaning n_embd ** -0.5
ZERO_OK = ("head.init_std",)  # an untied head may start at zero: step-0 logits 0, loss ln V
# Widths at which a user may have computed d^-0.5 by hand (the sizes in conf/model and the
# powers of two): a numeric init_std equal to one of them at another width is likely a slip.
KNOWN_WIDTHS = (64, 128, 256, 384, 512, 768, 1024, 1280, 1600, 2048, 4096)
# The ModelConfig fields a checkpoint's weights fix (a smaller block_size crops wpe).
SHAPE_KEYS = ("n_layer", "n_head", "n_embd", "block_size", "vocab_size", "bias", "emb_scale")
SIZE = Role.identity  # the size has columns of its own: no variant


class ModelConfigError(ValueError):
    """A bad model setting; the message is one line naming the key and what is valid."""


@dataclass
class ModelConfig:
    """The Hydra `model` node: architecture only. Construction checks every field."""

    name: str = option("micro", role=SIZE)
    """size name (conf/model/<name>.yaml)"""
    n_layer: int = option(4, role=SIZE)
    """transformer blocks, > 0"""
    n_head: int = option(4, role=SIZE)
    """attention heads; must divide n_embd"""
    n_embd: int = option(128, role=SIZE)
    """width d"""
    block_size: int = option(256, role=SIZE)
    """context length (rows of the position embedding)"""
    vocab_size: int = option(50257, role=SIZE)
    """V; the trainer sets it from the tokenizer"""
    bias: bool = True
    """biases in Linear layers and LayerNorms (GPT-2 has them)"""
    dropout: float = 0.0
    """embedding, attention and residual dropout, in [0, 1)"""
    emb_scale: str = option("1", neutral="1")
    """multiplies the token embedding on the way in: a number > 0, or sqrt_d (Gemma)"""
    body_init_std: float = 0.02
    """GPT-2 body init; residual projections get body_init_std / sqrt(2 n_layer)"""

    def __post_init__(self):
        positive = (lambda v: v > 0, "> 0")
        rules = {
            **dict.fromkeys(("n_layer", "n_head", "n_embd", "block_size", "vocab_size"), positive),
            "dropout": (lambda v: 0.0 <= v < 1.0, "in [0, 1)"),
            "body_init_std": (lambda v: math.isfinite(v) and v > 0, "a finite number > 0"),
        }
        for name, (ok, valid) in rules.items():
            if not ok(getattr(self, name)):
                raise ModelConfigError(
                    f"model.{name}={getattr(self, name)!r} is invalid: it must be {valid}"
                )
        if self.n_embd % self.n_head:
            raise ModelConfigError(
                f"model.n_head={self.n_head} is invalid: it must divide "
                f"model.n_embd={self.n_embd} (each head gets n_embd / n_head dims)"
            )
        multiplier(self.emb_scale, self.n_embd, "model.emb_scale")


class Untie(str, Enum):
    """How a tied fine-tuning start (init_from) becomes untied: ``head.untie``."""

    keep = "keep"  # the start's tying as it is
    copy = "copy"  # tied start: the head becomes a copy of the embedding (same function at step 0)
    fresh = "fresh"  # tied start: a new random head (a control: what a careless untie does)


class Trainable(str, Enum):
    """What trains in a fine-tuning run: ``finetune.trainable`` (gpt.set_trainable)."""

    all = "all"
    head = "head"  # the output matrix (tied: the shared matrix, embedding included)
    body = "body"  # all but wte, wpe and the head
    embedding = "embedding"  # wte and wpe (tied: the head too)


@dataclass
class HeadConfig:
    """The Hydra ``head`` node: what kind of output head, beside the two top-level run keys a
    sweep varies, ``tie`` and ``init_std``; :func:`check_config` checks what needs them too.
    Every field is a variant: runs that differ in it are labelled apart."""

    untie_at: float | None = option(None, neutral=None)
    """scheduled untying: tied until this step (>= 1) or fraction of training (< 1), then the
    head is a copy of wte (tie=true, no init_from)"""
    untie: Untie = Untie.keep
    """a tied fine-tuning start (init_from): keep it, copy wte into a new head, or a fresh one"""
    t5_rescale: bool = False
    """T5's tied head: multiply the final hidden state by n_embd ** -0.5 (tied only, as in HF
    T5ForConditionalGeneration; an untied head is rescaled with logit_scale=inv_sqrt_d)"""
    logit_scale: str = option("1", neutral="1")
    """multiplies the logits: a number > 0, inv_sqrt_d or sqrt_d"""
    emb_init_std: str | None = None
    """overrides init_std for wte (untied only): a number or inv_sqrt_d"""
    init_std: str | None = None
    """overrides init_std for lm_head (untied only): a number >= 0 or inv_sqrt_d"""
    tied_input_grad_scale: float = option(1.0, neutral=1.0)
    """tied only: multiplies the gradient reaching the shared matrix through the lookup (input
    side); the head's (output side) is unchanged. Lopardo et al. 2026's remedy for the tied
    matrix drifting toward the output side. The forward pass is unchanged"""

    def __post_init__(self):
        Untie(self.untie)  # untie_at needs trainer.max_steps: train.config.untie_step checks it
        for name in ("emb_init_std", "init_std"):
            if getattr(self, name) is not None:
                canonical_init_std(getattr(self, name), f"head.{name}")
        multiplier(self.logit_scale, 1, "head.logit_scale")
        scale = _number(self.tied_input_grad_scale, {})
        if not (math.isfinite(scale) and scale > 0):
            raise ModelConfigError(
                f"head.tied_input_grad_scale={self.tied_input_grad_scale!r} is invalid: give a "
                "finite number > 0 (1.0: the gradient as it is)"
            )

    def scale(self, tie: bool, n_embd: int) -> float:
        """The logits' multiplier: logit_scale, times d^-0.5 for T5's tied head."""
        if self.t5_rescale and not tie:  # HF T5: `if config.tie_word_embeddings: h *= d**-0.5`
            raise ModelConfigError(
                "head.t5_rescale=true is invalid with tie=false: T5 rescales only a tied head; "
                "rescale an untied head with head.logit_scale=inv_sqrt_d"
            )
        t5 = n_embd**-0.5 if self.t5_rescale else 1.0
        return multiplier(self.logit_scale, n_embd, "head.logit_scale") * t5

    def input_grad_scale(self, tie: bool) -> float:
        """The tied matrix's input-side gradient multiplier; refused for a head that trains
        untied from the start (tie=false, or head.untie of a tied start): no shared matrix.
        Scheduled untying (untie_at) scales while the run is tied."""
        scale = float(self.tied_input_grad_scale)
        if scale != 1.0 and not (tie and Untie(self.untie) == Untie.keep):
            raise ModelConfigError(
                f"head.tied_input_grad_scale={self.tied_input_grad_scale:g} is invalid with an "
                "untied head (tie=false or head.untie): it scales a tied matrix's lookup side; "
                "use 1.0, or tie=true"
            )
        return scale

    def ends_tied(self, tie: bool) -> bool:
        """Whether a run of this head ends tied (scheduled untying ends untied)."""
        return tie and self.untie_at is None


def canonical_init_std(value, key: str = "init_std") -> str:
    """The one spelling of an init std: '1', '1.0', '1e0' -> '1.0'; 'd^-0.5' -> 'inv_sqrt_d'.

    It names the run (run identity): never change what it returns for a given value."""
    if str(value).strip() in INV_SQRT_D:
        return "inv_sqrt_d"
    std = _number(value, {})
    if not (math.isfinite(std) and (std > 0 or (std == 0 and key in ZERO_OK))):
        bound = ">= 0" if key in ZERO_OK else "> 0"
        raise ModelConfigError(
            f"{key}={value!r} is invalid: give a finite number {bound} such as 0.02 or 1.0, "
            "or inv_sqrt_d (also d^-0.5) for n_embd ** -0.5"
        )
    return repr(std)


def resolve_init_std(value, n_embd: int, key: str = "init_std") -> float:
    """'0.02' (or 0.02) -> 0.02; 'inv_sqrt_d' or 'd^-0.5' -> n_embd ** -0.5 (follows the width)."""
    spelling = canonical_init_std(value, key)
    return float(n_embd) ** -0.5 if spelling == "inv_sqrt_d" else float(spelling)


def init_std_note(value, n_embd: int, key: str = "init_std") -> str | None:
    """One line when a numeric init std is d^-0.5 of another width than n_embd, else None.

    `init_std=0.036` is 768^-0.5: at d = 128 it is another arm than d^-0.5 (0.088), and the
    user who typed it probably meant d^-0.5. Equal means equal to 2 significant digits. Only
    a note: the run keeps the number it was given (and its identity)."""
    if canonical_init_std(value, key) == "inv_sqrt_d":
        return None
    std, here = resolve_init_std(value, n_embd, key), n_embd**-0.5
    if f"{std:.2g}" == f"{here:.2g}":
        return None
    for width in KNOWN_WIDTHS:
        if width != n_embd and f"{std:.2g}" == f"{width**-0.5:.2g}":
            return (
                f"{key}={value} is d^-0.5 at d={width}, not at this model's d={n_embd} "
                f"({here:.2g}): use {key}=inv_sqrt_d for d^-0.5 at every width"
            )
    return None


def init_std_notes(n_embd: int, init_std, head: HeadConfig) -> list[str]:
    """init_std_note of init_std and of the head's overrides that are set (logged once a run)."""
    given = {"init_std": init_std, "head.emb_init_std": head.emb_init_std}
    given["head.init_std"] = head.init_std
    notes = (init_std_note(v, n_embd, k) for k, v in given.items() if v is not None)
    return [note for note in notes if note]


def _number(value, named: dict[str, float]) -> float:
    """``value`` as a float or one of ``named``; NaN (which the caller refuses) where it is no
    number. float(True) is 1.0, but a bool is a mistake, not a number."""
    text = str(value).strip()
    try:
        return named[text] if text in named else float("nan" if isinstance(value, bool) else text)
    except ValueError:
        return float("nan")


def multiplier(value, n_embd: int, name: str) -> float:
    """A multiplier as a number: a number > 0, inv_sqrt_d or sqrt_d (of the width n_embd)."""
    number = _number(value, {"inv_sqrt_d": n_embd**-0.5, "sqrt_d": n_embd**0.5})
    if not (math.isfinite(number) and number > 0):
        raise ModelConfigError(
            f"{name}={value!r} is invalid: give a number > 0, inv_sqrt_d or sqrt_d"
        )
    return number


def as_model_config(cfg) -> ModelConfig:
    """Accept a ModelConfig, a dict or an OmegaConf DictConfig (a Mapping)."""
    if isinstance(cfg, ModelConfig):
        return cfg
    names = [f.name for f in fields(ModelConfig)]
    unknown = sorted(set(cfg) - set(names))
    if unknown:
        raise ModelConfigError(f"unknown model key(s) {unknown}; valid keys: {', '.join(names)}")
    return ModelConfig(**{k: cfg[k] for k in cfg})


def check_config(
    cfg: ModelConfig, *, tie: bool = True, init_std="0.02", head: HeadConfig | None = None
) -> dict[str, float]:
    """The checks that need the run keys tie and init_std and the head besides the model's own
    fields; returns the std of each init-table symbol. wte's and lm_head's: the head's override
    where set, else init_std (tied, the two must agree). Allocates nothing."""
    cfg, head = as_model_config(cfg), head or HeadConfig()
    cfg.__post_init__()  # again: a field may have been set after construction
    if not isinstance(tie, bool):  # a string 'false' would be truthy
        raise ModelConfigError(f"tie={tie!r} is invalid: it must be true or false")
    head.scale(tie, cfg.n_embd)
    head.input_grad_scale(tie)
    default = resolve_init_std(init_std, cfg.n_embd, "init_std")
    emb, out = (
        default if value is None else resolve_init_std(value, cfg.n_embd, f"head.{name}")
        for name, value in (("emb_init_std", head.emb_init_std), ("init_std", head.init_std))
    )
    if tie and emb != out:
        raise ModelConfigError(
            f"head.emb_init_std={head.emb_init_std!r} and head.init_std={head.init_std!r} "
            f"give {emb:g} and {out:g}, but tie=true shares one matrix: set only init_std, "
            "or use tie=false"
        )
    resid = cfg.body_init_std / math.sqrt(2 * cfg.n_layer)
    return {"emb": emb, "head": out, "body": cfg.body_init_std, "resid": resid}
