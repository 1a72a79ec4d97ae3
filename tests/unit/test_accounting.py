"""Parameter and FLOP accounting (tiedvsuntied.model.accounting): GPT-2 small's published
counts, a built model's unique parameters, and no torch on the reading side."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny

from tiedvsuntied.model.accounting import count_parameters, count_parameters_for, flops_per_token
from tiedvsuntied.model.config import ModelConfig
from tiedvsuntied.model.gpt import GPT

GPT2_SMALL = ModelConfig(
    name="small", vocab_size=50257, block_size=1024, n_embd=768, n_layer=12, n_head=12
)


def test_gpt2_small_parameter_counts():
    tied = count_parameters_for(GPT2_SMALL, tie=True)
    untied = count_parameters_for(GPT2_SMALL, tie=False)
    assert tied["total"] == 124_439_808
    assert untied["total"] == 163_037_184
    assert tied["embedding"] == untied["embedding"] == 38_597_376
    assert tied["position"] == 786_432
    assert tied["head"] == 0 and untied["head"] == 38_597_376
    assert tied["non_embedding"] == untied["non_embedding"] == 124_439_808 - 38_597_376 - 786_432


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("tie", [True, False])
def test_count_parameters_on_a_real_model(tie, bias):
    cfg = tiny(bias=bias)
    model = GPT(cfg, tie=tie, seed=0)
    unique = {p.data_ptr(): p.numel() for p in model.parameters()}
    by_hand = sum(
        p.numel() for n, p in model.state_dict().items() if not (tie and n == "lm_head.weight")
    )
    counts = count_parameters(model)
    assert counts["total"] == sum(unique.values()) == by_hand
    assert counts == count_parameters_for(cfg, tie=tie)  # the count without a model agrees
    # a compiled model is unwrapped (any backend wraps it alike; inductor's import costs 0.7 s)
    assert counts == count_parameters(torch.compile(model, backend="eager"))
    assert counts["head"] == (0 if tie else cfg.vocab_size * cfg.n_embd)
    parts = counts["embedding"] + counts["position"] + counts["head"]
    assert counts["non_embedding"] == counts["total"] - parts


def test_flops_per_token():
    # 6 x (every parameter but wpe: the tied wte is the head's matmul) + attention
    expected = 6 * (124_439_808 - 786_432) + 12 * 12 * 768 * 1024
    assert flops_per_token(GPT2_SMALL) == expected
    with torch.device("meta"):
        assert flops_per_token(GPT(GPT2_SMALL, tie=False)) == expected
    assert flops_per_token(GPT(tiny(), seed=0)) == flops_per_token(tiny())
