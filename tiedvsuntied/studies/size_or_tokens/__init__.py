"""The fourth edition (experiments/size_or_tokens/): does tying's cost follow the model's size or
its tokens per parameter, and does its sign turn inside reach? The third edition's set-up at
V = 8,192 with the text budget as a second factor (10 MB and 45,251,840 bytes) and bf16 pinned
(HYPOTHESES.md, committed before the first run).

    python -m tiedvsuntied.study size_or_tokens print all     # every command, in run order
    python -m tiedvsuntied.study size_or_tokens a0            # the 10 MB row, pinned, 4 seeds
    python -m tiedvsuntied.study size_or_tokens all b256x8-45mb
"""

from __future__ import annotations

from tiedvsuntied.analysis.arms import arm  # a run's arm (tied, untied, untied_own, ...)
from tiedvsuntied.studies.size_or_tokens import pieces
from tiedvsuntied.study import rules
from tiedvsuntied.study.declare import Cell, Piece, Point, Study

V, BYTES_PER_TOKEN = 8192, 3.6258  # fold 0's training split at V = 8,192, as the third edition
TEN_MB, BUDGET_45 = 10_000_000, 45_251_840  # the second: d = 256 x 8 at micro-at-10 MB's tok/param


def point(model: str, budget: int, tied: str = "", untied: str = "") -> Point:
    """A cell's body at a budget; ``tied``/``untied``: each arm's first lr grid (HYPOTHESES.md)."""
    grids = {a: g for a, g in [("tied", tied), ("untied", untied)] if g}
    return Point(model, V, BYTES_PER_TOKEN, budget_bytes=budget, grids=grids)


D256 = "2.5e-4,5e-4,1e-3"
POINTS = {  # HYPOTHESES.md, "The cells" and "Learning rates"
    "micro-10mb": point("micro", TEN_MB),  # the lr: the third edition's (piece a0)
    "b256x8-10mb": point("body256x8", TEN_MB),
    "b256x8-45mb": point("body256x8", BUDGET_45, D256, D256),
    "micro-45mb": point("micro", BUDGET_45, "5e-4,1e-3,2e-3", "1e-3,2e-3,4e-3"),
    "b512x8-10mb": point("body512x8", TEN_MB, "1.25e-4,2.5e-4,5e-4", "1.25e-4,2.5e-4,5e-4"),
    "b384x6-10mb": point("body384x6", TEN_MB, D256, D256),
}
KEY = [*rules.POINT, "max_steps"]
C1 = ("c1", "choose", "lr-edge", "choose", "c1")  # the lr check, an edge step, the seeds
C2 = tuple(
    step.replace("c1", "c2") for step in C1
)  # a row of the lr table: two budgets at one body


def choose(study: Study, runs):
    """The lr rule over each cell's own first grid (HYPOTHESES.md: x2 beyond an edge)."""

    def first(row: dict) -> list[float]:
        name = study.point_of({k: str(v) for k, v in row.items()})
        if row["arm"] == "tie_untie":  # tied's chosen lr x {1/2, 1, 2}
            return [float(x) for x in pieces.tie_untie_grid(study, name).split(",") if x]
        return [float(x) for x in study.points[name].grids.get(row["arm"], study.grid).split(",")]

    return rules.chosen_lr(runs, first, arm, ("tied", "untied", "tie_untie"), key=KEY)


STUDY = Study(
    name="size_or_tokens",
    title="fourth edition: size or tokens per parameter, and where tying starts to pay",
    experiment="size_or_tokens",
    sweep="size_or_tokens",
    points=POINTS,
    cells=(Cell("tied"), Cell("untied")),
    tuned="optim.lr",
    grid=D256,
    choose=choose,
    seeds="1,2,3",
    seeds_at_init_std="inv_sqrt_d",
    clip=None,  # HYPOTHESES.md: a clip that binds on > 10% of steps is marked, nothing re-run
    bundles={"results": "size_or_tokens"},
    precision=None,  # pinned in the experiment (trainer.precision=bf16): part of every run's id
    first=("a0",),
    order=("b256x8-45mb", "micro-45mb", "b512x8-10mb", "b384x6-10mb"),
    # then (HYPOTHESES.md's order): untied_own at d = 512 x 8; the third arm, c1 and c2, each
    # its lr check, x2 beyond an edge, then its seeds
    then={("seeds", "b512x8-10mb"): ("own",), ("seeds", "b384x6-10mb"): (*C1, *C2)},
    pieces={
        "a0": Piece(pieces.a0),
        "own": Piece(pieces.own),
        "c1": Piece(pieces.tie_untie("b256x8-45mb")),
        "c2": Piece(pieces.tie_untie("b512x8-10mb")),
    },
)
