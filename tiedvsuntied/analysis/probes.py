"""The probe files a run writes (``probes/step_*.npz``, ``token_freq.npy``) as long DataFrames:
per-token norms and counts, sampled cosines of E·Eᵀ per vocabulary stratum.
Loaded on demand for a few runs; what is missing is listed in ``.attrs["missing"]``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd


def iter_probes(runs: pd.DataFrame, steps: Sequence[int | str], missing: list[str]):
    """(run, requested step, probe step, arrays) per run and step that has a probe file;
    "first"/"last" name the run's first/last probe, and a probe is read once per run."""
    for _, run in runs.iterrows():
        probes = Path(run.get("path") or "-", "probes").glob("step_*.npz")
        files, seen = sorted((int(p.stem.removeprefix("step_")), p) for p in probes), set()
        if not files:
            local = "" if run.get("path") else " (not a local run directory)"
            missing.append(f"{_label(run)}: no probes/step_*.npz{local}")
            continue
        by_name = {"first": files[0], "last": files[-1], **{str(s): (s, p) for s, p in files}}
        for which in steps:
            if (pick := by_name.get(str(which))) is None:
                missing.append(f"{_label(run)}: no probe at step {which}")
            elif pick[0] not in seen:
                seen.add(pick[0])
                with np.load(pick[1]) as z:
                    arrays = {k: np.asarray(z[k], dtype="float32").ravel() for k in z.files}
                yield run, which, pick[0], arrays


TOKEN_COLUMNS = ["run_id", "probe_step", "token", "count", "emb_norm", "head_norm", "in_out_cos"]
COSINE_COLUMNS = ["run_id", "probe_step", "which", "stratum", "kind", "cos"]


def _label(run) -> str:
    return run.get("name") or run["run_id"]


def load_token_probes(runs: pd.DataFrame) -> pd.DataFrame:
    """Per-token probe arrays at each run's last probe, long: ``count`` is the train-split
    frequency (NA without ``token_freq.npy``), ``in_out_cos`` NaN for tied runs."""
    parts, missing = [], []
    for run, _, probe_step, arrays in iter_probes(runs, ["last"], missing):
        n = len(arrays.get("emb_norm", ()))
        if not n:
            keys = sorted(arrays)
            missing.append(f"{_label(run)}: probe at step {probe_step} has no 'emb_norm' ({keys})")
            continue
        df = pd.DataFrame({"run_id": run["run_id"], "probe_step": probe_step, "token": range(n)})
        for k in ("emb_norm", "head_norm", "in_out_cos"):
            df[k] = arrays[k] if len(arrays.get(k, ())) == n else np.float32(np.nan)
        freq_path = Path(run["path"], "token_freq.npy")
        freq = np.load(freq_path) if freq_path.exists() else None
        known = freq is not None and len(freq) == n
        df["count"] = pd.array(freq if known else [pd.NA] * n, dtype="Int64")
        if not known:
            why = "missing" if freq is None else f"has length {len(freq)}, probes have {n}"
            missing.append(f"{_label(run)}: token_freq.npy {why} (norms kept, frequency unknown)")
        parts.append(df)
    return _long(parts, TOKEN_COLUMNS, missing)


def load_stratum_cosines(
    runs: pd.DataFrame, steps: Sequence[int | str] = ("first", "last")
) -> pd.DataFrame:
    """The sampled off-diagonal cosines of E·Eᵀ per run, probe step (``which``: the requested
    step), stratum and ``kind`` (raw, or centred: the sample's mean row removed), long."""
    parts, missing = [], []
    for run, which, probe_step, arrays in iter_probes(runs, steps, missing):
        found = {
            (k.split("_", 1)[1], "raw" if k.startswith("cos_") else "centred"): v
            for k, v in arrays.items()
            if k.startswith(("cos_", "ccos_"))
        }
        if not found:
            missing.append(f"{_label(run)}: probe at step {probe_step} has no cosines")
        keys = {"run_id": run["run_id"], "probe_step": probe_step, "which": str(which)}
        parts += [
            pd.DataFrame({**keys, "stratum": stratum, "kind": kind, "cos": v})
            for (stratum, kind), v in found.items()
        ]
    return _long(parts, COSINE_COLUMNS, missing)


def _long(parts: list[pd.DataFrame], cols: list[str], missing: list[str]) -> pd.DataFrame:
    out = pd.concat(parts, ignore_index=True)[cols] if parts else pd.DataFrame(columns=cols)
    out.attrs["missing"] = missing
    return out
