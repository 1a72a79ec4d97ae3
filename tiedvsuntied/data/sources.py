"""Where tokens come from: the tokenizer, local text files and Hugging Face Hub datasets, each
checked within seconds and in one line before any long work; each split's rows (a split the
source lacks is a contiguous tail of train) and the documents an end-of-text token separates.
The corpus fingerprint promises the tokens the format version 2 cache was built from, so the row
and document rules must not change (docs/data.md, "Documents and the end-of-text token").
"""

from __future__ import annotations

import codecs
import csv
import os
import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import tiktoken

from tiedvsuntied.data.config import (
    SHIPPED,
    DataConfig,
    DataError,
    DataUnavailableError,
    Documents,
    Source,
    Split,
)

HUB_PROBE_TIMEOUT = 3.0  # seconds; then the Hub is unreachable and only caches are read
HUB_FIX = (
    "use local text (data=text data.files=PATH), or put the dataset in the datasets cache "
    "(HF_DATASETS_CACHE) and set HF_DATASETS_OFFLINE=1, or prepare the token cache where the "
    "network is (python -m tiedvsuntied.data)"
)


# tiktoken_ext.openai_public.gpt2's SHA-256 of the files it downloads, which the package ships
GPT2_FILES = {
    "vocab.bpe": "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
    "encoder.json": "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783",
}


def shipped_gpt2() -> tiktoken.Encoding:
    """tiktoken's ``gpt2`` encoding built by tiktoken's own code from GPT-2's files shipped with
    the package (data/shipped, hash-checked): no download, no cache, the same tokens."""
    from tiktoken.load import data_gym_to_mergeable_bpe_ranks
    from tiktoken_ext.openai_public import ENDOFTEXT, r50k_pat_str

    (vocab, vocab_sha), (encoder, encoder_sha) = GPT2_FILES.items()
    saved = os.environ.get("TIKTOKEN_CACHE_DIR")
    os.environ["TIKTOKEN_CACHE_DIR"] = ""  # tiktoken's switch: read the files, copy them nowhere
    try:
        ranks = data_gym_to_mergeable_bpe_ranks(
            str(SHIPPED / vocab), str(SHIPPED / encoder), vocab_sha, encoder_sha
        )
    finally:
        if saved is None:
            del os.environ["TIKTOKEN_CACHE_DIR"]
        else:
            os.environ["TIKTOKEN_CACHE_DIR"] = saved
    return tiktoken.Encoding(
        name="gpt2",
        explicit_n_vocab=50257,
        pat_str=r50k_pat_str,
        mergeable_ranks=ranks,
        special_tokens={ENDOFTEXT: 50256},
    )


@cache
def load_encoding(name: str) -> tiktoken.Encoding:
    """The tokenizer: "bytes" is built here (256 single-byte tokens + <|endoftext|>, V = 257:
    round-trips any UTF-8, no download); "gpt2" from the package's files (``shipped_gpt2``);
    others via tiktoken (its cache: TIKTOKEN_CACHE_DIR)."""
    if name == "gpt2":
        return shipped_gpt2()
    if name == "bytes":
        return tiktoken.Encoding(
            name="bytes",
            pat_str=r"""\s+(?!\S)|\s+|\S+""",
            mergeable_ranks={bytes([i]): i for i in range(256)},
            special_tokens={"<|endoftext|>": 256},
        )
    try:
        return tiktoken.get_encoding(name)
    except Exception as e:  # requests' errors: no network and not in tiktoken's cache
        where = os.environ.get("TIKTOKEN_CACHE_DIR", "<unset>")
        raise DataUnavailableError(
            f"the tiktoken encoding {name!r} is not in TIKTOKEN_CACHE_DIR={where} and cannot be "
            f"downloaded ({type(e).__name__}): point TIKTOKEN_CACHE_DIR at a folder holding its "
            "files (e.g. ../shared/data/tiktoken) or use data.encoding=gpt2 (shipped) or bytes"
        ) from e


