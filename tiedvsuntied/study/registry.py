"""The declared studies: each package ``tiedvsuntied/studies/<name>/`` exposes ``STUDY``, found by
name here (no module of ``tiedvsuntied.study`` imports a study)."""

from __future__ import annotations

import importlib
import pkgutil

from tiedvsuntied.study.declare import Study, StudyError

PACKAGE = "tiedvsuntied.studies"


def names() -> list[str]:
    """Every study package's name, sorted."""
    package = importlib.import_module(PACKAGE)
    return sorted(m.name for m in pkgutil.iter_modules(package.__path__) if m.ispkg)


def study(name: str) -> Study:
    """The study ``name`` declares; an unknown name is one line naming the ones there are."""
    if name not in names():
        raise StudyError(f"unknown study '{name}': {' '.join(names())}")
    found = importlib.import_module(f"{PACKAGE}.{name}").STUDY
    if not isinstance(found, Study) or found.name != name:
        raise StudyError(f"{PACKAGE}.{name}.STUDY is not a Study named '{name}'")
    return found
