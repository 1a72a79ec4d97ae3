"""Docs cite what exists (issue 56): every relative link and every repository path that a
Markdown file or a docstring or comment of the package cites names a file or folder that is in
the repository.

What is read (MARKDOWN, NOTEBOOKS, PYTHON): README.md, docs/**/*.md, experiments/**/*.md and
the Markdown cells of notebooks/*.ipynb; the docstrings and comments of tiedvsuntied/**/*.py.

What counts as a citation, and where it is looked up:

1. **A relative Markdown link or image**, ``[text](target)``: the target from the citing file's
   folder; its ``#anchor``, where it points into a Markdown file, must be one of that file's
   headings (GitHub's anchors; a bare ``#anchor``, one of the citing file's). A URL
   (``scheme://``, ``mailto:``) is not a repository path, nor is a target that leads out of the
   repository (``../shared``).
2. **A path**: a word with a ``/`` in it (``docs/gpu.md``, ``experiments/sign_flip/HYPOTHESES.md``,
   ``train/trainer.py``, ``results_clip/``), in prose, code spans and code blocks alike (a
   ``key=value`` word is read from its value). It is a repository path when its first part
   names an entry of the repository's root, of the citing file's folder or, for the package's
   Python, of ``tiedvsuntied/`` (there only with a file's suffix or a closing ``/``: a
   ``train/loss`` is a metric); it must then exist under one of those that has that entry
   (a ``*`` must match something). Not repository paths: URLs, absolute and home paths
   (``/tmp/x``, ``~/.cache``), paths that lead out of the repository, placeholders (a part with
   ``<>{}$``, ``...`` or ``…``, or written in capitals: ``SWEEP_DIR``, ``PATH``), and what a
   user's run creates, paths whose first part is a root-anchored name of .gitignore
   (``results/``, ``outputs/``, ``multirun/``, ``wandb/``, ``figures/``), even where a study
   keeps a bundle of the same name in its folder.
3. **A Markdown document by its bare name**, written in capitals as the repository's documents
   are (``HYPOTHESES.md``, ``ARCHITECTURE.md``; a lower-case ``table_*.md`` is a generated
   table): a file of that name must exist somewhere in the repository.

A pre-registration (FROZEN: a study's HYPOTHESES.md and PREDICTIONS.md) is never edited after
its commit, so a path it cites that has since moved is read through MOVED, each target of which
must exist. A path that a documented command creates and no one has shipped yet is read
through CREATED, each of whose folders must exist.
"""

from __future__ import annotations

import ast
import io
import json
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MARKDOWN = ["README.md", "docs/**/*.md", "experiments/**/*.md"]
NOTEBOOKS = "notebooks/*.ipynb"
PYTHON = "tiedvsuntied/**/*.py"
FROZEN = {"HYPOTHESES.md", "PREDICTIONS.md"}
SUFFIXES = {
    "py",
    "md",
    "yaml",
    "json",
    "jsonl",
    "toml",
    "ipynb",
    "sh",
    "tsv",
    "csv",
    "txt",
    "png",
    "pdf",
    "npz",
    "npy",
    "pt",
    "gz",
    "parquet",
    "log",
}
# paths a frozen pre-registration cites that moved after its commit: cited -> where it is now
MOVED = {"tests/test_coverage.py": "tests/unit/test_coverage.py"}
# paths a documented command creates (docs/gpu.md: the GPU slots' bundles), none shipped yet;
# their folder must exist
CREATED = {"experiments/sign_flip/results_gpu", "experiments/sign_flip/results_small"}

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
URL = re.compile(r"\b[a-z][a-z0-9+.-]*://\S+|\bmailto:\S+")
PATH = re.compile(r"(?<![\w/.~$-])(?:\.\.?/)*[\w.*<>{}$-]+(?:/[\w.*<>{}$-]+)+/?")
BARE_MD = re.compile(r"(?<![\w/.-])[A-Z][A-Z0-9_-]*\.md\b")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*$", re.M)
PLACEHOLDER = re.compile(r"[<>{}$…]|\.\.\.|(?:^|/)[A-Z][A-Z0-9_]*[A-Z](?:/|$)")


