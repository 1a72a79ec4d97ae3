"""``python -m tiedvsuntied.bench``: training throughput, peak memory and MFU, as ratios.

    python -m tiedvsuntied.bench --sizes micro,mini --steps 10 [--device cuda] [--json]

Times full training steps (forward, backward, clip, AdamW) of the trainer's own pieces, tied
and untied, fp32 and bf16, eager and compiled, against a baseline (eager fp32, full-logit
cross-entropy), and measures the machine's matmul peak in the same run: MFU and speed-ups are
ratios within one run. Each configuration runs in its own process (isolated peak memory and
compilation); tokens are random ids, since the data does not change a step's cost. Steps are
timed by ``torch.utils.benchmark.Timer.blocked_autorange`` (the median step of its blocks).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

CONF_MODEL = Path(__file__).resolve().parents[1] / "conf" / "model"
VOCAB_SIZE = 50257  # GPT-2's: the head's cost at the study's vocabulary


class BenchError(ValueError):
    """A command line the benchmark cannot run: one line naming the option, exit code 2."""


@dataclasses.dataclass
class Variant:
    name: str
    precision: str  # fp32 | bf16
    compile: bool
    loss_chunk: int  # 0: full logits


VARIANTS = [
    Variant("baseline: fp32 eager, full-logit CE", "fp32", False, 0),
    Variant("fp32 eager", "fp32", False, 1024),
    Variant("bf16 eager (default, short CPU runs)", "bf16", False, 1024),
    Variant("fp32 compiled", "fp32", True, 1024),
    Variant("bf16 compiled (default, CUDA / >=500 steps)", "bf16", True, 1024),
]


@dataclasses.dataclass
class Settings:
    """What every configuration of one benchmark run shares (its command line)."""

    steps: int  # about this many timed steps (blocked_autorange runs whole blocks)
    warmup: int
    batch_size: int
    block_size: int  # 0: the size's own
    device: str


def model_config(size: str, block_size: int = 0):
    """conf/model/<size>.yaml as a ModelConfig at GPT-2's vocabulary; an unknown size names
    the valid ones."""
    from omegaconf import OmegaConf

    from tiedvsuntied.model import ModelConfig

    path = CONF_MODEL / f"{size}.yaml"
    if not path.is_file():
        valid = ", ".join(sorted(p.stem for p in CONF_MODEL.glob("*.yaml")))
        raise BenchError(f"--sizes: unknown size {size!r}; valid: {valid}")
    cfg = ModelConfig(**OmegaConf.to_container(OmegaConf.load(path)))
    return dataclasses.replace(cfg, vocab_size=VOCAB_SIZE, block_size=block_size or cfg.block_size)


def training_step(model, variant: Variant, batch_size: int, device):
    """One full training step of ``model`` on random tokens (the next batch at each call)."""
    import numpy as np
    import torch

    from tiedvsuntied.data.batches import BatchSampler
    from tiedvsuntied.train import OptimConfig, build_optimizer
    from tiedvsuntied.train.hardware import Precision, autocast

    optimizer = build_optimizer(model, OptimConfig())
    forward = torch.compile(model) if variant.compile else model
    tokens = np.random.default_rng(0).integers(0, VOCAB_SIZE, size=200_000).astype(np.uint16)
    sampler = BatchSampler(tokens, model.config.block_size, batch_size, seed=0)
    batches = itertools.count()

    def step() -> torch.Tensor:
        x, y = (t.to(device) for t in sampler.get(next(batches)))
        with autocast(Precision(variant.precision), device):
            _, loss = forward(x, y, loss_chunk=variant.loss_chunk, return_logits=False)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    return step


def measure_one(size: str, tie: bool, variant: Variant, settings: Settings) -> dict:
    """Tokens/s, step time and peak memory of one configuration, in this process."""
    import torch
    from torch.utils import benchmark

    from tiedvsuntied.model import GPT, count_parameters, flops_per_token
    from tiedvsuntied.train.hardware import resolve_device

    device = resolve_device(settings.device)
    config = model_config(size, settings.block_size)
    torch.manual_seed(0)
    model = GPT(config, tie=tie, seed=0).to(device)
    step = training_step(model, variant, settings.batch_size, device)
    t0 = time.perf_counter()
    for _ in range(settings.warmup):  # compilation happens here
        last = time.perf_counter()
        step().item()
    warmup_s, one_step_s = time.perf_counter() - t0, time.perf_counter() - last
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    timer = benchmark.Timer("step()", globals={"step": step}, num_threads=torch.get_num_threads())
    timed = timer.blocked_autorange(min_run_time=settings.steps * one_step_s)
    tokens_per_step = settings.batch_size * config.block_size
    peak_mem = (
        torch.cuda.max_memory_allocated()
        if device.type == "cuda"
        else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    )
    return {
        "size": size,
        "tie": tie,
        "variant": variant.name,
        "precision": variant.precision,
        "compile": variant.compile,
        "loss_chunk": variant.loss_chunk,
        "batch_size": settings.batch_size,
        "block_size": config.block_size,
        "params": count_parameters(model)["total"],
        "flops_per_token": flops_per_token(model),
        "tokens_per_s": tokens_per_step / timed.median,
        "step_ms": 1000 * timed.median,
        "timed_steps": timed.number_per_run * len(timed.raw_times),
        "warmup_s": warmup_s,
        "peak_mem_mib": peak_mem / 2**20,
        "device": str(device),
        "threads": torch.get_num_threads(),
    }


def matmul_peaks(device_name: str) -> dict:
    """This machine's dense matmul TFLOP/s per precision: the MFU denominators of this run."""
    import torch

    from tiedvsuntied.train.hardware import measure_matmul_tflops, resolve_device

    device = resolve_device(device_name)
    return {
        "fp32": measure_matmul_tflops(device, torch.float32, seconds=1.0),
        "bf16": measure_matmul_tflops(device, torch.bfloat16, seconds=1.0),
    }


