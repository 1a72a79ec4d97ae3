"""Data pipeline on real files, real datasets/tiktoken code paths and real processes; no mocks.

Pipeline tests use the built-in byte-level encoding (``encoding=bytes``: token = UTF-8 byte) on
text they generate, so they need no download and no shared data. Only the tests about the GPT-2
encoding itself need its files (TIKTOKEN_CACHE_DIR) and are skipped without them.
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from tiedvsuntied import data as D
from tiedvsuntied.data import DataConfig, DataError, prepare_data
from tiedvsuntied.data.batches import BatchSampler, eval_window_starts, iter_eval_batches

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("TIEDVSUNTIED_SHARED_DATA", REPO.parent / "shared" / "data"))
needs_gpt2 = pytest.mark.skipif(
    not D.gpt2_available(),
    reason="GPT-2 tokenizer files not available "
    "(set TIKTOKEN_CACHE_DIR to a folder holding them, or allow the download)",
)
needs_shared = pytest.mark.skipif(
    not (SHARED / "tinyshakespeare" / "input.txt").is_file(),
    reason=f"shared corpora not found at {SHARED}",
)
SPLITS = ("train", "val", "test")


# ---------------------------------------------------------------------------- generated text


def words(rng: random.Random, n: int) -> str:
    return " ".join(
        rng.choice(["the", "tied", "head", "König", "naïve", "数据", "🙂", "loss", "x=1,", "it's"])
        for _ in range(n)
    )


def wiki_text(n_articles: int = 12, seed: int = 0) -> str:
    """WikiText-like: ' = Title = ' rows between blank rows start articles; section headings and
    a formula row ' = 1 ... k = ' inside an article do not."""
    rng, out = random.Random(seed), [" \n"]
    for a in range(n_articles):
        out += [
            f" = Article {a} = \n",
            " \n",
            f" {words(rng, 30)} \n",
            " = = Section = = \n",
            " \n",
        ]
        out += [f" {words(rng, 40)} \n" for _ in range(rng.randint(3, 8))]
        out += [" = 1 + k = \n", f" {words(rng, 10)} \n", " \n"]
    return "".join(out)


def play_text(n_lines: int = 3000, seed: int = 1) -> str:
    """Tiny-Shakespeare-like: speaker lines and paragraphs separated by blank lines."""
    rng = random.Random(seed)
    return "".join(
        f"Speaker {i % 7}:\n{words(rng, 8)}\n" + ("\n" if i % 3 == 2 else "")
        for i in range(n_lines)
    )


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def cfg(files=None, **kw) -> DataConfig:
    return DataConfig(**{"name": "t", "source": "text", "files": files, "encoding": "bytes", **kw})


def enc_bytes(text: str) -> list[int]:
    return list(text.encode("utf-8"))


def joined(docs: list[str], eot: int = 256) -> list[int]:
    out: list[int] = []
    for i, doc in enumerate(docs):
        out += ([eot] if i else []) + enc_bytes(doc)
    return out


def build_events(corpus_dir: Path) -> list[str]:
    return [
        json.loads(line)["event"] for line in (corpus_dir / "builds.log").read_text().splitlines()
    ]


@pytest.fixture
def play(tmp_path):
    return write(tmp_path, "play.txt", play_text())


@pytest.fixture
def corpus(play):
    return prepare_data(cfg(str(play)))


# ---------------------------------------------------------------------------- tokenization


def test_bytes_encoding_is_a_tiktoken_encoding_that_round_trips_any_utf8():
    enc = D.load_encoding("bytes")
    text = "naïve 数据 🙂\x00\n\t ' x" + "".join(map(chr, range(32, 1000)))
    assert enc.n_vocab == 257 and enc.eot_token == 256
    assert (
        enc.encode_ordinary(text) == enc_bytes(text)
        and enc.decode(enc.encode_ordinary(text)) == text
    )
    assert enc.encode("<|endoftext|>", allowed_special="all") == [256]


def test_text_file_split_into_contiguous_blocks_tokenized_exactly(corpus, play):
    raw = play.read_text()
    ranges = [corpus.meta(s)["char_range"] for s in SPLITS]
    assert (
        ranges[0][0] == 0
        and ranges[0][1] == ranges[1][0]
        and ranges[1][1] == ranges[2][0] == ranges[2][0]
    )
    assert ranges[2][1] == len(raw)
    assert all(raw[a - 1] == "\n" for a, _ in ranges[1:])  # cut at line boundaries
    for a, b in ranges[1:]:
        assert abs((b - a) / len(raw) - 0.05) < 0.005
    for split, (a, b) in zip(SPLITS, ranges, strict=True):  # one document each, no EOT
        toks = corpus.tokens(split)
        assert isinstance(toks, np.memmap) and toks.dtype == np.uint16
        assert np.asarray(toks).tolist() == enc_bytes(raw[a:b])
    assert sum(corpus.n_tokens(s) for s in SPLITS) == len(raw.encode())


def test_vocab_eot_token_freq_and_info(corpus):
    assert (corpus.vocab_size, corpus.eot_token, corpus.encoding.name) == (257, 256, "bytes")
    freq = corpus.token_freq("train")
    assert freq.dtype == np.int64 and freq.shape == (257,)
    assert np.array_equal(freq, np.bincount(np.asarray(corpus.tokens("train")), minlength=257))
    info = corpus.info()
    assert info["n_tokens"] == {s: corpus.n_tokens(s) for s in SPLITS}
    assert info["fingerprint"] == corpus.fingerprint and len(corpus.fingerprint) == 12
    assert all(v > 0 for v in info["tokens_per_s"].values())
    with pytest.raises(
        DataError, match=r"unknown split 'validation'; valid splits: \['train', 'val', 'test'\]"
    ):
        corpus.tokens("validation")


def wikitext_articles(text: str) -> list[str]:
    lines = text.splitlines(keepends=True)
    docs, cur = [], []
    for line in lines:
        if line.startswith(" = Article") and cur:
            docs.append("".join(cur))
            cur = []
        cur.append(line)
    return [d for d in docs + ["".join(cur)] if not d.isspace()]


@pytest.mark.parametrize(
    "mode, expected",
    [
        ("wikitext", wikitext_articles),
        (
            "paragraph",
            lambda t: [p for p in re.split(r"\n\n+", t.replace("\n \n", "\n\n")) if p.strip()],
        ),
        ("row", lambda t: [line for line in t.splitlines(keepends=True) if line.strip()]),
        ("file", lambda t: [t]),
    ],
)
def test_end_of_text_separates_documents_as_configured(tmp_path, mode, expected):
    text = (
        wiki_text()
        if mode == "wikitext"
        else play_text(300).replace("\n\nSpeaker 5", "\n \n  Speaker 5")
    )
    files = {
        "train": str(write(tmp_path, "a.txt", text)),
        "validation": str(write(tmp_path, "b.txt", text)),
        "test": str(write(tmp_path, "c.txt", text)),
    }
    corpus = prepare_data(cfg(files, documents=mode))
    docs = expected(text)
    assert corpus.meta("val")["n_documents"] == len(docs) and (mode == "file" or len(docs) > 10)
    assert np.asarray(corpus.tokens("val")).tolist() == joined(docs)
    if mode == "wikitext":  # every document starts with its title; formula rows are not titles
        text_back = corpus.encoding.decode(corpus.tokens("val").tolist())
        assert all(d.startswith(" = Article") for d in text_back.split("<|endoftext|>"))


def test_several_files_for_one_split_are_separate_documents(tmp_path):
    a, b = write(tmp_path, "a.txt", play_text(50)), write(tmp_path, "b.txt", play_text(900, seed=2))
    corpus = prepare_data(cfg([str(a), str(b)]))
    toks = np.asarray(corpus.tokens("train")).tolist()
    assert corpus.meta("train")["n_documents"] == 2 and toks.count(256) == 1
    assert toks[: toks.index(256)] == enc_bytes(a.read_text())
    assert corpus.meta("val")["n_documents"] == corpus.meta("test")["n_documents"] == 1  # tail of b


@needs_gpt2
@needs_shared
def test_gpt2_tiny_shakespeare_is_338025_tokens_tokenized_exactly():
    enc = D.load_encoding("gpt2")
    path = SHARED / "tinyshakespeare" / "input.txt"
    corpus = prepare_data(DataConfig(name="shakespeare", source="text", files=str(path)))
    raw = path.read_text()
    assert (corpus.vocab_size, corpus.eot_token) == (50257, 50256)
    for s in SPLITS:
        a, b = corpus.meta(s)["char_range"]
        assert np.asarray(corpus.tokens(s)).tolist() == enc.encode_ordinary(raw[a:b])
    assert sum(corpus.n_tokens(s) for s in SPLITS) == 338_025


@needs_gpt2
@needs_shared
def test_gpt2_wikitext2_test_split_has_60_articles():
    wt = SHARED / "wikitext-2"
    corpus = prepare_data(
        DataConfig(
            name="wt2",
            source="text",
            documents="wikitext",
            files={"train": str(wt / "valid.txt"), "validation": str(wt / "test.txt")},
        )
    )
    assert corpus.meta("val")["n_documents"] == 60
    assert (
        corpus.encoding.decode(corpus.tokens("val").tolist())
        .split("<|endoftext|>")[1]
        .startswith(" = ")
    )


def test_missing_tokenizer_files_fail_fast_naming_the_cache(tmp_path, play):
    (tmp_path / "empty").mkdir()
    env = {
        **os.environ,
        "TIKTOKEN_CACHE_DIR": str(tmp_path / "empty"),
        "TIEDVSUNTIED_CACHE": str(tmp_path),
        "https_proxy": "http://127.0.0.1:9",
        "HTTPS_PROXY": "http://127.0.0.1:9",
    }  # no download
    proc, seconds = run_cli(["text", f"files={play}", "encoding=gpt2"], env)
    assert proc.returncode == 2
    assert (
        "tiktoken encoding 'gpt2'" in proc.stderr
        and f"TIKTOKEN_CACHE_DIR={tmp_path / 'empty'}" in proc.stderr
    )
    assert "data.encoding=bytes" in proc.stderr and seconds < 30


# ---------------------------------------------------------------------------- cache

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


@pytest.mark.parametrize("documents", sorted(PINNED))
def test_fingerprint_and_tokens_of_a_fixed_corpus_never_change(tmp_path, documents):
    path = tmp_path / "fixed.txt"
    path.write_text(FIXED_TEXT, encoding="utf-8")
    corpus = prepare_data(cfg(str(path), name="pin", documents=documents))
    assert (corpus.fingerprint, tokens_digest(corpus)) == PINNED[documents]
    assert corpus.dir.name == f"pin-{corpus.key[:16]}" and corpus.key.startswith(corpus.fingerprint)
    if documents == "paragraph":
        seen = prepare_data(cfg(str(path), name="pin", documents=documents, vocab="seen"))
        assert seen.fingerprint == "031334370996"
    if documents == "file":
        other = write(tmp_path, "other.txt", FIXED_TEXT.upper())
        files = {"train": str(path), "validation": str(other)}
        assert prepare_data(cfg(files, test_fraction=0.1)).fingerprint == "0e03ceda6f1d"


@pytest.mark.parametrize("encoding, other", sorted(PINNED_HUB_KEYS))
def test_hub_corpus_keys_never_change(encoding, other):
    if encoding == "gpt2" and not D.gpt2_available():
        pytest.skip("GPT-2 tokenizer files not available (TIKTOKEN_CACHE_DIR)")
    kw = dict(config="wikitext-103-raw-v1", revision="abc", val_split=None) if other else {}
    config = DataConfig(encoding=encoding, **kw)
    identity = D.corpus_identity(config, D.load_encoding(encoding))
    assert D.corpus_key(identity) == PINNED_HUB_KEYS[encoding, other]


@needs_gpt2
def test_gpt2_fingerprint_and_tokens_of_the_fixed_corpus_never_change(tmp_path):
    path = write(tmp_path, "fixed.txt", FIXED_TEXT)
    corpus = prepare_data(cfg(str(path), encoding="gpt2", documents="wikitext"))
    assert (corpus.fingerprint, tokens_digest(corpus)) == ("fab5b2d49641", "fb06659b90d78689")


@needs_gpt2
@needs_shared
def test_tiny_shakespeare_fingerprint_never_changes():
    path = SHARED / "tinyshakespeare" / "input.txt"
    corpus = prepare_data(DataConfig(name="s", source="text", files=str(path)))
    assert corpus.fingerprint == "24978ad114cb"


def test_rows_break_at_every_line_boundary_python_knows(tmp_path):
    """Rows are str.splitlines lines, as the cache's format version 2 made them (datasets' text
    builder breaks at \\n only: its rows, and so the tokens under the same key, would differ)."""
    text = "a\x0cb\n\u2028c\nd\x85e\n"
    path = str(write(tmp_path, "r.txt", text))
    corpus = prepare_data(cfg({"train": path, "val": path, "test": path}, documents="row"))
    rows = [r for r in text.splitlines(keepends=True) if r.strip()]
    assert len(rows) == 5 and np.asarray(corpus.tokens("val")).tolist() == joined(rows)


def test_second_prepare_reuses_the_cache(play, corpus):
    again = prepare_data(cfg(str(play), num_threads=1))
    assert again.dir == corpus.dir and again.fingerprint == corpus.fingerprint and again.built == []
    assert np.array_equal(again.tokens("train"), corpus.tokens("train"))


def test_fingerprint_tracks_content_fractions_and_tokenizer_not_name_or_mtime(
    play, corpus, tmp_path
):
    assert prepare_data(cfg(str(play), name="other")).fingerprint == corpus.fingerprint
    assert prepare_data(cfg(str(play), val_fraction=0.1)).fingerprint != corpus.fingerprint
    copy = tmp_path / "elsewhere" / "copy.txt"
    copy.parent.mkdir()
    shutil.copy(play, copy)
    os.utime(copy, (1e9, 1e9))
    assert prepare_data(cfg(str(copy))).fingerprint == corpus.fingerprint
    copy.write_text(play.read_text().replace("Speaker", "Speakes", 1))
    changed = prepare_data(cfg(str(copy)))
    assert changed.fingerprint != corpus.fingerprint and changed.n_tokens(
        "train"
    ) == corpus.n_tokens("train")
    if D.gpt2_available():
        assert prepare_data(cfg(str(play), encoding="gpt2")).fingerprint != corpus.fingerprint


def test_relative_paths_resolve_against_the_working_directory(play, corpus, monkeypatch):
    monkeypatch.chdir(play.parent)
    assert prepare_data(cfg("play.txt")).fingerprint == corpus.fingerprint


def test_deleting_the_cache_does_not_break_a_running_job(play, corpus):
    expected = {s: np.array(corpus.tokens(s)) for s in SPLITS}
    shutil.rmtree(corpus.dir)  # e.g. rm -rf of the cache while a sweep runs
    for s in SPLITS:  # every split was opened before prepare returned
        assert np.array_equal(np.array(corpus.tokens(s)), expected[s])
        assert corpus.token_freq(s).sum() == len(expected[s])
    again = prepare_data(cfg(str(play)))  # the next run simply re-tokenizes
    assert again.built == list(SPLITS) and np.array_equal(again.tokens("test"), expected["test"])


_WORKER = r"""
import json, sys, time
from pathlib import Path
from tiedvsuntied.data import DataConfig, prepare_data
go, files, cache = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
Path(sys.argv[4]).touch()
while not go.exists():
    time.sleep(0.002)
