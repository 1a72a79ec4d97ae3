"""Every command every piece of every declared study prints (each at each of its points, from the
study's lr table and, for the pieces that read a sweep, its shipped bundles), the template's
included, is a multirun whose every job composes and passes the checks a run makes before its
first job, as ``python -m tiedvsuntied.sweep plan`` plans it: a piece can never hand Hydra an
arm or key it does not know hours into a study. Nothing trains, but about 1,000 jobs compose:
the e2e tier's, so that the unit tier stays under a minute."""

from __future__ import annotations

import functools
import shlex
import tempfile
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import LIBRARY_OVERRIDES, REPO

from tiedvsuntied.study import protocol, registry
from tiedvsuntied.study.declare import RUN
from tiedvsuntied.sweep import jobs

PREFIX = shlex.split(RUN)
pytestmark = pytest.mark.slow


def bundled_results() -> Path:
    """A results folder whose sweeps are the studies' shipped bundles (links: nothing copied)."""
    results = Path(tempfile.mkdtemp(prefix="study-plans-"))
    for name in registry.names():
        study = registry.study(name)
        for folder, sweep in study.bundles.items():
            if (study.home / folder).is_dir() and not (results / sweep).exists():
                (results / sweep).symlink_to(study.home / folder)
    return results


RESULTS = bundled_results()


def cases() -> list[tuple[str, str, list[str]]]:
    """(study, "piece [point]", overrides) of every command of every piece and of ``all``."""
    found = []
    for name in registry.names():
        study = registry.study(name)
        for piece, p in protocol.pieces(study).items():
            if piece == "bundle" or p.report:  # not a run: tiedvsuntied.bundle's; a report
                continue
            for point in study.points if p.point else [None]:
                lines = protocol.commands(study, piece, point, RESULTS)
                label = piece if point is None else f"{piece} {point}"
                found += [(name, label, shlex.split(line)) for line in lines]
        found += [
            (name, "all", shlex.split(line)) for line in protocol.print_all(study, None, RESULTS)
        ]
    return found


FOUND = cases()
# each command planned once (``all`` repeats the pieces'), under the first label that prints it
CASES = list({(s, " ".join(c)): (s, label, c) for s, label, c in reversed(FOUND)}.values())[::-1]


def test_every_study_prints_the_lr_check_at_every_point_and_the_template_is_one():
    assert {"sign_flip", "tie_x_init_books", "template"} <= set(registry.names())
    for name in registry.names():
        study = registry.study(name)
        labels = [label for s, label, _ in FOUND if s == name]
        points = [study.lr_at] if study.lr_at else list(study.points)
        assert len([x for x in labels if x == "lr" or x.startswith("lr ")]) >= len(points)
        assert labels.count("all") >= len(study.cells), name
    assert all(c[: len(PREFIX)] == PREFIX for _, _, c in FOUND)


def test_sign_flip_prints_a_command_for_every_point_and_arm():
    labels = [label for s, label, _ in FOUND if s == "sign_flip"]
    points = registry.study("sign_flip").points
    assert {f"lr {p}" for p in points} <= set(labels)
    assert labels.count("ends") == 4 and labels.count("mult2d") == 3
    assert labels.count("mult2d-edge") + labels.count("own v8192") >= 1  # the bundles' grid read


@pytest.mark.parametrize(
    "study, label, command", CASES, ids=[f"{s}-{x}-{i}" for i, (s, x, _) in enumerate(CASES)]
)
def test_every_printed_command_composes_and_passes_the_checks(study, label, command, tmp_path):
    """... lands in the study's sweeps, and every job keeps what its +arm sets: the
    experiment's sweep params put +arm before +experiment, so a key both set takes the
    experiment's value unless the command gives it (the T5 pair's init_std once ran at the
    experiment's d^-0.5)."""
    overrides = command[len(PREFIX) :]
    bpe = any(o.startswith("data.vocab_size=") for o in overrides)  # a trained BPE of size V
    corpus = [o for o in LIBRARY_OVERRIDES if not (bpe and o == "data.encoding=bytes")]
    with jobs.composed([*overrides, *corpus, f"results_dir={tmp_path}"]) as (loader, master):
        todo = jobs.expand(loader, master)
        plans = jobs.check_jobs(loader, master, todo)
    assert plans and all(p.cfg.sweep.startswith(registry.study(study).sweep) for p in plans)
    for job, plan in zip(todo, plans, strict=True):
        (arm,) = [o.split("=", 1)[1] for o in job.overrides if o.startswith("+arm=")]
        for key, value in arm_keys(arm).items():
            got = functools.reduce(getattr, key.split("."), plan.cfg)
            assert str(got) == str(value) or got == value, (job.label, key, got, value)


@functools.cache
def arm_keys(arm: str) -> dict:
    """What conf/arm/ARM.yaml sets, as dotted keys."""
    text = (REPO / "conf" / "arm" / f"{arm}.yaml").read_text()
    return pd.json_normalize(yaml.safe_load(text)).to_dict("records")[0]
