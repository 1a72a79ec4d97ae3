"""The model: HF equivalence, tying, the init table, seeding, chunked loss, gradient split,
parameter accounting, bad input and pretrained weights."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from dataclasses import asdict
from fnmatch import fnmatchcase
from pathlib import Path

import pytest
import torch
from torch.nn import functional as F

from tiedvsuntied.hf import from_pretrained, save_pretrained
from tiedvsuntied.model import (
    GPT,
    ModelConfig,
    ModelConfigError,
    canonical_init_std,
    check_config,
    count_parameters,
    count_parameters_for,
    flops_per_token,
    init_std_note,
    init_std_notes,
    init_table_markdown,
    resolve_init_std,
)
from tiedvsuntied.model.loss import chunked_cross_entropy

REPO = Path(__file__).resolve().parents[1]
GPT2_SMALL = ModelConfig(
    name="small", vocab_size=50257, block_size=1024, n_embd=768, n_layer=12, n_head=12
)


def tiny(**kw) -> ModelConfig:
    return ModelConfig(
        **{**dict(name="tiny", n_layer=2, n_head=4, n_embd=32, block_size=16, vocab_size=97), **kw}
    )


def batch(cfg, B=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, cfg.vocab_size, (B, cfg.block_size), generator=g)
    y = torch.randint(0, cfg.vocab_size, (B, cfg.block_size), generator=g)
    return x, y


def assert_same_weights(a: GPT, b: GPT):
    sb = b.state_dict()
    for k, v in a.state_dict().items():
        assert torch.equal(v, sb[k]), k


# ----------------------------------------------------------------------------- HF equivalence


def _random_hf_model(tie=True):
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
        expected = hf(idx).logits
        logits, _ = ours(idx)
    assert logits.dtype == torch.float32
    assert (logits - expected).abs().max().item() <= 1e-4


@pytest.mark.hf
def test_save_pretrained_loads_in_transformers(tmp_path):
    transformers = pytest.importorskip("transformers")
    cfg = tiny(vocab_size=101)
    model = GPT(cfg, seed=3).eval()
    with torch.no_grad():  # non-trivial LayerNorms and biases
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    save_pretrained(model, tmp_path)
    hf = transformers.GPT2LMHeadModel.from_pretrained(tmp_path).eval()
    assert hf.lm_head.weight.data_ptr() == hf.transformer.wte.weight.data_ptr()
    idx, _ = batch(cfg)
    with torch.no_grad():
        assert (model(idx)[0] - hf(idx).logits).abs().max().item() <= 1e-4


@pytest.mark.parametrize("tie", [True, False])
def test_save_pretrained_round_trip(tmp_path, tie):
    model = GPT(tiny(), tie=tie, seed=1).eval()
    save_pretrained(model, tmp_path)
    back = from_pretrained(tmp_path, tie=tie).eval()
    assert back.tie == tie and (back.lm_head.weight is back.transformer.wte.weight) == tie
    assert_same_weights(model, back)
    idx, _ = batch(model.config)
    with torch.no_grad():
        assert torch.equal(model(idx)[0], back(idx)[0])


@pytest.mark.parametrize("field", ["bias", "t5_rescale"])
def test_save_pretrained_refuses_what_gpt2_cannot_express(tmp_path, field):
    with pytest.raises(ValueError, match=field):
        save_pretrained(GPT(tiny(**{field: field == "t5_rescale"}), seed=0), tmp_path)


def test_untie_from_a_tied_checkpoint_copies_the_embedding(tmp_path):
    tied = GPT(tiny(), tie=True, seed=0)
    save_pretrained(tied, tmp_path)
    untied = from_pretrained(tmp_path, tie=False, dropout=0.1)
    assert not untied.tie and untied.config.dropout == 0.1
    assert torch.equal(untied.lm_head.weight, tied.transformer.wte.weight)  # a copy, never random
    with torch.no_grad():
        untied.lm_head.weight.add_(1.0)
    assert torch.equal(untied.transformer.wte.weight, tied.transformer.wte.weight)
    with pytest.raises(ValueError, match="n_embd"):
        from_pretrained(tmp_path, n_embd=64)


def test_tie_from_an_untied_checkpoint_is_refused(tmp_path):
    save_pretrained(GPT(tiny(), tie=False, seed=0), tmp_path)
    with pytest.raises(ValueError, match="tie=False"):
        from_pretrained(tmp_path, tie=True)


def test_from_pretrained_crops_the_context(tmp_path):
    model = GPT(tiny(), seed=0)
    save_pretrained(model, tmp_path)
    short = from_pretrained(tmp_path, block_size=8)
    assert torch.equal(short.transformer.wpe.weight, model.transformer.wpe.weight[:8])
    with pytest.raises(ValueError, match="n_positions=16"):
        from_pretrained(tmp_path, block_size=32)


def test_from_pretrained_reads_the_original_gpt2_layout(tmp_path):
    """The Hub's gpt2: pytorch_model.bin, keys without 'transformer.', causal-mask buffers."""
    from safetensors.torch import load_file

    model = GPT(tiny(), seed=0)
    save_pretrained(model, tmp_path)
    sd = {
        k.removeprefix("transformer."): v
        for k, v in load_file(tmp_path / "model.safetensors").items()
    }
    sd["h.0.attn.bias"] = torch.tril(torch.ones(16, 16)).view(1, 1, 16, 16)
    (tmp_path / "model.safetensors").unlink()
    torch.save(sd, tmp_path / "pytorch_model.bin")
    assert_same_weights(model, from_pretrained(tmp_path))
    sd["h.0.attn.c_extra.weight"] = torch.zeros(2)
    torch.save(sd, tmp_path / "pytorch_model.bin")
    with pytest.raises(
        ValueError, match=r"unexpected keys \['transformer.h.0.attn.c_extra.weight'\]"
    ):
        from_pretrained(tmp_path)


