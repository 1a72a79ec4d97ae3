"""A run stopped by a signal after a checkpoint: the start of the resume tests of both tiers."""

from __future__ import annotations

import pytest
from conftest import QUICK, compose, stop_after_checkpoint

from tiedvsuntied.results import records as R
from tiedvsuntied.train.trainer import train


def interrupted_run(tmp_path, monkeypatch, *extra):
    """A run stopped by SIGTERM right after its checkpoint at step 2, as a scheduler stops it:
    its config and folder."""
    over = [*QUICK, "trainer.test_eval=false", "trainer.ckpt_interval=2", *extra]
    cfg = compose(*over, f"results_dir={tmp_path}")
    with monkeypatch.context() as patch:
        stop_after_checkpoint(patch, 2)
        with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
            train(cfg)
    (run_dir,) = [p for p in (tmp_path / cfg.sweep).iterdir() if p.is_dir()]
    assert (
        R.read_summary(run_dir).status == R.Status.interrupted and R.read_summary(run_dir).step == 2
    )
    return cfg, run_dir
