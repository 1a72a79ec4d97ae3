"""Hydra's callbacks of ``python -m tiedvsuntied.run`` (conf/config.yaml, ``hydra.callbacks``).

Hydra calls ``on_run_start`` and ``on_multirun_start`` before it makes any folder for a job
(``hydra.run.dir``, ``hydra.sweep.dir``): a command refused there (one line naming the key,
exit 2) leaves nothing behind. ``Check`` checks the command's jobs; ``SweepTable`` prints the
sweep's runs when a multirun ends.
"""

from __future__ import annotations

import atexit
import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

from hydra.core.global_hydra import GlobalHydra
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from tiedvsuntied.sweep import jobs


def refuse(error: BaseException) -> NoReturn:
    """A user's mistake: one line, exit code 2, and no sweep table (the line says it all)."""
    SweepTable.shown = True
    print(f"error: {jobs.one_line(error)}", file=sys.stderr, flush=True)
    raise SystemExit(jobs.REFUSED) from None


@contextlib.contextmanager
def refusing() -> Iterator[None]:
    """Any mistake of the user's raised inside, refused (``refuse``)."""
    try:
        yield
    except jobs.USER_ERRORS as e:
        refuse(e)


class Check(Callback):
    """A single run's job, or every job of a multirun as its launcher will compose it, checked
    before the first starts (``checked``: the file checks once, no device claimed), its data
    reachable (the Hub, a datasets or token cache, the files: once per corpus), and recorded
    in its sweep's ``planned.json``; each job then makes its own check, which claims its device
    and logs its notes to the job's log."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        with refusing():
            overrides = list(config.hydra.overrides.task)
            plan = jobs.check_job(jobs.without_hydra(config), overrides, checked=set())
            jobs.check_reachable([plan])  # (a multirun's: in check_jobs)
            jobs.check_sweeps_writable([plan])

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        loader = GlobalHydra.instance().config_loader()
        with refusing():
            plans = jobs.check_jobs(loader, config, todo := jobs.expand(loader, config))
            jobs.check_sweeps_writable(plans)
            jobs.record_planned(todo, plans)  # so that `sweep status DIR` counts the pending


class SweepTable(Callback):
    """Prints the sweep's runs when a multirun ends: all of them, also those of earlier
    commands into the same sweep. At the process's exit, not in ``on_multirun_end``, which
    Hydra skips when a job raised; not after a refusal (``shown``: the error line says it all)."""

    shown = False

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self.sweep_dir = Path(config.results_dir) / config.sweep
        atexit.register(self.print_table)

    def print_table(self) -> None:
        from tiedvsuntied.sweep.progress import runs_table  # pandas: only when the sweep ends

        if SweepTable.shown:
            return
        table = runs_table(self.sweep_dir)
        text = table.to_string(index=False, float_format="%.4f", na_rep="-")
        text = text if len(table) else "(no runs)"
        print(f"\nSweep {self.sweep_dir.name}: {self.sweep_dir.resolve()}\n{text}", flush=True)
