"""The fourth edition's own pieces (HYPOTHESES.md): a0, the third edition's 10 MB cells again
under the pinned precision at the lr its checks chose; own, untied at its own multipliers at
d = 512 x 8; c1/c2, tie-then-untie as a third arm (`+arm=tie_untie`) at tied's lr x {1/2, 1, 2},
then its seeds at the best."""

from __future__ import annotations

from collections.abc import Callable

from tiedvsuntied.study import protocol, registry
from tiedvsuntied.study.declare import Study

STD = "inv_sqrt_d"
REUSED = ("b256x8-10mb", "micro-10mb")  # a0's cells, d = 256 x 8 first (HYPOTHESES.md)
OWN_AT, OWN = "b512x8-10mb", "optim.head_lr_mult=1"  # untied_own: emb 4, head 1


def third_lr(point) -> dict[str, str]:
    """The lr the third edition's checks chose for each arm at this body and V (its lr table)."""
    table = protocol.choices(registry.study("sign_flip"))
    rows = table[[point.holds(r) and r["init_std"] == STD for r in table.to_dict("records")]]
    return dict(zip(rows["arm"], rows["lr"], strict=True))


def a0(study: Study, point=None, results=None) -> list[str]:
    """Seeds 0-3 of both arms at each 10 MB cell, a seed's pair together (so that a pair is
    done before the next starts), at the third edition's chosen lr."""
    out = []
    for name in REUSED:
        lrs = third_lr(study.points[name])
        for seed in range(4):
            out += [protocol.command(study, name, a, lrs[a], f"seed={seed}") for a in lrs]
    return out


def own(study: Study, point=None, results=None) -> list[str]:
    """Untied at emb 4, head 1, at untied's chosen lr at d = 512 x 8, seeds 0-3 (none before
    that lr is chosen)."""
    lr = protocol.value_at(study, OWN_AT, "untied", STD)
    if not lr:
        return []
    return [protocol.command(study, OWN_AT, "untied", lr, "seed=0,1,2,3", after=OWN)]


def tie_untie(at: str) -> Callable[..., list[str]]:
    """The third arm at a cell: its lr check (seed 0, tied's chosen lr x {1/2, 1, 2}) until the
    lr table settles it (``choose``, ``lr-edge``), then seeds 1-3 at its lr."""

    def make(study: Study, point=None, results=None) -> list[str]:
        rows = protocol.rows_at(study, at)
        mine = rows[rows["arm"].eq("tie_untie")]
        if len(mine) and mine["settled"].iloc[0] == "True":
            return [protocol.command(study, at, "tie_untie", mine["lr"].iloc[0], "seed=1,2,3")]
        grid = tie_untie_grid(study, at)
        return [protocol.command(study, at, "tie_untie", grid, "seed=0")] if grid else []

    return make


def tie_untie_grid(study: Study, at: str) -> str:
    """Tied's chosen lr at the cell / 2, x 1, x 2 ("" before tied's is chosen)."""
    tied = protocol.value_at(study, at, "tied", STD)
    return ",".join(f"{float(tied) * f:g}" for f in (0.5, 1, 2)) if tied else ""
