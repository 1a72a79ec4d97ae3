"""Every config a user can name: each option of each group and each arm composes with Hydra's own
compose API into the typed ``Config`` and passes the run's checks; the group files hold only what
differs from their dataclass. Every job of every experiment's sweep (hundreds of configs) and the
fine-tuning study's real multiruns: tests/e2e/test_configs_e2e.py."""

from __future__ import annotations

import dataclasses
import importlib
import os
from pathlib import Path

import pytest
import torch
from conftest import (
    CORPUS_OVERRIDES,
    LIBRARY_OVERRIDES,
    REPO,
)
from helpers import checked, composed
from omegaconf import OmegaConf

import tiedvsuntied.run  # noqa: F401  (registers the typed schema, as the entry point does)
from tiedvsuntied.train.config import ConfigError, Precision
from tiedvsuntied.train.hardware import resolve_precision
from tiedvsuntied.train.plan import least_memory

CONF = REPO / "conf"
GROUP_OPTIONS = [
    (group.name, option.stem)
    for group in sorted(CONF.iterdir())
    if group.is_dir() and group.name not in ("hydra", "experiment", "arm")
    for option in sorted(group.glob("*.yaml"))
]
# What a group option cannot run without (the user names it on the command line).
REQUIRED = {
    ("data", "text"): CORPUS_OVERRIDES[1:],
    ("data", "hub"): ["data.path=org/name"],
    ("data", "gutenberg"): LIBRARY_OVERRIDES,
}


@pytest.mark.parametrize("group,option", GROUP_OPTIONS)
def test_every_group_option_composes_and_passes_the_checks(group, option, tmp_path):
    required = REQUIRED.get((group, option), [])
    overrides = [f"{group}={option}", *required, f"results_dir={tmp_path}"]
    try:
        config = checked(overrides)
    except ConfigError as e:  # a size this machine cannot train (GPT-2 xl with AdamW on 24 GiB)
        config = OmegaConf.to_object(composed(*overrides))
        need = sum(
            least_memory(config, resolve_precision(Precision.auto, torch.device("cpu"))).values()
        )
        machine = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        assert need > machine and str(e).startswith("trainer.batch_size=8 needs at least"), e
    if group in ("model", "data"):
        assert getattr(config, group).name == option


@pytest.mark.parametrize("arm", sorted(p.stem for p in (CONF / "arm").glob("*.yaml")))
def test_every_arm_composes_and_passes_the_checks(arm, tmp_path):
    config = checked([f"+arm={arm}", f"results_dir={tmp_path}"])
    if arm == "tied_in_grad":  # an untied head has no lookup side to scale: refused, one line
        assert config.tie and config.head.tied_input_grad_scale > 1
        with pytest.raises(
            ConfigError, match=r"^head.tied_input_grad_scale=4 is invalid .*tie=true$"
        ):
            checked([f"+arm={arm}", "tie=false", f"results_dir={tmp_path}"])


def test_the_body_ladder_changes_only_width_and_depth_from_micro():
    """Issue 40 moves rho by the body at a fixed V: context and head dimension stay micro's."""
    micro = OmegaConf.load(CONF / "model" / "micro.yaml")
    bodies = sorted((CONF / "model").glob("body*.yaml"))
    assert len(bodies) >= 3
    for path in bodies:
        body = OmegaConf.load(path)
        assert body.name == path.stem and body.block_size == micro.block_size, path.name
        assert body.n_embd // body.n_head == micro.n_embd // micro.n_head, path.name
        assert path.stem == f"body{body.n_embd}x{body.n_layer}"


@pytest.mark.parametrize(
    "path",
    [path for group in ("optim", "trainer", "wandb") for path in sorted(CONF.glob(f"{group}/*"))],
    ids=lambda path: f"{path.parent.name}/{path.name}",
)
def test_group_files_name_their_dataclass_and_repeat_none_of_its_defaults(path: Path):
    """conf/{optim,trainer,wandb}: the first line names the class that gives the defaults (an
    import path that works), and every key the file sets differs from that default."""
    first = path.read_text().splitlines()[0]
    module, _, name = first.removeprefix("# ").split(":")[0].rpartition(".")
    cls = getattr(importlib.import_module(module), name)
    assert dataclasses.is_dataclass(cls), first
    given = OmegaConf.to_container(OmegaConf.load(path))
    defaults = {
        field.name: field.default
        for field in dataclasses.fields(cls)
        if field.default is not dataclasses.MISSING
    }
    assert set(given) <= set(defaults), set(given) - set(defaults)
    assert not {key: value for key, value in given.items() if value == defaults[key]}
