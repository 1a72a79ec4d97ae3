"""``python -m tiedvsuntied.bench``: training throughput, peak memory and MFU, as ratios.

    python -m tiedvsuntied.bench --sizes micro,mini --steps 10 [--device cuda] [--json]
    python -m tiedvsuntied.bench --device cuda --sizes small --nanogpt ../nanoGPT
    python -m tiedvsuntied.bench --shapes sign_flip --variants bf16-compiled,nanogpt \
        --nanogpt ../nanoGPT --rounds 2

Times full training steps (forward, backward, clip, AdamW) of the trainer's own pieces, tied
and untied, fp32 and bf16, eager and compiled, against a baseline (eager fp32, full-logit
cross-entropy), and measures the machine's matmul peak in the same run: MFU and speed-ups are
ratios within one run. Each configuration runs in its own process (isolated peak memory and
compilation); tokens are random ids, since the data does not change a step's cost. Steps are
timed by ``torch.utils.benchmark.Timer.blocked_autorange`` (the median step of its blocks).
On CUDA, MFU is also given against the GPU's datasheet dense bf16 peak (``--peak-tflops``, or
looked up from the name the GPU reports). ``--nanogpt PATH`` adds nanoGPT's model.py at the same
shape and batch, at its own best setting (tiedvsuntied/reference.py), tied and untied.

A size may change the preset's shape: ``micro:v=4096`` (the vocabulary; default GPT-2's),
``micro:d=256:l=8:v=8192`` (``d`` n_embd, ``l`` n_layer, ``h`` n_head); ``--shapes NAME`` times
a named set (SHAPES). ``--rounds N`` times every configuration N times, in alternating order:
the ratios to nanoGPT are taken within each round (neighbours in time) and their median shown.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import itertools
import json
import multiprocessing
import resource
import sys
import time
from concurrent.futures import ProcessPoolExecutor

from tiedvsuntied.presets import presets

VOCAB_SIZE = 50257  # GPT-2's: the head's cost at the study's vocabulary
# Datasheet dense bf16 TFLOP/s (no sparsity), by a substring of torch.cuda.get_device_name();
# the first match wins, so the PCIe and NVL H100s come before the SXM ("H100 80GB HBM3").
DATASHEET_BF16_TFLOPS = (
    ("H100 PCIe", 756.0),
    ("H100 NVL", 835.0),
    ("H100", 989.4),
    ("H200", 989.4),
    ("A100", 312.0),
)


@dataclasses.dataclass
class Variant:
    key: str  # its name for --variants
    variant: str  # its name in the table
    precision: str  # fp32 | bf16
    compile: bool
    loss_chunk: int  # 0: full logits
    impl: str = "ours"  # ours | nanogpt (--nanogpt: its model.py, tiedvsuntied/reference.py)


NANOGPT = Variant(
    "nanogpt", "nanoGPT model.py: bf16 compiled, fused AdamW", "bf16", True, 0, "nanogpt"
)
VARIANTS = [
    Variant("baseline", "baseline: fp32 eager, full-logit CE", "fp32", False, 0),
    Variant("fp32", "fp32 eager", "fp32", False, 1024),
    Variant("bf16", "bf16 eager (default, short CPU runs)", "bf16", False, 1024),
    Variant("fp32-compiled", "fp32 compiled", "fp32", True, 1024),
    Variant("bf16-compiled", "bf16 compiled (default, CUDA / >=500 steps)", "bf16", True, 1024),
    # where the head dominates (large V, small d): chunked cross-entropy against full logits
    Variant("bf16-compiled-full", "bf16 compiled, full-logit CE", "bf16", True, 0),
]
KEYS = [v.key for v in [*VARIANTS, NANOGPT]]  # what --variants takes
# --shapes: named sets of sizes. sign_flip: the third edition's ladder (the micro body at V from
# 1k to 16k, and wider bodies at V = 8192; experiments/sign_flip, conf/experiment/sign_flip*)
SHAPES = {
    "sign_flip": [
        *(f"micro:v={v}" for v in (1024, 2048, 4096, 8192, 16384)),
        "micro:d=256:l=4:v=8192",
        "micro:d=256:l=8:v=8192",
    ],
}
SHAPE_KEYS = {"v": "vocab_size", "d": "n_embd", "l": "n_layer", "h": "n_head"}


def model_config(size: str, block_size: int = 0):
    """conf/model/<name>.yaml as a ModelConfig, at GPT-2's vocabulary unless ``size`` changes
    it (``name:v=4096:d=256``): a ValueError naming the valid names or keys."""
    from tiedvsuntied.model.config import ModelConfig

    name, *changes = size.split(":")
    found = presets("model")
    if name not in found:
        raise ValueError(f"--sizes: unknown size {name!r}; valid: {', '.join(found)}")
    shape = {**found[name], "vocab_size": VOCAB_SIZE, "block_size": block_size}
    for change in changes:
        key, _, value = change.partition("=")
        if key not in SHAPE_KEYS or not value.isdigit():
            keys = ", ".join(f"{k}=N ({v})" for k, v in SHAPE_KEYS.items())
            raise ValueError(f"--sizes: {size!r} changes {change!r}; valid: {keys}")
        shape[SHAPE_KEYS[key]] = int(value)
    shape["block_size"] = shape["block_size"] or found[name]["block_size"]
    return ModelConfig(**shape)


def build(size: str, tie: bool, variant: Variant, args: argparse.Namespace, device):
    """One configuration's full training step (forward, backward, clip 1.0, AdamW) on the next
    batch at each call, the same for our model and nanoGPT's, and what its row reports."""
    import numpy as np
    import torch

    from tiedvsuntied import reference
    from tiedvsuntied.data.batches import BatchSampler
    from tiedvsuntied.model.accounting import flops_per_token
    from tiedvsuntied.model.gpt import GPT
    from tiedvsuntied.train.config import OptimConfig
    from tiedvsuntied.train.optim import build_optimizer

    config = model_config(size, args.block_size)
    torch.manual_seed(0)
    if variant.impl == "nanogpt":
        model, optimizer, batches = reference.nanogpt(
            args.nanogpt, config, tie, args.batch_size, device
        )
        config = dataclasses.replace(config, vocab_size=reference.padded(config.vocab_size))
        kwargs = {}
    else:
        model = GPT(config, tie=tie, seed=0).to(device)
        optimizer = build_optimizer(model, OptimConfig())
        tokens = np.random.default_rng(0).integers(0, config.vocab_size, size=200_000)
        tokens = tokens.astype(np.uint16 if config.vocab_size <= 2**16 else np.uint32)
        sampler = BatchSampler(tokens, config.block_size, args.batch_size, seed=0)
        batches = map(sampler.get, itertools.count())  # the trainer's sampler, in the step
        kwargs = {"loss_chunk": variant.loss_chunk, "return_logits": False}
    forward = torch.compile(model) if variant.compile else model

    def step() -> torch.Tensor:
        x, y = (t.to(device) for t in next(batches))
        with torch.autocast(device.type, torch.bfloat16, enabled=variant.precision == "bf16"):
            _, loss = forward(x, y, **kwargs)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    params = sum(p.numel() for p in model.parameters())  # a shared (tied) matrix counts once
    return step, config, params, flops_per_token(config)  # one formula for ours and nanoGPT's


