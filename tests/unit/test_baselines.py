"""The count-model reference points (tiedvsuntied.data.baselines): unigram and KN bigram."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
from conftest import SHARED_DATA, needs_gpt2

from tiedvsuntied.data.baselines import bigram_prob, fit, score_documents, unigram_probs
from tiedvsuntied.data.config import DataError

GUTENBERG = SHARED_DATA / "gutenberg"

# A tiny corpus: V = 6, token 5 never occurs in training, token 4 never as a context.
TRAIN = np.array([0, 1, 2, 0, 1, 3, 0, 2, 2, 1, 0, 1, 4], dtype=np.uint16)
HELD_OUT = np.array([0, 1, 3, 5, 2, 4, 0, 0, 1, 5, 5], dtype=np.uint16)
V = 6


def score(models, tokens):
    """The whole stream as one document: floats."""
    out = score_documents(models, tokens, np.array([0]))
    return {k: v[0].item() for k, v in out.items()}


def reference_nll(train, held_out, vocab, discount=0.75):
    """Mean unigram and bigram NLL of held_out[1:], written out with dicts and loops, directly
    from the formulas (independent of the vectorised code); ``train``: a stream, or a list of
    rows (stretches of text: no pair crosses from one to the next)."""
    rows = [[int(t) for t in row] for row in (train if isinstance(train, list) else [train])]
    held_out = [int(t) for t in held_out]
    unigram = Counter(t for row in rows for t in row)
    n_train = sum(map(len, rows))
    pairs = Counter(pair for row in rows for pair in zip(row[:-1], row[1:], strict=True))
    context = Counter(v for v, _ in pairs.elements())
    followers = Counter(v for v, _ in pairs)
    preceders = Counter(w for _, w in pairs)

    def p_cont(w):
        return (preceders[w] + 1) / (len(pairs) + vocab)

    def p_bigram(v, w):
        if context[v] == 0:
            return p_cont(w)
        return max(pairs[(v, w)] - discount, 0) / context[v] + discount * followers[v] / context[
            v
        ] * p_cont(w)

    uni, bi = [], []
    for v, w in zip(held_out[:-1], held_out[1:], strict=True):
        uni.append(-math.log((unigram[w] + 1) / (n_train + vocab)))
        bi.append(-math.log(p_bigram(v, w)))
    return sum(uni) / len(uni), sum(bi) / len(bi)


def test_probabilities_sum_to_one_for_seen_and_unseen_contexts():
    rng = np.random.default_rng(0)
    vocab = 300
    # Zipf-ish tokens so that some contexts are frequent, some rare and some never seen.
    train = np.minimum(rng.zipf(1.3, size=5000) - 1, vocab - 1).astype(np.uint16)
    models = fit(train, vocab)
    seen = np.flatnonzero(models.context_counts)
    unseen = np.flatnonzero(models.context_counts == 0)
    assert len(unseen) > 0, "the test needs contexts never seen in training"
    for v in [*seen[:3], seen[-1], *unseen[:2], vocab - 1]:
        probs = bigram_prob(models, np.full(vocab, v), np.arange(vocab))
        assert probs.shape == (vocab,)
        assert np.all(probs > 0)
        assert abs(probs.sum() - 1) < 1e-9, v
    assert abs(unigram_probs(models).sum() - 1) < 1e-9


def test_unseen_context_falls_back_to_continuation():
    models = fit(TRAIN, V)
    # 4 is never followed by anything in training, 5 never occurs at all.
    for v in (4, 5):
        probs = bigram_prob(models, np.full(V, v), np.arange(V))
        np.testing.assert_array_equal(probs, models.continuation)


def _random_tokens():
    rng = np.random.default_rng(1)
    train = rng.integers(0, 35, size=3000, dtype=np.uint32)  # tokens 35..39 never seen
    return train, rng.integers(0, 40, size=500, dtype=np.uint32), 40


def _rows():
    """The stretches of text a run read: windows of one stream, in no order, some adjacent."""
    train, held_out, vocab = _random_tokens()
    starts = np.array([2000, 0, 64, 640, 128])  # 0 and 64, 64 and 128 share their edge token
    return train[starts[:, None] + np.arange(65)], held_out, vocab


@pytest.mark.parametrize("discount", [0.75, 0.3, 1.0])
@pytest.mark.parametrize("tokens", [lambda: (TRAIN, HELD_OUT, V), _random_tokens, _rows])
def test_values_match_a_loop_implementation_to_1e_12(tokens, discount):
    train, held_out, vocab = tokens()
    got = score(fit(train, vocab, discount=discount), held_out)
    uni, bi = reference_nll(list(train) if train.ndim == 2 else train, held_out, vocab, discount)
    assert got["unigram"] == pytest.approx(uni, abs=1e-12)
    assert got["bigram"] == pytest.approx(bi, abs=1e-12)
    assert got["n_tokens"] == len(held_out) - 1


def test_unseen_frac_counts_exactly_the_targets_with_zero_training_count():
    models = fit(TRAIN, V)
    # Targets HELD_OUT[1:] = 1 3 5 2 4 0 0 1 5 5: token 5 has training count 0, three times;
    # the first held-out token is no target, so a leading 5 would not count.
    assert score(models, HELD_OUT)["unseen_frac"] == pytest.approx(3 / 10)
    assert score(models, np.r_[5, HELD_OUT[1:]].astype(np.uint16))["unseen_frac"] == 0.3
    assert score(models, TRAIN)["unseen_frac"] == 0.0
    assert score(models, np.array([5, 5, 5]))["unseen_frac"] == 1.0


def test_fit_counts_the_pairs():
    models = fit(TRAIN, V)
    pairs = Counter(zip(TRAIN[:-1].tolist(), TRAIN[1:].tolist(), strict=True))
    decoded = {
        (int(i) // V, int(i) % V): int(c)
        for i, c in zip(models.pair_ids, models.pair_counts, strict=True)
    }
    assert decoded == dict(pairs)
    assert np.all(np.diff(models.pair_ids) > 0)
    np.testing.assert_array_equal(models.unigram_counts, np.bincount(TRAIN, minlength=V))
    # c(v) counts pairs, so the last training token (4) is not a context.
    assert models.context_counts[4] == 0 and models.unigram_counts[4] == 1
    assert models.context_counts.sum() == len(TRAIN) - 1


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.uint32, np.int64, np.uint64, "memmap"])
def test_any_integer_array_gives_the_same_numbers_and_is_left_untouched(dtype, tmp_path):
    expected = score(fit(TRAIN, V), HELD_OUT)
    if dtype == "memmap":
        TRAIN.tofile(tmp_path / "train.bin")
        train = np.memmap(tmp_path / "train.bin", dtype=np.uint16, mode="r")
        assert score(fit(train, V), HELD_OUT) == expected
        np.testing.assert_array_equal(np.fromfile(tmp_path / "train.bin", np.uint16), TRAIN)
    else:
        assert score(fit(TRAIN.astype(dtype), V), HELD_OUT.astype(dtype)) == expected


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: fit(np.array([0, 1, 6]), V), r"outside \[0, 6\)"),
        (lambda: fit(np.array([0, -1, 2]), V), r"outside \[0, 6\)"),
        (lambda: fit(np.array([0]), V), "at least 2"),
        (lambda: fit(np.zeros((2, 2, 2), dtype=int), V), "1-D or 2-D integer"),
        (lambda: fit(np.zeros((2, 1), dtype=int), V), "at least 2"),
        (lambda: fit(np.array([0.0, 1.0]), V), "1-D or 2-D integer"),
        (lambda: score(fit(TRAIN, V), np.zeros((2, 2), dtype=int)), "1-D integer"),
        (lambda: fit(TRAIN, V, discount=0), r"discount must be in \(0, 1\]"),
        (lambda: fit(TRAIN, V, discount=1.5), r"discount must be in \(0, 1\]"),
        (lambda: score(fit(TRAIN, V), np.array([3, 7])), r"outside \[0, 6\)"),
    ],
)
def test_bad_input_is_a_one_line_data_error(call, message):
    with pytest.raises(DataError, match=message) as info:
        call()
    assert "\n" not in str(info.value)


def test_documents_pool_to_the_stream_without_the_boundary_pairs():
    rng = np.random.default_rng(2)
    vocab = 50
    models = fit(rng.integers(0, vocab - 3, size=2000), vocab)
    tokens = rng.integers(1, vocab, size=400)
    starts = np.array([0, 7, 8, 50, 51, 200, 399])  # a one-token document at 7 and at 399
    tokens[starts[1:]] = 0  # eot begins every document but the first, as the cache lays it out
    per_doc = score_documents(models, tokens, starts)
    n = per_doc["n_tokens"]
    np.testing.assert_array_equal(n, [6, 0, 41, 0, 148, 198, 0])
    assert n.sum() == len(tokens) - len(starts)
    assert np.isnan(per_doc["bigram"][n == 0]).all()

    # The same targets, scored pair by pair with score() on each document's own tokens.
    bounds = np.r_[starts, len(tokens)]
    for d in np.flatnonzero(n):
        alone = score(models, tokens[bounds[d] : bounds[d + 1]])
        for key in ("unigram", "bigram", "unseen_frac"):
            assert per_doc[key][d] == pytest.approx(alone[key], abs=1e-12)

    # Pooled, weighted by tokens: the whole stream's mean less the pairs into a document.
    whole = score(models, tokens)
    for key in ("unigram", "bigram"):
        pooled = np.nansum(per_doc[key] * n) / n.sum()
        boundary = sum(score(models, tokens[s - 1 : s + 1])[key] for s in starts[1:])
        expected = (whole[key] * whole["n_tokens"] - boundary) / n.sum()
        assert pooled == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize(
    ("starts", "message"),
    [
        ([1, 4], "must begin at 0"),
        ([0, 4, 4], "strictly increasing"),
        ([0, 5, 3], "strictly increasing"),
        ([0, 11], "within the 11 tokens"),
        ([], "non-empty 1-D integer"),
        ([0.0, 2.0], "non-empty 1-D integer"),
    ],
)
def test_bad_starts_are_a_one_line_data_error(starts, message):
    with pytest.raises(DataError, match=message) as info:
        score_documents(fit(TRAIN, V), HELD_OUT, np.array(starts))
    assert "\n" not in str(info.value)


@needs_gpt2
def test_real_books_bigram_beats_unigram_beats_uniform():
    books = [GUTENBERG / "11-alices-adventures-in-wonderland.txt", GUTENBERG / "105-persuasion.txt"]
    if not all(book.exists() for book in books):
        pytest.skip(f"the Gutenberg books are not under {GUTENBERG} (set TIEDVSUNTIED_SHARED_DATA)")
    import tiktoken

    enc = tiktoken.get_encoding("gpt2")
    held_out, train = (
        np.array(enc.encode_ordinary(book.read_text(encoding="utf-8")), dtype=np.uint16)
        for book in books
    )
    vocab = enc.n_vocab
    result = score(fit(train, vocab), held_out)
    assert result["bigram"] < result["unigram"] < math.log(vocab)
    assert 0 < result["unseen_frac"] < 1
    assert result["n_tokens"] == len(held_out) - 1
