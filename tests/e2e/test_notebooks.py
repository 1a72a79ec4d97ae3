"""The notebooks: committed clean and thin; executed once, on the shipped bundles (slow)."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))

BOOKS_FIGURES = ["books_fig1_loss", "books_fig2_contrasts", "books_fig3_lr", "books_fig4_per_book"]
SIGN_FLIP_FIGURES = [
    "sign_flip_fig1_map",
    "sign_flip_fig2_tokens",
    "sign_flip_fig3_tokens_per_param",
    "size_or_tokens_fig_equal_params",  # the fourth edition's exploratory figure, on the same runs
]
# the fourth edition's committed reading, then the third edition's map and token axis with its cells
FOURTH_FIGURES = [
    "size_or_tokens_fig_2x2",
    "size_or_tokens_fig_map",
    "size_or_tokens_fig_tokens_per_param",
]
SECOND_EDITION = "10_second_edition.ipynb"  # the second edition's own figures, drawn apart
# What each notebook writes into TIEDVSUNTIED_FIGURES_DIR (names as in figures.REGISTRY).
WRITES = {
    "00_overview.ipynb": ["runs.csv"],
    "01_loss.ipynb": [
        "fig1_val_loss.pdf",
        "fig1_val_loss.png",
        "fig2_loss_vs_params.pdf",
        "fig2_loss_vs_params.png",
        "table_early.md",
    ],
    "02_initial_loss.ipynb": ["fig3_initial_loss.pdf", "fig3_initial_loss.png"],
    "03_embedding_geometry.ipynb": ["fig4_embedding_geometry.pdf", "fig4_embedding_geometry.png"],
    "04_gradient_split.ipynb": ["fig5_grad_split.pdf", "fig5_grad_split.png"],
    "05_parameter_table.ipynb": ["table_params.md", "table_params.tex"],
    "06_paired_difference.ipynb": [
        "fig6_paired_difference.pdf",
        "fig6_paired_difference.png",
        "table_paired.md",
        "table_interaction.md",
        "table_classic.md",
        "table_arms.md",
    ],
    "07_finetune.ipynb": ["fig7_finetune.pdf", "fig7_finetune.png"],
    "08_geometry_over_training.ipynb": [
        "fig8_cka.pdf",
        "fig8_cka.png",
        "fig9_anisotropy.pdf",
        "fig9_anisotropy.png",
    ],
    "09_study_axes.ipynb": [
        "fig10_arms.pdf",
        "fig10_arms.png",
        "fig11_crossover.pdf",
        "fig11_crossover.png",
    ],
    "10_second_edition.ipynb": [
        *(f"{name}.{ext}" for name in BOOKS_FIGURES for ext in ("pdf", "png")),
        "books_tables.md",
    ],
    "11_third_edition.ipynb": [
        *(f"{name}.{ext}" for name in SIGN_FLIP_FIGURES for ext in ("pdf", "png")),
        "sign_flip_tables.md",
    ],
    "12_fourth_edition.ipynb": [
        *(f"{name}.{ext}" for name in FOURTH_FIGURES for ext in ("pdf", "png")),
        "size_or_tokens_tables.md",
    ],
}


# What a notebook cannot make from a shipped bundle, and so must skip (one line, no file): no
# bundle has fine-tuning runs, the `classic` experiment or sampled embedding rows (fig 8).
BUNDLE = REPO / "experiments" / "tie_x_init" / "results"  # the first (toy) edition, superseded
BOOKS_BUNDLE = REPO / "experiments" / "tie_x_init_books" / "results"
SIGN_FLIP_BUNDLE = REPO / "experiments" / "sign_flip" / "results"  # the third edition, once shipped
FOURTH_BUNDLE = REPO / "experiments" / "size_or_tokens" / "results"  # the fourth, as it stands
# the generic notebooks: on the second edition's bundle by default, but those whose subject only
# the toy edition holds (the first steps, the per-token probe arrays), which say why
BUNDLE_NOTEBOOKS = [p for p in NOTEBOOKS if "../experiments/tie_x_init/results" in p.read_text()]
BOOKS_NOTEBOOKS = [
    p
    for p in NOTEBOOKS
    if "../experiments/tie_x_init_books/results" in p.read_text() and p.name != SECOND_EDITION
]
NOT_FROM_BUNDLE = {"fig7_finetune", "table_classic", "fig8_cka"}  # its T5 arm: table_arms
# the second edition's tied runs are several arms (each at its own lr multiplier): no table_arms
NOT_FROM_BOOKS = NOT_FROM_BUNDLE | {"table_arms"}


def expected(notebook: str, skipped: set[str]) -> list[str]:
    return [f for f in WRITES[notebook] if Path(f).stem not in skipped]


def test_every_notebook_is_listed_and_every_figure_has_a_notebook():
    from tiedvsuntied.figures.cli import REGISTRY

    assert sorted(p.name for p in NOTEBOOKS) == sorted(WRITES)
    written = {Path(f).stem for files in WRITES.values() for f in files}
    assert set(REGISTRY) <= written


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_committed_clean_and_thin(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    for c in code:
        assert c.outputs == [] and c.execution_count is None, (
            f"{path.name}: commit notebooks without outputs"
        )
    params = code[0]
    assert "parameters" in params.metadata.get("tags", []), (
        f"{path.name}: first code cell must be tagged parameters"
    )
    for var in ("TIEDVSUNTIED_SWEEP_DIR", "TIEDVSUNTIED_FIGURES_DIR", "TIEDVSUNTIED_WANDB_PROJECT"):
        assert var in params.source, f"{path.name}: parameters cell does not read {var}"
    source = "\n".join(
        line for c in code for line in c.source.splitlines() if not line.startswith("%")
    )
    # thin: the plotting lives in tiedvsuntied.figures, not here
    for forbidden in ("matplotlib", "plt.", ".plot(", ".hist(", "add_subplot", "subplots("):
        assert forbidden not in source, (
            f"{path.name}: plotting code ({forbidden!r}) belongs in tiedvsuntied.figures"
        )
    for c in code:  # every cell is valid Python once IPython magics are removed
        ast.parse("\n".join(line for line in c.source.splitlines() if not line.startswith("%")))


def nbconvert(clone: Path, notebooks: list[str], env_extra: dict) -> subprocess.CompletedProcess:
    """The README's headless command, run from the root of ``clone`` as a user's shell would
    (``PWD`` is the directory the user stands in)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIEDVSUNTIED_")}
    jupyter = [sys.executable, "-m", "jupyter", "nbconvert", "--to", "notebook", "--execute"]
    return subprocess.run(
        [*jupyter, "--output-dir", str(clone / "nb"), *notebooks],
        cwd=clone,
        env={**env, "PWD": str(clone), "XDG_CACHE_HOME": str(clone.parent / "cache"), **env_extra},
        capture_output=True,
        text=True,
        timeout=1200,
    )


