"""Ship a study's results: ``python -m tiedvsuntied.bundle SWEEP_DIR [SWEEP_DIR ...] DEST``
writes DEST as a results bundle (docs/ARCHITECTURE.md, "Results bundle"), small enough to
commit. Runs DEST already holds and the sweeps do not are kept, so a study bundled in pieces,
or from two machines, grows; a run in both is taken from the sweep. DEST is replaced whole at
the end (written beside it, then renamed), so a kill leaves the old bundle.

    python -m tiedvsuntied.bundle results/tie_x_init experiments/tie_x_init/results
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from tiedvsuntied.analysis.load import ResultsError, load_results
from tiedvsuntied.analysis.stats import first_replicates
from tiedvsuntied.results.bundles import FORMAT, MANIFEST, VERSION, BundleError, sha256
from tiedvsuntied.results.bundles import read_manifest as read_bundle_manifest
from tiedvsuntied.results.io import atomic_write, write_json
from tiedvsuntied.results.records import (
    BUNDLED_METRICS,
    DONE,
    RUN_FILES,
    IndexEntry,
    Status,
    now,
    update_index,
)

WINDOW_KEYS = ("val_window_loss", "test_window_loss")
CELL = ["model", "tie", "init_std", "variant"]
KEPT = (
    "summary.json, config.yaml, metrics.jsonl whole (gzipped); per-window val/test losses at "
    "the best and last step"
)
KEPT_ARRAYS = (
    "; for the lowest-seed run of each (model, tie, init std, variant): per-token norms and "
    "in/out cosines, stratum cosines (float16) at the first and last probe, and token_freq.npy"
)
KEPT_NOT = ". No checkpoints, W&B files or sampled embedding rows."


def reduced_probe(path: Path, windows: bool, arrays: bool) -> dict[str, np.ndarray]:
    """What the bundle keeps of one probe file: window losses and/or the figure arrays."""
    kept = {}
    with np.load(path) as z:
        for key in z.files:
            value = z[key]
            if key in WINDOW_KEYS:
                if windows:
                    kept[key] = value
            elif arrays and not key.endswith("_seen"):
                floats = np.issubdtype(value.dtype, np.floating)
                kept[key] = value.astype(np.float16) if floats else value
    return kept


def copy_run(run: pd.Series, dest: Path, full: bool) -> None:
    """One run directory into the bundle, reduced; metrics.jsonl gzipped (BUNDLED_METRICS)."""
    src = Path(run["path"])
    for name in [*RUN_FILES, *(["token_freq.npy"] if full else [])]:
        if name == "metrics.jsonl":
            copy_metrics(src, dest)
        elif (src / name).is_file():
            shutil.copy2(src / name, dest / name)
    steps = {int(p.stem.removeprefix("step_")): p for p in (src / "probes").glob("step_*.npz")}
    points = {int(s) for s in (run["best_step"], run["step"]) if pd.notna(s)}
    ends = {min(steps), max(steps)} if steps else set()
    for step in sorted((points | (ends if full else set())) & steps.keys()):
        kept = reduced_probe(steps[step], windows=step in points, arrays=full and step in ends)
        if kept:
            target = dest / "probes" / steps[step].name
            atomic_write(target, lambda f, kept=kept: np.savez_compressed(f, **kept))


def copy_metrics(src: Path, dest: Path) -> None:
    """``src``'s metrics.jsonl as ``dest``'s BUNDLED_METRICS, gzipped without a timestamp (an
    unchanged run bundles byte-equal); a bundle's own BUNDLED_METRICS as it is."""
    if (src / "metrics.jsonl").is_file():
        data = gzip.compress((src / "metrics.jsonl").read_bytes(), compresslevel=9, mtime=0)
        atomic_write(dest / BUNDLED_METRICS, data)
    elif (src / BUNDLED_METRICS).is_file():
        shutil.copy2(src / BUNDLED_METRICS, dest / BUNDLED_METRICS)