_VAL_KEYS = ("validation", "valid", "val", "dev")
_SPLIT_KEYS = {"train": "train", "test": "test"} | dict.fromkeys(_VAL_KEYS, "val")


def _expand(value) -> list[Path]:
    """A path or list of paths, absolute; a folder stands for its ``*.txt`` files, by name."""
    out = []
    for path in [value] if isinstance(value, (str, os.PathLike)) else value:
        path = Path(os.path.abspath(os.path.expanduser(str(path))))
        found = sorted(path.glob("*.txt")) if path.is_dir() else [path]
        if not found:
            raise DataError(f"data.files: the folder {path} holds no *.txt files")
        out += found
    return out


def text_files(cfg: DataConfig) -> dict[str, list[Path]]:
    """data.files -> {"train": [paths], optionally "val"/"test": [paths]}, resolved against the
    working directory; with ``data.split=document``, dealt into folds (:func:`document_splits`)."""
    files = cfg.files  # plain python: configs are made with OmegaConf.to_object
    if Split(cfg.split) == Split.document:
        if isinstance(files, dict):
            raise DataError(
                "data.split=document takes one list of files or a folder in data.files, "
                f"not a split mapping (got keys {sorted(files)})"
            )
        return document_splits(cfg, _expand(files))
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
        out[split] = _expand(value)
    if "train" not in out or not all(out.values()):
        raise DataError(f"data.files={files!r} needs a train file and at least one file per split")
    return out


def _groups(cfg: DataConfig, paths: list[Path]) -> list[str]:
    """Each document's group: its file name, or its ``group_by`` value in the manifest."""
    if cfg.group_by is None:
        return [p.name for p in paths]
    manifest = Path(os.path.abspath(os.path.expanduser(cfg.manifest)))
    try:
        with open(manifest, newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f, delimiter="\t"))
    except OSError as e:
        raise DataError(f"data.manifest: cannot read {manifest} ({e.strerror})") from None
    if not rows or "file" not in rows[0] or cfg.group_by not in rows[0]:
        columns = sorted(rows[0]) if rows else []
        raise DataError(
            f"data.group_by={cfg.group_by!r} needs the columns 'file' and {cfg.group_by!r} in "
            f"{manifest}; columns: {columns}"
        )
    group = {r["file"]: r[cfg.group_by] for r in rows}
    missing = [p.name for p in paths if p.name not in group]
    if missing:
        raise DataError(f"data.manifest {manifest} does not list {missing[0]} ({len(missing)})")
    return [group[p.name] for p in paths]


def document_splits(cfg: DataConfig, paths: list[Path]) -> dict[str, list[Path]]:
    """Whole documents (or their manifest groups) into folds: docs/data.md, "Held-out splits"."""
    if len(set(paths)) != len(paths):
        raise DataError("data.files lists a document twice; a document is in one split only")
    groups = _groups(cfg, paths)
    names = sorted(set(groups))
    if len(names) < cfg.folds:
        raise DataError(
            f"data.folds={cfg.folds} is more than the {len(names)} groups of documents; "
            "use fewer folds or more files"
        )
    order = np.random.Generator(np.random.PCG64(cfg.split_seed)).permutation(len(names))
    fold = {names[g]: i % cfg.folds for i, g in enumerate(order)}
    role = {cfg.heldout_fold: "test", (cfg.heldout_fold + 1) % cfg.folds: "val"}
    out: dict[str, list[Path]] = {"train": [], "val": [], "test": []}
    for path, group in zip(paths, groups, strict=True):
        out[role.get(fold[group], "train")].append(path)
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
        raise DataError(f"data.files: {path} is not UTF-8 text (binary?)") from None
    if not head:
        raise DataError(f"data.files: {path} is empty")


