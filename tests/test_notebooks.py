"""The notebooks: committed clean and thin; executed top to bottom on the tiny sweep (slow)."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))

BOOKS_FIGURES = ["books_fig1_loss", "books_fig2_contrasts", "books_fig3_lr", "books_fig4_per_book"]
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
}


# What a notebook cannot make from these runs, and so must skip (one line, no file): the tiny
# sweep has no fine-tuning runs, no learning-rate grid, no arm but tied and untied; the shipped
# bundle has no fine-tuning runs, no learning-rate grid and no sampled embedding rows (figure 8).
NOT_FROM_TINY = {"fig7_finetune", "table_classic", "table_arms", *BOOKS_FIGURES, "books_tables"}
BUNDLE = REPO / "experiments" / "tie_x_init" / "results"
BUNDLE_NOTEBOOKS = [p for p in NOTEBOOKS if "../experiments/tie_x_init/results" in p.read_text()]
NOT_FROM_BUNDLE = {"fig7_finetune", "table_classic", "fig8_cka"}  # its T5 arm: table_arms


def expected(notebook: str, skipped: set[str]) -> list[str]:
    return [f for f in WRITES[notebook] if Path(f).stem not in skipped]


def test_every_notebook_is_listed_and_every_figure_has_a_notebook():
    from tiedvsuntied.figures.style import REGISTRY

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


@pytest.mark.slow
def test_notebooks_run_top_to_bottom_on_the_tiny_sweep(tiny_sweep, tmp_path, monkeypatch):
    """Each notebook runs from a copy in a temporary folder (as the documented headless command
    does), so running them never writes into the committed notebooks."""
    from nbclient import NotebookClient

    committed = {path: path.read_bytes() for path in NOTEBOOKS}
    copies = tmp_path / "notebooks"
    shutil.copytree(REPO / "notebooks", copies)
    monkeypatch.setenv("TIEDVSUNTIED_SWEEP_DIR", str(tiny_sweep))
    for path in sorted(copies.glob("*.ipynb")):
        out = tmp_path / path.stem
        monkeypatch.setenv("TIEDVSUNTIED_FIGURES_DIR", str(out))
        nb = nbformat.read(path, as_version=4)
        # check the kernel is this environment's Python (the one with tiedvsuntied installed)
        nb.cells.append(nbformat.v4.new_code_cell("import sys; print(sys.prefix)"))
        NotebookClient(
            nb,
            kernel_name="python3",
            timeout=600,
            resources={"metadata": {"path": str(copies)}},
        ).execute()
        assert nb.cells[-1].outputs[0]["text"].strip() == sys.prefix, path.name
        errors = [
            o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"
        ]
        assert not errors, f"{path.name}: {errors}"
        written = sorted(p.name for p in out.glob("*")) if out.exists() else []
        assert written == sorted(expected(path.name, NOT_FROM_TINY)), path.name
    assert {path: path.read_bytes() for path in NOTEBOOKS} == committed


def execute(path: Path, cwd: Path) -> nbformat.NotebookNode:
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    NotebookClient(
        nb, kernel_name="python3", timeout=600, resources={"metadata": {"path": str(cwd)}}
    ).execute()
    return nb


@pytest.mark.slow
def test_the_paper_notebooks_run_on_the_shipped_bundle_by_default(tmp_path, monkeypatch):
    """A fresh clone's notebooks read the committed bundle of the paper's study (no sweep
    directory, no training) and write every figure the bundle holds the data for."""
    assert (BUNDLE / "BUNDLE.json").is_file(), "the paper's bundle is not committed"
    assert len(BUNDLE_NOTEBOOKS) >= 7
    monkeypatch.delenv("TIEDVSUNTIED_SWEEP_DIR", raising=False)
    monkeypatch.delenv("TIEDVSUNTIED_WANDB_PROJECT", raising=False)
    for path in BUNDLE_NOTEBOOKS:
        out = tmp_path / path.stem
        monkeypatch.setenv("TIEDVSUNTIED_FIGURES_DIR", str(out))
        nb = execute(path, REPO / "notebooks")
        text = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))
        assert "results bundle (format 1) of sweep tie_x_init" in text, path.name
        assert sorted(p.name for p in out.glob("*")) == sorted(
            expected(path.name, NOT_FROM_BUNDLE)
        ), path.name


def nbconvert(clone: Path, notebooks: list[str], env_extra: dict) -> subprocess.CompletedProcess:
    """The README's headless command, run from the root of ``clone`` as a user's shell would
    (``PWD`` is the directory the user stands in)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIEDVSUNTIED_")}
    jupyter = [sys.executable, "-m", "jupyter", "nbconvert", "--to", "notebook", "--execute"]
    return subprocess.run(
        [*jupyter, "--output-dir", str(clone / "nb"), *notebooks],
        cwd=clone,
        env={**env, "PWD": str(clone), **env_extra},
        capture_output=True,
        text=True,
        timeout=1200,
    )


def outputs(path: Path) -> str:
    nb = nbformat.read(path, as_version=4)
    return "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))


@pytest.mark.slow
def test_the_readme_command_runs_every_notebook_of_a_fresh_clone(tmp_path):
    """A fresh clone has the paper's bundle but no results/: the notebooks that read an unshipped
    sweep by default (07, 09) say what to run first and skip the rest; the command exits 0."""
    clone = tmp_path / "clone"
    shutil.copytree(REPO / "notebooks", clone / "notebooks")
    shutil.copytree(BUNDLE, clone / "experiments" / "tie_x_init" / "results")
    proc = nbconvert(clone, sorted(f"notebooks/{p.name}" for p in NOTEBOOKS), {})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(p.name for p in (clone / "nb").glob("*.ipynb")) == sorted(WRITES)
    for name, sweep in (("07_finetune", "ft"), ("09_study_axes", "untie_at")):
        said = outputs(clone / "nb" / f"{name}.ipynb")
        assert f"skipped: no results at {clone / 'results' / sweep}; run first: " in said, said
    assert sorted(p.name for p in (clone / "figures").glob("fig7*")) == []


@pytest.mark.slow
def test_a_relative_sweep_dir_is_read_from_where_the_user_stands(tmp_path):
    clone = tmp_path / "clone"
    shutil.copytree(REPO / "notebooks", clone / "notebooks")
    shutil.copytree(BUNDLE, clone / "experiments" / "tie_x_init" / "results")
    bundle = "experiments/tie_x_init/results"  # relative to the clone's root, not notebooks/
    proc = nbconvert(clone, ["notebooks/00_overview.ipynb"], {"TIEDVSUNTIED_SWEEP_DIR": bundle})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "results bundle (format 1) of sweep tie_x_init" in outputs(
        clone / "nb" / "00_overview.ipynb"
    )
    missing = "results/nothing"
    proc = nbconvert(clone, ["notebooks/07_finetune.ipynb"], {"TIEDVSUNTIED_SWEEP_DIR": missing})
    assert proc.returncode != 0
    assert f"results directory {clone / missing} does not exist" in proc.stderr
