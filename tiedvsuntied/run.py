"""``python -m tiedvsuntied.run``: the Hydra entry point. Thin on purpose.

    python -m tiedvsuntied.run -m tie=true,false init_std=1.0,inv_sqrt_d

Each job turns its config into the typed ``train.Config`` and calls ``train.train``. A user's
mistake ends the job with one line naming the key (exit code 2), before anything is written,
and takes back the log folders Hydra made for the job; Ctrl-C is one line (exit code 130)
and a rerun resumes. A multirun composes and checks every job before the first starts
(``SweepCheck``), and prints the table of all the sweep's runs when it ends, also when a job
failed (``SweepTable``).
"""

from __future__ import annotations

import atexit
import dataclasses
import difflib
import enum
import importlib
import logging
import os
import sys
import time
import types
import typing
from pathlib import Path
from typing import Any

import hydra
import pandas as pd
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, FloatNode, IntegerNode, OmegaConf, ValidationError

from tiedvsuntied import analysis
from tiedvsuntied.data import DataUnavailableError
from tiedvsuntied.results import records as results
from tiedvsuntied.sweep import jobs
from tiedvsuntied.sweep.progress import lock_held
from tiedvsuntied.train import dist
from tiedvsuntied.train.config import Config, ConfigError, check_config
from tiedvsuntied.train.trainer import train

jobs.register_schema()

USER_ERRORS = jobs.user_errors()  # each is one line naming the key, and exit code 2
REFUSED, INTERRUPTED = 2, 130  # exit codes; 130 = 128 + SIGINT, as a shell reports Ctrl-C
TABLE_COLUMNS = ["run", "status", "params", "init val", "final val", "test", "also"]


# ---------------------------------------------------------------------------- the sweep table


def shown_status(status: str, run_dir: Path) -> str:
    """A summary says ``running`` both while a process trains the run and after that process
    was killed; the run's lock tells the two apart."""
    if status != "running":
        return status
    return "running (another process)" if lock_held(run_dir) else "interrupted (a rerun resumes)"


def sweep_runs(sweep_dir: Path, since: float | None = None) -> pd.DataFrame | None:
    """The runs table of ``tiedvsuntied.analysis`` (the one reader of a sweep directory) with
    each run's entry of the sweep's index (``overrides``, ``indexed_at``); with ``since`` (a
    timestamp), only the runs written since then; None if there are none."""
    try:
        runs = analysis.load_results(sweep_dir).runs
    except analysis.ResultsError:  # no runs yet
        return None
    index = results.read_index(sweep_dir)
    entries = [index.get(run_id) for run_id in runs["run_id"]]
    runs["overrides"] = [set(entry.overrides) if entry else set() for entry in entries]
    runs["indexed_at"] = [entry.updated_at if entry else None for entry in entries]
    if since is not None:  # and every run still said to be running: whose it is matters
        recent = last_written(runs) >= pd.Timestamp(since - 1, unit="s", tz="UTC")
        runs = runs[recent | (runs["status"] == "running")]
    return runs.sort_values("run_id") if len(runs) else None


def last_written(runs: pd.DataFrame) -> pd.Series:
    """When each run was last written: its summary, or its index entry (a job that finds its
    run finished, or trained by another process, updates only that)."""
    stamps = runs[["updated_at", "indexed_at"]]
    as_times = stamps.apply(pd.to_datetime, utc=True, errors="coerce", format="ISO8601")
    return as_times.max(axis=1)


def distinguishing(overrides: pd.Series) -> list[str]:
    """What else the user set that tells runs apart (optim.lr=...): the overrides that not
    every run shares, less the axes the run's name already shows."""
    shared = set.intersection(*overrides) if len(overrides) else set()
    named = ("tie=", "init_std=", "model=", "seed=")
    return [
        " ".join(sorted(o for o in asked - shared if not o.startswith(named)))
        for asked in overrides
    ]


def runs_table(sweep_dir: Path, since: float | None = None) -> pd.DataFrame:
    """The sweep's runs (those written since ``since``, a timestamp, if given): status, size
    and losses, and what else tells them apart."""
    runs = sweep_runs(sweep_dir, since)
    if runs is None:
        return pd.DataFrame(columns=TABLE_COLUMNS[:-1])
    table = pd.DataFrame(
        {
            "run": runs["name"],
            "status": [
                shown_status(s, Path(p)) for s, p in zip(runs["status"], runs["path"], strict=True)
            ],
            "params": [f"{n:,}" if pd.notna(n) else "-" for n in runs["params_total"]],
            "init val": runs["init_val_loss"],
            "final val": runs["final_val_loss"],
            "test": runs["test_loss"],
            "also": distinguishing(runs["overrides"]),
        },
        columns=TABLE_COLUMNS,
    )
    return table if table["also"].astype(bool).any() else table.drop(columns="also")