def test_unreachable_hub_fails_fast_and_says_what_to_do(monkeypatch, tmp_path):
    # A fresh interpreter: huggingface_hub reads HF_HUB_OFFLINE when it is imported.
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf")}  # an empty cache
    code = (
        "import time\n"
        "from tiedvsuntied.hf import from_pretrained\n"
        "start = time.monotonic()\n"
        "try:\n"
        "    from_pretrained('tiedvsuntied-tests/no-such-model')\n"
        "except OSError as e:\n"
        "    print(f'{time.monotonic() - start:.2f}'); print(e)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )  # the guard: a hanging download fails the test
    assert proc.returncode == 0 and proc.stdout, proc.stderr  # OSError raised and caught
    seconds, message = proc.stdout.split("\n", 1)
    assert float(seconds) < 20, f"took {seconds} s to fail"
    # (a repo that does not exist: where the Hub is reachable this fails fast too, no download)
    assert "tiedvsuntied-tests/no-such-model" in message and "local directory" in message


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


def test_untied_is_two_matrices():
    model = GPT(tiny(), tie=False, seed=0)
    assert model.tie is False and model.lm_head.weight is not model.transformer.wte.weight
    assert "lm_head.weight" in dict(model.named_parameters())
    before = model.transformer.wte.weight.detach().clone()
    with torch.no_grad():
        model.lm_head.weight.add_(1.0)
    assert torch.equal(model.transformer.wte.weight, before)


def test_tie_survives_to_empty_and_to():
    model = GPT(tiny(), tie=True, seed=0)
    model.to_empty(device="cpu").to(torch.float64)  # plain nn.Module.to_empty would untie
    assert model.lm_head.weight is model.transformer.wte.weight


def test_t5_rescale_is_t5s_tied_head_only():
    """HF T5ForConditionalGeneration: `if tie_word_embeddings: h *= d**-0.5`; untied, nothing."""
    cfg = tiny(n_embd=64)  # d^-0.5 = 1/8, a power of two: the product is exact
    plain, t5 = GPT(cfg, seed=0).eval(), GPT(tiny(n_embd=64, t5_rescale=True), seed=0).eval()
    assert_same_weights(plain, t5)
    idx, _ = batch(cfg)
    with torch.no_grad():
        assert torch.equal(t5(idx)[0], plain(idx)[0] * 64**-0.5)
    refused = "model.t5_rescale=true is invalid with tie=false: .* model.logit_scale=inv_sqrt_d$"
    with pytest.raises(ModelConfigError, match=refused):
        GPT(tiny(t5_rescale=True), tie=False)
    with pytest.raises(ModelConfigError, match=refused):
        check_config(tiny(t5_rescale=True), tie=False)
    untied = GPT(tiny(n_embd=64, logit_scale="inv_sqrt_d"), tie=False, seed=0)  # the untied way
    assert untied.logit_scale == t5.logit_scale == 64**-0.5


def test_untying_a_t5_head_by_copy_keeps_its_rescale():
    model = GPT(tiny(t5_rescale=True), seed=0).eval()
    idx, _ = batch(model.config)
    with torch.no_grad():
        before = model(idx)[0]
        model.untie("copy")
        torch.testing.assert_close(model(idx)[0], before, rtol=0, atol=1e-6)


# ----------------------------------------------------------------------------- init


def _documented_table() -> list[tuple[str, str, str]]:
    """The (pattern, init, std symbol) rows of the table in GPT.init_weights' docstring."""
    rows = re.findall(r"^\| `([^`]+)` \| (\w+) \| (\S+) \|$", GPT.init_weights.__doc__, re.M)
    assert len(rows) >= 8, "init_weights docstring has no init table"
    return rows


@pytest.mark.parametrize("tie", [True, False])
@pytest.mark.parametrize("init_std", ["1.0", "inv_sqrt_d"])
@pytest.mark.parametrize("n_embd", [64, 256])
def test_every_tensor_follows_the_documented_init_table(tie, init_std, n_embd):
    n_layer = 3
    cfg = ModelConfig(n_layer=n_layer, n_head=4, n_embd=n_embd, block_size=64, vocab_size=1024)
    model = GPT(cfg, tie=tie, init_std=init_std, seed=0)
    emb_std = 1.0 if init_std == "1.0" else n_embd**-0.5
    symbols = {
        "emb": emb_std,
        "head": emb_std,
        "body": 0.02,
        "resid": 0.02 / math.sqrt(2 * n_layer),
    }
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
    assert init_table_markdown() in (REPO / "docs" / "model.md").read_text()


@pytest.mark.parametrize(
    "value, spelling",
    [
        ("1", "1.0"),
        ("1.0", "1.0"),
        ("1e0", "1.0"),
        (1, "1.0"),
        (0.036, "0.036"),
        (" 0.02 ", "0.02"),
        ("inv_sqrt_d", "inv_sqrt_d"),
        ("d^-0.5", "inv_sqrt_d"),
    ],
)
def test_canonical_init_std(value, spelling):
    assert canonical_init_std(value) == spelling


@pytest.mark.parametrize("value", ["big", "0", "-1.0", "nan", "inf", True, None, ""])
def test_canonical_init_std_refuses_with_one_line_naming_the_key(value):
    with pytest.raises(ModelConfigError, match=r"^init_std=.* inv_sqrt_d") as e:
        canonical_init_std(value)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    "value, n_embd, note",
    [
        (
            0.036,
            128,
            "init_std=0.036 is d^-0.5 at d=768, not at this model's d=128 (0.088): "
            "use init_std=inv_sqrt_d for d^-0.5 at every width",
        ),
        ("0.125", 128, "init_std=0.125 is d^-0.5 at d=64, not at this model's d=128 (0.088)"),
        ("0.036", 768, None),  # this width's d^-0.5: the number is what it says
        ("0.088", 128, None),
        ("inv_sqrt_d", 128, None),
        ("0.02", 128, None),  # GPT-2's std is no width's d^-0.5
        ("1.0", 128, None),
    ],
)
def test_init_std_note_names_inv_sqrt_d_and_this_widths_value(value, n_embd, note):
    got = init_std_note(value, n_embd)
    if note is None:
        assert got is None
    else:
        assert got.startswith(note) and "\n" not in got


