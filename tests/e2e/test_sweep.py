"""A sweep before and while it runs: the whole sweep checked before its first job (a real
multirun), and ``python -m tiedvsuntied.sweep plan|status|table`` on a real finished sweep."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from conftest import BYTE_RUN, QUICK, TINY_SWEEP_OVERRIDES, at_step, run_cli
from filelock import FileLock

from tiedvsuntied.analysis.load import load_results
from tiedvsuntied.sweep.__main__ import main


def sweep_cli(args: list[str], cwd: Path, code: str | None = None) -> subprocess.CompletedProcess:
    """``python -m tiedvsuntied.sweep ARGS`` (or ``python -c CODE ARGS``) as a user runs it."""
    command = ["-c", code] if code else ["-m", "tiedvsuntied.sweep"]
    return subprocess.run(
        [sys.executable, *command, *args],
        cwd=cwd,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
def test_a_bad_value_anywhere_in_a_100_job_sweep_stops_it_before_the_first_job(tmp_path):
    (tmp_path / "outputs" / "mine").mkdir(parents=True)  # the user's: it stays
    seeds = ",".join([*map(str, range(99)), "-1"])  # the bad value last: every job is checked
    t0 = time.time()
    proc = run_cli(["-m", *QUICK, f"seed={seeds}", f"results_dir={tmp_path / 'r'}"], cwd=tmp_path)
    print(f"\n100-job sweep refused in {time.time() - t0:.1f} s (process start included)")
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines() == [
        "error: job 99 of 100 (seed=-1): seed=-1 is invalid: it must be >= 0"
    ]
    assert "Sweep" not in proc.stdout  # no table: nothing ran
    # no results, no multirun/ log folder of Hydra's; what was there stays
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == [
        Path("outputs"),
        Path("outputs/mine"),
    ]


@pytest.mark.slow
def test_plan_lists_each_job_with_its_run_status_and_the_cost_of_the_rest(tiny_sweep, tmp_path):
    # The finished sweep's command with one more init: 4 jobs done, 2 to run.
    overrides = [o for o in TINY_SWEEP_OVERRIDES if not o.startswith("init_std=")]
    args = [*overrides, "init_std=1.0,0.036,0.5", f"results_dir={tiny_sweep.parent}"]
    proc = sweep_cli(["plan", *args], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[0] == f"Sweep tiny: {tiny_sweep.resolve()}"
    end = next(i for i, line in enumerate(lines) if line.startswith("6 jobs; left: "))
    jobs = [line.split() for line in lines[2:end]]
    # each job's warnings, as its run will log them: 0.036 is d^-0.5 at d = 768, not at nano's
    warned = [line.split(":")[0] for line in lines[end + 1 :]]
    assert warned == [f"job {job[0]}" for job in jobs if job[-1].endswith("init_std=0.036")]
    assert all("init_std=0.036" in line for line in lines[end + 1 :])
    assert [int(job[0]) for job in jobs] == list(range(6))
    finished = {job[1] for job in jobs if job[2] == "finished"}
    assert finished == {p.name for p in tiny_sweep.iterdir() if (p / "summary.json").is_file()}
    assert {job[3] for job in jobs if job[2] == "finished"} == {"12/12"}
    pending = [job for job in jobs if job[2] == "pending"]
    assert [job[-1] for job in pending] == ["init_std=0.5"] * 2 and pending[0][3] == "0/12"
    assert lines[end].startswith("6 jobs; left: 2 run(s) not done: ")
    assert "nano" in lines[end] and "s/step" in lines[end] and "unknown" not in lines[end]
    # A bad value is refused by the plan as by the multirun, in one line.
    bad = sweep_cli(["plan", *args[:-2], "init_std=1.0,-1", args[-1]], cwd=tmp_path)
    assert bad.returncode == 2
    assert bad.stderr.startswith("error: job 1 of 4 (tie=true init_std=-1): init_std='-1'")
    assert len(bad.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_status_counts_runs_shows_progress_and_reads_no_torch(tiny_sweep, tmp_path):
    """A copy of the sweep as it would be mid-way: a run training now (its lock held here), a
    run whose process was killed, two finished."""
    sweep = tmp_path / "tiny"
    shutil.copytree(tiny_sweep, sweep)
    training, killed = sorted(p for p in sweep.iterdir() if (p / "summary.json").is_file())[:2]
    for run in (training, killed):
        summary = json.loads((run / "summary.json").read_text())
        (run / "summary.json").write_text(json.dumps({**summary, "status": "running", "step": 6}))
    code = (
        "import sys; from tiedvsuntied.sweep.__main__ import main; main(sys.argv[1:]); "
        "assert 'torch' not in sys.modules, 'torch was imported'"
    )
    with FileLock(str(training / ".lock")):
        proc = sweep_cli(["status", str(sweep)], cwd=tmp_path, code=code)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[:4] == [
        f"Sweep tiny: {sweep.resolve()}",
        "4 runs: 2 finished, 1 running, 1 interrupted",
        "steps: 36 of 48 (75%)",
        f"running: {training.name} at step 6 of 12",
    ]
    assert lines[4].startswith("ETA: ") and "unknown" not in lines[4] and "nano" in lines[4]
    assert len(lines) == 5
    missing = sweep_cli(["status", str(tmp_path / "nope")], cwd=tmp_path)
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1


@pytest.mark.slow
@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_table_writes_the_runs_table_the_figures_read(tiny_sweep, tmp_path, suffix, capsys):
    out = tmp_path / f"tiny{suffix}"
    main(["table", str(tiny_sweep), "--out", str(out)])
    assert capsys.readouterr().out == f"4 runs -> {out}\n"
    got = pd.read_csv(out) if suffix == ".csv" else pd.read_parquet(out)
    runs = load_results(tiny_sweep).runs
    assert list(got.columns) == list(runs.columns)
    assert list(got["run_id"]) == list(runs["run_id"])
    assert list(got["final_val_loss"]) == pytest.approx(list(runs["final_val_loss"]))


def test_each_job_is_composed_as_hydra_composes_it():
    """The check composes each choice of groups once and sets the values on a copy: the same
    config as Hydra's own composition of every job (a group swept, values swept, a list)."""
    from omegaconf import OmegaConf

    from tiedvsuntied.sweep import jobs

    given = ["+experiment=smoke", "model=nano,micro", "optim.lr=1e-3,2e-3", "wandb.tags=[a]"]
    with jobs.composed(given) as (loader, master):
        todo = jobs.expand(loader, master)
        fast = [c for c, _ in jobs.task_configs(loader, master, todo)]
        hydras = [loader.load_sweep_config(master, job.overrides) for job in todo]
        hydras = [jobs.without_hydra(c) for c in hydras]  # as Hydra's run_job gives the task
    assert len(todo) == 48
    assert [OmegaConf.to_container(c) for c in fast] == [OmegaConf.to_container(c) for c in hydras]


