"""The protocol's lr check for a runner that launches each run itself (scripts/gpu/slot.sh, whose
runs are one process each under a deadline): the runs of one step, one override line each.

    python -m tiedvsuntied.study.fair STUDY lr|edge|seeds --sweep-dir DIR --grid G \\
        --cells "tied:inv_sqrt_d untied:inv_sqrt_d" --seeds 1,2,3 --base "OVERRIDES" \\
        [--table OUT.tsv] [--emb-lr-mult-from TSV]
    python -m tiedvsuntied.study.fair chosen STUDY ARM INIT_STD     # a value of its lr table

``lr``: each cell at seed 0 at each value of the grid (a run each); ``edge``: x2 beyond each
edge the study's lr rule names from the sweep's runs of ``--base``'s model; ``seeds``: each cell
whose lr is settled (its grid whole, its best inside what ran) at each seed. ``--table``: where
the lr table goes (the study's own is left alone); ``--emb-lr-mult-from``: each cell's
optim.emb_lr_mult from another study's lr table."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import pandas as pd

from tiedvsuntied.analysis.load import ResultsError, load_results
from tiedvsuntied.study import protocol, registry
from tiedvsuntied.study.declare import StudyError


def model_of(base: str) -> str | None:
    """The model ``--base`` sets (the last model= holds)."""
    models = [w.split("=", 1)[1] for w in base.split() if w.startswith("model=")]
    return models[-1] if models else None


def table(args: argparse.Namespace) -> pd.DataFrame:
    """The lr table of the sweep's runs of ``--base``'s model (none yet: no rows)."""
    study = dataclasses.replace(registry.study(args.study), grid=args.grid)
    try:
        runs = load_results(args.sweep_dir).runs
    except ResultsError:
        return pd.DataFrame(columns=["model", "arm", "init_std", "lr", "settled", "run_next"])
    out = study.choose(study, runs)
    if args.table is not None:
        out.to_csv(args.table, sep="\t", index=False)
    model = model_of(args.base)
    return out[out["model"].eq(model)] if model is not None and "model" in out else out


def emb(args: argparse.Namespace, arm: str, std: str) -> str:
    if args.emb_lr_mult_from is None:
        return ""
    chosen = pd.read_csv(args.emb_lr_mult_from, sep="\t", dtype=str, keep_default_na=False)
    row = chosen[chosen["arm"].eq(arm) & chosen["init_std"].eq(std)]
    return f" optim.emb_lr_mult={row['emb_lr_mult'].iloc[0]}"


def lines(args: argparse.Namespace) -> list[str]:
    cells = [tuple(c.split(":", 1)) for c in args.cells.split()]
    run = [
        f"{args.base} seed={{seed}} +arm={a} init_std={s} optim.lr={{lr}}{emb(args, a, s)}"
        for a, s in cells
    ]
    if args.step == "lr":
        return [r.format(seed=0, lr=lr) for r in run for lr in args.grid.split(",")]
    rows = table(args).to_dict("records")
    out = []
    for row in rows:
        if (row["arm"], str(row["init_std"])) not in cells:
            continue
        r = run[cells.index((row["arm"], str(row["init_std"])))]
        if args.step == "edge" and pd.notna(row["run_next"]):
            out.append(r.format(seed=0, lr=f"{row['run_next']:g}"))
        elif args.step == "seeds" and row["settled"] == True:  # noqa: E712 (numpy bools)
            out += [r.format(seed=s, lr=f"{row['lr']:g}") for s in args.seeds.split(",")]
    return out


def chosen(words: list[str]) -> str:
    """``chosen STUDY ARM INIT_STD``: the value the study's lr table chose for the arm."""
    study = registry.study(words[0])
    value = protocol.value_at(study, study.lr_at or next(iter(study.points)), *words[1:3])
    if not value:
        raise StudyError(f"{study.name}'s lr table has no arm {words[1]} at init_std {words[2]}")
    return value


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tiedvsuntied.study.fair", description=__doc__)
    p.add_argument("study")
    p.add_argument("step", choices=["lr", "edge", "seeds"])
    p.add_argument("--sweep-dir", type=Path, required=True)
    p.add_argument("--grid", required=True)
    p.add_argument("--cells", required=True, help='"arm:init_std ..."')
    p.add_argument("--seeds", default="1,2,3")
    p.add_argument("--base", default="", help="the overrides every run shares")
    p.add_argument("--table", type=Path, help="write the lr table here")
    p.add_argument("--emb-lr-mult-from", type=Path, help="an lr table with emb_lr_mult")
    return p


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    try:
        if argv[:1] == ["chosen"] and len(argv) == 4:
            return print(chosen(argv[1:]))
        found = lines(parser().parse_args(argv))
        print("\n".join(found)) if found else None  # no line: nothing for the runner to start
    except StudyError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
