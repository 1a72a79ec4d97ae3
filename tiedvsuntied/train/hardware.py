"""Where a run executes: device, precision, and the matmul peak for MFU.

Shared by the trainer and the benchmark, so both make the same choices on the same machine.
"""

from __future__ import annotations

import functools
import os
import platform
import re
import tempfile
import time
from pathlib import Path

import torch
from filelock import FileLock, Timeout

from tiedvsuntied.train.config import Precision


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if not re.fullmatch(r"cpu|cuda(:\d+|:free)?", name):
        raise ValueError(
            f"trainer.device={name!r} is invalid: use auto, cpu, cuda, cuda:N or cuda:free"
        )
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(
            f"trainer.device={name} but CUDA is not available here: use trainer.device=cpu or auto"
        )
    return torch.device(
        f"cuda:{claim_gpu(torch.cuda.device_count())[0]}" if name == "cuda:free" else name
    )


# the CPU flags of units that compute bf16 matmuls in hardware; without them torch emulates bf16
BF16_UNITS = ("avx512_bf16", "amx_bf16")


@functools.cache
def processor(device: torch.device) -> str:
    """What a run's numbers were computed on: the GPU's name, or the CPU's model, the instruction
    set torch's kernels chose and its bf16 units. The same run gives other numbers on another
    processor (docs/ARCHITECTURE.md, ``hardware``), so a run records it."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    info = Path("/proc/cpuinfo")
    lines = info.read_text().splitlines() if info.exists() else []
    names = [line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")]
    flags = {f for line in lines if line.startswith("flags") for f in line.split(":", 1)[1].split()}
    units = ", ".join(u for u in BF16_UNITS if u in flags) or "none"
    name = names[0] if names else platform.processor() or "unknown CPU"
    return f"{name}; torch {torch.backends.cpu.get_cpu_capability()}; bf16 units: {units}"


def enable_tf32(device: torch.device) -> None:
    """On CUDA, TF32 for the fp32 matmuls (those autocast leaves, and all of an fp32 run), as
    nanoGPT's train.py: the trainer, the benchmark's rows and its peak all run this way."""
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True


@functools.cache  # the claim and its lock, held until this process exits
def claim_gpu(n_gpus: int) -> tuple[int, FileLock]:
    """``cuda:free``: the first of this machine's GPUs that no other process has claimed (a lock
    file per GPU). A joblib launcher's workers live for the whole sweep, so with
    hydra.launcher.n_jobs = number of GPUs each worker keeps one GPU of its own."""
    for i in range(n_gpus):
        lock = FileLock(os.path.join(tempfile.gettempdir(), f"tiedvsuntied-cuda{i}.lock"))
        try:
            lock.acquire(timeout=0)
        except Timeout:
            continue
        return i, lock
    raise ValueError(
        f"trainer.device=cuda:free but all {n_gpus} GPUs are claimed by other jobs: "
        f"run at most {n_gpus} at once (hydra.launcher.n_jobs={n_gpus})"
    )


def resolve_precision(p: Precision, device: torch.device) -> Precision:
    if p != Precision.auto:
        return Precision(p)
    if device.type == "cuda":
        fast = torch.cuda.is_bf16_supported()
    else:  # AVX512-BF16 or AMX: bf16 matmuls run several times faster than fp32 there
        fast = torch.cpu._is_amx_tile_supported() or torch.cpu._is_avx512_bf16_supported()
    return Precision.bf16 if fast else Precision.fp32


def measure_matmul_tflops(
    device: torch.device, dtype: torch.dtype, seconds: float = 0.5, clock=time.perf_counter
) -> float:
    """This machine's dense matmul throughput for ``dtype``: the MFU denominator. Timed by
    ``torch.utils.benchmark`` (which synchronises CUDA) with the threads training uses, on
    matrices of side 8192 on a GPU (2048 leaves an H100's units partly idle), else 2048.
    ``clock=time.process_time``: per CPU-second (the bench's --clock cpu)."""
    from torch.utils import benchmark

    n = 8192 if device.type == "cuda" else 2048
    if dtype == torch.bfloat16 and device.type == "cpu" and processor(device).endswith(": none"):
        # no bf16 units: torch emulates a bf16 matmul (0.0001 TFLOP/s against fp32's 0.04 on an
        # AVX2 EPYC), and autocast's steps run far above that, so the ceiling is fp32's
        return measure_matmul_tflops(device, torch.float32, seconds, clock)
    a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
    threads = torch.get_num_threads()
    timer = benchmark.Timer("a @ b", globals={"a": a, "b": b}, num_threads=threads, timer=clock)
    return 2 * n**3 / timer.blocked_autorange(min_run_time=seconds).median / 1e12
