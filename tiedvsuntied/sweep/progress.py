"""Where a sweep's runs stand, read from its directory while it runs: each run's summary.json
(the trainer writes it at every evaluation), the sweep's index.json and each run's lock. The
cost of what is left comes from the sweep's own finished runs; the table a multirun prints at
its end (``runs_table``). No torch: it only reads."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from tiedvsuntied.results.records import DONE, RUN_FILES, read_index, read_summary
from tiedvsuntied.results.state import damage, read_planned, run_status

# The statuses shown, in the order they are counted. ``interrupted``: a run whose process
# stopped before its end (killed, Ctrl-C): a rerun resumes it from its last checkpoint.
SHOWN = ["finished", "diverged", "running", "interrupted", "failed", "pending"]
ROW = ["run_id", "name", "model", "vocab_size", "status", "step", "max_steps", "wall_time_s"]
ROW += ["params"]
ROW += ["init_val_loss", "final_val_loss", "test_loss"]
# The table at the end of a multirun: its columns, and what a status means there
TABLE = {"name": "run", "status": "status", "params": "params"}
TABLE |= {"init_val_loss": "init val", "final_val_loss": "final val", "test_loss": "test"}
MEANS = {"running": "running (another process)", "interrupted": "interrupted (a rerun resumes)"}


def run_row(run_dir: Path, run_id: str | None = None) -> dict:
    """One run's row (ROW): a run not begun is ``pending`` with what is known of it."""
    summary = read_summary(run_dir)
    row = dict.fromkeys(ROW) | {"run_id": run_id or Path(run_dir).name, "step": 0}
    if summary is not None:
        row |= {k: getattr(summary, k) for k in ROW if k != "status"}
        row["params"] = (summary.params or {}).get("total")
    row["status"] = run_status(summary, Path(run_dir))
    return row


def sweep_rows(sweep_dir: Path) -> pd.DataFrame:
    """Every run the sweep directory knows: its index's entries, any run folder with a summary
    (a run whose index entry was not written yet) and the jobs its multiruns planned
    (``planned.json``): ``pending`` until their run begins."""
    paths = {sweep_dir / Path(entry.path).name for entry in read_index(sweep_dir).values()}
    paths |= {p.parent for p in sweep_dir.glob("*/summary.json")}
    rows = [run_row(p) for p in sorted(paths)]
    known = {p.name for p in paths}
    for run_id, job in sorted(read_planned(sweep_dir).items()):
        if run_id not in known:
            rows.append(
                dict.fromkeys(ROW)
                | {k: job.get(k) for k in ("name", "model", "vocab_size", "max_steps")}
                | {"run_id": run_id, "status": "pending", "step": 0}
            )
    return pd.DataFrame(rows, columns=ROW)


def damaged(sweep_dir: Path) -> list[str]:
    """One line per run of the sweep whose record is damaged (results.state.damage), naming
    what is wrong: every run folder the index lists or that holds a run's file."""
    index = read_index(sweep_dir)
    folders = {sweep_dir / Path(entry.path).name: run_id for run_id, entry in index.items()}
    folders |= {p: p.name for p in sweep_dir.iterdir() if is_run_dir(p) and p not in folders}
    lines = []
    for folder, run_id in sorted(folders.items()):
        found = damage(folder) if folder.is_dir() else ["listed in index.json, folder missing"]
        lines += [f"damaged: {run_id}: {'; '.join(found)}"] if found else []
    return lines


def is_run_dir(path: Path) -> bool:
    names = (*RUN_FILES, "checkpoints")
    return (
        path.is_dir()
        and not path.name.startswith((".", "_"))
        and any((path / name).exists() for name in names)
    )


def runs_table(sweep_dir: Path) -> pd.DataFrame:
    """The sweep's runs as a multirun shows them at its end: status, size and losses, and what
    else the user set that tells them apart (``also``: the overrides not every run shares, less
    the axes the run's name shows)."""
    runs = sweep_rows(sweep_dir).sort_values("run_id")
    index = read_index(sweep_dir)
    table = runs[list(TABLE)].rename(columns=TABLE).replace({"status": MEANS})
    table["params"] = [f"{n:,.0f}" if pd.notna(n) else "-" for n in runs["params"]]
    asked = [set(index[r].overrides) if r in index else set() for r in runs["run_id"]]
    shared = set.intersection(*asked) if asked else set()
    named = ("tie=", "init_std=", "model=", "seed=")
    table["also"] = [
        " ".join(sorted(o for o in a - shared if not o.startswith(named))) for a in asked
    ]
    return table if table["also"].astype(bool).any() else table.drop(columns="also")


