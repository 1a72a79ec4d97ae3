"""The end-to-end tests of tests/unit/test_bench.py: they start processes or train runs to the
end."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import QUICK, REPO, compose, stop_after_checkpoint

from tiedvsuntied.bench import VARIANTS
from tiedvsuntied.train.clock import PARTS
from tiedvsuntied.train.config import ConfigError
from tiedvsuntied.train.trainer import train


def _quick_run(results, *extra):
    over = [*QUICK, f"results_dir={results}", "trainer.ckpt_interval=2", *extra]
    return train(compose(*over), overrides=over)


def _interrupted_at_step_2(tmp_path, monkeypatch) -> Path:
    with monkeypatch.context() as patch:
        stop_after_checkpoint(patch, 2)
        with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
            _quick_run(tmp_path)
    [last] = tmp_path.glob("*/*/checkpoints/last.pt")
    return last


def _bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tiedvsuntied.bench", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


NANOGPT = os.environ.get("NANOGPT_DIR")  # a karpathy/nanoGPT checkout (never vendored here)


@pytest.mark.slow
def test_a_row_per_size_head_and_variant_with_speed_memory_and_mfu_of_this_run():
    sizes, batch, block = ["micro"], 2, 32  # each row a process: one size keeps it short
    out = _bench(
        *("--sizes", ",".join(sizes), "--tie", "true,false", "--no-compile"),
        *("--variants", "baseline,bf16,fp32-compiled"),  # --no-compile drops the compiled one
        *("--steps", "2", "--warmup", "1", "--batch-size", str(batch), "--block-size", str(block)),
        "--json",
    )
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout)  # stdout is the JSON alone; progress went to stderr
    rows = {(r["size"], r["tie"], r["variant"]): r for r in result["rows"]}
    eager = [v.variant for v in VARIANTS if v.key in ("baseline", "bf16")]
    assert sorted(rows) == sorted(itertools.product(sizes, [True, False], eager))
    for r in rows.values():
        assert r["tokens_per_s"] > 0 and r["peak_mem_mib"] > 0 and r["timed_steps"] >= 1
        # a FLOP count or a peak off by a factor shows here; the margin above 1 is a shared
        # machine's load changing between the peak's measurement and a configuration's
        assert 0 < r["mfu"] <= 1.5, r
        # the two speeds a user reads agree: tokens per step over the step time
        assert r["tokens_per_s"] * r["step_ms"] / 1000 == pytest.approx(batch * block)
    untied, tied = rows["micro", False, eager[0]], rows["micro", True, eager[0]]
    assert untied["params"] - tied["params"] == 50257 * 128  # the untied head, at GPT-2's V
    # MFU is against the peak this very run measured and printed first
    peaks = result["peak_tflops"]
    assert out.stderr.startswith(
        f"matmul peak measured on this machine: fp32 {peaks['fp32']:.3f} TFLOP/s, "
        f"bf16 {peaks['bf16']:.3f} TFLOP/s"
    )


@pytest.mark.slow
@pytest.mark.skipif(not NANOGPT, reason="set NANOGPT_DIR to a karpathy/nanoGPT checkout")
def test_nanogpt_is_timed_beside_ours_at_the_same_shape_tied_and_untied():
    batch, block = 2, 32
    out = _bench(
        *("--sizes", "nano", "--tie", "true,false", "--nanogpt", NANOGPT, "--no-compile"),
        *("--steps", "2", "--warmup", "1", "--batch-size", str(batch), "--block-size", str(block)),
        "--json",
    )
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [r for r in json.loads(out.stdout)["rows"] if r["impl"] == "nanogpt"]
    tied, untied = sorted(rows, key=lambda r: not r["tie"])
    assert (tied["tie"], untied["tie"]) == (True, False)
    for r in rows:
        assert (r["block_size"], r["vocab_size"], r["batch_size"]) == (block, 50304, batch)
        assert r["tokens_per_s"] > 0 and 0 < r["mfu"] <= 1.5, r  # the margin: as above
    assert untied["params"] - tied["params"] == 50304 * 64  # nanoGPT's head, untied: a copy


def test_a_run_records_where_its_wall_time_went(tmp_path):
    s = _quick_run(tmp_path)
    assert s.status.value == "finished" and list(s.time_s) == list(PARTS)
    # every part happened (a checkpoint at step 2, model.pt at the end; probes at each eval)
    assert all(seconds > 0 for seconds in s.time_s.values()), s.time_s
    assert sum(s.time_s.values()) <= s.wall_time_s * (1 + 1e-9)
    assert s.tokens_per_s > 0 and s.tokens_per_s == s.tokens / s.time_s["step"]
    # CPU seconds by the same parts (all the process's threads)
    assert list(s.cpu_s) == list(PARTS) and s.cpu_s["step"] > 0 and s.cpu_s["eval"] > 0
    assert s.tokens_per_cpu_s == s.tokens / s.cpu_s["step"]


def test_a_resumed_run_adds_its_time_to_the_checkpoints(tmp_path, monkeypatch):
    last = _interrupted_at_step_2(tmp_path, monkeypatch)
    state = torch.load(last, weights_only=True)["train_state"]
    before, cpu_before = state["time_s"], state["cpu_s"]
    s = _quick_run(tmp_path)
    assert s.status.value == "finished" and s.resumed_from_step == 2
    # steps 3 and 4 of this process on top of steps 1 and 2 of the first
    assert s.time_s["step"] > before["step"] > 0 and s.step == 4
    assert s.tokens_per_s == s.tokens / s.time_s["step"]
    assert s.cpu_s["step"] > cpu_before["step"] > 0
    assert sum(s.time_s.values()) <= s.wall_time_s * (1 + 1e-9)
    # both processes' code: this checkout's commit, from step 0 and from step 2
    assert [start["step"] for start in s.starts] == [0, 2]
    assert {start["git_commit"] for start in s.starts} == {s.git_commit} and len(s.git_commit) == 40
    # and the processor each ran on: this CPU, with the instruction set torch's kernels chose
    assert [start["hardware"] for start in s.starts] == [s.hardware] * 2
    assert f"torch {torch.backends.cpu.get_cpu_capability()}; bf16 units: " in s.hardware


def bf16_units(patch, present: bool) -> None:
    """This CPU as one with AMX or AVX512-BF16 (``present``) or an AVX2-only one."""
    patch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: present)
    patch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: present)


def test_a_run_resumes_only_in_the_precision_it_trained_in(tmp_path, monkeypatch):
    """trainer.precision=auto resolves per processor and the run's id hashes what it resolved
    to: interrupted where it trained fp32 (no bf16 units), the same command where it resolves to
    bf16 is another run, in its own directory. A run stored under its id from before that rule
    (its bf16 twin's) stops there with one line before anything is written, and resumes where it
    resolves to fp32 again, in its own directory."""
    with monkeypatch.context() as patch:
        bf16_units(patch, False)
        last = _interrupted_at_step_2(tmp_path, patch)
    fp32_dir = last.parent.parent
    here = json.loads((fp32_dir / "summary.json").read_text())["starts"]
    assert [start["precision"] for start in here] == ["fp32"]
    with monkeypatch.context() as patch:
        bf16_units(patch, True)
        twin = _quick_run(tmp_path)
    assert twin.run_id != fp32_dir.name and twin.precision == "bf16" and not twin.resumed_from_step
    # before the rule the fp32 run had its twin's id: stored so, it is found where auto is bf16
    shutil.rmtree(tmp_path / twin.sweep / twin.run_id)
    fp32_dir.rename(tmp_path / twin.sweep / twin.run_id)
    with monkeypatch.context() as patch:
        bf16_units(patch, True)
        with pytest.raises(ConfigError) as err:
            _quick_run(tmp_path)
    message = str(err.value)
    assert "trainer.precision=auto" in message and "\n" not in message
    assert "trained in fp32 and resolves to bf16 here" in message
    with monkeypatch.context() as patch:
        bf16_units(patch, False)
        s = _quick_run(tmp_path)
    assert s.status.value == "finished" and s.resumed_from_step == 2 and s.run_id == twin.run_id
    assert [start["precision"] for start in s.starts] == ["fp32"] * 2


def test_a_checkpoint_written_before_time_s_existed_still_resumes(tmp_path, monkeypatch):
    last = _interrupted_at_step_2(tmp_path, monkeypatch)
    ckpt = torch.load(last, weights_only=True)
    for key in ("time_s", "cpu_s", "starts"):  # as the code before these fields wrote it
        del ckpt["train_state"][key]
    torch.save(ckpt, last)
    s = _quick_run(tmp_path)
    assert s.status.value == "finished" and s.resumed_from_step == 2
    assert all(s.time_s[part] > 0 for part in PARTS) and s.tokens_per_s > 0
    # the first process's CPU seconds are unknown: no per-CPU-second throughput over a part
    assert s.cpu_s is None and s.tokens_per_cpu_s is None
    # nor which code ran steps 1-2: recorded as such, not as this process's commit
    assert [(st["step"], st["git_commit"]) for st in s.starts] == [(0, None), (2, s.git_commit)]
