"""Data: a corpus (Hugging Face ``datasets`` or local text files) -> tiktoken -> cached token
arrays -> batches.

Tied and untied runs must see exactly the same tokens in exactly the same order, so that their
difference is the head alone. Everything here serves that:

* ``prepare_data(cfg)`` tokenizes each split of a corpus ONCE into a cache shared by every run of
  a sweep (locked, written atomically, metadata last) and returns a :class:`Corpus` whose splits
  are read-only ``np.memmap`` arrays. Twelve runs starting together tokenize once; the other
  eleven wait on the lock and reuse the result.
* ``BatchSampler(tokens, block_size, batch_size, seed).get(step, micro)`` is a pure function of
  ``(seed, step, micro)``: same seed -> same batches for tied and untied; a run resumed at step k
  gets the batches an uninterrupted run would have got.
* ``iter_eval_batches`` always yields the same evenly spaced windows, so every evaluation is
  comparable across runs.

Documents. An end-of-text token separates DOCUMENTS, never lines. ``DataConfig.documents`` says
what a document is: ``wikitext`` (a new article at every `` = Title = `` heading row),
``row`` (every dataset row, e.g. one record per document), ``paragraph`` (text files: blocks
separated by blank lines), ``file`` (a text file / a whole split is one document: Tiny
Shakespeare is one play-collection, not 7,000 documents). ``auto`` picks ``file`` for local text,
``wikitext`` for Hub paths containing "wikitext" and ``row`` for other Hub datasets.
Each document is tokenized exactly as ``enc.encode_ordinary(document_text)`` would tokenize it
(long documents are cut into pieces only where GPT-2-style pre-tokenization cannot merge across
the cut, so that threads can share the work without changing a single token).

See docs/data.md for the cache layout, offline use and measured throughput.
"""
from __future__ import annotations

import contextlib
import hashlib
import inspect
import itertools
import json
import logging
import os
import re
import shutil
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import numpy as np
import tiktoken

if TYPE_CHECKING:
    import torch

# torch is imported where batches are made, so that preparing data (CLI, sweep workers) stays light.

log = logging.getLogger(__name__)

#: Bump when the on-disk format or the tokenization procedure changes: old entries are ignored.
FORMAT_VERSION = 1

SPLITS = ("train", "val", "test")
SOURCES = ("hub", "text")
DOCUMENT_MODES = ("auto", "wikitext", "row", "paragraph", "file")

#: Debug/test hook: seconds to sleep after a split's token file is fully written (and fsynced)
#: to its temporary name, before it is renamed into place and its metadata written. Lets a test
#: SIGKILL a preparation at the worst moment. Never set it in real runs.
DEBUG_SLEEP_ENV = "TIEDVSUNTIED_DATA_DEBUG_SLEEP"

HUB_PROBE_TIMEOUT_S = 5.0   # one HEAD request to the Hub endpoint before load_dataset
TIKTOKEN_LOAD_TIMEOUT_S = 30.0

_CHUNK_CHARS = 1 << 16      # target piece size handed to the tokenizer threads
_BATCH_CHARS = 1 << 22      # characters per encode_ordinary_batch call
_PROGRESS_MIN_CHARS = 50_000_000


class DataError(ValueError):
    """A data configuration or input problem; the message names the key/file and valid values."""


class DataUnavailableError(RuntimeError):
    """A corpus or tokenizer file could not be fetched (no network) and is not cached locally."""


# --------------------------------------------------------------------------------------------
# Config
# --------------------------------------------------------------------------------------------

@dataclass
class DataConfig:
    """Which corpus, how it is split and tokenized. Consumed by :func:`prepare_data`.

    Only OmegaConf-compatible types: this is the ``data`` node of the Hydra schema
    (conf/data/<name>.yaml).
    """

    name: str = "wikitext2"                  # label: cache folder name, run names (not in the key)
    source: str = "hub"                      # "hub" (datasets.load_dataset(path, config)) | "text"
    path: str = "Salesforce/wikitext"        # hub: dataset repo id (or a local dataset folder)
    config: Optional[str] = "wikitext-2-raw-v1"  # hub: dataset config name
    revision: Optional[str] = None           # hub: pin a commit/tag for reproducibility
    text_column: str = "text"                # hub: column holding the text
    files: Any = None                        # text: "PATH" or {train: A, validation: B, test: C}
    train_split: str = "train"               # source split names
    val_split: Optional[str] = "validation"  # None (or this default absent) -> held out of train
    test_split: Optional[str] = "test"       # None (or this default absent) -> held out of train
    val_fraction: float = 0.05               # held-out val: this fraction of train (contiguous)
    test_fraction: float = 0.05              # held-out test: this fraction of train (contiguous)
    documents: str = "auto"                  # what an end-of-text token separates, see module doc
    encoding: str = "gpt2"                   # tiktoken encoding name
    cache_dir: Optional[str] = None          # None -> $TIEDVSUNTIED_CACHE or ~/.cache/tiedvsuntied
    num_threads: int = 0                     # tokenizer threads; 0 = all available cores

    def validate(self) -> None:
        """Refuse invalid values before anything is loaded (no network, no tokenization): source,
        documents, fractions, encoding name, and for local text that the files exist."""
        _validate(self)
        names = tiktoken.list_encoding_names()
        if self.encoding not in names:
            raise DataError(f"data.encoding={self.encoding!r} is not a tiktoken encoding; valid: {sorted(names)}")
        if self.source == "text":
            _text_files(self)


def default_cache_dir() -> Path:
    env = os.environ.get("TIEDVSUNTIED_CACHE")
    return Path(env).expanduser() if env else Path("~/.cache/tiedvsuntied").expanduser()


def resolve_cache_dir(cfg: DataConfig) -> Path:
    return Path(cfg.cache_dir).expanduser().resolve() if cfg.cache_dir else default_cache_dir().resolve()


