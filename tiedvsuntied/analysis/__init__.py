"""Results -> two tidy pandas DataFrames: ``runs`` (one row per run) and ``history`` (one row per
run and logged step). Sweep directories and W&B both go through :func:`run_row`, so the columns
agree (docs/figures.md lists them). Means over seeds carry a Student-t interval."""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import typing
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from omegaconf import OmegaConf
from scipy import integrate, stats

from tiedvsuntied import model as M
from tiedvsuntied import results as R

RUN_COLUMNS = [
    "sweep",
    "run_id",
    "name",
    "status",
    "error",
    "tie",
    "head",
    "init_std",
    "init_std_resolved_emb",
    "init_std_resolved_head",
    "model",
    "n_layer",
    "n_embd",
    "n_head",
    "vocab_size",
    "block_size",
    "seed",
    "t5_rescale",
    "data",
    "data_id",
    "max_steps",
    "untie_step",
    "variant",
    "params_total",
    "params_embedding",
    "params_position",
    "params_head",
    "params_non_embedding",
    "flops_per_token",
    "step",
    "tokens",
    "diverged_at_step",
    "init_val_loss",
    "init_logit_std",
    "init_self_logit",
    "init_self_target_frac",
    "final_val_loss",
    "best_val_loss",
    "best_step",
    "test_loss",
    "test_loss_at_best",
    "lr",
    "seen_vocab_frac",
    "clip_frac",
    "peak_tflops",
    "ln_vocab",
    "wandb_run_id",
    "wandb_mode",
    "started_at",
    "updated_at",
    "source",
    "path",
]
HISTORY_ID_COLUMNS = [
    "run_id",
    "sweep",
    "name",
    "status",
    "tie",
    "head",
    "init_std",
    "model",
    "variant",
    "seed",
]
GROUP_COLUMNS = [
    "data_id",
    "model",
    "variant",
    "tie",
    "init_std",
]  # runs averaged over seeds share these
CONFIDENCE = 0.95  # of the t-intervals the figures draw
MIN_BAND_SEEDS = (
    3  # fewer seeds: figures draw each seed, no interval (n = 2 t-bands are uninformative)
)
PAIR_COLUMNS = [
    "data_id",
    "model",
    "variant",
    "init_std",
    "seed",
]  # a tied/untied pair shares these

# Config keys that never make two runs different experiments (bookkeeping, the study's axes,
# the size, what data_id covers). Any other model/optim/trainer key whose value differs among
# the loaded runs (model.t5_rescale, optim.lr, ...) goes into `variant`.
_NOT_VARIANT = (
    "model.name",
    "model.n_layer",
    "model.n_head",
    "model.n_embd",
    "model.block_size",
    "model.vocab_size",
    "trainer.progress",
    "trainer.log_interval",
    "trainer.ckpt_interval",
    "trainer.peak_tflops",
    "trainer.device",
    "trainer.compile",
    "trainer.eval_batch_size",
    "trainer.loss_chunk",
    "trainer.eval_interval",
    "trainer.test_eval",
)
_VARIANT_SECTIONS = ("model.", "optim.", "trainer.", "finetune.", "init_from", "untie_at")
_SUMMARY_KEYS = [
    c
    for c in RUN_COLUMNS
    if c not in ("head", "data_id", "variant", "ln_vocab", "source", "path", "lr")
    and not c.startswith(("params_", "init_std_resolved_"))
]
# Column dtypes follow the summary.json schema (Int64: a missing count stays NA, not a float).
_TYPES = typing.get_type_hints(R.RunSummary)
_INT_COLUMNS = [
    c for c in RUN_COLUMNS if _TYPES.get(c) in (int, int | None) or c.startswith("params_")
]
_FLOAT_COLUMNS = [
    c
    for c in RUN_COLUMNS
    if _TYPES.get(c) in (float, float | None) or c.startswith("init_std_resolved_")
] + ["ln_vocab", "lr"]
# When one run is found twice (several sweeps, a run dir and its sweep), the best record wins.
STATUS_RANK = {"finished": 0, "diverged": 1, "running": 2, "failed": 3, "unknown": 4}


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


# ----------------------------------------------------------------------------- loading
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
    loaded.sort(key=lambda x: x[0]["updated_at"] or "", reverse=True)  # newest first...
    loaded.sort(
        key=lambda x: STATUS_RANK.get(x[0]["status"], 9)
    )  # ...within the best status (stable)
    kept: dict[str, tuple] = {}
    for row, *rest in loaded:
        best = kept.setdefault(row["run_id"], (row, *rest))[0]
        if best is not row:
            notes.append(
                f"run {row['run_id']} found twice: kept {best['path']} ({best['status']}), "
                f"not {row['path']} ({row['status']})"
            )
    return _assemble(list(kept.values()), notes)