c = prepare_data(
    DataConfig(name="race", source="text", files=files, cache_dir=cache, encoding="bytes")
)
tokens = {s: c.tokens(s).tolist() for s in ("train", "test")}
print(json.dumps({"dir": str(c.dir), "built": c.built, **tokens}))
"""


def test_concurrent_preparations_tokenize_once_and_agree(play, corpus, tmp_path):
    go, n = tmp_path / "go", 3
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                _WORKER,
                str(go),
                str(play),
                str(tmp_path / "cache"),
                str(tmp_path / f"ready{i}"),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(n)
    ]
    deadline = time.time() + 60
    while not all((tmp_path / f"ready{i}").exists() for i in range(n)):
        assert time.time() < deadline and all(p.poll() is None for p in procs), (
            "workers did not start"
        )
        time.sleep(0.01)
    go.touch()  # all start preparing at the same moment
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err[-3000:]
        outs.append(json.loads(out))
    assert sorted(len(o["built"]) for o in outs) == [0] * (n - 1) + [
        3
    ]  # one tokenized, others waited
    assert len({o["dir"] for o in outs}) == 1
    assert build_events(Path(outs[0]["dir"])) == ["start", "done"]
    assert all(
        o["train"] == corpus.tokens("train").tolist()
        and o["test"] == corpus.tokens("test").tolist()
        for o in outs
    )


_SLOW_WORKER = r"""
import sys
from tiedvsuntied.data import DataConfig, prepare_data
config = dict(name="killed", source="text", encoding="bytes")
prepare_data(DataConfig(files=sys.argv[1], cache_dir=sys.argv[2], **config))
"""


def test_kill_during_tokenization_leaves_nothing_trusted_and_rebuilds(play, corpus, tmp_path):
    cache = tmp_path / "cache"
    proc = subprocess.Popen(
        [sys.executable, "-c", _SLOW_WORKER, str(play), str(cache)],
        env={**os.environ, D.DEBUG_SLEEP_ENV: "120"},
    )
    try:
        deadline = time.time() + 60
        while not glob.glob(str(cache / "tokens" / "*" / ".train.bin.tmp*")):
            assert proc.poll() is None and time.time() < deadline, "worker never reached the hook"
            time.sleep(0.02)
        time.sleep(0.3)  # written and fsynced; sleeping before the rename
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    (corpus_dir,) = (cache / "tokens").iterdir()
    assert glob.glob(str(corpus_dir / ".*.tmp*"))  # debris of the killed build ...
    assert not list(corpus_dir.glob("*.bin")) and not list(corpus_dir.glob("train.json"))
    rebuilt = prepare_data(
        cfg(str(play), name="killed", cache_dir=str(cache))
    )  # ... neither trusted nor
    assert rebuilt.dir == corpus_dir and rebuilt.built == list(SPLITS)  # tripped over (lock died)
    assert not glob.glob(str(corpus_dir / ".*.tmp*")) and build_events(corpus_dir) == [
        "start",
        "start",
        "done",
    ]
    assert all(np.array_equal(rebuilt.tokens(s), corpus.tokens(s)) for s in SPLITS)


def test_entry_without_metadata_or_with_wrong_size_is_rebuilt(play, corpus, tmp_path):
    first = prepare_data(cfg(str(play), cache_dir=str(tmp_path / "c")))
    (first.dir / "val.json").unlink()  # tokens present, metadata missing
    (first.dir / "test.bin").write_bytes(b"\x00" * (2 * first.n_tokens("test") - 2))  # truncated
    again = prepare_data(cfg(str(play), cache_dir=str(tmp_path / "c")))
    assert again.built == ["val", "test"]  # train was intact and is kept
    assert all(np.array_equal(again.tokens(s), corpus.tokens(s)) for s in SPLITS)


# ---------------------------------------------------------------------------- Hub code path


def test_hub_branch_holds_out_missing_validation_and_matches_the_text_branch(tmp_path):
    folder = tmp_path / "wt_local"  # a local dataset folder: train + test, no validation
    folder.mkdir()
    train, test = (
        write(folder, "train.txt", wiki_text(20)),
        write(folder, "test.txt", wiki_text(5, seed=3)),
    )
    hub = prepare_data(
        DataConfig(
            name="h",
            source="hub",
            path=str(folder),
            config=None,
            encoding="bytes",
            documents="wikitext",
        )
    )
    assert hub.meta("train")["row_range"][0] == 0
    assert (
        hub.meta("val")["row_range"][0] == hub.meta("train")["row_range"][1]
    )  # val = tail of train
    # rows come without line breaks; documents are rebuilt exactly: same tokens as the text branch
    text = prepare_data(cfg({"train": str(train), "test": str(test)}, documents="wikitext"))
    assert (
        np.array_equal(hub.tokens("test"), text.tokens("test"))
        and hub.meta("test")["n_documents"] == 5
    )
    with pytest.raises(DataError, match=r"text_column='content'.*columns: \['text'\]"):
        prepare_data(
            DataConfig(
                source="hub", path=str(folder), config=None, text_column="content", encoding="bytes"
            )
        )
    with pytest.raises(DataError, match=r"val_split='dev2'.*available: \['train', 'test'\]"):
        prepare_data(
            DataConfig(
                source="hub", path=str(folder), config=None, val_split="dev2", encoding="bytes"
            )
        )


def test_hub_records_are_row_documents_and_a_non_text_column_is_refused(tmp_path):
    folder = tmp_path / "records"  # a local dataset of JSON records, one split
    folder.mkdir()
    records = [{"text": f"record {i}: {words(random.Random(i), 20)}", "n": i} for i in range(60)]
    (folder / "train.jsonl").write_text("\n".join(json.dumps(r) for r in records))
    corpus = prepare_data(DataConfig(source="hub", path=str(folder), config=None, encoding="bytes"))
    assert corpus.info()["documents"] == "row"  # auto: not a wikitext path
    a, b = corpus.meta("train")["row_range"]
    assert np.asarray(corpus.tokens("train")).tolist() == joined([r["text"] for r in records[a:b]])
    with pytest.raises(
        DataError, match=r"data.text_column='n' .* does not hold text; columns: \['text', 'n'\]"
    ):
        prepare_data(
            DataConfig(
                source="hub", path=str(folder), config=None, text_column="n", encoding="bytes"
            )
        )


def run_cli(args, env, timeout=120):
    t = time.time()
    proc = subprocess.run(
        [sys.executable, "-m", "tiedvsuntied.data", *args],
        capture_output=True,
        text=True,
        env={**env, "PYTHONPATH": str(REPO)},
        timeout=timeout,
    )
    return proc, time.time() - t


def _fabricate_hub_cache(tmp_path: Path) -> Path:
    """Put 'someorg/wikimini' config 'mini-raw' into a datasets cache the way a download would
    have left it (built by datasets' own text builder, then placed under the Hub name)."""
    import datasets

    files = {
        "train": str(write(tmp_path, "train.txt", wiki_text(20))),
        "test": str(write(tmp_path, "test.txt", wiki_text(6, seed=4))),
    }
    datasets.load_dataset("text", data_files=files, cache_dir=str(tmp_path / "build"))
    (src,) = [
        Path(p)
        for p in glob.glob(str(tmp_path / "build" / "text" / "*" / "*" / "*"))
        if Path(p).is_dir()
    ]
    dst = tmp_path / "hf" / "someorg___wikimini" / "mini-raw" / "0.0.0" / src.name
    shutil.copytree(src, dst)
    for f in dst.glob("text-*.arrow"):
        f.rename(dst / f.name.replace("text-", "wikimini-"))
    info = json.loads((dst / "dataset_info.json").read_text())
    info.update(config_name="mini-raw", dataset_name="wikimini", builder_name="wikimini")
    (dst / "dataset_info.json").write_text(json.dumps(info))
    return tmp_path / "hf"


def test_offline_hub_uses_the_datasets_cache_and_fails_at_once_without_it(tmp_path):
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_CACHE": str(_fabricate_hub_cache(tmp_path)),
        "HF_HOME": str(tmp_path / "home"),
        "TIEDVSUNTIED_CACHE": str(tmp_path / "cache"),
    }
    proc, _ = run_cli(
        ["hub", "path=someorg/wikimini", "config=mini-raw", "documents=wikitext", "encoding=bytes"],
        env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    info = json.loads(proc.stdout)
    assert info["n_documents"]["test"] == 6
    proc, seconds = run_cli(["wikitext2", "encoding=bytes"], env)  # not in that cache
    assert proc.returncode == 2 and seconds < 20
    assert "'Salesforce/wikitext'" in proc.stderr and "HF_DATASETS_CACHE" in proc.stderr
    assert "data=text data.files=PATH" in proc.stderr


@pytest.mark.parametrize("encoding", ["gpt2", "bytes"])
def test_no_network_and_nothing_cached_fails_within_seconds_in_one_line(tmp_path, encoding):
    """The user's first command on a machine without network (no offline variables set): the
    tokenizer and the Hub are both checked before any work, and one line names every fix."""
    offline_vars = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TIKTOKEN_CACHE_DIR")
    env = {k: v for k, v in os.environ.items() if k not in offline_vars}
    no_network = "http://127.0.0.1:9"  # a closed port: every request fails at once
    env.update(
        {k: no_network for k in ("https_proxy", "HTTPS_PROXY", "http_proxy", "HTTP_PROXY")},
        no_proxy="",
        NO_PROXY="",
        TIKTOKEN_CACHE_DIR=str(tmp_path / "tiktoken"),
        HF_HOME=str(tmp_path / "hf"),
        HF_DATASETS_CACHE=str(tmp_path / "hf" / "datasets"),
        TIEDVSUNTIED_CACHE=str(tmp_path / "cache"),
    )
    proc, seconds = run_cli([f"encoding={encoding}"], env)  # the default corpus: WikiText-2
    assert proc.returncode == 2 and proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr  # no retry warnings
    assert seconds < 20  # loosely: only a guard against retries (they took 29-41 s)
    line = proc.stderr
    assert "'Salesforce/wikitext'" in line and "data=text data.files=PATH" in line
    assert "HF_DATASETS_OFFLINE" in line and "python -m tiedvsuntied.data" in line
    assert ("TIKTOKEN_CACHE_DIR" in line) == (encoding == "gpt2")
    assert not (tmp_path / "cache").exists()  # refused before any work


def test_prepare_where_the_network_is_then_train_on_a_node_without_it(tmp_path):
    """Clusters: `python -m tiedvsuntied.data` fills the token cache once (login node); a compute
    node with the Hub offline and no datasets cache of its own trains from the token cache alone."""
    cache = tmp_path / "shared_cache"
    login = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_CACHE": str(_fabricate_hub_cache(tmp_path)),
        "HF_HOME": str(tmp_path / "home"),
        "TIEDVSUNTIED_CACHE": str(cache),
    }
    data = ["path=someorg/wikimini", "config=mini-raw", "documents=wikitext", "encoding=bytes"]
    proc, _ = run_cli(["hub", *data], login)
    assert proc.returncode == 0, proc.stderr[-3000:]
    node = {
        **login,
        "HF_DATASETS_CACHE": str(tmp_path / "empty"),
        "HF_HOME": str(tmp_path / "home2"),
    }
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "tiedvsuntied.run",
            "data=hub",
            *(f"data.{d}" for d in data),
            "model=nano",
            "model.block_size=32",
            "trainer.max_steps=2",
            "trainer.eval_interval=2",
            "trainer.batch_size=2",
            "trainer.progress=false",
            "wandb.mode=disabled",
            f"results_dir={tmp_path / 'results'}",
        ],
        cwd=REPO,
        env=node,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    (summary,) = (tmp_path / "results" / "default").glob("*/summary.json")
    assert json.loads(summary.read_text())["status"] == "finished"
    proc, _ = run_cli(
        ["hub", *data, f"cache_dir={tmp_path / 'elsewhere'}"], node
    )  # without the token cache:
    assert proc.returncode == 2 and "HF_DATASETS_CACHE" in proc.stderr  # the offline error, at once


