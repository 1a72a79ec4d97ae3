"""scripts/gpu/slot.sh, the prepared script of a GPU slot (issue 38), dry-run on CPU as docs/gpu.md
says, on a tiny body: piece a's lr check runs whole and its edges are followed, only an arm whose
lr is settled gets its seeds, and what finished lands in $OUT (runs, bundle, lr table, slot.tsv).
A second call on a fresh machine, given the first call's runs back, trains none of them again;
a call whose limit leaves no room for a run starts none."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pandas as pd
import pytest
from conftest import LIBRARY_OVERRIDES, REPO

pytestmark = pytest.mark.slow
SLOT = REPO / "scripts" / "gpu" / "slot.sh"
# around where 3 steps of nano do best (~1e-2), so that at least one arm settles inside it
GRID = [4e-3, 1.6e-2, 6.4e-2]
TINY = [
    "model=nano",
    "trainer.max_steps=3",
    "trainer.eval_interval=3",
    "trainer.batch_size=2",
    "trainer.eval_windows=2",
    "trainer.compile=false",
    "trainer.threads=1",
    *LIBRARY_OVERRIDES,
]


def slot(tmp: Path, name: str, limit: int, restore: Path | None = None):
    """One call of piece a: its own results folder and $OUT under ``tmp / name``."""
    env = {
        **os.environ,
        "PY": sys.executable,
        "DEVICE": "cpu",
        "OUT": str(tmp / name / "out"),
        "RESULTS": str(tmp / name / "results"),
        "RESTORE": str(restore or tmp / "none.tar.gz"),
        "JOBS": "4",
        "JOBS_SEEDS": "3",
        "LRS_A": ",".join(f"{lr:g}" for lr in GRID),
        "EXTRA_A": " ".join(TINY),
    }
    proc = subprocess.run(
        ["bash", str(SLOT), str(limit), "a"], env=env, capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0 and "slot done" in proc.stdout, proc.stdout + proc.stderr[-3000:]
    return proc, tmp / name


def finished(results: Path) -> dict[str, dict]:
    """The nano runs that finished: name -> summary (the restored bundle's real runs aside)."""
    out = {}
    for path in sorted((results / "sign_flip_gpu").glob("*nano*/summary.json")):
        summary = json.loads(path.read_text())
        if summary["status"] == "finished":
            out[path.parent.name] = summary
    return out


@pytest.fixture(scope="module")
def first(tmp_path_factory):
    return slot(tmp_path_factory.mktemp("slot"), "first", 900)


def test_the_lr_check_runs_whole_then_only_settled_arms_get_seeds_and_all_is_packed(first):
    proc, where = first
    runs = finished(where / "results")
    table = pd.read_csv(where / "out" / "lr_choice_sign_flip_gpu.tsv", sep="\t").query(
        "model == 'nano'"
    )
    assert set(table["arm"]) == {"tied", "untied"} and table["settled"].any()
    for row in table.to_dict("records"):
        mine = [s for s in runs.values() if s["tie"] == (row["arm"] == "tied")]
        assert all(pd.notna(row[f"val_bpb_at_{lr:g}"]) for lr in GRID)  # the grid ran whole
        at = {k.removeprefix("val_bpb_at_"): v for k, v in row.items() if "val_bpb_at_" in k}
        tried = {float(lr) for lr, bpb in at.items() if pd.notna(bpb)}
        # beyond the grid only x2 steps from its edges, twice at most
        assert tried <= {*GRID, GRID[0] / 2, GRID[0] / 4, GRID[-1] * 2, GRID[-1] * 4}
        assert row["settled"] == (min(tried) < row["lr"] < max(tried))  # inside what ran
        seeds = sorted(s["seed"] for s in mine if s["seed"] > 0)
        assert seeds == ([1, 2, 3] if row["settled"] else []), row
    with tarfile.open(where / "out" / "slot_runs.tar.gz") as tar:
        packed = {Path(m.name).parts[1] for m in tar.getmembers() if m.name.count("/") >= 1}
    assert set(runs) <= packed
    bundled = json.loads((where / "out" / "results_gpu" / "BUNDLE.json").read_text())
    assert bundled["sweep"] == "sign_flip_gpu" and bundled["runs"] >= len(runs)
    lines = pd.read_csv(where / "out" / "slot.tsv", sep="\t", names=["piece", "s", "at_once", "o"])
    assert (lines["piece"] == "a").all() and set(lines["at_once"]) <= {4, 3}
    assert "packed at" in proc.stdout


def test_a_second_call_given_the_runs_back_trains_none_of_them_again(first, tmp_path):
    _, where = first
    before = finished(where / "results")
    _, again = slot(tmp_path, "second", 900, restore=where / "out" / "slot_runs.tar.gz")
    after = finished(again / "results")
    assert set(before) <= set(after)
    for name, summary in before.items():
        assert after[name] == summary, name  # not trained again: the same record, unchanged


def test_a_call_whose_limit_leaves_no_room_starts_no_run(tmp_path):
    proc, where = slot(tmp_path, "short", 61)
    assert "not started" in proc.stdout and not finished(where / "results")