def check_data(cfg: DataConfig) -> None:
    """Fast checks before any work (no network, no tokenization): the fields (again, for a config
    changed after construction), and that local text files exist, are readable and are text."""
    cfg.__post_init__()
    if cfg.source == Source.hub:
        return
    files = text_files(cfg)
    for split in ("val", "test"):
        if split not in files and getattr(cfg, f"{split}_fraction") <= 0:
            raise DataError(
                f"data.{split}_fraction must be > 0 to hold {split} out of train "
                f"(data.files has no {split} file)"
            )
    for path in (p for paths in files.values() for p in paths):
        _check_text_file(path)


def _hub_reachable(path: str) -> bool:
    """One request with a short timeout: any HTTP answer means the Hub can be reached."""
    import datasets

    url = f"{datasets.config.HF_ENDPOINT}/api/datasets/{path}"
    request = urllib.request.Request(url, method="HEAD")
    try:
        urllib.request.urlopen(request, timeout=HUB_PROBE_TIMEOUT)
    except (OSError, ValueError) as e:
        return isinstance(e, urllib.error.HTTPError)  # an answer, if not a yes
    return True


def _hub_problem(cfg: DataConfig) -> str | None:
    """None when the Hub dataset can be loaded; else why not. An unreachable Hub sends ``datasets``
    offline (as HF_HUB_OFFLINE=1 would) to read its cache at once, not retry for half a minute."""
    import datasets

    if Path(cfg.path).expanduser().is_dir():
        return None
    hub = "is off (HF_HUB_OFFLINE)"
    if not datasets.config.HF_HUB_OFFLINE:  # HF_HUB_OFFLINE or HF_DATASETS_OFFLINE
        if _hub_reachable(cfg.path):
            return None
        datasets.config.HF_HUB_OFFLINE = True
        hub = "cannot be reached"
    try:
        datasets.load_dataset_builder(cfg.path, cfg.config, revision=cfg.revision)
    except Exception:  # datasets raises many types here; offline, all mean "not in the cache"
        return (
            f"the dataset {cfg.path!r} (config {cfg.config!r}) is not in the datasets cache "
            f"and the Hub {hub}"
        )
    return None


def check_available(cfg: DataConfig, need_source: bool) -> tiktoken.Encoding | None:
    """The encoding, after checking that it and (if ``need_source``) the Hub dataset can be had
    (None for a vocabulary trained on the corpus: data/bpe.py). Both are checked before raising,
    so that one line names every fix."""
    problems, encoding = [], None
    try:
        encoding = None if cfg.encoding == "bpe" else load_encoding(cfg.encoding)
    except DataUnavailableError as e:
        problems.append(str(e))
    if (need_source or problems) and cfg.source == Source.hub:
        hub = _hub_problem(cfg)
        if hub:
            problems.append(f"{hub}: {HUB_FIX}")
    if problems:
        raise DataUnavailableError("not available offline: " + "; and ".join(problems))
    return encoding


@dataclass
class Stream:
    """Rows of one split's source(s). A new document starts at each index in `starts`
    (file boundaries); the rows joined are the source text exactly."""

    rows: list[str]
    starts: set[int]
    label: str


def _text_stream(paths: list[Path], docs: Documents) -> Stream:
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
    return Stream(rows, starts, ", ".join(map(str, paths)))


def _hub_split_names(cfg: DataConfig, available: list[str]) -> dict[str, str]:
    """{split: the dataset's split name} for the splits the dataset has (train at least)."""
    out = {}
    for split, default in (("train", None), ("val", "validation"), ("test", "test")):
        name = getattr(cfg, f"{split}_split")
        if name and name not in available and name != default:
            raise DataError(
                f"data.{split}_split={name!r} is not a split of {cfg.path!r}; available: "
                f"{available}" + ("" if split == "train" else " (or null to hold it out)")
            )
        if name in available:
            out[split] = name
    return out