class SweepCheck(Callback):
    """Every job of a multirun composed as its launcher will compose it and checked with the
    run's checks before the first starts (Hydra calls this before its sweeper makes any
    folder): a bad value anywhere in the sweep is one line naming the job, exit 2, and
    nothing is trained or written."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        loader = GlobalHydra.instance().config_loader()
        try:
            jobs.check_jobs(loader, config, jobs.expand(loader, config))
        except jobs.SweepError as e:
            HydraFolders.refused = True  # no sweep table either
            print(f"error: {e}", file=sys.stderr)
            raise SystemExit(REFUSED) from None


class SweepTable(Callback):
    """Prints the sweep's runs when a multirun ends: all of them, also those of earlier
    commands into the same sweep. Hydra skips ``on_multirun_end`` when a job raised, so the
    table is also registered to print at exit; whichever comes first prints."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self.sweep_dir = Path(config.results_dir) / config.sweep
        atexit.register(self.print_table)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        self.print_table()
        atexit.unregister(self.print_table)

    def print_table(self) -> None:
        if HydraFolders.refused:  # the error line says it all
            return
        table = runs_table(self.sweep_dir)
        text = (
            table.to_string(index=False, float_format="%.4f", na_rep="-")
            if len(table)
            else "(no runs)"
        )
        print(f"\nSweep {self.sweep_dir.name}: {self.sweep_dir.resolve()}\n{text}", flush=True)


# ---------------------------------------------------------------------------- Hydra's folders


def first_missing(path: Path) -> Path | None:
    """The outermost folder of ``path`` that does not exist yet (None if it all exists)."""
    missing = None
    for folder in [path, *path.parents]:
        if folder.exists():
            break
        missing = folder
    return missing


class HydraFolders(Callback):
    """Hydra makes a job's log folder (``hydra.run.dir``, a multirun's ``hydra.sweep.dir``)
    before the job starts. This notes which folders of that path did not exist before, so that
    a refused job removes what it made and nothing else (:meth:`take_back`)."""

    made: Path | None = None  # the outermost folder this process made for Hydra's logs
    refused = False

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        HydraFolders.made = first_missing(Path(os.path.abspath(config.hydra.run.dir)))

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        HydraFolders.made = first_missing(Path(os.path.abspath(config.hydra.sweep.dir)))

    @classmethod
    def take_back(cls) -> None:
        """Remove the files Hydra wrote for this job (its log, its copies of the config), then
        each folder on the way up that is empty and that this process made."""
        cls.refused = True
        hydra_cfg = HydraConfig.get()
        job_dir = Path(hydra_cfg.runtime.output_dir)
        remove_log_files(job_dir)
        folders = []
        if hydra_cfg.output_subdir is not None:
            folders.append(saved := job_dir / hydra_cfg.output_subdir)
            for name in ("config.yaml", "hydra.yaml", "overrides.yaml"):
                (saved / name).unlink(missing_ok=True)
        # Above the saved config: the job's folder and its parents that this process made. A
        # multirun's job folder (sweep.subdir) is the job's own, also in a launcher's worker,
        # which knows nothing of what its parent process made.
        made = cls.made
        if made is not None and (made == job_dir or made in job_dir.parents):
            folders += [job_dir, *(p for p in job_dir.parents if p == made or made in p.parents)]
        elif hydra_cfg.mode == RunMode.MULTIRUN:
            folders.append(job_dir)
        sweep_record = job_dir.parent / "multirun.yaml"  # the sweeper's, beside the job folders
        for folder in folders:
            if folder == job_dir.parent and sweep_record.exists():
                if set(folder.iterdir()) != {sweep_record}:
                    break  # other jobs of the sweep ran: their logs stay
                sweep_record.unlink()
            try:
                folder.rmdir()
            except OSError:  # not empty: not only this job's
                break


def remove_log_files(job_dir: Path) -> None:
    """Close and delete the log files Hydra's job logging opened in ``job_dir``."""
    for handler in list(logging.root.handlers):
        if isinstance(handler, logging.FileHandler):
            path = Path(handler.baseFilename)
            if job_dir in path.parents:
                handler.close()
                logging.root.removeHandler(handler)
                path.unlink(missing_ok=True)


# ---------------------------------------------------------------------------- the job


def field_type(key: str) -> Any:
    """The schema type of a dotted key (``model.bias`` -> bool), or None if it has none."""
    cls: Any = Config
    for part in key.split("."):
        hints = typing.get_type_hints(cls) if dataclasses.is_dataclass(cls) else {}
        if part not in hints:
            return None
        cls = hints[part]
    return cls


CONF = Path(__file__).resolve().parents[1] / "conf"
GROUPS = ("model", "data", "optim", "trainer", "wandb", "experiment")  # conf/<group>/<option>.yaml


NUMBERS = {int: (IntegerNode, "an integer"), float: (FloatNode, "a number")}