def _n_threads(cfg: DataConfig) -> int:
    if cfg.num_threads and cfg.num_threads > 0:
        return int(cfg.num_threads)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def _validate(cfg: DataConfig) -> None:
    if cfg.source not in SOURCES:
        raise DataError(f"data.source={cfg.source!r} is not a known source; valid: {list(SOURCES)}")
    if cfg.documents not in DOCUMENT_MODES:
        raise DataError(f"data.documents={cfg.documents!r} is not valid; valid: {list(DOCUMENT_MODES)}")
    for key in ("val_fraction", "test_fraction"):
        v = getattr(cfg, key)
        if not (isinstance(v, (int, float)) and 0.0 <= float(v) < 1.0):
            raise DataError(f"data.{key}={v!r} must be a number in [0, 1)")
    if cfg.val_fraction + cfg.test_fraction >= 1.0:
        raise DataError(
            f"data.val_fraction + data.test_fraction = {cfg.val_fraction + cfg.test_fraction} "
            "leaves nothing for train; it must be < 1")
    if cfg.source == "text":
        if cfg.files is None or cfg.files == "" or cfg.files == {}:
            raise DataError("data.source='text' needs data.files: a path (data.files=PATH) or one "
                            "file per split (data.files={train: A, validation: B, test: C})")
    if cfg.source == "hub":
        if not cfg.path:
            raise DataError("data.source='hub' needs data.path (a Hub dataset id such as "
                            "'Salesforce/wikitext')")
        if cfg.documents == "paragraph":
            raise DataError("data.documents='paragraph' applies to local text files (source=text); "
                            "for Hub datasets use one of ['auto', 'wikitext', 'row', 'file']")


def _resolve_documents(cfg: DataConfig) -> str:
    if cfg.documents != "auto":
        return cfg.documents
    if cfg.source == "text":
        return "file"
    return "wikitext" if "wikitext" in cfg.path.lower() else "row"


# --------------------------------------------------------------------------------------------
# Tokenizer (tiktoken), failing fast when its files are neither cached nor reachable
# --------------------------------------------------------------------------------------------

def _tiktoken_cache_dir() -> tuple[Optional[str], str]:
    """(cache dir, which env var chose it) exactly as tiktoken.load.read_file_cached picks it."""
    for var in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR"):
        if var in os.environ:
            return (os.environ[var] or None), var
    return os.path.join(tempfile.gettempdir(), "data-gym-cache"), "default"


def _encoding_urls(name: str) -> list[str]:
    """Best effort: the download URLs an encoding's constructor reads (for error messages)."""
    try:
        from tiktoken import registry
        registry.list_encoding_names()  # populates the constructor table
        src = inspect.getsource(registry.ENCODING_CONSTRUCTORS[name])
        return re.findall(r"https?://[^\s\"']+", src)
    except Exception:  # pragma: no cover - depends on tiktoken internals
        return []


def load_encoding(name: str, timeout_s: float = TIKTOKEN_LOAD_TIMEOUT_S) -> tiktoken.Encoding:
    """``tiktoken.get_encoding(name)`` that fails within seconds, with a helpful message, when the
    encoding's files are not in tiktoken's cache and cannot be downloaded."""
    names = tiktoken.list_encoding_names()
    if name not in names:
        raise DataError(f"data.encoding={name!r} is not a tiktoken encoding; valid: {sorted(names)}")
    cache_dir, chosen_by = _tiktoken_cache_dir()
    urls = _encoding_urls(name)
    missing = [u for u in urls
               if not (cache_dir and os.path.exists(os.path.join(cache_dir, hashlib.sha1(u.encode()).hexdigest())))]
    if missing:
        log.info("tiktoken encoding %r is not cached in %s; trying to download %s", name, cache_dir, missing)

    box: dict[str, Any] = {}

    def _load() -> None:
        try:
            box["enc"] = tiktoken.get_encoding(name)
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
            box["err"] = e

    # requests.get() in tiktoken has no timeout: bound it here (daemon thread, so a hung
    # download cannot keep the process alive).
    t = threading.Thread(target=_load, name=f"tiktoken-load-{name}", daemon=True)
    t.start()
    t.join(timeout_s)
    if "enc" in box:
        return box["enc"]
    cause = box.get("err")
    what = f"timed out after {timeout_s:.0f} s" if cause is None else f"{type(cause).__name__}: {cause}"
    hint_files = "".join(
        f"\n    {u}  ->  {os.path.join(cache_dir or '<cache dir>', hashlib.sha1(u.encode()).hexdigest())}"
        for u in (missing or urls))
    msg = (f"could not load the tiktoken encoding {name!r} ({what}).\n"
           f"  tiktoken cache dir: {cache_dir} (chosen by {chosen_by}); files it needs "
           f"(download URL -> cached file name):{hint_files}\n"
           "  Without network, point TIKTOKEN_CACHE_DIR at a folder holding these files, e.g. "
           "export TIKTOKEN_CACHE_DIR=../shared/data/tiktoken")
    raise DataUnavailableError(msg) from cause


# --------------------------------------------------------------------------------------------
# Sources: everything goes through datasets.load_dataset
# --------------------------------------------------------------------------------------------

def _as_plain(obj: Any) -> Any:
    """OmegaConf containers -> plain python (Hydra hands us DictConfig/ListConfig)."""
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf
        if isinstance(obj, (DictConfig, ListConfig)):
            return OmegaConf.to_container(obj, resolve=True)
    except ImportError:  # pragma: no cover
        pass
    return obj


_SPLIT_ALIASES = {"train": "train", "validation": "val", "valid": "val", "val": "val", "dev": "val",
                  "test": "test"}


def _text_files(cfg: DataConfig) -> dict[str, list[Path]]:
    """data.files -> {"train": [...], optionally "val"/"test": [...]} of resolved, existing,
    non-empty files. Relative paths are relative to the current working directory."""
    files = _as_plain(cfg.files)
    if isinstance(files, (str, os.PathLike)) or (isinstance(files, Sequence) and not isinstance(files, str)):
        spec: dict[str, Any] = {"train": files}
    elif isinstance(files, Mapping):
        spec = {}
        names = {cfg.train_split: "train", "train": "train"}
        if cfg.val_split:
            names[cfg.val_split] = "val"
        if cfg.test_split:
            names[cfg.test_split] = "test"
        for key, value in files.items():
            split = names.get(str(key), _SPLIT_ALIASES.get(str(key)))
            if split is None:
                raise DataError(f"data.files has an unknown split key {key!r}; valid keys: "
                                f"{sorted(set(names) | set(_SPLIT_ALIASES))}")
            if split in spec:
                raise DataError(f"data.files names split {split!r} twice (key {key!r})")
            spec[split] = value
        if "train" not in spec:
            raise DataError(f"data.files={files!r} has no train file; add a 'train' key")
    else:
        raise DataError(f"data.files={files!r} must be a path or a mapping split -> path")

    out: dict[str, list[Path]] = {}
    for split, value in spec.items():
        paths = [value] if isinstance(value, (str, os.PathLike)) else list(value)
        if not paths:
            raise DataError(f"data.files for split {split!r} is an empty list")
        resolved = []
        for p in paths:
            rp = Path(os.path.abspath(os.path.expanduser(str(p))))
            if not rp.is_file():
                raise FileNotFoundError(
                    f"data.files: {split} file not found: {rp} (given as {str(p)!r}; relative paths "
                    f"are resolved against the working directory {os.getcwd()})")
            if rp.stat().st_size == 0:
                raise DataError(f"data.files: {split} file {rp} is empty")
            resolved.append(rp)
        out[split] = resolved
    return out


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _hub_offline() -> bool:
    import datasets.config as dconf
    from huggingface_hub import constants as hconst
    return bool(dconf.HF_HUB_OFFLINE) or bool(hconst.is_offline_mode())