def load(
    sweep_dirs: str | Path | Sequence[str | Path] = (),
    *,
    wandb_project: str | None = None,
    wandb_group: str | None = None,
    data_id: str | None = None,
) -> Results:
    """What the notebooks call: a W&B project if given, else sweep directories (a list, or one string
    joined by os.pathsep); with ``data_id``, only the runs on that data (for mixed sweeps)."""
    if isinstance(sweep_dirs, (str, Path)):
        sweep_dirs = [p for p in str(sweep_dirs).split(os.pathsep) if p]
    results = (
        load_wandb(wandb_project, group=wandb_group or None)
        if wandb_project
        else load_results(*sweep_dirs)
    )
    if data_id:
        ids = sorted(results.runs["data_id"].dropna().unique())
        if data_id not in ids:
            raise ResultsError(
                f"data_id {data_id!r} matches no run; data_ids present: {', '.join(ids) or 'none'}"
            )
        results = results.select(results.runs["data_id"] == data_id)
    return results


def _find_runs(path: Path, notes: list[str]) -> list[tuple[Path, R.IndexEntry | None]]:
    """(run_dir, index.json entry or None) for every run under ``path``."""
    if not path.is_dir():
        raise ResultsError(
            f"results directory {path} does not exist"
            if not path.exists()
            else f"{path} is not a directory: pass a sweep directory (<results_dir>/<sweep>/)"
        )
    if (path / "summary.json").exists():
        return [(path, None)]
    if _looks_like_sweep(path):
        return _sweep_runs(path)
    sweeps = sorted(p for p in path.iterdir() if p.is_dir() and _looks_like_sweep(p))
    if not sweeps:
        raise ResultsError(
            f"no runs found in {path}: expected a sweep directory (index.json and "
            "<run_id>/summary.json), a run directory (summary.json) or a results directory of sweeps"
        )
    notes.append(
        f"{path}: read as a results directory holding {len(sweeps)} sweeps: "
        + ", ".join(p.name for p in sweeps)
    )
    return [r for s in sweeps for r in _sweep_runs(s)]


def _is_run_dir(p: Path) -> bool:
    return (
        p.is_dir()
        and not p.name.startswith(("_", "."))
        and any((p / f).exists() for f in ("summary.json", "metrics.jsonl", "config.yaml"))
    )


def _looks_like_sweep(path: Path) -> bool:
    return (path / "index.json").exists() or any(_is_run_dir(p) for p in path.iterdir())


def _sweep_runs(sweep: Path) -> list[tuple[Path, R.IndexEntry | None]]:
    found: dict[str, tuple[Path, R.IndexEntry | None]] = {}
    for run_id, entry in R.read_index(sweep).items():
        run_dir = sweep / (entry.path or run_id)
        found[run_id] = (
            run_dir if run_dir.is_dir() or not (sweep / run_id).is_dir() else sweep / run_id,
            entry,
        )
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
    run_dir: Path, entry: R.IndexEntry | None, notes: list[str]
) -> tuple[dict, dict, pd.DataFrame]:
    """(runs-table row, config, history) of one run directory."""
    summary, config, metrics = (
        R.read_summary(run_dir),
        R.read_config(run_dir),
        run_dir / "metrics.jsonl",
    )
    if summary is None:
        notes.append(
            f"{run_dir}: "
            + (
                "summary.json missing or unreadable; status from index.json or unknown"
                if run_dir.is_dir()
                else "listed in index.json but the directory does not exist"
            )
        )
    s = (
        summary.to_dict()
        if summary
        else {
            "run_id": run_dir.name,
            "name": entry and entry.name,
            "sweep": run_dir.parent.name,
            "status": R.Status(entry.status).value if entry else "unknown",
        }
    )
    if metrics.exists() and metrics.stat().st_size and not metrics.read_bytes().endswith(b"\n"):
        notes.append(f"{metrics}: skipped unparsable last line (still being written?)")
    row = {**run_row(s, config, source=str(run_dir)), "path": str(run_dir)}
    return row, config, history_from_records(R.read_metrics(run_dir))


def _assemble(loaded: list[tuple[dict, dict, pd.DataFrame]], notes: list[str]) -> Results:
    """(row, config, raw history) per run -> Results, with ``variant`` set across all runs."""
    for (row, _, _), variant in zip(loaded, variants([c for _, c, _ in loaded])):
        row["variant"] = variant
    runs = pd.DataFrame.from_records([r for r, _, _ in loaded], columns=RUN_COLUMNS)
    runs[_INT_COLUMNS] = runs[_INT_COLUMNS].apply(pd.to_numeric, errors="coerce").astype("Int64")
    runs[_FLOAT_COLUMNS] = (
        runs[_FLOAT_COLUMNS].apply(pd.to_numeric, errors="coerce").astype("float64")
    )
    runs = runs.astype({"tie": "boolean", "t5_rescale": "boolean"})
    runs = runs.sort_values(
        ["sweep", "model", "init_std", "tie", "seed", "run_id"], na_position="last", kind="stable"
    ).reset_index(drop=True)
    history = _history_frame([(r, h) for r, _, h in loaded])
    return Results(runs, history, notes + check_consistency(runs))


