"""Data: real datasets + tiktoken code paths on the offline corpora in shared/data, no mocks.

Tokenization is checked against tiktoken itself (``encode_ordinary`` of the exact text of each
split/document); concurrency and crash-safety are checked with real processes.
"""
from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tiktoken
import torch

from tiedvsuntied import data as D
from tiedvsuntied.data import (
    BatchSampler,
    DataConfig,
    DataError,
    DataUnavailableError,
    iter_eval_batches,
    n_eval_windows,
    prepare_data,
)

REPO = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------------- helpers

def shakespeare_cfg(path, **kw) -> DataConfig:
    return DataConfig(**{"name": "shakespeare", "source": "text", "files": str(path), **kw})


def wikitext_cfg(shared_data, **kw) -> DataConfig:
    wt = shared_data / "wikitext-2"
    # the shared folder has no train split: valid.txt plays train, test.txt plays validation
    return DataConfig(name="wt2", source="text", documents="wikitext",
                      files={"train": str(wt / "valid.txt"), "validation": str(wt / "test.txt")}, **kw)


def build_events(corpus_dir: Path, event: str = "start") -> int:
    log = Path(corpus_dir) / "builds.log"
    if not log.exists():
        return 0
    return sum(json.loads(line)["event"] == event for line in log.read_text().splitlines())


def sha(arr) -> str:
    return hashlib.sha256(np.ascontiguousarray(arr).tobytes()).hexdigest()


def subprocess_env(**extra) -> dict:
    env = dict(os.environ)
    env.update({k: str(v) for k, v in extra.items()})
    return env


@pytest.fixture(scope="module")
def enc():
    return tiktoken.get_encoding("gpt2")


@pytest.fixture
def shakespeare(shakespeare_path):
    return prepare_data(shakespeare_cfg(shakespeare_path))


# ---------------------------------------------------------------------------- tokenization

def test_text_file_split_into_contiguous_blocks_tokenized_exactly(shakespeare, shakespeare_path, enc):
    raw = shakespeare_path.read_text()
    ranges = [shakespeare.meta(s)["char_range"] for s in ("train", "val", "test")]
    # train | val | test: contiguous, cover the file, cut at line boundaries
    assert ranges[0][0] == 0 and ranges[0][1] == ranges[1][0] and ranges[1][1] == ranges[2][0]
    assert ranges[2][1] == len(raw)
    for a, _ in ranges[1:]:
        assert raw[a - 1] == "\n"
    assert abs((ranges[1][1] - ranges[1][0]) / len(raw) - 0.05) < 0.005
    assert abs((ranges[2][1] - ranges[2][0]) / len(raw) - 0.05) < 0.005
    # each split is exactly tiktoken's tokenization of its text: one document, no EOT inside
    for split, (a, b) in zip(("train", "val", "test"), ranges):
        toks = shakespeare.tokens(split)
        assert isinstance(toks, np.memmap) and toks.dtype == np.uint16
        assert np.array_equal(np.asarray(toks), np.array(enc.encode_ordinary(raw[a:b])))
        assert shakespeare.eot_token not in np.asarray(toks)
        assert shakespeare.n_tokens(split) == len(toks)
    # the whole file is 338,025 GPT-2 tokens (shared/data/README.md); the cuts lose none
    assert sum(shakespeare.n_tokens(s) for s in ("train", "val", "test")) == 338_025


def test_vocab_eot_and_token_freq_come_from_the_tokenizer(shakespeare, enc):
    assert shakespeare.vocab_size == enc.n_vocab == 50257
    assert shakespeare.eot_token == enc.eot_token == 50256
    assert shakespeare.encoding.name == "gpt2"
    freq = shakespeare.token_freq("train")
    assert freq.dtype == np.int64 and freq.shape == (shakespeare.vocab_size,)
    assert np.array_equal(freq, np.bincount(np.asarray(shakespeare.tokens("train")), minlength=50257))
    info = shakespeare.info()
    assert info["n_tokens"]["train"] == shakespeare.n_tokens("train")
    assert info["fingerprint"] == shakespeare.fingerprint and len(shakespeare.fingerprint) == 12
    assert all(v and v > 0 for v in info["tokens_per_s"].values())
    assert all(Path(p).is_file() for p in info["paths"].values())


