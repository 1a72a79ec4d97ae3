"""What the tests of documents held out whole (test_books, test_bpe) build alike, not fixtures
(tests/conftest.py holds those): a library of documents made here with data=gutenberg's
manifest, its DataConfig, and a quick in-process run on it."""

from __future__ import annotations

import csv
import dataclasses
import importlib.util
from collections.abc import Callable
from pathlib import Path

import pandas as pd
from conftest import QUICK, REPO, compose
from fake_corpus import generated_corpus

from tiedvsuntied.data.config import DataConfig
from tiedvsuntied.sweep import jobs


def write_library(folder: Path, authors: list[str], n_words: Callable[[int], int]) -> Path:
    """Document i of ``authors[i]`` ("{i:02d}-{author}.txt", ``n_words(i)`` generated words of
    seed i) and the MANIFEST.tsv naming each one's author, as data=gutenberg reads them."""
    names = [f"{i:02d}-{author}.txt" for i, author in enumerate(authors)]
    for i, name in enumerate(names):
        generated_corpus(folder / name, n_words=n_words(i), seed=i)
    with open(folder / "MANIFEST.tsv", "w", newline="") as f:
        writer = csv.writer(f, delimiter="\t")
        writer.writerow(["file", "author"])
        writer.writerows(zip(names, authors, strict=True))
    return folder


def books(library: Path, **keys) -> DataConfig:
    """The library's documents held out whole by author in 3 folds; ``keys`` win."""
    base = {"files": str(library), "name": "books", "source": "text", "documents": "file"}
    base |= {"split": "document", "folds": 3, "manifest": str(library / "MANIFEST.tsv")}
    return DataConfig(**{**base, "group_by": "author", **keys})


def books_run(library: Path, results_dir: Path, *overrides: str):
    """The typed config of a QUICK run (tests/conftest.py) on data=gutenberg over the library's
    documents in 3 folds, written under ``results_dir``: ``overrides`` name the encoding and the
    evaluation windows (QUICK's data and trainer.eval_windows are left out for them)."""
    quick = [o for o in QUICK if not o.startswith(("data", "trainer.eval_windows"))]
    library_keys = [f"data.files={library}", f"data.manifest={library / 'MANIFEST.tsv'}"]
    return compose(
        *quick,
        "data=gutenberg",
        *library_keys,
        "data.folds=3",
        f"results_dir={results_dir}",
        *overrides,
    )


def sweep_jobs(*overrides: str) -> list:
    """The jobs of ``-m *overrides`` (Hydra's basic sweeper expands the experiment's sweep
    params, the command line wins), each composed as the launcher composes it and checked, as
    the command checks them before its first job: their RunPlans."""
    with jobs.composed(list(overrides)) as (loader, master):
        return jobs.check_jobs(loader, master, jobs.expand(loader, master))


def script_module(path: Path):
    """A study's script (experiments/<study>/<name>.py, no package) imported as a module."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def moved(study, tmp_path: Path, table: pd.DataFrame | None = None):
    """The study with its home (lr table, bundles) in ``tmp_path``."""
    home = tmp_path / "experiments" / study.name
    home.mkdir(parents=True)
    if table is not None:
        table.to_csv(home / "lr_choice.tsv", sep="\t", index=False)
    return dataclasses.replace(study, home=home)


def composed(*overrides: str):
    """conf/config.yaml composed with ``overrides`` by Hydra's compose API (an OmegaConf config)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(str(REPO / "conf"), version_base="1.3"):
        return hydra_compose("config", overrides=list(overrides))


def checked(overrides: list[str]):
    """The typed config of these overrides, after the checks every run passes first."""
    from omegaconf import OmegaConf

    from tiedvsuntied.train.plan import check_config

    config = OmegaConf.to_object(composed(*overrides))
    check_config(config, overrides)
    return config


# ----------------------------------------------------------------------------- reading figures
def lines(fig) -> list:
    """Every line of every panel of ``fig``."""
    return [line for ax in fig.axes for line in ax.get_lines()]


def texts(fig) -> str:
    """All text in the figure, wrapped lines joined again."""
    from matplotlib.text import Text

    return " ".join(" ".join(t.get_text() for t in fig.findobj(Text)).split())


def caption_of(fig) -> str:
    """The caption under a figure's panels, unwrapped."""
    return " ".join(fig.caption_text.get_text().split())
