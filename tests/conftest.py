"""Shared fixtures: the offline corpus, isolated caches, in-process composition, one real sweep.

Nothing here reaches the network. With ``../shared/data`` beside the checkout (CI, the
developers' machines) the end-to-end tests train on Tiny Shakespeare with the GPT-2
encoding from its tiktoken cache. Without it (a fresh clone elsewhere) they use GPT-2 if
tiktoken can load it (its normal download), else a corpus generated here with the built-in
byte-level encoding (V = 257): every pipeline test still runs. A test about the GPT-2 tokenizer
itself is marked ``needs_gpt2`` and skips, saying why, where it cannot be loaded.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import traceback
from pathlib import Path

import pytest
from fake_corpus import generated_corpus, generated_corpus_dir, generated_library
from filelock import FileLock

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("TIEDVSUNTIED_SHARED_DATA", REPO.parent / "shared" / "data"))
SHAKESPEARE = SHARED_DATA / "tinyshakespeare" / "input.txt"

# Set before anything imports tiktoken; W&B must never try to reach a server from tests.
if (SHARED_DATA / "tiktoken").is_dir():
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(SHARED_DATA / "tiktoken"))
if os.environ.get("WANDB_MODE") != "disabled":  # disabled: a machine without wandb (a GPU's)
    os.environ["WANDB_MODE"] = "offline"
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
# -n auto runs a worker per core: torch's pool of a thread per core in each has them spin against
# each other (test_gpt, test_loss, test_accounting: 34 s of CPU, not 8 s, on 2 busy cores).
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")

from tiedvsuntied.data.config import DataUnavailableError  # noqa: E402
from tiedvsuntied.data.sources import load_encoding  # noqa: E402  (after TIKTOKEN_CACHE_DIR is set)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The order CI's workers take the tests in, one at a time (``-n auto --maxschedchunk=1``):
    one reader of the tiny sweep first (its worker builds the sweep), then the other slow tests,
    so that the long ones start early and none ends the run alone, then the other readers (the
    sweep is built by then), then the rest, module by module."""

    def rank(item: pytest.Item) -> int:
        if "tiny_sweep" in item.fixturenames:
            return 2
        return 1 if item.get_closest_marker("slow") else 3

    items.sort(key=rank)
    readers = [i for i, item in enumerate(items) if rank(item) == 2]
    if readers:
        items.insert(0, items.pop(readers[0]))


@pytest.fixture(autouse=True)
def starts_no_process_unless_slow(request, monkeypatch):
    """``-m "not slow"`` starts no process (and so no command, notebook or sweep): a test that
    does must be marked slow. torch.compile's own workers and compiler probes are torch's, and
    git's reading of a run's provenance (train.setup.code_version, once a process) is the run's."""
    if request.node.get_closest_marker("slow"):
        return
    start = subprocess.Popen._execute_child

    def refuse(self, args, *rest, **kw):
        stack = [frame.filename for frame in traceback.extract_stack()]
        if any(f"{os.sep}torch{os.sep}" in name for name in stack) or args[0] == "git":
            return start(self, args, *rest, **kw)
        raise AssertionError(f"{request.node.name} is not marked slow but starts {args}")

    monkeypatch.setattr(subprocess.Popen, "_execute_child", refuse)


@pytest.fixture(autouse=True)
def own_wandb_service(monkeypatch):
    """Every command a test starts gets its own W&B service, as from a user's shell. A test that
    ran W&B in this process left WANDB_SERVICE in the environment; a child inheriting it shares
    this process's service, where a SIGKILLed child's run stays registered and its rerun is
    refused ("run ID ... is in use")."""
    monkeypatch.delenv("WANDB_SERVICE", raising=False)


def gpt2_available() -> bool:
    """Whether the GPT-2 encoding can be loaded here (cached, or downloadable)."""
    try:
        load_encoding("gpt2")
        return True
    except DataUnavailableError:
        return False


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
# The command's mechanics end to end (resume, signals, launchers, processes): Tiny Shakespeare
# in bytes (V = 257), so a step takes milliseconds and a run little more than its process's
# start. The GPT-2 encoding end to end: the tiny sweep and the quick preset.
BYTE_RUN = [
    "model=nano",
    "data=text",
    f"data.files={CORPUS}",
    "data.encoding=bytes",
    "trainer.batch_size=4",
    "trainer.eval_windows=4",
    "trainer.progress=false",
    "trainer.peak_tflops=1",
]