# ---------------------------------------------------------------------------- checks before work


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(files="nope.txt"), r"data.files: cannot read .*nope\.txt"),
        (dict(files="binary.bin"), r"data.files: .*binary\.bin is not UTF-8 text"),
        (dict(files="empty.txt"), r"data.files: .*empty\.txt is empty"),
        (dict(files=None), r"data.source=text needs data.files"),
        (
            dict(files={"train": "ok.txt", "dev2": "ok.txt"}),
            r"unknown or repeated split key 'dev2'",
        ),
        (dict(encoding="gpt5"), r"data.encoding='gpt5' is not valid; valid: .*'bytes'.*'gpt2'"),
        (dict(val_fraction=1.5), r"data.val_fraction=1.5 must be in \[0, 1\)"),
        (dict(val_fraction=0.6, test_fraction=0.5), "leaves nothing for train"),
        (dict(val_fraction=0.0), r"data.val_fraction must be > 0 to hold val out"),
        (
            dict(source="hub", documents="paragraph"),
            r"data.documents=paragraph needs data.source=text",
        ),
        (dict(source="hub", path=""), r"data.source=hub needs data.path"),
        (dict(num_threads=-1), r"data.num_threads=-1 must be >= 0"),
        (dict(documents="pages"), r"data.documents='pages' is not valid; valid: \['auto', "),
        (dict(vocab="closed"), r"data.vocab='closed' is not valid; valid: \['full', 'seen'\]"),
    ],
)
def test_check_data_refuses_bad_input_in_one_line(tmp_path, monkeypatch, kw, match):
    monkeypatch.chdir(tmp_path)
    write(tmp_path, "ok.txt", "hello\n")
    (tmp_path / "empty.txt").write_bytes(b"")
    (tmp_path / "binary.bin").write_bytes(bytes(range(256)) * 4)
    kw = {"files": "ok.txt", "cache_dir": str(tmp_path / "cache"), **kw}
    with pytest.raises(DataError, match=match) as e:  # at construction, or at the file checks
        D.check_data(cfg(**kw))
    assert "\n" not in str(e.value)
    with pytest.raises(DataError, match=match):
        prepare_data(cfg(**kw))
    assert not (tmp_path / "cache").exists()  # refused before any work
    D.check_data(cfg("ok.txt"))
    D.check_data(DataConfig())  # the default Hub corpus: no network to check it


