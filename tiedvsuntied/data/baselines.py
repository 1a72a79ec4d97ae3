"""Count-model reference points, fitted on the training split's tokens and scored on the models'
held-out targets in nats per predicted token: a smoothed unigram and an interpolated Kneser-Ney
bigram over the whole vocabulary (every loss finite). A transformer that has not beaten the
bigram has learned little beyond counts. Formulas: docs/data.md, "Count baselines". No torch.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import numpy as np

from tiedvsuntied.data.config import DataError


def bits_per_byte(nats_per_token: float, bytes_per_token: float) -> float:
    """A loss comparable across vocabularies: the windows' nats over ln 2 and their bytes."""
    return nats_per_token / math.log(2) / bytes_per_token


@dataclass(frozen=True)
class CountModels:
    """Fitted unigram and bigram counts (in memory only); build with :func:`fit`."""

    vocab_size: int
    discount: float
    n_train: int  # training tokens N
    unigram_counts: np.ndarray  # c(w), int64 [V]
    pair_ids: np.ndarray  # the distinct training pairs as prev * V + next, sorted int64
    pair_counts: np.ndarray  # c(v, w) of each
    context_counts: np.ndarray  # c(v): training pairs with context v, int64 [V]
    backoff: np.ndarray  # the weight of p_cont after v: D * N1+(v .) / c(v), 1 if c(v) = 0
    continuation: np.ndarray  # p_cont(w), float64 [V]


def _check_tokens(
    tokens: np.ndarray, vocab_size: int, what: str, min_len: int, ndim=(1,)
) -> np.ndarray:
    """An integer array of ``ndim`` dimensions (a stream, or rows of stretches of one) whose last
    axis holds at least ``min_len`` tokens, all in [0, V); else a DataError."""
    tokens = np.asarray(tokens)
    shape = " or ".join(f"{n}-D" for n in ndim)
    if tokens.ndim not in ndim or not np.issubdtype(tokens.dtype, np.integer):
        raise DataError(
            f"{what} must be a {shape} integer array, got {tokens.dtype} {tokens.shape}"
        )
    if tokens.shape[-1] < min_len or not tokens.size:
        raise DataError(f"{what} needs at least {min_len} tokens, got {tokens.shape[-1]}")
    low, high = int(tokens.min()), int(tokens.max())
    if low < 0 or high >= vocab_size:
        raise DataError(f"{what} has tokens outside [0, {vocab_size}): min {low}, max {high}")
    # uint64 does not mix with int64 pair ids (numpy would go through float64); the values are
    # below V now, so the cast loses nothing. Every other integer type is used as it is.
    return tokens if np.can_cast(tokens.dtype, np.int64) else tokens.astype(np.int64)


def _count_pairs(rows: np.ndarray, vocab_size: int) -> tuple[np.ndarray, np.ndarray]:
    """The pairs of each row of ``rows`` (2-D: no pair crosses rows) as ``np.unique(prev * V +
    next, return_counts=True)`` at 60% of its peak memory (measured with tracemalloc on 20 M
    random tokens: 0.46 GB instead of 0.78 GB): the ids are sorted in place rather than copied,
    and freed before the counts are taken."""
    ids = rows[:, :-1].astype(np.int64).reshape(-1)  # a new array: the reshape is a view
    ids *= vocab_size
    ids += rows[:, 1:].reshape(-1)
    ids.sort()
    new = np.empty(len(ids), dtype=bool)
    new[0] = True
    np.not_equal(ids[1:], ids[:-1], out=new[1:])
    distinct = ids[new]
    n_pairs = len(ids)
    del ids
    first = np.flatnonzero(new)
    del new
    counts = np.empty_like(first)  # np.diff(first, append=n) would allocate two more arrays
    np.subtract(first[1:], first[:-1], out=counts[:-1])
    counts[-1] = n_pairs - first[-1]
    return distinct, counts