def test_init_std_notes_cover_the_overrides_and_change_no_identity():
    cfg = tiny(n_embd=128, head_init_std="0.036")
    notes = init_std_notes(cfg, init_std="0.036")
    assert [n.split("=")[0] for n in notes] == ["init_std", "model.head_init_std"]
    assert init_std_notes(tiny(n_embd=128), "inv_sqrt_d") == []
    assert canonical_init_std("0.036") == "0.036"  # the run keeps its name and hash


def test_resolve_init_std_and_overrides():
    assert resolve_init_std("0.036", 768) == 0.036
    assert resolve_init_std(1.0, 768) == 1.0
    assert resolve_init_std("inv_sqrt_d", 768) == 768**-0.5
    assert resolve_init_std("d^-0.5", 64) == 0.125
    cfg = ModelConfig(
        emb_init_std="1.0",
        head_init_std="0.01",
        n_embd=64,
        n_head=2,
        n_layer=1,
        vocab_size=4096,
        block_size=8,
    )
    model = GPT(cfg, tie=False, init_std="inv_sqrt_d", seed=0)
    assert model.init_stds()["emb"] == 1.0 and model.init_stds()["head"] == 0.01
    assert model.transformer.wte.weight.std().item() == pytest.approx(1.0, rel=0.03)
    assert model.lm_head.weight.std().item() == pytest.approx(0.01, rel=0.03)
    untied = GPT(
        ModelConfig(head_init_std="inv_sqrt_d", n_embd=64), tie=False, init_std="0.02", seed=0
    )
    assert untied.init_stds()["emb"] == 0.02 and untied.init_stds()["head"] == 0.125


