"""The figures' output folder (``--out``), checked before any figure is drawn: one that cannot
take files (a read-only disk, a file in the way) is refused in one line, not once per figure
after the drawing. No torch."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

REFUSED = 2  # the exit code of a refused command, as everywhere in the package


def refuse_unwritable(out: Path) -> None:
    """Exit 2 with one line unless a file can be made in ``out`` (or, where it does not exist
    yet, in its nearest existing folder, where ``out`` will be made). Writes nothing."""
    existing = Path(out).absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    try:
        if not existing.is_dir():
            raise NotADirectoryError(f"{existing} is a file")
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as e:
        why = e.strerror or str(e)
        print(
            f"error: --out {out} cannot take the figures ({existing}: {why}): choose another "
            "folder with --out",
            file=sys.stderr,
        )
        raise SystemExit(REFUSED) from None
