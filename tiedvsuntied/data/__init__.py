"""Data: a corpus (Hugging Face ``datasets`` or local text files) -> tiktoken -> cached token
arrays -> batches. Tied and untied runs must see the same tokens in the same order:

* ``prepare_data(cfg)`` tokenizes each split ONCE into a cache shared by all runs of a sweep (a
  file lock per corpus; temp name, fsync, rename; metadata last) and returns a :class:`Corpus`
  whose splits are read-only memmaps, all opened before it returns.
* ``tiedvsuntied.data.batches`` turns the token arrays into batches.

An end-of-text token separates DOCUMENTS (``DataConfig.documents``), never lines; each document
is tokenized whole. See docs/data.md.
"""

from __future__ import annotations

import codecs
import hashlib
import itertools
import json
import os
import re
import sys
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from enum import Enum
from functools import cache, lru_cache
from pathlib import Path
from typing import Any, Optional

import numpy as np
import tiktoken

from tiedvsuntied.results import atomic_write

# torch is imported where batches are made, so that preparing data (CLI, sweep workers) stays light.

#: Bump when the on-disk format or the tokenization procedure changes: old entries are ignored.
FORMAT_VERSION = 2
SPLITS = ("train", "val", "test")
#: Test hook: seconds to sleep after a split's tokens are written to their temp name, before
#: fsync and rename, so a test can SIGKILL a build at the worst moment. Never set it in real runs.
DEBUG_SLEEP_ENV = "TIEDVSUNTIED_DATA_DEBUG_SLEEP"
_BATCH_CHARS = 1 << 22  # characters of documents tokenized, counted and written at once (memory)
_RUN_CHARS = 1 << 16  # characters of documents one thread takes at a time


class DataError(ValueError):
    """A data configuration or input problem; one line naming the key/file and valid values."""


class DataUnavailableError(RuntimeError):
    """A corpus or tokenizer file could not be fetched (no network) and is not cached locally."""


def _one_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {' '.join(str(e).split())}"


class Source(str, Enum):
    hub = "hub"  # datasets.load_dataset(path, config, revision=...)
    text = "text"  # local UTF-8 text files


class Documents(str, Enum):
    auto = "auto"
    wikitext = "wikitext"
    row = "row"
    paragraph = "paragraph"
    file = "file"


class Vocab(str, Enum):
    full = "full"  # every token of the encoding (GPT-2: 50,257; a small corpus uses a fraction)
    seen = "seen"  # only the tokens the corpus contains, renumbered: a closed vocabulary, as word-level LMs had


@dataclass
class DataConfig:
    """The ``data`` node of the Hydra schema (conf/data/<name>.yaml); consumed by prepare_data."""

    name: str = "wikitext2"  # label: cache folder name, run names (not in the key)
    source: Source = Source.hub
    path: str = "Salesforce/wikitext"  # hub: dataset repo id (or a local dataset folder)
    config: str | None = "wikitext-2-raw-v1"
    revision: str | None = None  # hub: pin a commit/tag for reproducibility
    text_column: str = "text"  # hub: column holding the text
    files: Any = None  # text: PATH, [PATHS] or {train: A, validation: B, test: C}
    train_split: str = "train"  # source split names
    val_split: str | None = "validation"  # null (or the default, absent) -> held out of train
    test_split: str | None = "test"
    val_fraction: float = 0.05  # held-out val: this fraction of train (contiguous tail)
    test_fraction: float = 0.05
    documents: Documents = Documents.auto  # what an end-of-text token separates
    encoding: str = "gpt2"  # a tiktoken encoding name, or "bytes" (built in)
    vocab: Vocab = Vocab.full  # seen: only the corpus's tokens (train, val or test), renumbered
    cache_dir: str | None = None  # None -> $TIEDVSUNTIED_CACHE or ~/.cache/tiedvsuntied
    num_threads: int = 0  # tokenizer threads; 0 = all available cores


# ------------------------------------------------------------------------------ checks


def encoding_names() -> list[str]:
    return sorted([*tiktoken.list_encoding_names(), "bytes"])


