"""The model: GPT-2 with a tied or untied output head, its init table, accounting and loss.

    config.py      ModelConfig (checked on construction), init-std spellings, check_config
    accounting.py  parameter counts and FLOPs per token, from a config or a model
    gpt.py         the GPT module: blocks, tying, the init table, gradient split, set_trainable
    loss.py        chunked cross-entropy (the loss without all the logits)
    hf.py          Hugging Face GPT-2 weights in and out

Only re-exports. config and accounting import no torch and are loaded here; the names that
need torch are loaded on first use (PEP 562), so the reading side (results, analysis,
figures) can `from tiedvsuntied.model import ModelConfig` without loading torch.
"""

from __future__ import annotations

import importlib

from tiedvsuntied.model.accounting import (
    count_parameters,
    count_parameters_for,
    flops_per_token,
)
from tiedvsuntied.model.config import (
    INV_SQRT_D,
    ModelConfig,
    ModelConfigError,
    canonical_init_std,
    check_config,
    init_std_note,
    init_std_notes,
    resolve_init_std,
    resolve_scales,
)

# name -> the module that defines it; imported when the name is first looked up
_LAZY = {
    "GPT": "gpt",
    "LN_EPS": "gpt",
    "INIT_TABLE": "gpt",
    "STD_LEGEND": "gpt",
    "TRAINABLE": "gpt",
    "init_rule": "gpt",
    "init_table_markdown": "gpt",
    "set_trainable": "gpt",
    "IGNORE_INDEX": "loss",
    "chunked_cross_entropy": "loss",
    "from_pretrained": "hf",
    "save_pretrained": "hf",
}

__all__ = [
    "INV_SQRT_D",
    "ModelConfig",
    "ModelConfigError",
    "canonical_init_std",
    "check_config",
    "init_std_note",
    "init_std_notes",
    "count_parameters",
    "count_parameters_for",
    "flops_per_token",
    "resolve_init_std",
    "resolve_scales",
    *_LAZY,
]


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
