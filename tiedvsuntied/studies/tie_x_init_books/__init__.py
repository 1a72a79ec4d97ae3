"""The second edition (experiments/tie_x_init_books/): tied vs untied head x init std {0.02,
d^-0.5, 1.0} x size {nano, micro} x 5 seeds on 211 Gutenberg books held out by author, each arm
at the embedding-side lr multiplier its lr check (nano, seed 0) chose (HYPOTHESES.md).
Its reading side: :mod:`.analysis` (arms, the lr rule, the contrast tables, the books'
variance) and :mod:`.figures` (its figures and tables).

    python -m tiedvsuntied.study tie_x_init_books restore    # the bundle's runs, on a new machine
    python -m tiedvsuntied.study tie_x_init_books all        # lr, edge, primary, grids, floor
    python -m tiedvsuntied.study tie_x_init_books print grid micro
"""

from __future__ import annotations

import re

from tiedvsuntied.studies.tie_x_init_books.analysis import (
    chosen_lr,
)  # the lr rule: x4 beyond an edge, once
from tiedvsuntied.study import protocol
from tiedvsuntied.study.declare import Cell, Piece, Point, Study

STDS = ("0.02", "inv_sqrt_d", "1.0")
PRIMARY = re.compile(r"\+arm=(tied|untied) init_std=0\.02 ")


def primary(study: Study, point=None, results=None) -> list[str]:
    """Tied and untied at init 0.02, micro, first: what the primary contrast reads."""
    return [c for c in protocol.seeds(study, "micro") if PRIMARY.search(c)]


STUDY = Study(
    name="tie_x_init_books",
    title="second edition: tied vs untied x init std x size, books held out by author",
    experiment="tie_x_init_books",
    sweep="tie_x_init_books",
    points={"nano": Point("nano"), "micro": Point("micro")},
    cells=(
        *(Cell(a, s) for s in STDS for a in ("tied", "untied")),
        Cell("t5"),
        Cell("emb1_head_dsqrt"),
    ),
    tuned="optim.emb_lr_mult",
    grid="0.25,1,4",
    choose=lambda study, runs: chosen_lr(runs),
    seeds="0,1,2,3,4",
    lr_at="nano",
    arm_experiments={"t5": "tie_x_init_books_arms", "emb1_head_dsqrt": "tie_x_init_books_arms"},
    edge_steps=1,
    floor_points=("nano", "micro"),
    bundles={"results": "tie_x_init_books"},
    precision=None,  # trained before precision was pinned: auto as it resolved on its CPUs
    order=("nano", "micro"),
    then={("lr", "nano"): ("primary",), ("seeds", "micro"): ("floor",)},
    pieces={"primary": Piece(primary)},
)
