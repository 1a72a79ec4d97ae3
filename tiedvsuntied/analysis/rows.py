"""One runs-table row per run, whatever it was read from: the columns (docs/figures.md lists
them), a summary.json dict or a W&B run -> :func:`run_row`, logged records -> a history frame,
and the ``variant`` that keeps runs differing in config apart."""

from __future__ import annotations

import functools
import hashlib
import json
import typing
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from tiedvsuntied.model.config import SHAPE_KEYS, canonical_init_std
from tiedvsuntied.results.metrics import (
    INIT_LOGIT_STD,
    INIT_SELF_LOGIT,
    TEST_LOSS,
    TEST_LOSS_AT_BEST,
    VAL_LOSS,
)
from tiedvsuntied.results.records import Role, RunSummary, Status, current
from tiedvsuntied.train.config import KEYS, VARIANT

# summary.heldout: the count models on the held-out windows, and the targets never trained on
HELDOUT_COLUMNS = [f"{s}_{k}" for s in ("val", "test") for k in ("unigram", "bigram", "unseen")]
# since issue 40: summary.heldout in bits per byte, and the summary's own columns (the head's
# share rho, the budgets, bits per byte, the tokenizer, the code that ran)
HELDOUT_BPB_COLUMNS = [
    f"{s}_{k}" for s in ("val", "test") for k in ("loss_bpb", "unigram_bpb", "bigram_bpb")
] + ["val_bytes_per_token", "test_bytes_per_token"]
SUMMARY_COLUMNS = [
    "rho",
    "rho_untied",
    "non_embedding_params",
    "tokens_per_param",
    "tokens_per_nonemb_param",
    "bytes_per_token",
    "train_bytes",
    "test_bpb",
    "val_bpb",
    *HELDOUT_BPB_COLUMNS,
    "encoding",
    "git_commit",
    "git_dirty",
    "code_starts",
]
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
    "replicate",
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
    "emb_lr_mult",
    "head_lr_mult",
    "heldout_fold",
    *HELDOUT_COLUMNS,
    "seen_vocab_frac",
    "clip_frac",
    "peak_tflops",
    "threads",
    "device",  # where it trained: cpu, cuda, cuda:N
    "hardware",  # on what: summary.hardware (train.hardware.processor)
    "precision",  # in what: bf16 or fp32, as trainer.precision resolved there (summary.precision)
    "wall_time_s",
    "cpu_time_s",
    "ln_vocab",
    "wandb_run_id",
    "wandb_mode",
    "started_at",
    "updated_at",
    *SUMMARY_COLUMNS,
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
    "replicate",
]

# summary.json's keys; the column dtypes follow them (Int64: a missing count stays NA, not a float)
_TYPES = typing.get_type_hints(RunSummary)
INT_COLUMNS = [
    c for c in RUN_COLUMNS if _TYPES.get(c) in (int, int | None) or c.startswith("params_")
] + ["heldout_fold"]
FLOAT_COLUMNS = [
    c
    for c in RUN_COLUMNS
    if _TYPES.get(c) in (float, float | None) or c.startswith("init_std_resolved_")
] + [
    "cpu_time_s",
    "ln_vocab",
    "lr",
    "emb_lr_mult",
    "head_lr_mult",
    *HELDOUT_COLUMNS,
    *HELDOUT_BPB_COLUMNS,
]
# When one run is found twice (several sweeps, a run dir and its sweep), the best record wins.
STATUS_RANK = {status.value: rank for rank, status in enumerate(Status)}  # then "unknown"


def variants(configs: Sequence[Mapping[str, Any]]) -> list[str]:
    """Per config: "key=value, ..." for the variant keys (train.config.VARIANT) whose values
    differ among ``configs`` ("" where none does). A key a config lacks is no difference."""
    flat = [
        {k: v for k, v in flatten(current(unflatten(c or {}))).items() if k in VARIANT}
        for c in configs
    ]
    as_json = [{k: json.dumps(v, sort_keys=True, default=str) for k, v in f.items()} for f in flat]
    keys = sorted({k for f in flat for k in f})
    differing = [k for k in keys if len({j[k] for j in as_json if k in j}) > 1]
    return [
        ", ".join(f"{k}={f[k]}" for k in differing if k in f and not _is_model_default(k, f[k]))
        for f in flat
    ]


def _is_model_default(key: str, value: Any) -> bool:
    """A model or head key at its default is the plain model, not a variant: the tied runs
    beside t5_rescale runs stay the plain tied arm (optimizer and trainer keys, such as a
    learning-rate grid, label every run)."""
    default = getattr(KEYS[key].default, "value", KEYS[key].default)  # an enum: its value
    return key.startswith(("model.", "head.")) and str(value) == str(default)


def key_label(key: str) -> str:
    """A variant key as labels name it: without its node ('head.t5_rescale' -> 't5 rescale'),
    unless a top-level key has that name ('head.init_std' -> 'head init std')."""
    node, _, name = key.rpartition(".")
    return (f"{node} {name}" if node and name in KEYS else name).replace("_", " ")


