"""The third edition (experiments/sign_flip/): where does tying's effect change sign? Tied vs untied
over the head's share rho, moved by V at the micro body and by the body at V = 8,192, each point
reading the same 10 MB of text (HYPOTHESES.md).
Its reading side: :mod:`.analysis` (the cells, contrasts and the primary slope), :mod:`.curve`
(the fit against ln rho), :mod:`.tokens` (the effect along training), :mod:`.figures` and
:mod:`.tables`.

    python -m tiedvsuntied.study sign_flip restore        # the bundles' runs, on a new machine
    python -m tiedvsuntied.study sign_flip all [POINT]    # lr check, edges, seeds, clip, floor
    python -m tiedvsuntied.study sign_flip print grid v1024
"""

from __future__ import annotations

from tiedvsuntied.analysis.arms import arm  # a run's arm (tied_input_grad, <arm>_own ...)
from tiedvsuntied.studies.sign_flip import pieces
from tiedvsuntied.study.declare import Cell, Clip, Piece, Point, Study
from tiedvsuntied.study.rules import lr_rule

BUDGET = {"budget_bytes": 10_000_000, "tokens_per_step": 2048}  # 10 MB of text, 8 x 256 a step
# point -> body, V and bytes per token of fold 0's training split (python -m tiedvsuntied.data
# gutenberg encoding=bpe vocab_size=V); the steps follow from the budget
POINTS = {f"v{v}": Point("micro", v, bpt, **BUDGET) for v, bpt in pieces.V_LADDER.items()}
POINTS |= {
    name: Point(f"body{body}", 8192, 3.6258, **BUDGET)
    for name, body in [("b64x2", "64x2"), ("b256x4", "256x4"), ("b256x8", "256x8")]
    + [("b384x6", "384x6"), ("b512x8", "512x8"), ("b768x12", "768x12")]  # a GPU's (slot c)
}

STUDY = Study(
    name="sign_flip",
    title="third edition: where does tying's effect change sign (rho by V and by body)",
    experiment="sign_flip",
    sweep="sign_flip",
    points=POINTS,
    cells=(Cell("tied"), Cell("untied")),
    tuned="optim.lr",
    grid="1e-3,2e-3,4e-3",
    choose=lr_rule(arm),  # tied and untied have an lr check; the ends' arms run at tied's lr
    seeds="1,2,3",
    seeds_at_init_std="inv_sqrt_d",
    clip=Clip("sign_flip_clip", "optim.grad_clip=4.0", ("0,1", "2,3")),
    floor_points=("v1024", "v40960"),
    bundles={
        "results": "sign_flip",
        "results_clip": "sign_flip_clip",
        "results_mult2d": "sign_flip_mult2d",
        "results_fp32": "sign_flip_fp32",
        "results_gpu": "sign_flip_gpu",  # scripts/gpu/slot.sh's pieces a and c
        "results_small": "sign_flip_small",  # and b
    },
    order=("v1024", "v40960", "v4096", "v16384", "v8192", "b256x8", "b64x2", "b256x4", "v2048"),
    then={
        ("lr", "v8192"): ("mult2d", "mult2d-edge", "mult2d-edge"),
        ("seeds", "v40960"): ("floor",),
    },
    closing=("own",),
    closing_points=pieces.OWN_POINTS,
    pieces={
        "ends": Piece(pieces.ends),
        "init02": Piece(pieces.init02, point=True),
        "mult2d": Piece(pieces.mult2d),
        "mult2d-edge": Piece(pieces.mult2d_edge),
        "mult2d-table": Piece(pieces.mult2d_table, report=True),
        "own": Piece(pieces.own, point=True),
        "rest": Piece(pieces.rest),
        "precision": Piece(pieces.precision, any_precision=True),
    },
)
