"""The end-to-end tests of tests/unit/test_results.py: they start processes or train runs to the
end."""

from __future__ import annotations

import logging
import socket

import pytest

from tiedvsuntied.results import metrics_log as M
from tiedvsuntied.results import records as R


@pytest.mark.slow
def test_wandb_auto_goes_offline_when_the_server_does_not_answer(monkeypatch, tmp_path, caplog):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    with socket.socket() as closed:  # a port nobody listens on: the server is unreachable
        closed.bind(("127.0.0.1", 0))
        monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{closed.getsockname()[1]}")
    config = M.WandbConfig(mode=M.WandbMode.auto, init_timeout=2)
    run_dir = tmp_path / "sweep" / "run"  # the verdict is kept in the sweep's folder
    run_dir.mkdir(parents=True)
    with caplog.at_level(logging.WARNING), M.MetricsLog(run_dir, None) as m:
        record = R.RunSummary("run", "n", "sweep", tie=True, init_std="1.0", model="nano", seed=0)
        m.start_wandb(config, record, config={})
        m.log({"train/loss": 1.0}, 1)
    assert record.wandb_mode == "offline" and "wandb sync" in caplog.text
    assert "k" * 40 not in caplog.text
