"""Writing a result file so that no reader or kill sees it torn, and JSON both ways (nan and
enums as strings): the one writer of every file the package leaves (records, checkpoints, data
caches). No torch."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Any, BinaryIO


def atomic_write(path: Path, data: bytes | str | Callable[[BinaryIO], Any]) -> None:
    """Write ``data`` (or what ``data(file)`` writes, e.g. ``lambda f: torch.save(obj, f)``)
    to ``path`` so that a reader, or a kill, sees the old file or the new one, never a torn
    one: temporary file, fsync, rename. The one writer of every result file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "wb") as f:
        if callable(data):
            data(f)
        else:
            f.write(data.encode() if isinstance(data, str) else data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def jsonable(value: Any) -> Any:
    """nan/inf become strings (JSON has no such numbers), enums their values, 0-d arrays numbers."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        return jsonable(value.item())
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    return value


def write_json(path: Path, obj: Any) -> None:
    atomic_write(path, json.dumps(jsonable(obj), indent=2, sort_keys=True, default=str) + "\n")


def read_json(path: Path) -> dict | None:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
