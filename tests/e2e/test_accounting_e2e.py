"""The end-to-end tests of tests/unit/test_accounting.py: they start processes or train runs to the
end."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.slow
def test_config_and_accounting_import_no_torch():
    """The reading side (results, analysis, figures) counts parameters without torch."""
    code = (
        "import sys\n"
        "from tiedvsuntied.model.accounting import count_parameters_for\n"
        "from tiedvsuntied.model.config import ModelConfig, canonical_init_std\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