@contextlib.contextmanager
def _forced_offline():
    """Make datasets/huggingface_hub behave as with HF_HUB_OFFLINE=1 (cache only) for a moment."""
    import datasets.config as dconf
    from huggingface_hub import constants as hconst
    saved = (dconf.HF_HUB_OFFLINE, getattr(dconf, "HF_DATASETS_OFFLINE", None), hconst.HF_HUB_OFFLINE)
    dconf.HF_HUB_OFFLINE = True
    dconf.HF_DATASETS_OFFLINE = True
    hconst.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        dconf.HF_HUB_OFFLINE, dconf.HF_DATASETS_OFFLINE, hconst.HF_HUB_OFFLINE = saved


def _probe_hub(repo_id: str) -> Optional[str]:
    """One HEAD request (bounded by HUB_PROBE_TIMEOUT_S) through huggingface_hub's own HTTP
    session (same proxies/endpoint). None if the Hub answered at all, else the error."""
    from huggingface_hub import constants as hconst
    from huggingface_hub.utils import get_session
    url = f"{hconst.ENDPOINT}/api/datasets/{repo_id}"
    try:
        get_session().request("HEAD", url, timeout=HUB_PROBE_TIMEOUT_S)
        return None
    except Exception as e:  # noqa: BLE001 - any transport failure means "unreachable"
        return f"{type(e).__name__}: {e} (HEAD {url})"


def _hub_hint(cfg: DataConfig) -> str:
    import datasets.config as dconf
    return (f"  The datasets cache looked in: {dconf.HF_DATASETS_CACHE} (set HF_DATASETS_CACHE to a "
            "cache that already holds this dataset; it then works offline, also with HF_HUB_OFFLINE=1).\n"
            "  Or use local text files instead: data=text data.files=PATH (one file, split into "
            "contiguous train/val/test blocks) or data.files={train: A, validation: B, test: C}.")


def _load_hub(cfg: DataConfig):
    """datasets.load_dataset(path, config, revision) -> DatasetDict, failing fast offline."""
    import datasets
    what = f"dataset {cfg.path!r}" + (f" config {cfg.config!r}" if cfg.config else "") + \
        (f" revision {cfg.revision!r}" if cfg.revision else "")
    kwargs = dict(revision=cfg.revision) if cfg.revision else {}
    local = Path(os.path.expanduser(cfg.path))
    if local.exists():  # a local dataset folder: no network involved
        return datasets.load_dataset(str(local.resolve()), cfg.config, **kwargs)

    offline_mode = _hub_offline()
    probe_err = None if offline_mode else _probe_hub(cfg.path)
    ctx = _forced_offline() if probe_err else contextlib.nullcontext()
    try:
        with ctx:
            # With the Hub unreachable, only the local datasets cache is consulted (no retry loop).
            return datasets.load_dataset(cfg.path, cfg.config, **kwargs)
    except Exception as e:
        from datasets.exceptions import DatasetNotFoundError
        if not (offline_mode or probe_err or isinstance(e, (ConnectionError, DatasetNotFoundError))):
            raise  # e.g. an unknown config name: datasets' own message lists the valid ones
        why = (f"the Hugging Face Hub is unreachable ({probe_err}), and it could not be loaded from the "
               "local datasets cache" if probe_err else
               "offline mode is on (HF_HUB_OFFLINE/HF_DATASETS_OFFLINE), and it could not be loaded "
               "from the local datasets cache" if offline_mode else "the Hub did not provide it")
        raise DataUnavailableError(
            f"could not load {what}: {why} ({type(e).__name__}: {e}).\n" + _hub_hint(cfg)) from e


@dataclass
class _RowSource:
    """One stream of rows (a dataset split or one text file); its start is a document boundary."""
    dataset: Any            # datasets.Dataset
    column: str
    label: str              # for messages/metadata
    lines: bool             # rows are lines without their "\n" (Hub text): add it when joining


def _load_text_file(path: Path, sample_by: str, arrow_dir: Path):
    import datasets
    from datasets.utils import disable_progress_bars, enable_progress_bars, are_progress_bars_disabled
    was_disabled = are_progress_bars_disabled()
    disable_progress_bars()
    try:
        dd = datasets.load_dataset(
            "text", data_files={"train": str(path)}, sample_by=sample_by,
            keep_linebreaks=True, cache_dir=str(arrow_dir),
            # we only load when (re)tokenizing: always read the file we just hashed
            download_mode="force_redownload")
    finally:
        if not was_disabled:
            enable_progress_bars()
    return dd["train"]


# --------------------------------------------------------------------------------------------
# Documents -> pieces -> tokens
# --------------------------------------------------------------------------------------------

_WIKITEXT_TITLE = re.compile(r"^ = [^=](.*[^=])? = \n?$")


def _is_blank(row: Optional[str]) -> bool:
    return row is None or not row.strip()


def _wikitext_title(prev: Optional[str], row: str, nxt: Optional[str]) -> bool:
    """An article title row ' = Title = ' between blank rows. (Section headings are ' = = X = = ';
    the blank-row condition rejects the odd formula line ' = 1 ... k = ' inside an article.)"""
    return bool(_WIKITEXT_TITLE.match(row)) and _is_blank(prev) and _is_blank(nxt)


def _plain_char(c: str) -> bool:
    return not c.isspace() and c.isprintable()


def _safe_cut(prev: str, nxt: str) -> bool:
    """True if tokenizing prev and nxt separately equals tokenizing prev+nxt.

    GPT-2-style pre-tokenization (r50k/p50k/cl100k/o200k patterns) never builds a piece that
    contains a newline followed by a non-space character, and a newline between two non-space
    characters (or before ' x') is a piece of its own in both cases."""
    if len(prev) < 2 or prev[-1] != "\n" or not _plain_char(prev[-2]) or not nxt:
        return False
    if _plain_char(nxt[0]):
        return True
    return nxt[0] == " " and len(nxt) > 1 and _plain_char(nxt[1])


