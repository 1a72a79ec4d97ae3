"""Token arrays -> batches (tiedvsuntied.data.batches): training batches a pure function of
(seed, step, micro), one pass without repeats (sampling=once), and fixed evaluation windows."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tiedvsuntied.data.baselines import fit, score_documents
from tiedvsuntied.data.batches import (
    BatchSampler,
    EvalSet,
    eval_window_starts,
    iter_eval_batches,
)
from tiedvsuntied.data.config import DataError


def test_batches_are_a_pure_function_of_seed_step_micro(corpus):
    tokens = corpus.tokens("train")
    tied, untied = BatchSampler(tokens, 64, 8, seed=3), BatchSampler(tokens, 64, 8, seed=3)
    torch.manual_seed(123)
    run_a = [tied.get(s, m) for s in range(6) for m in range(2)]
    torch.rand(5), np.random.rand(5)  # global RNG use in between must not matter
    run_b = [untied.get(s, m) for s in range(6) for m in range(2)]
    for a, b in zip(run_a, run_b, strict=True):
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    resumed = BatchSampler(tokens, 64, 8, seed=3)  # resumed at step 5: an uninterrupted run's
    assert all(torch.equal(resumed.get(5, m)[0], run_a[10 + m][0]) for m in range(2))
    assert not torch.equal(tied.get(0, 0)[0], tied.get(1, 0)[0])
    assert not torch.equal(tied.get(0, 0)[0], tied.get(0, 1)[0])
    assert not torch.equal(tied.get(0, 0)[0], BatchSampler(tokens, 64, 8, seed=4).get(0, 0)[0])
    state = torch.get_rng_state()
    tied.get(7)
    assert torch.equal(state, torch.get_rng_state())
    # the very draws of earlier versions: runs recorded before stay comparable
    s = BatchSampler(np.zeros(10_000, dtype=np.uint16), 64, 4, seed=3)
    assert s.starts(5, 1).tolist() == [8166, 9893, 7039, 6409]
    assert s.starts(0).tolist() == [9212, 1876, 6337, 7712]


def test_batch_windows_are_shifted_slices_of_the_split(corpus):
    tokens = np.asarray(corpus.tokens("train"))
    s = BatchSampler(corpus.tokens("train"), block_size=32, batch_size=5, seed=0)
    x, y = s.get(11, 2)
    assert x.dtype == y.dtype == torch.int64 and x.shape == y.shape == (5, 32)
    assert torch.equal(x[:, 1:], y[:, :-1])
    for start, row in zip(s.starts(11, 2), x, strict=True):
        assert np.array_equal(row.numpy(), tokens[start : start + 32])
    starts = np.concatenate([s.starts(i) for i in range(2000)])  # cover the whole split
    assert starts.min() < len(tokens) * 0.01
    assert len(tokens) - 33 >= starts.max() > len(tokens) * 0.99


def test_once_takes_every_training_window_at_most_once_in_a_seeded_order():
    tokens = np.arange(1000, dtype=np.uint16)
    sampler = BatchSampler(tokens, block_size=16, batch_size=4, seed=3, once=True, grad_accum=2)
    steps = (999 // 16) // 8  # 62 windows, 8 a step
    targets = [
        sampler.get(step, micro)[1].numpy().ravel() for step in range(steps) for micro in range(2)
    ]
    seen = np.concatenate(targets)
    assert len(np.unique(seen)) == len(seen)  # no token is a target twice
    again = BatchSampler(tokens, 16, 4, seed=3, once=True, grad_accum=2)
    other = BatchSampler(tokens, 16, 4, seed=4, once=True, grad_accum=2)
    assert (again.starts(5, 1) == sampler.starts(5, 1)).all()
    assert not (other.starts(0) == sampler.starts(0)).all()
    with pytest.raises(DataError, match="past one pass"):
        sampler.get(steps, 1)  # step 7 ends at window 64


@pytest.mark.parametrize("once", [True, False])
def test_the_text_a_run_read_is_every_window_its_steps_took_in_order(corpus, once):
    sampler = BatchSampler(corpus.tokens("train"), 16, 3, seed=2, once=once, grad_accum=2)
    rows = sampler.read(5)
    windows = [sampler.get(step, micro) for step in range(5) for micro in range(2)]
    assert rows.shape == (5 * 2 * 3, 17)
    np.testing.assert_array_equal(rows[:, :-1], torch.cat([x for x, _ in windows]).numpy())
    np.testing.assert_array_equal(rows[:, 1:], torch.cat([y for _, y in windows]).numpy())


def test_eval_windows_are_fixed_evenly_spaced_and_non_overlapping(corpus):
    val = corpus.tokens("val")
    n, T = len(val), 128
    first = list(iter_eval_batches(val, T, batch_size=3, max_windows=10))
    second = list(iter_eval_batches(val, T, batch_size=3, max_windows=10))
    assert [b[0].shape[0] for b in first] == [3, 3, 3, 1]
    for a, b in zip(first, second, strict=True):
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    starts = eval_window_starts(n, T, 10)
    assert len(starts) == 10 and starts[0] == 0 and starts[-1] == n - (T + 1)
    assert np.all(np.diff(starts) >= T + 1) and np.ptp(np.diff(starts)) <= 1
    x, y = first[1]
    assert np.array_equal(x[0].numpy(), np.asarray(val[starts[3] : starts[3] + T]))
    assert torch.equal(x[:, 1:], y[:, :-1])
    assert len({len(eval_window_starts(n, T, k)) for k in (10**9, None, 0)} | {n // (T + 1)}) == 1


def test_a_split_shorter_than_one_window_is_named(corpus):
    val = corpus.tokens("val")
    n = len(val)
    with pytest.raises(DataError, match=rf"split 'val' has {n} tokens.*block_size\+1 = {n + 1}"):
        BatchSampler(val, block_size=n, batch_size=2, seed=0)  # the name is read from the memmap
    with pytest.raises(DataError, match=rf"split 'val' has {n} tokens"):
        next(iter_eval_batches(val, block_size=n, batch_size=2, max_windows=4))
    BatchSampler(val, block_size=n - 1, batch_size=2, seed=0).get(0)  # exactly one window fits


def test_an_eval_set_holds_the_windows_every_evaluation_reads_and_what_is_known_of_them(corpus):
    """Worked out once at set-up: the windows iter_eval_batches yields, the bytes of their
    targets, the count models' scores of those very targets (cached beside the corpus)."""
    T, n = 64, 10
    held = EvalSet.of(corpus, "val", T, n)
    x, y = (
        torch.cat(b) for b in zip(*iter_eval_batches(corpus.tokens("val"), T, 3, n), strict=True)
    )
    windows = torch.from_numpy(held.windows.astype(np.int64))
    assert windows.shape == (n, T + 1)
    assert torch.equal(windows[:, :-1], x) and torch.equal(windows[:, 1:], y)
    # bytes: every byte-level token is one byte of text, end-of-text none
    assert held.bytes_per_token == (held.windows[:, 1:] != corpus.eot_token).mean()
    own = score_documents(
        fit(corpus.tokens("train"), corpus.vocab_size),
        held.windows.ravel(),
        np.arange(n) * (T + 1),
    )
    for key, ours in held.baselines.items():
        assert np.array_equal(ours, own["unseen_frac" if key == "unseen" else key])
    (cached,) = corpus.dir.glob(f"baselines-{corpus.fingerprint}-val-T{T}-w{n}.npz")
    with np.load(cached) as saved:
        assert all(np.array_equal(saved[k], v) for k, v in held.baselines.items())
    assert EvalSet.of(corpus, "val", T, n, baselines=False).baselines is None
