"""Results -> two tidy pandas DataFrames: ``runs`` (one row per run, :mod:`.rows`) and ``history``
(one row per run and logged step), from sweep directories or a W&B project."""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from tiedvsuntied.analysis import rows
from tiedvsuntied.results import bundles, records, state


class ResultsError(ValueError):
    """Input that cannot be analysed as it stands (missing dir, no runs, mixed sweeps...)."""


class WandbUnavailableError(RuntimeError):
    """The W&B API cannot be reached or used (no network, no credentials, unknown project)."""


@dataclass
class Results:
    """The tidy tables of a set of runs and what was noticed while reading them."""

    runs: pd.DataFrame
    history: pd.DataFrame
    notes: list[str] = field(default_factory=list)

    def select(self, mask) -> Results:
        """The same results restricted to ``runs[mask]`` (history follows)."""
        runs = self.runs[mask].reset_index(drop=True)
        history = self.history[self.history["run_id"].isin(runs["run_id"])].reset_index(drop=True)
        return Results(runs, history, list(self.notes))


def load_results(*paths: str | Path) -> Results:
    """Read sweep, run or results directories. A run found twice keeps its best record (STATUS_RANK,
    then the newest ``updated_at``): a failed first attempt never hides the finished rerun."""
    if not paths:
        raise ResultsError("no results directory given: pass one or more sweep directories")
    notes: list[str] = []
    loaded = [
        _load_run_dir(run_dir, entry, notes)
        for path in paths
        for run_dir, entry in _find_runs(Path(path), notes)
    ]
    return _assemble(_best_records(loaded, notes), notes)


def _best_records(loaded: list[tuple], notes: list[str]) -> list[tuple]:
    """One record per run_id: the best status (STATUS_RANK), then the newest ``updated_at``."""
    ranked = sorted(loaded, key=lambda r: r[0]["updated_at"] or "", reverse=True)
    ranked.sort(key=lambda r: rows.STATUS_RANK.get(r[0]["status"], 9))
    best: dict[str, tuple] = {}
    for record in ranked:
        row, kept = record[0], best.setdefault(record[0]["run_id"], record)[0]
        if kept is not row:
            notes.append(
                f"run {row['run_id']} found twice: kept {kept['path']} ({kept['status']}), "
                f"not {row['path']} ({row['status']})"
            )
    return list(best.values())


def load(
    sweep_dirs: Sequence[str | Path] = (),
    *,
    wandb_project: str | None = None,
    wandb_group: str | None = None,
    data_id: str | None = None,
) -> Results:
    """A W&B project if given, else sweep directories; with ``data_id``, only the runs on that
    data (mixed sweeps)."""
    if wandb_project:
        results = load_wandb(wandb_project, group=wandb_group or None)
    else:
        results = load_results(*sweep_dirs)
    if data_id:
        ids = sorted(results.runs["data_id"].dropna().unique())
        if data_id not in ids:
            raise ResultsError(
                f"data_id {data_id!r} matches no run; data_ids present: {', '.join(ids) or 'none'}"
            )
        results = results.select(results.runs["data_id"] == data_id)
    return results


def _find_runs(path: Path, notes: list[str]) -> list[tuple[Path, records.IndexEntry | None]]:
    """(run_dir, index.json entry or None) for every run under ``path``."""
    if not path.exists():
        looked = "" if path.is_absolute() else f" (looked in {path.resolve()})"
        raise ResultsError(f"results directory {path} does not exist{looked}")
    if not path.is_dir():
        raise ResultsError(f"{path} is not a directory: pass <results_dir>/<sweep>/")
    if (path / "summary.json").exists():
        return [(path, None)]
    note_bundle(path, notes)
    if _looks_like_sweep(path):
        return _sweep_runs(path)
    sweeps = sorted(p for p in path.iterdir() if p.is_dir() and _looks_like_sweep(p))
    if not sweeps:
        raise ResultsError(
            f"no runs found in {path}: expected a sweep directory (index.json and "
            "<run_id>/summary.json), a run directory (summary.json) or a results directory "
            "of sweeps"
        )
    notes.append(
        f"{path}: read as a results directory holding {len(sweeps)} sweeps: "
        + ", ".join(p.name for p in sweeps)
    )
    return [r for s in sweeps for r in _sweep_runs(s)]


