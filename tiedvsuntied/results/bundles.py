"""The results bundle's format (a study's runs as shipped with the repository; its layout and
manifest: docs/ARCHITECTURE.md, "Results bundle"): what a reader needs. The writer is
``tiedvsuntied.bundle``."""

from __future__ import annotations

import hashlib
from pathlib import Path

from tiedvsuntied.results.io import read_json

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
        raise BundleError(f"{manifest_path} is not a {FORMAT} manifest (unreadable or other)")
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