def variants(configs: Sequence[Mapping[str, Any]]) -> list[str]:
    """Per config: "key=value, ..." for the model/optim/trainer keys whose values differ among
    ``configs`` ("" where none does). A key a config lacks is not counted as a difference."""
    flat = [
        {
            k: v
            for k, v in flatten(c or {}).items()
            if k.startswith(_VARIANT_SECTIONS) and not k.startswith(_NOT_VARIANT)
        }
        for c in configs
    ]
    keys = sorted({k for f in flat for k in f})
    differing = [
        k
        for k in keys
        if len({json.dumps(f[k], sort_keys=True, default=str) for f in flat if k in f}) > 1
    ]
    return [", ".join(f"{k}={f[k]}" for k in differing if k in f) for f in flat]


def history_from_records(records: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """Logged dicts -> one numeric row per step; later records of a step win (a resumed run logs
    the steps after its checkpoint again); W&B's ``_step`` is ``step``, its other ``_`` keys go."""
    rows = [
        {k: v for k, v in {"step": rec.get("_step"), **rec}.items() if not k.startswith("_")}
        for rec in records
    ]
    if not rows:
        return pd.DataFrame()
    df = (
        pd.DataFrame.from_records(rows)
        .apply(pd.to_numeric, errors="coerce")
        .dropna(subset=["step"])
    )
    df["step"] = df["step"].astype("int64")
    return df.groupby("step", sort=True).last().reset_index().replace([np.inf, -np.inf], np.nan)


def _history_frame(histories: list[tuple[dict, pd.DataFrame]]) -> pd.DataFrame:
    """Identity columns on each run's history; a diverged run's history ends at its divergence."""

    def end(r):
        return (
            r["diverged_at_step"]
            if r["status"] == "diverged" and pd.notna(r["diverged_at_step"])
            else np.inf
        )

    parts = [
        h[h["step"] <= end(r)].assign(**{c: r[c] for c in HISTORY_ID_COLUMNS})
        for r, h in histories
        if not h.empty
    ]
    if not parts:
        return pd.DataFrame(columns=HISTORY_ID_COLUMNS + ["step", "tokens"])
    history = pd.concat(parts, ignore_index=True)
    if "tokens" not in history:
        history["tokens"] = np.nan
    metrics = sorted(c for c in history.columns if c not in HISTORY_ID_COLUMNS + ["step", "tokens"])
    history = history[HISTORY_ID_COLUMNS + ["step", "tokens"] + metrics].astype({"tie": "boolean"})
    history["seed"] = pd.to_numeric(history["seed"], errors="coerce").astype("Int64")
    return history.sort_values(["run_id", "step"], kind="stable").reset_index(drop=True)


# ----------------------------------------------------------------------------- one row per run
def flatten(d: Mapping[str, Any]) -> dict[str, Any]:
    """{'a': {'b': 1}} -> {'a.b': 1}."""
    return pd.json_normalize(dict(d), sep=".").to_dict("records")[0]


def unflatten(d: Mapping[str, Any]) -> dict[str, Any]:
    """{'a.b': 1} -> {'a': {'b': 1}} (nested dicts pass through)."""
    out: dict[str, Any] = {}
    for k, v in flatten(d).items():
        *parents, leaf = str(k).split(".")
        functools.reduce(lambda node, p: node.setdefault(p, {}), parents, out)[leaf] = v
    return out


def _bool(value: Any) -> bool | None:
    if isinstance(value, str):
        value = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}.get(
            value.lower()
        )
    return (
        bool(value)
        if isinstance(value, (bool, np.bool_, int, np.integer)) and value in (0, 1)
        else None
    )


