"""The results contract as code: what a run writes (summary.json, index.json) and the readers
the analysis uses; docs/ARCHITECTURE.md draws the layout. No torch: the reading side imports it.

A run's identity (its id, the roles of the config's keys) is :mod:`.identity`; a file is written
through :mod:`.io`; credentials are scrubbed by :mod:`.secrets`. The trainer writes through
this module and the analysis reads through it; it imports neither.
"""

from __future__ import annotations

import copy
import dataclasses
import gzip
import json
import logging
import time
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

import yaml

from tiedvsuntied.results.identity import Role as Role  # analysis.rows reads it here
from tiedvsuntied.results.identity import current
from tiedvsuntied.results.io import jsonable, read_json, write_json


class Status(str, Enum):
    """A run's state. ``diverged`` (NaN/inf loss) is a result of the study, not an error;
    ``interrupted`` (Ctrl-C, SIGTERM: a checkpoint was saved), ``failed`` (an exception) and
    ``running`` (killed) runs resume when the command is run again. In the order the analysis
    prefers a run's record when it finds the run twice: a finished rerun hides a failed try."""

    finished = "finished"
    diverged = "diverged"
    running = "running"
    interrupted = "interrupted"
    failed = "failed"

    @property
    def done(self) -> bool:
        return self in (Status.finished, Status.diverged)


DONE = [s.value for s in Status if s.done]  # as the runs tables spell a status
RUN_FILES = ("summary.json", "config.yaml", "metrics.jsonl")  # a run's record (beside probes/)
# a results bundle's copy of metrics.jsonl, gzipped (bundle.py): bundles are committed, and its
# lines, the bulk of a run's record, shrink about tenfold
BUNDLED_METRICS = "metrics.jsonl.gz"


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


# A part's field that summary.json leaves out: the loop's own (trainer.summary writes what follows)
LOOP_ONLY = {"summary": False}


@dataclass(kw_only=True)
class TrainState:
    """The loop's state, a part of the run's record (RunSummary): all that a checkpoint carries
    besides weights and RNGs (not the test losses: they are taken once, at the end)."""

    step: int = 0
    tokens: int = 0
    init_val_loss: float | None = None
    init_logit_std: float | None = None
    init_self_logit: float | None = None  # step 0: mean logit of the input token itself
    init_self_target_frac: float | None = None  # of the val positions, target == input token
    best_val_loss: float | None = None
    best_step: int | None = None
    # the loop's own; summary.json writes final_val_loss and clip_frac (clipped_steps / step)
    last_val_loss: float | None = field(default=None, metadata=LOOP_ONLY)
    clipped_steps: int = field(default=0, metadata=LOOP_ONLY)  # steps whose gradient was clipped
    time_s: dict = field(default_factory=dict)  # seconds of wall time per part (train/clock.PARTS)
    # ... of its processes' CPU time (all threads; None: resumed from a checkpoint without them)
    cpu_s: dict | None = field(default_factory=dict)
    # each start of the run, resumes too: {"step", "at", "git_commit", "git_dirty", "hardware",
    # "precision"}, so that a run resumed on other code or hardware says which ran which steps
    # (None: unrecorded); a resume in another precision is refused (train/setup.same_precision)
    starts: list = field(default_factory=list)