class Repo:
    """A repository's tree as the rule reads it: its root, its package, the root-anchored names
    of its .gitignore (``/results/``: what a user's run creates) and its documents' names."""

    def __init__(self, root: Path):
        self.root, self.package = root, root / "tiedvsuntied"
        lines = (root / ".gitignore").read_text().splitlines()
        self.ignored = {ln.strip("/") for ln in lines if ln.startswith("/") and "*" not in ln}
        skip = {".git", ".venv", *self.ignored}
        docs = (p.relative_to(root) for p in root.rglob("*.md"))
        self.names = {p.name for p in docs if not skip & set(p.parts)}

    def inside(self, path: Path) -> bool:
        return path.resolve().is_relative_to(self.root)

    def bases(self, source: Path) -> list[Path]:
        """Where a path cited in ``source`` is looked up: its folder, the root, the package."""
        bases = [source.parent, self.root]
        return [*bases, self.package] if source.suffix == ".py" else bases

    def where(self, source: Path) -> str:
        return str(source.relative_to(self.root))


def _entries(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()} if folder.is_dir() else set()


def _exists(base: Path, path: str) -> bool:
    if "*" in path:
        return any(base.glob(path.rstrip("/")))
    return (base / path).exists()


def check_path(repo: Repo, path: str, source: Path) -> str | None:
    """None if ``path`` is no repository path or exists; else why it fails."""
    path = path.rstrip(".,;:")
    if path.startswith(("/", "~")) or PLACEHOLDER.search(path):
        return None
    parts = path.split("/")
    ups = "/".join(p for p in parts if p in (".", ".."))  # a leading ../ moves the base
    first = next(p for p in parts if p not in (".", ".."))
    if not ups and (first in repo.ignored or path.rstrip("/") in CREATED):
        return None
    bases = repo.bases(source)
    if not (path.endswith("/") or "*" in path or Path(path).suffix[1:] in SUFFIXES):
        bases = bases[:2]  # package-relative only with a file's suffix: train/loss is a metric
    anchors = [(b / ups).resolve() for b in bases]
    candidates = [a for a in anchors if repo.inside(a) and first in _entries(a)]
    path = path[len(ups) :].lstrip("/")
    if not candidates or any(_exists(b, path) for b in candidates):
        return None
    return f"{path} (cited in {repo.where(source)}) does not exist"


def headings(path: Path) -> set[str]:
    """The anchors of a Markdown file's headings as GitHub makes them: lower case, every
    character but letters, digits, ``_``, ``-`` and spaces dropped, spaces as ``-``, a repeated
    heading's anchor suffixed ``-1``, ``-2``..."""
    text = FENCE.sub("", path.read_text())
    anchors: list[str] = []
    for heading in HEADING.findall(text):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        n = sum(
            a == slug or a.startswith(f"{slug}-") and a[len(slug) + 1 :].isdigit() for a in anchors
        )
        anchors.append(f"{slug}-{n}" if n else slug)
    return set(anchors)


def check_link(repo: Repo, target: str, source: Path) -> str | None:
    """None if a Markdown link's ``target`` is no repository path or exists (with its anchor,
    where it points into a Markdown file)."""
    target, _, anchor = target.partition("#")
    if URL.match(target) or target.startswith("mailto:"):
        return None
    where = (source.parent / target).resolve() if target else source
    if not repo.inside(where):
        return None
    if not where.exists():
        return f"link {target} (in {repo.where(source)}) does not exist"
    if anchor and where.suffix == ".md" and anchor not in headings(where):
        return f"link {target}#{anchor} (in {repo.where(source)}) names no heading there"
    return None