def run_row(
    summary: Mapping[str, Any],
    config: Mapping[str, Any] | None = None,
    *,
    source: str | None = None,
) -> dict[str, Any]:
    """One runs-table row from a ``summary.json`` dict; the config (nested, or W&B's dotted keys:
    ``derived``, top-level keys, the model/data/trainer sections) fills what the summary lacks."""
    s = dict(summary or {})
    config = unflatten(config or {})
    derived = config.get("derived") or {}
    section = lambda name: config.get(name) if isinstance(config.get(name), Mapping) else {}
    model, data, trainer = section("model"), section("data"), section("trainer")
    fallbacks = {
        "model": model.get("name"),
        "data": data.get("name"),
        "max_steps": trainer.get("max_steps"),
        **{
            k: model.get(k)
            for k in ("n_layer", "n_embd", "n_head", "vocab_size", "block_size", "t5_rescale")
        },
    }
    for key in [*_SUMMARY_KEYS, "params", "init_std_resolved", "data_fingerprint"]:
        for value in (s.get(key), config.get(key), derived.get(key), fallbacks.get(key)):
            if value is not None and (
                not isinstance(value, Mapping) or key in ("params", "init_std_resolved")
            ):
                s[key] = value
                break
    row: dict[str, Any] = {c: s.get(c) for c in RUN_COLUMNS}
    row["tie"], row["t5_rescale"] = _bool(row["tie"]), _bool(row["t5_rescale"])
    row["head"] = {True: "tied", False: "untied"}.get(row["tie"])
    try:
        row["init_std"] = (
            M.canonical_init_std(row["init_std"]) if row["init_std"] is not None else None
        )
    except (TypeError, ValueError):
        row["init_std"] = str(row["init_std"])
    nested = pd.json_normalize(
        {k: s.get(k) or {} for k in ("params", "init_std_resolved")}, sep="_"
    )  # params_total...
    row.update({k: v for k, v in nested.to_dict("records")[0].items() if k in row})
    row["status"] = row["status"] or "unknown"
    row["ln_vocab"] = math.log(float(row["vocab_size"])) if row["vocab_size"] else None
    if s.get("data_fingerprint"):  # data_id: runs are comparable only when they share it
        row["data_id"] = str(s["data_fingerprint"])[:12]
    elif data:  # no fingerprint: a hash of the data config (cache keys left out)
        blob = json.dumps(
            {
                "data": {k: v for k, v in data.items() if "cache" not in str(k).lower()},
                "vocab_size": row["vocab_size"],
            },
            sort_keys=True,
            default=str,
        )
        row["data_id"] = "cfg-" + hashlib.sha1(blob.encode()).hexdigest()[:8]
    row["lr"] = section("optim").get("lr")
    row["source"], row["path"], row["variant"] = source, None, None
    return row