def run_isolated(size: str, tie: bool, variant: Variant, settings: Settings) -> dict:
    """One configuration in a fresh process: isolated peak memory and compilation."""
    spec = json.dumps(
        {
            "size": size,
            "tie": tie,
            "variant": dataclasses.asdict(variant),
            "settings": dataclasses.asdict(settings),
        }
    )
    cmd = [sys.executable, "-m", "tiedvsuntied.bench", "--_one", spec]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=os.environ)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    if proc.returncode or line is None:
        error = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return {"size": size, "tie": tie, "variant": variant.name, "error": error}
    return json.loads(line.removeprefix("RESULT "))


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m tiedvsuntied.bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--sizes", default="micro,mini", help="comma-separated model sizes (conf/model/*.yaml)"
    )
    p.add_argument("--steps", type=int, default=10, help="timed steps per configuration (about)")
    p.add_argument(
        "--warmup", type=int, default=3, help="untimed steps first (compilation happens here)"
    )
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--block-size", type=int, default=0, help="0: the size's own block_size")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda")
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile variants")
    p.add_argument("--tie", default="true,false", help="which heads to time: true, false or both")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument("--_one", help=argparse.SUPPRESS)  # internal: run one configuration
    return p.parse_args(argv)


def check_args(args: argparse.Namespace) -> tuple[list[str], list[bool]]:
    """The sizes and heads to time; a value that cannot run raises BenchError naming it."""
    from tiedvsuntied.train.hardware import resolve_device

    sizes = [s.strip() for s in args.sizes.split(",") if s.strip()]
    if not sizes:
        raise BenchError("--sizes is empty: name one or more of conf/model/*.yaml")
    for size in sizes:
        model_config(size)
    heads = [t.strip().lower() for t in args.tie.split(",")]
    if not set(heads) <= {"true", "false"}:
        raise BenchError(f"--tie={args.tie} is invalid: use true, false or true,false")
    for key in ("steps", "warmup", "batch_size"):
        if getattr(args, key) < 1:
            raise BenchError(f"--{key.replace('_', '-')}={getattr(args, key)}: it must be >= 1")
    try:
        resolve_device(args.device)
    except ValueError as e:
        raise BenchError(str(e).replace("trainer.device", "--device")) from None
    return sizes, [head == "true" for head in heads]


def add_ratios(rows: list[dict], peaks: dict):
    """The table, with MFU against this run's peak and speed-ups against this run's baseline."""
    import pandas as pd

    table = pd.DataFrame(rows)
    if "tokens_per_s" in table:
        table["mfu"] = (
            table.flops_per_token * table.tokens_per_s / (table.precision.map(peaks) * 1e12)
        )
        by_model = table.set_index(["size", "tie"])
        baseline = by_model[by_model.variant == VARIANTS[0].name].tokens_per_s
        table["speedup_vs_baseline"] = table.tokens_per_s / by_model.index.map(baseline)
    return table


def main(argv=None) -> int:
    args = parse_args(argv)
    if args._one:
        spec = json.loads(args._one)
        variant, settings = Variant(**spec["variant"]), Settings(**spec["settings"])
        print("RESULT " + json.dumps(measure_one(spec["size"], spec["tie"], variant, settings)))
        return 0
    try:
        sizes, heads = check_args(args)
    except BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = sys.stderr if args.json else sys.stdout  # progress; stdout is the JSON's alone
    settings = Settings(args.steps, args.warmup, args.batch_size, args.block_size, args.device)
    peaks = matmul_peaks(args.device)
    print(
        f"matmul peak on this machine: fp32 {peaks['fp32']:.3f} TFLOP/s, "
        f"bf16 {peaks['bf16']:.3f} TFLOP/s",
        file=out,
        flush=True,
    )
    rows = []
    for size, tie in itertools.product(sizes, heads):
        for variant in (v for v in VARIANTS if not (args.no_compile and v.compile)):
            rows.append(row := run_isolated(size, tie, variant, settings))
            speed = row.get("error") or f"{row['tokens_per_s']:>10,.0f} tok/s"
            print(f"  {size} tie={str(tie).lower():5s} {variant.name:44s} {speed}", file=out)
    table = add_ratios(rows, peaks)
    if args.json:
        records = json.loads(table.to_json(orient="records"))
        result = {"peak_tflops": peaks, "steps": args.steps, "warmup": args.warmup, "rows": records}
        print(json.dumps(result, indent=2))
    else:
        print("\n" + format_table(table, peaks))
    return 1 if "error" in table and table["error"].notna().any() else 0


def format_table(table, peaks: dict) -> str:
    columns = {
        "size": "size",
        "head": "head",
        "variant": "variant",
        "tokens_per_s": "tokens/s",
        "speedup_vs_baseline": "x baseline",
        "mfu_pct": "MFU %",
        "peak_mem_mib": "peak mem (MiB)",
        "step_ms": "step (ms)",
    }
    shown = table.assign(
        head=table.tie.map({True: "tied", False: "untied"}),
        mfu_pct=100 * table.get("mfu", float("nan")),
    )
    markdown = (
        shown.reindex(columns=list(columns))
        .rename(columns=columns)
        .to_markdown(index=False, floatfmt=",.2f")
    )
    return (
        f"{markdown}\n\nMatmul peak measured in this run: fp32 {peaks['fp32']:.3f}, "
        f"bf16 {peaks['bf16']:.3f} TFLOP/s (MFU of each row is against the peak of its precision)."
    )


if __name__ == "__main__":
    sys.exit(main())
