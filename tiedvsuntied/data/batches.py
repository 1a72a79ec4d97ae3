"""Token arrays -> batches: a training batch is a pure function of (seed, step, micro), so tied
and untied runs with one seed see identical batches and a resumed run sees what an uninterrupted
one would have; every evaluation reads the same evenly spaced windows of a split."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tiedvsuntied.data.baselines import window_baselines
from tiedvsuntied.data.config import DataError

_SAMPLER_STREAM = 0x7E1D_5A3B  # separates the batch stream from any other use of the same seed


def _check_windows(tokens, block_size: int) -> int:
    """len(tokens), where it holds a window (block_size, batch_size >= 1: the configs check)."""
    split = Path(str(getattr(tokens, "filename", None) or "split")).stem  # a memmap's file
    if len(tokens) < block_size + 1:
        raise DataError(
            f"split {split!r} has {len(tokens)} tokens, fewer than one window of "
            f"block_size+1 = {block_size + 1}; use a smaller block_size or more data"
        )
    return len(tokens)


def _windows(tokens, starts: np.ndarray, block_size: int):
    import torch

    w = torch.from_numpy(
        np.asarray(tokens[starts[:, None] + np.arange(block_size + 1)], dtype=np.int64)
    )
    return w[:, :-1].contiguous(), w[:, 1:].contiguous()


@dataclass(eq=False)
class BatchSampler:
    """Training windows. Random: ``batch_size`` starts drawn uniformly (with replacement) by a
    generator seeded by (seed, step, micro) only. ``once``: the split cut into back-to-back
    windows taken in one seeded order, so no token is a target twice; asking past the last window
    is an error (``train.config.check_budget`` says so before training)."""

    tokens: Any
    block_size: int
    batch_size: int
    seed: int = 0
    once: bool = False
    grad_accum: int = 1

    def __post_init__(self):
        self.n = _check_windows(self.tokens, self.block_size)
        self.order = None
        if self.once:
            seq = np.random.SeedSequence([_SAMPLER_STREAM, self.seed, 1])
            windows = (self.n - 1) // self.block_size
            self.order = np.random.Generator(np.random.PCG64(seq)).permutation(windows)

    def starts(self, step: int, micro: int = 0) -> np.ndarray:
        if self.order is not None:
            first = (int(step) * self.grad_accum + int(micro)) * self.batch_size
            if first + self.batch_size > len(self.order):
                raise DataError(f"step {step} is past one pass over the training windows")
            return self.order[first : first + self.batch_size] * self.block_size
        seq = np.random.SeedSequence([_SAMPLER_STREAM, self.seed, int(step), int(micro)])
        rng = np.random.Generator(np.random.PCG64(seq))
        return rng.integers(0, self.n - self.block_size, size=self.batch_size, dtype=np.int64)

    def get(self, step: int, micro: int = 0):
        return _windows(self.tokens, self.starts(step, micro), self.block_size)

    def read(self, steps: int) -> np.ndarray:
        """The windows (``block_size + 1`` tokens each, as rows) that steps 0 .. ``steps`` − 1
        read, every micro-batch's: the text a run of that many steps trained on."""
        starts = [self.starts(s, m) for s in range(int(steps)) for m in range(self.grad_accum)]
        return np.asarray(
            self.tokens[np.concatenate(starts)[:, None] + np.arange(self.block_size + 1)]
        )


def eval_window_starts(n_tokens: int, block_size: int, max_windows: int | None = 0) -> np.ndarray:
    """Evenly spaced, non-overlapping windows of block_size+1 tokens from the first to the last
    possible position; at most max_windows (None or <= 0: all that fit)."""
    fit = n_tokens // (block_size + 1)
    k = min(max_windows, fit) if max_windows and max_windows > 0 else fit
    if k <= 1:
        return np.zeros(k, dtype=np.int64)
    # floor(i * span / (k-1)) with span / (k-1) >= block_size+1: the windows never overlap
    return np.arange(k, dtype=np.int64) * (n_tokens - block_size - 1) // (k - 1)


def iter_eval_batches(tokens, block_size: int, batch_size: int, max_windows: int = 0) -> Iterator:
    """(x, y) int64 batches over the same fixed windows every time; the last may be smaller."""
    starts = eval_window_starts(_check_windows(tokens, block_size), block_size, max_windows)
    for i in range(0, len(starts), batch_size):
        yield _windows(tokens, starts[i : i + batch_size], block_size)


@dataclass(frozen=True)
class EvalSet:
    """A held-out split's fixed evaluation windows and what is known of them before any model
    sees them: worked out once per run (at set-up), read by every evaluation of it."""

    windows: np.ndarray  # (n, block_size + 1) token ids: inputs [:, :-1], targets [:, 1:]
    bytes_per_token: float  # UTF-8 bytes per target token (end-of-text: 0)
    baselines: dict | None  # the count models' per window: data.baselines.window_baselines
    documents: tuple[np.ndarray, list[str]] | None  # each window's document, their names

    @classmethod
    def of(cls, corpus, split: str, block_size: int, max_windows: int, baselines: bool = True):
        """``split``'s windows (:func:`eval_window_starts`); ``baselines``: with the count
        models' scores (fitted on train, cached beside the corpus)."""
        tokens = corpus.tokens(split)
        starts = eval_window_starts(_check_windows(tokens, block_size), block_size, max_windows)
        windows = np.asarray(tokens[starts[:, None] + np.arange(block_size + 1)])
        documents = corpus.documents(split)
        if documents is not None:  # a window belongs to the document it starts in
            first, names = documents
            documents = np.searchsorted(first, starts, side="right") - 1, names
        return cls(
            windows,
            float(corpus.token_bytes[windows[:, 1:]].mean()),
            window_baselines(corpus, split, windows, max_windows) if baselines else None,
            documents,
        )