def measure_one(size: str, tie: bool, variant: Variant, args: argparse.Namespace) -> dict:
    """Tokens/s, step time and peak memory of one configuration, in this process."""
    import torch
    from torch.utils import benchmark

    from tiedvsuntied.train.hardware import enable_tf32, resolve_device

    device = resolve_device(args.device)
    enable_tf32(device)
    with contextlib.redirect_stdout(sys.stderr):  # nanoGPT prints; stdout is the JSON's
        step, config, params, flops = build(size, tie, variant, args, device)
    t0 = time.perf_counter()
    for _ in range(args.warmup):  # compilation happens here
        last = time.perf_counter()
        step().item()
    warmup_s, one_step_s = time.perf_counter() - t0, time.perf_counter() - last
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    timer = benchmark.Timer(
        "step()", globals={"step": step}, num_threads=torch.get_num_threads(), timer=clock
    )
    timed = timer.blocked_autorange(min_run_time=args.steps * one_step_s)
    peak_mem = (
        torch.cuda.max_memory_allocated()
        if device.type == "cuda"
        else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    )
    return {
        "size": size,
        "tie": tie,
        **dataclasses.asdict(variant),
        "batch_size": args.batch_size,
        "block_size": config.block_size,
        "vocab_size": config.vocab_size,
        "params": params,
        "flops_per_token": flops,
        "tokens_per_s": args.batch_size * config.block_size / timed.median,
        "step_ms": 1000 * timed.median,
        "timed_steps": timed.number_per_run * len(timed.raw_times),
        "warmup_s": warmup_s,
        "peak_mem_mib": peak_mem / 2**20,
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "threads": torch.get_num_threads(),
    }