# A few steps in bytes, for the fine-tuning study's runs.
STEPS = [
    "trainer.max_steps=4",
    "trainer.eval_interval=2",
    "trainer.eval_windows=2",
    "wandb.mode=disabled",
]

# A few quick steps of any config, for in-process runs.
QUICK = [  # in bytes (V = 257): a GPT-2 head (V = 50,257) would be most of a nano run's time
    "model=nano",
    "data=text",
    f"data.files={CORPUS}",
    "data.encoding=bytes",
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


def at_step(step: int, action: str) -> dict:
    """The environment of a command that does ``action`` right after it logs the training loss
    of ``step``: a signal it sends itself (SIGKILL, SIGINT, SIGUSR2) or ``rm:PATH``
    (tests/hooks/sitecustomize.py)."""
    path = [str(REPO / "tests" / "hooks"), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {"PYTHONPATH": os.pathsep.join(path), "TVU_TEST_AT": f"{step} {action}"}


@pytest.fixture(scope="session")
def tiny_sweep(tmp_path_factory, session_cache) -> Path:
    """The user's command run once per session on a tiny model: its sweep directory. With xdist
    the first worker to need it runs it under a lock; the others wait for it and read it."""
    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "tiny_sweep"
    root.mkdir(exist_ok=True)
    with FileLock(str(root / ".lock")):
        if not (root / "done").exists():
            proc = run_cli(
                ["-m", *TINY_SWEEP_OVERRIDES, f"results_dir={root / 'results'}"],
                cwd=root,
                env_extra={"TIEDVSUNTIED_CACHE": str(session_cache)},
            )
            if proc.returncode != 0:
                raise AssertionError(
                    f"tiny sweep failed ({proc.returncode}):\n"
                    f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
                )
            (root / "done").touch()
    return root / "results" / "tiny"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``../shared/data``; tests that are about those very files skip without it."""
    if not SHAKESPEARE.exists():
        pytest.skip(
            f"the shared offline data is not at {SHARED_DATA} (set TIEDVSUNTIED_SHARED_DATA)"
        )
    return SHARED_DATA


# ---------------------------------------------------------------------------- data texts
# Text made here for the data tests (test_sources, test_cache, test_batches, test_data_cli):
# tokenized with the built-in byte-level encoding (token = UTF-8 byte, end-of-text 256).


def words(rng: random.Random, n: int) -> str:
    vocabulary = ["the", "tied", "head", "König", "naïve", "数据", "🙂", "loss", "x=1,", "it's"]
    return " ".join(rng.choice(vocabulary) for _ in range(n))


def wiki_text(n_articles: int = 12, seed: int = 0) -> str:
    """WikiText-like: ' = Title = ' rows between blank rows start articles; section headings and
    a formula row ' = 1 + k = ' inside an article do not."""
    rng, out = random.Random(seed), [" \n"]
    for a in range(n_articles):
        out += [f" = Article {a} = \n", " \n", f" {words(rng, 30)} \n", " = = Section = = \n"]
        out += [" \n", *(f" {words(rng, 40)} \n" for _ in range(rng.randint(3, 8)))]
        out += [" = 1 + k = \n", f" {words(rng, 10)} \n", " \n"]
    return "".join(out)


def play_text(n_lines: int = 3000, seed: int = 1) -> str:
    """Tiny-Shakespeare-like: speaker lines and paragraphs separated by blank lines."""
    rng = random.Random(seed)
    return "".join(
        f"Speaker {i % 7}:\n{words(rng, 8)}\n" + ("\n" if i % 3 == 2 else "")
        for i in range(n_lines)
    )


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def text_config(files=None, **keys):
    """A DataConfig of local text in the byte-level encoding."""
    from tiedvsuntied.data.config import DataConfig

    return DataConfig(
        **{"name": "t", "source": "text", "files": files, "encoding": "bytes", **keys}
    )


def byte_tokens(text: str) -> list[int]:
    return list(text.encode("utf-8"))


def joined(documents: list[str], eot: int = 256) -> list[int]:
    """The byte-level tokens of documents with an end-of-text token between them."""
    out: list[int] = []
    for i, document in enumerate(documents):
        out += ([eot] if i else []) + byte_tokens(document)
    return out


@pytest.fixture(scope="session")
def play(tmp_path_factory) -> Path:
    return write(tmp_path_factory.mktemp("play"), "play.txt", play_text())


@pytest.fixture(scope="session")
def corpus(play, session_cache):
    """play.txt tokenized once per session (tests that delete a cache use their own)."""
    from tiedvsuntied.data.cache import prepare_data

    return prepare_data(text_config(str(play), cache_dir=str(session_cache)))


# ---------------------------------------------------------------------------- tiny models


def tiny(**keys):
    """A ModelConfig small enough to build in milliseconds (V = 97, d = 32, T = 16)."""
    from tiedvsuntied.model.config import ModelConfig

    shape = dict(name="tiny", n_layer=2, n_head=4, n_embd=32, block_size=16, vocab_size=97)
    return ModelConfig(**{**shape, **keys})


def batch(cfg, B: int = 3, seed: int = 0):
    """Random (x, y) token batches of cfg's vocabulary and block size."""
    import torch

    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, cfg.vocab_size, (B, cfg.block_size), generator=g)
    y = torch.randint(0, cfg.vocab_size, (B, cfg.block_size), generator=g)
    return x, y


# ----------------------------------------------------------------- the reading side's results
@pytest.fixture(scope="session")
def fake_sweep(tmp_path_factory) -> Path:
    """Hand-built results (tests/fake_results.py), written once per session and only read (a
    test that changes them copies them first): tie x init std {1.0, 0.036} x seeds {0, 1} on
    nano; one diverged, one running, one failed run."""
    from fake_results import write_sweep

    return write_sweep(
        tmp_path_factory.mktemp("fake") / "sw",
        seeds=(0, 1),
        statuses={
            (True, "1.0", "nano", 1): "diverged",
            (False, "0.036", "nano", 1): "running",
            (False, "1.0", "nano", 1): "failed",
        },
    )


@pytest.fixture(scope="session")
def fig_results(tmp_path_factory):
    """The figures' hand-built results, loaded once: tie x init std {1.0, 0.036} x seeds {0, 1} x
    nano, micro; one diverged, one running, one failed run (fake_results.DIVERGED, ...)."""
    from fake_results import write_sweep

    from tiedvsuntied.analysis.load import load_results

    sweep = write_sweep(
        tmp_path_factory.mktemp("fig") / "sw",
        models=("nano", "micro"),
        seeds=(0, 1),
        statuses={
            (True, "1.0", "micro", 1): "diverged",
            (False, "0.036", "nano", 1): "running",
            (False, "1.0", "nano", 1): "failed",
        },
    )
    return load_results(sweep)


class Drawn(dict):
    """Output name -> (files, figure or None), each made from ``results`` the first time a test
    asks for it, built and not saved (save_figure has its own test; e2e writes every figure): a
    unit test pays for the figures it reads, not all of them."""

    def __init__(self, results, out: Path):
        super().__init__()
        self.results, self.dir = results, out

    def __missing__(self, name: str):
        from tiedvsuntied.figures.cli import REGISTRY

        self[name] = REGISTRY[name].write(self.results, self.dir, [])
        return self[name]


@pytest.fixture(scope="session")
def drawn(fig_results, tmp_path_factory):
    """The figure REGISTRY's outputs of ``fig_results``, each drawn once when first asked for:
    ``outputs`` (a :class:`Drawn`) and ``dir`` (where they are)."""
    from types import SimpleNamespace

    out = tmp_path_factory.mktemp("drawn")
    return SimpleNamespace(outputs=Drawn(fig_results, out), dir=out)


def check_overrides(overrides: list[str]) -> None:
    """The command line's check of its overrides, in process: Hydra's composition (keys, types,
    choices, groups) and the booleans OmegaConf would read from 1/0/yes/no; a mistake is a
    ConfigError of the one line the command prints."""
    from tiedvsuntied.sweep import jobs
    from tiedvsuntied.train.config import ConfigError

    try:
        with jobs.composed(overrides) as (_, master):
            jobs.check_booleans(master, overrides)
    except jobs.SweepError as e:
        raise ConfigError(str(e)) from None


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
