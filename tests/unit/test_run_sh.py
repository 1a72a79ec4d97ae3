"""Every command the third edition's run.sh prints (each piece at each point, from the shipped
lr_choice.tsv) is a multirun whose every job composes and passes the checks a run makes before
its first job: a piece can never hand Hydra an arm or key it does not know hours into a study."""

from __future__ import annotations

import functools
import os
import re
import shlex
import subprocess

import pandas as pd
import pytest
import yaml
from conftest import LIBRARY_OVERRIDES, REPO

from tiedvsuntied.sweep import jobs

STUDY = REPO / "experiments" / "sign_flip"
RUN_SH = STUDY / "run.sh"
PREFIX = shlex.split("python -m tiedvsuntied.run -m")
POINTS = re.search(r"unknown point '\$1': ([^\"]+)\"", RUN_SH.read_text())[1].split()
# the pieces and whether they take a point (run.sh's usage line)
PIECES = {"lr": True, "lr-edge": False, "grid": True, "clip": True, "ends": False}
PIECES |= {"init02": True, "mult2d": False, "mult2d-edge": False, "own": True, "floor": False}
PIECES |= {"rest": False, "precision": False}
# mult2d-edge and own read the multiplier grid's sweeps: here the shipped bundles
ENV = {**os.environ, "MULT2D_DIRS": f"{STUDY / 'results_mult2d'} {STUDY / 'results'}"}


def printed(piece: str, *point: str) -> list[list[str]]:
    """The overrides of each command ``run.sh print PIECE [POINT]`` prints."""
    out = subprocess.run(
        ["bash", str(RUN_SH), "print", piece, *point], capture_output=True, text=True, env=ENV
    )
    assert out.returncode == 0, out.stderr
    out = out.stdout
    commands = [shlex.split(line) for line in out.splitlines() if line.strip()]
    assert all(c[: len(PREFIX)] == PREFIX for c in commands), out
    return [c[len(PREFIX) :] for c in commands]


def commands() -> list[tuple[str, list[str]]]:
    found = []
    for piece, takes_point in PIECES.items():
        for point in POINTS if takes_point else [None]:
            label = piece if point is None else f"{piece} {point}"
            found += [(label, c) for c in printed(piece, *([point] if point else []))]
    return found


CASES = commands()


def test_the_pieces_print_a_command_for_every_point_and_arm():
    labels = [label for label, _ in CASES]
    assert {f"lr {p}" for p in POINTS} <= set(labels)
    assert labels.count("ends") == 4 and labels.count("mult2d") == 3


@pytest.mark.parametrize(
    "label, overrides", CASES, ids=[f"{x}-{i}" for i, (x, _) in enumerate(CASES)]
)
def test_every_printed_command_composes_and_passes_the_checks(label, overrides, tmp_path):
    """... and every job keeps what its +arm sets: the experiment's sweep params put +arm
    before +experiment, so a key both set takes the experiment's value unless the command
    gives it (the T5 pair's init_std once ran at the experiment's d^-0.5)."""
    corpus = [o for o in LIBRARY_OVERRIDES if o != "data.encoding=bytes"]  # its trained BPE
    with jobs.composed([*overrides, *corpus, f"results_dir={tmp_path}"]) as (loader, master):
        todo = jobs.expand(loader, master)
        plans = jobs.check_jobs(loader, master, todo)
    assert plans and all(plan.cfg.sweep.startswith("sign_flip") for plan in plans)
    for job, plan in zip(todo, plans, strict=True):
        (arm,) = [o.split("=", 1)[1] for o in job.overrides if o.startswith("+arm=")]
        for key, value in arm_keys(arm).items():
            got = functools.reduce(getattr, key.split("."), plan.cfg)
            assert str(got) == str(value) or got == value, (job.label, key, got, value)


def arm_keys(arm: str) -> dict:
    """What conf/arm/ARM.yaml sets, as dotted keys."""
    text = (REPO / "conf" / "arm" / f"{arm}.yaml").read_text()
    return pd.json_normalize(yaml.safe_load(text)).to_dict("records")[0]


@pytest.mark.slow  # starts run.sh
def test_restore_puts_each_bundles_runs_into_its_sweep_and_keeps_a_run_already_there(tmp_path):
    """On a new machine `run.sh restore` fills every sweep a piece reads (the multiplier grid's
    too, or `all` would train it again); a run already in a sweep is left as it is."""
    here = tmp_path / "experiments" / "sign_flip"
    here.mkdir(parents=True)
    (here / "run.sh").write_text(RUN_SH.read_text())
    for bundle in ["results", "results_clip", "results_mult2d", "results_fp32"]:
        (here / bundle / f"run-{bundle}").mkdir(parents=True)
        (here / bundle / f"run-{bundle}" / "summary.json").write_text("shipped")
    kept = tmp_path / "results" / "sign_flip" / "run-results" / "summary.json"
    kept.parent.mkdir(parents=True)
    kept.write_text("trained here")
    subprocess.run(["bash", str(here / "run.sh"), "restore"], check=True, env=ENV)
    restored = {
        p.relative_to(tmp_path / "results").as_posix(): p.read_text()
        for p in (tmp_path / "results").rglob("summary.json")
    }
    assert restored == {
        "sign_flip/run-results/summary.json": "trained here",
        "sign_flip_clip/run-results_clip/summary.json": "shipped",
        "sign_flip_mult2d/run-results_mult2d/summary.json": "shipped",
        "sign_flip_fp32/run-results_fp32/summary.json": "shipped",
    }


def per_seed(commands: list[list[str]]) -> list[list[str]]:
    """Each multirun command split into one command per seed."""
    out = []
    for command in commands:
        seeds = next(a for a in command if a.startswith("seed="))
        for seed in seeds.removeprefix("seed=").split(","):
            out.append([f"seed={seed}" if a == seeds else a for a in command])
    return out


def test_rest_runs_the_ends_and_the_own_multipliers_once_each_a_seed_a_command():
    """Each job once, and the ends' arms last: HYPOTHESES.md cuts them before anything else."""
    own_points = re.search(r'OWN_POINTS="([^"]+)"', RUN_SH.read_text())[1].split()
    own = per_seed([c for label, c in CASES if label in {f"own {p}" for p in own_points}])
    ends = per_seed([c for label, c in CASES if label == "ends"])
    rest = [c for label, c in CASES if label == "rest"]
    assert sorted(rest) == sorted(own + ends) and len(rest) == 28
    assert all(c in own for c in rest[: len(own)]), "an ends' arm runs before an own multiplier"


@pytest.mark.slow  # starts run.sh
def test_a_piece_refuses_to_train_where_auto_resolves_to_fp32(tmp_path):
    """The study's runs are bf16: on a CPU without bf16 units (here torch's two probes answer
    no, in every python run.sh starts) a piece stops with one line before its first job (a
    copy of run.sh in an empty checkout: had it gone on, it would have trained nothing here)."""
    here = tmp_path / "experiments" / "sign_flip"
    here.mkdir(parents=True)
    (here / "run.sh").write_text(RUN_SH.read_text())
    (tmp_path / "sitecustomize.py").write_text(
        "import torch\n"
        "torch.cpu._is_amx_tile_supported = torch.cpu._is_avx512_bf16_supported = lambda: False\n"
    )
    env = {**ENV, "PYTHONPATH": f"{tmp_path}:{ENV.get('PYTHONPATH', '')}"}
    out = subprocess.run(
        ["bash", str(here / "run.sh"), "rest"], capture_output=True, text=True, env=env
    )
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.count("\n") == 1 and "trainer.precision=auto would train fp32" in out.stderr
