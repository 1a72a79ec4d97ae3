"""A run's id fixes its numerics: ``trainer.precision=auto`` is hashed as what it resolves to
where the run trains (results.identity.hashed_precision), so the same sweep planned on a CPU
without bf16 units gets other ids than on one with them, and where they exist the ids are the
shipped runs' (here torch's two bf16 probes answer as each kind of CPU would)."""

from __future__ import annotations

import pytest
import torch
from conftest import QUICK, REPO
from omegaconf import OmegaConf

from tiedvsuntied.results.records import read_config, read_summary
from tiedvsuntied.sweep import jobs
from tiedvsuntied.sweep.__main__ import planned
from tiedvsuntied.train.config import Config

# the shipped configs name ../shared/data/gutenberg, relative to the checkout (data.manifest,
# a path, is part of the identity)
GUTENBERG = REPO.parent / "shared" / "data" / "gutenberg"
SIGN_FLIP = REPO / "experiments" / "sign_flip"


def bf16_units(monkeypatch, present: bool) -> None:
    """This CPU as one with AMX or AVX512-BF16 (``present``) or an AVX2-only one."""
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: present)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: present)


def plan_ids(monkeypatch, present: bool, overrides: list[str]) -> dict[str, str]:
    """``sweep plan``'s run id of each job, by the job's label."""
    bf16_units(monkeypatch, present)
    runs = planned(overrides)
    return dict(zip(runs["overrides"], runs["run_id"], strict=True))


def test_a_sweep_planned_without_bf16_units_gets_other_ids_for_auto_only(tmp_path, monkeypatch):
    overrides = [*QUICK, f"results_dir={tmp_path}", "seed=0,1", "trainer.precision=auto,bf16,fp32"]
    units, none = (plan_ids(monkeypatch, present, overrides) for present in (True, False))
    assert units.keys() == none.keys() and len(units) == 6
    for seed in (0, 1):
        auto, bf16, fp32 = (f"seed={seed} trainer.precision={p}" for p in ("auto", "bf16", "fp32"))
        assert units[auto] != none[auto]  # bf16 where the units are, fp32 where not
        assert none[auto] == none[fp32] == units[fp32]  # the same numerics: the same run
        assert units[bf16] == none[bf16] and units[auto] not in (units[bf16], units[fp32])


@pytest.mark.skipif(not (GUTENBERG / "MANIFEST.tsv").is_file(), reason="no ../shared gutenberg")
def test_a_shipped_config_plans_to_its_bf16_run_with_units_and_its_fp32_run_without(monkeypatch):
    """The third edition's untied run at its own multipliers, V = 8,192, seed 0, trained twice:
    in bf16 (the multiplier grid's bundle) and under ``auto`` on an AVX2-only CPU in fp32 (the
    study's bundle, renamed to the id it has now). Planned from its config.yaml where bf16 units
    exist, it is the bf16 run (today's id, unchanged); where they do not, the fp32 run."""
    bf16_run = next(SIGN_FLIP.glob("results_mult2d/untied_initinv_sqrt_d_micro_seed0-d2d174ed"))
    [fp32_run] = [
        p.parent
        for p in SIGN_FLIP.glob("results/*/summary.json")
        if read_summary(p.parent).formerly == bf16_run.name
    ]
    configs = []
    for run_dir in (bf16_run, fp32_run):
        config = read_config(run_dir)
        config.pop("derived"), config.pop("sweep")  # the sweep is recorded, not hashed
        configs.append(config)
    assert configs[0] == configs[1]  # one config, asked twice
    config = OmegaConf.merge(OmegaConf.structured(Config), configs[0])
    monkeypatch.chdir(REPO)
    got = {}
    for present in (True, False):
        bf16_units(monkeypatch, present)
        got[present] = jobs.run_ids([jobs.check_job(config, [], set())])[0]
    assert got == {True: bf16_run.name, False: fp32_run.name}


def test_auto_under_slurm_is_refused_in_one_line_naming_the_values(tmp_path):
    """A SLURM job resolves ``auto`` on its node, which the plan made here cannot know (and the
    run's id depends on it): the multirun's check refuses it before any job; set, it plans."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    given = ["hydra/launcher=slurm", *QUICK, f"results_dir={tmp_path}"]
    with jobs.composed(given) as (loader, master), pytest.raises(jobs.SweepError) as refused:
        jobs.check_jobs(loader, master, jobs.expand(loader, master))
    message = str(refused.value)
    assert "trainer.precision=auto" in message and "\n" not in message
    assert "set trainer.precision=bf16 or fp32" in message
    with jobs.composed([*given, "trainer.precision=bf16"]) as (loader, master):
        [plan] = jobs.check_jobs(loader, master, jobs.expand(loader, master))
    assert plan.precision == "bf16"
