"""Results -> tidy pandas DataFrames.

Two tables describe a set of runs (see docs/figures.md for every column):

* ``runs``: one row per run. Identity (``sweep``, ``run_id``, ``name``, ``status``),
  configuration (``tie``, ``init_std``, ``model``, ``n_embd``, ``seed``, ...), parameter
  counts (``params_total``, ``params_non_embedding``, ...) and the summary values
  (``init_val_loss``, ``final_val_loss``, ...), exactly as the trainer's ``summary.json``
  holds them (docs/ARCHITECTURE.md, "Results layout").
* ``history``: one row per run and logged step (wide: one column per metric key of
  ``metrics.jsonl``, e.g. ``val/loss``; NaN where that metric was not logged at that step),
  plus the identity columns ``run_id``, ``tie``, ``init_std``, ``model``, ``seed``,
  ``status`` so it can be grouped without a join. A diverged run's history ends at its
  ``diverged_at_step``.

Both tables come from sweep directories (:func:`load_results`) or from a W&B project
(:func:`load_wandb`); the columns are the same, because both go through :func:`run_row`.

Per-token probe arrays (``probes/step_*.npz``) and ``token_freq.npy`` are loaded on demand
for a few runs by :func:`load_token_probes` and :func:`load_offdiag_cosines`.

Aggregation over seeds (:func:`aggregate`, :func:`aggregate_history`) reports mean, std and a
two-sided t-distribution confidence interval; with one seed the interval is NaN and
``ci_label`` says so. :func:`paired_differences` pairs tied and untied runs that share data,
size, init std and seed.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

STATUSES = ("running", "finished", "diverged", "failed")
"""Statuses the trainer writes; ``unknown`` marks a run directory without a readable summary."""

# Columns of the runs table, in order. Everything a figure needs is here.
RUN_COLUMNS = [
    "sweep", "run_id", "name", "status", "error",
    "tie", "head", "init_std", "init_std_resolved_emb", "init_std_resolved_head",
    "model", "n_layer", "n_embd", "n_head", "vocab_size", "block_size", "seed", "t5_rescale",
    "data", "data_id", "max_steps", "variant",
    "params_total", "params_embedding", "params_position", "params_head",
    "params_non_embedding", "flops_per_token",
    "step", "tokens", "diverged_at_step",
    "init_val_loss", "init_logit_std", "final_val_loss", "best_val_loss", "test_loss",
    "ln_vocab",
    "wandb_run_id", "wandb_mode", "started_at", "updated_at", "source", "path",
]
# Columns copied from each run onto its history rows.
HISTORY_ID_COLUMNS = ["run_id", "sweep", "name", "status", "tie", "head", "init_std", "model", "variant", "seed"]
# Runs that are compared across seeds must share these.
GROUP_COLUMNS = ["data_id", "model", "variant", "tie", "init_std"]

# Config keys that never make two runs different experiments (bookkeeping, the study's main
# axes, the size, or what data_id already covers). Any other key whose value differs among
# the loaded runs (model.t5_rescale, optim.lr, trainer.max_steps, ...) goes into `variant`.
_NOT_VARIANT = ("tie", "init_std", "seed", "sweep", "results_dir", "wandb.", "data.", "derived.",
                "model.name", "model.n_layer", "model.n_head", "model.n_embd", "model.block_size",
                "model.vocab_size", "model.tie", "model.init_std", "trainer.progress", "trainer.log_interval",
                "trainer.ckpt_interval", "trainer.peak_tflops", "trainer.device", "trainer.compile",
                "trainer.eval_batch_size", "trainer.loss_chunk", "trainer.eval_interval", "trainer.test_eval")
_VARIANT_SECTIONS = ("model.", "optim.", "trainer.")

_SUMMARY_SCALARS = [
    "run_id", "name", "sweep", "status", "error", "tie", "init_std", "model", "n_layer",
    "n_embd", "n_head", "vocab_size", "block_size", "seed", "flops_per_token", "step",
    "tokens", "init_val_loss", "init_logit_std", "final_val_loss", "best_val_loss",
    "test_loss", "diverged_at_step", "wandb_run_id", "wandb_mode", "started_at", "updated_at",
    "t5_rescale", "data", "max_steps",
]
_PARAM_KEYS = ["total", "embedding", "position", "head", "non_embedding"]


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

    def select(self, mask) -> "Results":
        """The same results restricted to ``runs[mask]`` (history follows)."""
        runs = self.runs[mask].reset_index(drop=True)
        history = self.history[self.history["run_id"].isin(runs["run_id"])].reset_index(drop=True)
        return Results(runs, history, list(self.notes))


# ----------------------------------------------------------------------------- loading


def load_results(*paths: str | Path) -> Results:
    """Read one or many results directories into :class:`Results`.

    Each path may be a sweep directory (``<results_dir>/<sweep>/``, holding ``index.json``
    and ``<run_id>/summary.json``), a single run directory (holding ``summary.json``) or a
    results directory whose subdirectories are sweeps. Raises :class:`ResultsError` for a
    missing path or one where no run is found.
    """
    if not paths:
        raise ResultsError("no results directory given: pass one or more sweep directories")
    notes: list[str] = []
    loaded: list[tuple[dict, dict, pd.DataFrame]] = []
    seen: dict[str, Path] = {}
    for path in paths:
        for run_dir, index_entry in _find_runs(Path(path), notes):
            row, config, hist = _load_run_dir(run_dir, index_entry, notes)
            key = row["run_id"]
            if key in seen:
                notes.append(f"{run_dir}: run {key} already loaded from {seen[key]}; kept the first")
                continue
            seen[key] = run_dir
            loaded.append((row, config, hist))
    return _assemble(loaded, notes)


def _assemble(loaded: list[tuple[dict, dict, pd.DataFrame]], notes: list[str]) -> Results:
    """(row, config, raw history) per run -> Results, with `variant` set across all runs."""
    for row, variant in zip((r for r, _, _ in loaded), variants([c for _, c, _ in loaded])):
        row["variant"] = variant
    runs = _runs_frame([r for r, _, _ in loaded])
    history = _history_frame([_attach_identity(h, r) for r, _, h in loaded])
    notes.extend(check_consistency(runs))
    return Results(runs, history, notes)


def variants(configs: Sequence[Mapping[str, Any]]) -> list[str]:
    """Per config: "key=value, ..." for the model/optim/trainer keys whose values differ among
    ``configs`` (``""`` where nothing differs). Sizes, tie, init std, seed and bookkeeping
    keys are not variants (see _NOT_VARIANT); a key a config lacks (an older schema, an
    unreadable config.yaml) is not counted as a difference."""
    flat = []
    for c in configs:
        f = flatten(unflatten(c or {}))
        flat.append({k: v for k, v in f.items()
                     if k.startswith(_VARIANT_SECTIONS) and not k.startswith(_NOT_VARIANT)})
    keys = sorted({k for f in flat for k in f})
    differing = [k for k in keys
                 if len({json.dumps(f[k], sort_keys=True, default=str) for f in flat if k in f}) > 1]
    return [", ".join(f"{k}={f[k]}" for k in differing if k in f) for f in flat]


def load(sweep_dirs: str | Path | Sequence[str | Path] = (), *, wandb_project: str | None = None,
         wandb_group: str | None = None, data_id: str | None = None) -> Results:
    """What the notebooks call: a W&B project ("entity/project") if given, else sweep
    directories (a list, or one string holding several separated by os.pathsep); with
    ``data_id``, only the runs on that data (for mixed sweeps)."""
    if wandb_project:
        results = load_wandb(wandb_project, group=wandb_group or None)
    else:
        if isinstance(sweep_dirs, (str, Path)):
            sweep_dirs = [p for p in str(sweep_dirs).split(os.pathsep) if p]
        results = load_results(*sweep_dirs)
    if data_id:
        ids = sorted(results.runs["data_id"].dropna().unique())
        if data_id not in ids:
            raise ResultsError(f"data_id {data_id!r} matches no run; data_ids present: {', '.join(ids) or 'none'}")
        results = results.select(results.runs["data_id"] == data_id)
    return results


def load_runs(*paths: str | Path) -> pd.DataFrame:
    """The runs table of :func:`load_results`."""
    return load_results(*paths).runs


def load_history(*paths: str | Path) -> pd.DataFrame:
    """The history table of :func:`load_results`."""
    return load_results(*paths).history


def _find_runs(path: Path, notes: list[str]) -> list[tuple[Path, dict | None]]:
    """(run_dir, index.json entry or None) for every run under ``path``."""
    if not path.exists():
        raise ResultsError(f"results directory {path} does not exist")
    if not path.is_dir():
        raise ResultsError(f"{path} is not a directory: pass a sweep directory (<results_dir>/<sweep>/)")
    if (path / "summary.json").exists():
        return [(path, None)]
    if _looks_like_sweep(path):
        return _sweep_runs(path, notes)
    sweeps = sorted(p for p in path.iterdir() if p.is_dir() and _looks_like_sweep(p))
    if sweeps:
        notes.append(f"{path}: read as a results directory holding {len(sweeps)} sweeps: "
                     + ", ".join(p.name for p in sweeps))
        return [r for s in sweeps for r in _sweep_runs(s, notes)]
    raise ResultsError(
        f"no runs found in {path}: expected a sweep directory (index.json and <run_id>/summary.json), "
        "a run directory (summary.json) or a results directory holding sweeps"
    )


def _looks_like_sweep(path: Path) -> bool:
    return (path / "index.json").exists() or any(
        (p / "summary.json").exists() or (p / "metrics.jsonl").exists()
        for p in path.iterdir() if p.is_dir() and not p.name.startswith(("_", "."))
    )


def _sweep_runs(sweep: Path, notes: list[str]) -> list[tuple[Path, dict | None]]:
    index: dict = {}
    if (sweep / "index.json").exists():
        try:
            index = json.loads((sweep / "index.json").read_text())
        except (OSError, json.JSONDecodeError) as e:
            notes.append(f"{sweep / 'index.json'} unreadable ({e}); listing run directories instead")
    found: dict[str, tuple[Path, dict | None]] = {}
    for run_id, entry in index.items():
        entry = dict(entry or {}, run_id=run_id)
        rel = Path(entry.get("path") or run_id)
        run_dir = rel if rel.is_absolute() else sweep / rel
        if not run_dir.is_dir() and (sweep / run_id).is_dir():
            run_dir = sweep / run_id
        found[run_dir.name] = (run_dir, entry)
    for p in sorted(sweep.iterdir()):
        if p.is_dir() and not p.name.startswith(("_", ".")) and p.name not in found:
            if (p / "summary.json").exists() or (p / "metrics.jsonl").exists() or (p / "config.yaml").exists():
                found[p.name] = (p, None)
    if not found:
        raise ResultsError(f"no runs found in sweep directory {sweep}: index.json is empty and no "
                           "<run_id>/summary.json exists (has the sweep started?)")
    return sorted(found.values(), key=lambda r: r[0].name)


def _read_yaml(path: Path) -> dict:
    import yaml  # a dependency of omegaconf/hydra

    with open(path) as f:
        out = yaml.safe_load(f)
    return out if isinstance(out, dict) else {}


def _load_run_dir(run_dir: Path, index_entry: dict | None, notes: list[str]) -> tuple[dict, dict, pd.DataFrame]:
    summary: dict = {}
    if (run_dir / "summary.json").exists():
        try:
            summary = json.loads((run_dir / "summary.json").read_text())
        except (OSError, json.JSONDecodeError) as e:
            notes.append(f"{run_dir / 'summary.json'} unreadable ({e}); status set to unknown")
    elif run_dir.is_dir():
        notes.append(f"{run_dir}: no summary.json; status from index.json or unknown")
    else:
        notes.append(f"{run_dir}: listed in index.json but the directory does not exist")
    config: dict = {}
    if (run_dir / "config.yaml").exists():
        try:
            config = _read_yaml(run_dir / "config.yaml")
        except Exception as e:  # noqa: BLE001 - any YAML problem is reported, not fatal
            notes.append(f"{run_dir / 'config.yaml'} unreadable ({e})")
    index_entry = index_entry or {}
    if not summary:
        summary = {"run_id": index_entry.get("run_id", run_dir.name), "name": index_entry.get("name"),
                   "sweep": run_dir.parent.name, "status": index_entry.get("status") or "unknown"}
    summary.setdefault("run_id", run_dir.name)
    summary.setdefault("sweep", run_dir.parent.name)
    row = run_row(summary, config, source=str(run_dir))
    row["path"] = str(run_dir)
    hist = _read_metrics(run_dir / "metrics.jsonl", notes)
    return row, config, hist


def _read_metrics(path: Path, notes: list[str]) -> pd.DataFrame:
    """metrics.jsonl -> one row per step (later lines win: a resumed run re-logs steps)."""
    if not path.exists():
        return pd.DataFrame()
    records = []
    with open(path) as f:
        lines = f.read().splitlines()
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            where = "last line (still being written?)" if i == len(lines) - 1 else f"line {i + 1}"
            notes.append(f"{path}: skipped unparsable {where}")
            continue
        if not isinstance(rec, dict) or "step" not in rec:
            notes.append(f"{path}: line {i + 1} has no 'step'; skipped")
            continue
        records.append(rec)
    return history_from_records(records)


def history_from_records(records: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """Logged dicts (``step``, ``tokens``, metric keys) -> one row per step, numeric columns.

    Several records for one step are merged, later values winning (a resumed run logs the
    steps after its checkpoint again). W&B's ``_step`` is accepted for ``step``; W&B's own
    bookkeeping keys (``_runtime``, ``_timestamp``...) are dropped.
    """
    rows = []
    for rec in records:
        rec = dict(rec)
        if "step" not in rec and "_step" in rec:
            rec["step"] = rec["_step"]
        rows.append({k: v for k, v in rec.items() if not k.startswith("_")})
    if not rows:
        return pd.DataFrame()
    df = pd.DataFrame.from_records(rows)
    for col in df.columns:
        df[col] = pd.to_numeric(df[col], errors="coerce")
    df = df.dropna(subset=["step"])
    df["step"] = df["step"].astype("int64")
    df = df.groupby("step", sort=True).last().reset_index()
    return df.replace([np.inf, -np.inf], np.nan)


# ----------------------------------------------------------------------------- one row per run


def normalize_init_std(value: Any) -> str | None:
    """The init std as given, as a canonical string: 1 -> '1.0', '0.036' -> '0.036', 'inv_sqrt_d'."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    try:
        return repr(float(value))
    except (TypeError, ValueError):
        return str(value)


