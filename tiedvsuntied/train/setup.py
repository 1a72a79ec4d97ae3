"""Setting a run up on this process: its identity, data order, model, optimizer, the checkpoint
to resume from (the record's TrainState), the numbers the config implies (its Derived) and the
Run the loop reads."""

from __future__ import annotations

import dataclasses
import functools
import logging
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from omegaconf import OmegaConf

from tiedvsuntied.data.batches import BatchSampler, EvalSet
from tiedvsuntied.data.cache import Corpus, prepare_data
from tiedvsuntied.data.config import DataConfig
from tiedvsuntied.model.accounting import count_parameters, flops_per_token, head_share
from tiedvsuntied.model.config import canonical_init_std
from tiedvsuntied.model.gpt import GPT
from tiedvsuntied.results.identity import find_run_dir
from tiedvsuntied.results.metrics_log import MetricsLog
from tiedvsuntied.results.records import Derived, RunSummary, TrainState, now, read_summary
from tiedvsuntied.train import dist
from tiedvsuntied.train.checkpoint import CheckpointMismatch, Checkpoints
from tiedvsuntied.train.clock import Clock
from tiedvsuntied.train.config import Config, Precision, Sampling, Schedule, config_run_id
from tiedvsuntied.train.finetune import build, start_rows
from tiedvsuntied.train.hardware import enable_tf32, measure_matmul_tflops, processor
from tiedvsuntied.train.optim import build_optimizer, lr_scales, untie
from tiedvsuntied.train.plan import RunPlan

log = logging.getLogger(__name__)


@dataclass
class Run:
    """One run being trained: what the loop reads and updates."""

    cfg: Config
    schedule: Schedule
    run_dir: Path
    record: RunSummary  # the run's record: identity, outcome and the two parts below
    model: GPT
    optimizer: torch.optim.Optimizer
    sampler: BatchSampler
    device: torch.device
    checkpoints: Checkpoints
    freq: np.ndarray  # token counts of the train split: the probes' vocabulary strata
    resumed_from: int | None = None
    start_rows: dict | None = None  # fine-tuning: E (and H) at step 0, for drift
    eval_sets: dict[str, EvalSet] = dataclasses.field(default_factory=dict)  # eval_sets()
    step_model: torch.nn.Module | None = None  # compiled or not, in DDP wrapped (compile)
    eval_model: torch.nn.Module | None = None  # compiled or not, never wrapped (rank 0 alone)
    metrics: MetricsLog | None = None
    bar: object = None
    clock: Clock = dataclasses.field(default_factory=Clock)  # where the wall time goes

    @property
    def state(self) -> TrainState:
        """The record's loop part: the fields of TrainState, which a checkpoint carries."""
        return self.record

    @property
    def derived(self) -> Derived:
        """The record's set-up part: the fields of Derived, config.yaml's ``derived``."""
        return self.record


def build_model(plan: RunPlan, vocab_size: int) -> GPT:
    """A new model of the config's shapes, or the fine-tuning start, on the plan's device."""
    cfg = plan.cfg
    torch.manual_seed(cfg.seed)  # dropout; the init has its own per-tensor generators
    if plan.start is not None:
        return build(plan.start, cfg).to(plan.device)
    model_cfg = dataclasses.replace(cfg.model, vocab_size=vocab_size)
    model = GPT(model_cfg, tie=cfg.tie, init_std=cfg.init_std, head=cfg.head, seed=cfg.seed)
    return model.to(plan.device)


def resume_on_every_rank(plan: RunPlan, checkpoints: Checkpoints, model, optimizer, state):
    """Rank 0 reads the newest usable checkpoint and tells the others which file it used (or
    None), or why the run cannot resume (CheckpointMismatch); then they read that file."""
    switch = plan.schedule.untie_step

    def layout(ckpt):  # a checkpoint from after the switch holds an untied model and optimizer
        if switch and model.tie and ckpt["train_state"]["step"] >= switch:
            untie(model, optimizer, plan.cfg.optim)

    used = None
    if dist.is_main():
        try:
            used = checkpoints.load(model, optimizer, state, layout)
        except CheckpointMismatch as e:
            used = e  # every rank raises it
    used = dist.from_main(used)
    if isinstance(used, CheckpointMismatch):
        raise used
    if not dist.is_main() and used is not None:
        checkpoints.load(model, optimizer, state, layout, only=used)
    return used


def train_sampler(cfg, corpus: Corpus) -> BatchSampler:
    """The training batches: the same for every run of one seed (tied and untied alike)."""
    trainer = cfg.trainer
    return BatchSampler(
        corpus.tokens("train"),
        cfg.model.block_size,
        trainer.batch_size,
        cfg.seed,
        once=trainer.sampling == Sampling.once,
        grad_accum=trainer.grad_accum,
    )