def note_bundle(path: Path, notes: list[str]) -> None:
    """A results bundle is read like the sweep it reduces; say so, and name any file that
    differs from its manifest."""
    try:
        manifest = bundles.read_manifest(path)
    except bundles.BundleError as e:
        raise ResultsError(str(e)) from None
    if manifest is None:
        return
    notes.append(
        f"{path}: results bundle (format {manifest['version']}) of sweep {manifest['sweep']}, "
        f"{manifest['runs']} runs, made {manifest['made_at'][:10]} at commit "
        f"{(manifest.get('commit') or 'unknown')[:10]}; it keeps {manifest['kept']}"
    )
    changed = bundles.changed_files(path, manifest)
    if changed:
        notes.append(
            f"{path}: {len(changed)} files differ from the bundle's manifest: "
            + ", ".join(changed[:5])
        )


def _is_run_dir(p: Path) -> bool:
    return not p.name.startswith(("_", ".")) and any((p / f).exists() for f in records.RUN_FILES)


def _looks_like_sweep(path: Path) -> bool:
    return (path / "index.json").exists() or any(_is_run_dir(p) for p in path.iterdir())


def _sweep_runs(sweep: Path) -> list[tuple[Path, records.IndexEntry | None]]:
    found: dict[str, tuple[Path, records.IndexEntry | None]] = {}
    for run_id, entry in records.read_index(sweep).items():
        # by its name: older indexes held absolute paths, wrong once the sweep has moved
        found[run_id] = (sweep / Path(entry.path or run_id).name, entry)
    for p in sorted(sweep.iterdir()):  # runs the index does not (yet) list
        if p.name not in found and _is_run_dir(p):
            found[p.name] = (p, None)
    if not found:
        raise ResultsError(
            f"no runs found in sweep directory {sweep}: index.json is empty and no "
            "<run_id>/summary.json exists (has the sweep started?)"
        )
    return sorted(found.values(), key=lambda r: r[0].name)


def _load_run_dir(
    run_dir: Path, entry: records.IndexEntry | None, notes: list[str]
) -> tuple[dict, dict, pd.DataFrame]:
    """(runs-table row, config, history) of one run directory. A bundle's runs (BUNDLE.json
    beside them: written once, never resumed) are read once per process while their files stay
    as they were: notebooks and ``--paper`` read the third edition's bundle for several
    sections, and a file that changes (its size or mtime) is read again."""
    if not (run_dir.parent / bundles.MANIFEST).is_file():
        return _read_run_dir(run_dir, entry, notes)
    name, status = (entry.name, entry.status) if entry else (None, None)
    row, config, history, said = _bundled_run(run_dir, _stamp(run_dir), name, status)
    notes.extend(said)
    return dict(row), config, history  # the row gets its variant (_assemble): a copy


def _stamp(run_dir: Path) -> tuple:
    """What says a run directory's files are the ones read before: each file's name, size and
    mtime."""
    if not run_dir.is_dir():
        return ()
    return tuple(
        sorted((e.name, e.stat().st_size, e.stat().st_mtime_ns) for e in os.scandir(run_dir))
    )


@functools.lru_cache(maxsize=4096)
def _bundled_run(run_dir: Path, stamp: tuple, name, status) -> tuple:
    """:func:`_read_run_dir` of a bundled run at ``stamp``, with the notes it made."""
    said: list[str] = []
    entry = records.IndexEntry(name, status, run_dir.name) if status is not None else None
    return (*_read_run_dir(run_dir, entry, said), tuple(said))


