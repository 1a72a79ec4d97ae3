"""The studies' status lines agree with their shipped bundles: experiments/README.md's table and
each study README's "**Status: ...**" name the same status and the bundle's own run count (a
README's provenance block, read from the bundles: tests/e2e/test_experiments_readme_e2e.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
EXPERIMENTS = ROOT / "experiments"
STUDIES = sorted(p.parent for p in EXPERIMENTS.glob("*/README.md") if "**Status: " in p.read_text())


def shipped(study: Path) -> int:
    bundle = study / "results" / "BUNDLE.json"
    return json.loads(bundle.read_text())["runs"] if bundle.is_file() else 0


def table_cells(study: Path) -> str:
    """The status cell of the table row whose results column links this study."""
    for line in (EXPERIMENTS / "README.md").read_text().splitlines():
        cells = line.split(" | ")
        if len(cells) >= 3 and f"[{study.name}/]" in cells[1]:
            return cells[-1]
    raise AssertionError(f"experiments/README.md has no row linking {study.name}/")


@pytest.mark.parametrize("study", STUDIES, ids=[s.name for s in STUDIES])
def test_a_studys_status_lines_agree_with_its_bundle(study):
    status = re.search(r"\*\*Status: (\w+)\*\*", (study / "README.md").read_text()).group(1)
    n = shipped(study)
    row = table_cells(study)
    assert f"{status}: {n} runs shipped" in row, (row, status, n)
    if n:
        assert f"{n} runs" in (study / "README.md").read_text().split("\n\n")[1]
