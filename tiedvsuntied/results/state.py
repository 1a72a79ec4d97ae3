"""Where a sweep's runs stand, decided in one place for every reader (``sweep status``, the
runs table, the figures, the bundle): a run's status, the jobs a multirun planned and the
damage a run's record shows. Reading only: nothing here writes, so a read-only folder (an
archive, a shared disk) reads as any other; the one writer is :func:`record_planned`, called by
a multirun as it starts. No torch, no pandas."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import yaml

from tiedvsuntied.results.io import read_json, write_json
from tiedvsuntied.results.records import RunSummary, Status, metrics_lines, now, read_summary

# <sweep>/planned.json: {run_id: {name, model, vocab_size, max_steps, overrides}}
PLANNED = "planned.json"
BUNDLE_MANIFEST = "BUNDLE.json"  # a results bundle keeps no checkpoints (results.bundles)


def lock_held(run_dir: Path) -> bool:
    """Whether a process is training this run now: the trainer holds ``<run>/.lock`` (filelock's
    ``flock``). Asked with a shared lock on a read-only descriptor, let go at once: nothing is
    created or written, so a read-only folder can be asked too."""
    try:
        import fcntl
    except ImportError:  # no flock (Windows): a lock file that exists is taken as held
        return (Path(run_dir) / ".lock").exists()
    try:
        fd = os.open(Path(run_dir) / ".lock", os.O_RDONLY)
    except OSError:  # no lock file: no process ever held it here
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def run_status(summary: RunSummary | None, run_dir: Path) -> str:
    """A run's status as every tool reports it. ``pending``: no summary yet. A summary says
    ``running`` both while a process trains the run and after that process was killed: the run's
    lock tells them apart, and a run nobody holds is ``interrupted`` (a rerun resumes it), as is
    a run stopped by a signal (recorded ``failed``/``interrupted`` with an error saying so)."""
    if summary is None:
        return "pending"
    status = Status(summary.status).value
    killed = status == "running" and not lock_held(run_dir)
    if killed or (status == "failed" and (summary.error or "").startswith("interrupted")):
        return Status.interrupted.value
    return status


# ---------------------------------------------------------------------------- planned jobs


def record_planned(sweep_dir: Path, jobs: dict[str, dict]) -> None:
    """Add a multirun's jobs ({run_id: {name, model, max_steps, overrides}}) to the sweep's
    ``planned.json`` as it starts, so that ``sweep status DIR`` counts the jobs not begun. Jobs
    of earlier commands into the same sweep stay (locked: two multiruns may start together)."""
    from filelock import FileLock

    sweep_dir = Path(sweep_dir)
    sweep_dir.mkdir(parents=True, exist_ok=True)
    with FileLock(str(sweep_dir / ".index.lock")):
        planned = read_json(sweep_dir / PLANNED) or {}
        planned |= {run_id: {**job, "planned_at": now()} for run_id, job in jobs.items()}
        write_json(sweep_dir / PLANNED, planned)


def read_planned(sweep_dir: Path) -> dict[str, dict]:
    """The sweep's planned jobs by run id ({} where no multirun recorded any)."""
    return read_json(Path(sweep_dir) / PLANNED) or {}


# ---------------------------------------------------------------------------- damage


def damage(run_dir: Path) -> list[str]:
    """What is wrong with a run's record, one phrase each ([] for a sound one): a missing or
    unreadable ``summary.json`` or ``config.yaml``, unreadable lines of ``metrics.jsonl``, a
    finished run without its final weights (``checkpoints/model.pt``; a bundle keeps none)."""
    run_dir = Path(run_dir)
    found = []
    summary = read_summary(run_dir)
    if summary is None:
        what = "missing" if not (run_dir / "summary.json").exists() else "unreadable"
        found.append(f"summary.json {what}")
    found += config_damage(run_dir)
    bad = metrics_lines(run_dir)[1]
    if bad:
        shown = ", ".join(map(str, bad[:5])) + (", ..." if len(bad) > 5 else "")
        found.append(f"metrics.jsonl: {len(bad)} unreadable line(s) ({shown})")
    bundled = (run_dir.parent / BUNDLE_MANIFEST).exists()
    final = run_dir / "checkpoints" / "model.pt"
    if summary and summary.status == Status.finished and not bundled and not final.exists():
        found.append("finished, but checkpoints/model.pt is missing")
    return found


def config_damage(run_dir: Path) -> list[str]:
    """['config.yaml missing'] or ['config.yaml unreadable'] ([]: a mapping that reads)."""
    path = run_dir / "config.yaml"
    if not path.exists():
        return ["config.yaml missing"]
    with contextlib.suppress(OSError, yaml.YAMLError):
        if isinstance(yaml.safe_load(path.read_text()), dict):
            return []
    return ["config.yaml unreadable"]
