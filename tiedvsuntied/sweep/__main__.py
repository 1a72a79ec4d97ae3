"""``python -m tiedvsuntied.sweep``: a sweep before and while it runs.

    python -m tiedvsuntied.sweep plan tie=true,false init_std=1.0,0.036   (as run -m takes them)
    python -m tiedvsuntied.sweep status results/default      (or the same overrides as plan)
    python -m tiedvsuntied.sweep check results/default       (damaged runs, one line each)
    python -m tiedvsuntied.sweep table results/default [--out default.csv]   (or .parquet)
    python -m tiedvsuntied.sweep dashboard results/default [--entity ENTITY]   (the W&B view)

``plan`` lists each job ``run -m`` would run (checked as the multirun checks them), its run's
status and steps, and the run time left, from the sweep's finished runs; ``status`` counts the
runs (with the jobs its multiruns planned) with progress and ETA, and names damaged runs, as
``check`` does alone; ``table`` writes the runs table the figures read. A mistake is one
line and exit code 2. Reading a sweep directory loads no torch; the plan does (the schema).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from tiedvsuntied.analysis.load import ResultsError, load_results
from tiedvsuntied.model.config import init_std_notes
from tiedvsuntied.results.identity import find_run_dir
from tiedvsuntied.results.records import DONE
from tiedvsuntied.sweep import jobs, progress
from tiedvsuntied.sweep.jobs import REFUSED, USER_ERRORS, SweepError

# ``sweep table`` without --out: these columns of the runs table, where runs differ in them
SCREEN = ["name", "status", "tie", "init_std", "model", "seed", "variant", "step", "params_total"]
SCREEN += ["init_val_loss", "final_val_loss", "best_val_loss", "test_loss"]


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, as every other refusal here
        raise SweepError(f"{message} (see python -m tiedvsuntied.sweep --help)")


def planned(overrides: list[str]) -> pd.DataFrame:
    """The jobs of ``run -m OVERRIDES``, each with its run's row in its sweep directory."""
    overrides = [o for o in overrides if o not in ("-m", "--multirun")]
    with jobs.composed(overrides) as (loader, master):
        todo = jobs.expand(loader, master)
        if not todo:
            raise SweepError("hydra.sweeper is not Hydra's basic sweeper: its jobs are its own")
        plans = jobs.check_jobs(loader, master, todo)
    rows = []
    for job, plan, run_id in zip(todo, plans, jobs.run_ids(plans), strict=True):
        sweep_dir = Path(plan.cfg.results_dir) / plan.cfg.sweep
        row = progress.run_row(find_run_dir(sweep_dir, run_id), run_id)
        row |= {"model": plan.cfg.model.name, "max_steps": plan.cfg.trainer.max_steps}
        row["vocab_size"] = row["vocab_size"] or plan.cfg.data.vocab_size
        c = plan.cfg  # the warnings each job's run will log (0.036 is d^-0.5 at d=768 ...)
        notes = init_std_notes(c.model.n_embd, c.init_std, c.head)
        row |= {"sweep_dir": sweep_dir, "overrides": job.label, "notes": notes}
        rows.append({"job": job.num, **row})
    return pd.DataFrame(rows)


def plan(args: argparse.Namespace) -> None:
    runs = planned(args.overrides)
    rate = progress.rates(runs["sweep_dir"])
    left = progress.seconds_left(runs, rate).map(progress.duration)
    shown = runs.assign(
        run=runs["run_id"],
        steps=[f"{s}/{m}" for s, m in zip(runs["step"], runs["max_steps"], strict=True)],
        left=left.where(~runs["status"].isin(DONE), "-"),
    )[["job", "run", "status", "steps", "left", "overrides"]]
    for sweep_dir in sorted(set(runs["sweep_dir"])):
        print(f"Sweep {sweep_dir.name}: {sweep_dir.resolve()}")
    print(shown.to_string(index=False))
    print(f"{len(runs)} jobs; left: {progress.cost_line(runs, rate)}")
    for job, notes in zip(runs["job"], runs["notes"], strict=True):
        print("".join(f"job {job}: warning: {note}\n" for note in notes), end="")


