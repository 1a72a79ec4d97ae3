"""Shared fixtures: offline data from ../shared/data, isolated caches, one real tiny sweep.

Nothing here reaches the network: the tiktoken cache and the corpora come from the
``shared/data`` folder that sits beside the checkout (override with TIEDVSUNTIED_SHARED_DATA).
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("TIEDVSUNTIED_SHARED_DATA", REPO.parent / "shared" / "data"))
SHAKESPEARE = SHARED_DATA / "tinyshakespeare" / "input.txt"
WIKITEXT2 = SHARED_DATA / "wikitext-2"

# Set before anything imports tiktoken; W&B must never try to reach a server from tests.
os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(SHARED_DATA / "tiktoken"))
os.environ["WANDB_MODE"] = "offline"
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


def pytest_configure(config):
    if not SHAKESPEARE.exists():
        raise pytest.UsageError(
            f"offline test data not found at {SHARED_DATA} (expected tinyshakespeare/input.txt); "
            "set TIEDVSUNTIED_SHARED_DATA to the shared/data folder"
        )


@pytest.fixture(scope="session")
def shared_data() -> Path:
    return SHARED_DATA


@pytest.fixture(scope="session")
def shakespeare_path() -> Path:
    return SHAKESPEARE


@pytest.fixture(scope="session")
def session_cache(tmp_path_factory) -> Path:
    """One token cache for the whole session, so the corpus is tokenized once."""
    return tmp_path_factory.mktemp("token_cache")


@pytest.fixture(autouse=True)
def _isolated_cache(monkeypatch, session_cache):
    monkeypatch.setenv("TIEDVSUNTIED_CACHE", str(session_cache))


# The user's command on a tiny model: 2 x 2 runs, real Hydra multirun, real offline W&B.
TINY_SWEEP_OVERRIDES = [
    "tie=true,false",
    "init_std=1.0,0.036",
    "model=nano",
    "data=text",
    f"data.files={SHAKESPEARE}",
    "trainer.max_steps=12",
    "trainer.batch_size=4",
    "trainer.eval_interval=6",
    "trainer.eval_windows=8",
    "trainer.log_interval=2",
    "trainer.ckpt_interval=6",
    "trainer.progress=false",
    "wandb.mode=offline",
    "sweep=tiny",
]


def run_cli(args: list[str], cwd: Path, env_extra: dict | None = None, timeout: int = 900):
    env = dict(os.environ)
    env.update(env_extra or {})
    return subprocess.run(
        [sys.executable, "-m", "tiedvsuntied.run", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
    )


@pytest.fixture(scope="session")
def tiny_sweep(tmp_path_factory, session_cache) -> Path:
    """Run the user's command once per session on a tiny model; return the sweep directory."""
    root = tmp_path_factory.mktemp("tiny_sweep")
    proc = run_cli(
        ["-m", *TINY_SWEEP_OVERRIDES, f"results_dir={root / 'results'}"],
        cwd=root, env_extra={"TIEDVSUNTIED_CACHE": str(session_cache)},
    )
    if proc.returncode != 0:
        raise AssertionError(f"tiny sweep failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    return root / "results" / "tiny"