def test_wikitext_end_of_text_between_articles_not_lines(shared_data, enc):
    corpus = prepare_data(wikitext_cfg(shared_data))
    eot = corpus.eot_token
    raw_train = (shared_data / "wikitext-2" / "valid.txt").read_text()
    a, b = corpus.meta("train")["char_range"]

    # expected documents: cut the exact text before every title row that sits between blank rows
    def articles(text):
        lines = text.splitlines(keepends=True)
        docs, cur = [], []
        for i, line in enumerate(lines):
            prev = lines[i - 1] if i else None
            nxt = lines[i + 1] if i + 1 < len(lines) else None
            if (re.match(r"^ = [^=](.*[^=])? = \n?$", line) and (prev is None or not prev.strip())
                    and (nxt is None or not nxt.strip()) and cur):
                docs.append("".join(cur))
                cur = []
            cur.append(line)
        docs.append("".join(cur))
        return [d for d in docs if not d.isspace()]

    for split, text in (("train", raw_train[a:b]),
                        ("val", (shared_data / "wikitext-2" / "test.txt").read_text())):
        docs = articles(text)
        toks = np.asarray(corpus.tokens(split)).tolist()
        assert corpus.meta(split)["n_documents"] == len(docs)
        assert toks.count(eot) == len(docs) - 1          # between documents, not after every line
        assert text.count("\n") > 20 * len(docs)
        expected = []
        for i, doc in enumerate(docs):
            if i:
                expected.append(eot)
            expected.extend(enc.encode_ordinary(doc))
        assert toks == expected
        # every document starts with its title row; the formula rows ' = 1 ... k = ' in
        # "Constant k filter" (test.txt) are not titles
        segments = corpus.decode(toks).split("<|endoftext|>")
        assert all(re.match(r"^ = [^=]", s) for s in segments)
    assert corpus.meta("val")["n_documents"] == 60  # WikiText-2 test has 60 articles


def test_paragraph_documents(shakespeare_path, enc):
    corpus = prepare_data(shakespeare_cfg(shakespeare_path, documents="paragraph", name="shk-par"))
    toks = np.asarray(corpus.tokens("train")).tolist()
    n_docs = corpus.meta("train")["n_documents"]
    assert n_docs > 5000 and toks.count(corpus.eot_token) == n_docs - 1
    first = corpus.decode(toks[: toks.index(corpus.eot_token)])
    assert first == "First Citizen:\nBefore we proceed any further, hear me speak."


def test_several_files_for_one_split_are_separate_documents(shared_data, enc):
    wt = shared_data / "wikitext-2"
    corpus = prepare_data(DataConfig(name="two-files", source="text", documents="file",
                                     files=[str(wt / "valid.txt"), str(wt / "test.txt")]))
    toks = np.asarray(corpus.tokens("train")).tolist()
    assert corpus.meta("train")["n_documents"] == 2 and toks.count(corpus.eot_token) == 1
    first = (wt / "valid.txt").read_text()
    assert toks[: toks.index(corpus.eot_token)] == enc.encode_ordinary(first)
    # val and test are cut from the tail of the second file
    assert corpus.meta("val")["n_documents"] == corpus.meta("test")["n_documents"] == 1


def test_other_tiktoken_encoding_is_selectable_and_unknown_one_is_named(shakespeare_path):
    with pytest.raises(DataError) as e:
        prepare_data(shakespeare_cfg(shakespeare_path, encoding="gpt3"))
    msg = str(e.value)
    assert "'gpt3'" in msg and "gpt2" in msg and "cl100k_base" in msg


# ---------------------------------------------------------------------------- cache

def test_second_prepare_reuses_the_cache(shakespeare_path):
    first = prepare_data(shakespeare_cfg(shakespeare_path))
    starts = build_events(first.dir)
    again = prepare_data(shakespeare_cfg(shakespeare_path, num_threads=1))
    assert again.dir == first.dir and again.fingerprint == first.fingerprint
    assert again.info()["built_now"] == []
    assert build_events(first.dir) == starts == 1
    assert sha(again.tokens("train")) == sha(first.tokens("train"))


