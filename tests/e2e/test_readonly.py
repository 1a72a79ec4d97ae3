"""Results read where they cannot be written: an archived or shared sweep on a read-only disk is
read by every reading command, and a run whose folder turns read-only ends in one line. The
folders are made read-only for real (a read-only bind mount: we may run as root, whom permission
bits do not stop); where mounting is not allowed the tests skip, saying so."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import BYTE_RUN, at_step, run_cli

REPO = Path(__file__).resolve().parents[2]


def mount(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["mount", *args], capture_output=True, text=True)


@contextlib.contextmanager
def read_only(folder: Path) -> Iterator[Path]:
    """``folder``, read-only in place for every process until the block ends."""
    made = mount("--bind", str(folder), str(folder))
    if made.returncode:
        pytest.skip(f"a read-only folder needs a bind mount, refused here: {made.stderr.strip()}")
    try:
        assert mount("-o", "remount,bind,ro", str(folder)).returncode == 0
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def command(module: str, *args: str, cwd: Path, env: dict | None = None):
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=600,
    )


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(folder.rglob("*"))}


@pytest.fixture
def archived(tiny_sweep, tmp_path) -> Iterator[Path]:
    """A copy of the tiny sweep with one run killed mid-way (its summary says running, no
    process holds it), on a read-only disk."""
    sweep = shutil.copytree(tiny_sweep, tmp_path / "archive" / "tiny")
    killed = sorted(p for p in sweep.iterdir() if (p / "summary.json").is_file())[0]
    summary = json.loads((killed / "summary.json").read_text())
    (killed / "summary.json").write_text(json.dumps({**summary, "status": "running", "step": 6}))
    shutil.rmtree(killed / "checkpoints")
    (killed / ".lock").touch()  # as the killed trainer left it
    with read_only(sweep):
        yield sweep


@pytest.mark.slow
def test_every_reading_command_reads_a_read_only_sweep(archived, tmp_path):
    """``sweep status``, ``sweep table``, ``figures``, ``bundle`` and a notebook read an archived
    sweep holding an unfinished run: exit 0, each says the killed run is interrupted, nothing
    written there."""
    before = snapshot(archived)
    status = command("tiedvsuntied.sweep", "status", str(archived), cwd=tmp_path)
    assert status.returncode == 0, status.stderr[-3000:]
    assert "4 runs: 3 finished, 1 interrupted" in status.stdout
    table = command("tiedvsuntied.sweep", "table", str(archived), cwd=tmp_path)
    assert table.returncode == 0, table.stderr[-3000:]
    assert table.stdout.count("interrupted") == 1 and table.stdout.count("finished") == 3
    figures = command("tiedvsuntied.figures", str(archived), "--out", "figs", cwd=tmp_path)
    assert figures.returncode == 0, figures.stderr[-3000:]
    assert "1 run(s) interrupted" in figures.stdout + figures.stderr
    assert (tmp_path / "figs" / "fig1_val_loss.png").is_file()
    bundle = command("tiedvsuntied.bundle", str(archived), "bundle", cwd=tmp_path)
    assert bundle.returncode == 0, bundle.stderr[-3000:]
    assert len(list((tmp_path / "bundle").glob("*/summary.json"))) == 3  # the finished ones
    assert "not bundled (not finished or diverged)" in bundle.stderr
    jupyter = ["--to", "notebook", "--execute", "--output-dir", str(tmp_path / "nb")]
    notebook = command(
        "jupyter",
        "nbconvert",
        *jupyter,
        str(REPO / "notebooks" / "01_loss.ipynb"),
        cwd=tmp_path,
        env={
            "TIEDVSUNTIED_SWEEP_DIR": str(archived),
            "TIEDVSUNTIED_FIGURES_DIR": str(tmp_path / "nbfigs"),
        },
    )
    assert notebook.returncode == 0, notebook.stderr[-3000:]
    assert (tmp_path / "nbfigs" / "fig1_val_loss.png").is_file()
    assert snapshot(archived) == before


@pytest.mark.slow
def test_a_folder_turning_read_only_ends_the_run_in_one_line_and_a_rerun_refuses(tmp_path):
    """The sweep's folder turns read-only at step 3: the run ends with one line naming it (no
    traceback); run again while it is read-only, the command is refused in one line before
    anything starts; writable again, the rerun resumes and finishes."""
    args = [*BYTE_RUN, "trainer.max_steps=8", "trainer.eval_interval=4", "trainer.ckpt_interval=2"]
    args += ["wandb.mode=offline"]
    args += [f"results_dir={tmp_path / 'r'}", "sweep=s"]
    sweep = tmp_path / "r" / "s"
    sweep.mkdir(parents=True)
    with read_only(sweep):  # skips here where mounting is not allowed
        pass
    try:
        stopped = run_cli(args, cwd=tmp_path, env_extra=at_step(3, f"ro:{sweep}"))
        assert stopped.returncode == 1, stopped.stderr[-3000:]
        assert "Traceback" not in stopped.stderr
        last = stopped.stderr.strip().splitlines()[-1]
        assert last.startswith(f"error: {sweep}/") and "Read-only file system" in last
        made = sorted((tmp_path / "outputs").rglob("*"))
        refused = run_cli(args, cwd=tmp_path)
        assert refused.returncode == 2
        assert refused.stderr.strip().splitlines() == [
            f"error: sweep folder {sweep} cannot be written (a read-only file system): "
            "make it writable, or choose another results_dir or sweep"
        ]
        assert sorted((tmp_path / "outputs").rglob("*")) == made  # before Hydra made a folder
    finally:
        subprocess.run(["umount", str(sweep)], capture_output=True)
    resumed = run_cli(args, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    (summary,) = [json.loads(p.read_text()) for p in sweep.glob("*/summary.json")]
    assert summary["status"] == "finished" and summary["resumed_from_step"] > 0