def test_initial_loss_is_ln_v_for_a_tiny_std():
    cfg = ModelConfig(n_layer=2, n_head=2, n_embd=64, block_size=32, vocab_size=50257)
    x, y = batch(cfg, B=2)
    with torch.no_grad():
        loss = GPT(cfg, init_std="1e-4", seed=0)(x, y)[1].item()
    assert loss == pytest.approx(math.log(50257), abs=2e-3)
    assert math.log(50257) == pytest.approx(10.8249, abs=1e-4)


# ----------------------------------------------------------------------------- seeding


def test_tied_and_untied_share_the_body_for_a_seed():
    tied, untied = GPT(tiny(), tie=True, seed=7), GPT(tiny(), tie=False, seed=7)
    u = dict(untied.named_parameters())
    for name, p in tied.named_parameters():  # every body tensor and wte
        assert torch.equal(p, u[name]), name
    assert not torch.equal(untied.lm_head.weight, untied.transformer.wte.weight)
    other = GPT(tiny(), seed=8)
    assert not torch.equal(
        other.transformer.h[0].attn.c_attn.weight, tied.transformer.h[0].attn.c_attn.weight
    )


def test_a_seeded_build_leaves_the_global_rng_alone():
    state = torch.get_rng_state()
    GPT(tiny(), tie=True, seed=1)
    GPT(tiny(), tie=False, seed=1)
    assert torch.equal(torch.get_rng_state(), state)


def test_seed_none_follows_the_global_rng():
    torch.manual_seed(123)
    a = GPT(tiny(), seed=None)
    torch.manual_seed(123)
    b = GPT(tiny(), seed=None)
    assert a.init_seed == b.init_seed and torch.equal(
        a.transformer.wte.weight, b.transformer.wte.weight
    )


# ----------------------------------------------------------------------------- forward & loss