def _plain(obj: Any) -> Any:
    """OmegaConf containers (Hydra hands us DictConfig/ListConfig) -> plain python."""
    from omegaconf import OmegaConf

    return OmegaConf.to_container(obj, resolve=True) if OmegaConf.is_config(obj) else obj


_SPLIT_KEYS = {
    "train": "train",
    "validation": "val",
    "valid": "val",
    "val": "val",
    "dev": "val",
    "test": "test",
}


def _text_files(cfg: DataConfig) -> dict[str, list[Path]]:
    """data.files -> {"train": [paths], optionally "val"/"test": [paths]}, resolved against the cwd."""
    files = _plain(cfg.files)
    if not files:
        raise DataError(
            "data.source=text needs data.files: data.files=PATH or "
            "data.files={train: A, validation: B, test: C}"
        )
    if not isinstance(files, dict):
        files = {"train": files}
    names = {**_SPLIT_KEYS, cfg.train_split: "train"}
    names.update({n: s for n, s in ((cfg.val_split, "val"), (cfg.test_split, "test")) if n})
    out: dict[str, list[Path]] = {}
    for key, value in files.items():
        split = names.get(str(key))
        if split is None or split in out:
            raise DataError(
                f"data.files has an unknown or repeated split key {key!r}; valid keys: "
                f"{sorted(names)}"
            )
        paths = [value] if isinstance(value, (str, os.PathLike)) else list(value)
        out[split] = [Path(os.path.abspath(os.path.expanduser(str(p)))) for p in paths]
    if "train" not in out or not all(out.values()):
        raise DataError(f"data.files={files!r} needs a train file and at least one file per split")
    return out


def _check_text_file(path: Path) -> None:
    """Exists, readable, non-empty UTF-8 text: reads only the first 64 KiB."""
    try:
        with open(path, "rb") as f:
            head = f.read(1 << 16)
        # a NUL byte (-> \xff, never valid UTF-8) or invalid UTF-8 means binary
        codecs.getincrementaldecoder("utf-8")().decode(head.replace(b"\0", b"\xff"), final=False)
    except OSError as e:
        raise DataError(
            f"data.files: cannot read {path} ({e.strerror}); relative paths are "
            f"resolved against {os.getcwd()}"
        ) from None
    except UnicodeDecodeError:
        raise DataError(
            f"data.files: {path} is not UTF-8 text (binary?); give text files"
        ) from None
    if not head:
        raise DataError(f"data.files: {path} is empty")


def check_data(cfg: DataConfig) -> None:
    """Fast checks before any work (no network, no tokenization): enum values, relations between
    fields, the encoding name, and that local text files exist, are readable and are text."""
    for key in ("val_fraction", "test_fraction"):
        if not 0.0 <= getattr(cfg, key) < 1.0:
            raise DataError(f"data.{key}={getattr(cfg, key)!r} must be in [0, 1)")
    if cfg.val_fraction + cfg.test_fraction >= 1.0:
        raise DataError(
            "data.val_fraction + data.test_fraction leaves nothing for train; keep it < 1"
        )
    if cfg.encoding not in encoding_names():
        raise DataError(f"data.encoding={cfg.encoding!r} is not valid; valid: {encoding_names()}")
    if cfg.source == Source.hub:
        if not cfg.path:
            raise DataError(
                "data.source=hub needs data.path (a Hub dataset id such as Salesforce/wikitext)"
            )
        if cfg.documents == Documents.paragraph:
            raise DataError(
                "data.documents=paragraph needs data.source=text; for hub use one of "
                "['auto', 'wikitext', 'row', 'file']"
            )
        return
    files = _text_files(cfg)
    for split in ("val", "test"):
        if split not in files and getattr(cfg, f"{split}_fraction") <= 0:
            raise DataError(
                f"data.{split}_fraction must be > 0 to hold {split} out of train "
                f"(data.files has no {split} file)"
            )
    for path in (p for paths in files.values() for p in paths):
        _check_text_file(path)


def _documents_mode(cfg: DataConfig) -> Documents:
    if cfg.documents != Documents.auto:
        return Documents(cfg.documents)
    if cfg.source == Source.text:
        return Documents.file
    return Documents.wikitext if "wikitext" in cfg.path.lower() else Documents.row