def profile(size: str, tie: bool, variant: Variant, args: argparse.Namespace) -> str:
    """torch.profiler's table of the ops by self CPU time over ``--steps`` steps, after the
    warm-up, in this process (shares only: the profiler times by the wall clock)."""
    import torch
    from torch.profiler import ProfilerActivity

    from tiedvsuntied.train.hardware import resolve_device

    device = resolve_device(args.device)
    with contextlib.redirect_stdout(sys.stderr):
        step = build(size, tie, variant, args, device)[0]
    for _ in range(args.warmup):
        step().item()
    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if device.type == "cuda" else [])]
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(args.steps):
            step().item()
    return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15)


def run_isolated(size: str, tie: bool, variant: Variant, args: argparse.Namespace) -> dict:
    """One configuration in a fresh process: isolated peak memory and compilation."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        try:
            return pool.submit(measure_one, size, tie, variant, args).result()
        except Exception as e:  # its error, or its process died (out of memory)
            error = f"{type(e).__name__}: {e}".splitlines()[0]
            return {"size": size, "tie": tie, "variant": variant.variant, "error": error}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m tiedvsuntied.bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--sizes", default="micro,mini", help="comma-separated, of conf/model/*.yaml (:v=N ...)"
    )
    p.add_argument("--shapes", choices=sorted(SHAPES), help="a named set of sizes (not --sizes)")
    p.add_argument("--rounds", type=int, default=1, help="times each configuration, alternating")
    p.add_argument(
        "--clock",
        choices=["wall", "cpu"],
        default="wall",
        help="time steps by the wall clock, or by this process's CPU time (tokens per CPU-second: "
        "steady on a machine other processes load; on CUDA it misses the GPU)",
    )
    p.add_argument("--steps", type=int, default=10, help="timed steps per configuration (about)")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first (they compile)")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--block-size", type=int, default=0, help="0: the size's own block_size")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda")
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile variants")
    p.add_argument("--tie", default="true,false", help="which heads to time: true, false or both")
    p.add_argument(
        "--variants", default="", help=f"comma-separated, of {', '.join(KEYS)} (default: all)"
    )
    p.add_argument("--nanogpt", metavar="PATH", help="also time this nanoGPT checkout's model.py")
    p.add_argument("--peak-tflops", type=float, help="dense bf16 TFLOP/s for MFU (default: by GPU)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument(
        "--profile",
        action="store_true",
        help="instead: torch.profiler's top ops over --steps steps of each configuration",
    )
    return p.parse_args(argv)


def check_args(args: argparse.Namespace) -> tuple[list[str], list[bool], list[Variant], object]:
    """The sizes, heads, variants and device; a value that cannot run raises ValueError."""
    from tiedvsuntied.reference import load_nanogpt
    from tiedvsuntied.train.hardware import resolve_device

    sizes = SHAPES[args.shapes] if args.shapes else [s.strip() for s in args.sizes.split(",")]
    sizes = [s for s in sizes if s]
    if not sizes:
        raise ValueError("--sizes is empty: name one or more of conf/model/*.yaml")
    for size in sizes:
        model_config(size)
    heads = [t.strip().lower() for t in args.tie.split(",")]
    if not set(heads) <= {"true", "false"}:
        raise ValueError(f"--tie={args.tie} is invalid: use true, false or true,false")
    for key in ("steps", "warmup", "batch_size", "rounds"):
        if getattr(args, key) < 1:
            raise ValueError(f"--{key.replace('_', '-')}={getattr(args, key)}: it must be >= 1")
    try:
        device = resolve_device(args.device)
        if args.nanogpt:
            load_nanogpt(args.nanogpt)
    except ValueError as e:
        raise ValueError(str(e).replace("trainer.device", "--device")) from None
    if args.peak_tflops is not None and args.peak_tflops <= 0:
        raise ValueError(f"--peak-tflops={args.peak_tflops}: it must be > 0")
    return sizes, [head == "true" for head in heads], variants(args), device


def datasheet_peak(device, given: float | None) -> tuple[float | None, str]:
    """The datasheet dense bf16 TFLOP/s for MFU and where it came from (None on a CPU)."""
    import torch

    if given is not None:
        return given, "--peak-tflops"
    if device.type != "cuda":
        return None, "no datasheet peak for a CPU"
    name = torch.cuda.get_device_name(device)
    if tflops := next((tflops for key, tflops in DATASHEET_BF16_TFLOPS if key in name), None):
        return tflops, f"the datasheet dense bf16 peak of {name}"
    return None, f"no datasheet peak known for {name}: give --peak-tflops"


def add_ratios(rows: list[dict], peaks: dict, datasheet: float | None = None):
    """The table, with MFU against this run's measured peak (and the datasheet's, for bf16) and
    speed-ups against this run's baseline."""
    import pandas as pd

    table = pd.DataFrame(rows)
    if "tokens_per_s" in table:
        achieved = table.flops_per_token * table.tokens_per_s
        table["mfu"] = achieved / (table.precision.map(peaks) * 1e12)
        bf16 = table.precision == "bf16"
        table["mfu_datasheet"] = (achieved / (datasheet * 1e12)).where(bf16) if datasheet else None
        by_model = table.set_index(["size", "tie", "round"])  # ratios within a round
        baseline = by_model[by_model.variant == VARIANTS[0].variant].tokens_per_s
        table["speedup_vs_baseline"] = table.tokens_per_s / by_model.index.map(baseline)
        nanogpt = by_model[by_model.impl == "nanogpt"].tokens_per_s
        table["vs_nanogpt"] = table.tokens_per_s / by_model.index.map(nanogpt)
    return table