@pytest.mark.slow
def test_status_from_the_folder_alone_counts_the_jobs_not_begun_and_their_eta(tmp_path):
    """A sweep of three seeds killed in its second job (the first was run before, alone): the
    folder alone gives the three runs (one finished, one interrupted, one pending: the multirun
    recorded its jobs as it started), all their steps and an ETA from the finished run."""
    args = [*BYTE_RUN, "trainer.max_steps=6", "trainer.eval_interval=3", "wandb.mode=disabled"]
    args += [f"results_dir={tmp_path / 'r'}", "sweep=s"]
    assert run_cli([*args, "seed=0"], cwd=tmp_path).returncode == 0
    killed = run_cli(["-m", *args, "seed=0,1,2"], cwd=tmp_path, env_extra=at_step(3, "SIGKILL"))
    assert killed.returncode == -9, killed.stderr[-3000:]
    proc = sweep_cli(["status", str(tmp_path / "r" / "s")], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[1] == "3 runs: 1 finished, 1 interrupted, 1 pending"
    assert lines[2].startswith("steps: ") and " of 18 (" in lines[2]
    assert lines[3].startswith("ETA: ") and "unknown" not in lines[3], lines
    assert "2 run(s) not done" in lines[3]


@pytest.mark.slow
def test_check_and_status_name_every_damaged_run_one_line_each(tiny_sweep, tmp_path):
    """A copy of the finished sweep, each run damaged one way (a metrics file's last line cut by
    a kill is not damage): ``check`` names each, exit code 1; ``status`` names them too."""
    sweep = shutil.copytree(tiny_sweep, tmp_path / "tiny")
    a, b, c, d = sorted(p for p in sweep.iterdir() if (p / "summary.json").is_file())
    (a / "config.yaml").unlink()
    (b / "summary.json").write_text("{")
    lines = (c / "metrics.jsonl").read_text().splitlines(keepends=True)
    (c / "metrics.jsonl").write_text("".join([*lines[:2], "not json\n", *lines[2:]]))
    (d / "checkpoints" / "model.pt").unlink()
    with open(d / "metrics.jsonl", "a") as f:
        f.write('{"step": 13, "train/lo')  # cut by a kill: tolerated
    expected = [
        f"damaged: {a.name}: config.yaml missing",
        f"damaged: {b.name}: summary.json unreadable",
        f"damaged: {c.name}: metrics.jsonl: 1 unreadable line(s) (3)",
        f"damaged: {d.name}: finished, but checkpoints/model.pt is missing",
    ]
    proc = sweep_cli(["check", str(sweep)], cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert proc.stdout.splitlines() == expected
    status = sweep_cli(["status", str(sweep)], cwd=tmp_path)
    assert status.returncode == 0 and status.stdout.splitlines()[-4:] == expected
    sound = sweep_cli(["check", str(tiny_sweep)], cwd=tmp_path)
    assert (sound.returncode, sound.stdout) == (0, f"no damaged run in {tiny_sweep}\n")