def history_from_records(records: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """Logged dicts -> one numeric row per step; later records of a step win (a resumed run logs
    the steps after its checkpoint again); W&B's ``_step`` is ``step``, its other ``_`` keys go."""
    rows = [
        {k: v for k, v in {"step": rec.get("_step"), **rec}.items() if not k.startswith("_")}
        for rec in records
    ]
    if not rows:
        return pd.DataFrame()
    df = pd.DataFrame.from_records(rows)
    # only the columns that are not numbers already: to_numeric leaves those as they are, and
    # a run logs ~60 metrics (over half of reading a bundle went to converting every column)
    text = [c for c, dtype in df.dtypes.items() if not pd.api.types.is_numeric_dtype(dtype)]
    if text:
        df[text] = df[text].apply(pd.to_numeric, errors="coerce")
    df = df.dropna(subset=["step"])
    df["step"] = df["step"].astype("int64")
    return df.groupby("step", sort=True).last().reset_index().replace([np.inf, -np.inf], np.nan)


def flatten(d: Mapping[str, Any], sep: str = ".") -> dict[str, Any]:
    """{'a': {'b': 1}} -> {'a.b': 1}, keys in ``pd.json_normalize``'s order (the top level's plain
    values first, then each nested dict's, depth first; an empty dict leaves no key; lists stay
    values), without a DataFrame per record: that was two thirds of the time to read a bundle."""
    out = {k: v for k, v in d.items() if not isinstance(v, dict)}
    for key, value in d.items():
        if isinstance(value, dict):
            out |= _nested(value, f"{key}{sep}", sep)
    return out


def _nested(d: dict, prefix: str, sep: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in d.items():
        if isinstance(value, dict):
            out |= _nested(value, f"{prefix}{key}{sep}", sep)
        else:
            out[f"{prefix}{key}"] = value
    return out


def unflatten(d: Mapping[str, Any]) -> dict[str, Any]:
    """{'a.b': 1} -> {'a': {'b': 1}} (nested dicts pass through)."""
    out: dict[str, Any] = {}
    for k, v in flatten(d).items():
        *parents, leaf = str(k).split(".")
        functools.reduce(lambda node, p: node.setdefault(p, {}), parents, out)[leaf] = v
    return out


# A boolean as any reader spells it (True, np.True_, 1, "yes"): anything else is unknown (None)
_BOOLS = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}
# Where the config holds what a summary may lack (runs from before the summary recorded it)
_IN_CONFIG = {"model": "model.name", "data": "data.name", "t5_rescale": "head.t5_rescale"}
_IN_CONFIG |= {"max_steps": "trainer.max_steps"} | {k: f"model.{k}" for k in SHAPE_KEYS}


def _filled_summary(summary: Mapping[str, Any], config: Mapping[str, Any]) -> dict[str, Any]:
    """The summary with what it lacks taken from the config: its top-level keys, ``derived``,
    then the model/data/trainer/head sections (first value found wins)."""
    filled = dict(summary or {})
    derived = config.get("derived") or {}
    flat = flatten(config)
    nested = ("params", "init_std_resolved")
    for key in _TYPES:
        in_config = flat.get(_IN_CONFIG.get(key, ""))
        for value in (filled.get(key), config.get(key), derived.get(key), in_config):
            if value is not None and (not isinstance(value, Mapping) or key in nested):
                filled[key] = value
                break
    return filled


# A document split's folds hold out other documents of one corpus: replicates, like seeds. Its
# design leaves out the fold, the manifest's path and the keys that only record how it was read.
_DATA_RECORDED = [k for k, key in KEYS.items() if k.startswith("data.") and key.role is Role.record]
_FOLD_KEYS = {"heldout_fold", "manifest", *(k.removeprefix("data.") for k in _DATA_RECORDED)}


def _data_id(summary: Mapping[str, Any], data: Mapping[str, Any], vocab_size) -> str | None:
    """Runs are comparable only when they share it: the corpus fingerprint, else (runs from
    before it) a hash of the data config without its cache keys; for a document split, the
    split's design without the fold (every fold of it is one corpus, held out another way)."""
    if data.get("split") == "document":
        design = {k: v for k, v in data.items() if k not in _FOLD_KEYS}
        return "docs-" + _digest({"data": design, "vocab_size": vocab_size})
    if summary.get("data_fingerprint"):
        return str(summary["data_fingerprint"])[:12]
    if not data:
        return None
    uncached = {k: v for k, v in data.items() if "cache" not in str(k).lower()}
    return "cfg-" + _digest({"data": uncached, "vocab_size": vocab_size})


def _digest(obj: Any) -> str:
    return hashlib.sha1(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:8]


def run_row(
    summary: Mapping[str, Any],
    config: Mapping[str, Any] | None = None,
    *,
    source: str | None = None,
) -> dict[str, Any]:
    """One runs-table row from a ``summary.json`` dict; the config (nested, or W&B's dotted keys:
    ``derived``, top-level keys, the model/data/trainer sections) fills what the summary lacks."""
    config = current(unflatten(config or {}))
    filled = _filled_summary(summary, config)
    row: dict[str, Any] = {c: filled.get(c) for c in RUN_COLUMNS}
    for key in ("tie", "t5_rescale", "git_dirty"):
        row[key] = _BOOLS.get(str(row[key]).lower())
    row["head"] = {True: "tied", False: "untied"}.get(row["tie"])
    try:
        row["init_std"] = canonical_init_std(row["init_std"])
    except (TypeError, ValueError):  # a spelling it does not know is kept as read
        row["init_std"] = None if row["init_std"] is None else str(row["init_std"])
    nested = {k: filled.get(k) or {} for k in ("params", "init_std_resolved")}
    row.update({k: v for k, v in flatten(nested, "_").items() if k in row})  # params_total...
    row["status"] = row["status"] or "unknown"
    row["replicate"] = row["replicate"] or 0  # runs from before replicates existed: the first
    row["ln_vocab"] = np.log(float(row["vocab_size"])) if row["vocab_size"] else None
    data = config["data"] if isinstance(config.get("data"), Mapping) else {}
    row["data_id"] = _data_id(filled, data, row["vocab_size"]) or row["data_id"]
    optim = config["optim"] if isinstance(config.get("optim"), Mapping) else {}
    row["lr"], row["emb_lr_mult"] = optim.get("lr"), optim.get("emb_lr_mult")
    # the output matrix's multiplier as the optimizer reads it (train.optim.group_lr_scales): an
    # untied head's head_lr_mult, the tied matrix's tied_lr_mult; null: emb_lr_mult
    own = optim.get("tied_lr_mult" if row["tie"] else "head_lr_mult")
    row["head_lr_mult"] = row["emb_lr_mult"] if own is None else own
    row["heldout_fold"] = data.get("heldout_fold") if data.get("split") == "document" else None
    heldout = summary.get("heldout") if isinstance(summary.get("heldout"), Mapping) else {}
    held = HELDOUT_COLUMNS + HELDOUT_BPB_COLUMNS
    row.update({k: v for k, v in flatten(heldout, "_").items() if k in held})
    row["code_starts"] = code_starts(filled.get("starts"))
    cpu = filled.get("cpu_s")  # None or missing: a start it did not count (no total)
    row["cpu_time_s"] = sum(cpu.values()) if isinstance(cpu, Mapping) and cpu else None
    row["source"], row["path"], row["variant"] = source, None, None
    return row


def code_starts(starts: Any) -> str | None:
    """summary.starts in a table cell: each start as ``commit@step`` ("?": unrecorded, "*": the
    code differed from the commit), e.g. "?@0 24ac9a5@555"; None for runs from before it."""
    if not isinstance(starts, list) or not starts:
        return None
    return " ".join(
        f"{(s.get('git_commit') or '?')[:7]}{'*' if s.get('git_dirty') else ''}@{s.get('step')}"
        for s in starts
    )


_WANDB_STATES, _WANDB_FAILED = ("running", "finished"), ("crashed", "failed", "killed", "preempted")


def wandb_run_row(run: Any) -> dict[str, Any]:
    """One runs-table row from a W&B run (of ``wandb.Api().runs``): the summary.json values the
    trainer mirrors (dicts as "params/total"), gaps filled from the last metrics. Crashed: failed;
    "running" after W&B saw it stop: interrupted, as the run's folder says (results.state)."""
    summary = dict(run.summary)
    run_id = summary.get("run_id") or run.id
    values = {"run_id": run_id, "name": run.name, "sweep": run.group, "wandb_run_id": run_id}
    values |= {k: v for k, v in summary.items() if not k.startswith("_")}
    for prefix in ("params", "init_std_resolved"):
        sub = {k.split("/", 1)[1]: v for k, v in summary.items() if k.startswith(prefix + "/")}
        if sub and not isinstance(values.get(prefix), Mapping):
            values[prefix] = sub
    for ours, theirs in (
        ("final_val_loss", VAL_LOSS),
        ("test_loss", TEST_LOSS),
        ("step", "_step"),
        ("test_loss_at_best", TEST_LOSS_AT_BEST),
        ("init_logit_std", INIT_LOGIT_STD),
        ("init_self_logit", INIT_SELF_LOGIT),
    ):
        if values.get(ours) is None and summary.get(theirs) is not None:
            values[ours] = summary[theirs]
    state = str(run.state or "").lower()
    wb_state = "failed" if state in _WANDB_FAILED else state if state in _WANDB_STATES else None
    if not values.get("status"):
        values["status"] = wb_state or "unknown"
    elif values["status"] == "running" and wb_state in ("failed", "finished"):
        values["status"] = "interrupted"  # W&B saw it stop, it recorded no end: killed (resumes)
    return run_row(values, dict(run.config), source=run.url or f"wandb:{run_id}")