# ------------------------------------------------------------------------------ tokenizer


def _bytes_encoding() -> tiktoken.Encoding:
    """256 single-byte tokens + <|endoftext|> (V = 257): round-trips any UTF-8, needs no download."""
    return tiktoken.Encoding(
        name="bytes",
        pat_str=r"""\s+(?!\S)|\s+|\S+""",
        mergeable_ranks={bytes([i]): i for i in range(256)},
        special_tokens={"<|endoftext|>": 256},
    )


@cache
def load_encoding(name: str) -> tiktoken.Encoding:
    """The tokenizer: "bytes" is built here; others via tiktoken (its cache: TIKTOKEN_CACHE_DIR)."""
    if name == "bytes":
        return _bytes_encoding()
    if name not in encoding_names():
        raise DataError(f"data.encoding={name!r} is not valid; valid: {encoding_names()}")
    try:
        return tiktoken.get_encoding(name)
    except Exception as e:  # requests' errors: no network and not in tiktoken's cache
        where = os.environ.get("TIKTOKEN_CACHE_DIR", "<unset>")
        raise DataUnavailableError(
            f"could not load the tiktoken encoding {name!r} (TIKTOKEN_CACHE_DIR={where}): {_one_line(e)}. Offline, "
            "point TIKTOKEN_CACHE_DIR at a folder holding its files, e.g. ../shared/data/tiktoken, "
            "or use data.encoding=bytes"
        ) from e


def gpt2_available() -> bool:
    """Whether the GPT-2 encoding can be loaded here (cached, or downloadable)."""
    try:
        load_encoding("gpt2")
        return True
    except DataUnavailableError:
        return False


# ------------------------------------------------------------------------------ sources -> rows


@dataclass
class _Stream:
    """Rows of one split's source(s). A new document starts at each index in `starts`
    (file boundaries); the rows joined are the source text exactly."""

    rows: list[str]
    starts: set[int]
    label: str


def _text_stream(paths: list[Path], docs: Documents) -> _Stream:
    rows, starts = [], set()
    for p in paths:
        text = p.read_text(encoding="utf-8")
        starts.add(len(rows))
        # paragraph documents are the blocks between blank lines, without those lines
        rows += (
            [b for b in re.split(r"\n(?:[ \t]*\n)+", text) if b.strip()]
            if docs == Documents.paragraph
            else text.splitlines(keepends=True)
        )
    return _Stream(rows, starts, ", ".join(map(str, paths)))


def _hub_streams(cfg: DataConfig, docs: Documents) -> dict[str, _Stream]:
    """{split: stream} of the splits the dataset has (train at least)."""
    import datasets

    what = f"{cfg.path!r} config {cfg.config!r} revision {cfg.revision!r}"
    try:
        dd = datasets.load_dataset(cfg.path, cfg.config, revision=cfg.revision)
    except (ConnectionError, OSError, datasets.exceptions.DatasetNotFoundError) as e:
        raise DataUnavailableError(
            f"could not load {what}: {_one_line(e)}. Offline, it must be in the datasets cache "
            "(HF_DATASETS_CACHE); or use local text: data=text data.files=PATH"
        ) from e
    out = {}
    for split, name, default in (
        ("train", cfg.train_split, None),
        ("val", cfg.val_split, "validation"),
        ("test", cfg.test_split, "test"),
    ):
        if name and name not in dd and name != default:
            raise DataError(
                f"data.{split}_split={name!r} is not a split of {cfg.path!r}; available: "
                f"{list(dd)}" + ("" if split == "train" else " (or null to hold it out)")
            )
        if name not in dd:
            continue
        if cfg.text_column not in dd[name].column_names:
            raise DataError(
                f"data.text_column={cfg.text_column!r} is not a column of {cfg.path!r}; "
                f"columns: {dd[name].column_names}"
            )
        rows = [r or "" for r in dd[name][cfg.text_column]]
        if not all(isinstance(r, str) for r in rows[:1000]):
            raise DataError(
                f"data.text_column={cfg.text_column!r} of {cfg.path!r} does not hold text; "
                f"columns: {dd[name].column_names}"
            )
        if docs != Documents.row:  # Hub text rows are lines without their line break
            rows = [r if r.endswith("\n") else r + "\n" for r in rows]
        out[split] = _Stream(rows, {0}, f"{cfg.path}:{name}")
    return out


