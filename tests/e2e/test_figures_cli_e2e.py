"""The end-to-end tests of tests/unit/test_figures_cli.py: they start processes or train runs to the
end."""

from __future__ import annotations

import subprocess
import sys

import pytest

import tiedvsuntied.figures.cli  # noqa: F401  (imports every family: REGISTRY whole, as the CLI)
from tiedvsuntied.figures.style import (
    REGISTRY,
)


@pytest.mark.slow
def test_cli_regenerates_every_figure_from_the_tiny_sweep(tiny_sweep, tmp_path):
    out = tmp_path / "figures"
    proc = subprocess.run(
        [sys.executable, "-m", "tiedvsuntied.figures", str(tiny_sweep), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "NOT MADE" not in proc.stderr
    assert "4 runs: 4 finished" in proc.stdout
    # no fine-tuning runs: figure 7 is skipped in one line, not written empty
    assert "fig7_finetune: skipped: not fine-tuning runs" in proc.stdout
    skipped = {line.split(":")[0] for line in proc.stdout.splitlines() if ": skipped: " in line}
    studies = {name for name, output in REGISTRY.items() if output.study}  # the editions'
    assert skipped == {"fig7_finetune", *studies}
    assert not (out / "fig7_finetune.png").exists()
    tables = {
        "table_params": ["table_params.md", "table_params.tex"],
        "table_paired": ["table_paired.md", "table_interaction.md"],
        "table_early": ["table_early.md"],
    }
    for name in set(REGISTRY) - skipped:
        for file in tables.get(name, [f"{name}.pdf", f"{name}.png"]):
            path = out / file
            assert path.exists() and path.stat().st_size > 0, path
    assert not (out / "table_classic.md").exists()  # no learning-rate grid
    # the tiny sweep has one seed: no interval, and no windows-only one in its place
    paired_text = (out / "table_paired.md").read_text()
    assert (
        paired_text.startswith("0 intervals at 95% each") and "1 seed: no interval" in paired_text
    )
    early = (out / "table_early.md").read_text()
    assert early.startswith("nano (d=64), 12 steps · ") and "n = 1 seed/cell" in early