def test_fingerprint_tracks_content_fractions_and_tokenizer_not_name_or_mtime(shakespeare_path, tmp_path):
    base = prepare_data(shakespeare_cfg(shakespeare_path))
    assert prepare_data(shakespeare_cfg(shakespeare_path, name="other")).fingerprint == base.fingerprint
    assert prepare_data(shakespeare_cfg(shakespeare_path, val_fraction=0.1)).fingerprint != base.fingerprint
    # a copy elsewhere (outside the project) with the same bytes is the same data
    copy = tmp_path / "copy.txt"
    copy.write_bytes(shakespeare_path.read_bytes())
    same = prepare_data(shakespeare_cfg(copy))
    assert same.fingerprint == base.fingerprint
    os.utime(copy, (1e9, 1e9))                     # mtime alone does not change the data
    assert prepare_data(shakespeare_cfg(copy)).fingerprint == base.fingerprint
    copy.write_bytes(shakespeare_path.read_bytes().replace(b"First Citizen", b"Final Citizen", 1))
    changed = prepare_data(shakespeare_cfg(copy))
    assert changed.fingerprint != base.fingerprint
    assert changed.n_tokens("train") == base.n_tokens("train")


def test_relative_paths_resolve_against_the_working_directory(shared_data, shakespeare_path, monkeypatch):
    monkeypatch.chdir(shared_data)
    rel = prepare_data(shakespeare_cfg("tinyshakespeare/input.txt"))
    assert rel.fingerprint == prepare_data(shakespeare_cfg(shakespeare_path)).fingerprint


_WORKER = r"""
import hashlib, json, sys, time
from pathlib import Path
from tiedvsuntied.data import DataConfig, prepare_data
go, files, cache, ready = Path(sys.argv[1]), sys.argv[2], sys.argv[3], Path(sys.argv[4])
ready.touch()
while not go.exists():
    time.sleep(0.002)
c = prepare_data(DataConfig(name="race", source="text", files=files, cache_dir=cache))
print(json.dumps({"fp": c.fingerprint, "dir": str(c.dir), "built": c.info()["built_now"],
                  **{s: hashlib.sha256(c.tokens(s).tobytes()).hexdigest() for s in ("train", "val", "test")}}))
"""


