"""analysis.load: sweep directories, bundles and W&B -> Results (runs, history, notes), on
hand-built results directories (tests/fake_results.py)."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest
from fake_results import write_run, write_sweep
from filelock import FileLock

from tiedvsuntied.analysis.load import (
    ResultsError,
    WandbUnavailableError,
    check_consistency,
    load,
    load_results,
    load_wandb,
    require_single_data,
)
from tiedvsuntied.analysis.rows import (
    RUN_COLUMNS,
    history_from_records,
    variants,
)
from tiedvsuntied.analysis.stats import (
    aggregate_runs,
)


def test_runs_table_one_row_per_run_with_summary_values(fake_sweep):
    res = load_results(fake_sweep)
    runs = res.runs
    assert list(runs.columns) == RUN_COLUMNS
    assert len(runs) == 8 and runs["run_id"].is_unique
    assert sorted(runs["status"].value_counts().items()) == [
        ("diverged", 1),
        ("failed", 1),
        ("finished", 5),
        ("interrupted", 1),  # its summary says running, but no process holds its lock
    ]
    row = runs[(runs["tie"] == True) & (runs["init_std"] == "0.036") & (runs["seed"] == 0)].iloc[0]  # noqa: E712
    summary = json.loads((fake_sweep / row["run_id"] / "summary.json").read_text())
    assert row["final_val_loss"] == summary["final_val_loss"]
    assert row["params_total"] == summary["params"]["total"]
    assert row["params_non_embedding"] == summary["params"]["non_embedding"]
    assert row["init_std_resolved_emb"] == pytest.approx(0.036)
    assert row["head"] == "tied" and row["model"] == "nano" and row["n_embd"] == 32
    assert row["ln_vocab"] == pytest.approx(math.log(512))
    assert row["data_id"] == summary["data_fingerprint"][:12]
    assert set(runs["init_std"]) == {"1.0", "0.036"}
    assert (runs["variant"] == "").all()
    # the notes say which runs are not finished
    assert any("diverged" in n and "tie=true_init=1.0_model=nano_seed=1" in n for n in res.notes)


def test_history_is_one_row_per_run_and_step(fake_sweep):
    res = load_results(fake_sweep)
    h = res.history
    assert not h.duplicated(["run_id", "step"]).any()
    assert {
        "run_id",
        "step",
        "tokens",
        "val/loss",
        "train/loss",
        "train/grad_norm_in",
        "tie",
        "init_std",
        "model",
        "seed",
        "status",
    } <= set(h.columns)
    finished = res.runs[res.runs["status"] == "finished"].iloc[0]
    run_history = h[h["run_id"] == finished["run_id"]]
    assert run_history["step"].is_monotonic_increasing
    assert run_history["val/loss"].dropna().iloc[-1] == pytest.approx(finished["final_val_loss"])
    assert run_history["test/loss"].notna().sum() == 1
    # the identity columns match the runs table
    assert set(run_history["tie"]) == {finished["tie"]} and set(run_history["init_std"]) == {
        finished["init_std"]
    }


def test_diverged_history_ends_at_divergence(fake_sweep):
    res = load_results(fake_sweep)
    run = res.runs[res.runs["status"] == "diverged"].iloc[0]
    run_history = res.history[res.history["run_id"] == run["run_id"]]
    raw_steps = [
        json.loads(line)["step"]
        for line in (fake_sweep / run["run_id"] / "metrics.jsonl").read_text().splitlines()
    ]
    assert max(raw_steps) > run["diverged_at_step"]  # the file has a line past the divergence...
    assert run_history["step"].max() == run["diverged_at_step"]  # ...which the history leaves out
    assert (
        run_history["train/loss"].iloc[-1] != run_history["train/loss"].iloc[-1]
    )  # "nan" written as a string -> NaN


def test_running_run_with_half_written_line(fake_sweep, tmp_path):
    sweep = shutil.copytree(fake_sweep, tmp_path / "sw")
    run_dir = next(
        p for p in sweep.iterdir() if p.name.startswith("tie=false_init=0.036_model=nano_seed=1")
    )
    with open(run_dir / "metrics.jsonl", "a") as f:
        f.write('{"step": 99, "tokens": 1, "train/lo')  # the trainer is mid-write
    with FileLock(str(run_dir / ".lock")):  # as the trainer holds it
        res = load_results(sweep)
    assert any("unparsable last line" in n for n in res.notes)
    run_history = res.history[res.history["run_id"] == run_dir.name]
    assert run_history["step"].max() < 99 and len(run_history) > 0
    assert res.runs.set_index("run_id").loc[run_dir.name, "status"] == "running"


def test_resumed_run_later_lines_win(tmp_path):
    recs = [
        {"step": 0, "tokens": 0, "val/loss": 10.0},
        {"step": 2, "tokens": 8, "train/loss": 9.0},
        {"step": 2, "tokens": 8, "train/loss": 8.5, "val/loss": 8.7},
    ]
    h = history_from_records(recs)
    assert list(h["step"]) == [0, 2]
    assert (
        h.set_index("step").loc[2, "train/loss"] == 8.5
        and h.set_index("step").loc[2, "val/loss"] == 8.7
    )


def test_run_in_index_without_directory(tmp_path):
    sweep = write_sweep(tmp_path / "sw", init_stds=("0.02",), ties=(True,))
    index = json.loads((sweep / "index.json").read_text())
    index["ghost-123"] = {
        "name": "tie=false_init=0.02_model=nano_seed=0",
        "status": "failed",
        "path": "ghost-123",
    }
    (sweep / "index.json").write_text(json.dumps(index))
    res = load_results(sweep)
    ghost = res.runs.set_index("run_id").loc["ghost-123"]
    assert ghost["status"] == "failed" and ghost["name"] == "tie=false_init=0.02_model=nano_seed=0"
    assert any("ghost-123" in n and "does not exist" in n for n in res.notes)


def test_single_run_dir_and_results_root(tmp_path, fake_sweep):
    sweep = shutil.copytree(fake_sweep, tmp_path / "sw")
    one = next(p for p in sweep.iterdir() if p.is_dir())
    assert len(load_results(one).runs) == 1
    write_sweep(tmp_path / "other", init_stds=("0.02",), ties=(True,))
    res = load_results(tmp_path)  # a results dir holding two sweeps
    assert set(res.runs["sweep"]) == {"sw", "other"}
    assert any("2 sweeps" in n for n in res.notes)


def test_a_run_found_twice_keeps_its_best_record(tmp_path):
    """Two sweeps (or a sweep and one of its runs) reaching one run_id: finished beats diverged,
    running and failed whatever the order of the paths; within one status the newest record wins."""
    a = write_run(tmp_path / "a", status="finished")
    b = write_run(tmp_path / "b", status="failed")
    assert a.name == b.name
    for paths in (
        (tmp_path / "a", tmp_path / "b"),
        (tmp_path / "b", tmp_path / "a"),
        (tmp_path / "b", a),
    ):
        res = load_results(*paths)
        assert len(res.runs) == 1 and res.runs["status"].iloc[0] == "finished", paths
        assert res.runs["path"].iloc[0] == str(a)
        assert any("found twice" in n and str(b) in n for n in res.notes)
    for status in ("diverged", "running"):  # running, and no process holds it: interrupted
        write_run(tmp_path / status, status=status)
        shown = load_results(tmp_path / "b", tmp_path / status).runs["status"].iloc[0]
        assert shown == {"running": "interrupted"}.get(status, status)
    newer = write_run(tmp_path / "c", status="finished")
    summary = json.loads((newer / "summary.json").read_text())
    (newer / "summary.json").write_text(
        json.dumps({**summary, "updated_at": "2026-02-01T00:00:00Z"})
    )
    runs = load_results(tmp_path / "a", tmp_path / "c").runs
    assert runs["path"].iloc[0] == str(newer)


def test_missing_and_empty_directories_are_clear_errors(tmp_path):
    with pytest.raises(ResultsError, match=r"does not exist"):
        load_results(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ResultsError, match=r"no runs found in .*empty.*sweep directory"):
        load_results(tmp_path / "empty")
    (tmp_path / "started").mkdir()
    (tmp_path / "started" / "index.json").write_text("{}")
    with pytest.raises(ResultsError, match=r"started.*has the sweep started"):
        load_results(tmp_path / "started")
    with pytest.raises(ResultsError, match="no results directory given"):
        load_results()


def test_mixed_vocab_sizes_are_noted_and_refused_by_comparisons(tmp_path):
    write_sweep(tmp_path / "a", init_stds=("0.02",), vocab_size=512)
    write_sweep(tmp_path / "b", init_stds=("0.02",), vocab_size=1024, data_files="other.txt")
    res = load_results(tmp_path / "a", tmp_path / "b")
    assert any(
        "mixed sweeps" in n and "vocab_size" in n and "512" in n and "1024" in n for n in res.notes
    )
    with pytest.raises(ResultsError, match=r"vocab_size .*512.*1024"):
        require_single_data(res.runs, "figure X")
    one = res.select(res.runs["vocab_size"] == 512)
    require_single_data(one.runs)
    assert set(one.history["run_id"]) == set(one.runs["run_id"])
    data_id = one.runs["data_id"].iloc[0]
    assert set(load([tmp_path / "a", tmp_path / "b"], data_id=data_id).runs["vocab_size"]) == {512}
    with pytest.raises(ResultsError, match="matches no run; data_ids present"):
        load([tmp_path / "a"], data_id="zzz")


def test_variant_separates_runs_that_differ_in_config(tmp_path):
    write_sweep(tmp_path / "t5", init_stds=("1.0",), t5_rescale=False)
    write_sweep(tmp_path / "t5", init_stds=("1.0",), t5_rescale=True)
    runs = load_results(tmp_path / "t5").runs
    assert set(runs["variant"]) == {"", "head.t5_rescale=True"}  # the plain runs stay plain
    threads = variants([{"trainer": {"threads": 1}}, {"trainer": {"threads": 2}}])
    assert threads == ["", ""]  # a floor replicate at another thread count is the same arm
    agg = aggregate_runs(runs)
    assert len(agg) == 4  # tie x variant, never averaged together
    assert variants([{"model": {"lr": 1}}, {"model": {}}]) == [
        "",
        "",
    ]  # a missing key is no difference


def test_runs_measured_against_different_mfu_peaks_are_noted(fake_sweep):
    runs = load_results(fake_sweep).runs
    assert not any("MFU peaks" in n for n in check_consistency(runs.assign(peak_tflops=1.5)))
    notes = check_consistency(runs.assign(peak_tflops=np.arange(len(runs)) + 1.0))
    assert any(
        f"{len(runs)} different MFU peaks" in n and "trainer.peak_tflops" in n for n in notes
    )
    cpu = check_consistency(runs.assign(peak_tflops=np.arange(len(runs)) + 1.0), gpu=False)
    assert not any("MFU peaks" in n for n in cpu)  # a CPU's peak means nothing: no note


def test_wandb_without_credentials_fails_clearly(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc, no wandb settings
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    monkeypatch.setenv("WANDB_DISABLE_GIT", "true")  # W&B would run git: no subprocess here
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb"))
    monkeypatch.setenv(
        "WANDB_BASE_URL", "http://127.0.0.1:9"
    )  # nothing listens: never the internet
    with pytest.raises(
        WandbUnavailableError,
        match=r"cannot read W&B project 'someone/proj'.*load_results",
    ):
        load_wandb("someone/proj")


def test_a_bundle_is_read_once_while_its_files_stay_and_again_once_one_changes(
    tmp_path, fake_sweep
):
    """A bundle's runs are kept in memory after the first read (notebooks and --paper read one
    bundle for several sections); the same tables come back, and a run whose file changed is
    read anew, the manifest's note with it."""
    from tiedvsuntied.bundle import write_bundle

    write_bundle([fake_sweep], tmp_path / "bundle", arrays=False)
    first, again = (load_results(tmp_path / "bundle") for _ in range(2))
    assert again.runs.equals(first.runs) and again.history.equals(first.history)
    assert again.notes == first.notes
    run = first.runs[first.runs["status"].eq("finished")].iloc[0]
    summary = tmp_path / "bundle" / run["run_id"] / "summary.json"
    changed = json.loads(summary.read_text()) | {"final_val_loss": 123.0}
    summary.write_text(json.dumps(changed))
    after = load_results(tmp_path / "bundle")
    assert after.runs.set_index("run_id").loc[run["run_id"], "final_val_loss"] == 123.0
    assert any("differ from the bundle's manifest" in note for note in after.notes)
