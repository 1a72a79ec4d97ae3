"""The end-to-end tests of tests/unit/test_baselines.py: they start processes or train runs to the
end."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import REPO


@pytest.mark.slow
def test_baselines_do_not_import_torch():
    code = "import sys, tiedvsuntied.data.baselines; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True)