def _read_run_dir(
    run_dir: Path, entry: records.IndexEntry | None, notes: list[str]
) -> tuple[dict, dict, pd.DataFrame]:
    """(runs-table row, config, history) read from one run directory's files."""
    summary, config = records.read_summary(run_dir), records.read_config(run_dir)
    metrics = run_dir / "metrics.jsonl"
    if summary:  # the status every tool reports (a killed run is not running)
        s = summary.to_dict() | {"status": state.run_status(summary, run_dir)}
    else:
        missing = "summary.json missing or unreadable; status from index.json or unknown"
        gone = "listed in index.json but the directory does not exist"
        notes.append(f"{run_dir}: {missing if run_dir.is_dir() else gone}")
        status = records.Status(entry.status).value if entry else "unknown"
        name = entry and entry.name
        s = {"run_id": run_dir.name, "name": name, "sweep": run_dir.parent.name, "status": status}
    if metrics.exists() and metrics.stat().st_size and not metrics.read_bytes().endswith(b"\n"):
        notes.append(f"{metrics}: skipped unparsable last line (still being written?)")
    lines, bad = records.metrics_lines(run_dir)
    if bad:
        notes.append(f"{metrics}: skipped {len(bad)} unreadable line(s): {bad[:10]}")
    damaged = state.config_damage(run_dir) if not config and run_dir.is_dir() else []
    if damaged:  # named as `sweep check` names it: the run's config columns stay empty
        notes.append(f"damaged: {run_dir.name}: {'; '.join(damaged)} (its config is unknown)")
    row = {**rows.run_row(s, config, source=str(run_dir)), "path": str(run_dir)}
    return row, config, rows.history_from_records(lines)


def _assemble(loaded: list[tuple[dict, dict, pd.DataFrame]], notes: list[str]) -> Results:
    """(row, config, raw history) per run -> Results, with ``variant`` set across all runs."""
    for (row, _, _), variant in zip(loaded, rows.variants([c for _, c, _ in loaded]), strict=True):
        row["variant"] = variant
    runs = pd.DataFrame.from_records([r for r, _, _ in loaded], columns=rows.RUN_COLUMNS)
    for columns, dtype in ((rows.INT_COLUMNS, "Int64"), (rows.FLOAT_COLUMNS, "float64")):
        runs[columns] = runs[columns].apply(pd.to_numeric, errors="coerce").astype(dtype)
    runs = runs.astype({"tie": "boolean", "t5_rescale": "boolean", "git_dirty": "boolean"})
    runs = runs.sort_values(
        ["sweep", "model", "init_std", "tie", "seed", "run_id"], na_position="last", kind="stable"
    ).reset_index(drop=True)
    history = _history_frame([(r, h) for r, _, h in loaded])
    gpu = any(
        str((c.get("derived") or {}).get("device", "")).startswith("cuda") for _, c, _ in loaded
    )
    return Results(runs, history, notes + check_consistency(runs, gpu=gpu))


def _history_frame(histories: list[tuple[dict, pd.DataFrame]]) -> pd.DataFrame:
    """Identity columns on each run's history; a diverged run's history ends at its divergence."""

    def end(r):
        diverged = r["status"] == "diverged" and pd.notna(r["diverged_at_step"])
        return r["diverged_at_step"] if diverged else np.inf

    kept = [(r, h[h["step"] <= end(r)]) for r, h in histories if not h.empty]
    columns = [*rows.HISTORY_ID_COLUMNS, "step", "tokens"]
    if not kept:
        return pd.DataFrame(columns=columns)
    ids = rows.HISTORY_ID_COLUMNS
    history = pd.concat([h for _, h in kept], ignore_index=True).drop(columns=ids, errors="ignore")
    lengths = [len(h) for _, h in kept]
    repeated = {c: _repeated([r[c] for r, _ in kept], lengths) for c in ids}
    history = pd.concat([history, pd.DataFrame(repeated)], axis=1)
    metrics = sorted(set(history.columns) - set(columns))  # tokens: NaN where never logged
    history = history.reindex(columns=columns + metrics).astype({"tie": "boolean"})
    history["seed"] = pd.to_numeric(history["seed"], errors="coerce").astype("Int64")
    return history.sort_values(["run_id", "step"], kind="stable").reset_index(drop=True)


