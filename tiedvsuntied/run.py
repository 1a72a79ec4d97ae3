"""``python -m tiedvsuntied.run``: the Hydra entry point. Thin on purpose.

    python -m tiedvsuntied.run -m tie=true,false init_std=1.0,inv_sqrt_d

Each job checks its config and calls ``trainer.train``. A user's mistake is one line naming
the key (exit code 2), before Hydra makes any folder (Hydra's own errors are raised to here;
the run's checks are Hydra's callbacks: tiedvsuntied/callbacks.py). Ctrl-C is one line (exit
code 130) and a rerun resumes. Nothing here imports torch or pandas until a job needs them.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import sys
from pathlib import Path
from typing import NoReturn

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException
from hydra.types import RunMode
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from tiedvsuntied import callbacks
from tiedvsuntied.sweep import jobs

jobs.register_schema()

INTERRUPTED = 130  # 128 + SIGINT, as a shell reports Ctrl-C
UNWRITABLE = (errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOSPC, errno.EDQUOT)


def interrupted(step: int | None) -> NoReturn:
    at = f" at step {step}" if step is not None else ""
    print(f"interrupted{at}: rerun the same command to resume", file=sys.stderr, flush=True)
    raise SystemExit(INTERRUPTED) from None


def unwritable(error: OSError) -> NoReturn:
    """A run whose folder stopped taking writes: one line naming the folder, no traceback and
    no sweep table; the next jobs would meet the same folder, so the command ends here."""
    path = Path(error.filename or "?")
    folder = path.parent if path.name.startswith(".") else path  # a temporary file: its folder
    print(
        f"error: {folder} cannot be written ({error.strerror}): the run stopped; make it "
        "writable and rerun the command to resume",
        file=sys.stderr,
        flush=True,
    )
    callbacks.SweepTable.shown = True
    raise SystemExit(1) from None


def refuse_job(error: BaseException) -> NoReturn:
    """A job refused before its run was made: the folder Hydra made for its log goes, and the
    folders above it that this leaves empty (a multirun's: with its multirun.yaml), so that a
    refused command leaves no folder; then the one line (callbacks.refuse)."""
    hydra_cfg = HydraConfig.get()
    job = Path(hydra_cfg.runtime.output_dir)
    if {p.name for p in job.iterdir()} <= {".hydra", f"{hydra_cfg.job.name}.log"}:
        shutil.rmtree(job)
        top = Path(hydra_cfg.sweep.dir if hydra_cfg.mode == RunMode.MULTIRUN else job)
        if top.is_dir() and {p.name for p in top.iterdir()} <= {"multirun.yaml"}:
            shutil.rmtree(top)  # no other job of this command made a folder
        for folder in top.absolute().parents:  # multirun/<sweep>/, multirun/ where now empty
            if folder == Path.cwd() or not folder.is_relative_to(Path.cwd()):
                break
            with contextlib.suppress(OSError):
                folder.rmdir()
    callbacks.refuse(error)


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> float | None:
    from tiedvsuntied.data.config import DataUnavailableError
    from tiedvsuntied.train import dist
    from tiedvsuntied.train.config import ConfigError
    from tiedvsuntied.train.trainer import train

    overrides = list(HydraConfig.get().overrides.task)
    dist.adopt_submitit()
    try:  # the job's own checks (callbacks.Check made the command's)
        plan = jobs.check_job(cfg, overrides)  # what init_from implies, worked out once
    except jobs.USER_ERRORS as e:
        refuse_job(e)
    # From here on a failure is the run's: recorded in its summary; a multirun goes on.
    try:
        summary = train(plan, overrides=overrides)  # the plan is not checked again
    except (DataUnavailableError, ConfigError) as e:  # offline and not cached, a start of
        refuse_job(e)  # another tokenizer: raised before the run is made
    except KeyboardInterrupt as e:  # Ctrl-C, SIGTERM: the run saved a checkpoint first
        interrupted(getattr(e, "step", None))  # None: before the run began
    except OSError as e:  # the results folder stopped taking writes (read-only, full)
        if e.errno not in UNWRITABLE:
            raise
        unwritable(e)
    if summary is not None and (summary.error or "").startswith("interrupted"):
        interrupted(summary.step)
    return summary.final_val_loss if summary else None  # for sweepers that optimise


def check_modes(argv: list[str]) -> list[str]:
    """Hydra takes one mode: --cfg and --info show one job's config, which -m has many of (Hydra
    would raise a ValueError); said in one line, with what does show a sweep's jobs. --cfg shows
    the config resolved (the shipped corpus's path, not its ``${shipped:...}``): the argv to run."""
    from hydra._internal.utils import get_args_parser

    args, _ = get_args_parser().parse_known_args(argv)
    if args.cfg and not args.resolve:
        argv = [*argv, "--resolve"]
    shown = [f"--{flag} {getattr(args, flag)}" for flag in ("cfg", "info") if getattr(args, flag)]
    if args.multirun and shown:
        callbacks.refuse(
            jobs.SweepError(
                f"{shown[0]} shows one job's config: drop -m and give one value a key (e.g. "
                f"tie=false {shown[0]}); python -m tiedvsuntied.sweep plan OVERRIDES lists a "
                "sweep's jobs"
            )
        )
    return argv


if __name__ == "__main__":
    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra raises its errors instead of printing them
    sys.argv[1:] = check_modes(sys.argv[1:])
    try:
        main()
    except (HydraException, OmegaConfBaseException) as e:  # composing the config
        callbacks.refuse(e)
