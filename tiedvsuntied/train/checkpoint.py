"""Checkpoints: ``last.pt`` and ``prev.pt`` of a run, written atomically."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import torch

from tiedvsuntied.results import atomic_write, scrub

log = logging.getLogger(__name__)


def save_checkpoint(ckpt_dir: Path, model, optimizer, state) -> None:
    """``last.pt`` (weights, optimizer, ``state.state_dict()``, RNGs); the one it replaces stays as ``prev.pt`` until the next save, so a file cut
    short (a kill, a full disk) or corrupted later never costs the run more than one interval."""
    payload = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "train_state": state.state_dict(),
        "rng_cpu": torch.get_rng_state(),
        "rng_cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }
    if (ckpt_dir / "last.pt").exists():
        os.replace(ckpt_dir / "last.pt", ckpt_dir / "prev.pt")
    atomic_write(ckpt_dir / "last.pt", lambda f: torch.save(payload, f))


def load_checkpoint(ckpt_dir: Path, model, optimizer, state, layout=None) -> Path | None:
    """Resume from ``last.pt``, else ``prev.pt``; a bad file is named and skipped. Returns the
    file used, or None (start over). ``layout(ckpt)`` may first reshape model and optimizer to
    the checkpoint's (a run untied on schedule)."""
    for path in (ckpt_dir / "last.pt", ckpt_dir / "prev.pt"):
        if not path.exists():
            continue
        try:
            ckpt = torch.load(path, map_location="cpu", weights_only=True)
            if layout is not None:
                layout(ckpt)
            model.load_state_dict(ckpt["model"])
            optimizer.load_state_dict(ckpt["optimizer"])
        except Exception as e:  # truncated zip, wrong keys, ...: any of them means unusable
            log.warning(
                "checkpoint %s is unreadable (%s); kept as %s.bad, trying an older one",
                path,
                scrub(f"{type(e).__name__}: {e}")[:200],
                path.name,
            )
            os.replace(
                path, path.with_suffix(".pt.bad")
            )  # so the next save cannot rotate it into prev.pt
            continue
        state.load_state_dict(ckpt["train_state"])
        torch.set_rng_state(ckpt["rng_cpu"])
        if torch.cuda.is_available() and ckpt["rng_cuda"]:
            torch.cuda.set_rng_state_all(ckpt["rng_cuda"])
        return path
    if any(ckpt_dir.glob("*.pt")):
        log.warning("no usable checkpoint in %s: training this run from step 0", ckpt_dir)
    return None