def _repeated(values: list, lengths: list[int]) -> pd.Series:
    """``values[i]`` over ``lengths[i]`` rows: the column that concatenating each run's frame with
    the value set on it (assign) gives, made whole where every value has one type (an assign per
    run and column was most of a cached bundle's read: 0.7 of 1.2 s for 149 runs)."""
    if len({type(v) for v in values}) == 1:
        dtype = pd.Series(values[0], index=range(1)).dtype
        return pd.Series(np.repeat(np.array(values, dtype=object), lengths)).astype(dtype)
    parts = [pd.Series(v, index=range(n)) for v, n in zip(values, lengths, strict=True)]
    return pd.concat(parts, ignore_index=True)


def check_consistency(runs: pd.DataFrame, gpu: bool = True) -> list[str]:
    """Human-readable warnings about a runs table: mixed data or vocab sizes, unfinished runs;
    different MFU peaks only where a run trained on a GPU (``gpu``: a CPU's measured peak is noise
    of no use, and its MFU is not what the study reads)."""
    notes = []
    checked = [("vocab_size", "vocab sizes"), ("data_id", "data configurations")]
    if "test_bpb" in runs and runs["test_bpb"].notna().all():  # bits per byte: comparable
        checked = checked[1:]  # across vocabularies (docs/data.md, "Bits per byte")
    for col, what in checked:
        by_value = runs.groupby(col)["sweep"].agg(["size", lambda s: ", ".join(sorted(set(s)))])
        if len(by_value) > 1:
            parts = [f"{v} ({n} runs; sweeps {sw})" for v, (n, sw) in by_value.iterrows()]
            notes.append(
                f"mixed sweeps: runs use {len(by_value)} different {what} ({col}): "
                f"{'; '.join(parts)}. Losses are only comparable within one {col}: "
                f"filter with runs[runs.{col} == ...]"
            )
    if gpu and runs["peak_tflops"].nunique() > 1:  # train/mfu is relative to each run's own peak
        notes.append(
            f"runs used {runs['peak_tflops'].nunique()} different MFU peaks (peak_tflops): "
            "compare train/mfu only within one peak, or pin it with trainer.peak_tflops"
        )
    for status, g in runs[runs["status"] != "finished"].groupby("status"):
        notes.append(
            f"{len(g)} run(s) {status}: " + ", ".join(map(str, g["name"].fillna(g["run_id"])))
        )
    return notes


def require_single_data(runs: pd.DataFrame, what: str = "this comparison") -> None:
    """Raise :class:`ResultsError` if ``runs`` mix vocab sizes or data configurations."""
    for col in ("vocab_size", "data_id"):
        counts = runs[col].dropna().value_counts(sort=False)
        if len(counts) > 1:
            raise ResultsError(
                f"{what} needs runs on one dataset, but they mix {len(counts)} values of {col} "
                f"({', '.join(f'{v!r}: {n} runs' for v, n in counts.items())}); select one, e.g. "
                f"results.select(results.runs.{col} == {counts.index[0]!r}) or the CLI's --data-id"
            )


def load_wandb(project: str, *, group: str | None = None) -> Results:
    """The runs and history tables of a W&B project ("entity/project"; optionally one group =
    one sweep). Needs network and a W&B key: raises :class:`WandbUnavailableError` otherwise."""
    import wandb

    try:
        filters = {"group": group} if group else None
        wb_runs = list(wandb.Api(timeout=10).runs(project, filters=filters))
    except Exception as e:  # noqa: BLE001 - wandb raises many types; all mean "cannot read"
        raise WandbUnavailableError(
            f"cannot read W&B project {project!r}: {e.__class__.__name__}: {e}. "
            "Log in with `wandb login` (or set WANDB_API_KEY), check the name, "
            "or read the sweep directory: load_results(SWEEP_DIR)"
        ) from None
    if not wb_runs:
        raise ResultsError(
            f"W&B project {project} has no runs" + (f" in group {group!r}" if group else "")
        )
    loaded = [
        (rows.wandb_run_row(r), dict(r.config), rows.history_from_records(r.scan_history()))
        for r in wb_runs
    ]
    return _assemble(loaded, [])
