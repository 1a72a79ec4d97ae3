"""The ``data`` node of the Hydra schema: :class:`DataConfig`, its enums and its errors. Checks
that need only the fields are in ``__post_init__``; those that read files (``check_data``) or
the network (``check_available``) live with that code. A check never changes the config.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

import tiktoken
from omegaconf import OmegaConf

from tiedvsuntied.results.identity import Role, option

MIN_BPE_VOCAB, MAX_BPE_VOCAB = 258, 65536  # one merge at least; token ids fit uint16
#: The default corpus and GPT-2's tokenizer files, shipped with the package (its README.md)
SHIPPED = Path(__file__).resolve().parent / "shipped"


class DataError(ValueError):
    """A data configuration or input problem; one line naming the key/file and valid values."""


class DataUnavailableError(RuntimeError):
    """A corpus or tokenizer file could not be fetched (no network) and is not cached locally."""


class Source(str, Enum):
    hub = "hub"  # datasets.load_dataset(path, config, revision=...)
    text = "text"  # local UTF-8 text files


class Documents(str, Enum):
    """What an end-of-text token separates (docs/data.md, "Documents")."""

    auto = "auto"  # file for text; wikitext for Hub paths containing "wikitext"; else row
    wikitext = "wikitext"  # articles: a " = Title = " row between blank rows starts one
    row = "row"  # every dataset row, or every line of a text file
    paragraph = "paragraph"  # text only: blocks between blank lines
    file = "file"  # a whole file (text) or a whole split (Hub)


class Split(str, Enum):
    """How held-out text is chosen (docs/data.md, "Held-out splits")."""

    tail = "tail"  # contiguous tails of train (by characters), for sources without such splits
    document = "document"  # whole documents (or groups of them), seeded, into rotating folds


class Vocab(str, Enum):
    full = "full"  # every token of the encoding (GPT-2: 50,257; a small corpus uses a fraction)
    seen = "seen"  # only the corpus's tokens, renumbered: a closed vocabulary (word-level LMs)


def shipped(name: str) -> str:
    """``${shipped:NAME}`` in a config (conf/data/tinyshakespeare.yaml): the path of a file shipped
    with the package, wherever it is installed."""
    path = SHIPPED / name
    if not path.is_file():
        names = sorted(p.name for p in SHIPPED.iterdir() if p.suffix != ".md")
        raise DataError(f"${{shipped:{name}}}: no such file in {SHIPPED}; shipped: {names}")
    return str(path)


# Registered where the schema is defined, so that every config that composes it resolves it.
OmegaConf.register_new_resolver("shipped", shipped, replace=True)


def _enum_value(key: str, enum: type[Enum], value: Any) -> Enum:
    try:
        return enum(value)
    except ValueError:
        valid = [member.value for member in enum]
        raise DataError(f"data.{key}={value!r} is not valid; valid: {valid}") from None


@dataclass
class DataConfig:
    """The ``data`` node of the Hydra schema (conf/data/<name>.yaml); consumed by prepare_data."""

    #: label: cache folder name, run names (not in the cache key)
    name: str = "wikitext2"
    #: hub: datasets.load_dataset(path, config); text: local UTF-8 files (data.files)
    source: Source = Source.hub
    #: hub: the dataset's repo id (or a local dataset folder)
    path: str = "Salesforce/wikitext"
    #: hub: the dataset's config name
    config: str | None = "wikitext-2-raw-v1"
    #: hub: pin a commit/tag for reproducibility
    revision: str | None = None
    #: hub: the column holding the text
    text_column: str = "text"
    #: text: PATH, [PATHS] or {train: A, validation: B, test: C}
    files: Any = option(None, role=Role.record)  # identity: the corpus fingerprint instead
    #: the source's split names; a val/test split that is null (or the default, absent) is held
    #: out of train
    train_split: str = "train"
    val_split: str | None = "validation"
    test_split: str | None = "test"
    #: a held-out split is this fraction of train's characters (its contiguous tail), in [0, 1)
    val_fraction: float = 0.05
    test_fraction: float = 0.05
    #: what an end-of-text token separates
    documents: Documents = Documents.auto
    #: tail: held-out splits are tails of train; document: whole documents shuffled with
    #: split_seed into ``folds`` folds: test is heldout_fold, validation the next, train the rest
    split: Split = option(Split.tail, neutral="tail")
    folds: int = option(10, neutral=10)
    heldout_fold: int = option(0, neutral=0)
    split_seed: int = option(0, neutral=0)
    #: document split: a TSV with a ``file`` column (names relative to the TSV's folder) whose
    #: ``group_by`` column keeps documents together (e.g. author: translations of one work stay
    #: on one side); null: every document is its own group
    manifest: str | None = option(None, neutral=None)
    group_by: str | None = option(None, neutral=None)
    #: a tiktoken encoding name, "bytes" (built in: V = 257, no download) or "bpe": a byte-level
    #: BPE of ``vocab_size`` tokens trained on this corpus's training split (data/bpe.py)
    encoding: str = "gpt2"
    #: bpe: the vocabulary's size, end-of-text included (256 bytes + merges + 1); else null
    vocab_size: int | None = option(None, neutral=None)
    #: seen: only the corpus's tokens (train, val or test), renumbered
    vocab: Vocab = Vocab.full
    #: None -> $TIEDVSUNTIED_CACHE or ~/.cache/tiedvsuntied
    cache_dir: str | None = option(None, role=Role.record)
    #: tokenizer threads; 0 = all available cores
    num_threads: int = option(0, role=Role.record)

    def __post_init__(self) -> None:
        source = _enum_value("source", Source, self.source)
        documents = _enum_value("documents", Documents, self.documents)
        _enum_value("vocab", Vocab, self.vocab)
        for key in ("val_fraction", "test_fraction"):
            if not 0.0 <= getattr(self, key) < 1.0:
                raise DataError(f"data.{key}={getattr(self, key)!r} must be in [0, 1)")
        if self.val_fraction + self.test_fraction >= 1.0:
            raise DataError("data.val_fraction + data.test_fraction >= 1 leaves nothing for train")
        encodings = sorted([*tiktoken.list_encoding_names(), "bytes", "bpe"])  # built here
        if self.encoding not in encodings:
            raise DataError(f"data.encoding={self.encoding!r} is not valid; valid: {encodings}")
        self._check_vocab_size()
        self._check_document_split(source)
        if self.num_threads < 0:
            raise DataError(f"data.num_threads={self.num_threads} must be >= 0 (0 = all cores)")
        if source == Source.text and not self.files:
            raise DataError(
                "data.source=text needs data.files=PATH (or {train: A, validation: B, test: C})"
            )
        if source == Source.hub and not self.path:
            raise DataError("data.source=hub needs data.path (a Hub dataset id: org/name)")
        if source == Source.hub and documents == Documents.paragraph:
            raise DataError(
                "data.documents=paragraph needs data.source=text; hub: auto, wikitext, row or file"
            )

    def _check_vocab_size(self) -> None:
        if self.encoding != "bpe":
            if self.vocab_size is not None:
                raise DataError(
                    f"data.vocab_size={self.vocab_size} applies to data.encoding=bpe only "
                    f"(data.encoding={self.encoding} has its own vocabulary)"
                )
            return
        if self.vocab_size is None or not MIN_BPE_VOCAB <= self.vocab_size <= MAX_BPE_VOCAB:
            raise DataError(
                f"data.encoding=bpe needs data.vocab_size in [{MIN_BPE_VOCAB}, {MAX_BPE_VOCAB}] "
                f"(256 bytes + merges + end-of-text), got {self.vocab_size}"
            )

    def _check_document_split(self, source: Source) -> None:
        if _enum_value("split", Split, self.split) != Split.document:
            return
        if source != Source.text or self.documents_mode() != Documents.file:
            raise DataError("data.split=document needs data.source=text and data.documents=file")
        if self.folds < 3:
            raise DataError(f"data.folds={self.folds} must be >= 3 (test, validation, train)")
        if not 0 <= self.heldout_fold < self.folds:
            raise DataError(
                f"data.heldout_fold={self.heldout_fold} must be in [0, data.folds={self.folds})"
            )
        if self.split_seed < 0:
            raise DataError(f"data.split_seed={self.split_seed} must be >= 0")
        if (self.group_by is None) != (self.manifest is None):
            raise DataError("data.group_by and data.manifest go together: set both or neither")

    def documents_mode(self) -> Documents:
        """``documents`` with ``auto`` resolved (an input of the cache key: never change it)."""
        if self.documents != Documents.auto:
            return Documents(self.documents)
        if self.source == Source.text:
            return Documents.file
        return Documents.wikitext if "wikitext" in self.path.lower() else Documents.row