def _split_streams(cfg: DataConfig, docs: Documents) -> dict[str, tuple[_Stream, tuple[int, int]]]:
    """{split: (stream, row range)}: a split the source lacks is a contiguous tail of train, cut at
    a row boundary so that it holds its fraction of train's characters."""
    if cfg.source == Source.text:
        streams = {s: _text_stream(p, docs) for s, p in _text_files(cfg).items()}
    else:
        streams = _hub_streams(cfg, docs)
    train = streams["train"]
    held = [(s, getattr(cfg, f"{s}_fraction")) for s in ("val", "test") if s not in streams]
    ends = np.cumsum([len(r) for r in train.rows])  # character offset after each row
    cuts, acc = [0], 1.0 - sum(f for _, f in held)
    for _, frac in held:  # train | val | test: first row at/after acc
        cuts.append(int(np.searchsorted(ends, acc * ends[-1])) + 1)
        acc += frac
    cuts.append(len(train.rows))
    out = {s: (st, (0, len(st.rows))) for s, st in streams.items()}
    for k, s in enumerate(["train", *(s for s, _ in held)]):
        if cuts[k + 1] <= cuts[k]:
            raise DataError(
                f"split {s!r} cut from {train.label} would be empty; change "
                f"data.val_fraction / data.test_fraction"
            )
        out[s] = (train, (cuts[k], cuts[k + 1]))
    return out


_TITLE = re.compile(r"^ = [^=](.*[^=])? = \n?$")


def _iter_documents(stream: _Stream, lo: int, hi: int, docs: Documents) -> Iterator[str]:
    """The documents in rows [lo, hi); whitespace-only documents are dropped."""
    rows, cur = stream.rows, []

    def blank(i: int) -> bool:
        return not (lo <= i < hi) or not rows[i].strip()

    for i in range(lo, hi + 1):  # i == hi ends the last document
        if cur and (
            i == hi
            or i in stream.starts
            or docs in (Documents.row, Documents.paragraph)
            or (
                docs == Documents.wikitext
                and _TITLE.match(rows[i]) is not None
                and blank(i - 1)
                and blank(i + 1)
            )
        ):  # ' = 1 ... k = ' formulas: no titles
            doc, cur = "".join(cur), []
            if not doc.isspace():
                yield doc
        if i < hi:
            cur.append(rows[i])


# ------------------------------------------------------------------------------ cache


def _identity(cfg: DataConfig, enc: tiktoken.Encoding, docs: Documents) -> dict:
    """What the cache key hashes; never touches the network. Local files are identified by their
    content (SHA-256), Hub datasets by their config (pin data.revision to see upstream changes)."""
    ident = {
        "format_version": FORMAT_VERSION,
        "encoding": enc.name,
        "n_vocab": enc.n_vocab,
        "documents": docs.value,
        "source": Source(cfg.source).value,
        "fractions": [cfg.val_fraction, cfg.test_fraction],
    }
    if cfg.source == Source.text:

        def sha(p: Path) -> str:
            with open(p, "rb") as f:
                return hashlib.file_digest(f, "sha256").hexdigest()

        return {**ident, "files": {s: [sha(p) for p in ps] for s, ps in _text_files(cfg).items()}}
    ident.update(
        path=cfg.path,
        config=cfg.config,
        revision=cfg.revision,
        text_column=cfg.text_column,
        splits=[cfg.train_split, cfg.val_split, cfg.test_split],
    )
    local = Path(cfg.path).expanduser()
    if local.is_dir():  # a local dataset folder: identify it by its files
        ident["path"] = str(local.resolve())
        ident["local_files"] = sorted(
            (str(p.relative_to(local)), p.stat().st_size, p.stat().st_mtime_ns)
            for p in local.rglob("*")
            if p.is_file()
        )
    return ident


