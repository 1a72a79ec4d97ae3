"""What a run records, read back: summary.json and index.json round trips, metrics.jsonl across
a resume, W&B's mode where there are no credentials or no server, and secrets scrubbed."""

from __future__ import annotations

import dataclasses
import json
import logging
import socket

from conftest import REPO

from tiedvsuntied.results import metrics_log as M
from tiedvsuntied.results import records as R
from tiedvsuntied.results.secrets import scrub


def test_summary_round_trips_and_index_keeps_first_overrides(tmp_path):
    s = R.RunSummary(
        run_id="r",
        name="n",
        sweep="s",
        tie=True,
        init_std="1.0",
        model="nano",
        seed=0,
        best_val_loss=float("inf"),
    )
    s.write(tmp_path / "r")
    back = R.read_summary(tmp_path / "r")
    assert back.status == R.Status.running and back.best_val_loss == float("inf")
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["status"] == "running"
    R.update_index(tmp_path, "r", R.IndexEntry("n", R.Status.running, "r", overrides=["tie=true"]))
    R.update_index(tmp_path, "r", R.IndexEntry("n", R.Status.finished, "r"))
    assert R.read_index(tmp_path)["r"].overrides == ["tie=true"]
    assert R.read_index(tmp_path)["r"].status == R.Status.finished


def test_the_record_declares_each_field_once_and_reads_a_shipped_summary_back_as_written():
    """TrainState and Derived are parts of RunSummary: their fields are its fields, none declared
    again; a shipped summary.json (the newest bundle, all of today's keys) reads back to the same
    JSON, and the loop's own fields (LOOP_ONLY) are never written."""
    own = set(R.RunSummary.__annotations__)
    parts = [{f.name for f in dataclasses.fields(p)} for p in (R.TrainState, R.Derived)]
    assert not own & parts[0] and not own & parts[1] and not parts[0] & parts[1]
    assert {f.name for f in dataclasses.fields(R.RunSummary)} == own | parts[0] | parts[1]
    loop_only = {f.name for f in dataclasses.fields(R.RunSummary) if f.metadata == R.LOOP_ONLY}
    shipped = sorted((REPO / "experiments" / "sign_flip" / "results").glob("*/summary.json"))
    assert loop_only and shipped
    for path in shipped:
        written = json.loads(path.read_text())
        back = R.RunSummary.from_dict(written).to_dict()
        assert {k: back.get(k) for k in written} == written and not loop_only & set(back)


def test_metrics_resume_drops_lines_past_the_checkpoint_and_torn_lines(tmp_path):
    with M.MetricsLog(tmp_path, None) as m:
        for step in range(0, 50, 10):
            m.log(
                {"train/loss": float(step), "val/loss": float("nan") if step == 40 else 1.0}, step
            )
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"step": 45, "train/lo')  # a line cut by a kill
    assert R.read_metrics(tmp_path)[-1] == {
        "step": 40,
        "train/loss": 40.0,
        "val/loss": "nan",
    }  # JSON, not NaN
    with M.MetricsLog(tmp_path, 20) as m:
        m.log({"train/loss": 30.0}, 30)
    assert [r["step"] for r in R.read_metrics(tmp_path)] == [0, 10, 20, 30]
    with M.MetricsLog(tmp_path, None) as m:  # no checkpoint: trained again from step 0
        m.log({"train/loss": 0.5}, 0)
    assert [r["step"] for r in R.read_metrics(tmp_path)] == [0]
    old = [json.loads(line)["step"] for line in (tmp_path / "metrics.jsonl.old").open()]
    assert old == [0, 10, 20, 30]  # the earlier lines are kept, not emptied


def test_an_unreadable_line_other_than_a_cut_last_one_is_named(tmp_path, caplog):
    """A kill cuts at most the last line (no newline): skipped in silence. Any other unreadable
    line is damage: skipped, and the warning names its number."""
    good = [json.dumps({"step": s, "train/loss": 1.0}) for s in range(3)]
    (tmp_path / "metrics.jsonl").write_text("\n".join([good[0], "{oops", *good[1:]]) + "\n{")
    with caplog.at_level(logging.WARNING):
        assert [r["step"] for r in R.read_metrics(tmp_path)] == [0, 1, 2]
    assert R.metrics_lines(tmp_path)[1] == [2]
    assert caplog.messages == [f"{tmp_path / 'metrics.jsonl'}: unreadable line(s) [2] skipped"]
    (tmp_path / "metrics.jsonl").write_text("\n".join(good) + '\n{"step": 3')
    assert R.metrics_lines(tmp_path) == ([json.loads(g) for g in good], [])


def test_wandb_auto_is_offline_without_credentials_with_a_warning(monkeypatch, tmp_path, caplog):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    with caplog.at_level(logging.WARNING):
        assert M.resolve_wandb_mode(M.WandbMode.auto) == M.WandbMode.offline
    assert "no credentials" in caplog.text and "wandb sync" in caplog.text
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    with socket.create_server(("127.0.0.1", 0)) as server:  # a server that answers
        monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{server.getsockname()[1]}")
        assert M.resolve_wandb_mode(M.WandbMode.auto, tmp_path) == M.WandbMode.online
    assert not (tmp_path / M.UNREACHABLE_FILE).exists()
    assert M.resolve_wandb_mode(M.WandbMode.disabled) == M.WandbMode.disabled
    monkeypatch.setenv("WANDB_MODE", "offline")
    assert M.resolve_wandb_mode(M.WandbMode.auto) is None  # wandb.init reads WANDB_MODE itself
    monkeypatch.setenv("WANDB_MODE", "disabled")  # decided here: wandb is never imported
    assert M.resolve_wandb_mode(M.WandbMode.auto) == M.WandbMode.disabled


def test_wandb_auto_with_a_key_decides_offline_once_per_sweep_without_asking_wandb(
    monkeypatch, tmp_path, caplog
):
    """A key (fake) and a server whose name does not resolve: offline from a lookup, not from
    wandb.init's 60 s wait; the sweep's next job reads the verdict from the sweep directory."""
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_API_KEY", "fake" + "0" * 36)
    monkeypatch.setenv("WANDB_BASE_URL", "https://api.wandb.invalid")
    with caplog.at_level(logging.WARNING):
        assert M.resolve_wandb_mode(M.WandbMode.auto, tmp_path) == M.WandbMode.offline
    assert "server https://api.wandb.invalid unreachable" in caplog.text
    verdict = tmp_path / M.UNREACHABLE_FILE
    assert "api.wandb.invalid" in verdict.read_text() and "fake" not in verdict.read_text()
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:1")  # not asked again: the file says
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert M.resolve_wandb_mode(M.WandbMode.auto, tmp_path) == M.WandbMode.offline
    assert "api.wandb.invalid" in caplog.text and "decided earlier in this sweep" in caplog.text
    assert "fake" not in caplog.text


def test_secrets_are_scrubbed(monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    text = scrub(f"failed with key {'k' * 40} and token=abc123 and api_key: xyz and {'0a' * 20}")
    assert all(s not in text for s in ("k" * 40, "abc123", "xyz", "0a" * 20))
