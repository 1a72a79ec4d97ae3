"""A study's declaration: what the protocol (``study.protocol``) needs to run it, in one frozen
value. A study package (``tiedvsuntied/studies/<name>/__init__.py``) builds one ``Study`` and
exposes it as ``STUDY``; nothing here names a study."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tiedvsuntied.presets import CONF_DIR

EXPERIMENTS = CONF_DIR.parent / "experiments"  # experiments/<study>/: README, TSVs, bundles
RUN = "python -m tiedvsuntied.run -m"  # every command a piece prints starts so


@dataclass(frozen=True)
class Point:
    """One point of a study: a body (``model=``), its vocabulary (``data.vocab_size``: None is
    the encoding's own) and, where the study holds a text budget fixed across points, the bytes
    per token of the point's tokenizer, from which the steps follow."""

    model: str
    vocab_size: int | None = None
    bytes_per_token: float | None = None
    budget_bytes: int | None = None  # of training text per run: steps = budget / bytes a step
    tokens_per_step: int = 2048
    evals: int = 10  # evaluations along a run (the token axis)
    ckpt_interval: int = 200

    # an arm's first lr grid at this point, where it is not the study's (arm -> "a,b,c")
    grids: Mapping[str, str] = field(default_factory=dict)

    @property
    def steps(self) -> int | None:
        """The steps that read the budget (None: the experiment's own)."""
        if self.budget_bytes is None or self.bytes_per_token is None:
            return None
        return int(self.budget_bytes / (self.tokens_per_step * self.bytes_per_token) + 0.5)

    def overrides(self) -> str:
        out = [f"model={self.model}"]
        if self.vocab_size is not None:
            out.append(f"data.vocab_size={self.vocab_size}")
        if (steps := self.steps) is not None:
            out += [
                f"trainer.max_steps={steps}",
                f"trainer.eval_interval={-(-steps // self.evals)}",
            ]
            out.append(f"trainer.ckpt_interval={self.ckpt_interval}")
        return " ".join(out)

    def holds(self, row: Mapping[str, Any]) -> bool:
        """Whether a row of the lr table (strings) is this point's: its body, its V and, where
        the table has the column (a study of two budgets at one body), its steps."""
        same = row.get("model") == self.model and str(row.get("vocab_size")) == str(self.vocab_size)
        return same and str(row.get("max_steps") or self.steps) == str(self.steps)


@dataclass(frozen=True)
class Cell:
    """An arm of the lr check (``+arm=``, conf/arm) and, where the command sets it, its init std."""

    arm: str
    init_std: str | None = None


@dataclass(frozen=True)
class Clip:
    """The clip rule's re-run: an arm whose clip binds on too many steps (``clip_rerun`` in the
    lr table) runs its seeds again in ``sweep`` with ``overrides`` (the clip raised)."""

    sweep: str
    overrides: str
    seeds: tuple[str, ...]  # one command each, so that two run at once


@dataclass(frozen=True)
class Piece:
    """A study's own piece: ``make(study, point, results)`` -> its command lines."""

    make: Callable[..., list[str]]
    point: bool = False  # whether it takes a point
    jobs: int = 2  # commands at once (1: runs of 2 threads each)
    any_precision: bool = False  # may run where trainer.precision=auto is not the study's
    report: bool = False  # its lines are a report to print, not commands to run


@dataclass(frozen=True)
class Study:
    """One study. Pieces: the protocol's (lr, lr-edge, grid, clip, floor, choose, restore,
    bundle, all) and ``pieces``, the study's own."""

    name: str
    title: str
    experiment: str  # conf/experiment/<experiment>.yaml: +experiment= of every command
    sweep: str  # where its runs land (the experiment's ``sweep``)
    points: Mapping[str, Point]
    cells: tuple[Cell, ...]  # the lr check's arms
    tuned: str  # the key the lr check varies, e.g. optim.lr
    grid: str  # its first grid, as the command line takes it: "1e-3,2e-3,4e-3"
    choose: Callable[..., Any]  # (study, runs table) -> the lr table (lr_choice.tsv)
    seeds: str  # the seeds each arm runs at its chosen value: "1,2,3"
    lr_at: str | None = None  # the lr check's one point (None: every point has its own)
    # the seeds run the lr table's rows at this init std, written as the experiment's (None:
    # every row, its init_std on the command line)
    seeds_at_init_std: str | None = None
    arm_experiments: Mapping[str, str] = field(default_factory=dict)  # an arm's own experiment
    edge_steps: int = 4  # x2 beyond an edge at most this often per point
    clip: Clip | None = None
    floor_points: tuple[str, ...] = ()  # the noise floor: these points' seeds run again ...
    floor: str = "seed=0 replicate=1 trainer.threads=2"  # ... with these in place of seed=
    bundles: Mapping[str, str] = field(default_factory=dict)  # bundle folder -> its sweep
    precision: str | None = "bf16"  # what trainer.precision=auto must resolve to here
    first: tuple[str, ...] = ()  # ``all``: these pieces (no point) before its points
    order: tuple[str, ...] = ()  # ``all``'s points, in priority order
    # ``all``: after (piece, point) run these pieces (no point); then ``closing`` per point
    then: Mapping[tuple[str, str], tuple[str, ...]] = field(default_factory=dict)
    closing: tuple[str, ...] = ()
    closing_points: tuple[str, ...] = ()
    pieces: Mapping[str, Piece] = field(default_factory=dict)
    home: Path = None  # type: ignore[assignment]  # experiments/<name>/ unless given

    def __post_init__(self) -> None:
        if self.home is None:
            object.__setattr__(self, "home", EXPERIMENTS / self.name)

    @property
    def lr_table(self) -> Path:
        return self.home / "lr_choice.tsv"

    def experiment_of(self, arm: str) -> str:
        return self.arm_experiments.get(arm, self.experiment)

    def run(self, arm: str | None = None) -> str:
        """The command's head: ``python -m tiedvsuntied.run -m +experiment=...``."""
        return f"{RUN} +experiment={self.experiment if arm is None else self.experiment_of(arm)}"

    def at(self, point: str) -> str:
        """The overrides of a point; a point not declared is one line naming the ones there are."""
        if point not in self.points:
            raise StudyError(f"unknown point '{point}': {' '.join(self.points)}")
        return self.points[point].overrides()

    def point_of(self, row: Mapping[str, Any]) -> str | None:
        """The point of a row of the lr table (its model, V and steps; the lr check's point)."""
        if self.lr_at is not None:
            return self.lr_at
        return next((name for name, p in self.points.items() if p.holds(row)), None)


class StudyError(ValueError):
    """A user's mistake: one line naming the key and the valid values (exit 2)."""
