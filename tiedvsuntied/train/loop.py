"""The training loop: the steps of one Run, from its state's step to ``trainer.max_steps``."""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass

import torch
import torch._dynamo.exc
import torch._inductor.exc

from tiedvsuntied.model.accounting import count_parameters
from tiedvsuntied.results import scrub
from tiedvsuntied.train import dist
from tiedvsuntied.train.evaluation import record_evaluation
from tiedvsuntied.train.hardware import autocast
from tiedvsuntied.train.optim import EMBEDDING_SIDE, lr_at, lr_scales, set_lr, untie
from tiedvsuntied.train.state import Run

log = logging.getLogger(__name__)

# What torch.compile raises when it cannot compile the model (tracing or code generation);
# any other error of a compiled step is the run's own and is not retried.
COMPILE_ERRORS = (torch._dynamo.exc.TorchDynamoException, torch._inductor.exc.InductorError)


class Diverged(Exception):
    """A non-finite loss or gradient: a result of the study, not an error."""


class Interrupted(KeyboardInterrupt):
    """A signal asked the run to stop; its checkpoint is saved and a rerun resumes it."""


@dataclass
class Window:
    """Training time (no evaluations, no checkpoints), steps and clipped steps since the last
    logged step."""

    seconds: float = 0.0
    steps: int = 0
    clipped: int = 0


def forward_backward(run: Run, grad_split: dict | None) -> torch.Tensor:
    """Forward and backward over the step's micro-batches; the mean loss, a tensor (reading
    it waits for the GPU: the loop does that once per step)."""
    trainer, pin = run.cfg.trainer, run.device.type == "cuda"  # pinned: the copy overlaps
    total = torch.zeros((), device=run.device)
    for micro in range(trainer.grad_accum):  # this rank's share of the global micro-batch
        x, y = (
            (dist.shard(t).pin_memory() if pin else dist.shard(t)).to(run.device, non_blocking=True)
            for t in run.sampler.get(run.state.step, micro)
        )
        with dist.no_sync(run.step_model, last=micro == trainer.grad_accum - 1):
            with autocast(run.precision, run.device):
                _, loss = run.step_model(
                    x,
                    y,
                    loss_chunk=trainer.loss_chunk,
                    return_logits=False,
                    grad_split=grad_split,
                )
            (loss / trainer.grad_accum).backward()
        total += loss.detach().float()
    return dist.mean_(total / trainer.grad_accum)


def accumulate(run: Run, grad_split: dict | None) -> torch.Tensor:
    """forward_backward; where torch.compile fails (it shows on the first call), the step is
    done again eagerly and the run goes on eagerly, with a warning."""
    try:
        return forward_backward(run, grad_split)
    except COMPILE_ERRORS as e:
        if not run.record.compiled:
            raise
        log.warning(
            "[%s] torch.compile failed (%s); continuing eagerly",
            run.record.name,
            scrub(f"{type(e).__name__}: {e}").splitlines()[0],
        )
    run.compile(False)
    run.optimizer.zero_grad(set_to_none=True)
    if grad_split is not None:
        grad_split.clear()
    return forward_backward(run, grad_split)


@dataclass
class Step:
    """What one optimizer step measured."""

    loss: float
    grad_norm: float
    lr: float
    grad_split: dict | None  # the head's and the embedding's gradients (steps that log them)


def train_step(run: Run, log_now: bool, window: Window) -> Step:
    """One optimizer step: learning rate, forward/backward, clipping, update, the switch of
    scheduled untying. Raises Diverged on a non-finite loss or gradient."""
    state, optim, trainer = run.state, run.cfg.optim, run.cfg.trainer
    lr = lr_at(state.step, optim, trainer.max_steps)
    set_lr(run.optimizer, lr)  # each group at its multiple of the schedule (optim.*_lr_mult)
    split = {} if log_now else None  # two (V, d) buffers: only on steps that log them
    loss = accumulate(run, split)
    for side in split or ():  # each rank tapped its share: the global split is their mean
        dist.mean_(split[side])
    grad_norm = torch.nn.utils.clip_grad_norm_(run.model.parameters(), optim.grad_clip or math.inf)
    loss, grad_norm = torch.stack([loss, grad_norm.float()]).tolist()  # the step's one GPU sync
    if not (math.isfinite(loss) and math.isfinite(grad_norm)):
        raise Diverged(
            f"non-finite loss or gradient at step {state.step} (loss {loss}, grad norm {grad_norm})"
        )
    clipped = int(0 < optim.grad_clip < grad_norm)
    state.clipped_steps += clipped
    window.clipped += clipped
    run.optimizer.step()
    run.optimizer.zero_grad(set_to_none=True)
    state.step += 1
    state.tokens += run.derived["tokens_per_step"]
    if state.step == run.untie_step:
        untie_now(run)
    return Step(loss, grad_norm, lr, split)


