"""What an evaluation reports (tiedvsuntied.train.evaluation) from the evaluation set a run made
once at set-up (data.batches.EvalSet): no model, no run."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tiedvsuntied.data.baselines import bits_per_byte
from tiedvsuntied.data.batches import EvalSet
from tiedvsuntied.train.evaluation import heldout


def test_the_held_out_report_is_the_windows_loss_beside_the_count_models_per_document():
    losses = np.array([3.0, 4.0, 5.0, 6.0, 8.0], dtype=np.float32)
    baselines = {
        "unigram": np.array([5.0, 6.0, 7.0, 8.0, 9.0]),
        "bigram": np.array([4.0, 4.5, 5.0, 5.5, 6.5]),
        "unseen": np.array([0.0, 0.5, 0.0, 0.0, 0.25]),
    }
    which = np.array([0, 0, 2, 2, 2])  # "b" starts no window: it is left out
    held = EvalSet(np.zeros((5, 9), np.uint16), 2.5, baselines, (which, ["a", "b", "c"]))
    out = heldout(held, {"windows": losses})
    table = {"loss": losses, **baselines}
    for key, values in table.items():
        assert out[key] == pytest.approx(values.mean(), rel=1e-12)
    assert out["n_windows"] == 5 and out["bytes_per_token"] == 2.5
    for key in ("loss", "unigram", "bigram"):
        assert out[f"{key}_bpb"] == out[key] / math.log(2) / 2.5 == bits_per_byte(out[key], 2.5)
    documents = out["documents"]
    assert list(documents) == ["a", "c"]
    for name, rows in (("a", which == 0), ("c", which == 2)):
        assert documents[name]["n_windows"] == rows.sum()
        for key, values in table.items():
            assert documents[name][key] == pytest.approx(values[rows].mean(), rel=1e-12)
    n = np.array([d["n_windows"] for d in documents.values()])
    for key in table:  # the documents pool to the split by their windows; the split's loss is
        pooled = np.array([d[key] for d in documents.values()]) @ n / n.sum()  # a float32 mean
        assert pooled == pytest.approx(out[key], rel=float(np.finfo(np.float32).eps))


def test_a_split_without_documents_reports_the_pooled_numbers_alone():
    baselines = {key: np.ones(3) for key in ("unigram", "bigram", "unseen")}
    held = EvalSet(np.zeros((3, 5), np.uint16), 1.0, baselines, None)
    out = heldout(held, {"windows": np.array([1.0, 2.0, 3.0], dtype=np.float32)})
    assert "documents" not in out and out["loss"] == 2.0 and out["unseen"] == 1.0
