"""The benchmark a user reruns: real training steps in their own processes, a row per size,
head and variant with MFU against the peak measured in the same run; a command line it cannot
run is one line and exit code 2."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys

import pytest
from conftest import REPO

from tiedvsuntied.bench import VARIANTS


def _bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tiedvsuntied.bench", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


@pytest.mark.slow
def test_a_row_per_size_head_and_variant_with_speed_memory_and_mfu_of_this_run():
    sizes, batch, block = ["nano", "micro"], 2, 32
    out = _bench(
        *("--sizes", ",".join(sizes), "--tie", "true,false", "--no-compile"),
        *("--steps", "2", "--warmup", "1", "--batch-size", str(batch), "--block-size", str(block)),
        "--json",
    )
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout)  # stdout is the JSON alone; progress went to stderr
    rows = {(r["size"], r["tie"], r["variant"]): r for r in result["rows"]}
    eager = [v.name for v in VARIANTS if not v.compile]
    assert sorted(rows) == sorted(itertools.product(sizes, [True, False], eager))
    for r in rows.values():
        assert r["tokens_per_s"] > 0 and r["peak_mem_mib"] > 0 and r["timed_steps"] >= 1
        assert 0 < r["mfu"] <= 1, r  # a FLOP count or a peak off by a factor shows here
        # the two speeds a user reads agree: tokens per step over the step time
        assert r["tokens_per_s"] * r["step_ms"] / 1000 == pytest.approx(batch * block)
    untied, tied = rows["micro", False, eager[0]], rows["micro", True, eager[0]]
    assert untied["params"] - tied["params"] == 50257 * 128  # the untied head, at GPT-2's V
    # MFU is against the peak this very run measured and printed first
    peaks = result["peak_tflops"]
    assert out.stderr.startswith(
        f"matmul peak on this machine: fp32 {peaks['fp32']:.3f} TFLOP/s, "
        f"bf16 {peaks['bf16']:.3f} TFLOP/s"
    )


@pytest.mark.parametrize(
    "args, said",
    [
        (["--sizes", "huge"], "error: --sizes: unknown size 'huge'; valid: large, medium, micro,"),
        (["--tie", "maybe"], "error: --tie=maybe is invalid: use true, false or true,false"),
        (["--steps", "0"], "error: --steps=0: it must be >= 1"),
    ],
)
def test_a_command_line_the_benchmark_cannot_run_is_one_line_and_exit_2(args, said):
    out = _bench(*args)
    assert out.returncode == 2 and out.stdout == ""
    [line] = out.stderr.strip().splitlines()
    assert line.startswith(said)


@pytest.mark.skipif(
    __import__("torch").cuda.is_available(), reason="checks the machine without CUDA"
)
def test_bench_on_a_device_that_is_not_there_says_so_in_one_line():
    out = _bench("--device", "cuda", "--sizes", "nano")
    assert out.returncode == 2
    assert out.stderr.strip() == (
        "error: --device=cuda but CUDA is not available here: use --device=cpu or auto"
    )