def commit_of_code() -> str | None:
    """The git commit of this code, if it runs from a checkout."""
    git = ["git", "-C", str(Path(__file__).resolve().parent.parent), "rev-parse", "HEAD"]
    with contextlib.suppress(OSError):  # no git
        return subprocess.run(git, capture_output=True, text=True).stdout.strip() or None
    return None


def write_bundle(sources: list[Path], dest: Path, arrays: bool = True) -> dict:
    """Bundle ``sources`` (sweep directories) into ``dest``, keeping dest's other runs; the
    manifest written. ``arrays=False`` keeps no run's per-token probe arrays (a study with many
    variants per cell, whose figures read window losses and summaries only)."""
    old = read_bundle_manifest(dest)
    found = load_results(*sources, *([dest] if old else []))
    shipped = found.runs["status"].isin(DONE)  # a running run is resumed, then bundled
    for name in found.runs.loc[~shipped, "name"]:
        print(f"not bundled (not finished or diverged): {name}", file=sys.stderr)
    runs = found.runs[shipped]
    if runs.empty:
        raise ResultsError(f"no finished or diverged run in {', '.join(map(str, sources))}")
    sweeps = sorted(runs["sweep"].dropna().unique())
    if len(sweeps) != 1:
        raise ResultsError(f"a bundle holds one sweep; these runs come from {', '.join(sweeps)}")
    tmp = dest.with_name(f".{dest.name}.partial")
    shutil.rmtree(tmp, ignore_errors=True)
    # the runs whose per-token probes are kept: the lowest seed of each cell (replicate 0)
    lowest = first_replicates(runs).sort_values("seed", kind="stable")
    full = set(lowest.groupby(CELL, dropna=False).head(1)["run_id"]) if arrays else set()
    for _, run in runs.iterrows():
        run_dir = tmp / run["run_id"]
        run_dir.mkdir(parents=True)  # probes/: made by the first probe kept
        copy_run(run, run_dir, run["run_id"] in full)
        # the run's updated_at, so that an unchanged bundle is byte-equal
        entry = IndexEntry(run["name"], Status(run["status"]), run["run_id"], run["updated_at"])
        update_index(tmp, run["run_id"], entry)
    (tmp / ".index.lock").unlink(missing_ok=True)
    files = sorted(p for p in tmp.rglob("*") if p.is_file())
    checksums = {str(p.relative_to(tmp)): sha256(p) for p in files}
    if old is not None and old.get("files") == checksums:  # nothing new: leave it as it is
        shutil.rmtree(tmp)
        return old
    manifest = {
        "format": FORMAT,
        "version": VERSION,
        "sweep": sweeps[0],
        "made_at": now(),
        "commit": commit_of_code(),
        "sources": list(dict.fromkeys([*map(str, sources), *(old or {}).get("sources", [])])),
        "runs": len(runs),
        "kept": KEPT + (KEPT_ARRAYS if arrays else "") + KEPT_NOT,
        "files": checksums,
    }
    write_json(tmp / MANIFEST, manifest)
    swap(tmp, dest)
    return manifest


def swap(new: Path, dest: Path) -> None:
    """Put ``new`` where ``dest`` is; the old bundle is removed only once the new one is there."""
    old = dest.with_name(f".{dest.name}.old")
    shutil.rmtree(old, ignore_errors=True)
    if dest.exists():
        dest.rename(old)
    new.rename(dest)
    shutil.rmtree(old, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m tiedvsuntied.bundle",
        description="Write a study's results bundle (what the paper's figures read) from sweeps.",
    )
    ap.add_argument("sources", nargs="+", type=Path, metavar="SWEEP_DIR", help="the sweeps")
    ap.add_argument("dest", type=Path, metavar="DEST", help="the bundle's directory")
    ap.add_argument(
        "--no-arrays",
        action="store_true",
        help="keep no per-token probe arrays (window losses, summaries and metrics only)",
    )
    args = ap.parse_args(argv)
    try:
        manifest = write_bundle(args.sources, args.dest, arrays=not args.no_arrays)
    except (ResultsError, BundleError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    size = sum(p.stat().st_size for p in args.dest.rglob("*") if p.is_file())
    print(f"{args.dest}: {manifest['runs']} runs of sweep {manifest['sweep']}, {size / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
