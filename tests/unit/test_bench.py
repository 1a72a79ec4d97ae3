"""The benchmark a user reruns: real training steps in their own processes, a row per size,
head and variant with MFU against the peak measured in the same run; a command line it cannot
run is one line and exit code 2. And each run's own account of its wall time (summary.json
``time_s``, ``tokens_per_s``), over a resume too."""

from __future__ import annotations

import pytest
import torch

from tiedvsuntied.bench import NANOGPT as REFERENCE
from tiedvsuntied.bench import SHAPES, VARIANTS, add_ratios, main, medians, model_config

NO_CUDA = "CUDA is not available here: use --device=cpu or auto"


@pytest.mark.parametrize(
    "args, said",
    [
        (["--sizes", "huge"], "error: --sizes: unknown size 'huge'; valid: body256x4, body256x8,"),
        (["--tie", "maybe"], "error: --tie=maybe is invalid: use true, false or true,false"),
        (["--steps", "0"], "error: --steps=0: it must be >= 1"),
        (["--rounds", "0"], "error: --rounds=0: it must be >= 1"),
        (["--sizes", "micro:q=3"], "error: --sizes: 'micro:q=3' changes 'q=3'; valid: v=N (vocab"),
        (["--sizes", "micro:v=big"], "error: --sizes: 'micro:v=big' changes 'v=big'; valid: v=N"),
        (["--nanogpt", "/nowhere"], "error: --nanogpt=/nowhere: no model.py there; give a"),
        (["--peak-tflops", "0"], "error: --peak-tflops=0.0: it must be > 0"),
        (["--variants", "fp64"], "error: --variants: unknown fp64; valid: baseline, fp32, bf16,"),
        (["--variants", "nanogpt"], "error: --variants=nanogpt needs --nanogpt PATH"),
        *(
            []
            if torch.cuda.is_available()
            else [(["--device", "cuda"], f"error: --device=cuda but {NO_CUDA}")]
        ),
    ],
)
def test_a_command_line_the_benchmark_cannot_run_is_one_line_and_exit_2(args, said, capsys):
    assert main(args) == 2
    out, err = capsys.readouterr()
    [line] = err.strip().splitlines()
    assert out == "" and line.startswith(said)


def test_a_size_changes_its_presets_shape_and_the_sign_flip_set_is_the_third_editions():
    micro = model_config("micro")
    wide = model_config("micro:d=256:l=8:v=8192")
    assert (wide.n_embd, wide.n_layer, wide.vocab_size) == (256, 8, 8192)
    assert (wide.n_head, wide.block_size) == (micro.n_head, micro.block_size)  # kept
    shapes = [model_config(size) for size in SHAPES["sign_flip"]]
    body = {(c.n_embd, c.n_layer, c.n_head, c.block_size) for c in shapes if c.vocab_size < 8192}
    assert body == {(micro.n_embd, micro.n_layer, micro.n_head, micro.block_size)}
    assert sorted(c.vocab_size for c in shapes if c.n_embd == micro.n_embd) == [
        2**k for k in range(10, 15)
    ]  # 1k .. 16k
    assert {(c.n_embd, c.n_layer) for c in shapes if c.n_embd != micro.n_embd} == {
        (256, 4),
        (256, 8),
    }


def test_the_ratio_to_nanogpt_is_taken_within_each_round_then_its_median_shown():
    ours, theirs = VARIANTS[2], REFERENCE
    speeds = {0: (100.0, 50.0), 1: (300.0, 100.0)}  # a slow round, then a fast one
    rows = [
        {"size": "micro", "tie": True, "round": r, "flops_per_token": 1.0, "tokens_per_s": speed}
        | {"variant": v.variant, "impl": v.impl, "precision": v.precision}
        for r, pair in speeds.items()
        for v, speed in zip((ours, theirs), pair, strict=True)
    ]
    table = medians(add_ratios(rows, {"fp32": 1.0, "bf16": 1.0}))
    row = table.set_index("variant").loc[ours.variant]
    within = [a / b for a, b in speeds.values()]  # 2.0 and 3.0
    assert row.vs_nanogpt == pytest.approx(sum(within) / 2)  # not 200 / 75: across rounds
    assert row.tokens_per_s == pytest.approx(sum(a for a, _ in speeds.values()) / 2)
    assert len(table) == 2


def test_profile_prints_the_steps_top_ops_for_each_configuration(capsys):
    args = ["--sizes", "nano:v=512", "--block-size", "32", "--batch-size", "2", "--tie", "true"]
    assert (
        main([*args, "--variants", "bf16,fp32", "--profile", "--steps", "1", "--warmup", "1"]) == 0
    )
    out = capsys.readouterr().out
    chosen = [v.variant for v in VARIANTS if v.key in ("bf16", "fp32")]
    assert [line for line in out.splitlines() if line.startswith("nano:")] == [
        f"nano:v=512 tie=true {variant}" for variant in chosen
    ]
    assert out.count("Self CPU %") == 2 and "aten::mm" in out  # a matmul among the top ops