@dataclass(kw_only=True)
class Derived:
    """What the config implies on the machine that trains the run, worked out once at set-up: a
    part of the run's record, and config.yaml's ``derived`` (in this order). The defaults are a
    summary's from before a field existed."""

    vocab_size: int = 0
    params: dict = field(default_factory=dict)  # model.count_parameters and "trainable"
    flops_per_token: float | None = None
    init_std_resolved: dict = field(default_factory=dict)  # model.init_stds(); summary: emb, head
    lr_scales: dict | None = None  # by optimizer group (train.optim; untie_at: + head); None: older
    device: str | None = None
    world_size: int = 1  # processes that trained it (torchrun)
    threads: int | None = None  # torch's CPU threads (compiled CPU runs differ between counts)
    precision: str | None = None  # bf16: the forward passes under autocast; fp32: none
    compiled: bool | None = None  # False from the step torch.compile failed on (then eager)
    peak_tflops: float | None = None  # the MFU denominator used (trainer.peak_tflops pins it)
    data_fingerprint: str = ""
    tokens_per_step: int | None = field(default=None, metadata=LOOP_ONLY)  # the loop's own
    # the regime (docs/model.md, "The head's share"): rho = V*d / (V*d + non-embedding), the
    # tied definition and the map's x axis; rho_untied counts the head's V*d twice
    rho: float | None = None
    rho_untied: float | None = None
    non_embedding_params: int | None = None
    encoding: str | None = None  # data.encoding: gpt2, bytes, bpe (trained on the train split)
    bytes_per_token: float | None = None  # UTF-8 bytes per token of the train split
    git_commit: str | None = None  # the code that ran the run (its last start), from git
    git_dirty: bool | None = None  # its code (train.setup.CODE_PATHS) differed from git_commit
    hardware: str | None = None  # train.hardware.processor: what its last start computed on


def fields_of(record: TrainState | Derived, cls: type) -> dict:
    """The fields that the part ``cls`` (TrainState, Derived) declares, of ``record`` (the part, or
    the RunSummary it is part of), as a new dict in the part's order: a checkpoint's
    ``train_state``, config.yaml's ``derived``."""
    return copy.deepcopy({f.name: getattr(record, f.name) for f in dataclasses.fields(cls)})


@dataclass
class RunSummary(TrainState, Derived):
    """``summary.json``: one run's identity, status and headline numbers. The run's one record:
    its parts TrainState and Derived (their fields are its fields) are updated by the loop and
    the set-up, and trainer.summary adds what follows from them."""

    run_id: str
    name: str
    sweep: str
    tie: bool
    init_std: str  # canonical spelling (model.canonical_init_std)
    model: str
    seed: int
    status: Status = Status.running
    replicate: int = 0  # a second run of one config: the noise floor
    # the id it was stored under before its id changed: a run of trainer.precision=auto that
    # trained in fp32 was hashed as auto until results.identity.hashed_precision (issue 54)
    formerly: str | None = None
    error: str | None = None
    n_layer: int = 0
    n_head: int = 0
    n_embd: int = 0
    block_size: int = 0
    t5_rescale: bool = False  # head.t5_rescale
    data: str = ""
    max_steps: int = 0
    untie_at: float | None = None  # scheduled untying: the config's head.untie_at
    untie_step: int | None = None  # ... as a step
    params_untied: dict | None = None  # count_parameters after the switch
    final_val_loss: float | None = None
    test_loss: float | None = None
    test_loss_at_best: float | None = None  # test split at best_step: early stopping on validation
    heldout: dict | None = None  # {"val"|"test": ...}: beside the count models (evaluation.heldout)
    seen_vocab_frac: float | None = None  # of the vocabulary, the part in the train split
    tokens_per_param: float | None = None  # tokens trained / total parameters
    tokens_per_nonemb_param: float | None = None
    train_bytes: float | None = None  # bytes of text trained on: the budget across vocabularies
    val_bpb: float | None = None  # the last validation loss in bits per byte
    test_bpb: float | None = None  # test_loss in bits per byte
    clip_frac: float | None = None  # of the optimizer steps, those whose gradient norm was clipped
    diverged_at_step: int | None = None
    resumed_from_step: int | None = None
    wandb_run_id: str | None = None
    wandb_mode: str | None = None
    wandb_dir: str | None = None
    started_at: str = field(default_factory=now)
    updated_at: str = field(default_factory=now)
    wall_time_s: float | None = None  # over the run's processes: the sum of time_s
    tokens_per_s: float | None = None  # tokens / time_s["step"]: the run's own throughput
    tokens_per_cpu_s: float | None = None  # tokens / cpu_s["step"]: bench --clock cpu's measure

    def to_dict(self) -> dict:
        """summary.json's keys: every field but the loop's own (LOOP_ONLY)."""
        fields = dataclasses.fields(self)
        kept = {f.name: getattr(self, f.name) for f in fields if f.metadata.get("summary", True)}
        return jsonable(copy.deepcopy({**kept, "status": Status(self.status)}))

    @classmethod
    def from_dict(cls, d: dict) -> RunSummary:
        names = {f.name for f in dataclasses.fields(cls)}
        nonfinite = ("nan", "inf", "-inf")  # written as strings (JSON has no such numbers)
        kept = {k: float(v) if v in nonfinite else v for k, v in d.items() if k in names}
        kept["status"] = Status(kept.get("status", "running"))
        return cls(**kept)

    def write(self, run_dir: Path) -> None:
        self.updated_at = now()
        write_json(Path(run_dir) / "summary.json", self.to_dict())


