"""Several processes training one run (``torchrun --nproc_per_node=N -m tiedvsuntied.run ...``).

torch.distributed with DistributedDataParallel, nothing home-made. ``trainer.batch_size`` and
``trainer.grad_accum`` describe the global step: rank r takes its contiguous share of each
micro-batch, which is still the pure function of (seed, step, micro) that one process would
draw, so a run's identity and (without dropout) its losses do not depend on the number of
processes. In one process every function here is a no-op.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import signal
from typing import Any

import torch
import torch.distributed as dist


def rank() -> int:
    return int(os.environ.get("RANK", 0))


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", 1))


def is_main() -> bool:
    return rank() == 0


def device(name: str) -> str:
    """Under torchrun with CUDA, each process takes the GPU of its LOCAL_RANK."""
    if world_size() > 1 and name in ("auto", "cuda") and torch.cuda.is_available():
        return f"cuda:{os.environ.get('LOCAL_RANK', 0)}"
    return name


def adopt_submitit() -> None:
    """A submitit job of several tasks (``hydra.launcher.tasks_per_node=N``, one per GPU) is one
    DDP run: export the variables torchrun would set, from submitit's view of the job."""
    if os.environ.get("SUBMITIT_EXECUTOR") and "RANK" not in os.environ:
        import submitit

        if submitit.JobEnvironment().num_tasks > 1:
            submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False)


def init(dev: torch.device) -> None:
    """Join the process group once per process: NCCL on CUDA, gloo on CPU."""
    if world_size() == 1 or dist.is_initialized():
        return
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    dist.init_process_group("nccl" if dev.type == "cuda" else "gloo")
    atexit.register(dist.destroy_process_group)
    if not is_main():  # one copy of the run's log lines: rank 0's
        logging.getLogger("tiedvsuntied").setLevel(logging.WARNING)


def shard(x: torch.Tensor) -> torch.Tensor:
    """This rank's contiguous rows of a global (micro-)batch."""
    n = x.size(0) // world_size()
    return x[rank() * n : (rank() + 1) * n]


def mean_(t: torch.Tensor) -> torch.Tensor:
    """In place: the mean of ``t`` over the ranks."""
    if world_size() > 1:
        dist.all_reduce(t)
        t /= world_size()
    return t


def from_main(obj: Any) -> Any:
    """Rank 0's ``obj`` on every rank."""
    if world_size() == 1:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def any_rank(flag: bool, device: torch.device) -> bool:
    """Whether ``flag`` is set on at least one rank."""
    if world_size() == 1:
        return flag
    return mean_(torch.tensor([float(flag)], device=device)).item() > 0


def wrap(model: torch.nn.Module) -> torch.nn.Module:
    """DDP around the (compiled) model; the tied matrix stays one parameter."""
    if world_size() == 1:
        return model
    dev = next(model.parameters()).device
    ddp = torch.nn.parallel.DistributedDataParallel
    return ddp(model, device_ids=[dev] if dev.type == "cuda" else None)


def no_sync(model: torch.nn.Module, last: bool):
    """No gradient all-reduce on the micro-batches before the last one of a step."""
    return model.no_sync() if hasattr(model, "no_sync") and not last else contextlib.nullcontext()


class StopRequest:
    """Set by Ctrl-C, SIGTERM or SIGUSR2 (SLURM's warning before a time limit, as submitit asks
    for it) while open; read by the loop between steps (nothing stops halfway). The handlers it
    replaced are restored after; a second Ctrl-C stops at once."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR2)

    def __init__(self):
        self.signum: int | None = None
        self.previous: dict = {}  # the handlers this one replaced

    def __enter__(self) -> StopRequest:
        # Not the main thread (some launchers): signals cannot reach this code, nothing to set.
        with contextlib.suppress(ValueError):
            self.previous = {s: signal.signal(s, self.handle) for s in self.SIGNALS}
        return self

    def __exit__(self, *exc) -> None:
        for s, previous in self.previous.items():
            signal.signal(s, previous)

    def __bool__(self) -> bool:
        return self.signum is not None

    def handle(self, signum, frame) -> None:
        if signum == signal.SIGINT and self.signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signum = signum

    def hand_on(self) -> None:
        """After the checkpoint: SIGUSR2 goes on to the handler it replaced (submitit's
        requeues the job, which resumes from that checkpoint)."""
        before = self.previous.get(self.signum)
        if self.signum == signal.SIGUSR2 and callable(before):
            before(self.signum, None)

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum else ""
