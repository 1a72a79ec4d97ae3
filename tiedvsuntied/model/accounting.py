"""Parameter and FLOP accounting, from a config (no model built, no torch: the reading side
uses it) or from a model, read duck-typed so that this module never imports GPT's.

The tied matrix is one Parameter used twice (lookup and head): it counts once, as the embedding,
and "head" is 0 when tied. GPT-2 small is 124,439,808 tied and 163,037,184 untied.
"""

from __future__ import annotations

from tiedvsuntied.model.config import ModelConfig, as_model_config

EMBEDDING_NAMES = ("transformer.wte.weight", "transformer.wpe.weight", "lm_head.weight")


def unwrap(model):
    """The GPT inside a torch.compile (`_orig_mod`) and/or DDP (`module`) wrapper."""
    model = getattr(model, "_orig_mod", model)
    return getattr(model, "module", model)


def block_parameters(cfg: ModelConfig) -> dict[str, int]:
    """Parameters of one transformer block, by tensor group (d = n_embd; 4d-wide MLP)."""
    d, bias = cfg.n_embd, int(cfg.bias)
    return {
        "ln_1": d + bias * d,
        "attn.c_attn": 3 * d * d + bias * 3 * d,  # q, k, v
        "attn.c_proj": d * d + bias * d,
        "ln_2": d + bias * d,
        "mlp.c_fc": 4 * d * d + bias * 4 * d,
        "mlp.c_proj": 4 * d * d + bias * d,
    }


def count_parameters_for(cfg, tie: bool = True) -> dict[str, int]:
    """count_parameters of a model that is never built, from the shapes alone (GPT-2 XL costs
    nothing); it agrees with count_parameters(GPT(cfg, tie=tie)) (tested)."""
    cfg = as_model_config(cfg)
    d = cfg.n_embd
    ln_f = d + int(cfg.bias) * d
    parts = {
        "embedding": cfg.vocab_size * d,
        "position": cfg.block_size * d,
        "head": 0 if tie else cfg.vocab_size * d,
        "non_embedding": cfg.n_layer * sum(block_parameters(cfg).values()) + ln_f,
    }
    return {"total": sum(parts.values()), **parts}


def count_parameters(model) -> dict[str, int]:
    """Unique parameters of a (compiled or DDP-wrapped) GPT: {"total", "embedding" (wte),
    "position" (wpe), "head" (lm_head; 0 when tied), "non_embedding"}. `parameters()` lists a
    shared Parameter once; the parts are asserted to sum to it (as nanochat's accounting does)."""
    gpt = unwrap(model)
    parts = {
        "embedding": gpt.transformer.wte.weight.numel(),
        "position": gpt.transformer.wpe.weight.numel(),
        "head": 0 if gpt.tie else gpt.lm_head.weight.numel(),
        "non_embedding": sum(
            p.numel() for name, p in gpt.named_parameters() if name not in EMBEDDING_NAMES
        ),
    }
    total = sum(p.numel() for p in gpt.parameters())
    assert sum(parts.values()) == total, (parts, total)
    return {"total": total, **parts}


def flops_per_token(model_or_cfg) -> float:
    """Training FLOPs per token (forward + backward), for MFU; the PaLM / nanoGPT estimate.

    6 * N_matmul + 12 * n_layer * n_embd * block_size, where
    - N_matmul = non-embedding parameters + V * d: every weight touched by a matmul, the head
      included in both modes (tied or not, `h @ Eᵀ` costs the same); the embedding lookups are
      gathers, not matmuls, so wte-as-lookup and wpe are left out. LayerNorm gains and biases
      are counted too (< 1%, as in nanoGPT);
    - 6 = 2 (multiply-add) x 3 (forward, backward to activations, backward to weights);
    - the attention term is QKᵀ and AV over a full block_size context (causal masking not
      discounted). Tied and untied models therefore have the same FLOPs per token.
    Accepts a model (anything with `parameters()`) or a ModelConfig / mapping."""
    cfg = unwrap(model_or_cfg).config if hasattr(model_or_cfg, "parameters") else model_or_cfg
    cfg = as_model_config(cfg)
    n_matmul = count_parameters_for(cfg)["non_embedding"] + cfg.vocab_size * cfg.n_embd
    return float(6 * n_matmul + 12 * cfg.n_layer * cfg.n_embd * cfg.block_size)