@dataclass
class IndexEntry:
    """One run in ``<sweep>/index.json``: how it was asked for and where it stands."""

    name: str
    status: Status
    path: str  # the run directory, relative to the sweep directory
    updated_at: str = field(default_factory=now)
    overrides: list = field(default_factory=list)  # the Hydra overrides that made it


# ---------------------------------------------------------------------------- index and reading


def update_index(sweep_dir: Path, run_id: str, entry: IndexEntry) -> None:
    """Record one run in ``<sweep>/index.json`` (locked: parallel jobs share the file)."""
    from filelock import FileLock

    with FileLock(str(sweep_dir / ".index.lock")):
        index = read_json(sweep_dir / "index.json") or {}
        if not entry.overrides:  # a rerun without overrides keeps those of the first call
            entry.overrides = index.get(run_id, {}).get("overrides", [])
        index[run_id] = {**dataclasses.asdict(entry), "status": Status(entry.status).value}
        write_json(sweep_dir / "index.json", index)


def read_summary(run_dir: Path) -> RunSummary | None:
    d = read_json(Path(run_dir) / "summary.json")
    try:
        return RunSummary.from_dict(d) if d else None
    except (TypeError, ValueError):
        return None


def read_index(sweep_dir: Path) -> dict[str, IndexEntry]:
    index = read_json(Path(sweep_dir) / "index.json") or {}
    return {
        run_id: IndexEntry(**{**e, "status": Status(e["status"])}) for run_id, e in index.items()
    }


def read_metrics(run_dir: Path) -> list[dict]:
    """The lines of ``metrics.jsonl``, an unreadable one skipped with a warning naming it, but for
    a last line cut short by a kill (:func:`metrics_lines`), skipped in silence."""
    out, bad = metrics_lines(run_dir)
    if bad:
        path = Path(run_dir) / "metrics.jsonl"
        logging.getLogger(__name__).warning("%s: unreadable line(s) %s skipped", path, bad)
    return out


def metrics_lines(run_dir: Path) -> tuple[list[dict], list[int]]:
    """``metrics.jsonl``'s records (a bundle's BUNDLED_METRICS where there is no plain one), and
    the numbers (from 1) of its lines that cannot be read: damage, but for a last line without
    its newline, cut short by a kill (not counted)."""
    plain, bundled = Path(run_dir) / "metrics.jsonl", Path(run_dir) / BUNDLED_METRICS
    try:
        if plain.exists() or not bundled.exists():
            text = plain.read_text(errors="replace")
        else:
            text = gzip.decompress(bundled.read_bytes()).decode(errors="replace")
    except (OSError, EOFError):  # EOFError: a gzip cut short
        return [], []
    lines, out, bad = text.splitlines(), [], []
    for number, line in enumerate(lines, 1):
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if isinstance(record, dict):
            out.append(record)
        elif number < len(lines) or text.endswith("\n"):
            bad.append(number)
    return out, bad


# libyaml's safe loader where PyYAML was built with it (the same objects, a fifth of the time)
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_config(run_dir: Path) -> dict:
    """A run's config.yaml, in today's layout (:func:`current`)."""
    try:
        text = (Path(run_dir) / "config.yaml").read_text()
        return current(yaml.load(text, Loader=SAFE_LOADER) or {})
    except (OSError, yaml.YAMLError):
        return {}
