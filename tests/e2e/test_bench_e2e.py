"""The end-to-end tests of tests/unit/test_bench.py: they start processes or train runs to the
end."""

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