def check_value(key: str, value: str) -> None:
    """One value against the schema's type of ``key``. OmegaConf reads 1/0/yes/no/on/off as
    booleans, which silently turns ``tie=1`` into true: only true/false (and null where the key
    allows it) pass; a choice must be one of its names; a number is converted by OmegaConf's
    own node of its type, as Hydra would (whose error would be six lines)."""
    kind = field_type(key)
    optional = typing.get_origin(kind) in (typing.Union, types.UnionType)
    kind = next((k for k in typing.get_args(kind) if k is not type(None)), kind)
    if kind in NUMBERS and not (optional and value == "null"):
        node, what = NUMBERS[kind]
        try:
            node(value)
        except ValidationError:
            raise ConfigError(f"{key}={value} is invalid: use {what}") from None
        return
    if kind is bool:
        names = ["true", "false", *(["null"] if optional else [])]
        value = value.lower()
    elif isinstance(kind, type) and issubclass(kind, enum.Enum):
        names = [m.name for m in kind] + (["null"] if optional else [])
    else:
        return
    if value not in names:
        raise ConfigError(f"{key}={value} is invalid: use {', '.join(names[:-1])} or {names[-1]}")


def check_key(key: str) -> None:
    """A dotted key the schema does not have, named with the nearest one it has."""
    node, _, leaf = key.rpartition(".")
    cls = field_type(node) if node else Config
    if dataclasses.is_dataclass(cls) and field_type(key) is None:
        have = [f.name for f in dataclasses.fields(cls)]
        near = difflib.get_close_matches(leaf, have, n=1)
        hint = f"did you mean {node + '.' if node else ''}{near[0]}?" if near else "no such key"
        raise ConfigError(f"{key} is not a key of the config: {hint}")


def check_overrides(overrides: list[str]) -> None:
    """The command line's overrides (every value of a sweep too) against the typed schema and
    the config groups, before Hydra composes anything: a mistake is one line, exit 2, and no
    folder is made. What the schema cannot judge is left to Hydra and to the run's checks."""
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except Exception:  # Hydra's own syntax error says it better
        return
    for override in parsed:
        key = override.key_or_group
        if override.is_hydra_override() or override.is_delete() or "/" in key:
            continue
        if override.is_sweep_override() and not override.is_discrete_sweep():
            continue  # range(...) and interval(...): numbers
        values = (
            list(override.sweep_string_iterator())
            if override.is_sweep_override()
            else [override.get_value_element_as_str()]
        )
        for value in values:
            check_one(key, value, add=override.is_add())


def check_one(key: str, value: str, add: bool) -> None:
    if key in GROUPS:
        options = sorted(f.stem for f in (CONF / key).glob("*.yaml"))
        if value not in options:
            raise ConfigError(f"{key}={value} is invalid: use one of {', '.join(options)}")
    elif not add:
        check_key(key)
        check_value(key, value)


def refuse(error: Exception) -> typing.NoReturn:
    print(f"error: {error}", file=sys.stderr)
    # The HydraFolders that Hydra's callbacks filled: the one of the module they name
    # (`python -m tiedvsuntied.run` runs this file a second time, as __main__).
    importlib.import_module("tiedvsuntied.run").HydraFolders.take_back()
    raise SystemExit(REFUSED) from None


def interrupted_step(config: Config, since: float, error: BaseException) -> int | None:
    """The step an interrupted run saved: the trainer's exception carries it, else this job's
    run recorded it (None: interrupted before the run began)."""
    if getattr(error, "step", None) is not None:
        return error.step
    runs = sweep_runs(Path(config.results_dir) / config.sweep, since)
    if runs is None:
        return None
    runs = runs[runs["error"].fillna("").str.startswith("interrupted")]
    return None if runs.empty else int(runs.sort_values("updated_at")["step"].iloc[-1])


def interrupted(step: int | None) -> typing.NoReturn:
    at = f" at step {step}" if step is not None else ""
    print(f"interrupted{at}: rerun the same command to resume", file=sys.stderr, flush=True)
    raise SystemExit(INTERRUPTED) from None


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> float | None:
    overrides = list(HydraConfig.get().overrides.task)
    dist.adopt_submitit()
    try:  # a user's mistake: one line, exit 2, nothing written
        check_overrides(overrides)
        config = OmegaConf.to_object(cfg)
        plan = check_config(config, overrides)  # what init_from implies, worked out once
    except USER_ERRORS as e:
        refuse(e)
    # From here on a failure is the run's: recorded in its summary; a multirun goes on.
    started = time.time()
    try:
        summary = train(plan, overrides=overrides)  # the plan is not checked again
    except (DataUnavailableError, ConfigError) as e:  # offline and not cached, a start of
        refuse(e)  # another tokenizer: raised before the run is made (other errors are the run's)
    except KeyboardInterrupt as e:  # Ctrl-C, SIGTERM: the run saved a checkpoint first
        interrupted(interrupted_step(config, started, e))
    if summary is not None and (summary.error or "").startswith("interrupted"):
        interrupted(summary.step)
    return summary.final_val_loss if summary else None  # for sweepers that optimise


if __name__ == "__main__":
    try:  # before Hydra starts: a refused command line makes no folder
        check_overrides([a for a in sys.argv[1:] if "=" in a and not a.startswith("-")])
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(REFUSED) from None
    main()
