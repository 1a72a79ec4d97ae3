"""A study's provenance statements come from its runs' records (analysis.provenance)."""

from __future__ import annotations

import subprocess

import pandas as pd

from tiedvsuntied.analysis.provenance import commit_times, statements
from tiedvsuntied.train.setup import code_version


def runs(**columns) -> pd.DataFrame:
    base = {"model": "micro", "replicate": 0, "seed": [0, 1, 2, 0]}
    started = ["2026-01-01T10:00:00+0000", "2026-01-01T11:00:00+0000"] * 2
    return pd.DataFrame({**base, "started_at": started, **columns})


def test_recorded_commits_are_counted_with_their_dirty_flag():
    text = statements(runs(git_commit=["a" * 40] * 3 + ["b" * 40], git_dirty=[False] * 3 + [True]))
    assert "- 3 runs from commit aaaaaaa (clean)" in text
    assert "- 1 run from commit bbbbbbb (with uncommitted changes)" in text


def test_unrecorded_runs_are_placed_against_a_claimed_commit():
    claim = pd.Series({"c" * 40: pd.Timestamp("2026-01-01T10:30:00", tz="UTC")})
    text = statements(runs(git_commit=[None] * 4), claim)
    before = sum(t < claim.iloc[0] for t in pd.to_datetime(runs().started_at, utc=True))
    assert f"2 of them started before it existed, {4 - before} after" in text
    assert before == 2


def test_a_run_records_the_commit_of_this_checkout():
    head = code_version()["git_commit"]
    assert head is not None and len(head) == 40  # the tests run in a git checkout
    assert list(commit_times(".", [head[:7]]).index) == [head]


def test_a_run_is_dirty_when_the_code_differs_not_when_a_study_writes_its_files(tmp_path):
    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    for path in ("tiedvsuntied/model.py", "conf/config.yaml", "experiments/study/lr_choice.tsv"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("a\n")
    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "code")
    (tmp_path / "experiments/study/lr_choice.tsv").write_text("a chosen lr\n")
    assert code_version.__wrapped__(tmp_path)["git_dirty"] is False  # not the process's cache
    (tmp_path / "conf/config.yaml").write_text("b\n")
    assert code_version.__wrapped__(tmp_path)["git_dirty"] is True


def test_runs_resumed_on_other_code_say_which_code_ran_which_steps():
    starts = ["?@0 " + "c" * 7 + "@555", "?@0 " + "c" * 7 + "@568", "a" * 7 + "@0", None]
    commits = {"git_commit": ["c" * 40] * 2 + ["a" * 40] * 2, "git_dirty": [False] * 4}
    text = statements(runs(**commits, code_starts=starts))
    assert "- 2 runs from commit ccccccc (clean)" in text
    resumed = "- 2 runs were resumed on other code: unrecorded code from step 0, then commit "
    assert resumed + "ccccccc from steps 555–568" in text
    assert text.count("resumed on other code") == 1  # a run of one commit, or none recorded
