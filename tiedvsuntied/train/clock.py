"""Where a run's time goes (summary.json ``time_s``, wall seconds, and ``cpu_s``, this process's
CPU seconds): each second of a process in exactly one part, the innermost timed block's (a
checkpoint saved during an evaluation is the checkpoint's), else ``other``. The seconds add into
the TrainState, so a resumed run goes on from its checkpoint's (the seconds after an interrupted
process's last checkpoint are lost with the work they did). CPU seconds because on a shared
machine the wall clock measures the other processes too: a 1-thread run's tokens per CPU-second
of ``step`` is what ``bench --clock cpu`` measures of the bare step (docs/speed.md)."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field

# step: forward, backward, clip, AdamW (torch.compile's warm-up included); eval: the loss of the
# fixed windows (validation, test); probes: the embedding probes; checkpoint: the .pt files;
# other: the rest (set-up, logging, summary writes, untying)
PARTS = ("step", "eval", "probes", "checkpoint", "other")


@dataclass
class Clock:
    """This process's clock; ``since`` is when the current part began (time.perf_counter), and
    ``cpu_since`` the process's CPU time then (time.process_time: all its threads)."""

    since: float = field(default_factory=time.perf_counter)
    cpu_since: float = field(default_factory=time.process_time)
    part: str = "other"

    def flush(self, state) -> dict:
        """Add the current part's seconds to ``state.time_s`` and ``state.cpu_s``; the first
        dict, now up to date."""
        now, cpu = time.perf_counter(), time.process_time()
        state.time_s[self.part] = state.time_s.get(self.part, 0.0) + now - self.since
        if state.cpu_s is not None:  # None: resumed from a checkpoint that did not count them
            state.cpu_s[self.part] = state.cpu_s.get(self.part, 0.0) + cpu - self.cpu_since
        self.since, self.cpu_since = now, cpu
        return state.time_s

    @contextlib.contextmanager
    def __call__(self, state, part: str):
        """Count the block's seconds to ``part`` (but those of a part timed inside it)."""
        self.flush(state)
        outer, self.part = self.part, part
        try:
            yield
        finally:
            self.flush(state)
            self.part = outer