def test_concurrent_preparations_tokenize_once_and_agree(shakespeare_path, shakespeare, tmp_path):
    cache, go, n = tmp_path / "cache", tmp_path / "go", 3
    procs = [subprocess.Popen([sys.executable, "-c", _WORKER, str(go), str(shakespeare_path), str(cache),
                               str(tmp_path / f"ready{i}")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=subprocess_env())
             for i in range(n)]
    deadline = time.time() + 120
    while not all((tmp_path / f"ready{i}").exists() for i in range(n)):
        assert time.time() < deadline and all(p.poll() is None for p in procs), "workers did not start"
        time.sleep(0.01)
    go.touch()                                   # all start preparing at the same moment
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err[-3000:]
        outs.append(json.loads(out.strip().splitlines()[-1]))
    corpus_dir = Path(outs[0]["dir"])
    assert build_events(corpus_dir, "start") == 1 and build_events(corpus_dir, "done") == 1
    assert sorted(len(o["built"]) for o in outs) == [0] * (n - 1) + [3]
    for key in ("fp", "train", "val", "test"):
        assert len({o[key] for o in outs}) == 1
    # and they are the very tokens the session cache holds for the same data
    assert outs[0]["fp"] == shakespeare.fingerprint
    assert outs[0]["train"] == sha(shakespeare.tokens("train"))


_SLOW_WORKER = r"""
import sys
from tiedvsuntied.data import DataConfig, prepare_data
prepare_data(DataConfig(name="killed", source="text", files=sys.argv[1], cache_dir=sys.argv[2]))
"""


def test_kill_during_tokenization_leaves_nothing_trusted_and_rebuilds(shakespeare_path, shakespeare, tmp_path):
    cache = tmp_path / "cache"
    proc = subprocess.Popen([sys.executable, "-c", _SLOW_WORKER, str(shakespeare_path), str(cache)],
                            env=subprocess_env(**{D.DEBUG_SLEEP_ENV: 120}),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 90
        # the hook sleeps once train.bin and its freq are fully written under temp names
        while not glob.glob(str(cache / "tokens" / "*" / "train.freq.npy.tmp-*")):
            assert proc.poll() is None and time.time() < deadline, "worker never reached the hook"
            time.sleep(0.02)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    (corpus_dir,) = (cache / "tokens").iterdir()
    assert glob.glob(str(corpus_dir / "*.tmp-*"))            # the killed build left debris ...
    assert {p.name for p in corpus_dir.glob("*.json")} == {"identity.json"}   # no split metadata
    key = D._digest(json.loads((corpus_dir / "identity.json").read_text()))
    assert all(D._read_entry(corpus_dir, s, key) is None for s in ("train", "val", "test"))
    # ... which a later run neither trusts nor trips over: it rebuilds (the lock died with the process)
    t = time.time()
    rebuilt = prepare_data(shakespeare_cfg(shakespeare_path, name="killed", cache_dir=str(cache)))
    assert time.time() - t < 60
    assert rebuilt.dir == corpus_dir and rebuilt.info()["built_now"] == ["test", "train", "val"]
    assert build_events(corpus_dir, "start") == 2 and build_events(corpus_dir, "done") == 1
    assert not glob.glob(str(corpus_dir / "*.tmp-*"))
    for s in ("train", "val", "test"):
        assert sha(rebuilt.tokens(s)) == sha(shakespeare.tokens(s))


def test_entry_without_metadata_or_with_wrong_size_is_rebuilt(shakespeare_path, shakespeare, tmp_path):
    cfg = shakespeare_cfg(shakespeare_path, cache_dir=str(tmp_path))
    first = prepare_data(cfg)
    (first.dir / "val.json").unlink()                      # data file present, metadata missing
    (first.dir / "val.bin").write_bytes(b"\x00" * 10)
    meta = json.loads((first.dir / "test.json").read_text())
    (first.dir / "test.bin").write_bytes(b"\x00" * (2 * meta["n_tokens"] - 2))   # truncated
    again = prepare_data(cfg)
    assert again.info()["built_now"] == ["test", "val"]     # train was intact and is kept
    assert build_events(first.dir) == 2
    for s in ("train", "val", "test"):
        assert sha(again.tokens(s)) == sha(shakespeare.tokens(s))


# ---------------------------------------------------------------------------- Hub code path

@pytest.fixture
def local_wikitext_dataset(shared_data, tmp_path):
    """A local dataset folder (train.txt, test.txt; no validation) loaded by the Hub branch."""
    d = tmp_path / "wt_local"
    d.mkdir()
    (d / "train.txt").symlink_to(shared_data / "wikitext-2" / "valid.txt")
    (d / "test.txt").symlink_to(shared_data / "wikitext-2" / "test.txt")
    return d


def test_hub_branch_holds_out_missing_validation_and_matches_the_text_branch(local_wikitext_dataset, shared_data):
    hub = prepare_data(DataConfig(name="wt-hub", source="hub", path=str(local_wikitext_dataset), config=None,
                                  documents="wikitext"))
    assert hub.meta("val")["row_range"][0] == hub.meta("train")["row_range"][1]   # val = tail of train
    assert hub.meta("train")["row_range"][0] == 0
    # rows come without line breaks here; documents are rebuilt from lines exactly, so the test
    # split equals the text branch's tokenization of the same file
    text = prepare_data(wikitext_cfg(shared_data))
    assert sha(hub.tokens("test")) == sha(text.tokens("val"))
    with pytest.raises(DataError, match=r"text_column='content'.*columns: \['text'\]"):
        prepare_data(DataConfig(name="wt-hub", source="hub", path=str(local_wikitext_dataset), config=None,
                                text_column="content"))
    with pytest.raises(DataError, match=r"val_split='dev2'.*available: \['train', 'test'\]"):
        prepare_data(DataConfig(name="wt-hub", source="hub", path=str(local_wikitext_dataset), config=None,
                                val_split="dev2"))


def _run_cli(args, env, timeout=120):
    t = time.time()
    proc = subprocess.run([sys.executable, "-m", "tiedvsuntied.data", *args], capture_output=True, text=True,
                          env=env, timeout=timeout)
    return proc, time.time() - t


def test_unreachable_hub_fails_fast_with_a_helpful_message(tmp_path):
    env = subprocess_env(HF_HOME=tmp_path / "hf", TIEDVSUNTIED_CACHE=tmp_path / "cache")
    env.pop("HF_HUB_OFFLINE", None)
    env.pop("HF_DATASETS_OFFLINE", None)
    proc, seconds = _run_cli(["wikitext2"], env)
    assert proc.returncode == 2, proc.stderr[-3000:]
    err = proc.stderr
    assert "Salesforce/wikitext" in err and "wikitext-2-raw-v1" in err
    assert "unreachable" in err and "HF_DATASETS_CACHE" in err and "data=text data.files=" in err
    assert seconds < 30, f"took {seconds:.1f} s"   # datasets' own retry loop alone takes ~23 s


def test_offline_hub_dataset_not_cached_fails_at_once():
    t = time.time()
    with pytest.raises(DataUnavailableError, match="offline mode is on") as e:
        prepare_data(DataConfig())          # the default corpus; conftest sets HF_HUB_OFFLINE=1
    assert "data=text data.files=" in str(e.value) and "HF_DATASETS_CACHE" in str(e.value)
    assert time.time() - t < 10


def _fabricate_hub_cache(shared_data, root: Path) -> Path:
    """Put a dataset 'someorg/wikimini' config 'mini-raw' into a datasets cache the way a download
    would have left it (built by datasets' own text builder, then placed under the Hub name)."""
    import shutil

    import datasets
    build = root / "build"
    datasets.load_dataset("text", data_files={"train": str(shared_data / "wikitext-2" / "valid.txt"),
                                              "test": str(shared_data / "wikitext-2" / "test.txt")},
                          keep_linebreaks=True, cache_dir=str(build))
    (src,) = [Path(p) for p in glob.glob(str(build / "text" / "*" / "*" / "*")) if Path(p).is_dir()]
    dst = root / "datasets" / "someorg___wikimini" / "mini-raw" / "0.0.0" / src.name
    shutil.copytree(src, dst)
    for f in dst.glob("text-*.arrow"):
        f.rename(dst / f.name.replace("text-", "wikimini-"))
    info = json.loads((dst / "dataset_info.json").read_text())
    info.update(config_name="mini-raw", dataset_name="wikimini", builder_name="wikimini")
    (dst / "dataset_info.json").write_text(json.dumps(info))
    return root / "datasets"


def test_hub_dataset_in_the_datasets_cache_works_offline_and_when_unreachable(shared_data, tmp_path):
    hf_cache = _fabricate_hub_cache(shared_data, tmp_path / "hf")
    args = ["hub", "path=someorg/wikimini", "config=mini-raw", "documents=wikitext"]
    procs = []
    t = time.time()
    for offline in (True, False):               # both at once: the test file must stay fast
        env = subprocess_env(HF_DATASETS_CACHE=hf_cache, HF_HOME=tmp_path / f"hfhome{offline}",
                             TIEDVSUNTIED_CACHE=tmp_path / f"cache{offline}")
        env.pop("HF_DATASETS_OFFLINE", None)
        if offline:
            env["HF_HUB_OFFLINE"] = "1"
        else:
            env.pop("HF_HUB_OFFLINE", None)     # Hub unreachable: must fall back to the cache fast
        procs.append(subprocess.Popen([sys.executable, "-m", "tiedvsuntied.data", *args], env=env, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    infos = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-3000:]
        infos.append(json.loads(out))
    assert time.time() - t < 30
    assert infos[0]["fingerprint"] == infos[1]["fingerprint"]
    assert infos[0]["n_tokens"] == infos[1]["n_tokens"]
    assert infos[0]["n_documents"]["test"] == 60


def test_tiktoken_files_missing_fails_fast_with_a_helpful_message(tmp_path, shakespeare_path):
    empty = tmp_path / "empty_tiktoken"
    empty.mkdir()
    env = subprocess_env(TIKTOKEN_CACHE_DIR=empty, TIEDVSUNTIED_CACHE=tmp_path / "cache")
    proc, seconds = _run_cli(["text", f"files={shakespeare_path}"], env)
    assert proc.returncode == 2
    err = proc.stderr
    assert "tiktoken encoding 'gpt2'" in err and "TIKTOKEN_CACHE_DIR" in err
    assert "vocab.bpe" in err and str(empty / "6d1cbeee0f20b3d9449abfede4726ed8212e3aee") in err
    assert seconds < 30


# ---------------------------------------------------------------------------- bad input

def test_bad_input_errors_name_the_problem(tmp_path, monkeypatch, shakespeare_path, shakespeare):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match=re.escape(str(tmp_path / "nope.txt"))):
        prepare_data(DataConfig(source="text", files="nope.txt"))
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(DataError, match=r"empty\.txt is empty"):
        prepare_data(DataConfig(source="text", files="empty.txt"))
    (tmp_path / "blank.txt").write_text("\n \n\n")
    with pytest.raises(DataError, match="empty"):
        prepare_data(DataConfig(source="text", files={"train": "blank.txt", "val": str(shakespeare_path),
                                                      "test": str(shakespeare_path)}))
    with pytest.raises(DataError, match=r"data.source='ftp'.*\['hub', 'text'\]"):
        prepare_data(DataConfig(source="ftp"))
    with pytest.raises(DataError, match="needs data.files"):
        prepare_data(DataConfig(source="text"))
    with pytest.raises(DataError, match=r"unknown split key 'dev2'"):
        prepare_data(DataConfig(source="text", files={"train": str(shakespeare_path), "dev2": "x"}))
    with pytest.raises(DataError, match=r"data.documents='pages'"):
        prepare_data(DataConfig(source="text", files=str(shakespeare_path), documents="pages"))
    with pytest.raises(DataError, match="val_fraction"):
        prepare_data(DataConfig(source="text", files=str(shakespeare_path), val_fraction=0.0))
    with pytest.raises(DataError, match=r"unknown split 'validation'; valid splits: \['train', 'val', 'test'\]"):
        shakespeare.tokens("validation")


def test_a_split_shorter_than_one_window_is_named(shakespeare):
    val = shakespeare.tokens("val")
    n = len(val)
    with pytest.raises(DataError, match=rf"split 'val' has {n} tokens.*block_size\+1 = {n + 1}"):
        BatchSampler(val, block_size=n, batch_size=2, seed=0, split="val")
    with pytest.raises(DataError, match=rf"split 'test' has {n} tokens.*block_size\+1 = {n + 1}"):
        next(iter_eval_batches(val, block_size=n, batch_size=2, max_windows=4, split="test"))
    BatchSampler(val, block_size=n - 1, batch_size=2, seed=0).get(0)   # exactly one window fits
    # without split=..., the name is read from the corpus memmap
    test = shakespeare.tokens("test")
    with pytest.raises(DataError, match=rf"split 'test' has {len(test)} tokens"):
        next(iter_eval_batches(test, block_size=len(test), batch_size=2, max_windows=4))
    with pytest.raises(DataError, match=rf"split 'train' has"):
        BatchSampler(shakespeare.tokens("train"), block_size=10**6, batch_size=2, seed=0)


# ---------------------------------------------------------------------------- batches

def test_batches_are_a_pure_function_of_seed_step_micro(shakespeare):
    toks = shakespeare.tokens("train")
    tied, untied = BatchSampler(toks, 64, 8, seed=3), BatchSampler(toks, 64, 8, seed=3)
    torch.manual_seed(123)
    np.random.seed(123)
    run_a = [tied.get(s, m) for s in range(6) for m in range(2)]
    torch.rand(5)                                # global RNG use in between must not matter
    np.random.rand(5)
    run_b = [untied.get(s, m) for s in range(6) for m in range(2)]
    for (xa, ya), (xb, yb) in zip(run_a, run_b):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
    # resume at step 4 in a new sampler: the same batches an uninterrupted run got
    resumed = BatchSampler(toks, 64, 8, seed=3)
    assert torch.equal(resumed.get(4, 1)[0], run_a[4 * 2 + 1][0])
    assert [torch.equal(a[0], b[0]) for a, b in zip(resumed.get_accum(5, 2), run_a[10:12])] == [True, True]
    # different step, micro or seed -> different batches; global RNG state untouched
    assert not torch.equal(tied.get(0, 0)[0], tied.get(1, 0)[0])
    assert not torch.equal(tied.get(0, 0)[0], tied.get(0, 1)[0])
    assert not torch.equal(tied.get(0, 0)[0], BatchSampler(toks, 64, 8, seed=4).get(0, 0)[0])
    state = torch.get_rng_state()
    tied.get(7)
    assert torch.equal(state, torch.get_rng_state())


def test_batch_windows_are_shifted_slices_of_the_split(shakespeare):
    toks = np.asarray(shakespeare.tokens("train"))
    s = BatchSampler(shakespeare.tokens("train"), block_size=32, batch_size=5, seed=0)
    x, y = s.get(11, 2)
    assert x.dtype == y.dtype == torch.int64 and x.shape == y.shape == (5, 32)
    assert torch.equal(x[:, 1:], y[:, :-1])
    for start, row in zip(s.starts(11, 2), x):
        assert 0 <= start <= len(toks) - 33
        assert np.array_equal(row.numpy(), toks[start:start + 32])
    # start offsets cover the whole split, including the very last window
    starts = np.concatenate([s.starts(i) for i in range(2000)])
    assert starts.min() < len(toks) * 0.01 and starts.max() > len(toks) * 0.99


def test_eval_windows_are_fixed_evenly_spaced_and_non_overlapping(shakespeare):
    val = shakespeare.tokens("val")
    n, T = len(val), 128
    first = list(iter_eval_batches(val, T, batch_size=3, max_windows=10))
    second = list(iter_eval_batches(val, T, batch_size=3, max_windows=10))
    assert [b[0].shape[0] for b in first] == [3, 3, 3, 1]
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(first, second))
    assert n_eval_windows(val, T, 10) == 10 == sum(b[0].shape[0] for b in first)
    starts = D.eval_window_starts(n, T, 10)
    assert starts[0] == 0 and starts[-1] == n - (T + 1)
    assert np.all(np.diff(starts) >= T + 1)
    assert np.ptp(np.diff(starts)) <= 1                              # evenly spaced
    x0, y0 = first[1]
    assert np.array_equal(x0[0].numpy(), np.asarray(val[starts[3]:starts[3] + T]))
    assert torch.equal(x0[:, 1:], y0[:, :-1])
    # capped by what fits without overlap; None = all of them
    assert n_eval_windows(n, T, 10**9) == n // (T + 1) == n_eval_windows(n, T, None)


# ---------------------------------------------------------------------------- configs + CLI

@pytest.mark.parametrize("preset", ["wikitext2", "wikitext103", "text", "hub"])
def test_conf_data_presets_match_the_schema(preset):
    from omegaconf import OmegaConf
    conf = OmegaConf.merge(OmegaConf.structured(DataConfig), OmegaConf.load(REPO / "conf" / "data" / f"{preset}.yaml"))
    assert set(conf.keys()) == set(OmegaConf.structured(DataConfig).keys())
    if preset == "wikitext2":   # the default corpus is the dataclass default
        cfg, default = OmegaConf.to_object(conf), DataConfig()
        assert D._resolve_documents(cfg) == D._resolve_documents(default)
        cfg.documents = default.documents
        assert cfg == default


def test_validate_refuses_bad_values_before_loading_anything(shakespeare_path):
    DataConfig().validate()                                   # the default needs no network to validate
    DataConfig(source="text", files=str(shakespeare_path)).validate()
    for bad, match in ((dict(encoding="gpt5"), "data.encoding='gpt5'.*r50k_base"),
                       (dict(source="text", files="/no/such/file.txt"), "/no/such/file.txt"),
                       (dict(val_fraction=0.6, test_fraction=0.5), "leaves nothing for train"),
                       (dict(documents="paragraph"), "source=text")):
        with pytest.raises((DataError, FileNotFoundError), match=match):
            DataConfig(**bad).validate()


def test_presets_that_need_a_value_say_so():
    with pytest.raises(DataError, match=r"needs data.files: a path \(data.files=PATH\)"):
        prepare_data(D.load_config("text"))
    with pytest.raises(DataError, match="needs data.path"):
        prepare_data(D.load_config("hub"))


def test_cli_prepares_and_prints_info(shakespeare_path, shakespeare):
    proc, _ = _run_cli(["text", f"data.files={shakespeare_path}", "name=shakespeare", "num_threads=1"], subprocess_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    info = json.loads(proc.stdout)
    assert info["fingerprint"] == shakespeare.fingerprint and info["built_now"] == []
    assert info["n_tokens"] == {s: shakespeare.n_tokens(s) for s in ("train", "val", "test")}
