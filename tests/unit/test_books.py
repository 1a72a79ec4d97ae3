"""A corpus of documents held out whole (data.split=document), one pass over the training
tokens (trainer.sampling=once), and the held-out report: the loss beside the count models on the
same windows, per document. The documents are made here (a fresh clone has no ../shared); one
test also reads a few of the Gutenberg books where they are."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
from conftest import SHARED_DATA, compose
from helpers import books, books_run, write_library

from tiedvsuntied.analysis.load import load_results
from tiedvsuntied.data.baselines import fit, score_documents
from tiedvsuntied.data.batches import eval_window_starts
from tiedvsuntied.data.cache import prepare_data
from tiedvsuntied.data.config import DataError
from tiedvsuntied.data.sources import text_files
from tiedvsuntied.studies.tie_x_init_books.analysis import document_losses
from tiedvsuntied.train.config import ConfigError, TrainerConfig, check_budget
from tiedvsuntied.train.trainer import train

AUTHORS = ["ann", "ann", "bo", "bo", "cy", "dee", "dee", "dee", "eve", "fay", "gus", "hal"]


@pytest.fixture(scope="module")
def library(tmp_path_factory) -> Path:
    """12 documents by 8 authors, and a manifest naming each one's author."""
    return write_library(tmp_path_factory.mktemp("library"), AUTHORS, lambda i: 2500 + 500 * i)


def test_documents_are_held_out_whole_by_group_and_each_fold_is_test_once(library):
    splits = [text_files(books(library, heldout_fold=k)) for k in range(3)]
    everything = sorted(library.glob("*.txt"))
    for split in splits:
        assert sorted(p for paths in split.values() for p in paths) == everything
        sides = {p.name.split("-")[1]: s for s, paths in split.items() for p in paths}
        for s, paths in split.items():  # an author's documents are all on one side
            assert all(sides[p.name.split("-")[1]] == s for p in paths)
    tests = [p for split in splits for p in split["test"]]
    assert sorted(tests) == everything  # rotating the fold holds every document out once
    assert [s["val"] for s in splits] == [s["test"] for s in splits[1:] + splits[:1]]


def test_the_split_is_fixed_by_its_seed(library):
    assert text_files(books(library)) == text_files(books(library))
    seeds = {tuple(text_files(books(library, split_seed=s))["test"]) for s in range(5)}
    assert len(seeds) > 1


@pytest.mark.parametrize(
    "keys,message",
    [
        ({"heldout_fold": 3}, "data.heldout_fold=3 must be in [0, data.folds=3)"),
        ({"folds": 10}, "data.folds=10 is more than the 8 groups"),
        ({"group_by": "title"}, "data.group_by='title' needs the columns 'file' and 'title'"),
        ({"manifest": None}, "data.group_by and data.manifest go together"),
        ({"files": {"train": "a.txt"}}, "data.split=document takes one list of files or a folder"),
    ],
)
def test_a_bad_document_split_is_one_line_naming_the_key(library, keys, message):
    with pytest.raises(DataError) as error:
        text_files(books(library, **keys))
    assert message in str(error.value) and "\n" not in str(error.value)


def test_held_out_documents_keep_their_offsets_and_names(library, session_cache):
    # bytes: the offsets are the question, not the tokenizer (and no ../shared is needed)
    corpus = prepare_data(books(library, cache_dir=str(session_cache), encoding="bytes"))
    for split in ("val", "test"):
        starts, names = corpus.documents(split)
        assert names == [p.name for p in text_files(corpus.cfg)[split]]
        tokens = corpus.tokens(split)
        # every document after the first begins right after an end-of-text token
        assert starts[0] == 0 and all(tokens[s - 1] == corpus.eot_token for s in starts[1:])
        assert (tokens == corpus.eot_token).sum() == len(starts) - 1
    assert corpus.documents("train") is None


def test_more_steps_than_one_pass_is_refused_in_one_line():
    trainer = TrainerConfig(max_steps=100, batch_size=4, sampling="once")
    check_budget(trainer, train_tokens=100 * 4 * 16 + 1, block_size=16)  # exactly one pass
    with pytest.raises(ConfigError) as error:
        check_budget(trainer, train_tokens=100 * 4 * 16, block_size=16)
    assert "trainer.max_steps=100 is more than one pass" in str(error.value)
    assert "use at most 99 steps" in str(error.value)


def test_a_run_reports_the_count_models_on_its_own_windows_per_document(library, tmp_path):
    cfg = books_run(
        library, tmp_path, "data.encoding=bytes", "trainer.sampling=once", "trainer.eval_windows=12"
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


GUTENBERG = SHARED_DATA / "gutenberg"


@pytest.mark.skipif(not (GUTENBERG / "MANIFEST.tsv").is_file(), reason="no ../shared gutenberg")
def test_the_gutenberg_preset_splits_real_books_by_author(session_cache):
    cfg = compose("data=gutenberg", f"data.manifest={GUTENBERG / 'MANIFEST.tsv'}").data
    cfg.files = sorted(str(p) for p in GUTENBERG.glob("1*.txt"))[:12]  # a few books, fast
    cfg.folds, cfg.cache_dir = 3, str(session_cache)
    split = text_files(cfg)
    with open(GUTENBERG / "MANIFEST.tsv", newline="") as f:
        author = {r["file"]: r["author"] for r in csv.DictReader(f, delimiter="\t")}
    sides = [{author[p.name] for p in paths} for paths in split.values()]
    assert all(not (a & b) for i, a in enumerate(sides) for b in sides[i + 1 :])
    corpus = prepare_data(cfg)
    assert corpus.info()["n_documents"] == {s: len(p) for s, p in split.items()}
