"""A sweep's jobs as Hydra's basic sweeper expands them, each composed as the launcher composes
it and checked with the run's own checks before Hydra makes any folder for them
(``callbacks.Check``); the plan lists them. The run's checks (``train.plan``) load torch: they
are imported when first needed (``status`` and ``table`` start without it)."""

from __future__ import annotations

import contextlib
import copy
import difflib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra import initialize_config_dir
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException, MissingConfigException
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf, open_dict, read_write
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

from tiedvsuntied.data.config import DataError, DataUnavailableError
from tiedvsuntied.model.config import ModelConfigError
from tiedvsuntied.presets import CONF_DIR
from tiedvsuntied.results.identity import LEGACY
from tiedvsuntied.train.config import Config, ConfigError

BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"
REFUSED = 2  # the exit code of a refused command (a user's mistake, in one line)


class SweepError(ValueError):
    """A job of the sweep cannot run: one line naming the job, its key and its value."""


# What a user's command can get wrong, composing it or checking it: each is one line naming the
# key (``one_line``). The typed config's __post_init__ checks raise theirs inside
# OmegaConf.to_object, which lets a ValueError through as it is (it wraps only TypeError).
USER_ERRORS = (ConfigError, ModelConfigError, DataError, DataUnavailableError, SweepError)
USER_ERRORS += (HydraException, OmegaConfBaseException)


@dataclass
class Job:
    num: int  # Hydra's hydra.job.num: the job's folder in the multirun's log folder
    overrides: list[str]  # what the launcher composes the job with
    label: str  # the job's values of the keys the sweep varies: "init_std=-1 seed=3"


def register_schema() -> None:
    """The typed config as Hydra's ``base_config`` (conf/config.yaml's first default)."""
    ConfigStore.instance().store(name="base_config", node=Config)


@contextlib.contextmanager
def composed(overrides: list[str]) -> Iterator[tuple[Any, DictConfig]]:
    """Hydra's config loader and the config ``python -m tiedvsuntied.run -m OVERRIDES`` has
    before its sweeper starts, for a command that is not the Hydra app itself (the plan)."""
    register_schema()
    with initialize_config_dir(str(CONF_DIR), version_base="1.3", job_name="run"):
        loader = GlobalHydra.instance().config_loader()
        try:
            master = loader.load_configuration("config", overrides, run_mode=RunMode.MULTIRUN)
        except (HydraException, OmegaConfBaseException) as e:
            raise SweepError(one_line(e)) from None
        yield loader, master


def expand(loader: Any, master: DictConfig) -> list[Job]:
    """The jobs, in the order the basic sweeper launches them (the experiment's
    ``hydra.sweeper.params``, then the command line, which wins); [] under another sweeper."""
    sweeper = master.hydra.sweeper
    if sweeper.get("_target_") != BASIC_SWEEPER:
        return []
    given = [f"{key}={value}" for key, value in (sweeper.get("params") or {}).items()]
    given += list(master.hydra.overrides.task)
    try:
        parsed = OverridesParser.create(config_loader=loader).parse_overrides(given)
        batches = BasicSweeper.split_arguments(parsed, sweeper.get("max_batch_size"))
    except HydraException as e:
        raise SweepError(one_line(e)) from None
    jobs = [job for batch in batches for job in batch]
    varied = [i for i in range(len(jobs[0])) if len({job[i] for job in jobs}) > 1]
    return [
        Job(num, job, " ".join(spelled(job[i]) for i in varied) or "its only job")
        for num, job in enumerate(jobs)
    ]


def spelled(override: str) -> str:
    """An override as the user typed it: the sweeper writes a parsed true as ``True``."""
    key, _, value = override.partition("=")
    return f"{key}={value.lower()}" if value in ("True", "False") else override


def without_hydra(cfg: DictConfig) -> DictConfig:
    """A copy of a composed config less its ``hydra`` node, as Hydra's run_job gives the task."""
    cfg = copy.deepcopy(cfg)
    with read_write(cfg), open_dict(cfg):
        del cfg["hydra"]
    return cfg


