"""``python -m tiedvsuntied.bench``: training throughput, peak memory and MFU, as ratios.

    python -m tiedvsuntied.bench --sizes micro,mini --steps 10 [--device cuda] [--json]

Times full training steps (forward, backward, clip, AdamW) of the trainer's own pieces, tied
and untied, fp32 and bf16, eager and compiled, against a baseline (eager fp32, full-logit
cross-entropy), and measures the machine's matmul peak in the same run: MFU and speed-ups are
ratios within one run. Each configuration runs in its own process (isolated peak memory and
compilation); tokens are random ids, since the data does not change a step's cost.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

CONF_MODEL = Path(__file__).resolve().parents[1] / "conf" / "model"


@dataclass
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


def model_config(size: str):
    """conf/model/<size>.yaml as a ModelConfig; an unknown size names the valid ones."""
    from omegaconf import OmegaConf

    from tiedvsuntied.model import ModelConfig

    path = CONF_MODEL / f"{size}.yaml"
    if not path.is_file():
        raise SystemExit(
            f"error: --sizes: unknown size {size!r}; valid: "
            + ", ".join(sorted(p.stem for p in CONF_MODEL.glob("*.yaml")))
        )
    return ModelConfig(**OmegaConf.to_container(OmegaConf.load(path)))


def _measure_one(
    size: str,
    tie: bool,
    v: Variant,
    steps: int,
    warmup: int,
    batch: int,
    block: int,
    device_name: str,
) -> dict:
    import dataclasses

    import numpy as np
    import torch

    from tiedvsuntied.data.batches import BatchSampler
    from tiedvsuntied.model import GPT, count_parameters, flops_per_token
    from tiedvsuntied.train import OptimConfig, build_optimizer
    from tiedvsuntied.train.hardware import Precision, autocast, resolve_device

    device = resolve_device(device_name)
    mcfg = dataclasses.replace(
        model_config(size), vocab_size=50257, block_size=block or model_config(size).block_size
    )
    torch.manual_seed(0)
    model = GPT(mcfg, tie=tie, seed=0).to(device)
    opt = build_optimizer(model, OptimConfig())
    fwd = torch.compile(model) if v.compile else model
    tokens = (
        np.random.default_rng(0).integers(0, 50257, size=200_000, dtype=np.int64).astype(np.uint16)
    )
    sampler = BatchSampler(tokens, mcfg.block_size, batch, seed=0)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def step(i):
        x, y = (t.to(device) for t in sampler.get(i))
        with autocast(Precision(v.precision), device):
            _, loss = fwd(x, y, loss_chunk=v.loss_chunk, return_logits=False)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    t0 = time.perf_counter()
    for i in range(warmup):
        step(i).item()
    sync()
    warm_s = time.perf_counter() - t0
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for i in range(warmup, warmup + steps):
        loss = step(i)
    loss.item()
    sync()
    dt = time.perf_counter() - t0
    tps = steps * batch * mcfg.block_size / dt
    peak_mem = (
        torch.cuda.max_memory_allocated()
        if device.type == "cuda"
        else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    )
    return {
        "size": size,
        "tie": tie,
        "variant": v.name,
        "precision": v.precision,
        "compile": v.compile,
        "loss_chunk": v.loss_chunk,
        "batch_size": batch,
        "block_size": mcfg.block_size,
        "params": count_parameters(model)["total"],
        "flops_per_token": flops_per_token(model),
        "tokens_per_s": tps,
        "step_ms": 1000 * dt / steps,
        "warmup_s": warm_s,
        "peak_mem_mib": peak_mem / 2**20,
        "device": str(device),
        "threads": torch.get_num_threads(),
    }


def _peaks(device_name: str) -> dict:
    import torch

    from tiedvsuntied.train.hardware import measure_matmul_tflops, resolve_device

    device = resolve_device(device_name)
    return {
        "fp32": measure_matmul_tflops(device, torch.float32, seconds=1.0),
        "bf16": measure_matmul_tflops(device, torch.bfloat16, seconds=1.0),
    }


def _run_one(size: str, tie: bool, v: Variant, args) -> dict:
    """One configuration in a fresh process: isolated peak memory and compilation."""
    spec = json.dumps({"size": size, "tie": tie, "variant": asdict(v)})
    cmd = [
        sys.executable,
        "-m",
        "tiedvsuntied.bench",
        "--_one",
        spec,
        "--steps",
        str(args.steps),
        "--warmup",
        str(args.warmup),
        "--batch-size",
        str(args.batch_size),
        "--block-size",
        str(args.block_size),
        "--device",
        args.device,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=os.environ)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    if proc.returncode or line is None:
        return {
            "size": size,
            "tie": tie,
            "variant": v.name,
            "error": (proc.stderr.strip().splitlines() or ["?"])[-1],
        }
    return json.loads(line[len("RESULT ") :])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m tiedvsuntied.bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--sizes", default="micro,mini", help="comma-separated model sizes (conf/model/*.yaml)"
    )
    p.add_argument("--steps", type=int, default=10, help="timed steps per configuration")
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
    args = p.parse_args(argv)
    if args._one:
        spec = json.loads(args._one)
        print(
            "RESULT "
            + json.dumps(
                _measure_one(
                    spec["size"],
                    spec["tie"],
                    Variant(**spec["variant"]),
                    args.steps,
                    args.warmup,
                    args.batch_size,
                    args.block_size,
                    args.device,
                )
            )
        )
        return 0

    import pandas as pd

    from tiedvsuntied.train.hardware import resolve_device

    sizes = [s.strip() for s in args.sizes.split(",") if s.strip()]
    for s in sizes:
        model_config(s)  # unknown names fail now, naming the valid ones
    try:
        resolve_device(args.device)
    except ValueError as e:
        raise SystemExit(
            f"error: {e}".replace("trainer.device", "--device").replace("trainer.", "--")
        ) from None
    log = lambda *a: print(*a, file=sys.stderr if args.json else sys.stdout, flush=True)  # noqa: E731
    peaks = _peaks(args.device)
    log(
        f"matmul peak on this machine: fp32 {peaks['fp32']:.3f} TFLOP/s, bf16 {peaks['bf16']:.3f} TFLOP/s"
    )
    rows = []
    for size in sizes:
        for tie in (t.strip().lower() == "true" for t in args.tie.split(",")):
            for v in (v for v in VARIANTS if not (args.no_compile and v.compile)):
                rows.append(_run_one(size, tie, v, args))
                log(
                    f"  {size} tie={str(tie).lower():5s} {v.name:44s} "
                    + rows[-1].get("error", f"{rows[-1].get('tokens_per_s', 0):>10,.0f} tok/s")
                )
    df = pd.DataFrame(rows)
    if "tokens_per_s" in df:
        df["mfu"] = df.flops_per_token * df.tokens_per_s / (df.precision.map(peaks) * 1e12)
        base = df[df.variant == VARIANTS[0].name].set_index(["size", "tie"]).tokens_per_s
        df["speedup_vs_baseline"] = df.tokens_per_s / df.set_index(["size", "tie"]).index.map(base)
    result = {
        "peak_tflops": peaks,
        "steps": args.steps,
        "warmup": args.warmup,
        "rows": json.loads(df.to_json(orient="records")),
    }
    print(json.dumps(result, indent=2) if args.json else "\n" + format_table(df, peaks))
    return 1 if "error" in df and df["error"].notna().any() else 0


def format_table(df, peaks: dict) -> str:
    cols = {
        "size": "size",
        "head": "head",
        "variant": "variant",
        "tokens_per_s": "tokens/s",
        "speedup_vs_baseline": "x baseline",
        "mfu_pct": "MFU %",
        "peak_mem_mib": "peak mem (MiB)",
        "step_ms": "step (ms)",
    }
    t = df.assign(
        head=df.tie.map({True: "tied", False: "untied"}), mfu_pct=100 * df.get("mfu", float("nan"))
    )
    table = (
        t.reindex(columns=list(cols)).rename(columns=cols).to_markdown(index=False, floatfmt=",.2f")
    )
    return (
        f"{table}\n\nMatmul peak measured in this run: fp32 {peaks['fp32']:.3f}, bf16 {peaks['bf16']:.3f} "
        f"TFLOP/s (MFU of each row is against the peak of its precision)."
    )


if __name__ == "__main__":
    sys.exit(main())