@dataclass
class Data:
    """The tokens a run reads: its corpus, and for a fine-tuning start of this harness the
    start's own (whose validation loss is the retention; rank 0 alone reads it)."""

    corpus: Corpus
    retain: Corpus | None = None

    @classmethod
    def of(cls, plan: RunPlan, corpus: Corpus) -> Data:
        start = plan.start
        if start is None or start.data is None or not dist.is_main():
            return cls(corpus)
        data = OmegaConf.merge(OmegaConf.structured(DataConfig), start.data)
        return cls(corpus, prepare_data(OmegaConf.to_object(data)))


def run_dir_of(plan: RunPlan, fingerprint: str) -> Path:
    """The run's directory: named by its id (results.identity.run_id, in the plan's precision),
    or one a run of it already has under an older naming scheme (find_run_dir), or under the id
    it had before the precision it trains in entered the hash: ``auto`` that trained fp32 was
    hashed as ``auto``, as its bf16 twin is, and such a run resumes in its own directory."""
    cfg, sweep_dir = plan.cfg, Path(plan.cfg.results_dir) / plan.cfg.sweep
    run_dir = find_run_dir(sweep_dir, config_run_id(cfg, fingerprint, plan.precision))
    if run_dir.exists() or (cfg.trainer.precision, plan.precision) != ("auto", "fp32"):
        return run_dir
    before = find_run_dir(sweep_dir, config_run_id(cfg, fingerprint, Precision.bf16))
    summary = read_summary(before)
    return before if summary is not None and summary.precision == "fp32" else run_dir


def identity(plan: RunPlan, corpus: Corpus) -> tuple[RunSummary, Path]:
    """The summary of a run as it starts (identity only), and its directory (an existing run
    keeps its directory and name, whatever naming scheme made them: run_dir_of)."""
    cfg = plan.cfg
    run_dir = run_dir_of(plan, corpus.fingerprint)
    m = cfg.model
    record = RunSummary(
        run_id=run_dir.name,
        name=run_dir.name.rsplit("-", 1)[0],
        **{k: getattr(cfg, k) for k in ("sweep", "tie", "seed", "replicate")},
        init_std=canonical_init_std(cfg.init_std),
        model=m.name,
        **{k: getattr(m, k) for k in ("n_layer", "n_head", "n_embd", "block_size")},
        vocab_size=corpus.vocab_size,
        t5_rescale=cfg.head.t5_rescale,
        data=cfg.data.name,
        data_fingerprint=corpus.fingerprint,
        max_steps=cfg.trainer.max_steps,
        untie_at=cfg.head.untie_at,
        untie_step=plan.schedule.untie_step,
        world_size=dist.world_size(),
    )
    return record, run_dir


def build_run(plan: RunPlan, data: Data, record: RunSummary, run_dir: Path) -> Run:
    """The run ready for its first (or next) step; a CheckpointMismatch before anything is
    written if its checkpoint does not fit the code."""
    cfg, trainer, device, corpus = plan.cfg, plan.cfg.trainer, plan.device, data.corpus
    if trainer.threads:
        torch.set_num_threads(trainer.threads)
    enable_tf32(device)
    model = build_model(plan, corpus.vocab_size)
    rows = start_rows(model) if plan.start else None  # before a resume changes them
    optimizer = build_optimizer(model, cfg.optim)
    params = {
        **count_parameters(model),
        "trainable": sum(p.numel() for p in model.parameters() if p.requires_grad),
    }
    schedule, checkpoints = plan.schedule, Checkpoints(run_dir / "checkpoints")
    used = resume_on_every_rank(plan, checkpoints, model, optimizer, record)  # its TrainState
    untied = bool(schedule.untie_step) and not model.tie  # resumed past the switch
    record.params_untied = count_parameters(model) if untied else None
    if not dist.is_main():  # its own dropout stream
        torch.manual_seed(cfg.seed + 1_000_003 * dist.rank() + record.step)
    vars(record).update(vars(derive(plan, corpus, model, optimizer, params)))  # its Derived
    same_precision(record, trainer.precision)
    start = {"step": record.step, "at": now(), **code_version()}
    record.starts.append(start | {"hardware": record.hardware, "precision": record.precision})
    run = Run(
        cfg=cfg,
        schedule=schedule,
        run_dir=run_dir,
        record=record,
        model=model,
        optimizer=optimizer,
        sampler=train_sampler(cfg, corpus),
        device=device,
        checkpoints=checkpoints,
        freq=corpus.token_freq("train"),
        resumed_from=record.step if used else None,
        start_rows=rows,
        eval_sets=eval_sets(cfg, data) if dist.is_main() else {},  # rank 0 alone evaluates
    )
    if used:
        log.info("[%s] resuming from step %d (%s)", record.name, record.step, used)
    log.info(
        f"[{record.name}] {params['total']:,} params (non-embedding "
        f"{params['non_embedding']:,}), {device} {record.precision}, "
        f"{len(corpus.tokens('train')):,} train tokens, peak {record.peak_tflops:.2f} TFLOP/s"
    )
    return run


