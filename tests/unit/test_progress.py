"""What a sweep has left to run, in run time (sweep.progress): each run's rate is that of the
finished runs of its size, the model and its vocabulary, whose head sets a step's cost."""

from __future__ import annotations

import pandas as pd
import pytest

from tiedvsuntied.results.records import RunSummary, Status
from tiedvsuntied.sweep import progress


def finished(sweep, name: str, vocab_size: int, seconds: float) -> None:
    run = RunSummary(name, name, "s", tie=True, init_std="0.02", model="micro", seed=0)
    run.vocab_size, run.step, run.max_steps, run.wall_time_s = vocab_size, 100, 100, seconds
    run.status = Status.finished
    (sweep / name).mkdir(parents=True)
    run.write(sweep / name)


def test_a_run_left_costs_the_rate_of_its_vocabulary_else_of_its_model(tmp_path):
    finished(tmp_path, "small-a", 1024, 30.0)
    finished(tmp_path, "large-a", 40960, 140.0)
    finished(tmp_path, "large-b", 40960, 150.0)
    rate = progress.rates([tmp_path])
    assert rate["micro V=1024"] == pytest.approx(0.3) and rate["micro V=40960"] == 1.45
    assert rate["micro"] == pytest.approx(1.4)  # the median of all three, for an unknown V
    left = pd.DataFrame(
        {
            "model": ["micro", "micro", "micro", "nano"],
            "vocab_size": [40960, 1024, None, 1024],
            "status": ["pending"] * 4,
            "step": [0, 50, 0, 0],
            "max_steps": [10, 100, 10, 10],
        }
    )
    seconds = progress.seconds_left(left, rate)
    assert list(seconds[:3]) == pytest.approx([14.5, 15.0, 14.0]) and pd.isna(seconds[3])
    assert "unknown for nano V=1024" in progress.cost_line(left, rate)
