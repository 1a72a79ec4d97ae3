"""The token cache: a corpus tokenized once per machine into ``<cache>/tokens/<name>-<key16>/``
(docs/data.md, "Cache"), shared by every run of a sweep as read-only memmaps. The key and the
fingerprint derived from it are part of every run's identity: never change what enters them.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tiktoken

from tiedvsuntied.data import bpe
from tiedvsuntied.data.config import DataConfig, DataError, Documents, Source, Split, Vocab
from tiedvsuntied.data.sources import (
    check_available,
    check_data,
    iter_documents,
    split_streams,
    text_files,
)
from tiedvsuntied.results.io import atomic_write

#: Bump when the on-disk format or the tokenization procedure changes: old entries are ignored.
FORMAT_VERSION = 2
SPLITS = ("train", "val", "test")
_BATCH_CHARS = 1 << 22  # characters of documents tokenized, counted and written at once (memory)
_RUN_CHARS = 1 << 16  # characters of documents one thread takes at a time


def _sha256_file(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def corpus_identity(cfg: DataConfig, encoding: tiktoken.Encoding | None) -> dict:
    """What the cache key hashes; never touches the network. Local files are identified by their
    content (SHA-256), Hub datasets by their config (pin data.revision to see upstream changes).
    A trained vocabulary (``encoding`` None) is named by its procedure and size: the training
    split's files, which shaped it, are in the identity already."""
    trained = cfg.encoding == "bpe"
    identity = {
        "format_version": FORMAT_VERSION,
        "encoding": cfg.encoding if trained else encoding.name,
        "n_vocab": cfg.vocab_size if trained else encoding.n_vocab,
        **({"bpe_version": bpe.BPE_VERSION} if trained else {}),
        "documents": cfg.documents_mode().value,
        "source": Source(cfg.source).value,
        "fractions": [cfg.val_fraction, cfg.test_fraction],
    }
    if cfg.source == Source.text:
        files = {s: [_sha256_file(p) for p in ps] for s, ps in text_files(cfg).items()}
        if Split(cfg.split) == Split.document:  # which files hold which split: in `files`
            identity["split"] = Split.document.value
        return {**identity, "files": files}
    identity |= {name: getattr(cfg, name) for name in ("path", "config", "revision", "text_column")}
    identity["splits"] = [cfg.train_split, cfg.val_split, cfg.test_split]
    local = Path(cfg.path).expanduser()
    if local.is_dir():  # a local dataset folder: identify it by its files
        identity["path"] = str(local.resolve())
        identity["local_files"] = sorted(
            (str(p.relative_to(local)), p.stat().st_size, p.stat().st_mtime_ns)
            for p in local.rglob("*")
            if p.is_file()
        )
    return identity


def corpus_key(identity: dict) -> str:
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


def fingerprint(key: str, vocab: Vocab) -> str:
    """The corpus's id in run identities: its key's first 12 digits; with ``vocab=seen`` (another
    corpus to a model) those of another hash."""
    if Vocab(vocab) != Vocab.seen:
        return key[:12]
    return hashlib.sha256(f"{key}:seen".encode()).hexdigest()[:12]


def corpus_fingerprint(cfg: DataConfig) -> str:
    """The fingerprint a run on ``cfg`` will record, without tokenizing (a sweep's plan)."""
    key = corpus_key(corpus_identity(cfg, check_available(cfg, need_source=False)))
    return fingerprint(key, cfg.vocab)


def corpus_dir(cfg: DataConfig, key: str) -> Path:
    default = os.environ.get("TIEDVSUNTIED_CACHE") or "~/.cache/tiedvsuntied"
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", cfg.name).strip("._") or "corpus"
    return Path(cfg.cache_dir or default).expanduser().resolve() / "tokens" / f"{name}-{key[:16]}"


