"""Embedding-geometry probes on matrices whose answers are known."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tiedvsuntied.model.config import ModelConfig
from tiedvsuntied.model.gpt import GPT
from tiedvsuntied.train.evaluation import (
    MAX_PAIRS,
    SAMPLE_ROWS,
    STRATA,
    probe,
    sample_rows,
    vocab_strata,
)


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


def test_strata_split_the_vocabulary_by_training_count():
    freq = np.array([0, 5, 1, 0, 9, 2, 2, 7, 0, 1])
    s = vocab_strata(freq)
    assert s["unseen"].tolist() == [0, 3, 8]
    assert s["frequent"].tolist() == [
        1,
        4,
        7,
    ]  # the more frequent half of the 7 seen tokens (9, 7, 5)
    assert s["rare"].tolist() == [2, 5, 6, 9]
    assert sorted(np.concatenate(list(s.values())).tolist()) == list(range(10))  # a partition


def test_stats_per_stratum_separate_collapsed_unseen_rows_from_random_seen_rows():
    """The tied failure the probes exist to show: unseen rows pushed onto one direction, seen
    rows spread out. A uniform sample would mix the two; the strata keep them apart."""
    V, d = 600, 32
    g = torch.Generator().manual_seed(0)
    freq = np.r_[np.zeros(400, int), np.arange(1, 201)]  # tokens 0..399 never occur
    common = torch.randn(d, generator=g)
    emb = torch.randn(V, d, generator=g)
    emb[:400] = common + 0.05 * torch.randn(400, d, generator=g)
    s, a = probe(model_with(emb), freq)
    assert s["probe/unseen/emb_cos_mean"] > 0.99
    assert abs(s["probe/rare/emb_cos_mean"]) < 0.05 and abs(s["probe/frequent/emb_cos_mean"]) < 0.05
    # centred, the unseen rows are as isotropic as random ones: only their common direction was
    # shared
    assert s["probe/unseen/emb_ccos_abs_mean"] == pytest.approx(
        s["probe/rare/emb_ccos_abs_mean"], rel=0.15
    )
    assert s["probe/rare/emb_cos_abs_mean"] == pytest.approx(
        math.sqrt(2 / math.pi / d), rel=0.1
    )  # E|N(0, 1/d)|
    assert set(a["rows_unseen"]) <= set(range(400)) and set(a["rows_frequent"]) <= set(
        range(500, 600)
    )
    assert len(a["cos_unseen"]) == MAX_PAIRS < 400 * 399 // 2 and np.all(a["cos_unseen"] > 0.98)


def test_orthonormal_rows_have_zero_cosines_and_known_norms():
    q, _ = torch.linalg.qr(torch.randn(64, 64, generator=torch.Generator().manual_seed(0)))
    s, _ = probe(model_with(3.0 * q), np.ones(64))  # all seen: a rare and a frequent half
    for st in ("rare", "frequent"):
        assert s[f"probe/{st}/emb_cos_abs_mean"] == pytest.approx(0.0, abs=1e-6)
        assert s[f"probe/{st}/emb_norm_mean"] == pytest.approx(3.0, rel=1e-6)
    assert s["probe/emb_norm_std"] == pytest.approx(0.0, abs=1e-5)
    assert not any(k.startswith("probe/unseen/") for k in s)  # an empty stratum has no statistics


def test_row_norms_and_in_out_cosines_untied():
    V, d = 40, 8
    emb = torch.randn(V, d, generator=torch.Generator().manual_seed(2))
    scale = torch.arange(1, V + 1, dtype=torch.float32)[:, None]
    head = -emb * scale  # every output row points against its input row
    freq = np.r_[np.zeros(10, int), np.arange(1, 31)]
    s, a = probe(model_with(emb, head), freq)
    np.testing.assert_allclose(a["emb_norm"], emb.norm(dim=1).numpy(), rtol=1e-6)
    np.testing.assert_allclose(a["head_norm"], (emb.norm(dim=1) * scale[:, 0]).numpy(), rtol=1e-5)
    np.testing.assert_allclose(a["in_out_cos"], -1.0, rtol=1e-5)
    for st in STRATA:
        assert s[f"probe/{st}/in_out_cos_mean"] == pytest.approx(-1.0, abs=1e-5)
        # the head's rows are the embedding's rows rescaled and flipped: same cosines
        assert s[f"probe/{st}/head_cos_mean"] == pytest.approx(
            s[f"probe/{st}/emb_cos_mean"], abs=1e-5
        )
    assert s["probe/unseen/head_norm_mean"] == pytest.approx(
        float(a["head_norm"][:10].mean()), rel=1e-6
    )


def test_tied_has_no_head_only_keys_and_typed_arrays():
    s, a = probe(model_with(torch.randn(30, 8)), np.arange(30) % 3)
    assert "in_out_cos" not in a and not any("in_out" in k or "head_cos" in k for k in s)
    np.testing.assert_array_equal(a["head_norm"], a["emb_norm"])
    assert all(k.startswith("probe/") and isinstance(v, float) for k, v in s.items())
    assert set(a) == {
        "emb_norm",
        "head_norm",
        "rows_seen",
        "emb_seen",
        *(f"{p}_{st}" for p in ("cos", "ccos", "rows") for st in STRATA),
    }
    assert all(
        v.dtype
        == (np.int64 if k.startswith("rows_") else np.float16 if k == "emb_seen" else np.float32)
        for k, v in a.items()
    )


def test_seen_rows_are_the_rare_and_frequent_samples_of_both_matrices():
    e, h = torch.randn(30, 8), torch.randn(30, 8)
    freq = np.arange(30) % 3  # 10 unseen, 20 seen
    _, a = probe(model_with(e, h), freq)
    np.testing.assert_array_equal(a["rows_seen"], np.flatnonzero(freq > 0))
    np.testing.assert_allclose(a["emb_seen"], e[freq > 0].numpy(), rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(a["head_seen"], h[freq > 0].numpy(), rtol=1e-3, atol=1e-3)


def test_fixed_sample_and_no_global_rng_or_autograd():
    model = GPT(
        ModelConfig(n_layer=1, n_head=2, n_embd=32, block_size=8, vocab_size=5000),
        tie=False,
        seed=0,
    )
    freq = np.r_[np.zeros(2500, int), np.ones(2500, int)]
    torch_state, np_state = torch.get_rng_state(), np.random.get_state()
    torch.manual_seed(1)
    first = probe(model, freq)[1]
    torch.manual_seed(2)  # a different global RNG state: the same sample
    second = probe(model, freq)[1]
    np.testing.assert_array_equal(first["cos_unseen"], second["cos_unseen"])
    torch.set_rng_state(torch_state)
    probe(model, freq)
    assert torch.equal(torch.get_rng_state(), torch_state)
    assert np.random.get_state()[1].tolist() == np_state[1].tolist()
    assert all(p.grad is None for p in model.parameters())
    assert first["cos_unseen"].shape == (MAX_PAIRS,)  # 1024 rows give ~520k pairs: subsampled
    rows = sample_rows(np.arange(2500))
    assert len(rows) == SAMPLE_ROWS == len(np.unique(rows)) and np.all(np.diff(rows) > 0)
    np.testing.assert_array_equal(rows, first["rows_unseen"])
