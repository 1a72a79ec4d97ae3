"""experiments/sign_flip/read_bigram.py on two real runs (tied, untied: one seed): the bigram
fitted on the text they read, beside the one fitted on their whole training split."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import QUICK, REPO, compose
from helpers import script_module

from tiedvsuntied.data.baselines import bits_per_byte, fit, score_windows
from tiedvsuntied.data.batches import BatchSampler, EvalSet
from tiedvsuntied.data.cache import prepare_data
from tiedvsuntied.train.trainer import train

OVER = [*QUICK, "data.encoding=bpe", "data.vocab_size=300", "trainer.compile=false", "seed=1"]


def test_each_seed_gets_the_bigram_of_the_windows_it_read_and_its_split_bigram_again(tmp_path):
    configs = {
        arm: compose("+experiment=sign_flip", f"+arm={arm}", *OVER, f"results_dir={tmp_path}")
        for arm in ("tied", "untied")
    }
    runs = {arm: train(cfg) for arm, cfg in configs.items()}
    cfg = configs["tied"]
    read_bigram = script_module(REPO / "experiments" / "sign_flip" / "read_bigram.py")
    table, cells = read_bigram.main([str(tmp_path / "sign_flip"), "--out", str(tmp_path / "r.tsv")])

    (row,) = table.itertuples()  # tied and untied of a seed read the same text
    assert (row.seed, row.steps, row.read_tokens) == (1, 4, 4 * 2 * cfg.model.block_size)
    assert row.split_bigram_bpb == pytest.approx(row.recorded_split_bigram_bpb, rel=1e-12)
    assert row.split_matches_record
    # the same number from the windows the trainer's own batches hold (get, not read)
    corpus = prepare_data(cfg.data)
    sampler = BatchSampler(corpus.tokens("train"), cfg.model.block_size, 2, 1, once=True)
    x, y = (np.concatenate(a) for a in zip(*[sampler.get(s) for s in range(4)], strict=True))
    test = EvalSet.of(corpus, "test", cfg.model.block_size, cfg.trainer.eval_windows)
    bigram = score_windows(fit(np.c_[x, y[:, -1]], corpus.vocab_size), test.windows)["bigram"]
    assert row.read_bigram_bpb == pytest.approx(bits_per_byte(bigram.mean(), test.bytes_per_token))
    assert pd.read_csv(tmp_path / "r.tsv", sep="\t").shape[0] == 1

    (cell,) = cells.itertuples()
    test_bpb = {arm: s.heldout["test"]["loss_bpb"] for arm, s in runs.items()}
    assert (cell.tied, cell.untied) == pytest.approx((test_bpb["tied"], test_bpb["untied"]))
    assert cell.tied_below_read == int(test_bpb["tied"] < row.read_bigram_bpb)