def same_precision(record: RunSummary, asked: Precision) -> None:
    """A run resumes in the precision its steps so far trained in: ``trainer.precision=auto``
    resolves per machine (bf16 where the processor has bf16 units, else fp32), and a run whose
    steps ran in both would be a run of neither (starts from before the record: unknown)."""
    before = {start.get("precision") for start in record.starts} - {None}
    if before - {record.precision}:
        raise CheckpointMismatch(
            f"trainer.precision={Precision(asked).value}: {record.run_id} trained in "
            f"{', '.join(sorted(before))} and resolves to {record.precision} here "
            f"({record.hardware}): resume it where it resolves to {', '.join(sorted(before))}"
        )


def eval_sets(cfg: Config, data: Data) -> dict[str, EvalSet]:
    """What every evaluation of the run reads, worked out once: the validation windows, the test
    windows (trainer.test_eval), each beside the count models', and for a fine-tuning start of
    this harness its own validation windows (the retention)."""
    trainer, block_size = cfg.trainer, cfg.model.block_size
    sets = {"val": EvalSet.of(data.corpus, "val", block_size, trainer.eval_windows)}
    if trainer.test_eval:
        sets["test"] = EvalSet.of(data.corpus, "test", block_size, trainer.eval_windows)
    if data.retain is not None:
        sets["retain"] = EvalSet.of(data.retain, "val", block_size, trainer.eval_windows, False)
    return sets


def derive(plan: RunPlan, corpus: Corpus, model, optimizer, params: dict) -> Derived:
    """The record's Derived part, worked out on this machine (written once, at set-up)."""
    cfg, trainer, device, precision = plan.cfg, plan.cfg.trainer, plan.device, plan.precision
    dtype = torch.bfloat16 if precision == Precision.bf16 else torch.float32
    return Derived(
        vocab_size=corpus.vocab_size,
        params=params,
        flops_per_token=flops_per_token(model),
        init_std_resolved=model.init_stds(),
        lr_scales=lr_scales(optimizer),
        device=str(device),
        world_size=dist.world_size(),
        threads=torch.get_num_threads(),
        precision=precision.value,
        # where it pays: always on CUDA, on CPU once a run amortises the ~1 min compile
        compiled=device.type == "cuda" or trainer.max_steps >= 500
        if trainer.compile is None
        else trainer.compile,
        peak_tflops=trainer.peak_tflops or measure_matmul_tflops(device, dtype),
        data_fingerprint=corpus.fingerprint,
        tokens_per_step=trainer.batch_size * trainer.grad_accum * cfg.model.block_size,
        **head_share(params),
        non_embedding_params=params["non_embedding"],
        encoding=cfg.data.encoding,
        bytes_per_token=corpus.bytes_per_token("train"),
        **code_version(),
        hardware=processor(device),
    )


# what decides a run's numbers besides its config: the package, the configs, the dependencies.
# A study's own files (experiments/<study>/, its lr_choice.tsv written as it goes) are not code
CODE_PATHS = ("tiedvsuntied", "conf", "pyproject.toml")
CHECKOUT = Path(__file__).resolve().parents[2]  # the top of the package's checkout, if any


@functools.cache  # the code a process runs is the code it loaded
def code_version(root: Path = CHECKOUT) -> dict:
    """The git commit of the package's checkout and whether its code (CODE_PATHS, tracked files)
    differs from it; None for both outside a checkout (an installed wheel). A study's
    provenance is generated from these, not from memory. ``root``: the checkout's top."""
    where = ["git", "-C", str(root)]
    try:
        commit = subprocess.run([*where, "rev-parse", "HEAD"], capture_output=True, text=True)
        status = subprocess.run(
            [*where, "status", "--porcelain", "--untracked-files=no", "--", *CODE_PATHS],
            capture_output=True,
            text=True,
        )
    except OSError:  # no git on this machine
        return {"git_commit": None, "git_dirty": None}
    if commit.returncode or status.returncode:
        return {"git_commit": None, "git_dirty": None}
    return {"git_commit": commit.stdout.strip(), "git_dirty": bool(status.stdout.strip())}
