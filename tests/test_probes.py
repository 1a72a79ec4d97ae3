"""Embedding-geometry probes on matrices whose answers are known."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tiedvsuntied.model import GPT, ModelConfig
from tiedvsuntied.probes import MAX_OFFDIAG, SAMPLE_ROWS, probe, sample_rows


def model_with(emb: torch.Tensor, head: torch.Tensor | None = None) -> GPT:
    """A small GPT whose wte (and untied head) are the given matrices."""
    V, d = emb.shape
    cfg = ModelConfig(n_layer=1, n_head=1, n_embd=d, block_size=8, vocab_size=V)
    model = GPT(cfg, tie=head is None, seed=0)
    with torch.no_grad():
        model.transformer.wte.weight.copy_(emb)
        if head is not None:
            model.lm_head.weight.copy_(head)
    return model


def probe_scalars_(model):
    return probe(model)[0]


def probe_arrays_(model):
    return probe(model)[1]


def test_orthonormal_rows_have_zero_offdiagonal_cosines():
    q, _ = torch.linalg.qr(torch.randn(64, 64, generator=torch.Generator().manual_seed(0)))
    s = probe_scalars_(model_with(3.0 * q))  # scaled: cosines do not care
    assert s["probe/emb_offdiag_cos_abs_mean"] == pytest.approx(0.0, abs=1e-6)
    assert s["probe/emb_offdiag_cos_rms"] == pytest.approx(0.0, abs=1e-6)
    assert s["probe/emb_norm_mean"] == pytest.approx(3.0, rel=1e-6)
    assert s["probe/emb_norm_std"] == pytest.approx(0.0, abs=1e-5)


def test_identical_rows_have_cosine_one():
    a = probe_arrays_(model_with(torch.ones(50, 16)))
    assert a["offdiag_cos"].shape == (50 * 49 // 2,)
    np.testing.assert_allclose(a["offdiag_cos"], 1.0, rtol=1e-6)


def test_opposite_rows():
    rows = torch.tensor([[1.0, 0.0], [-2.0, 0.0]])
    assert probe_arrays_(model_with(rows))["offdiag_cos"].tolist() == pytest.approx([-1.0])


def test_random_rows_have_cosines_of_order_inv_sqrt_d():
    d = 128  # Gaussian rows: cos ~ mean 0, rms 1/sqrt(d)
    emb = torch.randn(4096, d, generator=torch.Generator().manual_seed(1))
    s = probe_scalars_(model_with(emb))
    assert s["probe/emb_offdiag_cos_rms"] == pytest.approx(d ** -0.5, rel=0.03)
    assert abs(s["probe/emb_offdiag_cos_mean"]) < 0.1 * d ** -0.5
    assert s["probe/emb_norm_mean"] == pytest.approx(math.sqrt(d), rel=0.01)


def test_row_norms_and_in_out_cosines_untied():
    V, d = 40, 8
    emb = torch.randn(V, d, generator=torch.Generator().manual_seed(2))
    scale = torch.arange(1, V + 1, dtype=torch.float32)[:, None]
    head = -emb * scale  # every output row points against its input row
    s, a = probe(model_with(emb, head))
    np.testing.assert_allclose(a["emb_norm"], emb.norm(dim=1).numpy(), rtol=1e-6)
    np.testing.assert_allclose(a["head_norm"], (emb.norm(dim=1) * scale[:, 0]).numpy(), rtol=1e-5)
    np.testing.assert_allclose(a["in_out_cos"], -1.0, rtol=1e-5)
    assert s["probe/in_out_cos_mean"] == pytest.approx(-1.0, abs=1e-5)
    # the head's rows are the embedding's rows rescaled and flipped: same cosines
    assert s["probe/head_offdiag_cos_abs_mean"] == pytest.approx(s["probe/emb_offdiag_cos_abs_mean"], rel=1e-5)
    assert s["probe/head_norm_mean"] == pytest.approx(float(a["head_norm"].mean()), rel=1e-6)


def test_tied_has_no_head_only_keys():
    s, a = probe(model_with(torch.randn(30, 8)))
    assert "in_out_cos" not in a and "probe/in_out_cos_mean" not in s
    assert not any(k.startswith("probe/head_offdiag") for k in s)
    np.testing.assert_array_equal(a["head_norm"], a["emb_norm"])
    assert all(k.startswith("probe/") and isinstance(v, float) for k, v in s.items())
    assert {"emb_norm", "head_norm", "offdiag_cos"} == set(a)
    assert all(v.dtype == np.float32 for v in a.values())


def test_fixed_sample_and_no_global_rng_or_autograd():
    model = GPT(ModelConfig(n_layer=1, n_head=2, n_embd=32, block_size=8, vocab_size=5000), tie=False, seed=0)
    torch_state, np_state = torch.get_rng_state(), np.random.get_state()
    torch.manual_seed(1)
    first = probe_arrays_(model)
    torch.manual_seed(2)  # a different global RNG state: the same sample
    second = probe_arrays_(model)
    np.testing.assert_array_equal(first["offdiag_cos"], second["offdiag_cos"])
    torch.set_rng_state(torch_state)
    probe(model)
    assert torch.equal(torch.get_rng_state(), torch_state)
    assert np.random.get_state()[1].tolist() == np_state[1].tolist()
    assert all(p.grad is None for p in model.parameters())
    assert first["offdiag_cos"].shape == (MAX_OFFDIAG,)  # 2048 rows give ~2.1M pairs: subsampled
    rows = sample_rows(5000)
    assert len(rows) == SAMPLE_ROWS == len(rows.unique()) and torch.equal(rows, rows.sort().values)
    assert torch.equal(rows, sample_rows(5000))