def test_whitespace_only_split_is_named(tmp_path, play):
    blank = write(tmp_path, "blank.txt", "\n \n\n")
    with pytest.raises(DataError, match=r"split 'train' of text:.* is empty"):
        prepare_data(cfg({"train": str(blank), "val": str(play), "test": str(play)}))


def test_a_split_shorter_than_one_window_is_named(corpus):
    val = corpus.tokens("val")
    n = len(val)
    with pytest.raises(DataError, match=rf"split 'val' has {n} tokens.*block_size\+1 = {n + 1}"):
        BatchSampler(val, block_size=n, batch_size=2, seed=0)  # the name is read from the memmap
    with pytest.raises(DataError, match=rf"split 'dev' has {n} tokens"):
        next(iter_eval_batches(val, block_size=n, batch_size=2, max_windows=4, split="dev"))
    BatchSampler(val, block_size=n - 1, batch_size=2, seed=0).get(0)  # exactly one window fits


# ---------------------------------------------------------------------------- batches


def test_batches_are_a_pure_function_of_seed_step_micro(corpus):
    toks = corpus.tokens("train")
    tied, untied = BatchSampler(toks, 64, 8, seed=3), BatchSampler(toks, 64, 8, seed=3)
    torch.manual_seed(123)
    run_a = [tied.get(s, m) for s in range(6) for m in range(2)]
    torch.rand(5), np.random.rand(5)  # global RNG use in between must not matter
    run_b = [untied.get(s, m) for s in range(6) for m in range(2)]
    assert all(
        torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
        for a, b in zip(run_a, run_b, strict=True)
    )
    resumed = BatchSampler(toks, 64, 8, seed=3)  # resume at step 5: what an uninterrupted run got
    assert all(torch.equal(resumed.get(5, m)[0], run_a[10 + m][0]) for m in range(2))
    assert not torch.equal(tied.get(0, 0)[0], tied.get(1, 0)[0])
    assert not torch.equal(tied.get(0, 0)[0], tied.get(0, 1)[0])
    assert not torch.equal(tied.get(0, 0)[0], BatchSampler(toks, 64, 8, seed=4).get(0, 0)[0])
    state = torch.get_rng_state()
    tied.get(7)
    assert torch.equal(state, torch.get_rng_state())
    # the very draws of earlier versions: runs recorded before stay comparable
    s = BatchSampler(np.zeros(10_000, dtype=np.uint16), 64, 4, seed=3)
    assert s.starts(5, 1).tolist() == [8166, 9893, 7039, 6409] and s.starts(0).tolist() == [
        9212,
        1876,
        6337,
        7712,
    ]


