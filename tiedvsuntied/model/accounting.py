"""Parameter and FLOP accounting, from a config (no model built, no torch: the reading side
uses it) or from a model, read duck-typed so that this module never imports GPT's.

The tied matrix is one Parameter used twice (lookup and head): it counts once, as the embedding,
and "head" is 0 when tied. GPT-2 small is 124,439,808 tied and 163,037,184 untied.
"""

from __future__ import annotations

from tiedvsuntied.model.config import as_model_config


def unwrap(model):
    """The GPT inside a torch.compile (`_orig_mod`) and/or DDP (`module`) wrapper."""
    model = getattr(model, "_orig_mod", model)
    return getattr(model, "module", model)


def count_parameters_for(cfg, tie: bool = True) -> dict[str, int]:
    """Unique parameters of GPT(cfg, tie=tie) from the shapes alone (GPT-2 XL costs nothing):
    {"total", "embedding" (wte), "position" (wpe), "head" (lm_head; 0 when tied),
    "non_embedding"}."""
    cfg = as_model_config(cfg)
    d, bias = cfg.n_embd, int(cfg.bias)
    # a block: 2 LayerNorms, q k v, the attention's projection, a 4d-wide MLP
    block = 2 * (d + bias * d) + (3 + 1 + 4 + 4) * d * d + bias * (3 + 1 + 4 + 1) * d
    parts = {
        "embedding": cfg.vocab_size * d,
        "position": cfg.block_size * d,
        "head": 0 if tie else cfg.vocab_size * d,
        "non_embedding": cfg.n_layer * block + d + bias * d,  # + ln_f
    }
    return {"total": sum(parts.values()), **parts}


def head_share(counts: dict[str, int]) -> dict[str, float]:
    """The head's share of the model, from count_parameters' parts: ``rho`` = V*d / (V*d +
    non-embedding), the matrix's share of a tied model, and ``rho_untied`` = 2*V*d / (2*V*d +
    non-embedding), the share of embedding and head together untied. Position embeddings count
    in neither (they do not grow with V). GPT-2 small: 0.31 tied."""
    vd, body = counts["embedding"], counts["non_embedding"]
    return {"rho": vd / (vd + body), "rho_untied": 2 * vd / (2 * vd + body)}


def count_parameters(model) -> dict[str, int]:
    """count_parameters_for a built (compiled or DDP-wrapped) GPT, asserted to sum to its
    unique parameters (`parameters()` lists a shared Parameter once), as nanochat's does."""
    gpt = unwrap(model)
    counts = count_parameters_for(gpt.config, gpt.tie)
    total = sum(p.numel() for p in gpt.parameters())
    assert counts["total"] == total, (counts, total)
    return counts


def flops_per_token(model_or_cfg) -> float:
    """Training FLOPs per token (forward + backward), for MFU: PaLM's and nanoGPT's estimate
    6 * N_matmul + 12 * n_layer * n_embd * block_size (6 = multiply-add x forward, backward to
    activations and to weights; the attention's QKᵀ and AV over a full context, causal masking
    not discounted). N_matmul = non-embedding + V * d: tied or not, `h @ Eᵀ` costs the same,
    and lookups are gathers, not matmuls. Accepts a model or a ModelConfig / mapping."""
    cfg = unwrap(model_or_cfg).config if hasattr(model_or_cfg, "parameters") else model_or_cfg
    cfg = as_model_config(cfg)
    n_matmul = count_parameters_for(cfg)["non_embedding"] + cfg.vocab_size * cfg.n_embd
    return float(6 * n_matmul + 12 * cfg.n_layer * cfg.n_embd * cfg.block_size)
