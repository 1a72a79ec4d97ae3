"""The checkout's Hydra config folder and its presets (``conf/<group>/<name>.yaml``), for the
commands that read one outside Hydra (the data CLI, the benchmark, the parameter table). No torch.
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path

CONF_DIR = Path(__file__).resolve().parents[1] / "conf"


def presets(group: str) -> dict[str, dict]:
    """Every ``conf/<group>/*.yaml`` by name, as plain dicts, in name order (the caller's own
    copy: a reader asks for a preset per cell of a table)."""
    return copy.deepcopy(_presets(group))


@functools.cache
def _presets(group: str) -> dict[str, dict]:
    # read once a process: the checkout's conf/ does not change under a running command
    from omegaconf import OmegaConf

    paths = sorted((CONF_DIR / group).glob("*.yaml"))
    return {p.stem: OmegaConf.to_container(OmegaConf.load(p)) for p in paths}


def default_choice(group: str) -> str:
    """The option conf/config.yaml's defaults list chooses for ``group``: ``data`` -> the
    default corpus, the same for every command that has one."""
    from omegaconf import OmegaConf

    defaults = OmegaConf.load(CONF_DIR / "config.yaml").defaults
    return next(d[group] for d in defaults if not isinstance(d, str) and group in d)