# ----------------------------------------------------------------------------- checks
def check_consistency(runs: pd.DataFrame) -> list[str]:
    """Human-readable warnings about a runs table: mixed data or vocab sizes, unfinished runs."""
    notes = []
    for col, what in (("vocab_size", "vocab sizes"), ("data_id", "data configurations")):
        by_value = (
            runs.dropna(subset=[col])
            .groupby(col)["sweep"]
            .agg(["size", lambda s: ", ".join(sorted(set(s)))])
        )
        if len(by_value) > 1:
            parts = [f"{v} ({n} runs; sweeps {sw})" for v, (n, sw) in by_value.iterrows()]
            notes.append(
                f"mixed sweeps: runs use {len(by_value)} different {what} ({col}): "
                + "; ".join(parts)
                + f". Losses are only comparable within one {col}: filter with runs[runs.{col} == ...]"
            )
    if runs["peak_tflops"].nunique() > 1:  # train/mfu is relative to each run's own peak
        notes.append(
            f"runs used {runs['peak_tflops'].nunique()} different MFU peaks (peak_tflops): compare train/mfu "
            "only within one peak, or pin it with trainer.peak_tflops"
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


# ----------------------------------------------------------------------------- statistics
def aggregate(
    df: pd.DataFrame, by: Sequence[str], value: str, *, carry: Sequence[str] = ()
) -> pd.DataFrame:
    """``value`` over each group of ``by`` (typically: seeds): n, mean, std, sem, the CONFIDENCE
    t interval (``ci_low``, ``ci_high``, ``ci_half``; NaN for n=1), ``ci_label``, ``carry``, ``run_ids``."""
    missing = [c for c in [*by, value, *carry] if c not in df.columns]
    if missing:
        raise KeyError(
            f"columns {missing} not in the table; available: {sorted(map(str, df.columns))}"
        )
    df = df.assign(
        **{value: pd.to_numeric(df[value], errors="coerce").replace([np.inf, -np.inf], np.nan)}
    )
    g = df.groupby(list(by), dropna=False, sort=True)
    out = g[value].agg(n="count", mean="mean", std="std")
    if carry:
        out = out.join(g[list(carry)].first())
    if "run_id" in df:
        out["run_ids"] = g["run_id"].agg(list)
    out = out.reset_index()
    n = out["n"].astype(float)
    out["sem"] = out["std"] / np.sqrt(n)
    out["ci_half"] = stats.t.ppf((1 + CONFIDENCE) / 2, (n - 1).where(n > 1)) * out["sem"]
    out["ci_low"], out["ci_high"] = out["mean"] - out["ci_half"], out["mean"] + out["ci_half"]
    out["ci_label"] = [
        f"{CONFIDENCE:.0%} t-CI, n={k}" if k > 1 else ("n=1: no CI" if k == 1 else "no data")
        for k in out["n"]
    ]
    cols = [*by, "n", "mean", "std", "sem", "ci_low", "ci_high", "ci_half", "ci_label", *carry]
    return out[cols + (["run_ids"] if "run_id" in df else [])]


def aggregate_runs(runs: pd.DataFrame, value: str = "final_val_loss") -> pd.DataFrame:
    """Mean and CI of a summary value over seeds, per data/size/variant/tie/init std; only
    finished runs count (a diverged run has no meaningful final loss)."""
    carry = ["n_embd", "n_layer", "params_total", "params_non_embedding", "vocab_size"]
    return aggregate(runs[runs["status"] == "finished"], GROUP_COLUMNS, value, carry=carry)


def aggregate_history(
    history: pd.DataFrame,
    metric: str = "val/loss",
    *,
    by: Sequence[str] = ("model", "tie", "init_std"),
) -> pd.DataFrame:
    """Per group and step: mean and CI of ``metric`` over the group's runs (seeds), plus the
    mean ``tokens``. Diverged and failed runs are left out here: plot them one by one."""
    if metric not in history.columns:
        raise KeyError(
            f"metric {metric!r} not in the history; logged metrics: "
            f"{sorted(c for c in history.columns if '/' in str(c))}"
        )
    h = history[history["status"].isin(["finished", "running"]) & history[metric].notna()]
    tokens = h.groupby([*by, "step"], dropna=False)["tokens"].mean().reset_index()
    return aggregate(h, [*by, "step"], metric).merge(tokens, on=[*by, "step"], how="left")


def paired_differences(runs: pd.DataFrame, value: str = "final_val_loss") -> pd.DataFrame:
    """tied − untied (``diff``) of finished runs that share PAIR_COLUMNS; the others are listed in
    ``.attrs["unpaired"]``. Two runs in one slot (two sweeps, same seeds) raise :class:`ResultsError`."""
    label = lambda r: r["name"] or r["run_id"]
    ok = runs[(runs["status"] == "finished") & runs["tie"].notna()]
    unpaired = [f"{label(r)}: status {r['status']}" for _, r in runs.drop(ok.index).iterrows()]
    dup = ok[ok.duplicated(PAIR_COLUMNS + ["tie"], keep=False)]
    if not dup.empty:
        raise ResultsError(
            "several runs share data_id/model/variant/init_std/seed/tie, so tied and untied cannot "
            "be paired: "
            + ", ".join(f"{r.run_id} (sweep {r.sweep})" for r in dup.itertuples())
            + "; select one sweep first"
        )
    side = {t: ok[ok["tie"] == t].set_index(PAIR_COLUMNS)[[value, "run_id"]] for t in (True, False)}
    both = side[True].merge(
        side[False], how="outer", left_index=True, right_index=True, suffixes=("_t", "_u")
    )
    for _, r in both[both["run_id_t"].isna() | both["run_id_u"].isna()].iterrows():
        run = runs.set_index("run_id").loc[
            r["run_id_t"] if pd.notna(r["run_id_t"]) else r["run_id_u"]
        ]
        unpaired.append(
            f"{run['name'] or run.name}: no {'untied' if run['tie'] else 'tied'} partner "
            "with the same data, size, variant, init std and seed"
        )
    both = both.dropna(subset=["run_id_t", "run_id_u"]).reset_index()
    out = (
        pd.DataFrame(
            {
                **{c: both[c] for c in PAIR_COLUMNS},
                "tied": both[f"{value}_t"],
                "untied": both[f"{value}_u"],
                "diff": both[f"{value}_t"] - both[f"{value}_u"],
                "tied_run_id": both["run_id_t"],
                "untied_run_id": both["run_id_u"],
            }
        )
        .sort_values(PAIR_COLUMNS)
        .reset_index(drop=True)
    )
    out.attrs.update(unpaired=unpaired, value=value)
    return out


def summarize_differences(pairs: pd.DataFrame) -> pd.DataFrame:
    """Mean paired difference (tied − untied) over seeds with its t CI, per data/size/variant/init std."""
    return aggregate(pairs, ["data_id", "model", "variant", "init_std"], "diff")


# ----------------------------------------------------------------------------- probe arrays
def _probes(runs: pd.DataFrame, steps: Sequence[int | str], missing: list[str]):
    """(run, requested step, probe step, arrays) per run and step that has a probe file;
    "first"/"last" name the run's first/last probe, and a probe is read once per run."""
    for _, run in runs.iterrows():
        found = (
            (p.stem.removeprefix("step_"), p)
            for p in Path(run.get("path") or "-", "probes").glob("step_*.npz")
        )
        files, seen = sorted((int(s), p) for s, p in found if s.isdigit()), set()
        if not files:
            missing.append(
                f"{run.get('name') or run['run_id']}: no probes/step_*.npz"
                + ("" if run.get("path") else " (not a local run directory)")
            )
            continue
        by_name = {"first": files[0], "last": files[-1], **{str(s): (s, p) for s, p in files}}
        for which in steps:
            if (pick := by_name.get(str(which))) is None:
                missing.append(f"{run.get('name') or run['run_id']}: no probe at step {which}")
            elif pick[0] not in seen:
                seen.add(pick[0])
                with np.load(pick[1]) as z:
                    yield (
                        run,
                        which,
                        pick[0],
                        {k: np.asarray(z[k], dtype="float32").ravel() for k in z.files},
                    )


def load_token_probes(runs: pd.DataFrame, step: int | str = "last") -> pd.DataFrame:
    """Per-token probe arrays, long: ``count`` is the train-split frequency (NA without
    ``token_freq.npy``), ``in_out_cos`` NaN for tied runs; gaps in ``.attrs["missing"]``."""
    parts, missing = [], []
    for run, _, probe_step, arrays in _probes(runs, [step], missing):
        label, n = run.get("name") or run["run_id"], len(arrays.get("emb_norm", ()))
        if not n:
            missing.append(
                f"{label}: probe at step {probe_step} has no 'emb_norm' (keys: {sorted(arrays)})"
            )
            continue
        df = pd.DataFrame(
            {"run_id": run["run_id"], "probe_step": probe_step, "token": np.arange(n)}
        )
        for k in ("emb_norm", "head_norm", "in_out_cos"):
            df[k] = arrays[k] if len(arrays.get(k, ())) == n else np.float32(np.nan)
        freq_path = Path(run["path"], "token_freq.npy")
        freq = np.load(freq_path) if freq_path.exists() else None
        df["count"] = pd.array(
            freq if freq is not None and len(freq) == n else [pd.NA] * n, dtype="Int64"
        )
        if freq is None or len(freq) != n:
            missing.append(
                f"{label}: token_freq.npy "
                + ("missing" if freq is None else f"has length {len(freq)}, probes have {n}")
                + " (norms kept, frequency unknown)"
            )
        parts.append(df)
    return _long(
        parts,
        ["run_id", "probe_step", "token", "count", "emb_norm", "head_norm", "in_out_cos"],
        missing,
    )


def load_stratum_cosines(
    runs: pd.DataFrame, steps: Sequence[int | str] = ("first", "last")
) -> pd.DataFrame:
    """The sampled off-diagonal cosines of E·Eᵀ per run, probe step (``which``: the requested step),
    vocabulary stratum (unseen / rare / frequent, probes.vocab_strata) and ``kind`` (raw, or centred:
    the stratum sample's mean row removed), long format. Runs from before the strata have one
    unstratified sample (stratum "all", raw only); gaps in ``.attrs["missing"]``."""
    parts, missing = [], []
    for run, which, probe_step, arrays in _probes(runs, steps, missing):
        found = {
            (k.split("_", 1)[1], "raw" if k.startswith("cos_") else "centred"): v
            for k, v in arrays.items()
            if k.startswith(("cos_", "ccos_"))
        } or ({("all", "raw"): arrays["offdiag_cos"]} if "offdiag_cos" in arrays else {})
        if not found:
            missing.append(
                f"{run.get('name') or run['run_id']}: probe at step {probe_step} has no cosines"
            )
        parts += [
            pd.DataFrame(
                {
                    "run_id": run["run_id"],
                    "probe_step": probe_step,
                    "which": str(which),
                    "stratum": stratum,
                    "kind": kind,
                    "cos": v,
                }
            )
            for (stratum, kind), v in found.items()
        ]
    return _long(parts, ["run_id", "probe_step", "which", "stratum", "kind", "cos"], missing)


def _long(parts: list[pd.DataFrame], cols: list[str], missing: list[str]) -> pd.DataFrame:
    out = pd.concat(parts, ignore_index=True)[cols] if parts else pd.DataFrame(columns=cols)
    out.attrs["missing"] = missing
    return out


# ----------------------------------------------------------------------------- W&B
def wandb_run_row(
    config: Mapping[str, Any],
    summary: Mapping[str, Any],
    *,
    run_id: str,
    name: str | None = None,
    group: str | None = None,
    state: str | None = None,
    url: str | None = None,
) -> dict[str, Any]:
    """One runs-table row from a W&B run: the summary.json values the trainer mirrors (dicts as
    "params/total"), gaps filled from the last metrics. Crashed, or "running" after W&B saw it stop: failed."""
    s = {k: v for k, v in summary.items() if not k.startswith("_")}
    for prefix in ("params", "init_std_resolved"):
        sub = {k.split("/", 1)[1]: v for k, v in summary.items() if k.startswith(prefix + "/")}
        if sub and not isinstance(s.get(prefix), Mapping):
            s[prefix] = sub
    for ours, theirs in (
        ("final_val_loss", "val/loss"),
        ("test_loss", "test/loss"),
        ("step", "_step"),
        ("test_loss_at_best", "test/loss_at_best"),
        ("init_logit_std", "init/logit_std"),
        ("init_self_logit", "init/self_logit"),
    ):
        if s.get(ours) is None and summary.get(theirs) is not None:
            s[ours] = summary[theirs]
    s = {"run_id": run_id, "name": name, "sweep": group, "wandb_run_id": run_id, **s}
    wb_state = {
        "running": "running",
        "finished": "finished",
        "crashed": "failed",
        "failed": "failed",
        "killed": "failed",
        "preempted": "failed",
    }.get(str(state or "").lower())
    if not s.get("status"):
        s["status"] = wb_state or "unknown"
    elif s["status"] == "running" and wb_state in ("failed", "finished"):
        s["status"] = "failed"  # W&B says it stopped, but it never recorded an end: it died
    return run_row(s, config, source=url or f"wandb:{run_id}")


def load_wandb(project: str, *, group: str | None = None, timeout: float = 10.0) -> Results:
    """The runs and history tables of a W&B project ("entity/project"; optionally one group =
    one sweep). Needs network and a W&B key: raises :class:`WandbUnavailableError` otherwise."""
    import wandb

    try:
        wb_runs = list(
            wandb.Api(timeout=int(timeout)).runs(
                project, filters={"group": group} if group else None
            )
        )
    except Exception as e:  # noqa: BLE001 - wandb raises many types; all mean "cannot read"
        raise WandbUnavailableError(
            f"cannot read W&B project {project!r}: {e.__class__.__name__}: {e}. Log in with `wandb login` (or set "
            "WANDB_API_KEY), check the name, or read the sweep directory: load_results(SWEEP_DIR)"
        ) from None
    if not wb_runs:
        raise ResultsError(
            f"W&B project {project} has no runs" + (f" in group {group!r}" if group else "")
        )
    loaded = [
        (
            wandb_run_row(
                dict(r.config),
                dict(r.summary),
                run_id=r.summary.get("run_id") or r.id,
                name=r.name,
                group=r.group,
                state=r.state,
                url=r.url,
            ),
            dict(r.config),
            history_from_records(r.scan_history()),
        )
        for r in wb_runs
    ]
    return _assemble(loaded, [])


# ----------------------------------------------------------------------------- initial loss theory
THEORY_DRAWS = (
    256  # logit vectors: with the control variate, standard error < 0.1% (tests/test_analysis.py)
)


@functools.lru_cache(maxsize=4)
def expected_max_normal(n: int) -> float:
    """E[max of n i.i.d. standard normals], by quadrature: sigma * this is E[logsumexp] at large sigma
    (sqrt(2 ln n) is its limit, and 10% high at n = 50257)."""
    density = lambda x: x * n * stats.norm.pdf(x) * np.exp((n - 1) * stats.norm.logcdf(x))
    return integrate.quad(density, -12, 12, points=[0, 2, 3, 4, 5], limit=200)[0]


@functools.lru_cache(maxsize=4)
def _logit_draws(vocab_size: int, draws: int) -> tuple[np.ndarray, np.ndarray]:
    """Fixed standard-normal logit vectors as (each minus its max, its max)."""
    g = np.random.default_rng(0).standard_normal((draws, vocab_size), dtype=np.float32)
    top = g.max(axis=1)
    return g - top[:, None], top.astype(np.float64)


def gaussian_logit_loss(
    sigma: float | Sequence[float],
    vocab_size: int,
    *,
    draws: int = THEORY_DRAWS,
    return_se: bool = False,
):
    """Expected loss E[logsumexp(z)] when the V logits are i.i.d. N(0, sigma^2) and independent of
    the target. Monte Carlo over ``draws`` fixed logit vectors (the same for every sigma: a smooth
    curve), with the largest logit as control variate (its mean sigma * E[max] is known exactly),
    which removes most of the variance where the largest logits dominate."""
    d, top = _logit_draws(int(vocab_size), int(draws))
    e_max, est, se = expected_max_normal(int(vocab_size)), [], []
    for s in np.atleast_1d(np.asarray(sigma, dtype=float)):
        lse = s * top + np.log(np.exp(np.float32(s) * d).sum(axis=1, dtype=np.float64))
        c = s * (top - e_max)
        v = lse - (np.cov(lse, c)[0, 1] / c.var() * c if c.var() > 0 else 0.0)
        est.append(v.mean())
        se.append(v.std(ddof=1) / math.sqrt(len(v)))
    return (np.array(est), np.array(se)) if return_se else np.array(est)


def gaussian_logit_loss_approx(sigma: float | Sequence[float], vocab_size: int) -> np.ndarray:
    """The two regimes of :func:`gaussian_logit_loss`: ln V + sigma^2/2 while the bulk of the logits
    dominates (up to sigma_c = sqrt(2 ln V)), sigma * E[max of V normals] once the largest does."""
    sig, ln_v = np.asarray(sigma, dtype=float), math.log(vocab_size)
    return np.where(
        sig <= math.sqrt(2 * ln_v), ln_v + sig**2 / 2, sig * expected_max_normal(int(vocab_size))
    )


def tied_initial_loss(self_logit, sigma, vocab_size: int, self_target_frac=0.0) -> np.ndarray:
    """Tied, the input token's own logit a = h·e_x is not one of V independent logits: after the
    final LayerNorm it is about sqrt(d)·|e_x|·cos(h, e_x), i.e. about std·d when the embedding
    dominates the residual stream. With G = E[logsumexp of V−1 N(0, sigma^2) logits], the loss is
    logaddexp(a, G) where the target is another token (its logit has mean 0), and softplus(G − a)
    where it is the input token itself (a fraction ``self_target_frac`` of positions: 2.4% of
    Tiny Shakespeare's). All from the logged step-0 a, sigma and that fraction."""
    a, p = (
        np.asarray(self_logit, dtype=float),
        np.nan_to_num(np.asarray(self_target_frac, dtype=float)),
    )
    g = gaussian_logit_loss(sigma, vocab_size - 1)
    return (1 - p) * np.logaddexp(a, g) + p * np.logaddexp(0.0, g - a)


def initial_loss_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per run: measured initial loss beside ln V and the predictions from its sigma: ``predicted``
    (i.i.d. Gaussian logits), ``predicted_tied`` (tied runs with ``init_self_logit``),
    ``predicted_approx``; ``excess`` = measured − the run's own prediction (tied: the tied one)."""
    cols = [
        "run_id",
        "name",
        "tie",
        "init_std",
        "variant",
        "model",
        "seed",
        "vocab_size",
        "ln_vocab",
        "init_logit_std",
        "init_self_logit",
        "init_self_target_frac",
        "init_val_loss",
    ]
    t = runs[cols].assign(predicted=np.nan, predicted_approx=np.nan, predicted_tied=np.nan)
    ok = t["init_logit_std"].notna() & t["vocab_size"].notna()
    for v, g in t[ok].groupby("vocab_size"):
        sigma = g["init_logit_std"].to_numpy(float)
        t.loc[g.index, "predicted"] = gaussian_logit_loss(sigma, int(v))
        t.loc[g.index, "predicted_approx"] = gaussian_logit_loss_approx(sigma, int(v))
        tied = g[(g["tie"] == True) & g["init_self_logit"].notna()]  # noqa: E712 (nullable booleans)
        if len(tied):
            t.loc[tied.index, "predicted_tied"] = tied_initial_loss(
                tied["init_self_logit"].to_numpy(float),
                tied["init_logit_std"].to_numpy(float),
                int(v),
                tied["init_self_target_frac"].to_numpy(float),
            )
    own = t["predicted_tied"].where(t["tie"] == True, t["predicted"])  # noqa: E712
    return t.assign(excess=t["init_val_loss"] - own)


def representative_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """One run per (tie, init std, variant) of the largest size that has a usable run: the
    lowest seed, finished first (for figures that show single runs)."""
    if runs.empty:
        return runs
    rank = (
        runs["status"].map({"finished": 0, "running": 1, "diverged": 1}).fillna(2)
    )  # failed, unknown: last
    pool = runs[rank < 2] if (rank < 2).any() else runs
    biggest = pool.sort_values(
        ["params_total", "n_embd"], ascending=False, na_position="last"
    ).iloc[0]["model"]
    cand = runs.assign(_rank=rank)[runs["model"] == biggest].sort_values(
        ["_rank", "seed"], kind="stable"
    )
    return (
        cand.groupby(["tie", "init_std", "variant"], dropna=False, sort=False)
        .head(1)
        .drop(columns="_rank")
    )


# ----------------------------------------------------------------------------- parameter table
def parameter_table(vocab_size: int = 50257) -> pd.DataFrame:
    """Every size in ``conf/model/*.yaml``, smallest first: shape, parameters tied and untied
    (unique: a tied matrix counts once), and training GFLOPs per token (the same tied or not)."""
    rows = []
    for path in sorted((Path(__file__).resolve().parents[2] / "conf" / "model").glob("*.yaml")):
        cfg = M.ModelConfig(
            **{**OmegaConf.to_container(OmegaConf.load(path)), "vocab_size": vocab_size}
        )
        tied, untied = M.count_parameters_for(cfg, True), M.count_parameters_for(cfg, False)
        rows.append(
            {
                "size": cfg.name,
                "n_layer": cfg.n_layer,
                "n_head": cfg.n_head,
                "n_embd": cfg.n_embd,
                "block_size": cfg.block_size,
                "total (tied)": tied["total"],
                "total (untied)": untied["total"],
                "non-embedding": tied["non_embedding"],
                "embedding (wte)": tied["embedding"],
                "position (wpe)": tied["position"],
                "head (untied)": untied["head"],
                "GFLOPs/token": round(M.flops_per_token(cfg) / 1e9, 3),
            }
        )
    return pd.DataFrame(rows).sort_values("total (tied)", ignore_index=True)
