"""Vocabularies trained on the corpus (``data.encoding=bpe``, ``data.vocab_size=N``): a
byte-level BPE learned by Hugging Face ``tokenizers`` from the training split alone (held-out
documents never shape the tokenizer), then run by tiktoken like GPT-2's own encoding.

Why both libraries: ``tokenizers`` trains (deterministically: the same merges at any thread
count, and a smaller vocabulary's merges are a prefix of a larger one's, checked in
tests/unit/test_bpe.py); tiktoken encodes the corpus as it does every other encoding here, so the
cache, the bytes per token and the count baselines take one path. Byte-level BPE and GPT-2's
pre-tokenizing pattern, as GPT-2's vocabulary was made: ids 0-255 are the bytes, 256... the
merges in the order learned (tiktoken's rank = merge priority), the last id is end-of-text.

The merges are written once into the corpus's cache folder (``tokenizer.json``): the corpus
identity (data/cache.py) names the training split's files, ``BPE_VERSION`` and N, so a
tokenizer is part of the data's identity and trained once per fold and size.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import tiktoken

from tiedvsuntied.data.config import DataError
from tiedvsuntied.results.io import atomic_write

#: Bump when the training procedure changes: a new identity, so a new cache entry.
BPE_VERSION = 1
EOT = "<|endoftext|>"
#: GPT-2's pre-tokenizer (tiktoken's r50k pattern; ``tokenizers``' ByteLevel regex is the same)
PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def _byte_of_char() -> dict[str, int]:
    """The inverse of GPT-2's bytes_to_unicode: printable non-space bytes stand for themselves,
    the others for chr(256 + n) in byte order (as tiktoken.load reads GPT-2's merges file)."""
    printable = [b for b in range(256) if chr(b).isprintable() and chr(b) != " "]
    others = [b for b in range(256) if b not in printable]
    return {chr(b): b for b in printable} | {chr(256 + n): b for n, b in enumerate(others)}


def train_merges(documents: Iterable[str], vocab_size: int) -> list[bytes]:
    """The merged tokens, in the order ``tokenizers`` learned them (vocab_size - 257 at most)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOT],  # counted in vocab_size, never merged
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # all 256 bytes, seen or not
        show_progress=False,
    )
    tokenizer.train_from_iterator(documents, trainer=trainer)
    byte = _byte_of_char()
    merges = json.loads(tokenizer.to_str())["model"]["merges"]
    return [bytes(byte[c] for c in left + right) for left, right in merges]


def encoding(merges: list[bytes], name: str) -> tiktoken.Encoding:
    ranks = {bytes([b]): b for b in range(256)} | {m: 256 + i for i, m in enumerate(merges)}
    if len(ranks) != 256 + len(merges):
        raise DataError(f"{name}: the trained merges repeat a token (a corrupt tokenizer.json?)")
    return tiktoken.Encoding(
        name=name, pat_str=PATTERN, mergeable_ranks=ranks, special_tokens={EOT: len(ranks)}
    )


def load(folder: Path, vocab_size: int) -> tiktoken.Encoding | None:
    """The corpus's trained tokenizer, or None where it has not been trained (or is unreadable:
    it is trained again, deterministically the same)."""
    try:
        saved = json.loads((folder / "tokenizer.json").read_text())
        merges = [bytes.fromhex(m) for m in saved["merges"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if saved.get("vocab_size") != vocab_size or saved.get("bpe_version") != BPE_VERSION:
        return None
    return encoding(merges, f"bpe{vocab_size}")


def train(folder: Path, documents: Iterable[str], vocab_size: int) -> tiktoken.Encoding:
    """Train on ``documents`` (the training split's) and keep the merges in ``folder``; the
    caller holds the corpus's lock. A split too small for vocab_size - 257 merges gives fewer
    (the vocabulary is what the text supports, recorded as the run's vocab_size)."""
    import tokenizers

    merges = train_merges(documents, vocab_size)
    record = {
        "bpe_version": BPE_VERSION,
        "vocab_size": vocab_size,
        "n_merges": len(merges),
        "tokenizers": tokenizers.__version__,
        "merges": [m.hex() for m in merges],
    }
    atomic_write(folder / "tokenizer.json", json.dumps(record))
    return encoding(merges, f"bpe{vocab_size}")
