"""``python -m tiedvsuntied.run``: the Hydra entry point. Thin on purpose.

    python -m tiedvsuntied.run -m tie=true,false init_std=1.0,0.036

Each job turns its config into the typed ``train.Config`` and calls ``train.train``. A user's
mistake ends the job with one line naming the key (exit code 2), before anything is written;
a callback prints the table of the sweep's runs when a multirun ends, also when a job failed.
"""

from __future__ import annotations

import atexit
import dataclasses
import sys
import time
import typing
from pathlib import Path
from typing import Any, Optional

import hydra
import pandas as pd
from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from tiedvsuntied import results as R
from tiedvsuntied.data import DataError, DataUnavailableError
from tiedvsuntied.train import Config, ConfigError, check_config, train
from tiedvsuntied.train import dist as D

ConfigStore.instance().store(name="base_config", node=Config)


def runs_table(sweep_dir: Path, since: float | None = None) -> pd.DataFrame:
    """The sweep's runs (those touched since ``since``, a timestamp, if given): status,
    parameters and losses, from the index and the summaries."""
    rows = []
    for run_id, entry in sorted(R.read_index(sweep_dir).items()):
        s = R.read_summary(Path(sweep_dir) / entry.path)
        updated = (
            time.mktime(time.strptime(entry.updated_at[:19], "%Y-%m-%dT%H:%M:%S"))
            if entry.updated_at
            else 0
        )
        if since is not None and updated < since - 1:
            continue
        rows.append(
            {
                "run": entry.name,
                "status": (s.status if s else entry.status).value,
                "params": f"{s.params['total']:,}" if s and s.params else "-",
                "init val": s and s.init_val_loss,
                "final val": s and s.final_val_loss,
                "test": s and s.test_loss,
                "overrides": set(entry.overrides),
            }
        )
    table = pd.DataFrame(
        rows, columns=["run", "status", "params", "init val", "final val", "test", "overrides"]
    )
    # what else tells runs apart (optim.lr=..., ...): the overrides that not every run shares
    shared = set.intersection(*table["overrides"]) if len(table) else set()
    named = ("tie=", "init_std=", "model=", "seed=")
    table["also"] = [
        " ".join(sorted(o for o in ov - shared if not o.startswith(named)))
        for ov in table.pop("overrides")
    ]
    return table if table["also"].any() else table.drop(columns="also")


class SweepTable(Callback):
    """Prints this multirun's runs when it ends. Hydra skips ``on_multirun_end`` when a job
    raised, so the table is also registered to print at exit; whichever comes first prints."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self.t0, self.sweep_dir = time.time(), Path(config.results_dir) / config.sweep
        atexit.register(self.print_table)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        self.print_table()
        atexit.unregister(self.print_table)

    def print_table(self) -> None:
        df = runs_table(self.sweep_dir, self.t0)
        text = (
            df.to_string(index=False, float_format="%.4f", na_rep="-") if len(df) else "(no runs)"
        )
        print(f"\nSweep {self.sweep_dir.name}: {self.sweep_dir.resolve()}\n{text}", flush=True)


def _field_type(key: str) -> Any:
    """The schema type of a dotted key (``model.bias`` -> bool), or None if it has none."""
    cls: Any = Config
    for part in key.split("."):
        hints = typing.get_type_hints(cls) if dataclasses.is_dataclass(cls) else {}
        if part not in hints:
            return None
        cls = hints[part]
    return cls


def check_overrides(overrides: list[str]) -> None:
    """OmegaConf reads 1/0/yes/no/on/off as booleans; for a study's switch that silently turns
    ``tie=1`` into true. Accept only true/false (and null where the key allows it)."""
    for o in overrides:
        key, _, value = o.lstrip("+~").partition("=")
        kind = _field_type(key)
        if kind in (bool, Optional[bool]) and value.lower() not in ("true", "false", "null"):
            valid = "true, false or null" if kind is not bool else "true or false"
            raise ConfigError(f"{key}={value} is invalid: use {valid}")


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> float | None:
    overrides = list(HydraConfig.get().overrides.task)
    D.adopt_submitit()
    try:  # a user's mistake: one line, exit 2, nothing written
        check_overrides(overrides)
        config = OmegaConf.to_object(cfg)
        check_config(config, overrides)
    except (ConfigError, DataError) as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    # From here on a failure is the run's: recorded in its summary; a multirun goes on.
    try:
        summary = train(config, overrides=overrides)
    except (
        DataUnavailableError,
        ConfigError,
    ) as e:  # offline and not cached, a start of another tokenizer:
        # raised before the run is created
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    return summary.final_val_loss if summary else None  # for sweepers that optimise


if __name__ == "__main__":
    main()
