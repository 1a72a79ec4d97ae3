"""What a notebook's first code cell calls: its results, or, where the sweep it reads by default
has not been run, one line saying what to run first and a clean skip of the cells after it.

Where a relative path comes from decides what it is relative to: one typed into the notebook's
parameters cell (its defaults too) is relative to the notebook's folder, like any path in its
code; one given in ``TIEDVSUNTIED_SWEEP_DIR`` is relative to the directory Jupyter or
``jupyter nbconvert`` was started from (``$PWD``), like any path given to a command."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from tiedvsuntied.analysis.load import Results, load
from tiedvsuntied.analysis.rows import RUN_COLUMNS

SWEEP_VAR = "TIEDVSUNTIED_SWEEP_DIR"


def notebook_results(
    sweep_dir: str, *, run_first: str = "", wandb_project: str = "", **kwargs
) -> Results:
    """``analysis.load`` for a notebook. ``run_first``: the command that makes the sweep it reads
    by default; where that is missing (and none was given), say so and skip the rest of the
    notebook (no error: a headless run of every notebook goes on)."""
    if wandb_project:
        return load(wandb_project=wandb_project, **kwargs)
    given, base = os.environ.get(SWEEP_VAR), Path.cwd()  # relative to: the module's docstring
    if given and sweep_dir == given:  # Jupyter's launch dir (a kernel's cwd is the notebook's)
        base = Path(os.environ.get("PWD") or os.getcwd())
    paths = [(base / p).resolve() for p in str(sweep_dir).split(os.pathsep) if p]
    missing = [p for p in paths if not p.exists()]
    if run_first and missing and not os.environ.get(SWEEP_VAR):
        skip_rest_of_notebook(
            f"skipped: no results at {', '.join(map(str, missing))}; run first: {run_first} "
            f"(or set {SWEEP_VAR} to a sweep directory)"
        )
        return Results(pd.DataFrame(columns=RUN_COLUMNS), pd.DataFrame(), [])
    return load(paths, **kwargs)


def figures_dir(out_dir: str = "") -> str:
    """Where a notebook writes its figures: ``out_dir`` where it is set (OUT_DIR in its
    parameters cell, or TIEDVSUNTIED_FIGURES_DIR), else a folder of the user's cache, never the
    checkout: $XDG_CACHE_HOME (or ~/.cache)/tiedvsuntied/figures, said once."""
    if out_dir:
        return out_dir
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    path = cache / "tiedvsuntied" / "figures"
    print(f"figures go to {path} (set OUT_DIR or TIEDVSUNTIED_FIGURES_DIR to choose)")
    return str(path)


def skip_rest_of_notebook(message: str) -> None:
    """Print ``message`` and run no further cell until the parameters cell (the one that reads
    TIEDVSUNTIED_SWEEP_DIR) is run again."""
    print(message)
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None:  # not in a notebook
        return

    def skip(lines: list[str]) -> list[str]:
        if any(SWEEP_VAR in line for line in lines):  # parameters again: back to normal
            shell.input_transformers_post.remove(skip)
            return lines
        return []

    shell.input_transformers_post.append(skip)
