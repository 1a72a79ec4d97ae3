"""The studies beside the core (tiedvsuntied/studies/<study>/): the figures CLI finds each by
name, each output belongs to its study by registration, and no generic layer names or imports
one."""

from __future__ import annotations

import ast
from pathlib import Path

import tiedvsuntied.figures.cli  # noqa: F401  (imports every family and study, as the CLI)
from tiedvsuntied.figures import paper
from tiedvsuntied.figures.style import REGISTRY

PACKAGE = Path(tiedvsuntied.figures.cli.__file__).parents[1]
GENERIC = ["analysis", "figures", "train", "model", "data", "results"]


def test_every_study_is_found_and_its_outputs_make_its_section_of_the_paper_in_order():
    studies = paper.discover()
    assert studies == sorted(
        p.name
        for p in (PACKAGE / "studies").iterdir()
        if p.is_dir() and (p / "__init__.py").exists()
    )
    owners = {output.study for output in REGISTRY.values()} - {None}
    assert owners <= set(studies) and set(paper.SECTIONS) <= set(studies)
    order = [s.study for s in paper.sections()]
    firsts = [paper.outputs().index(paper.section_outputs(paper.SECTIONS[s])[0]) for s in order]
    assert firsts == sorted(firsts)  # each section's outputs together, in rank order


def test_no_generic_module_names_or_imports_a_study():
    studies = paper.discover()
    for layer in GENERIC:
        for path in (PACKAGE / layer).rglob("*.py"):
            text = path.read_text()
            assert not [s for s in studies if s in text.lower()], path
            imported = [
                node.module or ""
                for node in ast.walk(ast.parse(text))
                if isinstance(node, ast.ImportFrom)
            ] + [
                alias.name
                for node in ast.walk(ast.parse(text))
                if isinstance(node, ast.Import)
                for alias in node.names
            ]
            assert not [m for m in imported if m.startswith(paper.STUDIES_PACKAGE)], path
