"""The paper that ``python -m tiedvsuntied.figures --paper`` makes: which outputs, in which
order, from which shipped bundles. Each study is a package under STUDIES_PACKAGE
(tiedvsuntied/studies/<study>/): its output modules register their outputs with
``@style.figure(..., study=...)`` and its part of the paper with :func:`register`;
:func:`discover` imports them by name, so that this package names no study."""

from __future__ import annotations

import importlib
import pkgutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from tiedvsuntied.figures.style import REGISTRY

STUDIES_PACKAGE = "tiedvsuntied.studies"  # one package per study, beside the core
OUTPUT_MODULES = ("figures", "tables")  # the modules of a study's package that register outputs
REPO = Path(__file__).resolve().parents[2]  # the package's parent: the checkout


@dataclass(frozen=True)
class Section:
    """One study's part of the paper: its outputs (those registered with its name) and ``also``
    (outputs of every study drawn from its bundles) come after those of a lower ``rank``, drawn
    from its shipped ``bundles`` (relative to the checkout) and ``more_bundles`` where they
    exist, its runs on their own. Without its bundles --paper stops, saying how to make them,
    where ``required``, else skips its outputs in one line. ``sweeps``: the name prefixes of the
    sweeps whose runs are the study's (another study's outputs leave them out)."""

    study: str
    rank: int
    bundles: tuple[str, ...]
    more_bundles: tuple[str, ...] = ()
    required: bool = True
    also: tuple[str, ...] = ()
    sweeps: tuple[str, ...] = ()


SECTIONS: dict[str, Section] = {}


def register(section: Section) -> Section:
    """Put ``section`` in the paper (a study's output module calls it once)."""
    SECTIONS[section.study] = section
    return section


def discover() -> list[str]:
    """Import the output modules (OUTPUT_MODULES) of every study package, so that their outputs
    and sections register; the studies' names."""
    package = importlib.import_module(STUDIES_PACKAGE)
    studies = sorted(m.name for m in pkgutil.iter_modules(package.__path__) if m.ispkg)
    for study in studies:
        study_package = importlib.import_module(f"{STUDIES_PACKAGE}.{study}")
        for module in pkgutil.iter_modules(study_package.__path__):
            if module.name in OUTPUT_MODULES:
                importlib.import_module(f"{study_package.__name__}.{module.name}")
    return studies


def of_other_studies(runs: pd.DataFrame, study: str) -> pd.Series:
    """Whether each run is of a sweep of another study than ``study`` (its Section.sweeps)."""
    discover()
    prefixes = tuple(p for s in SECTIONS.values() if s.study != study for p in s.sweeps)
    if "sweep" not in runs or not prefixes:
        return pd.Series(False, index=runs.index)
    return runs["sweep"].astype(str).str.startswith(prefixes)


def sections() -> list[Section]:
    """The registered sections in the paper's order."""
    return sorted(SECTIONS.values(), key=lambda s: (s.rank, s.study))


def section_outputs(section: Section) -> list[str]:
    """A section's outputs: its study's, by name, then ``also``."""
    own = sorted(name for name, output in REGISTRY.items() if output.study == section.study)
    return [*own, *section.also]


def outputs() -> tuple[str, ...]:
    """The paper's outputs in its order: each section's in turn."""
    return tuple(name for section in sections() for name in section_outputs(section))


def bundles() -> list[str]:
    """Every section's shipped bundles, in the paper's order."""
    return [b for section in sections() for b in section.bundles]


def missing_required() -> list[Path]:
    """The bundles of required sections that are not in the checkout, each said in one line
    with the command that makes it."""
    missing = [REPO / b for s in sections() if s.required for b in s.bundles]
    missing = [path for path in missing if not path.is_dir()]
    for path in missing:
        make = f"python -m tiedvsuntied.bundle results/{path.parent.name} {path.relative_to(REPO)}"
        how = f"make it from the finished sweep with `{make}`, or pass SWEEP_DIR"
        print(f"error: no results bundle at {path}: {how}", file=sys.stderr)
    return missing


def groups(only: Sequence[str]) -> list[tuple[list[str], list[str]]] | None:
    """(dirs, outputs) to load and write one group at a time: each section's bundles with its
    outputs among ``only``, in the paper's order; an output of no section goes with the first
    required section's. None if a required section's bundle is missing (said, with how to make
    it); a section whose bundle is not shipped yet is skipped in one line."""
    if missing_required():
        return None
    order = sections()
    host = next((s for s in order if s.required), order[0] if order else None)
    claimed = {name for s in order for name in section_outputs(s)}
    out = []
    for section in order:
        names = set(section_outputs(section)) | (
            (set(only) - claimed) if section is host else set()
        )
        names = [name for name in only if name in names]
        if not names:
            continue
        absent = [REPO / b for b in section.bundles if not (REPO / b).is_dir()]
        if absent:
            print(f"{', '.join(names)}: skipped: no results bundle at {absent[0]} yet")
            continue
        more = [b for b in section.more_bundles if (REPO / b).is_dir()]
        out.append(([str(REPO / b) for b in (*section.bundles, *more)], names))
    return out
