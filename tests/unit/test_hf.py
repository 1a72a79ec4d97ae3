"""Hugging Face GPT-2 weights in and out (tiedvsuntied.model.hf): the same logits as
transformers' GPT2LMHeadModel, a lossless round trip, the Hub's original layout, and what
GPT-2's format cannot hold refused."""

from __future__ import annotations

import pytest
import torch
from conftest import batch, tiny

from tiedvsuntied.model.config import HeadConfig
from tiedvsuntied.model.gpt import GPT
from tiedvsuntied.model.hf import from_pretrained, save_pretrained


def assert_same_weights(a: GPT, b: GPT):
    sb = b.state_dict()
    for k, v in a.state_dict().items():
        assert torch.equal(v, sb[k]), k


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """{tie: (the model, the directory it was saved to)}."""
    out = {}
    for tie in (True, False):
        model = GPT(tiny(), tie=tie, seed=1).eval()
        with torch.no_grad():  # non-trivial LayerNorms and biases
            for p in model.parameters():
                if p.dim() == 1:
                    p.add_(0.1 * torch.randn(p.shape, generator=torch.Generator().manual_seed(2)))
        directory = tmp_path_factory.mktemp(f"hf_tie_{tie}")
        save_pretrained(model, directory)
        out[tie] = model, directory
    return out


def _random_hf_model(tie: bool):
    transformers = pytest.importorskip("transformers")
    hf_cfg = transformers.GPT2Config(
        vocab_size=101,
        n_positions=24,
        n_embd=48,
        n_layer=2,
        n_head=4,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        tie_word_embeddings=tie,
    )
    torch.manual_seed(0)
    hf = transformers.GPT2LMHeadModel(hf_cfg).eval()
    with torch.no_grad():  # HF inits LayerNorms to 1/0 and biases to 0: make every tensor count
        for name, p in hf.named_parameters():
            if "ln_" in name or name.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
    return hf


@pytest.mark.hf
@pytest.mark.parametrize("tie", [True, False])
def test_same_logits_as_transformers(tmp_path, tie):
    hf = _random_hf_model(tie)
    hf.save_pretrained(tmp_path)
    ours = from_pretrained(tmp_path, tie=tie).eval()
    assert ours.tie == tie and (ours.lm_head.weight is ours.transformer.wte.weight) == tie
    idx = torch.randint(0, 101, (2, 24))
    with torch.no_grad():
        logits, _ = ours(idx)
        assert logits.dtype == torch.float32
        assert (logits - hf(idx).logits).abs().max().item() <= 1e-4


@pytest.mark.hf
def test_save_pretrained_loads_in_transformers(saved):
    transformers = pytest.importorskip("transformers")
    model, directory = saved[True]
    hf = transformers.GPT2LMHeadModel.from_pretrained(directory).eval()
    assert hf.lm_head.weight.data_ptr() == hf.transformer.wte.weight.data_ptr()
    idx, _ = batch(model.config)
    with torch.no_grad():
        assert (model(idx)[0] - hf(idx).logits).abs().max().item() <= 1e-4


@pytest.mark.parametrize("tie", [True, False])
def test_save_pretrained_round_trip(saved, tie):
    model, directory = saved[tie]
    back = from_pretrained(directory, tie=tie).eval()
    assert back.tie == tie and (back.lm_head.weight is back.transformer.wte.weight) == tie
    assert_same_weights(model, back)
    idx, _ = batch(model.config)
    with torch.no_grad():
        assert torch.equal(model(idx)[0], back(idx)[0])


@pytest.mark.parametrize(
    "field, kwargs",
    [("bias", dict(cfg=tiny(bias=False))), ("t5_rescale", dict(head=HeadConfig(t5_rescale=True)))],
)
def test_save_pretrained_refuses_what_gpt2_cannot_express(tmp_path, field, kwargs):
    with pytest.raises(ValueError, match=field):
        save_pretrained(GPT(**{"cfg": tiny(), **kwargs}, seed=0), tmp_path)


def test_untie_from_a_tied_checkpoint_copies_the_embedding(saved):
    tied, directory = saved[True]
    untied = from_pretrained(directory, tie=False, dropout=0.1)
    assert not untied.tie and untied.config.dropout == 0.1
    assert torch.equal(untied.lm_head.weight, tied.transformer.wte.weight)  # a copy, never random
    with torch.no_grad():
        untied.lm_head.weight.add_(1.0)
    assert torch.equal(untied.transformer.wte.weight, tied.transformer.wte.weight)
    with pytest.raises(ValueError, match="n_embd"):
        from_pretrained(directory, n_embd=64)


def test_tie_from_an_untied_checkpoint_is_refused(saved):
    with pytest.raises(ValueError, match="tie=False"):
        from_pretrained(saved[False][1], tie=True)


def test_from_pretrained_crops_the_context(saved):
    model, directory = saved[True]
    short = from_pretrained(directory, block_size=8)
    assert torch.equal(short.transformer.wpe.weight, model.transformer.wpe.weight[:8])
    with pytest.raises(ValueError, match="n_positions=16"):
        from_pretrained(directory, block_size=32)


def test_from_pretrained_reads_the_original_gpt2_layout(saved, tmp_path):
    """The Hub's gpt2: pytorch_model.bin, keys without 'transformer.', causal-mask buffers."""
    from safetensors.torch import load_file

    model, directory = saved[True]
    (tmp_path / "config.json").write_bytes((directory / "config.json").read_bytes())
    sd = {
        k.removeprefix("transformer."): v
        for k, v in load_file(directory / "model.safetensors").items()
    }
    sd["h.0.attn.bias"] = torch.tril(torch.ones(16, 16)).view(1, 1, 16, 16)
    torch.save(sd, tmp_path / "pytorch_model.bin")
    assert_same_weights(model, from_pretrained(tmp_path))
    sd["h.0.attn.c_extra.weight"] = torch.zeros(2)
    torch.save(sd, tmp_path / "pytorch_model.bin")
    unexpected = r"unexpected keys \['transformer.h.0.attn.c_extra.weight'\]"
    with pytest.raises(ValueError, match=unexpected):
        from_pretrained(tmp_path)
