"""The user's command as the README prints it, on a machine with no network and nothing beside
the checkout (issue 56): the default corpus and tokenizer are shipped with the package, so it
trains with nothing downloaded and nothing read from ``../shared``."""

from __future__ import annotations

import json
import os
import sys

import pytest
from conftest import REPO, SHARED_DATA, at_step

from tiedvsuntied.data.config import SHIPPED

USER_COMMAND = ["-m", "tie=true,false", "init_std=1.0,0.036"]
NO_NETWORK = "http://127.0.0.1:9"  # a closed port: every request fails at once


def fresh_machine_env(tmp_path) -> dict:
    """No network, an empty home and caches, no tokenizer cache, no W&B key or mode: a fresh
    machine's; ``../shared`` (and any other copy of the data) cannot be read."""
    drop = ("TIKTOKEN_CACHE_DIR", "WANDB_MODE", "WANDB_API_KEY", "TIEDVSUNTIED_CACHE", "HF_HOME")
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("HF_")}
    proxies = ("https_proxy", "HTTPS_PROXY", "http_proxy", "HTTP_PROXY")
    env.update(dict.fromkeys(proxies, NO_NETWORK), no_proxy="", NO_PROXY="")
    env.update(HOME=str(tmp_path / "home"), XDG_CACHE_HOME=str(tmp_path / "home" / ".cache"))
    env.update(TVU_TEST_FORBID=str(SHARED_DATA.parent))
    return env


@pytest.mark.slow
def test_the_users_command_trains_offline_on_the_shipped_corpus(tmp_path):
    """``python -m tiedvsuntied.run -m tie=true,false init_std=1.0,0.036`` exactly: the first run
    logs its step-0 evaluation on Tiny Shakespeare in GPT-2 tokens; a Ctrl-C after step 1 (at the
    same step whatever the load) ends the sweep, which a rerun would resume."""
    import subprocess

    env = fresh_machine_env(tmp_path)
    env.update(at_step(1, "SIGINT"))
    proc = subprocess.run(
        [sys.executable, "-m", "tiedvsuntied.run", *USER_COMMAND],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 130, out[-3000:]
    assert "interrupted at step 1" in out and "Traceback" not in out
    (run_dir,) = [p.parent for p in (tmp_path / "results" / "default").glob("*/config.yaml")]
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert records[0]["step"] == 0 and records[0]["val/loss"] > 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["vocab_size"] == 50257 and summary["wandb_mode"] == "offline"
    config = (run_dir / "config.yaml").read_text()
    assert f"files: {SHIPPED / 'tinyshakespeare.txt'}" in config
    assert not list((tmp_path / "home").rglob("tiktoken*"))  # nothing fetched or copied


@pytest.mark.slow
def test_the_forbidden_folder_is_unreadable_in_the_command(tmp_path):
    """The guard above is real: a command told to read ``../shared``'s corpus is refused."""
    import subprocess

    if not SHARED_DATA.is_dir():
        pytest.skip(f"no {SHARED_DATA} to forbid")
    corpus = SHARED_DATA / "tinyshakespeare" / "input.txt"
    proc = subprocess.run(
        [sys.executable, "-m", "tiedvsuntied.run", "data=text", f"data.files={corpus}"],
        cwd=tmp_path,
        env={**fresh_machine_env(tmp_path), "PYTHONPATH": f"{REPO / 'tests' / 'hooks'}:{REPO}"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2 and "cannot read" in proc.stderr, proc.stderr[-2000:]
