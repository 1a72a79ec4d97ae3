"""The CUDA path (issue 21), on a GPU: a compiled bf16 step against an fp32 eager one, the
padded head, the tied matrix as one storage on the device, kill and resume, torchrun (NCCL with
two GPUs), ``cuda:free``. Marked ``cuda`` and skipped where CUDA is absent, so CI (no GPU) stays
green; run them on a GPU with ``python -m pytest -m cuda``.

What is exact on CUDA and what is within a tolerance:
- exact: tying (one tensor, one storage, one optimizer entry) on the device, after compile and
  after a checkpoint round trip; a checkpoint's parameters and optimizer state, bit for bit;
- within a tolerance: a compiled bf16 step against fp32 eager (bf16 keeps 8 bits of mantissa:
  loss within 1%, each gradient's cosine with the fp32 one >= 0.99), and a killed and resumed
  run against an uninterrupted one (CUDA's embedding backward adds with atomics, in an order
  that varies between runs: losses within 1e-3 nats, where on CPU they are equal to 1e-6)."""

from __future__ import annotations

import signal
import sys
import tempfile
from pathlib import Path

import pytest
import torch
from conftest import at_step, run_cli
from test_dist import RUN, _only_run, _run
from test_run import byte_run, metrics, summaries

from tiedvsuntied.model.config import ModelConfig
from tiedvsuntied.model.gpt import GPT, _head
from tiedvsuntied.train.checkpoint import Checkpoints, TrainState
from tiedvsuntied.train.config import OptimConfig
from tiedvsuntied.train.hardware import resolve_device
from tiedvsuntied.train.optim import build_optimizer

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU (CUDA)"),
]
NANO = ModelConfig(name="nano", n_layer=2, n_head=2, n_embd=64, block_size=128)
LOSS_RTOL = 1e-2  # bf16 autocast against fp32, one step at init
GRAD_COSINE = 0.99
RESUME_ATOL = 1e-3  # CUDA's atomics reorder sums between runs


def _loss_and_grads(model: GPT, x, y, bf16: bool, compiled: bool, chunk: int):
    forward = torch.compile(model) if compiled else model
    with torch.autocast("cuda", torch.bfloat16, enabled=bf16):
        _, loss = forward(x, y, return_logits=False, loss_chunk=chunk)
    loss.backward()
    grads = {n: p.grad.float().clone() for n, p in model.named_parameters()}
    return loss.item(), grads


@pytest.mark.parametrize("chunk", [1024, 0], ids=["chunked", "full-logits"])
@pytest.mark.parametrize("tie", [True, False], ids=["tied", "untied"])
def test_a_compiled_bf16_step_matches_an_fp32_eager_step(tie, chunk):
    """Full logits: the head padded to a multiple of 64 rows on CUDA (gpt._head), cut after."""
    torch.manual_seed(0)
    x = torch.randint(0, NANO.vocab_size, (8, NANO.block_size), device="cuda")
    y = torch.roll(x, -1, dims=1)
    ref, fast = (GPT(NANO, tie=tie, seed=0).cuda() for _ in range(2))
    loss32, grads32 = _loss_and_grads(ref, x, y, bf16=False, compiled=False, chunk=chunk)
    loss16, grads16 = _loss_and_grads(fast, x, y, bf16=True, compiled=True, chunk=chunk)
    assert loss16 == pytest.approx(loss32, rel=LOSS_RTOL)
    cosines = {
        name: torch.nn.functional.cosine_similarity(g.flatten(), grads16[name].flatten(), dim=0)
        for name, g in grads32.items()
    }
    low = {name: round(c.item(), 4) for name, c in cosines.items() if c < GRAD_COSINE}
    assert not low, f"gradients of the bf16 compiled step off the fp32 ones: {low}"


def test_the_padded_head_on_cuda_is_the_plain_product():
    """gpt._head pads V = 50,257 rows to 50,304 for the product and cuts the extra logits."""
    x = torch.randn(4, 16, 64, device="cuda")
    weight = torch.randn(50257, 64, device="cuda", requires_grad=True)
    padded = _head(x, weight)
    plain = torch.nn.functional.linear(x, weight)
    assert padded.shape == plain.shape == (4, 16, 50257)
    assert ((padded - plain).norm() / plain.norm()).item() < 1e-5  # fp32: kernels may differ
    (grad,) = torch.autograd.grad(padded.square().sum(), weight)
    (want,) = torch.autograd.grad(plain.square().sum(), weight)
    assert ((grad - want).norm() / want.norm()).item() < 1e-5


