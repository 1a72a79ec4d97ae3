"""Texts the tests write themselves, for a fresh clone without ../shared: a corpus with roughly
Zipfian word frequencies and a library of documents with data=gutenberg's manifest."""

from __future__ import annotations

import atexit
import itertools
import random
import shutil
import tempfile
from pathlib import Path


def generated_corpus(path: Path, n_words: int = 60_000, seed: int = 0) -> Path:
    """A text with word frequencies roughly Zipfian and line/paragraph structure, made here."""
    rng = random.Random(seed)
    words = [
        "".join(rng.choice("etaoinshrdlucmfwypvbgk") for _ in range(rng.randint(1, 8)))
        for _ in range(3000)
    ]
    # the running sum once, not per line as weights= does: the same draws, 0.42 s -> 0.035 s
    cum_weights = list(itertools.accumulate(1 / (i + 1) for i in range(len(words))))
    lines = [
        " ".join(rng.choices(words, cum_weights=cum_weights, k=rng.randint(4, 14))).capitalize()
        + "."
        for _ in range(n_words // 9)
    ]
    path.write_text(
        "\n".join(line + ("\n" if i % 7 == 6 else "") for i, line in enumerate(lines)) + "\n"
    )
    return path


def generated_corpus_dir() -> Path:
    """A folder for the generated corpus, removed when the test session's process ends."""
    folder = Path(tempfile.mkdtemp(prefix="tvu-corpus-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def generated_library(folder: Path, n_documents: int = 12) -> Path:
    """A folder of documents (one generated text each, one author each but the last two) and
    the MANIFEST.tsv of data=gutenberg's shape, for a fresh clone without ../shared."""
    authors = [f"author{i}" for i in range(n_documents - 1)] + [f"author{n_documents - 2}"]
    rows = ["file\tauthor"]
    for i, author in enumerate(authors):
        generated_corpus(folder / f"{i:02d}-doc.txt", n_words=3000, seed=100 + i)
        rows.append(f"{i:02d}-doc.txt\t{author}")
    (folder / "MANIFEST.tsv").write_text("\n".join(rows) + "\n")
    return folder
