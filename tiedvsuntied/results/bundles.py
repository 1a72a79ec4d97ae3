"""The results bundle's format: a study's runs as shipped with the repository.

A bundle is a sweep directory reduced to what the paper's figures and tables read (so
``analysis.load_results`` reads it like the sweep it came from), plus ``BUNDLE.json``, its
manifest. Format version 1:

- ``BUNDLE.json``: ``format`` ("tiedvsuntied-bundle"), ``version`` (1), ``sweep``, ``made_at``,
  ``commit`` (of the code that made it), ``sources`` (the sweep directories), ``runs`` (how
  many), ``kept`` (the rule below, in words) and ``files`` ({path: sha256}) for a check.
- ``index.json`` and ``<run_id>/`` per run, as in a sweep: ``summary.json``, ``config.yaml``
  and ``metrics.jsonl`` whole (every logged and evaluated step);
  ``probes/step_<step>.npz`` reduced: the per-window validation and test losses at the run's
  best and last step (the paired intervals' comparison points); for the lowest-seed run of
  each cell (model, tie, init std, variant) also the per-token arrays (row norms, in/out
  cosines) and the sampled stratum cosines at its first and last probe, in float16, with
  ``token_freq.npy``. No checkpoints, no W&B files, no sampled embedding rows.

The code that writes one is ``tiedvsuntied.bundle``; this module is what a reader needs.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from tiedvsuntied.results.records import read_json

MANIFEST = "BUNDLE.json"
FORMAT = "tiedvsuntied-bundle"
VERSION = 1


class BundleError(ValueError):
    """A bundle this code cannot read; the message is one line."""


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def read_manifest(path: Path) -> dict | None:
    """The bundle's manifest, None where ``path`` is not a bundle; BundleError where it is one
    of another format or a newer version."""
    manifest_path = Path(path) / MANIFEST
    if not manifest_path.exists():
        return None
    manifest = read_json(manifest_path)
    if manifest is None or manifest.get("format") != FORMAT:
        raise BundleError(
            f"{manifest_path} is not a {FORMAT} manifest (unreadable or other format)"
        )
    if manifest.get("version") != VERSION:
        raise BundleError(
            f"{manifest_path} has format version {manifest.get('version')}; this code reads "
            f"version {VERSION}: update tiedvsuntied or remake the bundle"
        )
    return manifest


def changed_files(path: Path, manifest: dict) -> list[str]:
    """The bundle's files whose content differs from the manifest's checksums (or are gone)."""
    root = Path(path)
    return [
        name
        for name, digest in manifest.get("files", {}).items()
        if not (root / name).is_file() or sha256(root / name) != digest
    ]