def _read_entry(corpus_dir: Path, split: str, key: str) -> dict | None:
    """Metadata of a complete split entry, else None. The metadata is written last, so a file
    without it (a killed build) is never trusted; a size mismatch is not either."""
    try:
        meta = json.loads((corpus_dir / f"{split}.json").read_text())
        size = (corpus_dir / f"{split}.bin").stat().st_size
        ok = (
            meta["key"] == key
            and meta["n_tokens"] > 0
            and (corpus_dir / f"{split}.freq.npy").is_file()
            and size == meta["n_tokens"] * np.dtype(meta["dtype"]).itemsize
        )
        return meta if ok else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _build_split(
    corpus_dir: Path,
    split: str,
    documents: Iterator[str],
    enc: tiktoken.Encoding,
    n_threads: int,
    meta: dict,
) -> dict:
    """Tokenize documents (whole, in batches, on n_threads threads) into <split>.bin, an EOT
    between documents; then <split>.freq.npy; then <split>.json."""
    dtype = np.dtype(np.uint16 if enc.n_vocab <= 65536 else np.uint32)
    freq = np.zeros(enc.n_vocab, dtype=np.int64)
    counts = {"n_tokens": 0, "n_documents": 0}
    t0 = time.perf_counter()
    pool = ThreadPoolExecutor(n_threads)

    def encode_run(docs: list[str]) -> list[list[int]]:
        return [enc.encode_ordinary(d) for d in docs]

    def encode_batch(f, batch: list[str]) -> None:
        # encode_ordinary_batch hands each document to a thread pool: ~100 us each, more than
        # the encoding of a short row. Hand the pool runs of documents instead (it drops the GIL).
        runs, chars = [[]], 0
        for doc in batch:  # runs of documents: enough to share a batch between threads
            if chars >= _RUN_CHARS:
                runs.append([])
                chars = 0
            runs[-1].append(doc)
            chars += len(doc)
        out: list[int] = []  # one array, count and write per batch: cheap for many small documents
        for toks in itertools.chain.from_iterable(pool.map(encode_run, runs)):
            out += [enc.eot_token, *toks] if counts["n_documents"] else toks
            counts["n_documents"] += 1
        arr = np.array(out, dtype=dtype)
        freq[:] += np.bincount(arr, minlength=enc.n_vocab)
        f.write(arr.tobytes())
        counts["n_tokens"] += len(arr)

    def write_tokens(f) -> None:
        batch, chars = [], 0
        for doc in documents:
            batch.append(doc)
            chars += len(doc)
            if chars >= _BATCH_CHARS:
                encode_batch(f, batch)
                batch, chars = [], 0
        encode_batch(f, batch)
        time.sleep(float(os.environ.get(DEBUG_SLEEP_ENV) or 0))  # a test kills the build here
        if counts["n_tokens"] == 0:
            raise DataError(
                f"split {split!r} of {meta['source']} is empty (no text after tokenization)"
            )

    with pool:
        atomic_write(corpus_dir / f"{split}.bin", write_tokens)
    atomic_write(corpus_dir / f"{split}.freq.npy", lambda f: np.save(f, freq))
    seconds = time.perf_counter() - t0
    meta = {
        **meta,
        **counts,
        "split": split,
        "dtype": dtype.name,
        "seconds": round(seconds, 3),
        "tokens_per_s": round(counts["n_tokens"] / max(seconds, 1e-9)),
        "num_threads": n_threads,
    }
    atomic_write(corpus_dir / f"{split}.json", json.dumps(meta, indent=1))
    return meta


def _build(
    cfg: DataConfig, corpus_dir: Path, need: list[str], enc, docs: Documents, key: str
) -> dict:
    n_threads = cfg.num_threads if cfg.num_threads > 0 else len(os.sched_getaffinity(0))
    source = (
        f"text:{_plain(cfg.files)}"
        if cfg.source == Source.text
        else f"hub:{cfg.path}/{cfg.config}@{cfg.revision}"
    )
    metas = {}
    for split, (stream, (lo, hi)) in _split_streams(cfg, docs).items():
        if split in need:
            ranges = {
                "row_range": [lo, hi],
                "char_range": [sum(map(len, stream.rows[:lo])), sum(map(len, stream.rows[:hi]))],
            }
            meta = {
                "key": key,
                "name": cfg.name,
                "source": source,
                "documents": docs.value,
                "encoding": enc.name,
                **ranges,
            }
            metas[split] = _build_split(
                corpus_dir, split, _iter_documents(stream, lo, hi, docs), enc, n_threads, meta
            )
    return metas


