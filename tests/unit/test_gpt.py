"""The GPT module (tiedvsuntied.model.gpt): tying, the init table, seeding, the scales on the
way in and out, the gradient split of the embedding matrix, and untying and freezing for
fine-tuning."""

from __future__ import annotations

import math
import re
from fnmatch import fnmatchcase
from pathlib import Path

import pytest
import torch
from conftest import batch, tiny

from tiedvsuntied.model.accounting import count_parameters
from tiedvsuntied.model.config import HeadConfig, ModelConfig, ModelConfigError, Trainable
from tiedvsuntied.model.gpt import GPT, INIT_TABLE, set_trainable

REPO = Path(__file__).resolve().parents[2]


# ----------------------------------------------------------------------------- tying


def test_tied_is_one_parameter():
    model = GPT(tiny(), tie=True, seed=0)
    assert model.tie is True and model.lm_head.weight is model.transformer.wte.weight
    names = [n for n, _ in model.named_parameters()]
    assert "transformer.wte.weight" in names and "lm_head.weight" not in names
    assert {"transformer.wte.weight", "lm_head.weight"} <= set(model.state_dict())
    # update the head (an optimizer step on the head's gradient): the embedding changes
    before = model.transformer.wte.weight.detach().clone()
    x, y = batch(model.config)
    model(x, y)[1].backward()
    torch.optim.SGD([model.lm_head.weight], lr=1.0).step()
    assert not torch.equal(model.transformer.wte.weight, before)
    assert torch.equal(model.transformer.wte.weight, model.lm_head.weight)
    model.to_empty(device="cpu").to(torch.float64)  # plain nn.Module.to_empty would untie
    assert model.lm_head.weight is model.transformer.wte.weight


def test_untied_is_two_matrices():
    model = GPT(tiny(), tie=False, seed=0)
    assert model.tie is False and model.lm_head.weight is not model.transformer.wte.weight
    assert "lm_head.weight" in dict(model.named_parameters())
    before = model.transformer.wte.weight.detach().clone()
    with torch.no_grad():
        model.lm_head.weight.add_(1.0)
    assert torch.equal(model.transformer.wte.weight, before)


# ----------------------------------------------------------------------------- init


def _documented_table() -> list[tuple[str, str, str]]:
    """The (pattern, init, std symbol) rows of the init table in docs/model.md."""
    page = (REPO / "docs" / "model.md").read_text()
    rows = re.findall(r"^\| `([^`]+)` \| (\w+) \| (\S+) \|$", page, re.M)
    assert len(rows) >= 8, "docs/model.md has no init table"
    return rows


@pytest.mark.parametrize("tie", [True, False])
@pytest.mark.parametrize("init_std", ["1.0", "inv_sqrt_d"])
@pytest.mark.parametrize("n_embd", [64, 256])
def test_every_tensor_follows_the_documented_init_table(tie, init_std, n_embd):
    n_layer = 3
    cfg = ModelConfig(n_layer=n_layer, n_head=4, n_embd=n_embd, block_size=64, vocab_size=1024)
    model = GPT(cfg, tie=tie, init_std=init_std, seed=0)
    emb_std = 1.0 if init_std == "1.0" else n_embd**-0.5
    symbols = {"emb": emb_std, "head": emb_std, "body": 0.02, "resid": 0.02 / math.sqrt(6)}
    assert model.init_stds() == pytest.approx(symbols) and model.init_std == init_std
    seen = set()
    for name, p in model.named_parameters():
        rows = [(i, s) for pat, i, s in _documented_table() if fnmatchcase(name, pat)]
        assert len(rows) == 1, f"{name} matches {len(rows)} documented rows"
        init, sym = rows[0]
        seen.add(sym)
        p = p.detach()
        if init == "ones":
            assert torch.equal(p, torch.ones_like(p)), name
        elif init == "zeros":
            assert torch.equal(p, torch.zeros_like(p)), name
        else:
            assert init == "normal"
            std, n = p.std().item(), p.numel()
            assert abs(std / symbols[sym] - 1) < 4 / math.sqrt(n) + 0.01, (name, std, symbols[sym])
            assert abs(p.mean().item()) < 5 * symbols[sym] / math.sqrt(n), name
    assert seen >= {"emb", "body", "resid", "-"} and (("head" in seen) != tie)
    if tie:  # one matrix: the shared std, not overwritten by a second init
        assert model.lm_head.weight.std().item() == pytest.approx(emb_std, rel=0.02)


def test_docs_show_the_init_table():
    assert _documented_table() == list(INIT_TABLE)