def figures(clone: Path) -> list[str]:
    """What the notebooks wrote where they write by default: the user's cache (XDG_CACHE_HOME,
    nbconvert's), not the checkout."""
    return sorted(p.name for p in (clone.parent / "cache" / "tiedvsuntied" / "figures").iterdir())


def outputs(path: Path) -> str:
    nb = nbformat.read(path, as_version=4)
    return "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))


def fresh_clone(tmp_path: Path) -> Path:
    """The notebooks and the shipped bundles, as a fresh clone has them (no results/)."""
    clone = tmp_path / "clone"
    shutil.copytree(REPO / "notebooks", clone / "notebooks")
    for bundle in (BUNDLE, BOOKS_BUNDLE, SIGN_FLIP_BUNDLE, FOURTH_BUNDLE):
        if bundle.is_dir() or bundle not in (SIGN_FLIP_BUNDLE, FOURTH_BUNDLE):
            shutil.copytree(bundle, clone / bundle.relative_to(REPO))
    return clone


@pytest.mark.slow
def test_the_readme_command_runs_every_notebook_of_a_fresh_clone_on_the_shipped_bundles(tmp_path):
    """Every notebook runs once, by the README's headless command from a fresh clone: the
    generic ones read the second edition's committed bundle by default (01 and 03 the toy
    edition's, which alone holds their subject) and write every figure it holds the data for, the
    editions' own read theirs; those that read an unshipped sweep by default (07, 09) say what to
    run first and skip the rest; the command exits 0."""
    clone = fresh_clone(tmp_path)
    before = {p: p.read_bytes() for p in clone.rglob("*") if p.is_file()}
    proc = nbconvert(clone, sorted(f"notebooks/{p.name}" for p in NOTEBOOKS), {})
    assert proc.returncode == 0, proc.stderr[-3000:]
    after = {
        p: p.read_bytes() for p in clone.rglob("*") if p.is_file() and clone / "nb" not in p.parents
    }
    assert (
        after == before
    )  # the clone's files unchanged, none added (nb/: the command's --output-dir)
    assert sorted(p.name for p in (clone / "nb").glob("*.ipynb")) == sorted(WRITES)
    for paths, sweep in ((BUNDLE_NOTEBOOKS, "tie_x_init,"), (BOOKS_NOTEBOOKS, "tie_x_init_books,")):
        for path in paths:
            said = outputs(clone / "nb" / path.name)
            assert f"results bundle (format 1) of sweep {sweep}" in said, path.name
    for name, sweep in (("07_finetune", "ft"), ("09_study_axes", "untie_at")):
        said = outputs(clone / "nb" / f"{name}.ipynb")
        assert f"skipped: no results at {clone / 'results' / sweep}; run first: " in said, said
    books = expected("10_second_edition.ipynb", set())
    paper = [f for p in BUNDLE_NOTEBOOKS for f in expected(p.name, NOT_FROM_BUNDLE)]
    paper += [f for p in BOOKS_NOTEBOOKS for f in expected(p.name, NOT_FROM_BOOKS)]
    third = expected("11_third_edition.ipynb", set()) if SIGN_FLIP_BUNDLE.is_dir() else []
    if not third:  # not shipped yet: the notebook says what to run and skips the rest
        said = outputs(clone / "nb" / "11_third_edition.ipynb")
        assert f"skipped: no results at {clone / SIGN_FLIP_BUNDLE.relative_to(REPO)}" in said
    fourth = expected("12_fourth_edition.ipynb", set()) if FOURTH_BUNDLE.is_dir() else []
    if not fourth:
        said = outputs(clone / "nb" / "12_fourth_edition.ipynb")
        assert f"skipped: no results at {clone / FOURTH_BUNDLE.relative_to(REPO)}" in said
    written = figures(clone)
    assert written == sorted([*paper, *books, *third, *fourth])