def fit(train_tokens: np.ndarray, vocab_size: int, *, discount: float = 0.75) -> CountModels:
    """Count unigrams and bigrams of ``train_tokens``: ints in [0, V), 1-D (one stream, e.g. a
    memmap) or 2-D (rows, each a stretch of text, e.g. the windows a run read: no pair crosses
    from one row to the next, and a token two rows share counts in both)."""
    # D > 1 would take more than a pair's count; D = 0 would leave unseen pairs at probability 0.
    if not 0 < discount <= 1:
        raise DataError(f"discount must be in (0, 1], got {discount}")
    tokens = _check_tokens(train_tokens, vocab_size, "train_tokens", min_len=2, ndim=(1, 2))
    rows = tokens.reshape(-1, tokens.shape[-1])  # a stream is one row (a view, even of a memmap)
    pair_ids, pair_counts = _count_pairs(rows, vocab_size)
    # c(v) counts contexts, not tokens: a row's last token is no context, and the bigram's
    # normalisation needs exactly the pairs' total.
    context_counts = np.bincount(rows[:, :-1].reshape(-1), minlength=vocab_size).astype(np.int64)
    # N1+(v .) and N1+(. w), one int64 temporary at a time (each as large as the distinct pairs).
    followers = np.bincount(pair_ids // vocab_size, minlength=vocab_size)
    preceders = np.bincount(pair_ids % vocab_size, minlength=vocab_size)
    seen = context_counts > 0
    backoff = np.ones(vocab_size)
    backoff[seen] = discount * followers[seen] / context_counts[seen]
    return CountModels(
        vocab_size=vocab_size,
        discount=float(discount),
        n_train=rows.size,
        unigram_counts=np.bincount(rows.reshape(-1), minlength=vocab_size).astype(np.int64),
        pair_ids=pair_ids,
        pair_counts=pair_counts,
        context_counts=context_counts,
        backoff=backoff,
        continuation=(preceders + 1.0) / (len(pair_ids) + vocab_size),
    )


def unigram_probs(models: CountModels) -> np.ndarray:
    """p(w) for every w in V."""
    return (models.unigram_counts + 1.0) / (models.n_train + models.vocab_size)


def _pair_counts(models: CountModels, prev: np.ndarray, nxt: np.ndarray) -> np.ndarray:
    """c(v, w) for each query pair (0 for a pair never seen), by binary search of the pair ids."""
    query = prev.astype(np.int64) * models.vocab_size + nxt
    # Searching in sorted order is ~10x faster on 20 M pairs (measured: 0.12 s instead of 1.45 s
    # for 1 M queries): numpy starts each search from the last one, so memory is read in order.
    order = np.argsort(query, kind="stable")
    at = np.empty(len(query), dtype=np.int64)
    at[order] = np.searchsorted(models.pair_ids, query[order])
    at[at == len(models.pair_ids)] = 0  # past the end: not found (checked just below)
    found = models.pair_ids[at] == query
    return np.where(found, models.pair_counts[at], 0)


def bigram_prob(models: CountModels, prev: np.ndarray, nxt: np.ndarray) -> np.ndarray:
    """p(nxt | prev), elementwise: the one place the Kneser-Ney formula is written."""
    prev, nxt = np.asarray(prev), np.asarray(nxt)
    discounted = np.maximum(_pair_counts(models, prev, nxt) - models.discount, 0.0)
    # An unseen context has c(v, w) = 0 for every w, so only its backoff term (weight 1) is left;
    # the max(., 1) merely avoids 0/0 there.
    first = discounted / np.maximum(models.context_counts[prev], 1)
    return first + models.backoff[prev] * models.continuation[nxt]


def _check_starts(starts: np.ndarray, n: int) -> np.ndarray:
    starts = np.asarray(starts)
    if starts.ndim != 1 or not len(starts) or not np.issubdtype(starts.dtype, np.integer):
        raise DataError(f"starts must be a non-empty 1-D integer array, got {starts!r:.80}")
    if starts[0] != 0:
        raise DataError(f"starts must begin at 0 (the first document), got {starts[0]}")
    if np.any(np.diff(starts) <= 0):
        raise DataError("starts must be strictly increasing")
    if starts[-1] >= n:
        raise DataError(f"starts must lie within the {n} tokens, got {starts[-1]}")
    return starts.astype(np.int64)


def score_documents(models: CountModels, tokens: np.ndarray, starts: np.ndarray) -> dict:
    """Per document ``tokens[starts[d]:starts[d + 1]]``, arrays of the mean NLL of its targets
    (its tokens after its first) under both models, ``unseen_frac`` (the share of targets with
    training count 0) and ``n_tokens`` (targets; a one-token document has none: NaN means).

    The pair that crosses into a document (e.g. into its leading ``eot``) belongs to neither, so
    the documents pooled by ``n_tokens`` are the whole stream without those pairs;
    ``starts=[0]`` scores one stream."""
    tokens = _check_tokens(tokens, models.vocab_size, "tokens", min_len=1)
    starts = _check_starts(starts, len(tokens))
    prev, targets = tokens[:-1], tokens[1:]
    losses = (
        -np.log(unigram_probs(models))[targets],
        -np.log(bigram_prob(models, prev, targets)),
        models.unigram_counts[targets] == 0,
    )
    # Pair i predicts tokens[i + 1]; it lies in the document of position i unless i + 1 starts one.
    document = np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, len(tokens)]))[:-1]
    inside = np.ones(len(document), dtype=bool)
    inside[starts[1:] - 1] = False
    document = document[inside]
    n_docs = len(starts)
    n_tokens = np.bincount(document, minlength=n_docs)
    with np.errstate(invalid="ignore", divide="ignore"):  # NaN for a document with no targets
        means = [
            np.bincount(document, weights=values[inside], minlength=n_docs) / n_tokens
            for values in losses
        ]
    return {"unigram": means[0], "bigram": means[1], "unseen_frac": means[2], "n_tokens": n_tokens}


