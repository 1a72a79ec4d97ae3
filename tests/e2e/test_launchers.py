"""Hydra's submitit launcher, as on a SLURM cluster but local (hydra/launcher=local_slurm): a
real multirun of 2 jobs, and a job warned of its time limit (SIGUSR2, as SLURM sends it) that
saves a checkpoint, is requeued by submitit and resumes the run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import BYTE_RUN, REPO, at_step

from tiedvsuntied.sweep import jobs

pytest.importorskip("hydra_plugins.hydra_submitit_launcher")

BASE = [
    sys.executable,
    "-m",
    "tiedvsuntied.run",
    "-m",
    "hydra/launcher=local_slurm",
    *BYTE_RUN,
    "wandb.mode=offline",
]


def _env(cache) -> dict:
    return {**os.environ, "TIEDVSUNTIED_CACHE": str(cache), "OMP_NUM_THREADS": "1"}


def _summaries(sweep: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(sweep.glob("*/summary.json"))]


@pytest.mark.slow
def test_a_two_job_sweep_through_the_submitit_launcher_finishes_both_runs(tmp_path, session_cache):
    out = subprocess.run(
        [
            *BASE,
            "tie=true,false",
            "trainer.max_steps=6",
            "trainer.eval_interval=3",
            f"results_dir={tmp_path}",
            "sweep=sl",
            f"hydra.sweep.dir={tmp_path}/multirun",
        ],
        cwd=REPO,
        env=_env(session_cache),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    runs = _summaries(tmp_path / "sl")
    assert sorted(r["tie"] for r in runs) == [False, True]
    assert all(r["status"] == "finished" and r["step"] == 6 for r in runs), runs
    assert list((tmp_path / "multirun" / ".submitit").glob("*/*_result.pkl"))  # submitit ran them
    assert "Sweep sl:" in out.stdout and out.stdout.count("finished") >= 2


@pytest.mark.slow
def test_a_job_warned_of_its_time_limit_checkpoints_is_requeued_and_resumes(
    tmp_path, session_cache
):
    """The job is warned (SIGUSR2, as SLURM sends it before a time limit) at step 6 and saves
    step 6; submitit requeues it; the requeued job resumes at step 6 and finishes."""
    sweep = tmp_path / "rq"
    env = {**_env(session_cache), **at_step(6, "SIGUSR2")}
    proc = subprocess.run(
        [
            *BASE,
            "trainer.max_steps=12",
            "trainer.eval_interval=1000",
            "trainer.log_first=4",
            "trainer.log_interval=2",
            "trainer.ckpt_interval=1000",
            f"results_dir={tmp_path}",
            "sweep=rq",
            f"hydra.sweep.dir={tmp_path}/multirun",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run,) = _summaries(sweep)
    assert run["status"] == "finished" and run["step"] == 12
    # ckpt_interval > max_steps: the only checkpoint to resume from is the one the signal made
    assert run["resumed_from_step"] == 6
    logs = "".join(p.read_text() for p in (tmp_path / "multirun" / ".submitit").glob("*/*_log.*"))
    assert "Requeued job" in logs
    records = [json.loads(x) for x in next(sweep.glob("*/metrics.jsonl")).read_text().splitlines()]
    steps = [r["step"] for r in records if "train/loss" in r]
    # each training step logged once, resumed or not: each of the first 4, then every 2nd
    assert steps == [1, 2, 3, 4, 6, 8, 10, 12]


@pytest.mark.parametrize(
    "override, says",
    [
        ("hydra/launcher=slurmm", ["hydra/launcher=slurmm", "slurm", "local_slurm", "parallel"]),
        ("hydra.launcher.partitionn=gpu", ["hydra.launcher.partitionn", "did you mean"]),
    ],
)
def test_a_launcher_option_that_does_not_exist_is_named_before_any_work(override, says):
    """As the multirun composes its config before any job (one line from the command)."""
    extra = [] if override.startswith("hydra/launcher") else ["hydra/launcher=slurm"]
    with pytest.raises(jobs.SweepError) as refused, jobs.composed([*extra, override]):
        pass
    assert all(s in str(refused.value) for s in says) and "\n" not in str(refused.value)