def data_id(fingerprint: Any = None, config: Mapping[str, Any] | None = None, vocab_size: Any = None) -> str | None:
    """A short id of the data a run trained on; runs are only comparable when they share it.

    The trainer's corpus fingerprint (``data_fingerprint``: the tokenized content) when the
    run recorded one; otherwise a hash of the ``data`` config section (keys naming cache
    locations left out) and the vocab size.
    """
    if fingerprint:
        return str(fingerprint)[:12]
    data = (config or {}).get("data")
    if not isinstance(data, Mapping):
        return None
    data = {k: v for k, v in data.items() if "cache" not in str(k).lower()}
    blob = json.dumps({"data": data, "vocab_size": vocab_size}, sort_keys=True, default=str)
    return "cfg-" + hashlib.sha1(blob.encode()).hexdigest()[:8]


def flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{'a': {'b': 1}} -> {'a.b': 1}."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def unflatten(d: Mapping[str, Any]) -> dict[str, Any]:
    """{'a.b': 1} -> {'a': {'b': 1}} (nested dicts pass through)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        parts = str(k).split(".")
        cur = out
        for p in parts[:-1]:
            cur = cur.setdefault(p, {})
            if not isinstance(cur, dict):
                break
        else:
            if isinstance(v, Mapping):
                cur.setdefault(parts[-1], {}).update(unflatten(v))
            else:
                cur[parts[-1]] = v
    return out


def _bool(value: Any) -> Any:
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, str) and value.lower() in ("true", "false", "yes", "no", "1", "0"):
        return value.lower() in ("true", "yes", "1")
    if isinstance(value, (int, np.integer)) and value in (0, 1):
        return bool(value)
    return None


def run_row(summary: Mapping[str, Any], config: Mapping[str, Any] | None = None, *,
            source: str | None = None) -> dict[str, Any]:
    """One row of the runs table from a ``summary.json`` dict and the resolved config.

    Summary keys win; the config fills what the summary lacks (the W&B mirror of a summary
    may hold only part of it). ``config`` may be nested (``config.yaml``) or flat with
    dotted keys (how some tools store it); both are read.
    """
    summary = dict(summary or {})
    config = unflatten(config or {})
    derived = config.get("derived") if isinstance(config.get("derived"), Mapping) else {}
    # what the trainer derives (params, resolved stds, fingerprint) sits in the config too:
    # under "derived" in config.yaml, at the top level of the W&B config
    for key in [*_SUMMARY_SCALARS, "params", "init_std_resolved", "data_fingerprint"]:
        if summary.get(key) is None:
            value = config.get(key, derived.get(key))
            if value is not None and (not isinstance(value, Mapping) or key in ("params", "init_std_resolved")):
                summary[key] = value
    model_cfg = config.get("model") if isinstance(config.get("model"), Mapping) else {}
    data_cfg = config.get("data") if isinstance(config.get("data"), Mapping) else {}
    row: dict[str, Any] = {c: None for c in RUN_COLUMNS}
    for key in _SUMMARY_SCALARS:
        row[key] = summary.get(key)
    fallbacks = {
        "model": model_cfg.get("name"), "n_layer": model_cfg.get("n_layer"), "n_embd": model_cfg.get("n_embd"),
        "n_head": model_cfg.get("n_head"), "vocab_size": model_cfg.get("vocab_size"),
        "block_size": model_cfg.get("block_size"), "t5_rescale": model_cfg.get("t5_rescale"),
        "tie": model_cfg.get("tie"), "init_std": model_cfg.get("init_std"), "data": data_cfg.get("name"),
        "max_steps": (config.get("trainer") or {}).get("max_steps") if isinstance(config.get("trainer"), Mapping) else None,
    }
    for key, value in fallbacks.items():
        if row[key] is None and value is not None:
            row[key] = value
    row["tie"] = _bool(row["tie"])
    row["head"] = {True: "tied", False: "untied"}.get(row["tie"])
    row["init_std"] = normalize_init_std(row["init_std"])
    resolved = summary.get("init_std_resolved") or {}
    if isinstance(resolved, Mapping):
        row["init_std_resolved_emb"] = resolved.get("emb")
        row["init_std_resolved_head"] = resolved.get("head")
    params = summary.get("params") or {}
    if isinstance(params, Mapping):
        for k in _PARAM_KEYS:
            row[f"params_{k}"] = params.get(k)
    row["status"] = row["status"] or "unknown"
    if row["vocab_size"]:
        row["ln_vocab"] = math.log(float(row["vocab_size"]))
    row["data_id"] = data_id(summary.get("data_fingerprint"), config, row["vocab_size"])
    row["t5_rescale"] = _bool(row["t5_rescale"]) if row["t5_rescale"] is not None else None
    row["source"] = source
    return row


_INT_COLUMNS = ["max_steps", "n_layer", "n_embd", "n_head", "vocab_size", "block_size", "seed", "step",
                "diverged_at_step", "params_total", "params_embedding", "params_position",
                "params_head", "params_non_embedding"]
_FLOAT_COLUMNS = ["init_std_resolved_emb", "init_std_resolved_head", "flops_per_token", "tokens",
                  "init_val_loss", "init_logit_std", "final_val_loss", "best_val_loss",
                  "test_loss", "ln_vocab"]


def _runs_frame(rows: list[dict]) -> pd.DataFrame:
    runs = pd.DataFrame.from_records(rows, columns=RUN_COLUMNS)
    for col in _INT_COLUMNS:
        runs[col] = pd.to_numeric(runs[col], errors="coerce").astype("Int64")
    for col in _FLOAT_COLUMNS:
        runs[col] = pd.to_numeric(runs[col], errors="coerce").astype("float64")
    runs["tie"] = runs["tie"].astype("boolean")
    runs["t5_rescale"] = runs["t5_rescale"].astype("boolean")
    sort = [c for c in ("sweep", "model", "init_std", "tie", "seed", "run_id")]
    return runs.sort_values(sort, na_position="last", kind="stable").reset_index(drop=True)


def _history_frame(histories: list[pd.DataFrame]) -> pd.DataFrame:
    parts = [h for h in histories if not h.empty]
    if not parts:
        return pd.DataFrame(columns=HISTORY_ID_COLUMNS + ["step", "tokens"])
    history = pd.concat(parts, ignore_index=True)
    if "tokens" not in history:
        history["tokens"] = np.nan
    metric_cols = sorted(c for c in history.columns if c not in HISTORY_ID_COLUMNS + ["step", "tokens"])
    history = history[HISTORY_ID_COLUMNS + ["step", "tokens"] + metric_cols].copy()
    history["tie"] = history["tie"].astype("boolean")
    history["seed"] = pd.to_numeric(history["seed"], errors="coerce").astype("Int64")
    return history.sort_values(["run_id", "step"], kind="stable").reset_index(drop=True)


def _attach_identity(hist: pd.DataFrame, run: Mapping[str, Any]) -> pd.DataFrame:
    """Identity columns on a run's history; a diverged run's history ends at its divergence."""
    if hist.empty:
        return hist
    hist = hist.copy()
    div = run.get("diverged_at_step")
    if run.get("status") == "diverged" and div is not None and not pd.isna(div):
        hist = hist[hist["step"] <= int(div)]
    for col in HISTORY_ID_COLUMNS:
        hist[col] = run.get(col)
    return hist


# ----------------------------------------------------------------------------- checks


def check_consistency(runs: pd.DataFrame) -> list[str]:
    """Human-readable warnings about a runs table: mixed data or vocab sizes, odd statuses."""
    notes = []
    if runs.empty:
        return notes
    for col, what in (("vocab_size", "vocab sizes"), ("data_id", "data configurations")):
        values = runs[col].dropna().unique()
        if len(values) > 1:
            parts = [f"{v} ({(runs[col] == v).sum()} runs; sweeps {', '.join(sorted(map(str, runs.loc[runs[col] == v, 'sweep'].dropna().unique())))})"
                     for v in values]
            notes.append(f"mixed sweeps: runs use {len(values)} different {what} ({col}): " + "; ".join(parts)
                         + f". Losses are only comparable within one {col}: filter with runs[runs.{col} == ...]")
    for status, n in runs["status"].value_counts().items():
        if status != "finished":
            names = runs.loc[runs["status"] == status, "name"].fillna(runs["run_id"]).tolist()
            notes.append(f"{n} run(s) {status}: " + ", ".join(map(str, names)))
    return notes


def require_single_data(runs: pd.DataFrame, what: str = "this comparison") -> None:
    """Raise :class:`ResultsError` if ``runs`` mix vocab sizes or data configurations."""
    for col in ("vocab_size", "data_id"):
        values = runs[col].dropna().unique()
        if len(values) > 1:
            counts = ", ".join(f"{v!r}: {(runs[col] == v).sum()} runs" for v in values)
            raise ResultsError(
                f"{what} needs runs on one dataset, but they mix {len(values)} values of {col} ({counts}); "
                f"select one, e.g. results.select(results.runs.{col} == {values[0]!r}) "
                f"or the CLI's --data-id"
            )


# ----------------------------------------------------------------------------- statistics


def _t_two_sided_coverage(t: float, dof: int) -> float:
    """P(|T| < t) for Student's t with an integer number of degrees of freedom (closed form)."""
    theta = math.atan(t / math.sqrt(dof))
    c2 = math.cos(theta) ** 2
    if dof % 2 == 1:
        # (2/pi) [theta + sin(theta) cos(theta) (1 + 2/3 c^2 + 2*4/(3*5) c^4 + ...)], dof-1 terms
        term, series = 1.0, 0.0
        if dof > 1:
            series = 1.0
            for k in range(1, (dof - 1) // 2):
                term *= (2 * k) / (2 * k + 1) * c2
                series += term
        return (2 / math.pi) * (theta + math.sin(theta) * math.cos(theta) * series)
    # sin(theta) (1 + 1/2 c^2 + 1*3/(2*4) c^4 + ...), dof/2 terms
    term, series = 1.0, 1.0
    for k in range(1, dof // 2):
        term *= (2 * k - 1) / (2 * k) * c2
        series += term
    return math.sin(theta) * series


def t_critical(dof: int, confidence: float = 0.95) -> float:
    """Two-sided critical value of Student's t: P(|T| < t) = confidence (e.g. 12.706 for dof=1)."""
    if dof < 1:
        return math.nan
    dof = int(dof)
    if dof > 10_000:
        dof = 10_000  # indistinguishable from the normal limit at this point
    lo, hi = 0.0, 1.0
    while _t_two_sided_coverage(hi, dof) < confidence:
        hi *= 2
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if _t_two_sided_coverage(mid, dof) < confidence:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-10:
            break
    return 0.5 * (lo + hi)


def describe(values: Sequence[float] | pd.Series, confidence: float = 0.95) -> dict[str, Any]:
    """n, mean, std (ddof=1), sem and the t confidence interval of finite ``values``."""
    x = np.asarray(pd.to_numeric(pd.Series(values), errors="coerce").dropna(), dtype=float)
    x = x[np.isfinite(x)]
    n = len(x)
    mean = float(x.mean()) if n else math.nan
    std = float(x.std(ddof=1)) if n > 1 else math.nan
    sem = std / math.sqrt(n) if n > 1 else math.nan
    half = t_critical(n - 1, confidence) * sem if n > 1 else math.nan
    pct = f"{confidence:.0%}"
    label = f"{pct} t-CI, n={n}" if n > 1 else (f"n={n}: no CI" if n == 1 else "no data")
    return {"n": n, "mean": mean, "std": std, "sem": sem, "ci_low": mean - half, "ci_high": mean + half,
            "ci_half": half, "ci_label": label}


def aggregate(df: pd.DataFrame, by: Sequence[str], value: str, *, confidence: float = 0.95,
              carry: Sequence[str] = ()) -> pd.DataFrame:
    """Aggregate ``value`` over the rows of each group of ``by`` (typically: over seeds).

    Columns: ``*by``, ``n``, ``mean``, ``std``, ``sem``, ``ci_low``, ``ci_high``, ``ci_half``,
    ``ci_label`` (e.g. "95% t-CI, n=3"; with n=1 the interval is NaN and the label says
    "n=1: no CI"), the ``carry`` columns (first value per group) and ``run_ids``.
    """
    missing = [c for c in [*by, value, *carry] if c not in df.columns]
    if missing:
        raise KeyError(f"columns {missing} not in the table; available: {sorted(map(str, df.columns))}")
    out = []
    for key, g in df.groupby(list(by), dropna=False, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        rec = dict(zip(by, key))
        rec.update(describe(g[value], confidence))
        for c in carry:
            rec[c] = g[c].iloc[0]
        if "run_id" in g:
            rec["run_ids"] = list(g["run_id"])
        out.append(rec)
    cols = [*by, "n", "mean", "std", "sem", "ci_low", "ci_high", "ci_half", "ci_label", *carry]
    return pd.DataFrame(out, columns=cols + (["run_ids"] if "run_id" in df else []))


def aggregate_runs(runs: pd.DataFrame, value: str = "final_val_loss", *,
                   by: Sequence[str] = GROUP_COLUMNS, statuses: Sequence[str] = ("finished",),
                   confidence: float = 0.95) -> pd.DataFrame:
    """Mean and CI of a summary value over seeds, per data/size/tie/init std.

    Only runs whose status is in ``statuses`` count (a diverged run has no meaningful final
    loss). Carries ``n_embd``, ``params_total`` and ``params_non_embedding``.
    """
    ok = runs[runs["status"].isin(statuses)]
    carry = [c for c in ("n_embd", "n_layer", "params_total", "params_non_embedding", "vocab_size") if c not in by]
    return aggregate(ok, by, value, confidence=confidence, carry=carry)


def aggregate_history(history: pd.DataFrame, metric: str = "val/loss", *,
                      by: Sequence[str] = ("model", "tie", "init_std"),
                      statuses: Sequence[str] = ("finished", "running"),
                      confidence: float = 0.95) -> pd.DataFrame:
    """Per group and step: mean and CI of ``metric`` over the runs (seeds) of the group.

    Rows where the metric was not logged are ignored; ``tokens`` is the groups' mean token
    count at that step. Runs with other statuses (diverged, failed) are left out here; plot
    them individually.
    """
    if metric not in history.columns:
        raise KeyError(f"metric {metric!r} not in the history; logged metrics: "
                       f"{sorted(c for c in history.columns if '/' in str(c))}")
    h = history[history["status"].isin(statuses) & history[metric].notna()]
    agg = aggregate(h, [*by, "step"], metric, confidence=confidence)
    tokens = h.groupby([*by, "step"], dropna=False)["tokens"].mean().reset_index()
    return agg.merge(tokens, on=[*by, "step"], how="left")


PAIR_COLUMNS = ["data_id", "model", "variant", "init_std", "seed"]


def paired_differences(runs: pd.DataFrame, value: str = "final_val_loss", *,
                       statuses: Sequence[str] = ("finished",)) -> pd.DataFrame:
    """tied − untied for runs that share data, size, variant, init std and seed.

    Columns: ``data_id``, ``model``, ``variant``, ``init_std``, ``seed``, ``tied``, ``untied``, ``diff``,
    ``tied_run_id``, ``untied_run_id``. Runs without a partner (or with a status not in
    ``statuses``) are listed in ``.attrs["unpaired"]`` as "name: reason".
    Raises :class:`ResultsError` if two runs claim the same slot (e.g. two sweeps with the
    same seeds loaded together).
    """
    unpaired: list[str] = []
    ok = runs[runs["status"].isin(statuses) & runs["tie"].notna()]
    for _, r in runs[~runs.index.isin(ok.index)].iterrows():
        unpaired.append(f"{r['name'] or r['run_id']}: status {r['status']}")
    dup = ok[ok.duplicated(PAIR_COLUMNS + ["tie"], keep=False)]
    if not dup.empty:
        raise ResultsError("several runs share data_id/model/variant/init_std/seed/tie, so tied and untied cannot "
                           "be paired: " + ", ".join(f"{r.run_id} (sweep {r.sweep})" for r in dup.itertuples())
                           + "; select one sweep first")
    rows = []
    for key, g in ok.groupby(PAIR_COLUMNS, dropna=False, sort=True):
        tied, untied = g[g["tie"] == True], g[g["tie"] == False]  # noqa: E712 - nullable boolean
        if len(tied) == 1 and len(untied) == 1:
            t, u = tied.iloc[0], untied.iloc[0]
            rows.append({**dict(zip(PAIR_COLUMNS, key)), "tied": t[value], "untied": u[value],
                         "diff": t[value] - u[value], "tied_run_id": t["run_id"], "untied_run_id": u["run_id"]})
        else:
            for _, r in g.iterrows():
                unpaired.append(f"{r['name'] or r['run_id']}: no {'untied' if r['tie'] else 'tied'} partner "
                                "with the same data, size, variant, init std and seed")
    out = pd.DataFrame(rows, columns=PAIR_COLUMNS + ["tied", "untied", "diff", "tied_run_id", "untied_run_id"])
    out.attrs["unpaired"] = unpaired
    out.attrs["value"] = value
    return out


def summarize_differences(pairs: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """Mean paired difference (tied − untied) over seeds with its t CI, per data/size/variant/init std."""
    return aggregate(pairs, ["data_id", "model", "variant", "init_std"], "diff", confidence=confidence)


# ----------------------------------------------------------------------------- probe arrays


def probe_files(run_dir: str | Path) -> list[tuple[int, Path]]:
    """(step, path) of every ``probes/step_*.npz`` of a run, by step."""
    out = []
    for p in Path(run_dir, "probes").glob("step_*.npz"):
        try:
            out.append((int(p.stem.split("_", 1)[1]), p))
        except ValueError:
            continue
    return sorted(out)


def _pick_probe(run: pd.Series, step: int | str) -> tuple[int, Path] | None:
    if not run.get("path"):
        return None
    files = probe_files(run["path"])
    if not files:
        return None
    if step == "last":
        return files[-1]
    if step == "first":
        return files[0]
    for s, p in files:
        if s == int(step):
            return s, p
    return None


def load_token_probes(runs: pd.DataFrame, step: int | str = "last") -> pd.DataFrame:
    """Per-token probe arrays of each run, long format.

    Columns: ``run_id``, ``probe_step``, ``token``, ``count`` (train-split frequency from
    ``token_freq.npy``; NaN if missing), ``emb_norm``, ``head_norm``, ``in_out_cos``
    (NaN for tied runs). ``step`` is "last", "first" or a step number. Runs without probe
    files are listed in ``.attrs["missing"]`` as "name: reason".
    """
    parts, missing = [], []
    for _, run in runs.iterrows():
        label = run.get("name") or run["run_id"]
        pick = _pick_probe(run, step)
        if pick is None:
            missing.append(f"{label}: no probes/step_*.npz" + ("" if step in ("last", "first") else f" at step {step}")
                           + (" (not a local run directory)" if not run.get("path") else ""))
            continue
        s, path = pick
        with np.load(path) as z:
            arrays = {k: np.asarray(z[k]) for k in ("emb_norm", "head_norm", "in_out_cos") if k in z.files}
        if "emb_norm" not in arrays:
            missing.append(f"{label}: {path} has no 'emb_norm' (keys: {sorted(arrays)})")
            continue
        n = len(arrays["emb_norm"])
        df = pd.DataFrame({"run_id": run["run_id"], "probe_step": s, "token": np.arange(n)})
        for k in ("emb_norm", "head_norm", "in_out_cos"):
            df[k] = arrays[k].astype("float32") if k in arrays and len(arrays[k]) == n else np.float32(np.nan)
        freq_path = Path(run["path"], "token_freq.npy")
        freq = np.load(freq_path) if freq_path.exists() else None
        if freq is not None and len(freq) == n:
            df["count"] = freq.astype("int64")
        else:
            df["count"] = pd.array([pd.NA] * n, dtype="Int64")
            missing.append(f"{label}: token_freq.npy " + ("missing" if freq is None else
                           f"has length {len(freq)}, probes have {n}") + " (norms kept, frequency unknown)")
        parts.append(df)
    cols = ["run_id", "probe_step", "token", "count", "emb_norm", "head_norm", "in_out_cos"]
    out = pd.concat(parts, ignore_index=True)[cols] if parts else pd.DataFrame(columns=cols)
    out.attrs["missing"] = missing
    return out


def load_offdiag_cosines(runs: pd.DataFrame, steps: Sequence[int | str] = ("first", "last")) -> pd.DataFrame:
    """The sampled off-diagonal cosines of E·Eᵀ per run and probe step, long format.

    Columns: ``run_id``, ``probe_step``, ``which`` (the requested step: "first", "last" or
    the number), ``cos``. Missing probes are listed in ``.attrs["missing"]``.
    """
    parts, missing = [], []
    for _, run in runs.iterrows():
        label = run.get("name") or run["run_id"]
        picked = {}
        for which in steps:
            pick = _pick_probe(run, which)
            if pick is None:
                missing.append(f"{label}: no probe file for step {which}")
                continue
            if pick[0] in picked.values():
                continue  # first == last: one probe only
            picked[which] = pick[0]
            with np.load(pick[1]) as z:
                if "offdiag_cos" not in z.files:
                    missing.append(f"{label}: {pick[1]} has no 'offdiag_cos'")
                    continue
                cos = np.asarray(z["offdiag_cos"], dtype="float32").ravel()
            parts.append(pd.DataFrame({"run_id": run["run_id"], "probe_step": pick[0], "which": str(which), "cos": cos}))
    cols = ["run_id", "probe_step", "which", "cos"]
    out = pd.concat(parts, ignore_index=True)[cols] if parts else pd.DataFrame(columns=cols)
    out.attrs["missing"] = missing
    return out


# ----------------------------------------------------------------------------- W&B


_WANDB_STATES = {"running": "running", "finished": "finished", "crashed": "failed", "failed": "failed",
                 "killed": "failed", "preempted": "failed"}


def wandb_run_row(config: Mapping[str, Any], summary: Mapping[str, Any], *, run_id: str, name: str | None = None,
                  group: str | None = None, state: str | None = None, url: str | None = None) -> dict[str, Any]:
    """One runs-table row from what the W&B API holds for a run.

    ``config`` is ``run.config`` (the resolved config the trainer passed to ``wandb.init``);
    ``summary`` is ``run.summary``: the summary.json values the trainer mirrors there, plus
    the last value of every logged metric. Missing summary values are filled from the
    latest metrics (``val/loss`` -> ``final_val_loss``, ``test/loss`` -> ``test_loss``,
    ``_step`` -> ``step``) and the W&B state: a crashed run reads as failed, and so does a
    run whose summary still says running after W&B saw it stop.
    """
    summary = dict(summary or {})
    s = {k: v for k, v in summary.items() if not k.startswith("_")}
    for prefix in ("params", "init_std_resolved"):  # the mirror stores dict values as "params/total"
        sub = {k.split("/", 1)[1]: v for k, v in summary.items() if k.startswith(prefix + "/")}
        if sub and not isinstance(s.get(prefix), Mapping):
            s[prefix] = sub
    s.setdefault("run_id", run_id)
    s.setdefault("name", name)
    s.setdefault("sweep", group)
    for ours, theirs in (("final_val_loss", "val/loss"), ("test_loss", "test/loss"), ("step", "_step"),
                         ("init_logit_std", "init/logit_std")):
        if s.get(ours) is None and summary.get(theirs) is not None:
            s[ours] = summary[theirs]
    wb_state = _WANDB_STATES.get(str(state or "").lower())
    if not s.get("status"):
        s["status"] = wb_state or "unknown"
    elif s["status"] == "running" and wb_state in ("failed", "finished"):
        s["status"] = "failed"  # W&B says it stopped, but it never recorded an end: it died
    s.setdefault("wandb_run_id", run_id)
    return run_row(s, config, source=url or f"wandb:{run_id}")


def load_wandb(project: str, entity: str | None = None, *, group: str | None = None,
               filters: Mapping[str, Any] | None = None, timeout: float = 10.0) -> Results:
    """The runs and history tables of a W&B project (optionally one group = one sweep).

    Needs network access and a W&B API key; raises :class:`WandbUnavailableError` otherwise
    (at once without a key; after about ``timeout`` seconds without a reachable server).
    ``project`` may be "entity/project".
    """
    try:
        import wandb
    except ImportError as e:  # pragma: no cover - wandb is a dependency
        raise WandbUnavailableError(f"wandb is not installed ({e})") from None
    if entity is None and "/" in project:
        entity, project = project.split("/", 1)
    try:
        api = wandb.Api(timeout=int(timeout))
        path = f"{entity}/{project}" if entity else project
        flt = dict(filters or {})
        if group:
            flt["group"] = group
        wb_runs = list(api.runs(path, filters=flt or None))
    except Exception as e:  # noqa: BLE001 - wandb raises many types; all mean "cannot read"
        raise WandbUnavailableError(
            f"cannot read W&B project {project!r} (entity {entity!r}): {e.__class__.__name__}: {e}. "
            "Log in with `wandb login` (or set WANDB_API_KEY), check the entity/project names, or "
            "read the sweep directory instead: load_results(SWEEP_DIR)"
        ) from None
    if not wb_runs:
        raise ResultsError(f"W&B project {entity}/{project} has no runs" + (f" in group {group!r}" if group else ""))
    loaded = []
    for r in wb_runs:
        config = dict(r.config)
        row = wandb_run_row(config, dict(r.summary), run_id=r.summary.get("run_id") or r.id,
                            name=r.name, group=r.group, state=r.state, url=r.url)
        loaded.append((row, config, history_from_records(r.scan_history())))
    return _assemble(loaded, [])


# ----------------------------------------------------------------------------- initial loss theory


def gaussian_logit_loss(sigma: float | Sequence[float], vocab_size: int, *, draws: int = 8,
                        seed: int = 0) -> np.ndarray:
    """Expected cross-entropy when the V logits are i.i.d. N(0, σ²) and independent of the target.

    loss = logsumexp(z) − z_target and E[z_target] = 0, so this is E[logsumexp(z)], estimated
    by Monte Carlo over ``draws`` vectors of V logits (the same draws for every σ, so the
    curve is smooth; logsumexp over V ≥ 10³ entries barely fluctuates). See
    :func:`gaussian_logit_loss_approx` for the two closed-form regimes.
    """
    sig = np.atleast_1d(np.asarray(sigma, dtype=float))
    g = np.random.default_rng(seed).standard_normal((draws, int(vocab_size)))
    out = np.empty_like(sig)
    for i, s in enumerate(sig):
        z = s * g
        m = z.max(axis=1, keepdims=True)
        out[i] = float(np.mean(m[:, 0] + np.log(np.exp(z - m).sum(axis=1))))
    return out


def gaussian_logit_loss_approx(sigma: float | Sequence[float], vocab_size: int) -> np.ndarray:
    """The large-V limit of :func:`gaussian_logit_loss` (a random energy model):

    ln V + σ²/2 for σ ≤ σ_c = sqrt(2 ln V) (the sum of exp(z) is dominated by the bulk), and
    σ·sqrt(2 ln V) above it (dominated by the largest logit). Both equal 2 ln V at σ_c.
    """
    sig = np.asarray(sigma, dtype=float)
    ln_v = math.log(vocab_size)
    return np.where(sig <= math.sqrt(2 * ln_v), ln_v + sig**2 / 2, sig * math.sqrt(2 * ln_v))


def initial_loss_table(runs: pd.DataFrame, draws: int = 8) -> pd.DataFrame:
    """Per run: measured initial loss next to ln V and the Gaussian-logit predictions from σ.

    Columns: ``run_id``, ``name``, ``tie``, ``init_std``, ``variant``, ``model``, ``seed``,
    ``vocab_size``, ``ln_vocab``, ``init_logit_std`` (σ), ``init_val_loss``, ``predicted``
    (:func:`gaussian_logit_loss`), ``predicted_approx`` (:func:`gaussian_logit_loss_approx`),
    ``excess`` (measured − predicted).
    """
    cols = ["run_id", "name", "tie", "init_std", "variant", "model", "seed", "vocab_size", "ln_vocab",
            "init_logit_std", "init_val_loss"]
    t = runs[cols].copy()
    ok = t["init_logit_std"].notna() & t["vocab_size"].notna()
    t["predicted"] = np.nan
    t["predicted_approx"] = np.nan
    for v in t.loc[ok, "vocab_size"].unique():
        m = ok & (t["vocab_size"] == v)
        t.loc[m, "predicted"] = gaussian_logit_loss(t.loc[m, "init_logit_std"].to_numpy(float), int(v), draws=draws)
        t.loc[m, "predicted_approx"] = gaussian_logit_loss_approx(t.loc[m, "init_logit_std"].to_numpy(float), int(v))
    t["excess"] = t["init_val_loss"] - t["predicted"]
    return t


def representative_runs(runs: pd.DataFrame, statuses: Sequence[str] = ("finished", "running", "diverged")) -> pd.DataFrame:
    """One run per (tie, init std, variant) of the largest size: the lowest seed, finished first.

    For figures that show individual runs (embedding geometry). The size is the largest one
    with a run whose status is in ``statuses``; other statuses are used only for a slot that
    has nothing else.
    """
    if runs.empty:
        return runs
    ok = runs[runs["status"].isin(statuses)]
    pool = ok if not ok.empty else runs
    biggest = pool.sort_values(["params_total", "n_embd"], ascending=False, na_position="last").iloc[0]["model"]
    cand = runs[runs["model"] == biggest].assign(_bad=lambda d: ~d["status"].isin(statuses),
                                                  _unfinished=lambda d: d["status"] != "finished")
    cand = cand.sort_values(["_bad", "_unfinished", "seed"], kind="stable")
    return cand.groupby(["tie", "init_std", "variant"], dropna=False, sort=False).head(1).drop(
        columns=["_bad", "_unfinished"])