def variants(args: argparse.Namespace) -> list[Variant]:
    """The configurations timed per size and head: ours, then nanoGPT's with --nanogpt; a
    --variants naming an unknown one, or nanogpt without --nanogpt, raises ValueError."""
    chosen = {k.strip() for k in args.variants.split(",") if k.strip()}
    if unknown := sorted(chosen - set(KEYS)):
        raise ValueError(f"--variants: unknown {', '.join(unknown)}; valid: {', '.join(KEYS)}")
    if NANOGPT.key in chosen and not args.nanogpt:
        raise ValueError("--variants=nanogpt needs --nanogpt PATH (a karpathy/nanoGPT checkout)")
    every = [v for v in VARIANTS if not (args.no_compile and v.compile)]
    if args.nanogpt:
        eager = {"variant": NANOGPT.variant.replace("compiled", "eager"), "compile": False}
        every.append(dataclasses.replace(NANOGPT, **(eager if args.no_compile else {})))
    return [v for v in every if not chosen or v.key in chosen]


def main(argv=None) -> int:
    import torch

    from tiedvsuntied.train.hardware import enable_tf32, measure_matmul_tflops

    args = parse_args(argv)
    try:
        sizes, heads, timed, device = check_args(args)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.profile:
        for size, tie, variant in itertools.product(sizes, heads, timed):
            table = profile(size, tie, variant, args)
            print(f"{size} tie={str(tie).lower()} {variant.variant}\n{table}")
        return 0
    out = sys.stderr if args.json else sys.stdout  # progress; stdout is the JSON's alone
    enable_tf32(device)  # the fp32 rows run with TF32 (measure_one): so does their peak
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16}
    clock = time.process_time if args.clock == "cpu" else time.perf_counter  # the steps' clock
    peaks = {k: measure_matmul_tflops(device, dt, 1.0, clock) for k, dt in dtypes.items()}
    datasheet, source = datasheet_peak(device, args.peak_tflops)
    peak = f"fp32 {peaks['fp32']:.3f} TFLOP/s, bf16 {peaks['bf16']:.3f} TFLOP/s"
    sheet = f": {datasheet:.1f} TFLOP/s" if datasheet else ""
    print(f"matmul peak measured on this machine: {peak}; {source}{sheet}", file=out, flush=True)
    rows = []
    for r, (size, tie) in itertools.product(range(args.rounds), itertools.product(sizes, heads)):
        for variant in timed[:: -1 if r % 2 else 1]:  # alternating: neither always goes first
            rows.append(row := {**run_isolated(size, tie, variant, args), "round": r})
            speed = row.get("error") or f"{row['tokens_per_s']:>10,.0f} tok/s"
            print(f"  {r} {size} tie={str(tie).lower():5s} {variant.variant:44s} {speed}", file=out)
    table = add_ratios(rows, peaks, datasheet)
    if args.json:
        result = {
            "peak_tflops": peaks,
            "datasheet_bf16_tflops": datasheet,
            "datasheet_source": source,
            "steps": args.steps,
            "clock": args.clock,
            "warmup": args.warmup,
            "rounds": args.rounds,
            "rows": json.loads(table.to_json(orient="records")),
        }
        print(json.dumps(result, indent=2))
    else:
        print("\n" + format_table(medians(table), peaks, datasheet))
    return 1 if "error" in table and table["error"].notna().any() else 0