def citations_in(repo: Repo, text: str, source: Path) -> list[str]:
    """Why each citation of ``text`` (from ``source``) fails; empty where every one exists."""
    errors = [check_link(repo, t, source) for t in LINK.findall(text)]
    text = URL.sub(" ", LINK.sub(" ", text))
    if source.name in FROZEN:
        for cited, now in MOVED.items():
            text = text.replace(cited, now)
    errors += [check_path(repo, w.split("=")[-1], source) for w in PATH.findall(text)]
    errors += [
        f"{n} (cited in {repo.where(source)}) is in no folder of the repository"
        for n in BARE_MD.findall(text)
        if n not in repo.names
    ]
    return [e for e in errors if e]


def python_text(path: Path) -> str:
    """The docstrings and comments of a module."""
    source = path.read_text()
    tree = ast.parse(source)
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    docs = [ast.get_docstring(n) or "" for n in ast.walk(tree) if isinstance(n, kinds)]
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    comments = [t.string for t in tokens if t.type == tokenize.COMMENT]
    return "\n".join([*docs, *comments])


def notebook_text(path: Path) -> str:
    """The Markdown cells of a notebook."""
    cells = json.loads(path.read_text())["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")


def sources() -> list[Path]:
    found = {p for pattern in [*MARKDOWN, NOTEBOOKS, PYTHON] for p in ROOT.glob(pattern)}
    return sorted(p for p in found if not {".venv", "__pycache__"} & set(p.parts))


def text_of(path: Path) -> str:
    readers = {".py": python_text, ".ipynb": notebook_text}
    return readers.get(path.suffix, Path.read_text)(path)


REPO = Repo(ROOT)


@pytest.mark.parametrize("source", sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_cited_path_exists(source: Path):
    assert citations_in(REPO, text_of(source), source) == []


def test_every_moved_path_points_to_a_file_that_exists():
    assert [now for now in MOVED.values() if not (ROOT / now).exists()] == []


def test_every_created_path_is_in_a_folder_that_exists():
    assert [p for p in CREATED if not (ROOT / p).parent.is_dir()] == []


def test_a_removed_cited_file_fails(tmp_path: Path):
    """A README citing a document by link, by path and by name passes while the document is
    there and fails at each once it is removed; what is not a repository path (a run's
    output, an absolute path, a placeholder, a URL) is not checked."""
    (tmp_path / ".gitignore").write_text("/results/\n")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "GUIDE.md").write_text("# guide\n")
    readme = tmp_path / "README.md"
    readme.write_text(
        "[guide](docs/GUIDE.md), `docs/GUIDE.md`, GUIDE.md, [its part](docs/GUIDE.md#guide); "
        "not checked: `results/quick/`, "
        "`/tmp/x`, `docs/<run_id>/x`, `docs/SWEEP_DIR/x`, https://example.org/docs/nothing.md\n"
    )
    assert citations_in(Repo(tmp_path), readme.read_text(), readme) == []
    (tmp_path / "docs" / "GUIDE.md").unlink()
    assert len(citations_in(Repo(tmp_path), readme.read_text(), readme)) == 4


def test_a_link_to_a_heading_that_is_gone_fails(tmp_path: Path):
    """An anchor names a heading of its file (GitHub's slug, repeats suffixed): renaming the
    heading breaks the link."""
    (tmp_path / ".gitignore").write_text("")
    guide = tmp_path / "GUIDE.md"
    guide.write_text("# The first sweep (2 min)\n\n## Step\n\n## Step\n")
    readme = tmp_path / "README.md"
    links = "[a](GUIDE.md#the-first-sweep-2-min) [b](GUIDE.md#step-1) [c](#top)\n\n# Top\n"
    readme.write_text(links)
    assert citations_in(Repo(tmp_path), links, readme) == []
    guide.write_text("# The first hour\n\n## Step\n")
    assert len(citations_in(Repo(tmp_path), links, readme)) == 2