def _tied_once(model: GPT, optimizer) -> None:
    head, emb = model.lm_head.weight, model.transformer.wte.weight
    assert head is emb and head.data_ptr() == emb.data_ptr()
    in_optimizer = [p for group in optimizer.param_groups for p in group["params"]]
    assert sum(p is head for p in in_optimizer) == 1


def test_the_tied_matrix_is_one_storage_on_cuda_after_compile_and_a_checkpoint(tmp_path):
    model = GPT(NANO, tie=True, seed=0).to("cuda")
    optimizer = build_optimizer(model, OptimConfig())
    _tied_once(model, optimizer)
    x = torch.randint(0, NANO.vocab_size, (2, NANO.block_size), device="cuda")
    with torch.autocast("cuda", torch.bfloat16):
        torch.compile(model)(x, x, return_logits=False)[1].backward()
    optimizer.step()
    _tied_once(model, optimizer)
    Checkpoints(tmp_path).save(model, optimizer, TrainState(step=1))
    fresh = GPT(NANO, tie=True, seed=1).to("cuda")
    fresh_opt = build_optimizer(fresh, OptimConfig())
    Checkpoints(tmp_path).load(fresh, fresh_opt, TrainState())
    _tied_once(fresh, fresh_opt)
    for a, b in zip(model.state_dict().values(), fresh.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    assert fresh.lm_head.weight.device.type == "cuda"


@pytest.mark.slow
def test_a_killed_run_on_cuda_resumes_to_the_uninterrupted_run(tmp_path: Path):
    """Killed (kill -9) at step 7, after its step-4 checkpoint: the rerun on the GPU resumes from
    step 4 and ends as the run never stopped, within RESUME_ATOL (GPU kernels are not bitwise)."""
    args = byte_run(
        tmp_path,
        "resume",
        "trainer.device=cuda",
        "trainer.ckpt_interval=4",
        "trainer.eval_interval=6",
    )
    args = [a for a in args if not a.startswith("wandb.mode=")] + ["wandb.mode=disabled"]
    ref = run_cli([*args, f"results_dir={tmp_path / 'ref'}"], cwd=tmp_path)
    assert ref.returncode == 0, ref.stderr[-3000:]
    sweep = tmp_path / "results" / "resume"
    killed = run_cli(args, cwd=tmp_path, env_extra=at_step(7, "SIGKILL"))
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    again = run_cli(args, cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    [resumed] = summaries(sweep).values()
    [reference] = summaries(tmp_path / "ref" / "resume").values()
    assert resumed["status"] == "finished" and resumed["resumed_from_step"] == 4
    assert resumed["device"].startswith("cuda")
    for key in ("final_val_loss", "best_val_loss", "test_loss", "init_val_loss"):
        assert resumed[key] == pytest.approx(reference[key], abs=RESUME_ATOL), key
    got = metrics(sweep / resumed["run_id"])
    want = metrics(tmp_path / "ref" / "resume" / reference["run_id"])
    assert [r["step"] for r in got] == [r["step"] for r in want]
    for g, w in zip(got, want, strict=True):
        for key in ("train/loss", "val/loss"):
            if key in w:
                assert g[key] == pytest.approx(w[key], abs=RESUME_ATOL), (g["step"], key)


@pytest.mark.slow
@pytest.mark.parametrize("nproc", [1, 2])
def test_torchrun_trains_on_the_gpus(nproc, tmp_path, session_cache, monkeypatch):
    """One process per GPU. One process forms no group (nothing to reduce); two join NCCL, which
    refuses two ranks on one GPU, so that case needs two GPUs."""
    if torch.cuda.device_count() < nproc:
        pytest.skip(f"{nproc} processes need {nproc} GPUs; this machine has one")
    monkeypatch.setenv("NCCL_DEBUG", "INFO")  # NCCL names itself: the group is not gloo's
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    out = _run(
        [*torchrun, f"--nproc_per_node={nproc}", *RUN, "trainer.device=cuda"],
        tmp_path,
        session_cache,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert ("NCCL" in out.stdout + out.stderr) == (nproc > 1)
    _, summary, _ = _only_run(tmp_path)
    assert summary["status"] == "finished" and summary["world_size"] == nproc
    assert summary["device"].startswith("cuda")


def test_cuda_free_claims_a_gpu_of_this_machine(tmp_path, monkeypatch):
    from tiedvsuntied.train import hardware

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # this test's own lock files
    hardware.claim_gpu.cache_clear()
    device = resolve_device("cuda:free")
    assert device.type == "cuda" and device.index in range(torch.cuda.device_count())
    lock = tmp_path / f"tiedvsuntied-cuda{device.index}.lock"
    assert lock.exists()  # held until this process exits: another job takes the next GPU
