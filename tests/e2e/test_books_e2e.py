"""The end-to-end tests of tests/unit/test_books.py: a run trained in-process past a few steps."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import QUICK, compose

from tiedvsuntied.analysis.books import document_losses
from tiedvsuntied.analysis.load import load_results
from tiedvsuntied.data.baselines import fit, score_documents
from tiedvsuntied.data.batches import eval_window_starts
from tiedvsuntied.data.cache import prepare_data
from tiedvsuntied.data.sources import text_files
from tiedvsuntied.train.trainer import train


def test_a_run_reports_the_count_models_on_its_own_windows_per_document(library, tmp_path):
    overrides = [o for o in QUICK if not o.startswith(("data", "trainer.eval_windows"))]
    cfg = compose(
        *overrides,
        "data=gutenberg",
        f"data.files={library}",
        f"data.manifest={library / 'MANIFEST.tsv'}",
        "data.folds=3",
        "data.encoding=bytes",
        "trainer.sampling=once",
        "trainer.eval_windows=12",
        f"results_dir={tmp_path}",
    )
    summary = train(cfg)
    corpus = prepare_data(cfg.data)
    models = fit(corpus.tokens("train"), corpus.vocab_size)
    for split in ("val", "test"):
        report = summary.heldout[split]
        # recomputed here from the same windows' tokens: the targets the model's loss is over
        tokens, block = corpus.tokens(split), cfg.model.block_size
        starts = eval_window_starts(len(tokens), block, 12)
        windows = np.asarray(tokens[starts[:, None] + np.arange(block + 1)]).ravel()
        own = score_documents(models, windows, np.arange(len(starts)) * (block + 1))
        assert report["bigram"] == pytest.approx(own["bigram"].mean(), rel=1e-9)
        assert report["unigram"] == pytest.approx(own["unigram"].mean(), rel=1e-9)
        documents = report["documents"]
        assert set(documents) <= {p.name for p in text_files(cfg.data)[split]}
        n = np.array([d["n_windows"] for d in documents.values()])
        assert n.sum() == report["n_windows"] == 12
        pooled = np.array([d["loss"] for d in documents.values()]) @ n / n.sum()
        assert pooled == pytest.approx(report["loss"], rel=1e-6)
    assert summary.heldout["test"]["loss"] == pytest.approx(summary.test_loss, rel=1e-6)
    runs = load_results(tmp_path / cfg.sweep).runs  # the reading side: per book, per run
    assert runs["test_bigram"].iloc[0] == pytest.approx(summary.heldout["test"]["bigram"])
    table = document_losses(runs.assign(arm="tied"))
    assert set(table["document"]) == set(summary.heldout["test"]["documents"])