def test_the_embedding_and_head_overrides_set_their_tensors():
    cfg = ModelConfig(n_embd=64, n_head=2, n_layer=1)
    head = HeadConfig(emb_init_std="1.0", init_std="0.01")
    model = GPT(cfg, tie=False, init_std="inv_sqrt_d", head=head, seed=0)
    assert model.transformer.wte.weight.std().item() == pytest.approx(1.0, rel=0.03)
    assert model.lm_head.weight.std().item() == pytest.approx(0.01, rel=0.03)
    untied = GPT(ModelConfig(n_embd=64), tie=False, head=HeadConfig(init_std="inv_sqrt_d"), seed=0)
    assert untied.init_stds()["emb"] == 0.02 and untied.init_stds()["head"] == 0.125


def test_initial_loss_is_ln_v_for_a_tiny_std_and_exactly_ln_v_for_a_zero_head():
    cfg = ModelConfig(n_layer=2, n_head=2, n_embd=64, block_size=32, vocab_size=50257)
    x, y = batch(cfg, B=2)
    with torch.no_grad():
        loss = GPT(cfg, init_std="1e-4", seed=0)(x, y)[1].item()
    assert loss == pytest.approx(math.log(50257), abs=2e-3)
    zero = GPT(tiny(), tie=False, init_std="0.02", head=HeadConfig(init_std="0"), seed=0)
    logits, loss = zero(*batch(zero.config))
    assert torch.count_nonzero(logits) == 0
    assert loss.item() == pytest.approx(math.log(97), abs=1e-6)
    assert zero.init_stds()["head"] == 0.0 and zero.transformer.wte.weight.std() > 0.01


# ----------------------------------------------------------------------------- seeding


def test_tied_and_untied_share_the_body_for_a_seed():
    tied, untied = GPT(tiny(), tie=True, seed=7), GPT(tiny(), tie=False, seed=7)
    u = dict(untied.named_parameters())
    for name, p in tied.named_parameters():  # every body tensor and wte
        assert torch.equal(p, u[name]), name
    assert not torch.equal(untied.lm_head.weight, untied.transformer.wte.weight)
    other = GPT(tiny(), seed=8).transformer.h[0].attn.c_attn.weight
    assert not torch.equal(other, tied.transformer.h[0].attn.c_attn.weight)


def test_a_seeded_build_leaves_the_global_rng_alone_and_seed_none_follows_it():
    state = torch.get_rng_state()
    GPT(tiny(), tie=True, seed=1)
    GPT(tiny(), tie=False, seed=1)
    assert torch.equal(torch.get_rng_state(), state)
    torch.manual_seed(123)
    a = GPT(tiny(), seed=None)
    torch.manual_seed(123)
    b = GPT(tiny(), seed=None)
    assert a.init_seed == b.init_seed
    assert torch.equal(a.transformer.wte.weight, b.transformer.wte.weight)


# ----------------------------------------------------------------------------- scales


def test_t5_rescale_is_the_tied_heads_logit_scale_inv_sqrt_d():
    """HF T5ForConditionalGeneration: `if tie_word_embeddings: h *= d**-0.5`."""
    cfg = tiny(n_embd=64)  # d^-0.5 = 1/8, a power of two: the product is exact
    plain, t5, scaled, twice = (
        GPT(cfg, head=HeadConfig(**head), seed=0).eval()
        for head in (
            {},
            dict(t5_rescale=True),
            dict(logit_scale="inv_sqrt_d"),
            dict(logit_scale="2"),
        )
    )
    idx, _ = batch(cfg)
    with torch.no_grad():
        assert torch.equal(t5(idx)[0], plain(idx)[0] * 64**-0.5)
        assert torch.equal(scaled(idx)[0], t5(idx)[0])
        torch.testing.assert_close(twice(idx)[0], 2 * plain(idx)[0])
        t5.untie("copy")  # untying by copy keeps the rescale: no logit changes
        torch.testing.assert_close(t5(idx)[0], plain(idx)[0] * 64**-0.5, rtol=0, atol=1e-6)


def test_emb_scale_multiplies_the_token_embedding_on_the_way_in_only():
    x, _ = batch(tiny())
    scaled = GPT(tiny(emb_scale="sqrt_d"), tie=False, seed=2)
    plain = GPT(tiny(), tie=False, seed=2)
    with torch.no_grad():
        plain.transformer.wte.weight.mul_(32**0.5)  # d = 32: the same input, an unchanged head
    torch.testing.assert_close(scaled(x)[0], plain(x)[0])


