"""The model's settings and their checks: ModelConfig, the init-std spellings, check_config.

No torch here: the reading side (results, analysis, figures) imports this module to name
runs and count parameters without loading torch.

`tie` and `init_std` are the study's two top-level run keys, not fields of ModelConfig: a
check that needs them is `check_config(cfg, tie=..., init_std=...)`; every check that needs
only the fields runs in `ModelConfig.__post_init__`. Errors are one line naming the key.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

INV_SQRT_D = ("inv_sqrt_d", "d^-0.5")  # init_std spellings meaning n_embd ** -0.5
ZERO_OK = ("model.head_init_std",)  # an untied head may start at zero: step-0 logits 0, loss ln V
# Widths at which a user may have computed d^-0.5 by hand (the sizes in conf/model and the
# powers of two): a numeric init_std equal to one of them at another width is likely a slip.
KNOWN_WIDTHS = (64, 128, 256, 384, 512, 768, 1024, 1280, 1600, 2048, 4096)


class ModelConfigError(ValueError):
    """A bad model setting; the message is one line naming the key and what is valid."""


@dataclass
class ModelConfig:
    """The Hydra `model` node: architecture only. Construction checks every field."""

    name: str = "micro"
    """size name (conf/model/<name>.yaml)"""
    n_layer: int = 4
    """transformer blocks, > 0"""
    n_head: int = 4
    """attention heads; must divide n_embd"""
    n_embd: int = 128
    """width d"""
    block_size: int = 256
    """context length (rows of the position embedding)"""
    vocab_size: int = 50257
    """V; the trainer sets it from the tokenizer"""
    bias: bool = True
    """biases in Linear layers and LayerNorms (GPT-2 has them)"""
    dropout: float = 0.0
    """embedding, attention and residual dropout, in [0, 1)"""
    emb_init_std: str | None = None
    """overrides init_std for wte (untied only): a number or inv_sqrt_d"""
    head_init_std: str | None = None
    """overrides init_std for lm_head (untied only): a number >= 0 or inv_sqrt_d"""
    t5_rescale: bool = False
    """T5's tied head: multiply the final hidden state by n_embd ** -0.5 (tied only, as in HF
    T5ForConditionalGeneration; an untied head is rescaled with logit_scale=inv_sqrt_d)"""
    logit_scale: str = "1"
    """multiplies the logits: a number > 0, inv_sqrt_d or sqrt_d"""
    emb_scale: str = "1"
    """multiplies the token embedding on the way in: a number > 0, or sqrt_d (Gemma)"""
    body_init_std: float = 0.02
    """GPT-2 body init; residual projections get body_init_std / sqrt(2 n_layer)"""

    def __post_init__(self):
        for key in ("n_layer", "n_head", "n_embd", "block_size", "vocab_size"):
            if getattr(self, key) <= 0:
                raise ModelConfigError(
                    f"model.{key}={getattr(self, key)!r} is invalid: it must be > 0"
                )
        if self.n_embd % self.n_head:
            raise ModelConfigError(
                f"model.n_head={self.n_head} is invalid: it must divide "
                f"model.n_embd={self.n_embd} (each head gets n_embd / n_head dims)"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ModelConfigError(
                f"model.dropout={self.dropout!r} is invalid: it must be in [0, 1)"
            )
        if not (math.isfinite(self.body_init_std) and self.body_init_std > 0):
            raise ModelConfigError(
                f"model.body_init_std={self.body_init_std!r} is invalid: "
                "it must be a finite number > 0"
            )
        for key in ("emb_init_std", "head_init_std"):
            if getattr(self, key) is not None:
                canonical_init_std(getattr(self, key), f"model.{key}")
        resolve_scales(self)


def canonical_init_std(value, key: str = "init_std") -> str:
    """The one spelling of an init std: '1', '1.0', '1e0' -> '1.0'; 'd^-0.5' -> 'inv_sqrt_d'.

    It names the run (run identity): never change what it returns for a given value."""
    text = str(value).strip()
    if text in INV_SQRT_D:
        return "inv_sqrt_d"
    try:
        if isinstance(value, bool):  # float(True) is 1.0: a bool is a mistake, not a number
            raise ValueError
        std = float(text)
    except ValueError:
        std = float("nan")
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


def init_std_notes(cfg: ModelConfig, init_std) -> list[str]:
    """init_std_note of init_std and of the model's init-std overrides that are set: what the
    trainer logs once per run."""
    given = {"init_std": init_std, "model.emb_init_std": cfg.emb_init_std}
    given["model.head_init_std"] = cfg.head_init_std
    notes = (init_std_note(v, cfg.n_embd, k) for k, v in given.items() if v is not None)
    return [note for note in notes if note]


def resolve_scales(cfg: ModelConfig) -> tuple[float, float]:
    """(logit scale, embedding scale) as numbers, from model.logit_scale and model.emb_scale.

    model.t5_rescale is not folded in: it belongs to the tied head (GPT applies it)."""
    named = {"inv_sqrt_d": cfg.n_embd**-0.5, "sqrt_d": cfg.n_embd**0.5}
    scales = []
    for key in ("logit_scale", "emb_scale"):
        text = str(getattr(cfg, key)).strip()
        try:
            value = named[text] if text in named else float(text)
        except ValueError:
            value = float("nan")
        if not (math.isfinite(value) and value > 0):
            raise ModelConfigError(
                f"model.{key}={getattr(cfg, key)!r} is invalid: give a number > 0, "
                "inv_sqrt_d or sqrt_d"
            )
        scales.append(value)
    return scales[0], scales[1]


def as_model_config(cfg) -> ModelConfig:
    """Accept a ModelConfig, a dict or an OmegaConf DictConfig (a Mapping)."""
    if isinstance(cfg, ModelConfig):
        return cfg
    names = [f.name for f in fields(ModelConfig)]
    unknown = sorted(set(cfg) - set(names))
    if unknown:
        raise ModelConfigError(f"unknown model key(s) {unknown}; valid keys: {', '.join(names)}")
    return ModelConfig(**{k: cfg[k] for k in cfg})


def check_config(cfg: ModelConfig, *, tie: bool = True, init_std="0.02") -> dict[str, float]:
    """The checks that need the run keys tie and init_std besides the model's own fields.

    Raises ModelConfigError (one line naming the key); returns the init stds by init-table
    symbol: {"emb", "head", "body", "resid"}. Allocates nothing."""
    cfg = as_model_config(cfg)
    cfg.__post_init__()  # again: a field may have been set after construction
    if not isinstance(tie, bool):  # a string 'false' would be truthy
        raise ModelConfigError(f"tie={tie!r} is invalid: it must be true or false")
    if cfg.t5_rescale and not tie:  # HF T5: `if config.tie_word_embeddings: h *= d**-0.5`
        raise ModelConfigError(
            "model.t5_rescale=true is invalid with tie=false: T5 rescales only a tied head; "
            "rescale an untied head with model.logit_scale=inv_sqrt_d"
        )
    default = resolve_init_std(init_std, cfg.n_embd, "init_std")
    emb, head = (
        default if value is None else resolve_init_std(value, cfg.n_embd, f"model.{key}")
        for key, value in (("emb_init_std", cfg.emb_init_std), ("head_init_std", cfg.head_init_std))
    )
    if tie and emb != head:
        raise ModelConfigError(
            f"model.emb_init_std={cfg.emb_init_std!r} and model.head_init_std="
            f"{cfg.head_init_std!r} give {emb:g} and {head:g}, but tie=true shares one matrix: "
            "set only init_std, or use tie=false"
        )
    return {
        "emb": emb,
        "head": head,
        "body": cfg.body_init_std,
        "resid": cfg.body_init_std / math.sqrt(2 * cfg.n_layer),
    }