def medians(table):
    """One row per size, head and variant: the median over rounds of each number (of a ratio,
    the median of its rounds' ratios); a configuration that failed in a round keeps its error."""
    if "tokens_per_s" not in table or table["round"].nunique() == 1:
        return table
    keys = ["size", "tie", "variant"]
    numbers = table.select_dtypes("number").columns.drop("round")
    out = table.groupby(keys, sort=False)[list(numbers)].median().reset_index()
    return out.merge(table.drop_duplicates(keys).drop(columns=list(numbers)), on=keys)


def format_table(table, peaks: dict, datasheet: float | None = None) -> str:
    columns = {
        "size": "size",
        "head": "head",
        "variant": "variant",
        "tokens_per_s": "tokens/s",
        "speedup_vs_baseline": "x baseline",
        "vs_nanogpt": "x nanoGPT",
        "mfu_pct": "MFU % (measured peak)",
        "mfu_datasheet_pct": "MFU % (datasheet)",
        "peak_mem_mib": "peak mem (MiB)",
        "step_ms": "step (ms)",
    }
    if not datasheet:
        del columns["mfu_datasheet_pct"]
    shown = table.assign(
        head=table.tie.map({True: "tied", False: "untied"}),
        mfu_pct=100 * table.get("mfu", float("nan")),
        mfu_datasheet_pct=100 * table.get("mfu_datasheet", float("nan")),
    )
    shown = shown.reindex(columns=list(columns)).rename(columns=columns)
    markdown = shown.to_markdown(index=False, floatfmt=",.2f")
    sheet = f"; datasheet dense bf16 {datasheet:.1f} TFLOP/s (bf16 rows)" if datasheet else ""
    return (
        f"{markdown}\n\nMatmul peak measured in this run: fp32 {peaks['fp32']:.3f}, "
        f"bf16 {peaks['bf16']:.3f} TFLOP/s (MFU of each row is against the peak of its "
        f"precision){sheet}."
    )


if __name__ == "__main__":
    sys.exit(main())
