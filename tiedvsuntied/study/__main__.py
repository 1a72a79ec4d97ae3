"""``python -m tiedvsuntied.study``: the declared studies, each run by the one protocol.

    python -m tiedvsuntied.study                          the studies, what is done and left
    python -m tiedvsuntied.study NAME PIECE [POINT]       run a piece (two commands at a time)
    python -m tiedvsuntied.study NAME print PIECE [POINT] its commands, without running them
    python -m tiedvsuntied.study NAME print all [POINT]   every command ``all`` would run now
    python -m tiedvsuntied.study NAME at POINT            the overrides of a point

Pieces: lr POINT (the lr check), lr-edge (x2 beyond each edge the lr table names), choose (the lr
table, experiments/NAME/lr_choice.tsv, from the sweep), grid POINT (each arm's seeds at its
value), clip POINT (the clip rule's re-runs), floor (the noise floor), all [POINT] (all of them,
in order), restore (the shipped bundles' runs into their sweeps, on a new machine), bundle (the
sweeps into the bundles), and the study's own (``print`` lists them). ``--results DIR``: the
results directory (default: results/ of this checkout). After a piece one line says what is
done and what is left. A mistake is one line and exit code 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from tiedvsuntied.analysis.load import ResultsError, load_results
from tiedvsuntied.results.records import DONE
from tiedvsuntied.study import protocol, registry
from tiedvsuntied.study.declare import RUN, Study, StudyError
from tiedvsuntied.sweep.progress import sweep_rows

REFUSED = 2


def status_line(study: Study, results: Path) -> str:
    """What is done and what is left: the runs of each of its sweeps that finished (or
    diverged: a result), those not yet (begun or planned by a multirun), the lr table's arms."""
    parts = []
    for sweep in dict.fromkeys([study.sweep, *study.bundles.values()]):
        rows = sweep_rows(results / sweep) if (results / sweep).is_dir() else pd.DataFrame()
        if len(rows):
            done = rows["status"].isin(DONE).sum()
            parts.append(f"{sweep} {done} done, {len(rows) - done} left")
    table = protocol.choices(study)
    settled = table.get("settled", pd.Series(dtype=str)).eq("True").sum()
    arms = f"lr table: {len(table)} arms" + (f", {settled} settled" if "settled" in table else "")
    return f"{study.name}: " + "; ".join([*(parts or ["no runs yet"]), arms])


def listing(results: Path) -> str:
    lines = []
    for name in registry.names():
        study = registry.study(name)
        lines.append(f"{name:18} {study.title}\n{'':18} {status_line(study, results)}")
    return "\n".join(lines)


def choose(study: Study, results: Path, quiet: bool = False) -> None:
    """The lr table from the study's sweep, written to experiments/NAME/lr_choice.tsv."""
    try:
        runs = load_results(results / study.sweep).runs
    except ResultsError as e:
        raise StudyError(f"choose: {e}") from None
    table = study.choose(study, runs)
    if table.empty:
        raise StudyError(f"choose: no finished lr check run in {results / study.sweep}")
    table.to_csv(study.lr_table, sep="\t", index=False)
    if not quiet:
        print(table.round(4).to_string(index=False))
        print(f"written: {study.lr_table}")


def with_results(lines: list[str], results: Path) -> list[str]:
    """The commands with ``results_dir=`` where it is not the checkout's results/."""
    if results == protocol.study_root() / "results":
        return lines
    return [f"{line} results_dir={results}" if line.startswith(RUN) else line for line in lines]


def run_piece(study: Study, name: str, point: str | None, results: Path, quiet=False) -> None:
    if name == "choose":
        return choose(study, results, quiet)
    if name == "restore":
        copied = protocol.restore(study, results)
        return print(f"restored {len(copied)} runs into {results}")
    piece = protocol.piece(study, name)
    if piece.report:
        return print("\n".join(protocol.commands(study, name, point, results)))
    if not piece.any_precision:
        protocol.check_precision(study)
    lines = with_results(protocol.commands(study, name, point, results), results)
    failed = protocol.run_commands(lines, piece.jobs, results / f"{study.name}.log")
    if failed:
        raise SystemExit(
            f"{study.name} {name}: {failed} of {len(lines)} commands failed (see "
            f"{results / study.name}.log); run the piece again to resume"
        )


def run_all(study: Study, point: str | None, results: Path) -> None:
    protocol.check_precision(study)
    for name, p in protocol.all_steps(study, point):
        run_piece(study, name, p, results, quiet=name == "choose")
        print(f"{name}{'' if p is None else ' ' + p}: {status_line(study, results)}", flush=True)


def printed(study: Study, args: list[str], results: Path) -> list[str]:
    """``print PIECE [POINT]``: the commands of a piece, or of ``all``."""
    if not args:
        raise StudyError(f"print takes a piece: {' '.join([*protocol.pieces(study), 'all'])}")
    name, point = args[0], (args[1] if len(args) > 1 else None)
    if name == "all":
        if point is not None:
            study.at(point)
        lines = protocol.print_all(study, point, results)
    elif protocol.piece(study, name).report:
        raise StudyError(
            f"'{name}' is a report, not commands: python -m tiedvsuntied.study {study.name} {name}"
        )
    else:
        lines = protocol.commands(study, name, point, results)
    return with_results(lines, results)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m tiedvsuntied.study",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("words", nargs="*", help="NAME PIECE [POINT] | NAME print PIECE [POINT]")
    parser.add_argument("--results", type=Path, default=protocol.study_root() / "results")
    args = parser.parse_args(argv)
    results = args.results.resolve()
    try:
        if not args.words:
            return print(listing(results))
        study = registry.study(args.words[0])
        rest = args.words[1:]
        if not rest:
            raise StudyError(f"{study.name}: name a piece, or print PIECE (print lists them)")
        if rest[0] == "at" and len(rest) == 2:  # a point's overrides (scripts/gpu/slot.sh)
            return print(study.at(rest[1]))
        if rest[0] == "print":
            lines = printed(study, rest[1:], results)
            return print("\n".join(lines)) if lines else None
        name, point = rest[0], (rest[1] if len(rest) > 1 else None)
        if name == "all":
            run_all(study, point, results)
        else:
            run_piece(study, name, point, results)
            print(status_line(study, results))
    except StudyError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(REFUSED) from None


if __name__ == "__main__":
    main()