def task_configs(loader: Any, master: DictConfig, jobs: list[Job]) -> Iterator[tuple]:
    """(task config, task overrides) of each job, as the launcher composes it. The
    groups' composition (reading and merging the YAML files) is the slow part: it is done once
    per distinct choice of groups, and each job's values are set on a copy by Hydra's own code."""
    parser = OverridesParser.create(config_loader=loader)
    composed_for: dict[tuple[str, ...], DictConfig] = {}
    for job in jobs:
        parsed = parser.parse_overrides(job.overrides)
        groups = [o for o in parsed if chooses_group(loader, o)]
        key = tuple(o.input_line for o in groups)
        if key not in composed_for:
            composed_for[key] = without_hydra(loader.load_sweep_config(master, list(key)))
        cfg = copy.deepcopy(composed_for[key])
        ConfigLoaderImpl._apply_overrides_to_config([o for o in parsed if o not in groups], cfg)
        yield cfg, [o.input_line for o in parsed if not o.is_hydra_override()]


def chooses_group(loader: Any, override: Any) -> bool:
    """Whether Hydra composes this override into the defaults list rather than setting a
    value (its rule, ``hydra._internal.defaults_list.Overrides``); hydra.* ones count too."""
    return override.is_hydra_override() or (
        loader.repository.group_exists(override.key_or_group)
        and not isinstance(override.value(), dict)
    )


def check_jobs(loader: Any, master: DictConfig, jobs: list[Job]) -> list[Any]:
    """Every job's ``RunPlan``, or a SweepError naming the first bad job. The file checks run
    once per distinct data config and results_dir."""
    checked: set[str] = set()
    plans = []
    configs = task_configs(loader, master, jobs)
    for job in jobs:
        try:
            plans.append(check_job(*next(configs), checked))
            check_planned_here(master, plans[-1])
        except USER_ERRORS as e:
            raise SweepError(f"job {job.num} of {len(jobs)} ({job.label}): {one_line(e)}") from None
    check_reachable(plans)
    return plans


# Launchers whose jobs run on other machines (docs/keys.md, "trainer.precision"): a job's plan,
# made here, cannot know what ``auto`` resolves to there
ELSEWHERE = ("SlurmLauncher",)


def check_planned_here(master: DictConfig, plan: Any) -> None:
    """A run's id hashes the precision ``trainer.precision`` resolves to where it trains, and
    the plan resolves it here: under a launcher whose jobs run on other machines (SLURM), where
    ``auto`` may resolve otherwise, the plan's ids would not be the runs', so ``auto`` is
    refused there and the precision must be set."""
    launcher = str(master.hydra.launcher.get("_target_", "")).rsplit(".", 1)[-1]
    if launcher in ELSEWHERE and plan.cfg.trainer.precision == "auto":
        raise ConfigError(
            f"trainer.precision=auto resolves on each node that runs a job, not here "
            f"({launcher}), and a run's id depends on it: set trainer.precision=bf16 or fp32"
        )


def check_reachable(plans: list[Any]) -> None:
    """Each distinct corpus of the command can be had now (``data.cache.check_reachable``), so
    that a command whose data cannot be read is refused before its sweep records any plan."""
    from tiedvsuntied.data.cache import check_reachable as reachable  # numpy, tiktoken

    for data in {repr(plan.cfg.data): plan.cfg.data for plan in plans}.values():
        try:
            reachable(data)
        except (DataError, DataUnavailableError) as e:
            raise SweepError(f"data={data.name}: {one_line(e)}") from None


def check_job(cfg: DictConfig, overrides: list[str], checked: set[str] | None = None) -> Any:
    """One job's task config checked as its run starts: its booleans as typed, the dataclasses'
    own checks (``OmegaConf.to_object``), then ``train.check_config``: its ``RunPlan``."""
    from tiedvsuntied.train.plan import check_config

    check_booleans(cfg, overrides)
    return check_config(OmegaConf.to_object(cfg), overrides, checked)


def check_sweeps_writable(plans: list[Any]) -> None:
    """A sweep folder that exists must take writes for a command that trains (its runs record
    their state there): one on a read-only disk (an archive, a mount) is refused before
    anything starts, naming it. Not a check of the plan's: reading a sweep needs no writes."""
    for sweep_dir in {Path(plan.cfg.results_dir) / plan.cfg.sweep for plan in plans}:
        check_writable_folder(sweep_dir)