def _log_build(corpus_dir: Path, **record) -> None:
    """builds.log: one JSON line per build started / finished (a start without a done = killed)."""
    with open(corpus_dir / "builds.log", "a") as f:
        f.write(json.dumps({**record, "pid": os.getpid(), "time": time.time()}) + "\n")


def resolve_cache_dir(cfg: DataConfig) -> Path:
    default = os.environ.get("TIEDVSUNTIED_CACHE") or "~/.cache/tiedvsuntied"
    return Path(cfg.cache_dir or default).expanduser().resolve()


class Corpus:
    """A tokenized corpus: train/val/test token arrays, all opened (read-only memmaps) up front."""

    def __init__(
        self,
        cfg: DataConfig,
        enc: tiktoken.Encoding,
        corpus_dir: Path,
        key: str,
        metas: dict[str, dict],
        built: list[str],
    ):
        self.cfg, self.encoding, self.dir, self.key, self.built = cfg, enc, corpus_dir, key, built
        self._meta = metas
        # Open everything now: an open mapping survives an unlink of the cache (POSIX).
        self._tokens = {
            s: np.memmap(
                corpus_dir / f"{s}.bin",
                dtype=np.dtype(m["dtype"]),
                mode="r",
                shape=(m["n_tokens"],),
            )
            for s, m in metas.items()
        }
        self._freq = {s: np.load(corpus_dir / f"{s}.freq.npy").astype(np.int64) for s in SPLITS}
        self._new_id = None
        if (
            cfg.vocab == Vocab.seen
        ):  # renumbered copies in memory; the cache keeps the encoding's ids
            seen = np.flatnonzero(sum(self._freq.values()))
            self._new_id = np.zeros(
                enc.n_vocab, dtype=np.uint16 if len(seen) <= 1 << 16 else np.int32
            )
            self._new_id[seen] = np.arange(len(seen))
            self._tokens = {s: self._new_id[t] for s, t in self._tokens.items()}
            self._raw_freq = self._freq
            self._freq = {s: f[seen] for s, f in self._freq.items()}

    vocab_size = property(lambda self: len(self._freq["train"]))

    @property
    def eot_token(self) -> int | None:
        """The end-of-text id (vocab=seen: None if the corpus has none, e.g. one document)."""
        eot = int(self.encoding.eot_token)
        if self._new_id is None:
            return eot
        return int(self._new_id[eot]) if sum(f[eot] for f in self._raw_freq.values()) else None

    fingerprint = property(
        lambda self: (
            self.key[:12]
            if self._new_id is None
            else hashlib.sha256(f"{self.key}:seen".encode()).hexdigest()[:12]
        ),
        doc="Short id of data + split + tokenizer (+ vocabulary).",
    )

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

    def token_freq(self, split: str = "train") -> np.ndarray:
        return self._freq[self._check(split)]

    def info(self) -> dict:
        m = self._meta
        return {
            "name": self.cfg.name,
            "fingerprint": self.fingerprint,
            "encoding": self.encoding.name,
            "vocab": Vocab(self.cfg.vocab).value,
            "vocab_size": self.vocab_size,
            "eot_token": self.eot_token,
            "documents": m["train"]["documents"],
            "source": m["train"]["source"],
            "cache_dir": str(self.dir),
            "n_tokens": {s: self.n_tokens(s) for s in SPLITS},
            **{
                k: {s: m[s][k] for s in SPLITS}
                for k in ("n_documents", "tokens_per_s", "num_threads")
            },
            "built_now": self.built,
        }