_FITTED: dict[tuple[str, str], CountModels] = {}  # a process fits each corpus once
_WINDOW_KEYS = ("unigram", "bigram", "unseen")


def window_baselines(corpus, split: str, windows: np.ndarray, max_windows: int) -> dict:
    """``{"unigram", "bigram", "unseen"}``: arrays over the evaluation ``windows`` of ``split``
    (``data.batches.EvalSet``: those every run's loss is measured on, ``max_windows`` of them at
    most) of the count models' mean NLL and the unseen share; kept beside the cache entry
    (``vocab=seen`` renumbers its tokens: the fingerprint is in the name)."""
    from tiedvsuntied.results.io import atomic_write

    block_size = windows.shape[1] - 1
    path = corpus.dir / f"baselines-{corpus.fingerprint}-{split}-T{block_size}-w{max_windows}.npz"
    with contextlib.suppress(OSError, ValueError, KeyError), np.load(path) as saved:
        return {key: saved[key] for key in _WINDOW_KEYS}
    fitted = (str(corpus.dir), corpus.fingerprint)
    if fitted not in _FITTED:
        _FITTED[fitted] = fit(corpus.tokens("train"), corpus.vocab_size)
    out = score_windows(_FITTED[fitted], windows)
    atomic_write(path, lambda f: np.savez(f, **out))
    return out


def score_windows(models: CountModels, windows: np.ndarray) -> dict:
    """``{"unigram", "bigram", "unseen"}``: per window (a row of ``windows``, its tokens after
    the first the targets), the count models' mean NLL and the share of unseen targets."""
    scores = score_documents(models, windows.ravel(), np.arange(len(windows)) * windows.shape[1])
    scores["unseen"] = scores.pop("unseen_frac")
    return {key: scores[key] for key in _WINDOW_KEYS}