def check_writable_folder(sweep_dir: Path) -> None:
    if sweep_dir.is_dir() and not os.access(sweep_dir, os.W_OK | os.X_OK):
        why = "a read-only file system" if read_only(sweep_dir) else "not writable"
        raise ConfigError(
            f"sweep folder {sweep_dir} cannot be written ({why}): make it writable, or choose "
            "another results_dir or sweep"
        )


def read_only(path: Path) -> bool:
    return bool(os.statvfs(path).f_flag & os.ST_RDONLY)


def check_booleans(cfg: DictConfig, overrides: list[str]) -> None:
    """OmegaConf reads 1/0/yes/no/on/off as booleans, which silently turns ``tie=1`` into true:
    a boolean key takes true or false (null where it may)."""
    for override in OverridesParser.create().parse_overrides(list(overrides)):
        if override.is_sweep_override() or override.is_delete():
            continue  # each job of a sweep is checked with its own value
        value = override.value()
        if isinstance(OmegaConf.select(cfg, override.key_or_group), bool) and not (
            value is None or isinstance(value, bool)
        ):
            raise ConfigError(f"{override.input_line} is invalid: use true or false")


def one_line(error: BaseException) -> str:
    """Hydra's and OmegaConf's messages in one line naming the key and what it may be: a group
    option with the options there are, an unknown key with the nearest one, else the override
    then what is wrong with it (the first line of each: the rest names the schema class)."""
    if isinstance(error, MissingConfigException) and error.options:
        group, _, option = (error.missing_cfg_file or "").rpartition("/")
        return f"{group}={option} is invalid: use one of {', '.join(error.options)}"
    cause = error.__cause__
    if isinstance(cause, (ConfigAttributeError, ConfigKeyError)) and cause.parent_node is not None:
        node, _, _ = cause.full_key.rpartition(".")
        near = difflib.get_close_matches(cause.key, list(cause.parent_node.keys()), n=1)
        hint = f"did you mean {node + '.' if node else ''}{near[0]}?" if near else "no such key"
        moved = [new for new, old in LEGACY.items() if old == cause.full_key]
        hint = f"it is {moved[0]} now" if moved else hint
        return f"{cause.full_key} is not a key of the config: {hint}"
    errors = [error, cause] if isinstance(cause, OmegaConfBaseException) else [error]
    parts = [getattr(error, "override", None), *(str(e).strip().split("\n")[0] for e in errors)]
    return ": ".join(p for p in parts if p) or type(error).__name__


def record_planned(todo: list[Job], plans: list[Any]) -> None:
    """Each job's run in its sweep's ``planned.json`` (results.state), as the multirun starts."""
    from tiedvsuntied.results.state import record_planned as record

    by_sweep: dict[Path, dict[str, dict]] = {}
    for job, plan, run_id in zip(todo, plans, run_ids(plans), strict=True):
        sweep_dir = Path(plan.cfg.results_dir) / plan.cfg.sweep
        by_sweep.setdefault(sweep_dir, {})[run_id] = {
            "name": run_id.rsplit("-", 1)[0],
            "model": plan.cfg.model.name,
            "vocab_size": plan.cfg.data.vocab_size,  # None: the encoding's own
            "max_steps": plan.cfg.trainer.max_steps,
            "overrides": list(job.overrides),
        }
    for sweep_dir, planned in by_sweep.items():
        record(sweep_dir, planned)


def run_ids(plans: list[Any]) -> list[str]:
    """The run id each job's run has or will have, as the trainer names it (setup.run_dir_of):
    in the precision its plan resolved here, and the data's fingerprint from its files' hashes,
    once per distinct data config."""
    from tiedvsuntied.data.cache import corpus_fingerprint  # numpy, tiktoken
    from tiedvsuntied.train.setup import run_dir_of

    data = {repr(plan.cfg.data): plan.cfg.data for plan in plans}
    fingerprints = {key: corpus_fingerprint(d) for key, d in data.items()}
    return [run_dir_of(plan, fingerprints[repr(plan.cfg.data)]).name for plan in plans]