# ----------------------------------------------------------------------------- gradient split


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("return_logits", [True, False])
def test_grad_split_tied_sums_to_the_gradient(return_logits, compiled):
    model = GPT(tiny(), tie=True, seed=0)
    run = torch.compile(model, backend="aot_eager") if compiled else model
    split = {}
    for micro in range(2):  # accumulates over micro-batches
        x, y = batch(model.config, seed=micro)
        x = x % 50  # tokens >= 50 are never looked up: their rows get no input-side gradient
        run(x, y, return_logits=return_logits, grad_split=split)[1].backward()
    gin, gout = split["in"], split["out"]
    assert gin.dtype == gout.dtype == torch.float32
    torch.testing.assert_close(gin + gout, model.transformer.wte.weight.grad)
    assert gin[:50].abs().sum() > 0 and gin[50:].abs().sum() == 0
    assert gout[50:].abs().sum() > 0  # every row of the head gets a softmax gradient


@pytest.mark.parametrize("compiled", [False, True])
def test_grad_split_untied_is_the_two_gradients(compiled):
    model = GPT(tiny(), tie=False, seed=0)
    run = torch.compile(model, backend="aot_eager") if compiled else model
    split = {}
    run(*batch(model.config), grad_split=split)[1].backward()
    torch.testing.assert_close(split["in"], model.transformer.wte.weight.grad)
    torch.testing.assert_close(split["out"], model.lm_head.weight.grad)


def test_grad_split_on_and_off_and_fresh_dicts_do_not_recompile():
    """The trainer passes a new dict on logging steps and None on the others."""
    graphs = []

    def counting_backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    model = GPT(tiny(), seed=0)
    compiled = torch.compile(model, backend=counting_backend)
    x, y = batch(model.config)
    for step in range(6):
        compiled(x, y, return_logits=False, grad_split={} if step % 2 else None)[1].backward()
        if step == 1:
            after_warmup = len(graphs)  # both variants traced once
    assert len(graphs) == after_warmup


def test_grad_split_changes_no_gradient_and_needs_a_backward():
    on, off = GPT(tiny(), seed=0), GPT(tiny(), seed=0)
    x, y = batch(on.config)
    on(x, y, grad_split={})[1].backward()
    off(x, y)[1].backward()
    torch.testing.assert_close(on.transformer.wte.weight.grad, off.transformer.wte.weight.grad)
    split = {}
    with torch.no_grad():  # no backward: nothing hooked, nothing recorded
        on(x, y, grad_split=split)
    assert split == {}


# ----------------------------------------------------------------------------- input-side scale


def _scaled(scale: float, tie: bool = True) -> GPT:
    return GPT(tiny(), tie=tie, head=HeadConfig(tied_input_grad_scale=scale), seed=0)


def _split(model, x, y, **kw) -> dict:
    split = {}
    model(x, y, grad_split=split, **kw)[1].backward()
    return split


@pytest.mark.parametrize("scale", [3.0, 0.25])
def test_tied_input_grad_scale_changes_no_forward_bit(scale):
    plain, scaled = _scaled(1.0), _scaled(scale)
    x, y = batch(plain.config)
    for a, b in zip(plain(x, y), scaled(x, y), strict=True):
        assert torch.equal(a, b)
    chunked = (m(x, y, return_logits=False, grad_split={})[1] for m in (plain, scaled))
    assert torch.equal(*chunked)


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("scale", [3.0, 4.0, 0.25])
def test_tied_input_grad_scale_multiplies_the_lookup_sides_gradient_only(scale, compiled):
    """The split of a scaled model against an unscaled one's, from the same batch: "in" is
    exactly scale times, "out" is the same, and the matrix's gradient is their sum."""
    plain, scaled = _scaled(1.0), _scaled(scale)
    run = torch.compile(scaled, backend="aot_eager") if compiled else scaled  # the tap breaks
    x, y = batch(plain.config)
    x = x % 50  # rows of tokens never looked up get no input-side gradient at any scale
    want, got = (_split(m, x, y, return_logits=False) for m in (plain, run))
    assert torch.equal(got["in"], want["in"] * scale)
    assert got["in"][:50].abs().sum() > 0 and got["in"][50:].abs().sum() == 0
    torch.testing.assert_close(got["out"], want["out"])
    torch.testing.assert_close(got["in"] + got["out"], scaled.transformer.wte.weight.grad)
    body = plain.transformer.h[0].mlp.c_fc.weight.grad
    assert torch.equal(scaled.transformer.h[0].mlp.c_fc.weight.grad, body)