def prepare_data(cfg: DataConfig) -> Corpus:
    """Tokenize the corpus of ``cfg`` into the cache (once, under a lock) and return it. Complete
    entries are used without loading anything else; one process builds, the others wait."""
    from filelock import FileLock

    check_data(cfg)
    enc = load_encoding(cfg.encoding)
    docs = _documents_mode(cfg)
    ident = _identity(cfg, enc, docs)
    key = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", cfg.name).strip("._") or "corpus"
    corpus_dir = resolve_cache_dir(cfg) / "tokens" / f"{name}-{key[:16]}"
    metas = {s: _read_entry(corpus_dir, s, key) for s in SPLITS}
    built: list[str] = []
    if not all(metas.values()):
        corpus_dir.mkdir(parents=True, exist_ok=True)
        with FileLock(corpus_dir / ".lock"):
            metas = {s: _read_entry(corpus_dir, s, key) for s in SPLITS}  # built while we waited?
            built = [s for s in SPLITS if not metas[s]]
            if built:
                for stale in corpus_dir.glob(".*.tmp*"):  # leftovers of killed builds
                    stale.unlink()
                for s in built:  # no metadata may sit beside a file about to be replaced
                    (corpus_dir / f"{s}.json").unlink(missing_ok=True)
                (corpus_dir / "identity.json").write_text(json.dumps(ident, indent=1))
                _log_build(corpus_dir, event="start", splits=built)
                metas.update(_build(cfg, corpus_dir, built, enc, docs, key))
                _log_build(corpus_dir, event="done", splits=built)
    return Corpus(cfg, enc, corpus_dir, key, metas, built)


# ------------------------------------------------------------------------------ CLI

CONF_DATA_DIR = Path(__file__).resolve().parents[2] / "conf" / "data"


def load_config(preset: str | None = None, overrides: Sequence[str] = ()) -> DataConfig:
    """conf/data/<preset>.yaml + key=value overrides (Hydra's data.<key>=value, 'data.' optional)."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    path = CONF_DATA_DIR / f"{preset}.yaml"
    if preset and not path.is_file():
        raise DataError(
            f"no data preset {preset!r}; valid: {sorted(p.stem for p in CONF_DATA_DIR.glob('*.yaml'))}"
        )
    try:
        conf = OmegaConf.merge(
            OmegaConf.structured(DataConfig),
            OmegaConf.load(path) if preset else {},
            OmegaConf.from_dotlist([o.removeprefix("data.") for o in overrides]),
        )
        return OmegaConf.to_object(conf)
    except OmegaConfBaseException as e:
        raise DataError(f"data.{getattr(e, 'full_key', '?')}: {str(e).splitlines()[0]}") from None


def main(argv: Sequence[str] | None = None) -> int:
    import argparse
    import tempfile

    p = argparse.ArgumentParser(
        prog="python -m tiedvsuntied.data",
        description="Prepare (tokenize + cache) a corpus; print its info as JSON.",
    )
    p.add_argument("preset", nargs="?", default="wikitext2", help="conf/data/<preset>.yaml")
    p.add_argument("overrides", nargs="*", help="key=value overrides of DataConfig fields")
    p.add_argument(
        "--fresh",
        action="store_true",
        help="tokenize into a temporary cache (deleted afterwards): measures throughput",
    )
    args = p.parse_args(argv)
    if "=" in args.preset:  # overrides only: the default preset
        args.overrides, args.preset = [args.preset, *args.overrides], "wikitext2"
    try:
        cfg = load_config(args.preset, args.overrides)
        with tempfile.TemporaryDirectory(prefix="tiedvsuntied-fresh-") as tmp:
            cfg.cache_dir = tmp if args.fresh else cfg.cache_dir
            t = time.perf_counter()
            info = prepare_data(cfg).info()
            wall = time.perf_counter() - t
    except (DataError, DataUnavailableError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    n = sum(info["n_tokens"][s] for s in info["built_now"])
    print(
        f"tokenized {n:,} tokens ({', '.join(info['built_now']) or 'none: cached'}) of {cfg.name} in "
        f"{wall:.2f} s wall, loading included: {n / wall / 1e6:.2f}M tokens/s; "
        f"{info['num_threads']['train']} threads, {os.cpu_count()} cores",
        file=sys.stderr,
    )
    print(json.dumps(info, indent=1))
    return 0
