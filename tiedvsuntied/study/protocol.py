"""The protocol every study runs, written once: the lr check at a point, x2 beyond an edge while
its best sits there (at most ``edge_steps`` times), the seeds of each arm at its chosen value,
the clip rule's re-run, the noise floor; ``restore`` (the shipped bundles into their sweeps) and
``bundle`` (the sweeps into them). A piece is a list of command lines (``python -m
tiedvsuntied.run -m +experiment=... overrides``), made from the study's declaration and its lr
table (experiments/<study>/lr_choice.tsv, which ``choose`` writes) when the piece starts; each
command is a resumable multirun, two at a time."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd

from tiedvsuntied.study.declare import Piece, Study, StudyError

Step = tuple[str, "str | None"]  # (piece, point)


# ----------------------------------------------------------------------------- the lr table
def choices(study: Study) -> pd.DataFrame:
    """The study's lr table as its file spells it (every cell a string, "" where empty), so that
    a value goes onto the command line as it was written; no table: no rows."""
    if not study.lr_table.is_file():
        return pd.DataFrame(columns=["arm", "init_std", "run_next"])
    return pd.read_csv(study.lr_table, sep="\t", dtype=str, keep_default_na=False)


def chosen(study: Study) -> str:
    """The lr table's column of the chosen value: the tuned key's last part (optim.lr -> lr)."""
    return study.tuned.rsplit(".", 1)[-1]


def rows_at(study: Study, point: str, table: pd.DataFrame | None = None) -> pd.DataFrame:
    """The lr table's rows of a point (all of them where the table has no model column)."""
    table = choices(study) if table is None else table
    if "model" not in table:
        return table
    p = study.points[point]
    return table[[p.holds(row) for row in table.to_dict("records")]]


def value_at(study: Study, point: str, arm: str, init_std: str) -> str | None:
    """The chosen value of an arm at a point ("" or None: not chosen yet)."""
    rows = rows_at(study, point)
    rows = rows[rows["arm"].eq(arm) & rows["init_std"].eq(init_std)]
    return rows[chosen(study)].iloc[0] if len(rows) else None


# ----------------------------------------------------------------------------- the pieces
def command(study: Study, point: str, arm: str, value: str, seeds: str, **kw: str | None) -> str:
    """``RUN +experiment=E <point> [before] seed=S +arm=A [init_std=X] tuned=V [after]``."""
    parts = [study.run(kw.get("experiment_arm") or arm.split(",")[0]), study.at(point)]
    parts += [kw.get("before"), seeds, f"+arm={arm}"]
    parts += [kw.get("init_std") and f"init_std={kw['init_std']}", f"{study.tuned}={value}"]
    return " ".join(p for p in [*parts, kw.get("after")] if p)


def lr(study: Study, point: str | None) -> list[str]:
    """The lr check: each arm at seed 0 over the first grid."""
    point = study.lr_at or point
    grids = study.points[point].grids
    return [
        command(study, point, c.arm, grids.get(c.arm, study.grid), "seed=0", init_std=c.init_std)
        for c in study.cells
    ]


def lr_edge(study: Study, point: str | None = None) -> list[str]:
    """x2 beyond each edge the lr table names (``run_next``)."""
    out = []
    for row in choices(study).to_dict("records"):
        if not row["run_next"]:
            continue
        where = study.point_of(row)
        out.append(command(study, where, row["arm"], row["run_next"], "seed=0", **std(row)))
    return out


def std(row: dict) -> dict[str, str]:
    return {"init_std": row["init_std"]}


def seeds(study: Study, point: str, seed: str | None = None) -> list[str]:
    """Each arm's seeds at its chosen value (``seed``: what stands for ``seed=...``)."""
    rows = rows_at(study, point)
    if study.seeds_at_init_std is not None:  # written as the experiment's: no init_std=
        rows = rows[rows["init_std"].eq(study.seeds_at_init_std)].assign(init_std=None)
    seed = seed or f"seed={study.seeds}"
    return [
        command(study, point, row["arm"], row[chosen(study)], seed, **std(row))
        for row in rows.to_dict("records")
    ]


def clip(study: Study, point: str) -> list[str]:
    """The clip rule: an arm whose clip bound on too many of its seeds' steps, again raised."""
    if study.clip is None:
        return []
    rows = rows_at(study, point)
    rows = rows[rows.get("clip_rerun", pd.Series("", index=rows.index)).eq("True")]
    c = study.clip
    return [
        command(
            study,
            point,
            row["arm"],
            row[chosen(study)],
            f"seed={s}",
            before=f"sweep={c.sweep}",
            after=c.overrides,
            **std(row),
        )
        for row in rows.to_dict("records")
        for s in c.seeds
    ]


def floor(study: Study, point: str | None = None) -> list[str]:
    """The noise floor: the floor points' seed-0 runs again, at another thread count."""
    return [c for p in study.floor_points for c in seeds(study, p, study.floor)]


def bundle(study: Study, point: str | None = None, results: Path | None = None) -> list[str]:
    """Each sweep that ran into its bundle (python -m tiedvsuntied.bundle)."""
    results = results or study_root() / "results"
    return [
        f"python -m tiedvsuntied.bundle --no-arrays {shown(results / sweep)} "
        f"{shown(study.home / folder)}"
        for folder, sweep in study.bundles.items()
        if (results / sweep).is_dir()
    ]


def shown(path: Path) -> Path:
    """A path as a command run from the checkout's root names it."""
    return path.relative_to(study_root()) if path.is_relative_to(study_root()) else path