def read_entry(folder: Path, split: str, key: str) -> dict | None:
    """Metadata of a complete split entry, else None. The metadata is written last, so a file
    without it (a killed build) or of the wrong size is never trusted."""
    try:
        meta = json.loads((folder / f"{split}.json").read_text())
        size = (folder / f"{split}.bin").stat().st_size
        ok = (
            meta["key"] == key
            and meta["n_tokens"] > 0
            and (folder / f"{split}.freq.npy").is_file()
            and size == meta["n_tokens"] * np.dtype(meta["dtype"]).itemsize
        )
        return meta if ok else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _chunks(items: Iterable[str], max_chars: int) -> Iterator[list[str]]:
    """Consecutive strings in lists that end once they hold max_chars characters."""
    chunk, chars = [], 0
    for item in items:
        chunk.append(item)
        chars += len(item)
        if chars >= max_chars:
            yield chunk
            chunk, chars = [], 0
    if chunk:
        yield chunk


def _write_tokens(f, documents: Iterable[str], enc, threads: int, freq, dtype) -> tuple[int, list]:
    """Tokenize documents into f, an end-of-text token between them; count tokens into freq.
    Returns (tokens written, the offset of each document's first token). Threads take runs of
    characters: tiktoken drops the GIL while it encodes, and a run amortizes the hand-off
    (``encode_ordinary_batch`` hands over each document, ~100 us, more than encoding a short
    row); measured faster than ``Dataset.map(num_proc=...)`` (docs/data.md, "Tokenizer")."""
    n_tokens, starts = 0, []
    with ThreadPoolExecutor(threads) as pool:
        for batch in _chunks(documents, _BATCH_CHARS):
            runs = pool.map(
                lambda docs: [enc.encode_ordinary(doc) for doc in docs], _chunks(batch, _RUN_CHARS)
            )
            ids: list[int] = []
            for tokens in itertools.chain.from_iterable(runs):
                ids += [enc.eot_token] if starts else []
                starts.append(n_tokens + len(ids))
                ids += tokens
            array = np.array(ids, dtype=dtype)
            freq += np.bincount(array, minlength=enc.n_vocab)
            f.write(array.tobytes())
            n_tokens += len(array)
    return n_tokens, starts


def _build_split(folder: Path, split: str, documents: Iterator[str], enc, num_threads, meta: dict):
    """Tokenize documents into <split>.bin; then <split>.freq.npy; then <split>.json."""
    freq = np.zeros(enc.n_vocab, dtype=np.int64)
    dtype = np.dtype(np.uint16 if enc.n_vocab <= 65536 else np.uint32)
    started = time.perf_counter()

    def write_tokens(f) -> None:
        meta["n_tokens"], starts = _write_tokens(f, documents, enc, num_threads, freq, dtype)
        meta["n_documents"] = len(starts)
        if split != "train":  # held-out documents: per-document losses need their offsets
            atomic_write(folder / f"{split}.docs.npy", lambda g: np.save(g, np.array(starts)))
        if meta["n_tokens"] == 0:
            raise DataError(f"split {split!r} of {meta['source']} is empty after tokenization")

    atomic_write(folder / f"{split}.bin", write_tokens)
    atomic_write(folder / f"{split}.freq.npy", lambda f: np.save(f, freq))
    seconds = time.perf_counter() - started
    meta.update(split=split, dtype=dtype.name, seconds=round(seconds, 3))
    meta.update(tokens_per_s=round(meta["n_tokens"] / max(seconds, 1e-9)), num_threads=num_threads)
    atomic_write(folder / f"{split}.json", json.dumps(meta, indent=1))
    return meta


def _build(cfg: DataConfig, folder: Path, need: list[str], key: str, enc) -> dict:
    num_threads = cfg.num_threads if cfg.num_threads > 0 else len(os.sched_getaffinity(0))
    hub = f"hub:{cfg.path}/{cfg.config}@{cfg.revision}"
    source = f"text:{cfg.files}" if cfg.source == Source.text else hub
    docs = cfg.documents_mode()
    common = {"key": key, "name": cfg.name, "source": source, "documents": docs.value}
    # where a document is a file of its own split, the held-out documents are named by it
    files = text_files(cfg) if cfg.source == Source.text and docs == Documents.file else {}
    metas = {}
    for split, (stream, (lo, hi)) in split_streams(cfg).items():
        if split not in need:
            continue
        chars = [sum(map(len, stream.rows[:lo])), sum(map(len, stream.rows[:hi]))]
        meta = {**common, "encoding": cfg.encoding, "row_range": [lo, hi], "char_range": chars}
        if split in files:
            meta["files"] = [p.name for p in files[split]]
        documents = iter_documents(stream, lo, hi, docs)
        metas[split] = _build_split(folder, split, documents, enc, num_threads, meta)
    return metas


