"""A fake sign_flip sweep (issue 40) in the trainer's layout: a V-ladder at the micro body and a
body-ladder at V = 8192, tied and untied at d^-0.5 per seed, each seed holding out its own
books, with the third edition's summary fields (fake_results, ``bytes_per_token``). Tying's
effect is designed to change sign at rho = CROSSOVER: the floor of a tied run is moved by
SLOPE * ln(rho / CROSSOVER) nats against its untied partner."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from fake_results import FakeRun, _params, dump_config, load_config, write_run

LADDER = [("micro", v) for v in (1024, 2048, 4096, 8192, 16384)] + [("d64", 8192), ("d256", 8192)]
CROSSOVER = 0.4  # the rho where tying's designed effect changes sign
SLOPE = 0.3  # nats of tied − untied per unit of ln rho
TIED_SHIFT = 0.15  # what fake_results adds to every tied floor (taken back out here)


def bytes_per_token(vocab_size: int) -> float:
    """A BPE's compression: more bytes per token the larger its vocabulary."""
    return 2.4 + 0.35 * math.log2(vocab_size / 1024)


def rho(model: str, vocab_size: int) -> float:
    """The head's share (tied definition) of a fake run's parameter counts."""
    params = _params(FakeRun(Path("."), model=model, vocab_size=vocab_size))
    head = vocab_size * FakeRun(Path("."), model=model).n_embd
    return head / (head + params["non_embedding"])


def designed_effect(model: str, vocab_size: int) -> float:
    return SLOPE * math.log(rho(model, vocab_size) / CROSSOVER)


def _document_split(run_dir: Path, seed: int, vocab_size: int) -> None:
    """The config of a run that holds out its seed's books, on a BPE of its own vocabulary, with
    the study's schedule (warmup-stable-decay, its last 20% of steps decaying)."""
    config = load_config(run_dir)
    config["data"] |= {"split": "document", "heldout_fold": seed, "encoding": "bpe"}
    config["optim"] = config.get("optim", {}) | {"schedule": "wsd", "decay_frac": 0.2}
    config["data"]["vocab_size"] = vocab_size
    dump_config(run_dir, config)


def write_point(sweep: Path, model: str, vocab: int, seed: int, tie: bool, **kw) -> Path:
    """One run of the ladder (``kw``: FakeRun's fields, e.g. another lr, a floor shift)."""
    shift = designed_effect(model, vocab) - TIED_SHIFT if tie else 0.0
    kw = {"floor_shift": shift, "probes": False, "token_freq": False} | kw
    run_dir = write_run(
        sweep,
        tie=tie,
        init_std=kw.pop("init_std", "inv_sqrt_d"),
        model=model,
        seed=seed,
        vocab_size=vocab,
        bytes_per_token=bytes_per_token(vocab),
        clip_frac=0.02 if tie else 0.01,
        **kw,
    )
    _document_split(run_dir, seed, vocab)
    return run_dir


def write_sign_flip(path: Path, *, seeds=(0, 1, 2, 3), ladder=LADDER, **kw) -> Path:
    """The sweep ``path``/sign_flip: every ladder point x seed x (tied, untied) at d^-0.5."""
    sweep = Path(path) / "sign_flip"
    for (model, vocab), seed, tie in (
        (point, seed, tie) for point in ladder for seed in seeds for tie in (True, False)
    ):
        write_point(sweep, model, vocab, seed, tie, **kw)
    return sweep


# the ends' arms (sign_flip's ends piece) as write_point's keywords, and the shift of each arm's
# floor in nats (tied_input_grad: the remedy helps by 0.05 against tied)
END_ARMS = {
    "tied_input_grad": ({"tie": True, "input_grad_scale": 4.0}, -0.05),
    "t5": ({"tie": True, "init_std": "1.0", "t5_rescale": True}, 0.0),
    "emb1_head_dsqrt": ({"tie": False, "init_std": "1.0", "head_init_std": "inv_sqrt_d"}, 0.0),
}


def write_ends(sweep: Path, model: str, vocab: int, seeds=(0, 1, 2, 3)) -> dict[str, list[Path]]:
    """The ends' arms at one point (tied and untied are write_sign_flip's): arm -> run dirs."""
    out: dict[str, list[Path]] = {}
    for name, (keys, shift) in END_ARMS.items():
        tied_shift = (
            designed_effect(model, vocab) - TIED_SHIFT if name == "tied_input_grad" else 0.0
        )
        for seed in seeds:
            run = write_point(sweep, model, vocab, seed, floor_shift=tied_shift + shift, **keys)
            out.setdefault(name, []).append(run)
    return out


def write_own(sweep: Path, model: str, vocab: int, seeds=(0, 1, 2, 3), gain=0.02) -> list[Path]:
    """Untied at its own multipliers at one point (sign_flip's own piece: emb 4, head 1), ``gain``
    nats better than untied at the shared one."""
    runs = []
    for seed in seeds:
        run = write_point(sweep, model, vocab, seed, False, lr=2e-3, floor_shift=-gain)
        config = load_config(run)
        config["optim"] |= {"emb_lr_mult": 4.0, "head_lr_mult": 1.0}
        dump_config(run, config)
        runs.append(run)
    return runs


def write_gpu_sign_flip(path: Path, *, ladder=(("micro", 50257),), **kw) -> Path:
    """The sweep ``path``/sign_flip_gpu of scripts/gpu/slot.sh's piece a: points on GPT-2's
    tokenizer (not the ladder's trained BPEs), trained on a GPU."""
    sweep = write_sign_flip(path, ladder=list(ladder), **kw).rename(Path(path) / "sign_flip_gpu")
    for summary_path in sweep.glob("*/summary.json"):
        summary = json.loads(summary_path.read_text())
        summary |= {"encoding": "gpt2", "device": "cuda:0", "sweep": sweep.name}
        summary_path.write_text(json.dumps(summary))
    return sweep


_READ_ONLY: dict[str, tuple[Path, Any]] = {}


def read_only_sign_flip(tmp_path_factory) -> tuple[Path, Any]:
    """The default sweep and its loaded results, made once per test process (xdist worker) for
    the modules that only read them (test_sign_flip, test_figures_sign_flip): a test that changes
    them copies them first."""
    if not _READ_ONLY:
        from tiedvsuntied.analysis.load import load_results

        sweep = write_sign_flip(tmp_path_factory.mktemp("sf"))
        _READ_ONLY["sweep"] = (sweep, load_results(sweep))
    return _READ_ONLY["sweep"]
