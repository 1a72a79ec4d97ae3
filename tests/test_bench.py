"""The benchmark a user reruns: real training steps in their own processes, MFU against the
peak measured in the same run, ratios to the baseline; a device that is not there is one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import REPO


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
def test_bench_reports_speed_memory_and_mfu_as_ratios_within_one_run():
    out = _bench(
        "--sizes",
        "nano",
        "--steps",
        "2",
        "--warmup",
        "1",
        "--no-compile",
        "--tie",
        "true",
        "--json",
    )
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout)
    rows = {r["variant"]: r for r in result["rows"]}
    assert len(rows) == 3 and all(
        r["tokens_per_s"] > 0 and r["peak_mem_mib"] > 0 for r in rows.values()
    )
    assert rows["baseline: fp32 eager, full-logit CE"]["speedup_vs_baseline"] == 1.0
    assert result["peak_tflops"]["fp32"] > 0 and result["peak_tflops"]["bf16"] > 0
    for (
        r
    ) in rows.values():  # MFU = FLOPs/token x tokens/s over the same run's peak of that precision
        peak = result["peak_tflops"][r["precision"]] * 1e12
        assert r["mfu"] == pytest.approx(r["flops_per_token"] * r["tokens_per_s"] / peak)


@pytest.mark.skipif(
    __import__("torch").cuda.is_available(), reason="checks the machine without CUDA"
)
def test_bench_on_a_device_that_is_not_there_says_so_in_one_line():
    out = _bench("--device", "cuda", "--sizes", "nano")
    assert out.returncode == 1
    assert out.stderr.strip() == (
        "error: --device=cuda but CUDA is not available here: use --device=cpu or auto"
    )
