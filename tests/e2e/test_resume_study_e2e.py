"""A kill or a stop and a rerun in the fourth edition's own settings end where the run that was
never stopped ends, bit for bit: bf16 pinned, books held out whole by author with a BPE trained
on the training split, warmup-stable-decay, its clip (``+experiment=size_or_tokens``), on a
library made here. The byte-level run of tests/e2e/test_run.py has none of these."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from conftest import at_step, run_cli
from helpers import write_library
from test_run import metrics, summaries

AUTHORS = ["ann", "bo", "cy", "dee", "eve", "fay"]


@pytest.mark.slow
# kill -9 resumes from the last checkpoint (step 4); SIGTERM, as a scheduler or a session's end
# stops a run, saves the step it stopped at (7), exits 130 as Ctrl-C does, and resumes from there
@pytest.mark.parametrize(
    ("signal_name", "exit_code", "resumed_at"),
    [("SIGKILL", -signal.SIGKILL, 4), ("SIGTERM", 130, 7)],
)
def test_a_killed_study_run_resumes_to_the_uninterrupted_run(
    tmp_path: Path, signal_name: str, exit_code: int, resumed_at: int
):
    (tmp_path / "library").mkdir()
    library = write_library(tmp_path / "library", AUTHORS, lambda i: 3000)
    args = [
        "+experiment=size_or_tokens",
        "+arm=tied",
        "model=nano",
        f"data.files={library}",
        f"data.manifest={library / 'MANIFEST.tsv'}",
        "data.folds=3",
        "data.vocab_size=300",  # a vocabulary the small library can train
        "seed=0",
        "optim.lr=1e-3",
        "trainer.max_steps=12",
        "trainer.batch_size=4",
        "trainer.eval_windows=4",
        "trainer.ckpt_interval=4",
        "trainer.eval_interval=6",
        "trainer.log_interval=1",
        "trainer.progress=false",
        "wandb.mode=disabled",
    ]
    ref = run_cli([*args, f"results_dir={tmp_path / 'ref'}"], cwd=tmp_path)
    assert ref.returncode == 0, ref.stderr[-3000:]
    again = [*args, f"results_dir={tmp_path / 'results'}"]
    killed = run_cli(again, cwd=tmp_path, env_extra=at_step(7, signal_name))
    assert killed.returncode == exit_code, killed.stderr[-3000:]
    assert run_cli(again, cwd=tmp_path).returncode == 0
    [resumed] = summaries(tmp_path / "results" / "size_or_tokens").values()
    [reference] = summaries(tmp_path / "ref" / "size_or_tokens").values()
    assert resumed["resumed_from_step"] == resumed_at and resumed["run_id"] == reference["run_id"]
    assert {s["precision"] for s in resumed["starts"]} == {"bf16"}
    for key in ("final_val_loss", "test_loss", "test_bpb", "clip_frac"):
        assert resumed[key] == reference[key], key  # exactly: the same kernels on one machine
    got, want = (
        {r["step"]: r["train/loss"] for r in metrics(run) if "train/loss" in r}
        for run in (
            tmp_path / "results" / "size_or_tokens" / resumed["run_id"],
            tmp_path / "ref" / "size_or_tokens" / reference["run_id"],
        )
    )
    assert got == want and len(got) == 12