def status(args: argparse.Namespace) -> None:
    if len(args.sweep) == 1 and "=" not in args.sweep[0]:
        sweep_dir = Path(args.sweep[0])
        if not sweep_dir.is_dir():
            raise SweepError(f"{sweep_dir} is not a sweep directory (<results_dir>/<sweep>/)")
        runs, dirs = progress.sweep_rows(sweep_dir), [sweep_dir]
    else:  # the command line: its pending jobs count too
        runs = planned(args.sweep)
        dirs = list(runs["sweep_dir"])
    for sweep_dir in sorted(set(dirs)):
        print(f"Sweep {sweep_dir.name}: {sweep_dir.resolve()}")
    print(progress.status_text(runs, progress.rates(dirs)))
    for line in (line for d in sorted(set(dirs)) if d.is_dir() for line in progress.damaged(d)):
        print(line)


def check(args: argparse.Namespace) -> None:
    """Every damaged run of the sweep, one line each; exit code 1 if there is one."""
    sweep_dir = Path(args.sweep_dir)
    if not sweep_dir.is_dir():
        raise SweepError(f"{sweep_dir} is not a sweep directory (<results_dir>/<sweep>/)")
    lines = progress.damaged(sweep_dir)
    print("\n".join(lines) or f"no damaged run in {sweep_dir}")
    if lines:
        raise SystemExit(1)


def table(args: argparse.Namespace) -> None:
    """The runs table of ``analysis`` (the one reader of a sweep: the figures' columns), to the
    screen (the columns that tell runs apart) or, with ``--out``, whole to a file."""
    out = Path(args.out or "screen")
    write = {".csv": "to_csv", ".parquet": "to_parquet"}.get(out.suffix)
    if args.out is not None and write is None:
        raise SweepError(f"--out={out} is invalid: end it in .csv or .parquet")
    results = load_results(args.sweep_dir)
    for note in results.notes:  # a damaged run, named (as `check` names it)
        print(f"note: {note}", file=sys.stderr)
    runs = results.runs
    if args.out is None:
        shown = [c for c in SCREEN if runs[c].nunique(dropna=False) > 1 or c in ("name", "status")]
        print(runs[shown].to_string(index=False, float_format="%.4f", na_rep="-"))
        return
    try:
        getattr(runs, write)(out, index=False)
    except OSError as e:
        raise SweepError(f"--out={out} cannot be written ({e.strerror or e})") from None
    print(f"{len(runs)} runs -> {out}")


def dashboard(args: argparse.Namespace) -> None:
    from tiedvsuntied.sweep.dashboard import dashboard as make

    if not Path(args.sweep_dir).is_dir():
        raise SweepError(f"{args.sweep_dir} is not a sweep directory (<results_dir>/<sweep>/)")
    print(make(Path(args.sweep_dir), args.entity))


def parser() -> Parser:
    top = Parser(
        prog="python -m tiedvsuntied.sweep",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = top.add_subparsers(dest="command", required=True, parser_class=Parser)
    p = sub.add_parser("plan", help="the jobs `run -m OVERRIDES` would run, their cost")
    p.add_argument("overrides", nargs="*", help="as for python -m tiedvsuntied.run -m")
    p.set_defaults(func=plan)
    s = sub.add_parser("status", help="counts, progress and ETA of a sweep")
    s.add_argument("sweep", nargs="+", help="a sweep directory, or the sweep's overrides")
    s.set_defaults(func=status)
    c = sub.add_parser("check", help="names every run whose record is damaged (exit code 1)")
    c.add_argument("sweep_dir", help="<results_dir>/<sweep>/")
    c.set_defaults(func=check)
    d = sub.add_parser("dashboard", help="the sweep's W&B view (wandb-workspaces)")
    d.add_argument("sweep_dir", help="<results_dir>/<sweep>/")
    d.add_argument("--entity", help="the W&B entity the runs were synced to")
    d.set_defaults(func=dashboard)
    t = sub.add_parser("table", help="the sweep's runs as CSV or Parquet")
    t.add_argument("sweep_dir", help="<results_dir>/<sweep>/")
    t.add_argument("--out", help="FILE.csv or FILE.parquet (none: the main columns, printed)")
    t.set_defaults(func=table)
    return top


def main(argv: list[str] | None = None) -> None:
    try:
        args = parser().parse_args(argv)
        args.func(args)
    except (*USER_ERRORS, ResultsError) as e:  # a tokenizer not cached, too
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(REFUSED) from None


if __name__ == "__main__":
    main()
