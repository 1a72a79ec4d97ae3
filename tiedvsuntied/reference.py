"""nanoGPT's ``model.py`` as the benchmark's reference (``python -m tiedvsuntied.bench --nanogpt
PATH``): loaded from a karpathy/nanoGPT checkout, never vendored, and timed like our model (the
same shape, batch and random tokens) at nanoGPT's own best setting (bf16 autocast,
``torch.compile``, fused AdamW on CUDA, SDPA's flash attention, no biases, its vocabulary padded
to a multiple of 64: 50,304 for GPT-2's). nanoGPT always ties ``lm_head`` to ``wte``; its untied
arm gives the head a copy of the matrix, so the two arms differ as ours do: one V x d matrix and
its optimizer state."""

from __future__ import annotations

import functools
import importlib.util
import itertools
import sys
from pathlib import Path


def padded(vocab_size: int) -> int:
    """nanoGPT's vocabulary for ours: padded to a multiple of 64 (train.py: 50,257 -> 50,304)."""
    return -(-vocab_size // 64) * 64


def load_nanogpt(path: str):
    """The module of nanoGPT's model.py at ``path`` (a checkout or the file itself); a path
    without it is a ValueError naming the option, in one line."""
    file = Path(path).expanduser()
    file = file / "model.py" if file.is_dir() else file
    if not file.is_file():
        raise ValueError(
            f"--nanogpt={path}: no model.py there; give a karpathy/nanoGPT checkout "
            "(git clone https://github.com/karpathy/nanoGPT)"
        )
    spec = importlib.util.spec_from_file_location("nanogpt_model", file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass needs its module registered
    spec.loader.exec_module(module)
    if not all(hasattr(module, name) for name in ("GPT", "GPTConfig")):
        raise ValueError(f"--nanogpt={path}: {file} defines no GPT and GPTConfig")
    return module


def nanogpt(path: str, config, tie: bool, batch_size: int, device):
    """nanoGPT's GPT at the shape of our ModelConfig ``config`` (untied: the head a copy) on
    ``device``, its AdamW as its train.py configures it (fused on CUDA), and an endless
    iterator of random (x, y) batches at its vocabulary, on the CPU as ours come."""
    import torch

    module = load_nanogpt(path)
    shape = {k: getattr(config, k) for k in ("n_layer", "n_head", "n_embd", "block_size")}
    vocab = padded(config.vocab_size)
    model = module.GPT(module.GPTConfig(**shape, vocab_size=vocab, dropout=0.0, bias=False))
    if not tie:
        model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach().clone())
    model = model.to(device)
    optimizer = model.configure_optimizers(
        weight_decay=0.1, learning_rate=6e-4, betas=(0.9, 0.95), device_type=device.type
    )
    generator = torch.Generator().manual_seed(0)
    tokens = functools.partial(
        torch.randint, 0, vocab, (batch_size, config.block_size), generator=generator
    )
    return model, optimizer, ((tokens(), tokens()) for _ in itertools.count())
