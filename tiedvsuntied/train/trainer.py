"""``train(cfg)``: set-up -> loop -> finish, for the one trainer every run shares.

A run is identified by its config (results.run_id), so calling ``train`` again with the same
config skips a finished run and resumes an unfinished one from its checkpoint with exactly the
batches and losses an uninterrupted run would have had: the batch order is a pure function of
(seed, step) and the checkpoint holds the TrainState and every RNG state. Status
(results.Status): ``running`` while training (or killed), ``finished``, ``diverged`` (NaN/inf:
a result, not an error), ``interrupted`` (Ctrl-C or SIGTERM, after a checkpoint) and ``failed``
(an exception): a rerun resumes both.

Under torchrun rank 0 decides whether the run trains, keeps every record and checkpoint and
evaluates; the other ranks follow it (the functions named ``*_on_every_rank`` and
``dist.share_decision`` are the protocol).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from filelock import FileLock, Timeout
from omegaconf import OmegaConf

from tiedvsuntied import results
from tiedvsuntied.data.cache import Corpus, prepare_data
from tiedvsuntied.results import IndexEntry, MetricsLog, RunSummary, Status
from tiedvsuntied.train import dist
from tiedvsuntied.train.checkpoint import CheckpointMismatch
from tiedvsuntied.train.config import (
    Config,
    ConfigError,
    RunPlan,
    check_budget,
    check_config,
    resolved_config,
    untie_step,
)
from tiedvsuntied.train.evaluation import finish
from tiedvsuntied.train.finetune import unreadable
from tiedvsuntied.train.loop import Diverged, run_loop
from tiedvsuntied.train.setup import build_run
from tiedvsuntied.train.state import Run

log = logging.getLogger(__name__)


def train(cfg: Config | RunPlan, overrides: Sequence[str] | None = None) -> RunSummary | None:
    """Train the run ``cfg`` describes (skip it if done, resume it if not); its summary (None
    on ranks > 0). ``cfg`` may be the plan ``check_config`` returned, so a job checks its
    config once. Raises ConfigError/DataError before anything of the run is written, and
    re-raises a failure after recording it."""
    overrides = list(overrides or ())
    plan = cfg if isinstance(cfg, RunPlan) else check_config(cfg, overrides)
    dist.init(plan.device)
    corpus = prepare_data(plan.cfg.data)  # under torchrun one rank builds the cache
    check_tokenizer(plan, corpus)
    check_budget(plan.cfg.trainer, corpus.n_tokens("train"), plan.cfg.model.block_size)
    record, run_dir = new_record(plan, corpus)
    if not dist.is_main():
        if dist.share_decision(None):
            follow_main(plan, corpus, record, run_dir)
        return None
    return lead(plan, corpus, record, run_dir, overrides)


def check_tokenizer(plan: RunPlan, corpus: Corpus) -> None:
    cfg = plan.cfg
    if plan.start is not None and corpus.vocab_size != cfg.model.vocab_size:
        raise ConfigError(
            f"init_from={cfg.init_from} has {cfg.model.vocab_size:,} tokens but data.encoding="
            f"{cfg.data.encoding} data.vocab={cfg.data.vocab.value} gives "
            f"{corpus.vocab_size:,}: fine-tune with the start's tokenizer"
        )


def new_record(plan: RunPlan, corpus: Corpus) -> tuple[RunSummary, Path]:
    """The summary of the run as it starts, and its directory (an existing run of the same
    identity keeps its directory and name, whatever naming scheme made them)."""
    cfg, config = plan.cfg, resolved_config(plan.cfg)
    name = results.run_name(cfg.tie, config["init_std"], cfg.model.name, cfg.seed, cfg.replicate)
    run_dir = results.find_run_dir(
        Path(cfg.results_dir) / cfg.sweep, results.run_id(config, name, corpus.fingerprint)
    )
    record = RunSummary(
        run_id=run_dir.name,
        name=run_dir.name.rsplit("-", 1)[0],
        sweep=cfg.sweep,
        tie=cfg.tie,
        init_std=config["init_std"],
        model=cfg.model.name,
        seed=cfg.seed,
        replicate=cfg.replicate,
        n_layer=cfg.model.n_layer,
        n_head=cfg.model.n_head,
        n_embd=cfg.model.n_embd,
        vocab_size=corpus.vocab_size,
        block_size=cfg.model.block_size,
        t5_rescale=cfg.model.t5_rescale,
        data=cfg.data.name,
        data_fingerprint=corpus.fingerprint,
        max_steps=cfg.trainer.max_steps,
        untie_at=cfg.untie_at,
        untie_step=untie_step(cfg.untie_at, cfg.trainer.max_steps),
        world_size=dist.world_size(),
    )
    return record, run_dir


def lead(
    plan: RunPlan, corpus: Corpus, record: RunSummary, run_dir: Path, overrides: list[str]
) -> RunSummary | None:
    """Rank 0: decide whether the run trains (not if another process holds it or it is done),
    tell the other ranks, and train it."""
    run_dir.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(run_dir / ".lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        log.warning("[%s] is being trained by another process; skipping", record.name)
        dist.share_decision(False)
        return results.read_summary(run_dir)
    try:
        previous = results.read_summary(run_dir)
        entry = IndexEntry(record.name, Status.running, record.run_id, overrides=overrides)
        if is_done(previous, run_dir, record.name):
            log.info(
                "[%s] already %s at step %d; skipping (delete %s to train it again)",
                record.name,
                previous.status.value,
                previous.step,
                run_dir,
            )
            entry.status = previous.status
            results.update_index(run_dir.parent, record.run_id, entry)
            dist.share_decision(False)
            return previous
        if previous:
            record.started_at = previous.started_at
        dist.share_decision(True)
        return train_and_record(plan, corpus, record, run_dir, entry)
    finally:
        lock.release()


def is_done(previous: RunSummary | None, run_dir: Path, name: str) -> bool:
    """Whether the run is done. A finished run whose ``model.pt`` is there but does not load
    (cut short) is not: it is trained again from step 0, with a warning, and the broken file
    is set aside as ``model.pt.bad`` until the new one is written."""
    if not (previous and previous.status.done):
        return False
    weights = run_dir / "checkpoints" / "model.pt"
    if previous.status != Status.finished or not weights.exists():
        return True
    if (why := unreadable(weights)) is None:
        return True
    log.warning(
        "[%s] finished, but %s does not load (%s): training it again from step 0 "
        "(the broken file is kept as model.pt.bad until the run finishes)",
        name,
        weights,
        why,
    )
    os.replace(weights, weights.with_suffix(".pt.bad"))
    return False


def follow_main(plan: RunPlan, corpus: Corpus, record: RunSummary, run_dir: Path) -> None:
    """Ranks > 0: rank 0's set-up and steps, without records (rank 0 keeps them)."""
    run = build_run(plan, corpus, record, run_dir)
    with contextlib.suppress(Diverged):  # rank 0 records it
        run_loop(run)


