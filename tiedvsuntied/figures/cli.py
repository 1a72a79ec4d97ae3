"""``python -m tiedvsuntied.figures SWEEP_DIR... --out DIR``: every output of REGISTRY (or
``--only`` some); one failing output does not stop the others, and the exit status says whether
any failed; an output with nothing to draw is skipped, in one line that says why. ``--paper``:
the outputs of each study's section of the paper (:mod:`.paper`) from its shipped bundles
(docs/figures.md)."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from tiedvsuntied.analysis.load import Results, ResultsError, WandbUnavailableError, load
from tiedvsuntied.figures import output, paper
from tiedvsuntied.figures.style import REGISTRY, print_notes

# each module of the package registers its outputs in REGISTRY: a new one is drawn too; and so
# does each study's package (tiedvsuntied/studies/<study>/), found by name
for module in pkgutil.iter_modules([str(Path(__file__).parent)]):
    if module.name != "__main__":
        importlib.import_module(f"{__package__}.{module.name}")
paper.discover()

FORMATS = ("pdf", "png", "svg")
PAPER = paper.outputs()  # the paper's figures and tables, in its order (its sections')


def output_names() -> list[str]:
    """The names of REGISTRY in the paper's order: figures by number, then the tables."""
    numbered = {name: int(m.group(1)) for name in REGISTRY if (m := re.match(r"fig(\d+)_", name))}
    return sorted(REGISTRY, key=lambda name: (name not in numbered, numbered.get(name, 0), name))


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m tiedvsuntied.figures",
        description="Regenerate every figure and table from sweep directories, shipped bundles "
        "or a W&B project; --paper: the paper's, from the shipped bundles.",
        epilog="Outputs: "
        + "; ".join(f"{name} ({REGISTRY[name].description})" for name in output_names()),
    )
    where = "sweep directories (results/<sweep>/), run directories, or a results directory"
    ap.add_argument("sweep_dirs", nargs="*", metavar="SWEEP_DIR", help=where)
    ap.add_argument("--out", required=True, help="directory for the figure files (created)")
    ap.add_argument("--formats", default="pdf,png", help="comma-separated: pdf, png, svg")
    ap.add_argument("--only", help=f"comma-separated subset of: {', '.join(output_names())}")
    ap.add_argument("--data-id", help="only runs with this data_id (mixed sweeps)")
    ap.add_argument("--wandb", metavar="ENTITY/PROJECT", help="read runs from W&B instead (online)")
    ap.add_argument("--group", help="with --wandb: one W&B group (= sweep)")
    paper_help = (
        f"the paper's figures and tables ({', '.join(PAPER)}) from the shipped bundles "
        f"({', '.join(paper.bundles())} in the repository), or from SWEEP_DIRs when given; "
        "prints how long it took"
    )
    ap.add_argument("--paper", action="store_true", help=paper_help)
    return ap


def write_outputs(results: Results, names: Sequence[str], out: Path, formats: list[str]) -> bool:
    """Write each output, print its files and notes or why it is skipped; False if any fails."""
    made = True
    for name in names:
        try:
            files, fig = REGISTRY[name].write(results, out, formats)
        except (ResultsError, KeyError, ValueError, ImportError, OSError) as e:
            print(f"{name}: NOT MADE: {type(e).__name__}: {e}", file=sys.stderr)
            made = False
            continue
        if fig is not None and fig.empty:
            print(f"{name}: skipped: {fig.empty}")
            continue
        print(f"{name}: " + ", ".join(str(p) for p in files))
        print_notes(fig, "    ")
    return made


def paper_groups(sweep_dirs: Sequence[str], only: Sequence[str]) -> list | None:
    """(dirs, outputs) loaded and written one group at a time: SWEEP_DIRs with every output;
    else each study's shipped bundles with its outputs (:func:`paper.groups`)."""
    if sweep_dirs:
        return [(list(sweep_dirs), list(only))]
    return paper.groups(only)


def _check_args(ap: argparse.ArgumentParser, args, formats: list[str], only: list[str]) -> None:
    if set(formats) - set(FORMATS):
        ap.error(f"--formats {args.formats!r}: valid formats are {', '.join(FORMATS)}")
    if unknown := [s for s in only if s not in REGISTRY]:
        ap.error(f"--only: unknown figure(s) {unknown}; valid: {', '.join(output_names())}")
    if args.paper and args.wandb:
        ap.error("--paper reads the shipped bundles (or SWEEP_DIRs), not --wandb")
    if not args.paper and bool(args.sweep_dirs) == bool(args.wandb):
        ap.error("give one or more SWEEP_DIRs or --wandb ENTITY/PROJECT (not both)")


def main(argv: Sequence[str] | None = None) -> int:
    started = time.perf_counter()
    ap = parser()
    args = ap.parse_args(argv)
    formats = args.formats.lower().split(",")
    only = args.only.split(",") if args.only else list(PAPER if args.paper else output_names())
    _check_args(ap, args, formats, only)
    output.refuse_unwritable(Path(args.out))
    groups = paper_groups(args.sweep_dirs, only) if args.paper else [(args.sweep_dirs, only)]
    if groups is None:
        return 2
    made = True
    for dirs, names in groups:
        try:
            results = load(
                dirs, wandb_project=args.wandb, wandb_group=args.group, data_id=args.data_id
            )
        except (ResultsError, WandbUnavailableError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        statuses = results.runs["status"].value_counts().items()
        print(f"{len(results.runs)} runs: " + ", ".join(f"{n} {s}" for s, n in statuses))
        for note in results.notes:
            print(f"note: {note}")
        made &= write_outputs(results, names, Path(args.out), formats)
    if args.paper:
        dirs = [d for group, _ in groups for d in group]
        print(f"the paper from {', '.join(dirs)} in {time.perf_counter() - started:.1f} s")
    return int(not made)
