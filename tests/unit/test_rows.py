"""analysis.rows: one runs-table row per run, from a run directory's summary or a W&B run."""

from __future__ import annotations

import json
import math
import re
from types import SimpleNamespace

import pandas as pd
import pytest
from conftest import REPO

from tiedvsuntied.analysis.load import (
    load_results,
)
from tiedvsuntied.analysis.rows import (
    RUN_COLUMNS,
    flatten,
    run_row,
    wandb_run_row,
)


def wandb_row(config, summary, state, name="n", group="s"):
    """The row of a W&B run of this config, summary and state (as ``wandb.Api().runs`` gives)."""
    ids = {"id": "abc", "name": name, "group": group, "url": None}
    return wandb_run_row(SimpleNamespace(config=config, summary=summary, state=state, **ids))


def test_init_std_spellings_read_as_one():
    for given, canonical in (
        (1, "1.0"),
        ("1", "1.0"),
        (0.036, "0.036"),
        ("d^-0.5", "inv_sqrt_d"),
        ("inv_sqrt_d", "inv_sqrt_d"),
    ):
        assert run_row({"init_std": given})["init_std"] == canonical


def _as_wandb(run_dir):
    """What the W&B API returns for a run the trainer mirrored: config = resolved config plus
    the derived values at the top level; summary = summary.json with dicts flattened to
    "params/total" etc., plus the last logged metrics and W&B's own keys."""
    import yaml

    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    summary = json.loads((run_dir / "summary.json").read_text())
    config.update(
        {
            "run_id": summary["run_id"],
            "name": summary["name"],
            "vocab_size": summary["vocab_size"],
            "params": summary["params"],
            "init_std_resolved": summary["init_std_resolved"],
            "data_fingerprint": summary["data_fingerprint"],
        }
    )
    wb_summary = {}
    for k, v in summary.items():
        if isinstance(v, dict):
            wb_summary.update({f"{k}/{kk}": vv for kk, vv in v.items()})
        else:
            wb_summary[k] = v
    wb_summary.update(
        {"val/loss": summary["final_val_loss"], "_step": summary["step"], "_runtime": 12.5}
    )
    return config, wb_summary


def test_wandb_row_has_the_same_columns_as_the_directory_row(fake_sweep):
    res = load_results(fake_sweep)
    for _, row in res.runs.iterrows():
        config, wb_summary = _as_wandb(fake_sweep / row["run_id"])
        crashed = {"diverged": "finished", "failed": "crashed", "interrupted": "crashed"}
        state = crashed.get(row["status"], row["status"])
        wb = wandb_row(config, wb_summary, state, name=row["name"], group="sw")
        assert list(wb) == RUN_COLUMNS
        for col in [
            "run_id",
            "name",
            "sweep",
            "status",
            "tie",
            "head",
            "init_std",
            "init_std_resolved_emb",
            "model",
            "n_embd",
            "seed",
            "vocab_size",
            "data_id",
            "params_total",
            "params_non_embedding",
            "init_val_loss",
            "final_val_loss",
            "test_loss",
            "diverged_at_step",
            "ln_vocab",
        ]:
            a, b = row[col], wb[col]
            assert (pd.isna(a) and pd.isna(b)) or a == b, (col, a, b)


def test_wandb_row_from_metrics_only():
    """A run whose summary holds only W&B's last metrics (no mirrored summary.json keys)."""
    config = {
        "tie": False,
        "init_std": "inv_sqrt_d",
        "seed": 3,
        "sweep": "s",
        "model": {"name": "micro", "n_layer": 4, "n_head": 4, "n_embd": 128, "vocab_size": 50257},
        "data": {"name": "wikitext2"},
    }
    summary = {
        "val/loss": 4.2,
        "test/loss": 4.3,
        "_step": 2000,
        "init/logit_std": 1.0,
        "test/loss_at_best": 4.25,
        "init/self_logit": 0.5,
    }
    row = wandb_row(config, summary, "crashed")
    assert row["test_loss_at_best"] == 4.25 and row["init_self_logit"] == 0.5
    assert row["status"] == "failed"  # crashed in W&B
    stale = wandb_row(config, {**summary, "status": "running"}, "finished")
    assert stale["status"] == "interrupted"  # stopped without recording an end: killed
    live = wandb_row(config, {**summary, "status": "running"}, "running")
    assert live["status"] == "running"
    assert row["final_val_loss"] == 4.2 and row["test_loss"] == 4.3 and row["step"] == 2000
    assert row["tie"] is False and row["head"] == "untied" and row["init_std"] == "inv_sqrt_d"
    assert row["model"] == "micro" and row["n_embd"] == 128 and row["seed"] == 3
    assert row["ln_vocab"] == pytest.approx(math.log(50257))
    assert row["data_id"].startswith("cfg-")
    # a dotted flat config reads the same
    flat = wandb_row(flatten(config), summary, "finished")
    assert flat["model"] == "micro" and flat["n_embd"] == 128 and flat["status"] == "finished"


def test_old_runs_without_a_replicate_key_are_replicate_0(fake_sweep):
    summary = json.loads(next(fake_sweep.glob("*/summary.json")).read_text())
    summary.pop("replicate")
    assert run_row(summary)["replicate"] == 0


def test_docs_name_every_runs_table_column_in_its_order():
    """docs/figures.md's **runs** paragraph lists RUN_COLUMNS, in order, and nothing else: each
    column name in backticks (several to a span, comma-separated); a dotted key, a metric name
    or a value in a note beside it is no column."""
    text = (REPO / "docs" / "figures.md").read_text()
    runs = text[text.index("**runs**: one row per run") : text.index("**history**:")]
    names = [name.strip() for span in re.findall(r"`([^`]*)`", runs) for name in span.split(",")]
    assert [name for name in names if re.fullmatch(r"[a-z][a-z0-9_]*", name)] == RUN_COLUMNS