def _log_build(folder: Path, **record) -> None:
    """builds.log: one JSON line per build started / finished (a start without a done = killed)."""
    with open(folder / "builds.log", "a") as f:
        f.write(json.dumps({**record, "pid": os.getpid(), "time": time.time()}) + "\n")


def _cached(cfg: DataConfig) -> tuple:
    """(encoding, identity, key, folder, {split: its entry's metadata or None}) of ``cfg``'s
    token cache, after the fast checks; the encoding is None for a vocabulary not trained yet."""
    check_data(cfg)
    enc = check_available(cfg, need_source=False)
    identity = corpus_identity(cfg, enc)
    key = corpus_key(identity)
    folder = corpus_dir(cfg, key)
    metas = {s: read_entry(folder, s, key) for s in SPLITS}
    enc = enc or bpe.load(folder, cfg.vocab_size)  # a trained vocabulary: in the folder
    return enc, identity, key, folder, metas


def check_reachable(cfg: DataConfig) -> None:
    """That ``prepare_data(cfg)`` will find its corpus, within seconds and writing nothing: its
    token cache is complete, or its source can be read (local files; the Hub reachable, or the
    dataset in the datasets cache); else a one-line DataError or DataUnavailableError. Local
    files are read where they are: their checks suffice, without hashing them for the key."""
    if cfg.source == Source.text:
        check_data(cfg)
        check_available(cfg, need_source=False)
        return
    enc, _, _, _, metas = _cached(cfg)
    if not (enc and all(metas.values())):
        check_available(cfg, need_source=True)


def prepare_data(cfg: DataConfig) -> Corpus:
    """Tokenize the corpus of ``cfg`` into the cache (once: one process builds under a lock, the
    others wait) and return it."""
    from filelock import FileLock

    enc, identity, key, folder, metas = _cached(cfg)
    if enc and all(metas.values()):
        return Corpus(cfg, enc, folder, key, metas, built=[])
    check_available(cfg, need_source=True)  # before the lock: a refusal leaves no folder
    folder.mkdir(parents=True, exist_ok=True)
    with FileLock(folder / ".lock"):
        metas = {s: read_entry(folder, s, key) for s in SPLITS}  # built while we waited?
        built = [s for s in SPLITS if not metas[s]]
        if cfg.encoding == "bpe" and not (enc := bpe.load(folder, cfg.vocab_size)):
            built = list(SPLITS)  # tokens of another tokenizer are never kept beside it
            stream, (lo, hi) = split_streams(cfg)["train"]
            train_docs = iter_documents(stream, lo, hi, cfg.documents_mode())
            enc = bpe.train(folder, train_docs, cfg.vocab_size)
        if built:
            for stale in folder.glob(".*.tmp*"):  # leftovers of killed builds
                stale.unlink()
            for s in built:  # no metadata may sit beside a file about to be replaced
                (folder / f"{s}.json").unlink(missing_ok=True)
            (folder / "identity.json").write_text(json.dumps(identity, indent=1))
            _log_build(folder, event="start", splits=built)
            metas.update(_build(cfg, folder, built, key, enc))
            _log_build(folder, event="done", splits=built)
    return Corpus(cfg, enc, folder, key, metas, built)