def train_and_record(
    plan: RunPlan, corpus: Corpus, record: RunSummary, run_dir: Path, entry: IndexEntry
) -> RunSummary:
    """Rank 0: set the run up (a checkpoint that does not fit the code stops it here, before
    any file is changed), then train it; its status is recorded whatever happens, and the
    metrics log and W&B are always closed."""
    t0 = time.time()
    try:
        run = build_run(plan, corpus, record, run_dir)
    except CheckpointMismatch:  # one line from the entry point; no file changes
        raise
    except (Exception, KeyboardInterrupt) as e:
        record_failure(record, run_dir, entry, e)
        raise
    write_run_files(run)
    try:
        with MetricsLog(run_dir, run.resumed_from) as run.metrics:
            start_wandb(run)
            results.update_index(run_dir.parent, record.run_id, entry)
            train_to_the_end(run)
            record.wall_time_s = time.time() - t0
            run.metrics.failed = False
            run.metrics.summary(run.summary().to_dict())
        return run.summary()
    except KeyboardInterrupt as e:
        record.status = Status.interrupted  # a checkpoint was saved: not done, a rerun resumes
        record.error = (
            f"interrupted ({e or 'Ctrl-C'}) at step {run.state.step}; rerun the command to resume"
        )
        raise
    except Exception as e:
        record.status, record.error = Status.failed, results.scrub(f"{type(e).__name__}: {e}")
        log.error("[%s] failed: %s", record.name, record.error)
        raise
    finally:
        run.write_summary()
        entry.status = record.status
        results.update_index(run_dir.parent, record.run_id, entry)


def train_to_the_end(run: Run) -> None:
    """The loop, then the finish; a divergence is the run's result."""
    try:
        run_loop(run)
        finish(run)
    except Diverged as e:
        run.record.status, run.record.error = Status.diverged, str(e)
        run.record.diverged_at_step = run.state.step
        log.warning("[%s] diverged: %s", run.record.name, e)


def record_failure(record: RunSummary, run_dir: Path, entry: IndexEntry, e: BaseException) -> None:
    """A run that failed (or was interrupted) before it was set up: its summary and index
    entry say so."""
    stopped = isinstance(e, KeyboardInterrupt)
    record.status = Status.interrupted if stopped else Status.failed
    record.error = results.scrub(f"{'interrupted' if stopped else type(e).__name__}: {e}")
    log.error("[%s] failed: %s", record.name, record.error)
    record.write(run_dir)
    entry.status = record.status
    results.update_index(run_dir.parent, record.run_id, entry)


def start_wandb(run: Run) -> None:
    """The W&B mirror, with the run's config and what it implies here."""
    cfg, record = run.cfg, run.record
    record.wandb_run_id = results.wandb_id(cfg.sweep, record.run_id)
    mode = run.metrics.start_wandb(
        cfg.wandb,
        run_id=record.wandb_run_id,
        name=record.name,
        group=cfg.sweep,
        run_dir=run.run_dir,
        config={**resolved_config(cfg), "derived": run.derived},
    )
    record.wandb_mode = mode.value
    if run.metrics.wandb is not None:
        record.wandb_dir = str(Path(run.metrics.wandb.dir).parent)


def write_run_files(run: Run) -> None:
    """config.yaml (the resolved config and what it implies on this machine), the train
    split's token counts, and the summary of the run as it starts."""
    config = {**resolved_config(run.cfg), "derived": run.derived}
    results.atomic_write(run.run_dir / "config.yaml", OmegaConf.to_yaml(config))
    np.save(run.run_dir / "token_freq.npy", run.freq)
    run.write_summary()
