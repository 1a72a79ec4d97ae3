"""A run's identity, in one place: what each config key is to it (``Role``, declared per
field with :func:`option`), the keys that moved (``LEGACY``), the precision it computes in, its
id, name and directory, and its W&B id. No torch: the reading side imports it.

A run is identified by its config and the precision it trains in: ``run_id`` is its name plus a
hash of every key that can change the result, so the same command run again finds the same
directory and resumes it, and a run whose numerics differ has another id. ``trainer.precision``
is hashed as the run computes (:func:`hashed_precision`); the train layer resolves ``auto`` on
the machine (train.hardware.resolve_precision) and passes the result here.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import MISSING, field
from enum import Enum
from pathlib import Path
from typing import Any, NamedTuple


class Role(str, Enum):
    """What a config key is to a run, declared once per field (:func:`option`); a node's role is
    the default of its fields. The identity hash, the labels and the run tables derive from it."""

    variant = "variant"  # part of the run's identity, named in its label where runs differ in it
    identity = "identity"  # part of the identity only: the study's axes, the size, the data
    record = "record"  # neither: where and how the run is recorded, the hardware


def option(default: Any = MISSING, *, role=None, neutral=MISSING, factory=MISSING):
    """A config field with its role and, for a key added after results existed, ``neutral``:
    the value at which it is left out of the identity hash (runs from before it keep their id)."""
    meta = {"role": role} if role else {}
    if neutral is not MISSING:
        meta["neutral"] = neutral
    return field(default=default, default_factory=factory, metadata=meta)


class Key(NamedTuple):
    role: Role
    neutral: Any  # MISSING: none
    default: Any  # MISSING: made by a factory


def keys(schema, prefix: str = "", role: Role = Role.variant) -> dict[str, Key]:
    """Every dotted key of the config dataclass ``schema``: a field's role is its own, else its
    node's. A node is a key too where it has a neutral value or is recorded only (then whole)."""
    out = {}
    for f in dataclasses.fields(schema):
        own = f.metadata.get("role", role)
        out[prefix + f.name] = Key(own, f.metadata.get("neutral", MISSING), f.default)
        if dataclasses.is_dataclass(f.default_factory) and own is not Role.record:
            out.update(keys(f.default_factory, f"{prefix}{f.name}.", own))
    return out


# Keys that moved, new -> old. The identity hash reads a config in the old layout, so the runs
# made before a move keep their id; a config.yaml written before it is read in the new layout.
LEGACY = {
    "head.untie_at": "untie_at",
    "head.untie": "finetune.untie",
    "head.t5_rescale": "model.t5_rescale",
    "head.logit_scale": "model.logit_scale",
    "head.emb_init_std": "model.emb_init_std",
    "head.init_std": "model.head_init_std",
}


def moved(tree: dict, mapping: dict[str, str]) -> dict:
    """A copy of the nested ``tree`` with each present key ``a.b`` of ``mapping`` moved to its
    value's place (``LEGACY`` to the old layout, its inverse to the new); a node left empty goes."""
    tree = {k: dict(v) if isinstance(v, dict) else v for k, v in tree.items()}
    for src, dst in mapping.items():
        node, _, leaf = src.rpartition(".")
        parent = tree.get(node, {}) if node else tree
        if isinstance(parent, dict) and leaf in parent:
            value = parent.pop(leaf)
            if node and not parent:
                del tree[node]
            new_node, _, new_leaf = dst.rpartition(".")
            (tree.setdefault(new_node, {}) if new_node else tree)[new_leaf] = value
    return tree


def current(config: dict) -> dict:
    """A config as written by any version, in today's layout (keys that moved, moved)."""
    return moved(config, {old: new for new, old in LEGACY.items()})


def hashed_precision(written: str, resolved: str) -> str:
    """``trainer.precision`` as the identity hashes it: the precision the run computes in
    (``resolved``), but for ``auto`` that resolves to bf16, hashed as ``auto`` as every run was
    before this rule (those runs keep their ids). So ``auto`` on a CPU without bf16 units hashes
    as ``fp32``: another id than its bf16 twin, and the id of the same run asked in fp32."""
    written, resolved = (getattr(p, "value", p) for p in (written, resolved))
    return "auto" if (written, resolved) == ("auto", "bf16") else resolved


def run_id(config: dict, name: str, data_fingerprint: str, precision: str, schema: dict) -> str:
    """``<name>-<hash>``: the hash covers every key of the resolved ``config`` (a plain dict,
    init_std already canonical) but the recorded ones and those at their neutral value (by
    ``schema``, the config's :func:`keys`), in the layout before keys moved (LEGACY), with
    ``trainer.precision`` as the run computes (``precision``: what it resolved to, on the
    machine that trains it; :func:`hashed_precision`), and the data's fingerprint: the same
    config in the same precision has the same id in every version."""
    recorded = [k for k, v in schema.items() if v.role is Role.record]
    neutral = {k: v.neutral for k, v in schema.items() if v.neutral is not MISSING}
    tree = moved(json.loads(json.dumps(config, default=str)), LEGACY)
    if isinstance(trainer := tree.get("trainer"), dict) and "precision" in trainer:
        trainer["precision"] = hashed_precision(trainer["precision"], precision)
    for dotted in [*recorded, *neutral]:
        node, _, leaf = LEGACY.get(dotted, dotted).rpartition(".")
        parent = tree.get(node, {}) if node else tree
        if dotted in recorded or parent.get(leaf, MISSING) == neutral[dotted]:
            parent.pop(leaf, None)
            if node and not parent:  # a node of neutral keys only (head: tied_input_grad_scale)
                tree.pop(node, None)  # is hashed as before it existed

    tree["data_fingerprint"] = data_fingerprint
    digest = hashlib.sha256(json.dumps(tree, sort_keys=True).encode()).hexdigest()[:8]
    return f"{name}-{digest}"


def run_name(tie: bool, init_std: str, model: str, seed: int, replicate: int = 0) -> str:
    """``tied_init0.036_nano_seed0``: no '=' or ',', so a run's path can be given to Hydra
    (``init_from=PATH``) as it is."""
    init = init_std.replace("/", "_")
    model = model.rstrip("/").rsplit("/", 1)[-1]  # a Hugging Face start is named by its path
    rep = f"_rep{replicate}" if replicate else ""
    return f"{'tied' if tie else 'untied'}_init{init}_{model}_seed{seed}{rep}"


def find_run_dir(sweep_dir: Path, run_id: str) -> Path:
    """The directory of ``run_id`` in the sweep: found by the hash alone, so a run recorded
    under an older naming scheme (``tie=true_init=...-<hash>``) is still skipped or resumed."""
    if (sweep_dir / run_id).is_dir():
        return sweep_dir / run_id
    old = sorted(sweep_dir.glob(f"*-{run_id.rsplit('-', 1)[-1]}/summary.json"))
    return old[0].parent if old else sweep_dir / run_id


def wandb_id(sweep: str, run_id: str) -> str:
    """A stable W&B run id, so a resumed run continues the same W&B run."""
    return "tvu-" + hashlib.sha256(f"{sweep}/{run_id}".encode()).hexdigest()[:16]
