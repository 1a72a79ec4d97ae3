"""The end-to-end tests of tests/unit/test_configs.py: every job of every experiment's sweep
(hundreds of configs, and one in-process run for finetune to start from) composes and passes the
checks; the fine-tuning study runs as two real multiruns (processes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import (
    BYTE_RUN,
    CORPUS_OVERRIDES,
    LIBRARY_OVERRIDES,
    REPO,
    STEPS,
    SWEEP_NAMES,
    run_cli,
)
from helpers import checked, composed, sweep_jobs

import tiedvsuntied.run  # noqa: F401  (registers the typed schema, as the entry point does)
from tiedvsuntied.results import records as results
from tiedvsuntied.train.trainer import train

EXPERIMENTS = sorted(p.stem for p in (REPO / "conf" / "experiment").glob("*.yaml"))


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory) -> Path:
    """The results_dir holding the finished run of finetune_pretrain that finetune starts from."""
    results_dir = tmp_path_factory.mktemp("pretrained")
    overrides = ["+experiment=finetune_pretrain", *BYTE_RUN, *STEPS, f"results_dir={results_dir}"]
    assert train(checked(overrides)).status == results.Status.finished
    return results_dir


@pytest.mark.slow
@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_job_of_every_experiment_composes_and_passes_the_checks(
    experiment, tmp_path, request
):
    results_dir = request.getfixturevalue("pretrained") if experiment == "finetune" else tmp_path
    data = composed(f"+experiment={experiment}").data
    corpus = CORPUS_OVERRIDES[1:] if data.source == "text" else []
    corpus = LIBRARY_OVERRIDES if data.name == "gutenberg" else corpus
    if data.encoding == "bpe":  # its own vocabulary, not the bytes of a fresh clone's library
        corpus = [o for o in corpus if o != "data.encoding=bytes"]
    corpus += ["data.encoding=bytes"] if experiment == "finetune" else []  # as its start
    # offline, a Hub corpus is refused before the jobs start (test_first_hour): the shipped one
    corpus += ["data=tinyshakespeare"] if data.source == "hub" else []
    plans = sweep_jobs(f"+experiment={experiment}", *corpus, f"results_dir={results_dir}")
    assert len(plans) > 1 or experiment == "finetune_pretrain"
    assert {plan.cfg.sweep for plan in plans} == {SWEEP_NAMES.get(experiment, experiment)}


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
