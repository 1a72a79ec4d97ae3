"""A run's ``checkpoints/`` folder: which files it keeps, how they are written and read.

- ``last.pt``: weights, optimizer, TrainState and RNG states, written when config.Schedule.saves
  says and when a signal stops the run. The file it replaces stays as ``prev.pt`` until the
  next save, so a file cut short (a kill, a full disk) costs the run at most one interval.
- ``best.pt``: the best validation step's weights (with ``trainer.test_eval``), whose test loss
  is taken at the end (early stopping's, without evaluating the test split during training).
- ``model.pt``: the final weights and TrainState, all a finished run keeps (``init_from``).
- ``*.pt.bad``: a file that could not be read, set aside (a later save would otherwise rotate
  it into ``prev.pt``); removed once the run has finished.

An unreadable file falls back to the older one; a readable one that does not fit the model is a
CheckpointMismatch: one line naming the parameter, and no file is changed.
"""

from __future__ import annotations

import logging
import os
import pickle
import textwrap
import zipfile
from pathlib import Path

import torch

from tiedvsuntied.results.io import atomic_write
from tiedvsuntied.results.records import RunSummary, Status, TrainState, fields_of
from tiedvsuntied.results.secrets import scrub
from tiedvsuntied.train.config import ConfigError
from tiedvsuntied.train.finetune import unreadable

log = logging.getLogger(__name__)

UNREADABLE = (RuntimeError, OSError, EOFError, pickle.UnpicklingError, zipfile.BadZipFile)
PARTS = ("model", "optimizer", "train_state", "rng_cpu", "rng_cuda")


class CheckpointMismatch(ConfigError):
    """A readable checkpoint that does not fit this code's model or optimizer."""


def read_checkpoint(path: Path) -> dict | None:
    """The checkpoint in ``path``, or None if it cannot be read (set aside as ``.bad``)."""
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
        if not (isinstance(ckpt, dict) and set(PARTS) <= ckpt.keys()):
            raise EOFError("not a checkpoint of this harness")
    except UNREADABLE as e:
        reason = textwrap.shorten(scrub(f"{type(e).__name__}: {e}"), 200, placeholder=" ...")
        log.warning(
            f"checkpoint {path} is unreadable ({reason}); kept as {path.name}.bad, trying an "
            "older one"
        )
        os.replace(path, path.with_suffix(".pt.bad"))
        return None
    return ckpt


def restore(path: Path, ckpt: dict, model, optimizer, state: TrainState) -> None:
    """Load ``ckpt`` into model, optimizer, state and the RNGs, or raise CheckpointMismatch:
    one line naming what does not fit (torch's own message, which names the parameter)."""
    for part, target in (("model", model), ("optimizer", optimizer)):
        try:
            target.load_state_dict(ckpt[part])
        except (RuntimeError, ValueError, KeyError) as e:
            what = " ".join(str(e).split("\n", 1)[-1].split())
            raise CheckpointMismatch(
                f"checkpoint {path} does not match this code's {part} ({what}). No file was "
                f"changed: resume with the code that wrote it, or delete {path.parent} to train "
                "from step 0"
            ) from None
    # a checkpoint from before cpu_s (starts) existed: its processes' CPU seconds, so the run's,
    # unknown (the code of its steps so far, unrecorded)
    unrecorded = [{"step": 0, "at": None, "git_commit": None, "git_dirty": None}]
    vars(state).update({"cpu_s": None, "starts": unrecorded, **ckpt["train_state"]})
    torch.set_rng_state(ckpt["rng_cpu"])
    if torch.cuda.is_available() and ckpt["rng_cuda"]:
        torch.cuda.set_rng_state_all(ckpt["rng_cuda"])


def is_done(previous: RunSummary | None, folder: Path, name: str) -> bool:
    """Whether the run is done: not a finished run whose ``model.pt`` is there but does not load
    (cut short), which is trained again from step 0."""
    if not (previous and previous.status.done):
        return False
    weights = folder / "model.pt"
    if previous.status != Status.finished or not weights.exists():
        return True
    if (why := unreadable(weights)) is None:
        return True
    log.warning(
        f"[{name}] finished, but {weights} does not load ({why}): training it again from step 0 "
        "(the broken file is kept as model.pt.bad until the run finishes)"
    )
    os.replace(weights, weights.with_suffix(".pt.bad"))
    return False


class Checkpoints:
    """The checkpoints of one run being trained; see the module's docstring for the policy."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.saved_step: int | None = None  # the step of the newest last.pt

    def load(self, model, optimizer, state, layout=lambda ckpt: None, only=None) -> Path | None:
        """Resume from ``last.pt``, else ``prev.pt`` (or ``only`` that file): the file used, or
        None. ``layout(ckpt)`` first reshapes model and optimizer to it (untied on schedule)."""
        self.saved_step = None
        for path in [only] if only else [self.folder / "last.pt", self.folder / "prev.pt"]:
            ckpt = read_checkpoint(path) if path.exists() else None
            if ckpt is None:
                continue
            layout(ckpt)
            restore(path, ckpt, model, optimizer, state)
            self.saved_step = state.step
            return path
        if any(self.folder.glob("*.pt")):
            log.warning("no usable checkpoint in %s: training this run from step 0", self.folder)
        return None

    def save(self, model, optimizer, state: TrainState) -> None:
        """``last.pt`` at this step, once (a second copy would rotate the older one out); the
        one it replaces becomes ``prev.pt``."""
        if self.saved_step == state.step:
            return
        payload = {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "train_state": fields_of(state, TrainState),  # the loop's part of the run's record
            "rng_cpu": torch.get_rng_state(),
            "rng_cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        }
        if (self.folder / "last.pt").exists():
            os.replace(self.folder / "last.pt", self.folder / "prev.pt")
        atomic_write(self.folder / "last.pt", lambda f: torch.save(payload, f))
        self.saved_step = state.step

    def save_best(self, step: int, model) -> None:
        weights = {"step": step, "model": model.state_dict()}
        atomic_write(self.folder / "best.pt", lambda f: torch.save(weights, f))

    def best_weights(self, step: int) -> dict | None:
        """The weights of ``best.pt`` if they are step ``step``'s (a resume can leave an older
        run's best.pt behind), else None."""
        path = self.folder / "best.pt"
        best = torch.load(path, map_location="cpu", weights_only=True) if path.exists() else {}
        return best["model"] if best.get("step") == step else None

    def save_final(self, model, state: TrainState) -> None:
        weights = {"model": model.state_dict(), "train_state": fields_of(state, TrainState)}
        atomic_write(self.folder / "model.pt", lambda f: torch.save(weights, f))

    def finish(self) -> None:
        """The run is over: keep only ``model.pt``."""
        for name in ("last.pt", "prev.pt", "best.pt"):
            (self.folder / name).unlink(missing_ok=True)
        for bad in sorted(self.folder.glob("*.pt.bad")):
            log.info("removing %s: the run finished, it is no longer needed", bad)
            bad.unlink()
