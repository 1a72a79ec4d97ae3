"""The loss (tiedvsuntied.model.loss, through GPT.forward): the chunked cross-entropy equals
the full one in value and gradients, per token too; bf16 autocast and torch.compile."""

from __future__ import annotations

import pytest
import torch
from conftest import batch, tiny
from torch.nn import functional as F

from tiedvsuntied.model.gpt import GPT
from tiedvsuntied.model.loss import chunked_cross_entropy


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
    chunked_grads = dict(chunked.named_parameters())
    for n, p in full.named_parameters():
        torch.testing.assert_close(chunked_grads[n].grad, p.grad, rtol=1e-5, atol=1e-7, msg=n)
    with torch.no_grad():
        loss = chunked(x, y, loss_chunk=7, return_logits=False)[1]
    torch.testing.assert_close(loss, loss_full, rtol=1e-6, atol=1e-6)


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
    (3.0 * F.cross_entropy(x @ w.t(), t)).backward()
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
    # Dynamo's cache of GPT.forward fills with the graphs earlier tests of this worker compiled;
    # past its recompile limit fullgraph=True fails whatever the model does: start it empty
    torch._dynamo.reset()
    model = GPT(tiny(), seed=0)
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    _, loss = compiled(*batch(model.config), return_logits=False)
    loss.backward()
    assert torch.isfinite(loss)


def test_too_long_sequence_is_refused():
    model = GPT(tiny(), seed=0)
    with pytest.raises(ValueError, match="block_size"):
        model(torch.zeros(1, 17, dtype=torch.long))
