"""The end-to-end tests of tests/unit/test_bpe.py: a run trained in-process past a few steps."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from conftest import QUICK, compose

from tiedvsuntied.data.batches import eval_window_starts
from tiedvsuntied.data.cache import prepare_data
from tiedvsuntied.model.accounting import count_parameters_for
from tiedvsuntied.train.trainer import train


def test_a_run_reports_bits_per_byte_and_its_regime(library, tmp_path):
    overrides = [o for o in QUICK if not o.startswith(("data", "trainer.eval_windows"))]
    cfg = compose(
        *overrides,
        "data=gutenberg",
        f"data.files={library}",
        f"data.manifest={library / 'MANIFEST.tsv'}",
        "data.folds=3",
        "data.encoding=bpe",
        "data.vocab_size=600",
        "trainer.eval_windows=8",
        f"results_dir={tmp_path}",
    )
    summary = train(cfg)
    corpus = prepare_data(cfg.data)
    block = cfg.model.block_size
    for split in ("val", "test"):
        report = summary.heldout[split]
        starts = eval_window_starts(corpus.n_tokens(split), block, 8)
        targets = np.array(corpus.tokens(split))[starts[:, None] + 1 + np.arange(block)]
        text = targets[targets != corpus.eot_token]  # end-of-text stands for no text
        n_bytes = len(corpus.encoding.decode_bytes(text.tolist()))
        for key in ("loss", "bigram", "unigram"):
            bits = report[key] * targets.size / math.log(2)
            assert report[f"{key}_bpb"] == pytest.approx(bits / n_bytes, rel=1e-9)
    assert summary.test_bpb == summary.heldout["test"]["loss_bpb"]
    counts = count_parameters_for({**vars(cfg.model), "vocab_size": summary.vocab_size})
    vd = summary.vocab_size * cfg.model.n_embd
    assert summary.rho == pytest.approx(vd / (vd + counts["non_embedding"]))
    assert summary.non_embedding_params == counts["non_embedding"]
    assert summary.tokens_per_param == summary.tokens / counts["total"]
    assert summary.train_bytes == pytest.approx(summary.tokens * corpus.bytes_per_token("train"))
    assert summary.encoding == "bpe" and summary.vocab_size == 600
    run_dir = next((tmp_path / cfg.sweep).glob("*/metrics.jsonl"))
    logged = [json.loads(line) for line in run_dir.read_text().splitlines()]
    assert all("val/bpb" in row for row in logged if "val/loss" in row)