def test_tied_input_grad_scale_without_a_split_and_after_untying():
    """The trainer's steps pass no split on most steps: the matrix's gradient is scaled there
    too, compiled in one graph. Untied by copy (scheduled untying), the lookup's gradient is
    wte's own, unscaled."""
    plain, scaled = _scaled(1.0), _scaled(4.0)
    x, y = batch(plain.config)
    want = _split(plain, x, y)
    torch._dynamo.reset()  # earlier tests' graphs of GPT.forward count towards the recompile limit
    torch.compile(scaled, backend="aot_eager", fullgraph=True)(x, y)[1].backward()
    torch.testing.assert_close(scaled.transformer.wte.weight.grad, 4 * want["in"] + want["out"])
    for model in (plain, scaled):
        model.zero_grad()
        model.untie("copy")
        model(x, y)[1].backward()
    assert torch.equal(scaled.transformer.wte.weight.grad, plain.transformer.wte.weight.grad)


def test_tied_input_grad_scale_is_refused_for_an_untied_head():
    with pytest.raises(ModelConfigError, match=r"^head.tied_input_grad_scale=4 is invalid") as e:
        _scaled(4.0, tie=False)
    assert "tie=false" in str(e.value) and "\n" not in str(e.value)
    assert _scaled(1.0, tie=False).input_grad_scale == 1.0  # the neutral value is any head's


# ----------------------------------------------------------------------------- fine-tuning a head


def _one_step(model: GPT, trainable: str, x, y) -> None:
    from tiedvsuntied.train.optim import OptimConfig, build_optimizer

    set_trainable(model, trainable)
    opt = build_optimizer(model, OptimConfig(lr=1e-2, weight_decay=0.0))
    model(x, y, return_logits=False)[1].backward()
    opt.step()


def test_untie_by_copy_keeps_the_function_and_fresh_draws_an_untied_models_head():
    cfg = tiny()
    x, _ = batch(cfg)
    tied = GPT(cfg, tie=True, init_std="0.5", seed=3)
    before = tied(x)[0]
    tied.untie("copy")
    assert not tied.tie and tied.lm_head.weight is not tied.transformer.wte.weight
    torch.testing.assert_close(tied(x)[0], before, rtol=0, atol=1e-6)
    fresh = GPT(cfg, tie=True, init_std="0.5", seed=3)
    fresh.untie("fresh")
    assert (fresh(x)[0] - before).abs().max() > 1.0  # a random head: another function
    untied = GPT(cfg, tie=False, init_std="0.5", seed=3)
    assert torch.equal(fresh.lm_head.weight, untied.lm_head.weight)  # an untied run's head
    assert count_parameters(fresh)["head"] == cfg.vocab_size * cfg.n_embd
    with pytest.raises(ModelConfigError, match="already untied; valid only from a tied start"):
        untied.untie("copy")


def test_training_only_the_head_of_a_tied_model_moves_every_embedding_row():
    x, y = (t % 40 for t in batch(tiny()))  # tokens 40..96 never occur
    tied = GPT(tiny(), tie=True, seed=0)
    start = tied.transformer.wte.weight.detach().clone()
    _one_step(tied, "head", x, y)
    moved = (tied.transformer.wte.weight.detach() != start).any(dim=1)
    assert moved[40:].all() and moved.all()  # absent tokens too: the softmax reaches every row
    assert not tied.transformer.h[0].attn.c_attn.weight.requires_grad


def test_training_only_the_head_after_untie_by_copy_leaves_the_embedding_bit_for_bit():
    model = GPT(tiny(), tie=True, seed=0)
    model.untie("copy")
    emb, head = model.transformer.wte.weight.detach().clone(), model.lm_head.weight.detach().clone()
    _one_step(model, "head", *batch(model.config))
    assert torch.equal(model.transformer.wte.weight, emb)
    assert not torch.equal(model.lm_head.weight, head)


@pytest.mark.parametrize("tie", [True, False])
def test_trainable_sets_partition_the_parameters(tie):
    model = GPT(tiny(), tie=tie, seed=0)
    parts = count_parameters(model)
    counts = {w.value: set_trainable(model, w) for w in Trainable}
    assert all(c["trainable"] + c["frozen"] == parts["total"] for c in counts.values())
    assert counts["all"]["frozen"] == 0
    assert counts["body"]["trainable"] == parts["non_embedding"]
    assert counts["head"]["trainable"] == (parts["embedding"] if tie else parts["head"])
    assert counts["embedding"]["trainable"] == parts["embedding"] + parts["position"]