def log_step(run: Run, step: Step, window: Window) -> None:
    """The training metrics of the window that ends with this step."""
    tokens_per_s = window.steps * run.derived["tokens_per_step"] / max(window.seconds, 1e-9)
    peak = run.peak_tflops * 1e12 * dist.world_size()
    run.metrics.log(
        {
            "tokens": run.state.tokens,
            "train/loss": step.loss,
            "train/lr": step.lr,  # the body's; the embedding side's at their own scales:
            **{
                f"train/lr_{name}": step.lr * scale
                for name, scale in lr_scales(run.optimizer).items()
                if name in EMBEDDING_SIDE
            },
            "train/tokens_per_s": tokens_per_s,
            "train/grad_norm": step.grad_norm,
            "train/mfu": run.record.flops_per_token * tokens_per_s / peak,
            "train/clip_frac": window.clipped / window.steps,
            # pre-clip, summed over micro-batches of loss / grad_accum: the scale of .grad
            **{f"train/grad_norm_{side}": g.norm().item() for side, g in step.grad_split.items()},
        },
        run.state.step,
    )
    run.bar.set_postfix(loss=f"{step.loss:.3f}", tok_s=f"{tokens_per_s:,.0f}")


def untie_now(run: Run) -> None:
    """The scheduled switch: from here on the head is a parameter of its own."""
    untie(run.model, run.optimizer, run.cfg.optim)
    run.compile(run.record.compiled)
    run.record.params_untied = count_parameters(run.model)
    run.record.lr_scales = lr_scales(run.optimizer)  # now with the head's
    if dist.is_main():
        log.info(
            "[%s] untied at step %d: %s parameters",
            run.record.name,
            run.state.step,
            f"{run.record.params_untied['total']:,}",
        )
        run.metrics.log(
            {f"params/{k}": v for k, v in run.record.params_untied.items()}, run.state.step
        )


def validation_on_every_rank(run: Run) -> None:
    """Rank 0 evaluates and records; every rank learns its validation loss and raises
    Diverged if it is not finite."""
    loss = record_evaluation(run) if dist.is_main() else None
    if not math.isfinite(dist.from_main(loss)):
        raise Diverged(f"non-finite validation loss at step {run.state.step}")


def run_loop(run: Run) -> None:
    """Train from the state's step to ``trainer.max_steps``, evaluating and saving as the
    config says. A signal stops it after the step it arrived in: checkpoint saved, then
    Interrupted (a rerun resumes there)."""
    trainer, state, main = run.cfg.trainer, run.state, dist.is_main()
    if state.step == 0 and main:
        record_evaluation(run, first=True)
    from tqdm.auto import tqdm

    run.bar = tqdm(
        total=trainer.max_steps,
        initial=state.step,
        desc=run.record.name[:48],
        unit="step",
        dynamic_ncols=True,
        disable=not (trainer.progress and main),
    )
    window = Window()
    with dist.stop_requests() as stop, run.bar:
        while state.step < trainer.max_steps:
            t0 = time.perf_counter()
            step = train_step(run, trainer.logs_at(state.step + 1), window)
            window.seconds += time.perf_counter() - t0
            window.steps += 1
            run.bar.update(1)
            if step.grad_split is not None and main:
                log_step(run, step, window)
                window = Window()
            if trainer.evaluates_at(state.step):
                validation_on_every_rank(run)
            if main and run.checkpoints.due(state.step):
                run.checkpoints.save(run.model, run.optimizer, state)
            if dist.any_rank(bool(stop), run.device):
                stop_here(run, stop)


def stop_here(run: Run, stop: dist.StopRequest) -> None:
    """A signal asked the run to stop: save this step (rank 0), hand the signal on, stop."""
    if dist.is_main():
        run.checkpoints.save(run.model, run.optimizer, run.state)
    stop.hand_on()
    raise Interrupted(stop.name or "a signal to another process")
