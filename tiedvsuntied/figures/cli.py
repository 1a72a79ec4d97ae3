"""``python -m tiedvsuntied.figures SWEEP_DIR... --out DIR``: every output of REGISTRY (or
``--only`` some) from sweep directories or a W&B project; one failing output does not stop the
others, and the exit status says whether any failed."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from tiedvsuntied.analysis import Results, ResultsError, WandbUnavailableError, load
from tiedvsuntied.figures.style import REGISTRY, print_notes

FORMATS = ("pdf", "png", "svg")


def output_names() -> list[str]:
    """The names of REGISTRY in the paper's order: figures by number, then the tables."""

    def key(name: str) -> tuple:
        number = re.match(r"fig(\d+)_", name)
        return (0, int(number.group(1)), name) if number else (1, 0, name)

    return sorted(REGISTRY, key=key)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m tiedvsuntied.figures",
        description="Regenerate every figure of the paper from sweep directories (or a W&B "
        "project).",
        epilog="Outputs: "
        + "; ".join(f"{name} ({REGISTRY[name].description})" for name in output_names()),
    )
    ap.add_argument(
        "sweep_dirs",
        nargs="*",
        metavar="SWEEP_DIR",
        help="sweep directories (results/<sweep>/), run directories, or a results directory",
    )
    ap.add_argument("--out", required=True, help="directory for the figure files (created)")
    ap.add_argument("--formats", default="pdf,png", help="comma-separated: pdf, png, svg")
    ap.add_argument(
        "--only", default=None, help=f"comma-separated subset of: {', '.join(output_names())}"
    )
    ap.add_argument("--data-id", default=None, help="only runs with this data_id (mixed sweeps)")
    ap.add_argument(
        "--wandb",
        default=None,
        metavar="ENTITY/PROJECT",
        help="read runs from W&B instead (online)",
    )
    ap.add_argument("--group", default=None, help="with --wandb: one W&B group (= sweep)")
    return ap


def write_outputs(results: Results, names: Sequence[str], out: Path, formats: list[str]) -> bool:
    """Write each named output, print its files and notes; True if all were made."""
    made = True
    for name in names:
        try:
            files, fig = REGISTRY[name].write(results, out, formats)
        except (ResultsError, KeyError, ValueError, ImportError, OSError) as e:
            print(f"{name}: NOT MADE: {type(e).__name__}: {e}", file=sys.stderr)
            made = False
            continue
        print(f"{name}: " + ", ".join(str(p) for p in files))
        print_notes(fig, "    ")
    return made


def main(argv: Sequence[str] | None = None) -> int:
    ap = parser()
    args = ap.parse_args(argv)
    formats = args.formats.lower().split(",")
    only = args.only.split(",") if args.only else output_names()
    if set(formats) - set(FORMATS):
        ap.error(f"--formats {args.formats!r}: valid formats are {', '.join(FORMATS)}")
    if unknown := [s for s in only if s not in REGISTRY]:
        ap.error(f"--only: unknown figure(s) {unknown}; valid: {', '.join(output_names())}")
    if bool(args.sweep_dirs) == bool(args.wandb):
        ap.error("give one or more SWEEP_DIRs or --wandb ENTITY/PROJECT (not both)")
    try:
        results = load(
            args.sweep_dirs, wandb_project=args.wandb, wandb_group=args.group, data_id=args.data_id
        )
    except (ResultsError, WandbUnavailableError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    statuses = results.runs["status"].value_counts().items()
    print(f"{len(results.runs)} runs: " + ", ".join(f"{n} {s}" for s, n in statuses))
    for note in results.notes:
        print(f"note: {note}")
    return int(not write_outputs(results, only, Path(args.out), formats))