def _hub_streams(cfg: DataConfig, docs: Documents) -> dict[str, Stream]:
    """{split: stream} of the splits the dataset has (train at least)."""
    import datasets

    what = f"{cfg.path!r} config {cfg.config!r} revision {cfg.revision!r}"
    try:
        dataset = datasets.load_dataset(cfg.path, cfg.config, revision=cfg.revision)
    except (ConnectionError, OSError, datasets.exceptions.DatasetNotFoundError) as e:
        why = f"{type(e).__name__}: {' '.join(str(e).split())}"
        raise DataUnavailableError(f"could not load {what}: {why}; {HUB_FIX}") from e
    out = {}
    for split, name in _hub_split_names(cfg, list(dataset)).items():
        columns = dataset[name].column_names
        if cfg.text_column not in columns:
            raise DataError(
                f"data.text_column={cfg.text_column!r} is not a column of {cfg.path!r}; "
                f"columns: {columns}"
            )
        rows = [r or "" for r in dataset[name][cfg.text_column]]
        if not all(isinstance(r, str) for r in rows[:1000]):
            raise DataError(
                f"data.text_column={cfg.text_column!r} of {cfg.path!r} does not hold text; "
                f"columns: {columns}"
            )
        if docs != Documents.row:  # Hub text rows are lines without their line break
            rows = [r if r.endswith("\n") else r + "\n" for r in rows]
        out[split] = Stream(rows, {0}, f"{cfg.path}:{name}")
    return out


def split_streams(cfg: DataConfig) -> dict[str, tuple[Stream, tuple[int, int]]]:
    """{split: (stream, row range)}: a split the source lacks is a contiguous tail of train, cut at
    a row boundary so that it holds its fraction of train's characters."""
    docs = cfg.documents_mode()
    if cfg.source == Source.text:
        streams = {s: _text_stream(p, docs) for s, p in text_files(cfg).items()}
    else:
        streams = _hub_streams(cfg, docs)
    train = streams["train"]
    held = [s for s in ("val", "test") if s not in streams]
    fractions = [getattr(cfg, f"{s}_fraction") for s in held]
    ends = np.cumsum([len(r) for r in train.rows])  # character offset after each row
    at = 1.0 - sum(fractions) + np.cumsum([0.0, *fractions])[:-1]  # train | val | test
    cuts = [0, *(np.searchsorted(ends, at * ends[-1]) + 1).tolist(), len(train.rows)]
    out = {s: (stream, (0, len(stream.rows))) for s, stream in streams.items()}
    for k, s in enumerate(["train", *held]):
        if cuts[k + 1] <= cuts[k]:
            raise DataError(
                f"split {s!r} cut from {train.label} would be empty; change "
                f"data.val_fraction / data.test_fraction"
            )
        out[s] = (train, (cuts[k], cuts[k + 1]))
    return out


_TITLE = re.compile(r"^ = [^=](.*[^=])? = \n?$")


def _ends_document(stream: Stream, i: int, lo: int, hi: int, docs: Documents) -> bool:
    """Whether row i starts a new document (i == hi: the end of the range)."""
    if i == hi or i in stream.starts or docs in (Documents.row, Documents.paragraph):
        return True
    if docs != Documents.wikitext or _TITLE.match(stream.rows[i]) is None:
        return False
    # between blank rows: ' = 1 ... k = ' formulas are no titles
    return all(not (lo <= j < hi) or not stream.rows[j].strip() for j in (i - 1, i + 1))


def iter_documents(stream: Stream, lo: int, hi: int, docs: Documents) -> Iterator[str]:
    """The documents in rows [lo, hi); whitespace-only documents are dropped."""
    current: list[str] = []
    for i in range(lo, hi + 1):  # i == hi ends the last document
        if current and _ends_document(stream, i, lo, hi, docs):
            doc, current = "".join(current), []
            if not doc.isspace():
                yield doc
        if i < hi:
            current.append(stream.rows[i])