def _iter_pieces(rows: Iterator[tuple[int, Optional[str]]], mode: str, lines: bool
                 ) -> Iterator[tuple[int, bool, str]]:
    """(row index, text) of ONE source -> (first row index, starts_document, piece text).

    The pieces of a document concatenate to the document's text and tokenize, piece by piece,
    exactly like ``encode_ordinary(document)``. Whitespace-only documents are dropped."""
    def normalized():
        for idx, row in rows:
            if row is None:
                continue
            if lines and mode != "row" and not row.endswith("\n"):
                row += "\n"   # Hub rows that are lines without their line break ("" = blank line)
            if row:
                yield idx, row

    # one row of look-ahead and look-behind (wikitext titles sit between blank rows)
    items = normalized()
    prev_row: Optional[str] = None
    cur = next(items, None)

    buf: list[str] = []
    buf_len = 0
    buf_row = -1
    new_doc = True        # the next emitted piece starts a document
    doc_emitted = False   # the current document already has a piece out

    def flush():
        nonlocal buf, buf_len, new_doc, doc_emitted
        text = "".join(buf)
        buf, buf_len = [], 0
        if not doc_emitted and text.isspace():
            return None  # whitespace-only start of a document: drop it, the document is still pending
        piece = (buf_row, new_doc, text)
        new_doc, doc_emitted = False, True
        return piece

    while cur is not None:
        idx, row = cur
        nxt = next(items, None)
        if mode in ("row", "paragraph"):
            starts = True
        elif mode == "wikitext":
            starts = _wikitext_title(prev_row, row, nxt[1] if nxt else None)
        else:  # "file": one document per source
            starts = False
        if starts and (buf or doc_emitted):
            if buf:
                p = flush()
                if p:
                    yield p
            new_doc, doc_emitted = True, False
        elif buf and buf_len >= _CHUNK_CHARS and _safe_cut(buf[-1], row):
            p = flush()
            if p:
                yield p
        if not buf:
            buf_row = idx
        buf.append(row)
        buf_len += len(row)
        prev_row, cur = row, nxt
    if buf:
        p = flush()
        if p:
            yield p


class _SplitWriter:
    """Streams one split's tokens to a temp file; commit() renames it into place, then writes
    the metadata (last: an entry without metadata is never trusted)."""

    def __init__(self, corpus_dir: Path, split: str, dtype, vocab_size: int, eot: int):
        self.dir, self.split, self.dtype, self.eot = corpus_dir, split, np.dtype(dtype), eot
        self.tmp = corpus_dir / f"{split}.bin.tmp-{os.getpid()}"
        self.f = open(self.tmp, "wb")
        self.n = 0
        self.n_docs = 0
        self.freq = np.zeros(vocab_size, dtype=np.int64)
        self.sha = hashlib.sha256()
        self.encode_s = 0.0

    def write_batch(self, items: list[tuple[bool, list[int]]]) -> None:
        """Append pieces (starts_document, tokens); an EOT goes before every document but the first."""
        parts: list = []
        count = self.n
        for new_doc, toks in items:
            if new_doc:
                self.n_docs += 1
                if count:
                    parts.append((self.eot,))
                    count += 1
            parts.append(toks)
            count += len(toks)
        total = count - self.n
        if total == 0:
            return
        arr = np.fromiter(itertools.chain.from_iterable(parts), dtype=self.dtype, count=total)
        self.freq += np.bincount(arr, minlength=len(self.freq))
        b = arr.tobytes()
        self.sha.update(b)
        self.f.write(b)
        self.n = count

    def abort(self) -> None:
        with contextlib.suppress(Exception):
            self.f.close()
        with contextlib.suppress(FileNotFoundError):
            self.tmp.unlink()

    def commit(self, meta: dict) -> dict:
        self.f.flush()
        os.fsync(self.f.fileno())
        self.f.close()
        if self.n == 0:
            self.abort()
            raise DataError(f"split {self.split!r} of {meta['source']} is empty: 0 tokens after "
                            "tokenization (empty or whitespace-only text)")
        freq_tmp = self.dir / f"{self.split}.freq.npy.tmp-{os.getpid()}"
        with open(freq_tmp, "wb") as f:
            np.save(f, self.freq)
            f.flush()
            os.fsync(f.fileno())
        sleep_s = float(os.environ.get(DEBUG_SLEEP_ENV) or 0)
        if sleep_s > 0:
            log.warning("%s=%s: sleeping before committing %s", DEBUG_SLEEP_ENV, sleep_s, self.tmp)
            time.sleep(sleep_s)
        os.replace(self.tmp, self.dir / f"{self.split}.bin")
        os.replace(freq_tmp, self.dir / f"{self.split}.freq.npy")
        meta = {**meta, "split": self.split, "n_tokens": self.n, "n_documents": self.n_docs,
                "dtype": self.dtype.name, "tokens_sha256": self.sha.hexdigest()}
        _atomic_write_text(self.dir / f"{self.split}.json", json.dumps(meta, indent=1))
        _fsync_dir(self.dir)
        return meta


def _atomic_write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


# --------------------------------------------------------------------------------------------
# Plan: which rows of which source become which split
# --------------------------------------------------------------------------------------------

@dataclass
class _Group:
    """The rows of `sources` (concatenated, in order) cut into contiguous outputs, in order."""
    sources: list[_RowSource]
    outputs: list[tuple[str, float]]   # (split, fraction of characters); one output -> 1.0


def _held_out(present: dict[str, bool], cfg: DataConfig) -> list[tuple[str, float]]:
    """Outputs of the train source: train, then the held-out splits as contiguous tail blocks."""
    out = []
    frac = {"val": cfg.val_fraction, "test": cfg.test_fraction}
    for s in ("val", "test"):
        if not present[s]:
            if frac[s] <= 0:
                raise DataError(f"the corpus has no {s} split, so data.{s}_fraction must be > 0 "
                                f"(got {frac[s]}) to hold one out of train")
            out.append((s, float(frac[s])))
    train = 1.0 - sum(f for _, f in out)
    return [("train", train), *out]