def test_batch_windows_are_shifted_slices_of_the_split(corpus):
    toks = np.asarray(corpus.tokens("train"))
    s = BatchSampler(corpus.tokens("train"), block_size=32, batch_size=5, seed=0)
    x, y = s.get(11, 2)
    assert x.dtype == y.dtype == torch.int64 and x.shape == y.shape == (5, 32)
    assert torch.equal(x[:, 1:], y[:, :-1])
    for start, row in zip(s.starts(11, 2), x, strict=True):
        assert np.array_equal(row.numpy(), toks[start : start + 32])
    starts = np.concatenate([s.starts(i) for i in range(2000)])  # cover the whole split
    assert starts.min() < len(toks) * 0.01 and len(toks) - 33 >= starts.max() > len(toks) * 0.99


def test_eval_windows_are_fixed_evenly_spaced_and_non_overlapping(corpus):
    val = corpus.tokens("val")
    n, T = len(val), 128
    first = list(iter_eval_batches(val, T, batch_size=3, max_windows=10))
    second = list(iter_eval_batches(val, T, batch_size=3, max_windows=10))
    assert [b[0].shape[0] for b in first] == [3, 3, 3, 1]
    assert all(
        torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
        for a, b in zip(first, second, strict=True)
    )
    starts = eval_window_starts(n, T, 10)
    assert len(starts) == 10
    assert starts[0] == 0 and starts[-1] == n - (T + 1)
    assert np.all(np.diff(starts) >= T + 1) and np.ptp(np.diff(starts)) <= 1
    x, y = first[1]
    assert np.array_equal(x[0].numpy(), np.asarray(val[starts[3] : starts[3] + T])) and torch.equal(
        x[:, 1:], y[:, :-1]
    )
    assert len({len(eval_window_starts(n, T, k)) for k in (10**9, None, 0)} | {n // (T + 1)}) == 1


# ---------------------------------------------------------------------------- configs + CLI


#: What each preset resolved to at commit 3608031 besides the DataConfig defaults. Run ids hash
#: every data key (but files, cache_dir, num_threads): a preset may never resolve differently.
PRESETS = {
    "wikitext2": {"documents": "wikitext"},
    "wikitext103": {
        "name": "wikitext103",
        "config": "wikitext-103-raw-v1",
        "documents": "wikitext",
    },
    "text": {"name": "text", "source": "text", "path": "", "config": None, "documents": "file"},
    "hub": {"name": "hub", "path": "", "config": None, "documents": "row"},
}


@pytest.mark.parametrize("preset", ["wikitext2", "wikitext103", "text", "hub"])
def test_conf_data_presets_set_only_their_own_values(preset):
    from omegaconf import OmegaConf

    conf = OmegaConf.to_container(OmegaConf.load(REPO / "conf" / "data" / f"{preset}.yaml"))
    defaults = OmegaConf.to_container(OmegaConf.structured(DataConfig), enum_to_str=True)
    assert conf and set(conf) <= set(defaults)
    assert [k for k, v in conf.items() if defaults[k] == v] == []  # the schema gives defaults
    required = {"text": ["files=a.txt"], "hub": ["path=org/name"]}.get(preset, [])
    loaded = D.load_config(preset, required)
    assert isinstance(loaded.source, D.Source) and isinstance(loaded.documents, D.Documents)
    expected = {**PRESETS[preset], **dict(o.split("=") for o in required)}
    assert loaded == dataclasses.replace(DataConfig(), **expected)
    if preset == "wikitext2":  # the default corpus: the dataclass default, the same cache key
        assert loaded.documents_mode() == DataConfig().documents_mode()
        assert loaded == DataConfig(documents=loaded.documents)


def test_presets_and_overrides_that_need_a_value_say_so():
    with pytest.raises(DataError, match=r"needs data.files"):
        D.check_data(D.load_config("text"))
    with pytest.raises(DataError, match="needs data.path"):
        D.check_data(D.load_config("hub"))
    with pytest.raises(DataError, match=r"data.source: .*ftp") as e:
        D.load_config("text", ["data.source=ftp"])
    assert "\n" not in str(e.value)
    with pytest.raises(
        DataError, match=r"no data preset 'wiki'; valid: \['gutenberg', 'hub', 'text'"
    ):
        D.load_config("wiki")


def test_cli_prepares_and_prints_info(play, corpus):
    proc, _ = run_cli(["text", f"data.files={play}", "name=t", "encoding=bytes"], dict(os.environ))
    assert proc.returncode == 0, proc.stderr[-3000:]
    info = json.loads(proc.stdout)
    assert info["fingerprint"] == corpus.fingerprint and info["built_now"] == []
    assert info["n_tokens"] == {s: corpus.n_tokens(s) for s in SPLITS}
    proc, _ = run_cli(["text", f"files={play}", "encoding=bytes", "--fresh"], dict(os.environ))
    assert proc.returncode == 0 and json.loads(proc.stdout)["built_now"] == list(SPLITS)
    assert "tokens/s" in proc.stderr


def test_seen_vocabulary_renumbers_the_corpus_tokens_and_has_its_own_data_id(tmp_path):
    """data.vocab=seen: a closed vocabulary of the tokens the corpus has, numbered in the
    encoding's order; the same text, a different data id, the cache shared with vocab=full."""
    text = write(tmp_path, "c.txt", play_text(400))
    full = prepare_data(cfg(str(text), cache_dir=str(tmp_path / "cache")))
    seen = prepare_data(cfg(str(text), cache_dir=str(tmp_path / "cache"), vocab="seen"))
    ids = np.flatnonzero(sum(full.token_freq(s) for s in ("train", "val", "test")))
    assert seen.vocab_size == len(ids) < full.vocab_size == 257 and seen.dir == full.dir
    for split in ("train", "val", "test"):
        np.testing.assert_array_equal(ids[seen.tokens(split)], full.tokens(split))
        np.testing.assert_array_equal(seen.token_freq(split), full.token_freq(split)[ids])
    assert seen.fingerprint != full.fingerprint
    assert seen.eot_token is None  # one file, one document: no end-of-text token to renumber
    full_docs, docs = (
        prepare_data(
            cfg(str(text), cache_dir=str(tmp_path / "cache"), vocab=v, documents="paragraph")
        )
        for v in ("full", "seen")
    )
    doc_ids = np.flatnonzero(sum(full_docs.token_freq(s) for s in ("train", "val", "test")))
    assert (
        doc_ids[docs.eot_token] == full_docs.eot_token == 256
    )  # documents: the end-of-text token is renumbered too
    assert seen.info()["vocab"] == "seen" and seen.info()["vocab_size"] == len(ids)
