"""The end-to-end tests of tests/unit/test_load.py: they start processes or train runs to the
end."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import REPO


@pytest.mark.slow  # a subprocess: a fresh interpreter
def test_reading_side_loads_no_torch():
    """Figures and notebooks read results without torch (the reading side imports none)."""
    code = (
        "import sys, tiedvsuntied.figures, tiedvsuntied.analysis, tiedvsuntied.results\n"
        "assert 'torch' not in sys.modules, 'torch was imported'"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
