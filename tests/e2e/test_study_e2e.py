"""The protocol (tiedvsuntied.study) in process on sign_flip's shipped bundles: ``all``'s commands,
``rest``, the listing and ``choose``, which writes the shipped lr table from the shipped runs."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest
from helpers import moved

from tiedvsuntied.studies.sign_flip import pieces
from tiedvsuntied.study import protocol, registry
from tiedvsuntied.study.__main__ import choose, main

pytestmark = pytest.mark.slow  # reads the shipped bundles (tests/e2e)

SIGN_FLIP = registry.study("sign_flip")


@pytest.fixture(scope="module")
def bundled(tmp_path_factory) -> Path:
    """A results folder whose sweeps are sign_flip's shipped bundles (links)."""
    results = tmp_path_factory.mktemp("results")
    for folder, sweep in SIGN_FLIP.bundles.items():
        if (SIGN_FLIP.home / folder).is_dir():
            (results / sweep).symlink_to(SIGN_FLIP.home / folder)
    return results


def test_print_all_is_each_steps_commands_once_in_alls_order(bundled):
    made = [
        line
        for name, p in protocol.all_steps(SIGN_FLIP)
        if name != "choose"
        for line in protocol.commands(SIGN_FLIP, name, p, bundled)
    ]
    printed = protocol.print_all(SIGN_FLIP, None, bundled)
    assert printed == list(dict.fromkeys(made)) and len(printed) >= len(SIGN_FLIP.order) * 2


def test_rest_runs_the_ends_and_the_own_multipliers_once_each_a_seed_a_command(bundled):
    """Each job once, and the ends' arms last: HYPOTHESES.md cuts them before anything else."""
    own = [
        c
        for p in pieces.OWN_POINTS
        for line in pieces.own(SIGN_FLIP, p, bundled)
        for c in pieces.per_seed(line)
    ]
    ends = [c for line in pieces.ends(SIGN_FLIP) for c in pieces.per_seed(line)]
    rest = pieces.rest(SIGN_FLIP, None, bundled)
    assert sorted(rest) == sorted(dict.fromkeys(own + ends)) and len(rest) == 28
    assert all(c in own for c in rest[: len(set(own))]), "an ends' arm runs before an own one"


def test_the_listing_names_every_study_with_what_is_done_and_left(bundled, capsys):
    main(["--results", str(bundled)])
    out = capsys.readouterr().out
    assert all(f"{name} " in out for name in registry.names())
    finished = sum(1 for s in (bundled / "sign_flip").glob("*/summary.json"))
    assert f"sign_flip {finished} done, 0 left" in out


def test_choose_writes_the_shipped_lr_table_from_the_shipped_runs(bundled, tmp_path):
    study = moved(SIGN_FLIP, tmp_path)
    shutil.copytree(bundled / "sign_flip", tmp_path / "results" / "sign_flip")
    choose(study, tmp_path / "results", quiet=True)
    written = pd.read_csv(study.lr_table, sep="\t")
    shipped = pd.read_csv(SIGN_FLIP.lr_table, sep="\t")
    pd.testing.assert_frame_equal(written, shipped)