def _grads(model):
    return {n: p.grad.detach().clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("tie", [True, False])
def test_chunked_loss_equals_full_loss_and_gradients(tie):
    cfg = tiny()
    x, y = batch(cfg)
    y[0, :5] = -1  # ignored targets
    full, chunked = GPT(cfg, tie=tie, seed=0), GPT(cfg, tie=tie, seed=0)
    logits, loss_full = full(x, y)
    # 7 does not divide B*T = 48: a ragged last chunk
    none, loss_chunked = chunked(x, y, loss_chunk=7, return_logits=False)
    assert none is None and logits.shape == (3, 16, cfg.vocab_size)
    torch.testing.assert_close(loss_chunked, loss_full, rtol=1e-6, atol=1e-6)
    loss_full.backward()
    loss_chunked.backward()
    g_full, g_chunked = _grads(full), _grads(chunked)
    for n in g_full:
        torch.testing.assert_close(g_chunked[n], g_full[n], rtol=1e-5, atol=1e-7, msg=n)
    with torch.no_grad():
        torch.testing.assert_close(
            chunked(x, y, loss_chunk=7, return_logits=False)[1], loss_full, rtol=1e-6, atol=1e-6
        )


@pytest.mark.parametrize("chunk", [7, 0])
def test_per_token_losses_are_the_mean_losses_parts(chunk):
    """reduction="none" (evaluation's per-window losses): chunked or not, the same numbers."""
    cfg = tiny()
    x, y = batch(cfg)
    model = GPT(cfg, seed=0)
    with torch.no_grad():
        per_token = model(x, y, loss_chunk=chunk, return_logits=False, reduction="none")[1]
        logits = model(x)[0]
    assert per_token.shape == y.shape
    expected = F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="none").view(y.shape)
    torch.testing.assert_close(per_token, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(per_token.mean(), model(x, y)[1], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("off", [None, 0])
def test_loss_chunk_off_gives_the_full_loss_without_logits(off):
    cfg = tiny()
    x, y = batch(cfg)
    model = GPT(cfg, seed=0)
    logits, loss = model(x, y, loss_chunk=off, return_logits=False)
    assert logits is None and torch.equal(loss, model(x, y)[1])


def test_chunked_cross_entropy_scales_with_the_incoming_gradient():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(10, 8, generator=g, requires_grad=True)
    w = torch.randn(13, 8, generator=g, requires_grad=True)
    t = torch.randint(0, 13, (10,), generator=g)
    (3.0 * chunked_cross_entropy(x, w, t, chunk=4)).backward()
    gx, gw = x.grad.clone(), w.grad.clone()
    x.grad = w.grad = None
    (3.0 * torch.nn.functional.cross_entropy(x @ w.t(), t)).backward()
    torch.testing.assert_close(gx, x.grad)
    torch.testing.assert_close(gw, w.grad)


def test_autocast_bf16_on_cpu():
    cfg = tiny()
    x, y = batch(cfg)
    model = GPT(cfg, seed=0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits, loss_full = model(x, y)
        _, loss_chunked = model(x, y, loss_chunk=10, return_logits=False)
    assert logits.dtype == torch.float32 and loss_full.dtype == torch.float32
    assert loss_chunked.item() == pytest.approx(loss_full.item(), rel=1e-2)
    loss_chunked.backward()
    assert model.transformer.wte.weight.grad.dtype == torch.float32
    assert torch.isfinite(model.transformer.wte.weight.grad).all()


def test_compiles_without_graph_breaks():
    model = GPT(tiny(), seed=0)
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    x, y = batch(model.config)
    _, loss = compiled(x, y, return_logits=False)
    loss.backward()
    assert torch.isfinite(loss)


def test_too_long_sequence_is_refused():
    model = GPT(tiny(), seed=0)
    with pytest.raises(ValueError, match="block_size"):
        model(torch.zeros(1, 17, dtype=torch.long))


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
    x, y = batch(model.config)
    run(x, y, grad_split=split)[1].backward()
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


# ----------------------------------------------------------------------------- accounting


def test_gpt2_small_parameter_counts():
    tied, untied = (
        count_parameters_for(GPT2_SMALL, tie=True),
        count_parameters_for(GPT2_SMALL, tie=False),
    )
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
    assert counts == count_parameters_for(cfg, tie=tie)  # the meta-device count agrees
    assert counts == count_parameters(torch.compile(model))  # a compiled model is unwrapped
    assert counts["head"] == (0 if tie else cfg.vocab_size * cfg.n_embd)
    assert (
        counts["non_embedding"]
        == counts["total"] - counts["embedding"] - counts["position"] - counts["head"]
    )


def test_flops_per_token():
    # 6 x (every parameter but wpe: the tied wte is the head's matmul) + attention
    expected = 6 * (124_439_808 - 786_432) + 12 * 12 * 768 * 1024
    assert flops_per_token(GPT2_SMALL) == expected
    with torch.device("meta"):
        assert flops_per_token(GPT(GPT2_SMALL, tie=False)) == expected
    assert flops_per_token(GPT(tiny(), seed=0)) == flops_per_token(tiny())


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "key, value, says",
    [
        ("model.n_head", dict(n_head=3, n_embd=100), "must divide model.n_embd=100"),
        ("model.n_layer", dict(n_layer=0), "> 0"),
        ("model.dropout", dict(dropout=1.0), r"\[0, 1\)"),
        ("model.dropout", dict(dropout=-0.1), r"\[0, 1\)"),
        ("model.body_init_std", dict(body_init_std=0.0), "> 0"),
        ("init_std", dict(init_std="0"), "> 0"),
        ("init_std", dict(init_std="big"), "inv_sqrt_d"),
        ("model.head_init_std", dict(head_init_std="nan", tie=False), ">= 0"),
        ("tie", dict(tie="false"), "true or false"),
        ("model.t5_rescale", dict(t5_rescale=True, tie=False), "model.logit_scale=inv_sqrt_d"),
        (
            "model.emb_init_std",
            dict(emb_init_std="1.0", head_init_std="0.02"),
            "tie=true shares one matrix",
        ),
    ],
)
def test_bad_config_is_refused_before_allocating_in_one_line(key, value, says):
    run_keys = {k: value.pop(k) for k in ("tie", "init_std") if k in value}
    # a vocabulary this large could not be allocated: the error must come first
    with pytest.raises(ModelConfigError, match=f"^{re.escape(key)}=.*{says}") as e:
        GPT(ModelConfig(**{"vocab_size": 10**12, **value}), **run_keys)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    "value",
    [
        dict(n_head=3, n_embd=100),
        dict(block_size=0),
        dict(dropout=1.0),
        dict(body_init_std=float("nan")),
        dict(emb_init_std="big"),
        dict(head_init_std="-1"),
        dict(logit_scale="0"),
        dict(emb_scale="sqrt"),
    ],
)
def test_a_bad_field_is_refused_where_the_config_is_made(value):
    """A check that needs only the model's own fields runs in ModelConfig.__post_init__."""
    key = next(iter(value))  # the key the message names
    with pytest.raises(ModelConfigError, match=f"^model.{key}=") as e:
        ModelConfig(**value)
    assert "\n" not in str(e.value)


def test_check_config_checks_a_field_set_after_construction():
    cfg = tiny()
    cfg.n_layer = 0  # as an OmegaConf merge or a dataclass attribute write can do
    with pytest.raises(ModelConfigError, match=r"^model.n_layer=0 is invalid: it must be > 0$"):
        check_config(cfg)
    assert check_config(tiny(), tie=False, init_std="1.0")["head"] == 1.0


def test_config_and_accounting_import_no_torch():
    """The reading side (results, analysis, figures) counts parameters without torch."""
    code = (
        "import sys\n"
        "import tiedvsuntied.model.accounting, tiedvsuntied.model.config\n"
        "from tiedvsuntied.model import ModelConfig, count_parameters_for, canonical_init_std\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
        "from tiedvsuntied.model import GPT\n"
        "assert 'torch' in sys.modules and GPT.__module__ == 'tiedvsuntied.model.gpt'\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_the_package_names_every_lazy_name_and_refuses_others():
    import tiedvsuntied.model as model_package

    for name in model_package.__all__:
        assert name in dir(model_package) and getattr(model_package, name) is not None, name
    assert model_package.set_trainable.__module__ == "tiedvsuntied.model.gpt"
    assert not hasattr(model_package, "no_such_name")  # AttributeError, as a module would


def test_tied_overrides_that_agree_are_fine():
    assert (
        GPT(
            tiny(emb_init_std="0.5", head_init_std="0.5"), tie=True, init_std="0.5", seed=0
        ).init_stds()["emb"]
        == 0.5
    )
    assert (
        GPT(tiny(emb_init_std="1.0", head_init_std="0.02"), tie=False, seed=0).init_stds()["head"]
        == 0.02
    )


def test_config_from_a_mapping_rejects_unknown_keys():
    from omegaconf import OmegaConf

    assert GPT(asdict(tiny()), tie=False, seed=0).config == tiny()
    assert GPT(OmegaConf.structured(tiny()), seed=0).config == tiny()
    with pytest.raises(ModelConfigError, match="n_layers"):
        GPT({"n_layers": 2})


# ----------------------------------------------------------------------------- fine-tuning a head


def _one_step(model: GPT, trainable: str, x, y) -> None:
    from tiedvsuntied.model import set_trainable
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
    assert torch.equal(
        fresh.lm_head.weight, untied.lm_head.weight
    )  # the head an untied run of this seed has
    assert count_parameters(fresh)["head"] == cfg.vocab_size * cfg.n_embd
    with pytest.raises(ModelConfigError, match="already untied; valid only from a tied start"):
        untied.untie("copy")


def test_training_only_the_head_of_a_tied_model_moves_every_embedding_row():
    cfg = tiny()
    x, y = batch(cfg)
    x, y = x % 40, y % 40  # tokens 40..96 never occur
    tied = GPT(cfg, tie=True, seed=0)
    start = tied.transformer.wte.weight.detach().clone()
    _one_step(tied, "head", x, y)
    moved = (tied.transformer.wte.weight.detach() != start).any(dim=1)
    assert moved[40:].all() and moved.all()  # absent tokens too: the softmax reaches every row
    assert not tied.transformer.h[0].attn.c_attn.weight.requires_grad


def test_training_only_the_head_after_untie_by_copy_leaves_the_embedding_bit_for_bit():
    cfg = tiny()
    x, y = batch(cfg)
    model = GPT(cfg, tie=True, seed=0)
    model.untie("copy")
    emb, head = model.transformer.wte.weight.detach().clone(), model.lm_head.weight.detach().clone()
    _one_step(model, "head", x, y)
    assert torch.equal(model.transformer.wte.weight, emb)
    assert not torch.equal(model.lm_head.weight, head)


@pytest.mark.parametrize("tie", [True, False])
def test_trainable_sets_partition_the_parameters(tie):
    from tiedvsuntied.model import TRAINABLE, set_trainable

    model = GPT(tiny(), tie=tie, seed=0)
    total, parts = count_parameters(model)["total"], count_parameters(model)
    counts = {w: set_trainable(model, w) for w in TRAINABLE}
    assert all(c["trainable"] + c["frozen"] == total for c in counts.values())
    assert counts["all"]["frozen"] == 0
    assert counts["body"]["trainable"] == parts["non_embedding"]
    assert counts["head"]["trainable"] == (parts["embedding"] if tie else parts["head"])
    assert counts["embedding"]["trainable"] == parts["embedding"] + parts["position"]
    with pytest.raises(
        ModelConfigError, match="finetune.trainable='lm_head' is invalid: use one of all, head"
    ):
        set_trainable(model, "lm_head")


# ----------------------------------------------------------------------------- scales and head init


def test_a_zero_init_untied_head_starts_at_exactly_ln_v():
    cfg = tiny(head_init_std="0")
    x, y = batch(cfg)
    model = GPT(cfg, tie=False, init_std="0.02", seed=0)
    logits, loss = model(x, y)
    assert torch.count_nonzero(logits) == 0 and loss.item() == pytest.approx(
        math.log(cfg.vocab_size), abs=1e-6
    )
    assert model.init_stds()["head"] == 0.0 and model.transformer.wte.weight.std() > 0.01
    with pytest.raises(
        ModelConfigError, match=r"model.emb_init_std='0' is invalid: give a finite number > 0"
    ):
        GPT(tiny(emb_init_std="0"), tie=False)


def test_logit_scale_generalises_the_t5_rescale_and_scales_the_logits():
    x, _ = batch(tiny())
    base = GPT(tiny(), tie=True, seed=1)(x)[0]
    t5 = GPT(tiny(t5_rescale=True), tie=True, seed=1)(x)[0]
    torch.testing.assert_close(GPT(tiny(logit_scale="inv_sqrt_d"), tie=True, seed=1)(x)[0], t5)
    torch.testing.assert_close(GPT(tiny(logit_scale="2"), tie=True, seed=1)(x)[0], 2 * base)
    with pytest.raises(
        ModelConfigError, match="model.logit_scale='big' is invalid: give a number > 0, inv_sqrt_d"
    ):
        GPT(tiny(logit_scale="big"))


def test_emb_scale_multiplies_the_token_embedding_on_the_way_in_only():
    x, _ = batch(tiny())
    scaled = GPT(tiny(emb_scale="sqrt_d"), tie=False, seed=2)
    plain = GPT(tiny(), tie=False, seed=2)
    with torch.no_grad():
        plain.transformer.wte.weight.mul_(32**0.5)  # d = 32: the same input, an unchanged head
    torch.testing.assert_close(scaled(x)[0], plain(x)[0])
