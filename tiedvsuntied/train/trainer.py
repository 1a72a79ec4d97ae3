"""``train(cfg)``: the one trainer every run shares, read top to bottom: whether the run
trains, its set-up, the loop (step, untie, log, evaluate, checkpoint, stop), its finish.

A run is identified by its config (train.config.run_id), so calling ``train`` again with the
same config skips a done run and resumes an unfinished one (results.records.Status) from its
checkpoint with exactly the batches and losses an uninterrupted run would have had: the batch
order is a pure function of (seed, step) and the checkpoint holds the TrainState and every RNG
state. Under torchrun rank 0 decides whether the run trains, keeps every record and checkpoint
and evaluates; the other ranks follow it through the same set-up and steps (train/dist.py).
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

import numpy as np
import torch
import torch._dynamo.exc
import torch._inductor.exc
from filelock import FileLock, Timeout
from omegaconf import OmegaConf

from tiedvsuntied.data.batches import iter_eval_batches
from tiedvsuntied.data.cache import prepare_data
from tiedvsuntied.model.accounting import count_parameters
from tiedvsuntied.results.io import atomic_write
from tiedvsuntied.results.metrics import (
    PARAMS_,
    TOKENS,
    TRAIN_CLIP_FRAC,
    TRAIN_GRAD_NORM,
    TRAIN_LOSS,
    TRAIN_LR,
    TRAIN_LR_,
    TRAIN_MFU,
    TRAIN_TOKENS_PER_S,
    VAL_PPL,
)
from tiedvsuntied.results.metrics_log import MetricsLog
from tiedvsuntied.results.records import (
    Derived,
    IndexEntry,
    RunSummary,
    Status,
    fields_of,
    read_summary,
    update_index,
)
from tiedvsuntied.results.secrets import scrub
from tiedvsuntied.results.state import config_damage
from tiedvsuntied.train import dist
from tiedvsuntied.train.checkpoint import CheckpointMismatch, is_done
from tiedvsuntied.train.clock import PARTS
from tiedvsuntied.train.config import Config, ConfigError, Precision, check_budget, resolved_config
from tiedvsuntied.train.evaluation import bpb, four_decimals, measure, measure_test, save_arrays
from tiedvsuntied.train.optim import EMBEDDING_SIDE, lr_at, lr_scales, set_lr, untie
from tiedvsuntied.train.plan import RunPlan, check_config
from tiedvsuntied.train.setup import Data, Run, build_run, identity

log = logging.getLogger(__name__)

# What torch.compile raises when it cannot compile the model (tracing or code generation);
# any other error of a compiled step is the run's own and is not retried.
COMPILE_ERRORS = (torch._dynamo.exc.TorchDynamoException, torch._inductor.exc.InductorError)


class Diverged(Exception):
    """A non-finite loss or gradient: a result of the study, not an error."""


def train(cfg: Config | RunPlan, overrides: Sequence[str] | None = None) -> RunSummary | None:
    """Train the run ``cfg`` (or the plan ``check_config`` made of it) describes: skip it if
    done, resume it if not; its summary (None on ranks > 0). Raises ConfigError/DataError
    before anything of the run is written, and re-raises a failure after recording it."""
    overrides = list(overrides or ())
    plan = cfg if isinstance(cfg, RunPlan) else check_config(cfg, overrides)
    dist.init(plan.device)
    corpus = prepare_data(plan.cfg.data)  # under torchrun one rank builds the cache
    if plan.start is not None and corpus.vocab_size != plan.cfg.model.vocab_size:
        c = plan.cfg
        raise ConfigError(
            f"init_from={c.init_from} has {c.model.vocab_size:,} tokens but data.encoding="
            f"{c.data.encoding} data.vocab={c.data.vocab.value} gives "
            f"{corpus.vocab_size:,}: fine-tune with the start's tokenizer"
        )
    check_budget(plan.cfg.trainer, corpus.n_tokens("train"), plan.cfg.model.block_size)
    for split in ("val", "test") if plan.cfg.trainer.test_eval else ("val",):  # too short?
        next(iter_eval_batches(corpus.tokens(split), plan.cfg.model.block_size, 1, 1))
    data = Data.of(plan, corpus)
    record, run_dir = identity(plan, corpus)
    if dist.is_main():
        return lead(plan, data, record, run_dir, overrides)
    if dist.from_main(None):  # rank 0's decision: the run trains
        run = build_run(plan, data, record, run_dir)
        with contextlib.suppress(Diverged):  # rank 0 records it
            run_loop(run)
    return None


def lead(plan: RunPlan, data: Data, record: RunSummary, run_dir: Path, overrides: list[str]):
    """Rank 0: decide whether the run trains (not if another process holds it or it is done),
    tell the other ranks, train it."""
    run_dir.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(run_dir / ".lock"))
    try:
        held = lock.acquire(timeout=0)
    except Timeout:
        log.warning("[%s] is being trained by another process; skipping", record.name)
        dist.from_main(False)
        return read_summary(run_dir)
    with held:
        previous = read_summary(run_dir)
        entry = IndexEntry(record.name, Status.running, record.run_id, overrides=overrides)
        if is_done(previous, run_dir / "checkpoints", record.name):
            log.info(
                f"[{record.name}] already {previous.status.value} at step {previous.step}; "
                f"skipping (delete {run_dir} to train it again)"
            )
            entry.status = previous.status
            update_index(run_dir.parent, record.run_id, entry)
            restore_config(plan, previous, run_dir)
            dist.from_main(False)
            return previous
        if previous:
            record.started_at = previous.started_at
        dist.from_main(True)
        return train_and_record(plan, data, record, run_dir, entry)


def restore_config(plan: RunPlan, previous: RunSummary, run_dir: Path) -> None:
    """A done run whose config.yaml is missing or unreadable gets it again: the resolved config
    (the same run id, so the same config) and, as ``derived``, the copies its summary keeps."""
    if not (damage := config_damage(run_dir)):
        return
    kept = asdict(previous)
    derived = {f.name: kept[f.name] for f in fields(Derived) if kept.get(f.name) is not None}
    config = {**resolved_config(plan.cfg), "derived": derived}
    atomic_write(run_dir / "config.yaml", OmegaConf.to_yaml(config))
    log.warning(
        "[%s] %s: rewritten from the resolved config and summary.json", previous.name, damage[0]
    )


def train_and_record(
    plan: RunPlan, data: Data, record: RunSummary, run_dir: Path, entry: IndexEntry
) -> RunSummary:
    """Rank 0: set the run up (a checkpoint that does not fit the code stops it here, before
    any file is changed), write config.yaml, then loop and finish; the status is recorded
    whatever happens, and the metrics log and W&B are always closed."""
    t0, cpu0, run = time.perf_counter(), time.process_time(), None
    try:
        run = build_run(plan, data, record, run_dir)
        run.clock.since, run.clock.cpu_since = t0, cpu0  # the set-up counts as "other"
        config = {**resolved_config(run.cfg), "derived": fields_of(run.record, Derived)}
        atomic_write(run_dir / "config.yaml", OmegaConf.to_yaml(config))
        np.save(run_dir / "token_freq.npy", run.freq)
        summary(run).write(run_dir)
        with MetricsLog(run_dir, run.resumed_from) as run.metrics:
            run.metrics.start_wandb(run.cfg.wandb, record, config)
            update_index(run_dir.parent, record.run_id, entry)
            try:
                run_loop(run)
                finish(run)  # only a finished run is tested
            except Diverged as e:  # a result of the study, not an error
                record.status, record.error = Status.diverged, str(e)
                record.diverged_at_step = run.state.step
                log.warning("[%s] diverged: %s", record.name, e)
            record.wall_time_s = sum(run.clock.flush(run.state).values())
            run.metrics.failed = False
            run.metrics.wandb_summary(summary(run).to_dict())
        return summary(run)
    except CheckpointMismatch:  # one line from the entry point; no file is changed
        raise
    except (Exception, KeyboardInterrupt) as e:  # a rerun resumes it
        step = None if run is None else run.state.step  # None: the set-up failed
        stopped = isinstance(e, KeyboardInterrupt)  # Ctrl-C or a signal: after a checkpoint
        record.status = Status.interrupted if stopped else Status.failed
        if stopped:
            e.step = step  # for the entry point's one line
        if stopped and step is not None:
            record.error = (
                f"interrupted ({e or 'Ctrl-C'}) at step {step}; rerun the command to resume"
            )
        else:
            record.error = scrub(f"{'interrupted' if stopped else type(e).__name__}: {e}")
            log.error("[%s] failed: %s", record.name, record.error)
        raise
    finally:
        if record.status != Status.running:  # recorded whatever happened, but a mismatch
            (record if run is None else summary(run)).write(run_dir)
            entry.status = record.status
            update_index(run_dir.parent, record.run_id, entry)


def summary(run: Run) -> RunSummary:
    """summary.json now: the run's record (identity and outcome, its TrainState and Derived
    parts), with what follows from them."""
    r = run.record
    return replace(
        r,
        init_std_resolved={k: r.init_std_resolved[k] for k in ("emb", "head")},
        seen_vocab_frac=float((run.freq > 0).mean()),
        resumed_from_step=run.resumed_from,
        final_val_loss=r.last_val_loss,
        clip_frac=r.clipped_steps / r.step if r.step else None,
        **regime(r.params, r.tokens, r.bytes_per_token),
        **bpb(r.heldout or {}),
        tokens_per_s=r.tokens / r.time_s["step"] if r.time_s.get("step") else None,
        tokens_per_cpu_s=r.tokens / r.cpu_s["step"] if (r.cpu_s or {}).get("step") else None,
        time_s={part: r.time_s.get(part, 0.0) for part in PARTS},
        cpu_s=None if r.cpu_s is None else {part: r.cpu_s.get(part, 0.0) for part in PARTS},
    )


def regime(params: dict, tokens: int, bytes_per_token: float) -> dict:
    """Where the run sits (docs/model.md, "The head's share"): tokens per parameter
    and the bytes of text behind its tokens, the budget held fixed across vocabularies."""
    return {
        "tokens_per_param": tokens / params["total"],
        "tokens_per_nonemb_param": tokens / params["non_embedding"],
        "train_bytes": tokens * bytes_per_token,
    }


def finish(run: Run) -> None:
    """Test losses, ``model.pt``, status ``finished``; only the final weights kept."""
    record, state = run.record, run.state
    with run.clock(state, "checkpoint"):
        run.checkpoints.save_final(run.model, state)  # before the best weights replace them
    if run.cfg.trainer.test_eval:  # the test losses: measured, then kept, written and logged
        with run.clock(state, "eval"):
            t = measure_test(run)
            save_arrays(run, state.step, test_window_loss=t.windows)
            if t.best_windows is not None:
                save_arrays(run, state.best_step, test_window_loss=t.best_windows)
            record.test_loss, record.test_loss_at_best = t.loss, t.at_best
            record.heldout = {**(record.heldout or {}), "test": t.heldout}
            run.metrics.log({TOKENS: state.tokens, **t.metrics}, state.step)
    record.status = Status.finished
    summary(run).write(run.run_dir)  # finished before last.pt goes: a kill between resumes
    with run.clock(state, "checkpoint"):
        run.checkpoints.finish()
    log.info(
        f"[{record.name}] finished: val {state.last_val_loss:.4f} (best {state.best_val_loss:.4f} "
        f"at step {state.best_step}), test {four_decimals(record.test_loss)} (at the best step "
        f"{four_decimals(record.test_loss_at_best)})"
    )


@dataclass
class Window:
    """Training time (no evaluations, no checkpoints) and steps since the last logged step, and
    the clipped steps before it: what the logged throughput and clip fraction are averaged over."""

    seconds: float = 0.0
    steps: int = 0
    clipped: int = 0  # TrainState.clipped_steps when the window opened


def run_loop(run: Run) -> None:
    """Every rank runs the loop; rank 0 alone logs, evaluates and saves. A signal stops it after
    the step it arrived in: checkpoint saved, then KeyboardInterrupt (a rerun resumes there)."""
    state, schedule, main = run.state, run.schedule, dist.is_main()
    compile_model(run, run.derived.compiled)
    if state.step == 0 and main:
        evaluate_now(run, first=True)  # the initial loss is a result (dominant at init 1.0)
    from tqdm.auto import tqdm
    from tqdm.contrib.logging import logging_redirect_tqdm  # log lines above the bar

    run.bar = tqdm(
        total=run.cfg.trainer.max_steps,
        initial=state.step,
        desc=run.record.name[:48],
        unit="step",
        dynamic_ncols=True,
        disable=not (run.cfg.trainer.progress and main),
    )
    window = Window(clipped=state.clipped_steps)
    with dist.StopRequest() as stop, run.bar, logging_redirect_tqdm():
        while not schedule.done(state.step):
            t0 = time.perf_counter()
            with run.clock(state, "step"):
                loss, grad_norm, lr, grad_split = train_step(run, schedule.logs(state.step + 1))
            window.seconds += time.perf_counter() - t0
            window.steps += 1
            run.bar.update(1)
            if schedule.unties(state.step):  # the head becomes a parameter of its own
                untie_now(run)
            if grad_split is not None and main:
                log_step(run, window, loss=loss, grad_norm=grad_norm, lr=lr, split=grad_split)
                window = Window(clipped=state.clipped_steps)
            if schedule.evaluates(state.step):  # rank 0 evaluates, every rank learns the loss
                val_loss = dist.from_main(evaluate_now(run) if main else None)
                if not math.isfinite(val_loss):
                    raise Diverged(f"non-finite validation loss at step {state.step}")
            if main and schedule.saves(state.step):
                with run.clock(state, "checkpoint"):
                    run.checkpoints.save(run.model, run.optimizer, state)
            if dist.any_rank(bool(stop), run.device):  # a signal (even during that save): stop
                if main:  # this step's last.pt, once
                    with run.clock(state, "checkpoint"):
                        run.checkpoints.save(run.model, run.optimizer, state)
                stop.hand_on()
                raise KeyboardInterrupt(stop.name or "a signal to another process")


def evaluate_now(run: Run, first: bool = False) -> float:
    """Rank 0: evaluation measures, the loop decides: a new best keeps its weights (best.pt,
    for the test loss at the end), the probe arrays go to probes/, the numbers to the metrics
    and the TrainState, then summary.json (a sweep's watcher reads it)."""
    state, trainer = run.state, run.cfg.trainer
    with run.clock(state, "eval"):
        ev = measure(run, first, last=state.step == trainer.max_steps)
        if math.isfinite(ev.loss) and (
            state.best_val_loss is None or ev.loss < state.best_val_loss
        ):
            state.best_val_loss, state.best_step = ev.loss, state.step
            if trainer.test_eval:
                with run.clock(state, "checkpoint"):
                    run.checkpoints.save_best(state.step, run.model)
        if first:
            state.init_val_loss = ev.loss
            for key, value in ev.init.items():
                setattr(state, f"init_{key}", value)
        save_arrays(run, state.step, val_window_loss=ev.windows, **ev.arrays)
        if ev.heldout is not None:
            run.record.heldout = {**(run.record.heldout or {}), "val": ev.heldout}
        run.metrics.log({TOKENS: state.tokens, **ev.metrics}, state.step)
        state.last_val_loss = ev.loss
        log.info(
            f"[{run.record.name}] step {state.step:>6d} | val loss {ev.loss:.4f} | "
            f"ppl {ev.metrics[VAL_PPL]:.4g} | tokens {state.tokens:,}"
        )
    summary(run).write(run.run_dir)
    return ev.loss


def train_step(run: Run, log_now: bool) -> tuple[float, float, float, dict | None]:
    """One optimizer step; its loss, gradient norm (before clipping), lr and, on steps that log
    it, the gradient of the head and of the embedding apart. Diverged if not finite."""
    state, optim = run.state, run.cfg.optim
    lr = lr_at(state.step, optim, run.cfg.trainer.max_steps)
    set_lr(run.optimizer, lr)  # each group at its multiple of the schedule (optim.*_lr_mult)
    split = {} if log_now else None  # two (V, d) buffers: only on steps that log them
    try:
        loss = forward_backward(run, split)
    except COMPILE_ERRORS as e:  # it shows on the first call: this step again, eagerly
        if not run.derived.compiled:
            raise
        why = scrub(f"{type(e).__name__}: {e}").splitlines()[0]
        log.warning("[%s] torch.compile failed (%s); continuing eagerly", run.record.name, why)
        compile_model(run, False)
        run.optimizer.zero_grad(set_to_none=True)
        split = {} if log_now else None
        loss = forward_backward(run, split)
    for side in split or ():  # each rank tapped its share: the global split is their mean
        dist.mean_(split[side])
    grad_norm = torch.nn.utils.clip_grad_norm_(run.model.parameters(), optim.grad_clip or math.inf)
    loss, grad_norm = torch.stack([loss, grad_norm.float()]).tolist()  # the step's one GPU sync
    if not (math.isfinite(loss) and math.isfinite(grad_norm)):
        raise Diverged(
            f"non-finite loss or gradient at step {state.step} (loss {loss}, grad norm {grad_norm})"
        )
    state.clipped_steps += int(0 < optim.grad_clip < grad_norm)
    run.optimizer.step()
    run.optimizer.zero_grad(set_to_none=True)
    state.step += 1
    state.tokens += run.derived.tokens_per_step
    return loss, grad_norm, lr, split


def forward_backward(run: Run, grad_split: dict | None) -> torch.Tensor:
    """The step's micro-batches; their mean loss, a tensor (reading it waits for the GPU)."""
    trainer, pin = run.cfg.trainer, run.device.type == "cuda"  # pinned: the copy overlaps
    total = torch.zeros((), device=run.device)
    for micro in range(trainer.grad_accum):  # this rank's share of the global micro-batch
        x, y = (
            (dist.shard(t).pin_memory() if pin else dist.shard(t)).to(run.device, non_blocking=True)
            for t in run.sampler.get(run.state.step, micro)
        )
        with dist.no_sync(run.step_model, last=micro == trainer.grad_accum - 1):
            with torch.autocast(
                run.device.type, torch.bfloat16, enabled=run.derived.precision == Precision.bf16
            ):
                _, loss = run.step_model(
                    x, y, loss_chunk=trainer.loss_chunk, return_logits=False, grad_split=grad_split
                )
            (loss / trainer.grad_accum).backward()
        total += loss.detach().float()
    return dist.mean_(total / trainer.grad_accum)


def compile_model(run: Run, compiled: bool) -> None:
    """The model the steps call: compiled or not, and wrapped for DDP."""
    run.step_model = dist.wrap(torch.compile(run.model) if compiled else run.model)
    # Evaluation compiled too: eager, its forward over the (rows x V) logits ran at the
    # speed of a compiled training step (measured 3x slower than compiled, nano, V=50257).
    # Fixed shapes: one graph per batch shape, no dynamic-shape recompile.
    run.eval_model = torch.compile(run.model, dynamic=False) if compiled else run.model
    run.derived.compiled = compiled


def untie_now(run: Run) -> None:
    untie(run.model, run.optimizer, run.cfg.optim)
    run.derived.lr_scales = lr_scales(run.optimizer)  # now with the head's
    compile_model(run, run.derived.compiled)
    params = run.record.params_untied = count_parameters(run.model)
    if dist.is_main():
        total = f"{params['total']:,}"
        log.info("[%s] untied at step %d: %s parameters", run.record.name, run.state.step, total)
        run.metrics.log({f"{PARAMS_}{k}": v for k, v in params.items()}, run.state.step)


def log_step(run: Run, window: Window, loss: float, grad_norm: float, lr: float, split: dict):
    tokens_per_s = window.steps * run.derived.tokens_per_step / max(window.seconds, 1e-9)
    peak = run.derived.peak_tflops * 1e12 * dist.world_size()
    run.metrics.log(
        {
            TOKENS: run.state.tokens,
            TRAIN_LOSS: loss,
            TRAIN_LR: lr,  # the body's; the embedding side's at their own scales:
            **{
                f"{TRAIN_LR_}{name}": lr * scale
                for name, scale in run.derived.lr_scales.items()
                if name in EMBEDDING_SIDE
            },
            TRAIN_TOKENS_PER_S: tokens_per_s,
            TRAIN_GRAD_NORM: grad_norm,
            TRAIN_MFU: run.derived.flops_per_token * tokens_per_s / peak,
            TRAIN_CLIP_FRAC: (run.state.clipped_steps - window.clipped) / window.steps,
            # pre-clip, summed over micro-batches of loss / grad_accum: the scale of .grad
            **{f"{TRAIN_GRAD_NORM}_{side}": g.norm().item() for side, g in split.items()},
        },
        run.state.step,
    )
    run.bar.set_postfix(loss=f"{loss:.3f}", tok_s=f"{tokens_per_s:,.0f}")
