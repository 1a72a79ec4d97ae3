"""The code's budgets (README, "Contributing"), measured on the files as `ruff format` leaves
them (CI checks `ruff format --check` first): no module over 450 lines, no function over 60, and
no formatter pragma that packs lines to meet a number. Complexity is ruff's C901 (pyproject)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FOLDERS = ("tiedvsuntied", "tests", "experiments", "scripts")
MAX_MODULE, MAX_FUNCTION = 450, 60
PRAGMA = re.compile(r"#\s*fmt:\s*(skip|off)\b")


def modules() -> list[Path]:
    return sorted(p for folder in FOLDERS for p in (REPO / folder).rglob("*.py"))


def test_every_module_and_function_is_within_its_budget_and_none_opts_out_of_the_formatter():
    over, pragmas = [], []
    for path in modules():
        text, name = path.read_text(encoding="utf-8"), path.relative_to(REPO)
        if text.count("\n") > MAX_MODULE:
            over.append(f"{name}: {text.count(chr(10))} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION:
                    over.append(f"{name}:{node.lineno} {node.name}: {length} lines")
        pragmas += [
            f"{name}:{i}" for i, line in enumerate(text.splitlines(), 1) if PRAGMA.search(line)
        ]
    assert len(modules()) > 100  # the walk found the package, not an empty folder
    assert not over, "over budget:\n" + "\n".join(over)
    assert not pragmas, "formatter pragmas (let ruff format the lines):\n" + "\n".join(pragmas)
