"""The optimizer every run uses: AdamW in named groups (``body``, ``body_no_decay``, and the
embedding side: ``wte`` and ``lm_head`` untied, or ``tied``), each at its ``lr_scale`` times
the scheduled learning rate; the schedule; and the switch of scheduled untying (``untie_at``).
The groups and their scales: docs/ARCHITECTURE.md (the paragraph on the optimizer)."""

from __future__ import annotations

import math

import torch

from tiedvsuntied.train.config import LrScaling, LrSchedule, OptimConfig

EMBEDDING_SIDE = ("tied", "wte", "lm_head")  # the groups whose lr the optim.*_lr_mult keys set


def std_factor(model: torch.nn.Module, cfg: OptimConfig, std: float) -> float:
    """``lr_scaling=init_std``: the lr of a tensor of init std ``std`` relative to the body's, so
    that lr / std is the body's (the relative step of muP). AdamW moves a weight by about lr per
    step whatever its scale: one shared lr barely moves a std-1.0 embedding and moves a std-0.02
    one a lot. A zero-init head has no scale to keep: factor 1."""
    if LrScaling(cfg.lr_scaling) == LrScaling.none or std == 0:
        return 1.0
    return std / model.config.body_init_std


def group_lr_scales(model: torch.nn.Module, cfg: OptimConfig) -> dict[str, float]:
    """The multiple of the scheduled lr that each group of ``model`` (as it is tied now)
    trains at: its multiplier times its std factor."""
    stds = model.init_stds()
    if model.tie:  # check_config: tied, emb and head are one std
        tied = cfg.emb_lr_mult if cfg.tied_lr_mult is None else cfg.tied_lr_mult
        side = {"tied": tied * std_factor(model, cfg, stds["emb"])}
    else:
        head = cfg.emb_lr_mult if cfg.head_lr_mult is None else cfg.head_lr_mult
        side = {
            "wte": cfg.emb_lr_mult * std_factor(model, cfg, stds["emb"]),
            "lm_head": head * std_factor(model, cfg, stds["head"]),
        }
    return {"body": 1.0, "body_no_decay": 1.0, **side}


def group_name(name: str, p: torch.nn.Parameter, tie: bool, cfg: OptimConfig) -> str:
    if name.endswith("wte.weight"):
        return "tied" if tie else "wte"
    if name.endswith("lm_head.weight"):  # untied only: named_parameters lists a tied one as wte
        return "lm_head"
    # wpe is initialised like the body and trains with it; decayed as the embeddings are
    undecayed = p.dim() < 2 or (name.endswith("wpe.weight") and not cfg.decay_embeddings)
    return "body_no_decay" if undecayed else "body"


def build_optimizer(model: torch.nn.Module, cfg: OptimConfig) -> torch.optim.AdamW:
    """The named groups, empty ones left out (``named_parameters`` lists a tied matrix once: one
    parameter of one group)."""
    scales = group_lr_scales(model, cfg)
    params: dict[str, list] = {name: [] for name in scales}
    for name, p in model.named_parameters():
        if p.requires_grad:  # frozen (finetune.trainable): not the optimizer's
            params[group_name(name, p, model.tie, cfg)].append(p)
    emb_decay = cfg.weight_decay if cfg.decay_embeddings else 0.0
    decay = {"body": cfg.weight_decay, "body_no_decay": 0.0}
    groups = [
        {
            "name": name,
            "params": group,
            "weight_decay": decay.get(name, emb_decay),
            "lr_scale": scales[name],
            "lr": cfg.lr * scales[name],
        }
        for name, group in params.items()
        if group
    ]
    kwargs = dict(lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps)
    try:  # one fused kernel per step where this torch has it for the device
        return torch.optim.AdamW(groups, fused=True, **kwargs)
    except (RuntimeError, TypeError, ValueError):
        return torch.optim.AdamW(groups, **kwargs)


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Each group at its multiple of the scheduled ``lr`` (the body's)."""
    for group in optimizer.param_groups:
        group["lr"] = lr * group["lr_scale"]


def lr_scales(optimizer: torch.optim.Optimizer) -> dict[str, float]:
    """The groups the optimizer has now, by name, and their multiples of the scheduled lr."""
    return {group["name"]: group["lr_scale"] for group in optimizer.param_groups}


def decay_start(cfg: OptimConfig, max_steps: int) -> int:
    """The first step of the decay: the end of warmup (cosine), or ``decay_frac`` of
    ``max_steps`` before the end but not before warmup ends (wsd)."""
    if LrSchedule(cfg.schedule) == LrSchedule.cosine:
        return cfg.warmup_steps
    return max(cfg.warmup_steps, max_steps - max(1, round(cfg.decay_frac * max_steps)))


def lr_at(step: int, cfg: OptimConfig, max_steps: int) -> float:
    """The body's lr for the update of ``step`` (0-based): linear warmup to ``lr`` over
    ``warmup_steps``; then cosine, or wsd's stable ``lr`` until :func:`decay_start`; then the
    decay to ``lr * min_lr_ratio``, reached at ``max_steps``. wsd decays as 1 - sqrt(progress),
    the cooldown Hägele et al. 2024 found to beat a linear one and match cosine."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    start = decay_start(cfg, max_steps)
    progress = min(1.0, max(0, step - start) / max(1, max_steps - start))
    if LrSchedule(cfg.schedule) == LrSchedule.cosine:
        left = 0.5 * (1 + math.cos(math.pi * progress))
    else:
        left = 1 - math.sqrt(progress)
    min_lr = cfg.lr * cfg.min_lr_ratio
    return min_lr + left * (cfg.lr - min_lr)


def untie(model: torch.nn.Module, optimizer: torch.optim.Optimizer, cfg: OptimConfig) -> None:
    """Scheduled untying, as speedrun records do it: the head becomes a copy of the tied matrix
    (the function is unchanged at the switch) and a parameter of its own, in a group ``lm_head``
    with the embedding's hyperparameters and a copy of its Adam moments and step count, so
    neither side restarts its bias correction nor changes its step size. A copy has the tied
    matrix's std, so the tied group's scale carries on unless ``head_lr_mult`` is set."""
    wte = model.transformer.wte.weight
    group = next(g for g in optimizer.param_groups if any(p is wte for p in g["params"]))
    scale = group["lr_scale"]
    if cfg.head_lr_mult is not None:
        scale = cfg.head_lr_mult * std_factor(model, cfg, model.init_stds()["emb"])
    model.untie("copy")
    head = model.lm_head.weight
    optimizer.add_param_group(
        {
            **{k: v for k, v in group.items() if k != "params"},
            "params": [head],
            "name": "lm_head",
            "lr_scale": scale,
            "lr": group["lr"] / group["lr_scale"] * scale,
        }
    )
    optimizer.state[head] = {
        k: v.clone() if torch.is_tensor(v) else v for k, v in optimizer.state.get(wte, {}).items()
    }
