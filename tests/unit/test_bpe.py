"""Vocabularies trained on the corpus (data.encoding=bpe) and losses comparable across them
(bits per byte, the head's share rho). The documents are made here (tests/helpers.py), as in
test_books."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from helpers import books, books_run, write_library

from tiedvsuntied.data import bpe
from tiedvsuntied.data.batches import eval_window_starts
from tiedvsuntied.data.cache import corpus_fingerprint, prepare_data
from tiedvsuntied.data.config import DataConfig, DataError
from tiedvsuntied.data.sources import text_files
from tiedvsuntied.model.accounting import count_parameters_for
from tiedvsuntied.train.trainer import train

AUTHORS = ["ann", "bo", "cy", "dee", "eve", "fay"]
SECRET = "Zyxwvzyxwv"  # a word of the held-out documents alone


@pytest.fixture(scope="module")
def library(tmp_path_factory) -> Path:
    """Six documents by six authors; every one but the training split's holds SECRET often."""
    folder = write_library(tmp_path_factory.mktemp("bpe_library"), AUTHORS, lambda i: 3000)
    held_out = bpe_books(folder)
    for path in text_files(held_out)["val"] + text_files(held_out)["test"]:
        path.write_text(path.read_text() + f" {SECRET}" * 400 + "\n")
    return folder


def bpe_books(library: Path, **keys) -> DataConfig:
    return books(library, **{"encoding": "bpe", "vocab_size": 600, **keys})


def test_training_is_deterministic_and_a_smaller_vocabulary_is_a_prefix(library):
    text = [p.read_text() for p in sorted(library.glob("*.txt"))]
    merges = bpe.train_merges(text, 700)
    assert len(merges) == 700 - 257  # 256 bytes + the merges + end-of-text
    assert bpe.train_merges(text, 700) == merges
    assert bpe.train_merges(text, 400) == merges[: 400 - 257]


def test_tiktoken_runs_the_trained_merges_as_tokenizers_does(library):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    text = [p.read_text() for p in sorted(library.glob("*.txt"))]
    enc = bpe.encoding(bpe.train_merges(text, 600), "bpe600")
    reference = Tokenizer(models.BPE())
    reference.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(
        vocab_size=600, special_tokens=[bpe.EOT], initial_alphabet=alphabet, show_progress=False
    )
    reference.train_from_iterator(text, trainer=trainer)
    sample = text[0][:5000] + " naïve — ünïcödé 😀"
    byte = bpe._byte_of_char()
    pieces = [bytes(byte[c] for c in token) for token in reference.encode(sample).tokens]
    assert [enc.decode_single_token_bytes(t) for t in enc.encode_ordinary(sample)] == pieces
    assert enc.decode(enc.encode_ordinary(sample)) == sample
    assert enc.n_vocab == 600 and enc.eot_token == 599


def test_held_out_documents_never_shape_the_vocabulary(library):
    corpus = prepare_data(bpe_books(library))
    secret = SECRET.encode()
    merged = [corpus.encoding.decode_single_token_bytes(i) for i in range(256, 599)]
    assert not any(len(m) > 2 and m in secret for m in merged)
    held_out = corpus.encoding.encode_ordinary(f" {SECRET}")
    assert len(held_out) > 3  # spelled out in pieces: the vocabulary never saw it
    assert (corpus.dir / "tokenizer.json").is_file()
    # another fold trains on other documents, so it is another corpus and tokenizer
    other = prepare_data(bpe_books(library, heldout_fold=1))
    assert other.fingerprint != corpus.fingerprint
    assert corpus_fingerprint(bpe_books(library)) == corpus.fingerprint  # a plan trains nothing


def test_a_lost_tokenizer_is_trained_again_to_the_same_tokens(library, tmp_path):
    first = prepare_data(bpe_books(library, cache_dir=str(tmp_path)))
    tokens = np.array(first.tokens("train"))
    (first.dir / "tokenizer.json").write_text("{cut")
    again = prepare_data(bpe_books(library, cache_dir=str(tmp_path)))
    assert np.array_equal(np.array(again.tokens("train")), tokens)
    assert json.loads((again.dir / "tokenizer.json").read_text())["n_merges"] == 600 - 257


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({"vocab_size": None}, "data.encoding=bpe needs data.vocab_size in [258, 65536]"),
        ({"vocab_size": 100}, "data.encoding=bpe needs data.vocab_size in [258, 65536]"),
        ({"encoding": "bytes"}, "data.vocab_size=600 applies to data.encoding=bpe only"),
    ],
)
def test_a_bad_vocabulary_is_one_line_naming_the_key(library, keys, message):
    with pytest.raises(DataError, match=message.replace("[", r"\[").replace("]", r"\]")):
        bpe_books(library, **keys)


def test_bytes_per_token_counts_the_text_behind_the_tokens(library):
    corpus = prepare_data(bpe_books(library))
    for split in ("train", "test"):
        tokens = np.array(corpus.tokens(split))
        text = corpus.encoding.decode_bytes(tokens[tokens != corpus.eot_token].tolist())
        assert corpus.bytes_per_token(split) == pytest.approx(len(text) / len(tokens))


def test_a_run_reports_bits_per_byte_and_its_regime(library, tmp_path):
    encoding = ["data.encoding=bpe", "data.vocab_size=600"]
    cfg = books_run(library, tmp_path, *encoding, "trainer.eval_windows=8")
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