def size(runs: pd.DataFrame) -> pd.Series:
    """A run's size for its cost: the model and, where known, the vocabulary ("micro V=4096"):
    at one body the head's V sets the step's cost (a V-ladder's steps differ 4x)."""
    named = [
        f"{model} V={int(v)}" if pd.notna(v) else str(model)
        for model, v in zip(runs["model"], runs["vocab_size"], strict=True)
    ]
    return pd.Series(named, index=runs.index, dtype=object)


def rates(sweep_dirs) -> pd.Series:
    """Seconds per step by size (:func:`size`), then by model for a size with no finished run
    (a job whose V its config leaves to the encoding): the median over the finished runs of
    these sweep directories that recorded their wall time (no rate: the cost is unknown)."""
    rows = [sweep_rows(d) for d in set(sweep_dirs) if Path(d).is_dir()]
    runs = pd.concat(rows) if rows else pd.DataFrame(columns=ROW)
    done = runs[(runs["status"] == "finished") & (runs["step"] > 0)].dropna(subset="wall_time_s")
    per_step = done["wall_time_s"].astype(float) / done["step"]
    by_size = per_step.groupby(size(done)).median()
    by_model = per_step.groupby(done["model"]).median()
    return pd.concat([by_size, by_model[~by_model.index.isin(by_size.index)]])


def seconds_left(runs: pd.DataFrame, rate: pd.Series) -> pd.Series:
    """The run time each run still needs (0 when done; NaN when its size and model have no
    rate). A resumed run goes on from its last checkpoint, at most a few steps before ``step``."""
    steps = (runs["max_steps"] - runs["step"]).clip(lower=0)
    steps = steps.where(~runs["status"].isin(DONE), 0)
    per_step = size(runs).map(rate).fillna(runs["model"].map(rate))
    return steps * per_step.astype(float)


def duration(seconds: float) -> str:
    if pd.isna(seconds):
        return "unknown"
    minutes, s = divmod(round(seconds), 60)
    hours, m = divmod(minutes, 60)
    return f"{hours}h{m:02d}m" if hours else f"{m}m{s:02d}s" if m else f"{s}s"


def cost_line(runs: pd.DataFrame, rate: pd.Series) -> str:
    """What is left, in run time: known where the sweep has finished runs of that size."""
    left = seconds_left(runs, rate)
    todo = left.isna() | (left > 0)
    if not todo.any():
        return "nothing left to run"
    known = left[todo].dropna()
    text = f"{todo.sum()} run(s) not done: "
    text += f"{duration(known.sum())} of run time for {len(known)}" if len(known) else "cost"
    per = ", ".join(f"{model} {r:.3g} s/step" for model, r in rate.items())
    text += f" (from finished runs: {per})" if per else ""
    unknown = ", ".join(sorted(set(size(runs)[left.isna()])))
    return text + (f"; unknown for {unknown}: no finished run of that size yet" if unknown else "")


def status_text(runs: pd.DataFrame, rate: pd.Series) -> str:
    """Counts by status, steps done of all steps, each running run's step, and an ETA: the run
    time left over the runs training now (one at a time if none is)."""
    counts = runs["status"].value_counts()
    shown = [f"{counts[s]} {s}" for s in SHOWN if s in counts]
    steps = runs["step"].fillna(0)
    total = int(runs["max_steps"].fillna(0).sum())
    lines = [f"{len(runs)} runs: {', '.join(shown) or 'none'}"]
    if total:
        lines.append(f"steps: {int(steps.sum()):,} of {total:,} ({steps.sum() / total:.0%})")
    running = runs[runs["status"] == "running"]
    lines += [
        f"running: {r.run_id} at step {r.step} of {r.max_steps}" for r in running.itertuples()
    ]
    left = seconds_left(runs, rate)
    if not (left.isna() | (left > 0)).any():
        return "\n".join([*lines, "ETA: done"])
    parallel = max(1, len(running))
    eta = duration(left.sum() / parallel) if left.notna().all() else "unknown"
    lines.append(f"ETA: {eta} ({parallel} run(s) at a time); {cost_line(runs, rate)}")
    return "\n".join(lines)