def _corpus_identity(cfg: DataConfig, enc: tiktoken.Encoding, docs: str) -> tuple[dict, Any]:
    """(what the cache key hashes, what _make_groups needs). Never touches the network: for the
    Hub the key is the config (pin data.revision to detect upstream changes); local text files
    are identified by a SHA-256 of their content (cheap at these sizes; robust to copies/touch)."""
    base = {"format_version": FORMAT_VERSION, "encoding": enc.name, "n_vocab": enc.n_vocab,
            "documents": docs}
    if cfg.source == "text":
        files = _text_files(cfg)
        present = {s: s in files for s in SPLITS}
        outputs = _held_out(present, cfg)
        ident = {**base, "source": "text",
                 "files": {s: [_sha256_file(p) for p in files[s]] for s in files},
                 "held_out": {s: f for s, f in outputs if s != "train"}}
        return ident, ("text", files, outputs)
    split_names = {"train": cfg.train_split, "val": cfg.val_split, "test": cfg.test_split}
    ident = {**base, "source": "hub", "path": cfg.path, "config": cfg.config,
             "revision": cfg.revision, "text_column": cfg.text_column, "splits": split_names,
             "fractions": {"val": float(cfg.val_fraction), "test": float(cfg.test_fraction)}}
    local = Path(os.path.expanduser(cfg.path))
    if local.exists():  # a local dataset folder: identify it by its files
        root = local.resolve()
        listing = sorted((str(p.relative_to(root)), p.stat().st_size, p.stat().st_mtime_ns)
                         for p in root.rglob("*") if p.is_file())
        ident["path"] = str(root)
        ident["local_files"] = listing
    return ident, ("hub", None, None)


def _make_groups(kind, files, outputs, cfg: DataConfig, docs: str, arrow_dir: Path,
                 need: set[str]) -> list[_Group]:
    """The groups that produce the splits in `need` (only their data is loaded)."""
    if kind == "text":
        sample_by = "paragraph" if docs == "paragraph" else "line"
        groups = []
        for split in SPLITS:
            outs = outputs if split == "train" else [(split, 1.0)]
            if split not in files or not need & {s for s, _ in outs}:
                continue
            # rows keep their line breaks: joined, they are the file's text exactly
            srcs = [_RowSource(_load_text_file(p, sample_by, arrow_dir), "text", str(p), lines=False)
                    for p in files[split]]
            groups.append(_Group(srcs, outs))
        return groups

    dd = _load_hub(cfg)
    avail = list(dd.keys())
    if cfg.train_split not in dd:
        raise DataError(f"data.train_split={cfg.train_split!r} is not a split of {cfg.path!r}; "
                        f"available: {avail}")
    present = {"train": True}
    for s, name, default in (("val", cfg.val_split, "validation"), ("test", cfg.test_split, "test")):
        if name and name not in dd and name != default:
            raise DataError(f"data.{s}_split={name!r} is not a split of {cfg.path!r}; available: "
                            f"{avail} (set it to null to hold {s} out of train)")
        present[s] = bool(name) and name in dd
        if not present[s]:
            log.info("%s has no %r split (splits: %s): holding out the last %.1f%% of %r as %s",
                     cfg.path, name, avail, 100 * getattr(cfg, f"{s}_fraction"), cfg.train_split, s)
    outs = _held_out(present, cfg)
    lines = docs in ("wikitext", "file")
    groups = []
    for s, name in (("train", cfg.train_split), ("val", cfg.val_split), ("test", cfg.test_split)):
        if not present[s]:
            continue
        d = dd[name]
        if cfg.text_column not in d.column_names:
            raise DataError(f"data.text_column={cfg.text_column!r} is not a column of {cfg.path!r} "
                            f"split {name!r}; columns: {d.column_names}")
        src = _RowSource(d.select_columns([cfg.text_column]), cfg.text_column, f"{cfg.path}:{name}", lines)
        groups.append(_Group([src], outs if s == "train" else [(s, 1.0)]))
    return groups


def _iter_rows(sources: list[_RowSource], batch: int = 4096) -> Iterator[tuple[int, int, str]]:
    """(source index, global row index, text) over the concatenated sources."""
    i = 0
    for si, src in enumerate(sources):
        for b in src.dataset.iter(batch_size=batch):
            for text in b[src.column]:
                if text is not None and not isinstance(text, str):
                    raise DataError(f"column {src.column!r} of {src.label} holds {type(text).__name__}"
                                    ", not text; set data.text_column to a string column")
                yield si, i, text
                i += 1