@pytest.mark.slow
def test_the_third_editions_notebook_draws_a_sign_flip_sweep(tmp_path):
    """11 on a fake sign_flip sweep (given as the README says: TIEDVSUNTIED_SWEEP_DIR) writes its
    map, its token-axis figure and its tables, the crossover among them."""
    from fake_sign_flip import write_sign_flip

    clone = tmp_path / "clone"
    shutil.copytree(REPO / "notebooks", clone / "notebooks")
    sweep = write_sign_flip(tmp_path / "results")
    env = {"TIEDVSUNTIED_SWEEP_DIR": str(sweep), "TIEDVSUNTIED_FORMATS": "png"}
    proc = nbconvert(clone, ["notebooks/11_third_edition.ipynb"], env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    written = figures(clone)
    assert written == sorted(f for f in WRITES["11_third_edition.ipynb"] if not f.endswith(".pdf"))
    assert "crossover ρ = " in outputs(clone / "nb" / "11_third_edition.ipynb")


@pytest.mark.slow
def test_a_relative_sweep_dir_is_read_from_where_the_user_stands(tmp_path):
    """07 and 09 on the paper's bundle, named relative to the clone's root (not notebooks/);
    a missing directory fails the command, naming it."""
    clone = fresh_clone(tmp_path)
    bundle = str(BUNDLE.relative_to(REPO))
    notebooks = ["notebooks/07_finetune.ipynb", "notebooks/09_study_axes.ipynb"]
    proc = nbconvert(clone, notebooks, {"TIEDVSUNTIED_SWEEP_DIR": bundle})
    assert proc.returncode == 0, proc.stderr[-3000:]
    for name in ("07_finetune.ipynb", "09_study_axes.ipynb"):
        said = outputs(clone / "nb" / name)
        assert "results bundle (format 1) of sweep tie_x_init" in said, name
    written = figures(clone)
    assert written == sorted(expected("09_study_axes.ipynb", NOT_FROM_BUNDLE)), written
    missing = "results/nothing"
    proc = nbconvert(clone, ["notebooks/00_overview.ipynb"], {"TIEDVSUNTIED_SWEEP_DIR": missing})
    assert proc.returncode != 0
    assert f"results directory {clone / missing} does not exist" in proc.stderr
