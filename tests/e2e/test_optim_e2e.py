"""The end-to-end tests of tests/unit/test_optim.py: runs trained in-process past a few steps."""

from __future__ import annotations

import pytest
from conftest import QUICK, compose

from tiedvsuntied.results import records as R
from tiedvsuntied.train.optim import (
    lr_at,
)
from tiedvsuntied.train.trainer import train


def test_a_run_records_its_scales_and_logs_each_embedding_side_lr(tmp_path):
    cfg = compose(*QUICK, f"results_dir={tmp_path}", "init_std=1.0", "optim.lr_scaling=init_std")
    summary = train(cfg)
    assert summary.status == R.Status.finished, summary.error
    expected = {"body": 1.0, "body_no_decay": 1.0, "tied": 50.0}
    assert summary.lr_scales == pytest.approx(expected)
    run_dir = tmp_path / summary.sweep / summary.run_id
    assert R.read_summary(run_dir).lr_scales == pytest.approx(expected)
    assert R.read_config(run_dir)["derived"]["lr_scales"] == pytest.approx(expected)
    logged = [m for m in R.read_metrics(run_dir) if "train/lr" in m]
    assert len(logged) >= 2
    for m in logged:  # train/lr stays the body's
        assert m["train/lr_tied"] == pytest.approx(50 * m["train/lr"])
        assert "train/lr_wte" not in m and "train/lr_lm_head" not in m


def test_a_wsd_run_of_the_scaled_tied_arm_trains_at_the_schedule_it_logs(tmp_path):
    """A real run of the third edition's instruments together: every logged lr is lr_at's (the
    update of step k - 1 is logged at step k), and the run records both keys."""
    steps = ["trainer.max_steps=8", "trainer.log_interval=1", "optim.warmup_steps=2"]
    wsd = ["optim.schedule=wsd", "optim.decay_frac=0.5", "+arm=tied_in_grad"]
    cfg = compose(*QUICK, *steps, *wsd, f"results_dir={tmp_path}")
    summary = train(cfg)
    assert summary.status == R.Status.finished, summary.error
    run_dir = tmp_path / summary.sweep / summary.run_id
    logged = {m["step"]: m["train/lr"] for m in R.read_metrics(run_dir) if "train/lr" in m}
    assert sorted(logged) == list(range(1, 9))
    assert logged == {k: pytest.approx(lr_at(k - 1, cfg.optim, 8)) for k in logged}
    assert logged[5] > logged[6] > logged[7] > logged[8]  # steps 4..7 decay
    config = R.read_config(run_dir)
    assert config["optim"]["schedule"] == "wsd" and config["head"]["tied_input_grad_scale"] == 4
