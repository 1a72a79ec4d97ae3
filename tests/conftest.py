"""Shared fixtures: the offline corpus, isolated caches, in-process composition, one real sweep.

Nothing here reaches the network. With ``../shared/data`` beside the checkout (CI, the
developers' machines) the end-to-end tests train on Tiny Shakespeare with the GPT-2
encoding from its tiktoken cache. Without it (a fresh clone elsewhere) they use GPT-2 if
tiktoken can load it (its normal download), else a corpus generated here with the built-in
byte-level encoding (V = 257): every pipeline test still runs. A test about the GPT-2 tokenizer
itself is marked ``needs_gpt2`` and skips, saying why, where it cannot be loaded.
"""

from __future__ import annotations

import atexit
import os
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("TIEDVSUNTIED_SHARED_DATA", REPO.parent / "shared" / "data"))
SHAKESPEARE = SHARED_DATA / "tinyshakespeare" / "input.txt"

# Set before anything imports tiktoken; W&B must never try to reach a server from tests.
if (SHARED_DATA / "tiktoken").is_dir():
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(SHARED_DATA / "tiktoken"))
os.environ["WANDB_MODE"] = "offline"
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

from tiedvsuntied.data import gpt2_available  # noqa: E402  (after TIKTOKEN_CACHE_DIR is set)


