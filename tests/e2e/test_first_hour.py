"""A new user's first hour (issue 28), end to end through the command line: W&B keeps quiet
unless asked and decides offline at once where its server cannot be reached; the quick preset's
evaluation work scales with the run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import BYTE_RUN, CORPUS_OVERRIDES, run_cli

TINY = [*BYTE_RUN, "trainer.max_steps=2", "trainer.batch_size=2", "trainer.eval_windows=2"]
FAKE_KEY = "fake" + "0" * 36  # never a real key


def summaries(sweep_dir: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(sweep_dir.glob("*/summary.json"))]


def wandb_lines(proc) -> list[str]:
    return [line for line in (proc.stdout + proc.stderr).splitlines() if "wandb:" in line]


@pytest.mark.slow
@pytest.mark.parametrize("quiet", [True, False])
def test_wandb_is_quiet_on_the_console_unless_asked(quiet, tmp_path):
    over = [*TINY, "wandb.mode=offline", f"wandb.quiet={str(quiet).lower()}"]
    proc = run_cli(
        [*over, f"results_dir={tmp_path}"], cwd=tmp_path, env_extra={"WANDB_SILENT": "false"}
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    [summary] = summaries(tmp_path / "default")
    assert summary["wandb_mode"] == "offline"
    assert list((tmp_path / "default" / summary["run_id"] / "wandb").glob("offline-run-*"))
    assert (wandb_lines(proc) == []) == quiet, wandb_lines(proc)


@pytest.mark.slow
def test_wandb_auto_with_a_key_and_no_server_goes_offline_once_per_sweep(tmp_path, monkeypatch):
    """A (fake) key and a server name that does not resolve: the first job looks the name up
    and goes offline; the second reads that verdict from the sweep directory; neither asks
    wandb.init to go online (whose failure would be the other warning, after init_timeout)."""
    monkeypatch.delenv("WANDB_MODE", raising=False)
    proc = run_cli(
        ["-m", "tie=true,false", *TINY, "wandb.mode=auto", f"results_dir={tmp_path}"],
        cwd=tmp_path,
        env_extra={
            "WANDB_API_KEY": FAKE_KEY,
            "WANDB_BASE_URL": "https://api.wandb.invalid",
        },
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-2000:]
    assert [s["wandb_mode"] for s in summaries(tmp_path / "default")] == ["offline", "offline"]
    assert out.count("W&B: server https://api.wandb.invalid unreachable") == 2
    assert out.count("decided earlier in this sweep") == 1
    assert "W&B server unreachable" not in out  # wandb.init was never asked to go online
    assert FAKE_KEY not in out
    assert FAKE_KEY not in "".join(p.read_text() for p in tmp_path.rglob("*.yaml"))


@pytest.mark.slow
def test_the_quick_preset_evaluates_in_proportion_to_the_run(tmp_path):
    """+experiment=quick: 20 steps, 16 validation windows at steps 0, 10, 20 (not the whole
    split at 0, 1, 2, 4, 8, 16, ...), 16 test windows at the end."""
    args = ["-m", "+experiment=quick", "tie=true", "init_std=inv_sqrt_d", *CORPUS_OVERRIDES]
    proc = run_cli(
        [*args, "trainer.progress=false", "trainer.peak_tflops=1", f"results_dir={tmp_path}"],
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    [summary] = summaries(tmp_path / "quick")
    assert (summary["model"], summary["step"], summary["status"]) == ("nano", 20, "finished")
    run_dir = tmp_path / "quick" / summary["run_id"]
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "val/loss" in r] == [0, 10, 20]
    assert summary["heldout"]["test"]["n_windows"] == 16
    assert len(list((run_dir / "probes").glob("step_*.npz"))) == 3


@pytest.mark.slow
def test_a_sweep_on_data_it_cannot_read_is_refused_before_anything_is_written(tmp_path):
    """Offline, WikiText-2 in no cache: one line naming the data, before Hydra launches a job or
    the sweep records its plan (planned.json: `sweep status` would count four pending runs)."""
    over = ["-m", "tie=true,false", "init_std=1.0,0.036", "data=wikitext2"]
    env = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_CACHE": str(tmp_path / "hf")}
    proc = run_cli([*over, f"results_dir={tmp_path / 'results'}"], cwd=tmp_path, env_extra=env)
    assert proc.returncode == 2 and "Launching" not in proc.stdout, proc.stdout[-2000:]
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("error: data=wikitext2: not available offline: the dataset")
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no results/, multirun/, hf/


@pytest.mark.slow
def test_figures_into_a_read_only_folder_are_refused_in_one_line_at_once(tmp_path):
    """A read-only disk (a bind mount: root is not stopped by permission bits): one line before
    any figure is drawn, not one NOT MADE per figure."""
    from test_readonly import command, read_only

    (tmp_path / "figs").mkdir()
    with read_only(tmp_path / "figs"):
        proc = command(
            "tiedvsuntied.figures", str(tmp_path), "--out", str(tmp_path / "figs"), cwd=tmp_path
        )
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout[-2000:]
    (line,) = proc.stderr.strip().splitlines()
    assert "cannot take the figures" in line and "Read-only file system" in line
