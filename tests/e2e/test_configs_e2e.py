"""The end-to-end tests of tests/unit/test_configs.py: they start processes or train runs to the
end."""

from __future__ import annotations

import json

import pytest
from conftest import (
    BYTE_RUN,
    STEPS,
    run_cli,
)

import tiedvsuntied.run  # noqa: F401  (registers the typed schema, as the entry point does)


@pytest.mark.slow
def test_the_fine_tuning_study_runs_as_two_real_multiruns(tmp_path, session_cache):
    """finetune_pretrain, then every arm of finetune (untie x trainable) from its run, each job
    a few steps: the multiruns a user starts, down to the sweep table."""
    tiny = [*BYTE_RUN, *STEPS, f"results_dir={tmp_path / 'results'}"]
    env = {"TIEDVSUNTIED_CACHE": str(session_cache)}
    for experiment in ("finetune_pretrain", "finetune"):
        proc = run_cli(["-m", f"+experiment={experiment}", *tiny], cwd=tmp_path, env_extra=env)
        assert proc.returncode == 0, proc.stderr[-3000:]
    index = json.loads((tmp_path / "results" / "ft" / "index.json").read_text())
    assert len(index) == 12  # untie (keep, copy, fresh) x trainable (all, head, body, embedding)
    assert {entry["status"] for entry in index.values()} == {"finished"}
    assert "Sweep ft:" in proc.stdout and proc.stdout.count("finished") >= 12