def generated_corpus(path: Path, n_words: int = 60_000, seed: int = 0) -> Path:
    """A text with word frequencies roughly Zipfian and line/paragraph structure, made here."""
    rng = random.Random(seed)
    words = [
        "".join(rng.choice("etaoinshrdlucmfwypvbgk") for _ in range(rng.randint(1, 8)))
        for _ in range(3000)
    ]
    weights = [1 / (i + 1) for i in range(len(words))]
    lines = [
        " ".join(rng.choices(words, weights, k=rng.randint(4, 14))).capitalize() + "."
        for _ in range(n_words // 9)
    ]
    path.write_text(
        "\n".join(line + ("\n" if i % 7 == 6 else "") for i, line in enumerate(lines)) + "\n"
    )
    return path


def generated_corpus_dir() -> Path:
    """A folder for the generated corpus, removed when the test session's process ends."""
    folder = Path(tempfile.mkdtemp(prefix="tvu-corpus-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


GPT2 = gpt2_available()
USE_GPT2 = SHAKESPEARE.exists() and GPT2
CORPUS = SHAKESPEARE if USE_GPT2 else generated_corpus(generated_corpus_dir() / "corpus.txt")
# For a test about the GPT-2 tokenizer itself: a fresh clone offline has no copy of it.
needs_gpt2 = pytest.mark.skipif(
    not GPT2,
    reason="the GPT-2 tokenizer cannot be loaded here (offline and not cached): "
    "set TIKTOKEN_CACHE_DIR=../shared/data/tiktoken",
)
CORPUS_OVERRIDES = [
    "data=text",
    f"data.files={CORPUS}",
    *([] if USE_GPT2 else ["data.encoding=bytes"]),
]
VOCAB = 50257 if USE_GPT2 else 257


def generated_library(folder: Path, n_documents: int = 12) -> Path:
    """A folder of documents (one generated text each, one author each but the last two) and
    the MANIFEST.tsv of data=gutenberg's shape, for a fresh clone without ../shared."""
    authors = [f"author{i}" for i in range(n_documents - 1)] + [f"author{n_documents - 2}"]
    rows = ["file\tauthor"]
    for i, author in enumerate(authors):
        generated_corpus(folder / f"{i:02d}-doc.txt", n_words=3000, seed=100 + i)
        rows.append(f"{i:02d}-doc.txt\t{author}")
    (folder / "MANIFEST.tsv").write_text("\n".join(rows) + "\n")
    return folder


GUTENBERG = SHARED_DATA / "gutenberg"
LIBRARY = (
    GUTENBERG if USE_GPT2 and GUTENBERG.is_dir() else generated_library(generated_corpus_dir())
)
# data=gutenberg on the real books, or on documents made here
LIBRARY_OVERRIDES = [
    f"data.files={LIBRARY}",
    f"data.manifest={LIBRARY / 'MANIFEST.tsv'}",
    *([] if USE_GPT2 else ["data.encoding=bytes"]),
]

# The user's command on a tiny model: 2 x 2 runs, real Hydra multirun, real offline W&B.
TINY_SWEEP_OVERRIDES = [
    "tie=true,false",
    "init_std=1.0,0.036",
    "model=nano",
    *CORPUS_OVERRIDES,
    "trainer.max_steps=12",
    "trainer.batch_size=4",
    "trainer.eval_interval=6",
    "trainer.eval_windows=8",
    "trainer.log_interval=2",
    "trainer.ckpt_interval=6",
    "trainer.progress=false",
    "trainer.peak_tflops=1",  # a tiny run need not measure the machine's matmul peak (~10%)
    "wandb.mode=offline",
    "sweep=tiny",
]
# The sweep an experiment writes into, where it is not the experiment's own name.
SWEEP_NAMES = {
    "finetune": "ft",
    "finetune_pretrain": "ft_pretrain",
    "t5_rescale": "tie_x_init",
    "tie_x_init_books_arms": "tie_x_init_books",
}
# A few quick steps of any config, for in-process runs.
QUICK = [
    "model=nano",
    *CORPUS_OVERRIDES,
    "trainer.max_steps=4",
    "trainer.batch_size=2",
    "trainer.eval_interval=2",
    "trainer.eval_windows=2",
    "trainer.log_interval=2",
    "trainer.progress=false",
    "trainer.peak_tflops=1",
    "wandb.mode=disabled",
]


def compose(*overrides: str):
    """The typed ``train.Config`` exactly as ``python -m tiedvsuntied.run`` builds it."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from omegaconf import OmegaConf

    import tiedvsuntied.run  # noqa: F401  (registers the schema)

    with initialize_config_dir(str(REPO / "conf"), version_base="1.3"):
        return OmegaConf.to_object(hydra_compose("config", overrides=list(overrides)))


@pytest.fixture(scope="session")
def session_cache(tmp_path_factory) -> Path:
    """One token cache for the whole session, so the corpus is tokenized once."""
    return tmp_path_factory.mktemp("token_cache")


@pytest.fixture(autouse=True)
def _isolated_cache(monkeypatch, session_cache):
    monkeypatch.setenv("TIEDVSUNTIED_CACHE", str(session_cache))


def run_cli(args: list[str], cwd: Path, env_extra: dict | None = None, timeout: int = 900):
    env = {**os.environ, **(env_extra or {})}
    return subprocess.run(
        [sys.executable, "-m", "tiedvsuntied.run", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="session")
def tiny_sweep(tmp_path_factory, session_cache) -> Path:
    """Run the user's command once per session on a tiny model; return the sweep directory."""
    root = tmp_path_factory.mktemp("tiny_sweep")
    proc = run_cli(
        ["-m", *TINY_SWEEP_OVERRIDES, f"results_dir={root / 'results'}"],
        cwd=root,
        env_extra={"TIEDVSUNTIED_CACHE": str(session_cache)},
    )
    if proc.returncode != 0:
        raise AssertionError(
            f"tiny sweep failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
        )
    return root / "results" / "tiny"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``../shared/data``; tests that are about those very files skip without it."""
    if not SHAKESPEARE.exists():
        pytest.skip(
            f"the shared offline data is not at {SHARED_DATA} (set TIEDVSUNTIED_SHARED_DATA)"
        )
    return SHARED_DATA


def stop_after_checkpoint(monkeypatch, step: int) -> None:
    """SIGTERM (as a scheduler sends it) right after the checkpoint of ``step``."""
    import os
    import signal

    from tiedvsuntied.train.checkpoint import Checkpoints

    real = Checkpoints.save

    def save_then_sigterm(self, *args):
        real(self, *args)
        if self.saved_step == step:
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(Checkpoints, "save", save_then_sigterm)
