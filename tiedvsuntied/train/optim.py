"""The optimizer every run uses: AdamW in two groups, its learning-rate schedule, and the
switch of scheduled untying (``untie_at``)."""

from __future__ import annotations

import math

import torch

from tiedvsuntied.train.config import OptimConfig, untie_step

__all__ = ["OptimConfig", "build_optimizer", "lr_at", "untie", "untie_step"]


def build_optimizer(model: torch.nn.Module, cfg: OptimConfig) -> torch.optim.AdamW:
    """Two groups; ``named_parameters`` lists a tied matrix once, so it is one parameter of
    one group. Embeddings and head are decayed only with ``decay_embeddings``."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:  # frozen (finetune.trainable): not the optimizer's
            continue
        is_emb = name.endswith(("wte.weight", "lm_head.weight", "wpe.weight"))
        (no_decay if p.dim() < 2 or (is_emb and not cfg.decay_embeddings) else decay).append(p)
    groups = [
        {"params": decay, "weight_decay": cfg.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    kwargs = dict(lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps)
    try:  # one fused kernel per step where this torch has it for the device
        return torch.optim.AdamW(groups, fused=True, **kwargs)
    except (RuntimeError, TypeError, ValueError):
        return torch.optim.AdamW(groups, **kwargs)


def lr_at(step: int, cfg: OptimConfig, max_steps: int) -> float:
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = min(1.0, (step - cfg.warmup_steps) / max(1, max_steps - cfg.warmup_steps))
    min_lr = cfg.lr * cfg.min_lr_ratio
    return min_lr + 0.5 * (1 + math.cos(math.pi * progress)) * (cfg.lr - min_lr)


def untie(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Scheduled untying, as speedrun records do it: the head becomes a copy of the tied matrix
    (the function is unchanged at the switch) and a parameter of its own, in a group with the
    embedding's hyperparameters, starting from a copy of the embedding's Adam moments and step
    count, so neither side restarts its bias correction."""
    wte = model.transformer.wte.weight
    group = next(g for g in optimizer.param_groups if any(p is wte for p in g["params"]))
    model.untie("copy")
    head = model.lm_head.weight
    optimizer.add_param_group(
        {**{k: v for k, v in group.items() if k != "params"}, "params": [head]}
    )
    optimizer.state[head] = {
        k: v.clone() if torch.is_tensor(v) else v for k, v in optimizer.state.get(wte, {}).items()
    }