def _build_group(group: _Group, corpus_dir: Path, enc: tiktoken.Encoding, docs: str,
                 n_threads: int, need: set[str], meta_base: dict) -> dict[str, dict]:
    """Tokenize one group's rows once and commit the splits in `need` (the others are valid)."""
    import bisect

    from tqdm.auto import tqdm

    dtype = np.uint16 if enc.n_vocab < 65536 else np.uint32
    splits = [s for s, _ in group.outputs]
    label = group.sources[0].label
    if len(group.outputs) > 1:
        # Contiguous blocks by characters, cut at row (line) boundaries: train | val | test.
        lengths = np.fromiter((len(t or "") for _, _, t in _iter_rows(group.sources)), dtype=np.int64)
        starts = np.concatenate([[0], np.cumsum(lengths)])
        total_chars = int(starts[-1])
        bounds, acc = [0], 0.0
        for _, frac in group.outputs[:-1]:
            acc += frac
            bounds.append(int(np.searchsorted(starts[:-1], acc * total_chars, side="left")))
        bounds.append(len(lengths))
        for k, s in enumerate(splits):
            if bounds[k + 1] <= bounds[k]:
                raise DataError(
                    f"split {s!r} cut from {label} would be empty ({len(lengths)} rows, {total_chars} "
                    f"characters); " + (f"raise data.{s}_fraction" if s != "train" else
                                        "lower data.val_fraction/test_fraction"))
        ranges = {s: (bounds[k], bounds[k + 1], int(starts[bounds[k]]), int(starts[bounds[k + 1]]))
                  for k, s in enumerate(splits)}
    else:
        bounds = [0, sys.maxsize]
        total_chars = sum(int(s.dataset.data.nbytes) for s in group.sources)
        ranges = {}
    inner = bounds[1:-1]

    bar = tqdm(total=total_chars, unit="char", unit_scale=True, desc=f"tokenize {meta_base['name']}",
               disable=total_chars < _PROGRESS_MIN_CHARS, mininterval=1.0)
    written: dict[str, dict] = {}
    state: dict[str, Any] = {"k": -1, "writer": None, "t": 0.0, "inflight": None}
    pending: list[tuple[bool, str]] = []
    pending_chars = 0
    # One batch is encoded (by tiktoken's threads, without the GIL) while this thread reads and
    # cuts the next one; batches are written strictly in order.
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tokenize")

    def timed_encode(texts: list[str]):
        t = time.perf_counter()
        toks = enc.encode_ordinary_batch(texts, num_threads=n_threads)
        return toks, time.perf_counter() - t

    def finish_inflight():
        if state["inflight"] is None:
            return
        fut, w, new_docs, chars = state["inflight"]
        state["inflight"] = None
        toks, secs = fut.result()
        w.encode_s += secs
        w.write_batch(list(zip(new_docs, toks)))
        bar.update(chars)

    def encode_pending():
        nonlocal pending, pending_chars
        finish_inflight()
        w = state["writer"]
        if pending and w is not None:
            fut = pool.submit(timed_encode, [p for _, p in pending])
            state["inflight"] = (fut, w, [nd for nd, _ in pending], pending_chars)
        else:
            bar.update(pending_chars)
        pending, pending_chars = [], 0

    def close_output():
        encode_pending()
        finish_inflight()
        w, k = state["writer"], state["k"]
        if w is None:
            return
        s = splits[k]
        dt = time.perf_counter() - state["t"]
        cpu = time.process_time() - state["cpu"]
        meta = {**meta_base,
                "row_range": list(ranges[s][:2]) if ranges else None,
                "char_range": list(ranges[s][2:]) if ranges else None,
                "seconds": round(dt, 4), "encode_seconds": round(w.encode_s, 4),
                "cpu_seconds": round(cpu, 4),   # all threads of this process: robust to a busy machine
                "tokens_per_s": round(w.n / max(dt, 1e-9)),
                "encode_tokens_per_s": round(w.n / max(w.encode_s, 1e-9)),
                "num_threads": n_threads, "created_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "pid": os.getpid(), "host": socket.gethostname()}
        written[s] = w.commit(meta)
        state["writer"] = None
        log.info("tokenized %s/%s: %d tokens in %.2f s = %.2fM tokens/s (encode only: %.2fM tokens/s; "
                 "%.2fM tokens per CPU-second; %d threads) -> %s", meta_base["name"], s, w.n, dt,
                 w.n / max(dt, 1e-9) / 1e6, w.n / max(w.encode_s, 1e-9) / 1e6, w.n / max(cpu, 1e-9) / 1e6,
                 n_threads, corpus_dir / f"{s}.bin")

    def open_output(k: int):
        state["k"], state["t"], state["cpu"] = k, time.perf_counter(), time.process_time()
        s = splits[k]
        state["writer"] = (_SplitWriter(corpus_dir, s, dtype, enc.n_vocab, enc.eot_token)
                           if s in need else None)

    try:
        # Segments = maximal runs of rows with the same (output split, source); each segment
        # starts a document (a new file is a new document; a split starts a new stream).
        segments = itertools.groupby(_iter_rows(group.sources),
                                     key=lambda r: (bisect.bisect_right(inner, r[1]), r[0]))
        for (k, si), seg in segments:
            if k != state["k"]:
                if state["k"] >= 0:
                    close_output()
                open_output(k)
            rows = ((i, text) for _, i, text in seg)
            for _, new_doc, text in _iter_pieces(rows, docs, group.sources[si].lines):
                pending.append((new_doc, text))
                pending_chars += len(text)
                if pending_chars >= _BATCH_CHARS:
                    encode_pending()
        if state["k"] < 0:
            raise DataError(f"{label} has no rows: the corpus is empty")
        close_output()
    except BaseException:
        pool.shutdown(wait=True, cancel_futures=True)
        if state["writer"] is not None:
            state["writer"].abort()
        raise
    finally:
        pool.shutdown(wait=True)
        bar.close()
    return written


# --------------------------------------------------------------------------------------------
# Cache + Corpus
# --------------------------------------------------------------------------------------------

def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def _safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "corpus"


def _read_entry(corpus_dir: Path, split: str, key: str) -> Optional[dict]:
    """The metadata of a committed, consistent split entry, or None (never trust anything else)."""
    try:
        meta = json.loads((corpus_dir / f"{split}.json").read_text())
        if meta.get("format_version") != FORMAT_VERSION or meta.get("key") != key:
            return None
        size = (corpus_dir / f"{split}.bin").stat().st_size
        if size != meta["n_tokens"] * np.dtype(meta["dtype"]).itemsize or meta["n_tokens"] <= 0:
            return None
        if not (corpus_dir / f"{split}.freq.npy").is_file():
            return None
        return meta
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _append_build_log(corpus_dir: Path, record: dict) -> None:
    with open(corpus_dir / "builds.log", "a") as f:
        f.write(json.dumps(record) + "\n")
        f.flush()
        os.fsync(f.fileno())


class Corpus:
    """A tokenized corpus: train/val/test token arrays (read-only memmaps) and their metadata."""

    def __init__(self, cfg: DataConfig, enc: tiktoken.Encoding, corpus_dir: Path, key: str,
                 metas: dict[str, dict], built: list[str]):
        self.cfg = cfg
        self._enc = enc
        self.dir = corpus_dir
        self.key = key
        self._meta = metas
        self._built = built
        self._mm: dict[str, np.memmap] = {}

    @property
    def encoding(self) -> tiktoken.Encoding:
        return self._enc

    @property
    def encoding_name(self) -> str:
        return self._enc.name

    @property
    def vocab_size(self) -> int:
        return int(self._enc.n_vocab)

    @property
    def eot_token(self) -> int:
        return int(self._enc.eot_token)

    @property
    def fingerprint(self) -> str:
        """Short id of data + split + tokenizer (the cache key; independent of ``name``)."""
        return self.key[:12]

    @property
    def splits(self) -> tuple[str, ...]:
        return SPLITS

    def _check(self, split: str) -> str:
        if split not in SPLITS:
            raise DataError(f"unknown split {split!r}; valid splits: {list(SPLITS)}")
        return split

    def path(self, split: str) -> Path:
        return self.dir / f"{self._check(split)}.bin"

    def meta(self, split: str) -> dict:
        return dict(self._meta[self._check(split)])

    def tokens(self, split: str) -> np.memmap:
        self._check(split)
        if split not in self._mm:
            m = self._meta[split]
            self._mm[split] = np.memmap(self.path(split), dtype=np.dtype(m["dtype"]), mode="r",
                                        shape=(m["n_tokens"],))
        return self._mm[split]

    def n_tokens(self, split: str) -> int:
        return int(self._meta[self._check(split)]["n_tokens"])

    def token_freq(self, split: str = "train") -> np.ndarray:
        freq = np.load(self.dir / f"{self._check(split)}.freq.npy")
        return freq.astype(np.int64, copy=False)

    def decode(self, tokens) -> str:
        return self._enc.decode([int(t) for t in tokens])

    def info(self) -> dict:
        return {
            "name": self.cfg.name, "fingerprint": self.fingerprint, "encoding": self.encoding_name,
            "vocab_size": self.vocab_size, "eot_token": self.eot_token,
            "documents": self._meta["train"].get("documents"), "source": self._meta["train"].get("source"),
            "cache_dir": str(self.dir),
            "n_tokens": {s: self.n_tokens(s) for s in SPLITS},
            "n_documents": {s: self._meta[s].get("n_documents") for s in SPLITS},
            "paths": {s: str(self.path(s)) for s in SPLITS},
            "tokens_per_s": {s: self._meta[s].get("tokens_per_s") for s in SPLITS},
            "num_threads": {s: self._meta[s].get("num_threads") for s in SPLITS},
            "built_now": list(self._built),
        }

    def __repr__(self) -> str:
        n = ", ".join(f"{s}={self.n_tokens(s):,}" for s in SPLITS)
        return f"Corpus({self.cfg.name!r}, {self.fingerprint}, {self.encoding_name}, V={self.vocab_size}, {n})"


def _describe_source(cfg: DataConfig) -> str:
    if cfg.source == "text":
        return f"text:{_as_plain(cfg.files)}"
    return f"hub:{cfg.path}" + (f"/{cfg.config}" if cfg.config else "") + (f"@{cfg.revision}" if cfg.revision else "")


def prepare_data(cfg: DataConfig) -> Corpus:
    """Tokenize the corpus of ``cfg`` into the cache (once; locked; atomic) and return it.

    Entries already in the cache are used without touching the network or ``datasets``.
    """
    from filelock import FileLock, Timeout

    _validate(cfg)
    enc = load_encoding(cfg.encoding)
    docs = _resolve_documents(cfg)
    ident, plan = _corpus_identity(cfg, enc, docs)
    key = _digest(ident)
    root = resolve_cache_dir(cfg)
    corpus_dir = root / "tokens" / f"{_safe_name(cfg.name)}-{key[:16]}"

    metas = {s: _read_entry(corpus_dir, s, key) for s in SPLITS}
    built: list[str] = []
    if not all(metas.values()):
        corpus_dir.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(corpus_dir / ".lock"))
        waited = time.perf_counter()
        while True:
            try:
                lock.acquire(timeout=30)
                break
            except Timeout:
                log.info("waiting for %s: another process is tokenizing %s (%.0f s so far)",
                         lock.lock_file, cfg.name, time.perf_counter() - waited)
        try:
            metas = {s: _read_entry(corpus_dir, s, key) for s in SPLITS}   # built while we waited?
            need = {s for s in SPLITS if not metas[s]}
            if need:
                # We hold the lock: leftovers of killed builds are stale.
                for stale in corpus_dir.glob("*.tmp-*"):
                    if stale.is_dir():
                        shutil.rmtree(stale, ignore_errors=True)
                    else:
                        stale.unlink(missing_ok=True)
                for s in need:  # never leave metadata beside a file about to be replaced
                    (corpus_dir / f"{s}.json").unlink(missing_ok=True)
                _atomic_write_text(corpus_dir / "identity.json", json.dumps(ident, indent=1))
                n_threads = _n_threads(cfg)
                meta_base = {"format_version": FORMAT_VERSION, "key": key, "name": cfg.name,
                             "source": _describe_source(cfg), "documents": docs,
                             "encoding": enc.name, "vocab_size": enc.n_vocab, "eot_token": enc.eot_token}
                _append_build_log(corpus_dir, {"event": "start", "splits": sorted(need),
                                               "pid": os.getpid(), "time": time.time()})
                t0 = time.perf_counter()
                kind, files, outputs = plan
                # datasets' arrow copy of local text files is only needed while tokenizing
                arrow_dir = corpus_dir / f"hf_arrow.tmp-{os.getpid()}"
                try:
                    for group in _make_groups(kind, files, outputs, cfg, docs, arrow_dir, need):
                        group_need = need & {s for s, _ in group.outputs}
                        if group_need:
                            metas.update(_build_group(group, corpus_dir, enc, docs, n_threads,
                                                      group_need, meta_base))
                finally:
                    shutil.rmtree(arrow_dir, ignore_errors=True)
                built = sorted(need)
                _append_build_log(corpus_dir, {"event": "done", "splits": built, "pid": os.getpid(),
                                               "seconds": round(time.perf_counter() - t0, 3),
                                               "time": time.time()})
        finally:
            lock.release()
    missing = [s for s in SPLITS if not metas.get(s)]
    if missing:  # pragma: no cover - defensive
        raise DataError(f"splits {missing} of {cfg.name} were not produced in {corpus_dir}")
    corpus = Corpus(cfg, enc, corpus_dir, key, metas, built)
    log.info("%r (cache %s)", corpus, corpus_dir)
    return corpus