PROTOCOL = {  # the protocol's pieces: (make, takes a point, commands at once)
    "lr": Piece(lambda s, p, r: lr(s, p), point=True),
    "lr-edge": Piece(lambda s, p, r: lr_edge(s)),
    "grid": Piece(lambda s, p, r: seeds(s, p), point=True),
    "clip": Piece(lambda s, p, r: clip(s, p), point=True),
    "floor": Piece(lambda s, p, r: floor(s), jobs=1),
    "bundle": Piece(lambda s, p, r: bundle(s, results=r), any_precision=True),
}
OWN_STEPS = ("choose", "restore", "all")  # pieces that are steps of their own, not commands


def pieces(study: Study) -> dict[str, Piece]:
    """Every piece of a study: the protocol's, then its own (which may replace one)."""
    out = {**PROTOCOL, **study.pieces}
    if study.lr_at is not None:  # one lr check for the study: the piece takes no point
        out["lr"] = Piece(out["lr"].make)
    return out


def piece(study: Study, name: str) -> Piece:
    found = pieces(study)
    if name not in found:
        names = " ".join([*found, *OWN_STEPS])
        raise StudyError(f"unknown piece '{name}' of {study.name}: {names}")
    return found[name]


def commands(study: Study, name: str, point: str | None, results: Path) -> list[str]:
    """The command lines of a piece at a point, as the study stands now."""
    p = piece(study, name)
    if p.point and point is None:
        raise StudyError(f"piece '{name}' takes a point: {' '.join(study.points)}")
    if not p.point and point is not None and not (name == "lr" and point == study.lr_at):
        raise StudyError(f"piece '{name}' takes no point (given '{point}')")
    if point is not None:
        study.at(point)  # an unknown point: one line
    return p.make(study, point, results)


# ----------------------------------------------------------------------------- all
def all_steps(study: Study, point: str | None = None) -> Iterator[Step]:
    """``all``'s steps in order, each made when reached (a step reads what the last one ran):
    per point, the lr check x2 beyond an edge while its best sits there, the lr table, the
    seeds and the clip rule; the declared ``then`` pieces after (piece, point); ``closing``."""
    if point is None:
        yield from ((name, None) for name in study.first)
    if study.lr_at is not None:
        yield from lr_steps(study, study.lr_at)
    for p in [point] if point else study.order:
        if study.lr_at is None:
            yield from lr_steps(study, p)
        yield from ((name, None) for name in study.then.get(("lr", p), ()))
        yield ("grid", p)
        if study.clip is not None:
            yield ("choose", None)
            yield ("clip", p)
        yield from ((name, None) for name in study.then.get(("seeds", p), ()))
    for p in [point] if point else study.closing_points:
        yield from ((name, p) for name in study.closing)


def lr_steps(study: Study, point: str) -> Iterator[Step]:
    yield ("lr", None if study.lr_at else point)
    for _ in range(study.edge_steps):  # a step with no edge named runs nothing
        yield ("choose", None)
        yield ("lr-edge", None)
    yield ("choose", None)


def print_all(study: Study, point: str | None, results: Path) -> list[str]:
    """Every command ``all`` would run as the study stands (each once, in ``all``'s order)."""
    out: dict[str, None] = {}
    for name, p in all_steps(study, point):
        if name != "choose":
            out |= dict.fromkeys(commands(study, name, p, results))
    return list(out)


# ----------------------------------------------------------------------------- running
def environment() -> dict[str, str]:
    """This checkout's code, the shared tokenizer cache, W&B offline: as every study runs."""
    root = str(study_root())
    env = {**os.environ, "WANDB_SILENT": "true"}
    env.setdefault("WANDB_MODE", "offline")
    env.setdefault("TIKTOKEN_CACHE_DIR", str(study_root().parent / "shared" / "data" / "tiktoken"))
    env["PYTHONPATH"] = os.pathsep.join(p for p in [root, env.get("PYTHONPATH")] if p)
    return env


def study_root() -> Path:
    from tiedvsuntied.study.declare import EXPERIMENTS

    return EXPERIMENTS.parent


def run_commands(lines: list[str], jobs: int, log: Path) -> int:
    """Run the command lines ``jobs`` at a time, their output appended to ``log``; the number
    that failed (every one runs: a multirun resumes what a failed one left)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    env, root = environment(), study_root()

    def one(line: str) -> int:
        argv = shlex.split(line)
        argv[0] = sys.executable if argv[0] == "python" else argv[0]
        with open(log, "a") as out:
            done = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=root)
            return done.returncode

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return sum(code != 0 for code in pool.map(one, lines))


def restore(study: Study, results: Path) -> list[str]:
    """The shipped bundles' runs into their sweeps, where a run is not there yet (so that no
    piece trains one again); the runs copied."""
    copied = []
    for folder, sweep in study.bundles.items():
        (results / sweep).mkdir(parents=True, exist_ok=True)
        bundle = study.home / folder
        for run in sorted(bundle.iterdir()) if bundle.is_dir() else []:
            if run.is_dir() and not (results / sweep / run.name).exists():
                shutil.copytree(run, results / sweep / run.name)
                copied.append(f"{sweep}/{run.name}")
    return copied


def check_precision(study: Study) -> None:
    """The study's runs are ``study.precision``: trainer.precision=auto must resolve to it on
    this machine, or nothing trains (one line)."""
    if study.precision is None:
        return
    import torch

    from tiedvsuntied.train.config import Precision
    from tiedvsuntied.train.hardware import resolve_precision

    here = resolve_precision(Precision.auto, torch.device("cpu"))
    if here != Precision(study.precision):
        raise StudyError(
            f"{study.name}: trainer.precision=auto would train {here.value} on this machine and "
            f"the study's runs are {study.precision}: run it where auto resolves to "
            f"{study.precision} (a CPU with AMX or AVX512-BF16, a GPU)"
        )