@dataclass(eq=False)
class Corpus:
    """A tokenized corpus: train/val/test token arrays, all opened (read-only memmaps) up front."""

    cfg: DataConfig
    encoding: tiktoken.Encoding
    dir: Path
    key: str
    _meta: dict[str, dict]
    built: list[str]  # the splits this process tokenized

    def __post_init__(self):
        # Open everything now: an open mapping survives an unlink of the cache (POSIX). Each
        # file's size was checked against its metadata (read_entry), so the shape is its size.
        self._tokens = {
            s: np.memmap(self.dir / f"{s}.bin", m["dtype"], "r") for s, m in self._meta.items()
        }
        self._freq = {s: np.load(self.dir / f"{s}.freq.npy").astype(np.int64) for s in SPLITS}
        #: each token's length in UTF-8 bytes (0: end-of-text, no text): bits per byte
        self.token_bytes = np.array(
            [len(self.encoding.decode_single_token_bytes(i)) for i in range(self.encoding.n_vocab)]
        )
        self.token_bytes[self.encoding.eot_token] = 0
        #: the end-of-text id (vocab=seen: None if the corpus has none, e.g. one document)
        self.eot_token: int | None = int(self.encoding.eot_token)
        if self.cfg.vocab == Vocab.seen:  # renumbered in memory; the cache keeps the encoding's
            seen = np.flatnonzero(sum(self._freq.values()))
            dtype = np.uint16 if len(seen) <= 1 << 16 else np.int32
            new_id = np.zeros(self.encoding.n_vocab, dtype=dtype)
            new_id[seen] = np.arange(len(seen))
            self._tokens = {s: new_id[t] for s, t in self._tokens.items()}
            self._freq = {s: f[seen] for s, f in self._freq.items()}
            self.token_bytes = self.token_bytes[seen]
            self.eot_token = int(new_id[self.eot_token]) if self.eot_token in seen else None
        self.vocab_size = len(self._freq["train"])
        #: short id of data + split + tokenizer (+ vocabulary); part of every run's identity
        self.fingerprint = fingerprint(self.key, self.cfg.vocab)

    def _check(self, split: str) -> str:
        if split not in SPLITS:
            raise DataError(f"unknown split {split!r}; valid splits: {list(SPLITS)}")
        return split

    def tokens(self, split: str) -> np.memmap:
        return self._tokens[self._check(split)]

    def n_tokens(self, split: str) -> int:
        return len(self.tokens(split))

    def meta(self, split: str) -> dict:
        return dict(self._meta[self._check(split)])

    def documents(self, split: str) -> tuple[np.ndarray, list[str]] | None:
        """A held-out split's documents: each one's first token and their names (file names where
        a document is a file, else numbers); None for train and for entries older than offsets."""
        path = self.dir / f"{self._check(split)}.docs.npy"
        if split == "train" or not path.is_file():
            return None
        starts = np.load(path)
        names = self._meta[split].get("files") or []
        if len(names) != len(starts):  # an empty file makes no document
            names = [str(i) for i in range(len(starts))]
        return starts, names

    def token_freq(self, split: str = "train") -> np.ndarray:
        return self._freq[self._check(split)]

    def bytes_per_token(self, split: str = "train") -> float:
        """UTF-8 bytes of text per token of the split (end-of-text tokens count, as no bytes):
        a loss in nats per token over ln 2 times this is bits per byte."""
        return float(self.token_freq(split) @ self.token_bytes / self.n_tokens(split))

    def info(self) -> dict:
        meta = self._meta
        return {
            "name": self.cfg.name,
            "fingerprint": self.fingerprint,
            "encoding": self.encoding.name,
            "vocab": Vocab(self.cfg.vocab).value,
            "vocab_size": self.vocab_size,
            "eot_token": self.eot_token,
            "documents": meta["train"]["documents"],
            "source": meta["train"]["source"],
            "cache_dir": str(self.dir),
            "n_tokens": {s: self.n_tokens(s) for s in SPLITS},
            "bytes_per_token": {s: round(self.bytes_per_token(s), 4) for s in SPLITS},
            **{
                k: {s: meta[s][k] for s in SPLITS}
                for k in ("n_documents", "tokens_per_s", "num_threads")
            },
            "built_now": self.built,
        }
