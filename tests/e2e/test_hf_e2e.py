"""The end-to-end tests of tests/unit/test_hf.py: they start processes or train runs to the
end."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_unreachable_hub_fails_fast_and_says_what_to_do(monkeypatch, tmp_path):
    # A fresh interpreter: huggingface_hub reads HF_HUB_OFFLINE when it is imported.
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf")}  # an empty cache
    code = (
        "import time\n"
        "from tiedvsuntied.model.hf import from_pretrained\n"
        "start = time.monotonic()\n"
        "try:\n"
        "    from_pretrained('tiedvsuntied-tests/no-such-model')\n"
        "except OSError as e:\n"
        "    print(f'{time.monotonic() - start:.2f}'); print(e)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )  # the guard: a hanging download fails the test
    assert proc.returncode == 0 and proc.stdout, proc.stderr  # OSError raised and caught
    seconds, message = proc.stdout.split("\n", 1)
    assert float(seconds) < 20, f"took {seconds} s to fail"
    # (a repo that does not exist: where the Hub is reachable this fails fast too, no download)
    assert "tiedvsuntied-tests/no-such-model" in message and "local directory" in message