# --------------------------------------------------------------------------------------------
# Batches
# --------------------------------------------------------------------------------------------

_SAMPLER_STREAM = 0x7E1D_5A3B  # separates the batch stream from any other use of the same seed


def _split_name(tokens, split: Optional[str], default: str) -> str:
    """The split name for messages: given, else read from a Corpus memmap's file name."""
    if split:
        return split
    stem = Path(str(getattr(tokens, "filename", "") or "")).stem
    return stem if stem in SPLITS else default


def _check_windows(tokens, block_size: int, split: str) -> int:
    if block_size < 1:
        raise DataError(f"block_size must be >= 1, got {block_size}")
    n = len(tokens)
    if n < block_size + 1:
        raise DataError(f"split {split!r} has {n} tokens, fewer than one window of block_size+1 = "
                        f"{block_size + 1} tokens; use a smaller block_size or a larger corpus/split")
    return n


class BatchSampler:
    """Random training windows; the batch for (seed, step, micro) is a pure function of them.

    ``get(step, micro)`` draws ``batch_size`` start offsets uniformly from all positions (with
    replacement) with a generator seeded from (seed, step, micro) only: no global RNG state, no
    dependence on what was drawn before. So tied and untied runs with the same seed see identical
    batches, and a run resumed at step k sees what an uninterrupted run would have seen.
    """

    def __init__(self, tokens, block_size: int, batch_size: int, seed: int = 0,
                 split: Optional[str] = None):
        split = _split_name(tokens, split, "train")
        self.n = _check_windows(tokens, block_size, split)
        if batch_size < 1:
            raise DataError(f"batch_size must be >= 1, got {batch_size}")
        if seed < 0:
            raise DataError(f"seed must be >= 0, got {seed}")
        self.tokens = tokens
        self.block_size = int(block_size)
        self.batch_size = int(batch_size)
        self.seed = int(seed)
        self.split = split
        self._offsets = np.arange(self.block_size + 1, dtype=np.int64)

    def starts(self, step: int, micro: int = 0) -> np.ndarray:
        if step < 0 or micro < 0:
            raise DataError(f"step and micro must be >= 0, got step={step}, micro={micro}")
        rng = np.random.Generator(np.random.PCG64(
            np.random.SeedSequence([_SAMPLER_STREAM, self.seed, int(step), int(micro)])))
        return rng.integers(0, self.n - self.block_size, size=self.batch_size, dtype=np.int64)

    def get(self, step: int, micro: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        import torch
        idx = self.starts(step, micro)[:, None] + self._offsets
        w = torch.from_numpy(np.asarray(self.tokens[idx], dtype=np.int64))
        return w[:, :-1].contiguous(), w[:, 1:].contiguous()

    def get_accum(self, step: int, n_micro: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [self.get(step, m) for m in range(n_micro)]


def eval_window_starts(n_tokens: int, block_size: int, max_windows: Optional[int] = None) -> np.ndarray:
    """Start offsets of the fixed evaluation windows: evenly spaced, non-overlapping windows of
    block_size+1 tokens from the first to the last possible position; at most max_windows
    (None or <= 0: all that fit)."""
    w = block_size + 1
    fit = n_tokens // w
    k = fit if not max_windows or max_windows <= 0 else min(int(max_windows), fit)
    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    if k == 1:
        return np.zeros(1, dtype=np.int64)
    # floor(i * span / (k-1)) with span/(k-1) >= w: consecutive starts are >= w apart.
    return (np.arange(k, dtype=np.int64) * (n_tokens - w)) // (k - 1)


def n_eval_windows(tokens_or_n, block_size: int, max_windows: Optional[int] = None) -> int:
    """How many windows iter_eval_batches yields for this split (a length or a token array)."""
    n = tokens_or_n if isinstance(tokens_or_n, (int, np.integer)) else len(tokens_or_n)
    return len(eval_window_starts(int(n), block_size, max_windows))


def iter_eval_batches(tokens, block_size: int, batch_size: int, max_windows: Optional[int] = None,
                      split: Optional[str] = None) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Yield (x, y) int64 batches over the same fixed windows every time (see eval_window_starts);
    the last batch may be smaller than batch_size."""
    n = _check_windows(tokens, block_size, _split_name(tokens, split, "eval"))
    if batch_size < 1:
        raise DataError(f"batch_size must be >= 1, got {batch_size}")
    import torch
    starts = eval_window_starts(n, block_size, max_windows)
    offsets = np.arange(block_size + 1, dtype=np.int64)
    for i in range(0, len(starts), batch_size):
        idx = starts[i:i + batch_size, None] + offsets
        w = torch.from_numpy(np.asarray(tokens[idx], dtype=np.int64))
        yield w[:, :-1].contiguous(), w[:, 1:].contiguous()


# --------------------------------------------------------------------------------------------
# CLI: python -m tiedvsuntied.data [PRESET] [key=value ...] [--fresh]
# --------------------------------------------------------------------------------------------

CONF_DATA_DIR = Path(__file__).resolve().parents[1] / "conf" / "data"


def load_config(preset: Optional[str] = None, overrides: Sequence[str] = ()) -> DataConfig:
    """DataConfig from conf/data/<preset>.yaml plus key=value overrides (the same keys as
    Hydra's data.<key>=value, without the 'data.' prefix)."""
    from omegaconf import OmegaConf
    conf = OmegaConf.structured(DataConfig)
    if preset:
        path = CONF_DATA_DIR / f"{preset}.yaml"
        if not path.is_file():
            avail = sorted(p.stem for p in CONF_DATA_DIR.glob("*.yaml"))
            raise DataError(f"no data preset {preset!r} ({path}); available: {avail}")
        conf = OmegaConf.merge(conf, OmegaConf.load(path))
    ovr = [o[len("data."):] if o.startswith("data.") else o for o in overrides]
    if ovr:
        conf = OmegaConf.merge(conf, OmegaConf.from_dotlist(ovr))
    missing = sorted(k for k in conf if OmegaConf.is_missing(conf, k))
    if missing:
        raise DataError(f"data.{missing[0]} must be given (it is ??? in conf/data/{preset}.yaml), e.g. "
                        + ("data=text data.files=PATH" if missing[0] == "files" else f"data.{missing[0]}=VALUE"))
    return OmegaConf.to_object(conf)


def main(argv: Optional[Sequence[str]] = None) -> int:
    import argparse
    p = argparse.ArgumentParser(
        prog="python -m tiedvsuntied.data",
        description="Prepare (tokenize + cache) a corpus and print its info as JSON. Examples:\n"
                    "  python -m tiedvsuntied.data text files=../shared/data/tinyshakespeare/input.txt\n"
                    "  python -m tiedvsuntied.data wikitext2\n"
                    "  python -m tiedvsuntied.data text files.train=A files.validation=B --fresh",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("preset", nargs="?", default=None,
                   help="a conf/data/<preset>.yaml (wikitext2, wikitext103, text, hub)")
    p.add_argument("overrides", nargs="*", help="key=value overrides of DataConfig fields")
    p.add_argument("--prepare", action="store_true", help="(default action) prepare and print info")
    p.add_argument("--fresh", action="store_true",
                   help="tokenize into a temporary cache dir (deleted afterwards): measures throughput")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s: %(message)s")
    preset, overrides = args.preset, list(args.overrides)
    if preset and "=" in preset:
        preset, overrides = None, [preset, *overrides]
    try:
        cfg = load_config(preset or "wikitext2", overrides)
        with contextlib.ExitStack() as stack:
            if args.fresh:
                cfg.cache_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="tiedvsuntied-fresh-"))
            t = time.perf_counter()
            info = prepare_data(cfg).info()
            wall = time.perf_counter() - t
    except (DataError, DataUnavailableError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    total = sum(info["n_tokens"].values())
    built = [s for s in SPLITS if s in info["built_now"]]
    if built:
        n_built = sum(info["n_tokens"][s] for s in built)
        print(f"tokenized {n_built:,} tokens ({', '.join(built)}) of {cfg.name} in {wall:.2f} s wall "
              f"(incl. loading with datasets): {n_built / wall / 1e6:.2f}M tokens/s end to end; "
              f"{_n_threads(cfg)} tokenizer threads on {os.cpu_count()} cores", file=sys.stderr)
    else:
        print(f"{total:,} tokens of {cfg.name} read from the cache in {wall:.2f} s", file=sys.stderr)
    print(json.dumps(info, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
