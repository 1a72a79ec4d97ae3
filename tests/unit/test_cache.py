"""The token cache (tiedvsuntied.data.cache): the key and fingerprint that name every run's
data (pinned), reuse, rebuilding what cannot be trusted, and the corpus it returns. Two tests
start real processes (slow): concurrent preparations, and a build killed while it writes."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import GPT2, SHAKESPEARE, USE_GPT2, needs_gpt2, text_config, write

from tiedvsuntied.data.cache import SPLITS, corpus_identity, corpus_key, prepare_data
from tiedvsuntied.data.config import DataConfig, DataError
from tiedvsuntied.data.sources import load_encoding


def test_vocab_eot_token_freq_and_info(corpus):
    assert (corpus.vocab_size, corpus.eot_token, corpus.encoding.name) == (257, 256, "bytes")
    freq = corpus.token_freq("train")
    assert freq.dtype == np.int64 and freq.shape == (257,)
    assert np.array_equal(freq, np.bincount(np.asarray(corpus.tokens("train")), minlength=257))
    info = corpus.info()
    assert info["n_tokens"] == {s: corpus.n_tokens(s) for s in SPLITS}
    assert info["fingerprint"] == corpus.fingerprint and len(corpus.fingerprint) == 12
    assert all(v > 0 for v in info["tokens_per_s"].values())
    unknown = r"unknown split 'validation'; valid splits: \['train', 'val', 'test'\]"
    with pytest.raises(DataError, match=unknown):
        corpus.tokens("validation")


# ---------------------------------------------------------------------------- pinned identities

#: A small fixed corpus: articles with titles, lines, blank-line paragraphs and non-ASCII text.
FIXED_TEXT = "".join(
    f" = Title {a} = \n \n"
    + "".join(
        f" line {a}.{i}: tied heads, naïve 数据 🙂 x={i * a}\n" + ("\n" if i % 3 == 2 else "")
        for i in range(20)
    )
    + " \n"
    for a in range(8)
)
#: Computed with the code of commit 3608031 (format version 2). The key and the fingerprint are
#: part of every run's identity (results on disk are found by them), and the tokens are what the
#: fingerprint promises: none of these may change.
PINNED = {  # documents: (fingerprint, SHA-256 of the train + val + test tokens, first 16)
    "file": ("138cf3d7057c", "c34cb50ac69babf6"),
    "paragraph": ("8c065e0aa761", "ca738bca7c453a16"),
    "row": ("b4a60a99cace", "dd40aae7f85be8e2"),
    "wikitext": ("ec1fa72e166b", "9561d7cf15090dae"),
}
PINNED_HUB_KEYS = {  # DataConfig(encoding=..., **kw): the key of the default (and another) corpus
    ("bytes", False): "2e4bf9fcd4388c78e5a4f6274fe828ee6670bbcb17df28763c50b0aa6c4cef76",
    ("gpt2", False): "6561f6f2aaa68d00d6e458ec154a7f3049bfb8bd1d8280fd09f1fcba19875f11",
    ("bytes", True): "d80e1fec027e43e87455a59d572d213a818183289b99820ec119b7af14178af3",
    ("gpt2", True): "175ceecdde2882312e652d75098a1eba26687f113d3e8c8787d7ea619edee359",
}


def tokens_digest(corpus) -> str:
    raw = b"".join(np.asarray(corpus.tokens(s)).tobytes() for s in SPLITS)
    return hashlib.sha256(raw).hexdigest()[:16]


@pytest.fixture(scope="module")
def fixed(tmp_path_factory) -> Path:
    return write(tmp_path_factory.mktemp("fixed"), "fixed.txt", FIXED_TEXT)


@pytest.mark.parametrize("documents", sorted(PINNED))
def test_fingerprint_and_tokens_of_a_fixed_corpus_never_change(fixed, documents):
    corpus = prepare_data(text_config(str(fixed), name="pin", documents=documents))
    assert (corpus.fingerprint, tokens_digest(corpus)) == PINNED[documents]
    assert corpus.dir.name == f"pin-{corpus.key[:16]}" and corpus.key.startswith(corpus.fingerprint)
    if documents == "paragraph":
        seen = prepare_data(text_config(str(fixed), name="pin", documents=documents, vocab="seen"))
        assert seen.fingerprint == "031334370996"
    if documents == "file":
        other = write(fixed.parent, "other.txt", FIXED_TEXT.upper())
        files = {"train": str(fixed), "validation": str(other)}
        assert prepare_data(text_config(files, test_fraction=0.1)).fingerprint == "0e03ceda6f1d"


@pytest.mark.parametrize("encoding, other", sorted(PINNED_HUB_KEYS))
def test_hub_corpus_keys_never_change(encoding, other):
    if encoding == "gpt2" and not GPT2:
        pytest.skip("GPT-2 tokenizer files not available (TIKTOKEN_CACHE_DIR)")
    keys = dict(config="wikitext-103-raw-v1", revision="abc", val_split=None) if other else {}
    identity = corpus_identity(DataConfig(encoding=encoding, **keys), load_encoding(encoding))
    assert corpus_key(identity) == PINNED_HUB_KEYS[encoding, other]


@needs_gpt2
def test_gpt2_fingerprint_and_tokens_of_the_fixed_corpus_never_change(fixed):
    corpus = prepare_data(text_config(str(fixed), encoding="gpt2", documents="wikitext"))
    assert (corpus.fingerprint, tokens_digest(corpus)) == ("fab5b2d49641", "fb06659b90d78689")


@pytest.mark.skipif(not USE_GPT2, reason="needs ../shared's Tiny Shakespeare and GPT-2's files")
def test_gpt2_tiny_shakespeare_is_338025_tokens_tokenized_exactly_under_its_fingerprint():
    corpus = prepare_data(DataConfig(name="s", source="text", files=str(SHAKESPEARE)))
    raw, enc = SHAKESPEARE.read_text(), load_encoding("gpt2")
    assert (corpus.vocab_size, corpus.eot_token, corpus.fingerprint) == (
        50257,
        50256,
        "24978ad114cb",
    )
    for s in SPLITS:
        a, b = corpus.meta(s)["char_range"]
        assert np.asarray(corpus.tokens(s)).tolist() == enc.encode_ordinary(raw[a:b])
    assert sum(corpus.n_tokens(s) for s in SPLITS) == 338_025


# ---------------------------------------------------------------------------- reuse and rebuilds


def test_second_prepare_reuses_the_cache(play, corpus):
    again = prepare_data(text_config(str(play), num_threads=1))
    assert again.dir == corpus.dir and again.fingerprint == corpus.fingerprint and again.built == []
    assert np.array_equal(again.tokens("train"), corpus.tokens("train"))


def test_fingerprint_tracks_content_fractions_and_tokenizer_not_name_path_or_mtime(
    play, corpus, tmp_path, monkeypatch
):
    assert prepare_data(text_config(str(play), name="other")).fingerprint == corpus.fingerprint
    assert prepare_data(text_config(str(play), val_fraction=0.1)).fingerprint != corpus.fingerprint
    monkeypatch.chdir(play.parent)  # a relative path resolves against the working directory
    assert prepare_data(text_config(play.name)).fingerprint == corpus.fingerprint
    copy = tmp_path / "copy.txt"
    shutil.copy(play, copy)
    os.utime(copy, (1e9, 1e9))
    assert prepare_data(text_config(str(copy))).fingerprint == corpus.fingerprint
    copy.write_text(play.read_text().replace("Speaker", "Speakes", 1))
    changed = prepare_data(text_config(str(copy)))
    assert changed.fingerprint != corpus.fingerprint
    assert changed.n_tokens("train") == corpus.n_tokens("train")
    if GPT2:
        gpt2 = prepare_data(text_config(str(play), encoding="gpt2"))
        assert gpt2.fingerprint != corpus.fingerprint


def test_deleting_the_cache_does_not_break_a_running_job(play, tmp_path):
    mine = prepare_data(text_config(str(play), cache_dir=str(tmp_path)))
    expected = {s: np.array(mine.tokens(s)) for s in SPLITS}
    shutil.rmtree(mine.dir)  # e.g. rm -rf of the cache while a sweep runs
    for s in SPLITS:  # every split was opened before prepare returned
        assert np.array_equal(np.array(mine.tokens(s)), expected[s])
        assert mine.token_freq(s).sum() == len(expected[s])
    again = prepare_data(text_config(str(play), cache_dir=str(tmp_path)))  # re-tokenizes
    assert again.built == list(SPLITS) and np.array_equal(again.tokens("test"), expected["test"])


def test_entry_without_metadata_or_with_wrong_size_is_rebuilt(play, corpus, tmp_path):
    first = prepare_data(text_config(str(play), cache_dir=str(tmp_path)))
    (first.dir / "val.json").unlink()  # tokens present, metadata missing
    (first.dir / "test.bin").write_bytes(b"\x00" * (2 * first.n_tokens("test") - 2))  # truncated
    again = prepare_data(text_config(str(play), cache_dir=str(tmp_path)))
    assert again.built == ["val", "test"]  # train was intact and is kept
    assert all(np.array_equal(again.tokens(s), corpus.tokens(s)) for s in SPLITS)


def test_seen_vocabulary_renumbers_the_corpus_tokens_and_has_its_own_data_id(corpus, play):
    """data.vocab=seen: a closed vocabulary of the tokens the corpus has, numbered in the
    encoding's order; the same text, a different data id, the cache shared with vocab=full."""
    seen = prepare_data(text_config(str(play), vocab="seen"))
    ids = np.flatnonzero(sum(corpus.token_freq(s) for s in SPLITS))
    assert seen.vocab_size == len(ids) < corpus.vocab_size == 257 and seen.dir == corpus.dir
    for split in SPLITS:
        np.testing.assert_array_equal(ids[seen.tokens(split)], corpus.tokens(split))
        np.testing.assert_array_equal(seen.token_freq(split), corpus.token_freq(split)[ids])
    assert seen.fingerprint != corpus.fingerprint
    assert seen.eot_token is None  # one file, one document: no end-of-text token to renumber
    assert seen.info()["vocab"] == "seen" and seen.info()["vocab_size"] == len(ids)
    full_docs, docs = (
        prepare_data(text_config(str(play), vocab=v, documents="paragraph"))
        for v in ("full", "seen")
    )
    doc_ids = np.flatnonzero(sum(full_docs.token_freq(s) for s in SPLITS))
    assert doc_ids[docs.eot_token] == full_docs.eot_token == 256  # renumbered too


# ---------------------------------------------------------------------------- real processes
