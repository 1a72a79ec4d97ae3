"""Credentials kept out of what a run writes (logs, config.yaml, summary.json, W&B): one
scrubber for every writer. No torch."""

from __future__ import annotations

import os
import re

_SECRET = re.compile(r"(?i)(api[_-]?key|token|secret|password)(\s*[=:]\s*)\S+")
_KEY_SHAPE = re.compile(r"\b[0-9a-f]{40}\b")  # the shape of a W&B API key


def scrub(text: str) -> str:
    """``text`` without credentials: secret-looking environment values, key=value secrets."""
    for name, value in os.environ.items():
        if len(value) >= 8 and re.search("KEY|TOKEN|SECRET|PASSWORD", name.upper()):
            text = text.replace(value, "***")
    return _KEY_SHAPE.sub("***", _SECRET.sub(r"\1\2***", text))
