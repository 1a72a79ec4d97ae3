"""Several processes, one run: torchrun with 2 gloo processes trains the run that one process
trains (same identity, parameter counts and losses), and a batch that does not split is refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml
from conftest import BYTE_RUN, REPO

RUN = [
    "-m",
    "tiedvsuntied.run",
    *BYTE_RUN,
    "trainer.max_steps=6",
    "trainer.grad_accum=2",
    "trainer.eval_interval=3",
    "trainer.log_interval=1",
    "trainer.precision=fp32",
    "trainer.compile=false",
    "wandb.mode=disabled",
    "sweep=ddp",
]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]


def _run(cmd: list[str], results, cache) -> subprocess.CompletedProcess:
    env = {**os.environ, "TIEDVSUNTIED_CACHE": str(cache), "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [*cmd, f"results_dir={results}"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def _only_run(results):
    (run_dir,) = [p for p in (results / "ddp").iterdir() if p.is_dir()]
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return run_dir.name, json.loads((run_dir / "summary.json").read_text()), metrics


@pytest.mark.slow
@pytest.mark.parametrize("head", [["tie=false"], ["tie=true", "head.untie_at=3"]], ids=" ".join)
def test_two_gloo_processes_train_the_run_one_process_trains(tmp_path, session_cache, head):
    """Untied, and tied then untied at step 3 (the tied head's steps, then every rank swaps the
    head in and wraps DDP anew)."""
    one = _run([sys.executable, *RUN, *head], tmp_path / "one", session_cache)
    two = _run([*TORCHRUN, *RUN, *head], tmp_path / "two", session_cache)
    assert one.returncode == 0, one.stderr[-2000:]
    assert two.returncode == 0, two.stderr[-2000:]
    (id1, s1, m1), (id2, s2, m2) = _only_run(tmp_path / "one"), _only_run(tmp_path / "two")
    assert id1 == id2  # the number of processes is not part of a run's identity
    assert s2["status"] == "finished" and s2["step"] == 6
    assert (s1["world_size"], s2["world_size"]) == (1, 2)  # recorded, though not in the identity
    derived = yaml.safe_load((tmp_path / "two" / "ddp" / id2 / "config.yaml").read_text())
    assert derived["derived"]["world_size"] == 2
    assert s1["params"] == s2["params"] and s1["params_untied"] == s2["params_untied"]
    assert (s2["params_untied"] is not None) == (
        "head.untie_at=3" in head
    )  # the switch happened, in both
    for key in (
        "train/loss",
        "val/loss",
        "train/grad_norm",
        "train/grad_norm_in",
        "train/grad_norm_out",
    ):
        a = [(r["step"], r[key]) for r in m1 if key in r]
        b = [(r["step"], r[key]) for r in m2 if key in r]
        assert [s for s, _ in a] == [s for s, _ in b] and a, key
        assert max(abs(x - y) for (_, x), (_, y) in zip(a, b, strict=True)) < 1e-5, (key, a, b)
    for key in ("final_val_loss", "test_loss", "best_val_loss"):
        assert s1[key] == pytest.approx(s2[key], abs=1e-5), key


@pytest.mark.slow
def test_a_batch_that_does_not_split_over_the_processes_is_refused(tmp_path, session_cache):
    out = _run([*TORCHRUN, *RUN, "trainer.batch_size=3"], tmp_path / "r", session_cache)
    assert out.returncode != 0
    assert (
        "error: trainer.batch_size=3 does not split over 2 processes (torchrun): "
        "use a multiple of 2" in out.stderr
    )
    assert not (tmp_path / "r").exists()  # refused before any result directory is made


def test_each_rank_takes_its_own_contiguous_share_of_the_global_batch(monkeypatch):
    import torch

    from tiedvsuntied.train import dist

    batch = torch.arange(8).view(4, 2)
    monkeypatch.setenv("WORLD_SIZE", "2")
    shares = []
    for rank in ("0", "1"):
        monkeypatch.setenv("RANK", rank)
        shares.append(dist.shard(batch))
    assert torch.equal(torch.cat(shares), batch) and shares[0].shape == (2, 2)


def test_cuda_free_gives_each_concurrent_worker_its_own_gpu_and_refuses_one_too_many(
    tmp_path, monkeypatch
):
    """Each worker is a process with its own claim; here each is a fresh claim of this process
    (the lock files are flocks: a second open file of one process conflicts like another's)."""
    from tiedvsuntied.train import hardware

    monkeypatch.setattr(hardware.tempfile, "gettempdir", lambda: str(tmp_path))
    got, held = [], []
    for _ in range(3):  # one after the other, each holding its claim, like launcher workers
        hardware.claim_gpu.cache_clear()
        try:
            gpu, lock = hardware.claim_gpu(2)
            got.append(gpu)
            held.append(lock)
        except ValueError as e:
            got.append(str(e))
    for lock in held:
        lock.release()
    assert sorted(got[:2]) == [0, 1]
    assert got[2] == (
        "trainer.device=cuda:free but all 2 GPUs are claimed by other jobs: "
        "run at most 2 at once (hydra.launcher.n_jobs=2)"
    )


def test_signals_set_a_stop_request_the_loop_reads_and_a_second_ctrl_c_stops_at_once():
    import os
    import signal

    from tiedvsuntied.train.dist import StopRequest

    # what was there before (a shell that starts a job in the background ignores SIGINT)
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    with StopRequest() as stop:
        assert not stop
        os.kill(os.getpid(), signal.SIGTERM)  # nothing is interrupted: the flag is set
        assert stop and stop.name == "SIGTERM"
    with pytest.raises(KeyboardInterrupt), StopRequest() as stop:
        os.kill(os.getpid(), signal.SIGINT)
        assert stop.name == "SIGINT"
        os.kill(os.getpid(), signal.SIGINT)
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before  # restored
