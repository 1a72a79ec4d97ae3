"""A study's provenance statements come from its runs' records (analysis.provenance)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pandas as pd

from tiedvsuntied.analysis.provenance import commit_times, records, statements
from tiedvsuntied.analysis.rows import run_row
from tiedvsuntied.train.setup import code_version


def runs(**columns) -> pd.DataFrame:
    base = {
        "sweep": "s",
        "model": "micro",
        "vocab_size": 1024,
        "replicate": 0,
        "seed": [0, 1, 2, 0],
    }
    base |= {"wall_time_s": 60.0, "threads": 1, "cpu_time_s": 50.0}  # the runs table's costs
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


def test_runs_are_counted_by_the_processor_they_ran_on_and_those_before_the_record_apart():
    amx, avx2 = (
        "Xeon; torch AVX512; bf16 units: avx512_bf16, amx_bf16",
        "EPYC; torch AVX2; bf16 units: none",
    )
    text = statements(
        runs(hardware=[amx, amx, avx2, None], precision=["bf16", "bf16", "fp32", "bf16"])
    )
    lines = text.split("What they ran on (each run's last start):\n")[1].split("\n\n")[0]
    assert lines.splitlines() == [
        f"- 1 run on {avx2}, in fp32, started 2026-01-01 10:00 to 2026-01-01 10:00 UTC",
        f"- 2 runs on {amx}, in bf16, started 2026-01-01 10:00 to 2026-01-01 11:00 UTC",
        "- 1 run records no processor (from before the record; 1 in bf16), started "
        "2026-01-01 11:00 to 2026-01-01 11:00 UTC",
    ]


def test_costs_are_summed_from_each_runs_wall_time_threads_and_cpu_seconds():
    def summary(i, threads, cpu_s, model="micro"):
        started = f"2026-01-01T1{i}:00:00+0000"
        return {"run_id": f"r{i}", "sweep": "s", "model": model, "vocab_size": 1024}, {
            "wall_time_s": 3600.0,
            "threads": threads,
            "cpu_s": cpu_s,
            "started_at": started,
        }

    parts = [
        summary(1, 2, {"step": 5400.0, "eval": 1800.0}),
        summary(2, 1, None),  # resumed from a checkpoint that did not count its CPU seconds
        summary(3, 1, {"step": 1800.0}, model="body64x2"),
    ]
    runs = pd.DataFrame([run_row({**ids, **values}) for ids, values in parts])
    assert runs["cpu_time_s"].isna().tolist() == [False, True, False]
    text = statements(runs)
    micro = "- s, micro, V = 1,024: 2 runs, 2.0 h of wall time, 3.0 core-hours, 2.0 CPU hours"
    assert micro + " over the 1 that counted theirs" in text
    body = "- s, body64x2, V = 1,024: 1 run, 1.0 h of wall time, 1.0 core-hours, 0.5 CPU hours"
    assert body in text
    assert "- all: 3 runs, 3.0 h of wall time, 4.0 core-hours, 2.5 CPU hours over the 2" in text
    assert text.index(micro) < text.index(body)  # in the order they started


def test_a_body_at_two_run_lengths_costs_two_lines_each_with_its_cpu_seconds_per_token():
    """A study's two text budgets at one body (issue 55's 2 x 2) are two cost lines, each with
    the range of its runs' CPU seconds per million tokens; the line over all bodies has none."""
    steps = {"max_steps": [100, 100, 400, 400], "tokens": [1e6, 1e6, 4e6, 4e6]}
    text = statements(runs(cpu_time_s=[50.0, 70.0, 200.0, 200.0], **steps))
    lines = text.split("What they cost")[1].splitlines()[1:]
    assert lines[0].startswith("- s, micro, V = 1,024, 100 steps: 2 runs")
    assert lines[0].endswith(", 50–70 CPU-s per million tokens")
    assert lines[1].startswith("- s, micro, V = 1,024, 400 steps: 2 runs")
    assert lines[1].endswith(", 50 CPU-s per million tokens")
    assert lines[2].startswith("- all: 4 runs") and "per million tokens" not in lines[2]


def test_mfu_is_the_runs_flops_over_their_cpu_seconds_at_each_runs_own_peak():
    """An edition's MFU (issue 55): sum of tokens x FLOPs per token over the sum of CPU seconds x
    peak, so a run at a lower peak weighs by its seconds, not by its share of runs; a run that
    did not record its peak is left out, and a group where none did states no MFU."""
    rates = {"tokens": [1e6] * 4, "flops_per_token": [6e6, 6e6, 3e6, 3e6]}
    peaks = {"cpu_time_s": [10.0, 30.0, 20.0, 20.0], "peak_tflops": [1.0, 0.5, 1.0, None]}
    text = statements(runs(model=["micro", "micro", "d64", "d64"], **rates, **peaks))
    lines = text.split("What they cost")[1].splitlines()
    # micro: 1.2e13 FLOPs / ((10 x 1 + 30 x 0.5) x 1e12) = 48%; d64: the one with a peak, 15%
    mfu = [line.split(", MFU ")[1] for line in lines[1:]]
    assert mfu == [
        "48% (peaks 0.50–1.00 TFLOP/s)",
        "15% (peak 1.00 TFLOP/s)",
        "33% (peaks 0.50–1.00 TFLOP/s)",
    ]
    unrecorded = statements(runs(**rates)).split("What they cost")[1]  # no peak, no CPU-s
    assert "MFU" not in unrecorded.split("\n", 1)[1]


def test_the_pieces_are_listed_in_the_order_they_first_started_each_sweep_apart():
    started = [f"2026-01-01T{h}:00:00+0000" for h in (10, 12, 11, 13)]
    text = statements(runs(sweep=["s", "s", "grid", "s"], seed=[0, 1, 0, 0], started_at=started))
    order = text.split("Order in which they started:\n")[1].split("\n\n")[0].splitlines()
    assert order == [
        "1. s, micro, replicate 0, seed 0: 2 runs, 01-01 10:00 to 01-01 13:00 UTC",
        "2. grid, micro, replicate 0, seed 0: 1 run, 01-01 11:00 to 01-01 11:00 UTC",
        "3. s, micro, replicate 0, seeds 1+: 1 run, 01-01 12:00 to 01-01 12:00 UTC",
    ]


def test_records_are_counted_not_ids_and_an_id_in_two_bundles_is_named(tmp_path):
    """The same run's record in two bundles (one config trained twice) counts twice, and one
    line names the id, its bundles and the precision of each."""
    shipped = Path(__file__).parents[2] / "experiments" / "sign_flip" / "results_fp32"
    run = sorted(p for p in shipped.iterdir() if (p / "summary.json").is_file())[0]
    bundles = [tmp_path / "study" / name for name in ("results", "results_again")]
    for bundle in bundles:
        shutil.copytree(run, bundle / run.name)
    text = statements(records([str(b) for b in bundles]))
    assert text.startswith("Provenance of 2 run records (generated from them):\n")
    assert [line for line in text.splitlines() if run.name in line] == [
        f"- run id {run.name} is in 2 bundles: study/results (fp32), study/results_again (fp32)"
    ]
