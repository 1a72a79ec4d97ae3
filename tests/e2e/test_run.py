"""End to end: the user's command as a real Hydra multirun, read back from local files and
from the offline W&B runs with wandb's own tools; failure, divergence, bad input, kill and
resume, Ctrl-C."""

from __future__ import annotations

import json
import math
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import (
    BYTE_RUN,
    CORPUS,
    CORPUS_OVERRIDES,
    TINY_SWEEP_OVERRIDES,
    VOCAB,
    at_step,
    run_cli,
)
from filelock import FileLock

from tiedvsuntied.results import records as results
from tiedvsuntied.results.identity import run_name
from tiedvsuntied.sweep import jobs
from tiedvsuntied.sweep.progress import runs_table

LN_V = math.log(VOCAB)


def summaries(sweep_dir: Path) -> dict[str, dict]:
    out = {}
    for p in sorted(sweep_dir.glob("*/summary.json")):
        s = json.loads(p.read_text())
        out[s["name"]] = s
    return out


def metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def wandb_inspect(run_dir: Path, *args: str):
    """Read an offline W&B run back with `wandb leet inspect` (wandb's own reader): the one of
    a run folder, or one offline-run-* folder."""
    [wdir] = (
        [run_dir]
        if run_dir.name.startswith("offline-run-")
        else (sorted((run_dir / "wandb").glob("offline-run-*")))
    )
    proc = subprocess.run(
        [sys.executable, "-m", "wandb", "leet", "inspect", *args, "--json", str(wdir)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def byte_run(tmp_path: Path, sweep: str, *extra: str) -> list[str]:
    """A run of 12 steps in bytes, its own results dir and sweep name, W&B offline."""
    results_dir = f"results_dir={tmp_path / 'results'}"
    return [
        *BYTE_RUN,
        "trainer.max_steps=12",
        "wandb.mode=offline",
        results_dir,
        *extra,
        f"sweep={sweep}",
    ]


@pytest.mark.slow
def test_user_command_four_runs_local_and_wandb(tiny_sweep: Path):
    runs = summaries(tiny_sweep)
    assert len(runs) == 4, list(runs)
    assert {(s["tie"], s["init_std"]) for s in runs.values()} == {
        (True, "1.0"),
        (True, "0.036"),
        (False, "1.0"),
        (False, "0.036"),
    }
    index = json.loads((tiny_sweep / "index.json").read_text())
    assert {e["status"] for e in index.values()} == {"finished"} and len(index) == 4

    for s in runs.values():
        assert s["status"] == "finished" and s["error"] is None
        assert s["step"] == 12
        p = s["params"]
        assert p["total"] == p["embedding"] + p["position"] + p["head"] + p["non_embedding"]
        assert p["head"] == (0 if s["tie"] else p["embedding"])
        assert s["init_std_resolved"]["emb"] == pytest.approx(float(s["init_std"]))
        for k in ("init_val_loss", "final_val_loss", "best_val_loss", "test_loss"):
            assert math.isfinite(s[k]), k
    tied = runs[run_name(True, "1.0", "nano", 0)]
    untied = runs[run_name(False, "1.0", "nano", 0)]
    assert untied["params"]["total"] - tied["params"]["total"] == VOCAB * 64

    # The initial loss is a result of the study: ~ln V for a small head std, far above it for 1.0.
    for tie in (True, False):
        small = runs[run_name(tie, "0.036", "nano", 0)]["init_val_loss"]
        large = runs[run_name(tie, "1.0", "nano", 0)]["init_val_loss"]
        assert abs(small - LN_V) < 0.5, small
        assert large > LN_V + 5, large

    # Local metrics: step 0 evaluation, train logs, gradient split, probes, test loss.
    run_dir = tiny_sweep / tied["run_id"]
    m = metrics(run_dir)
    assert m[0]["step"] == 0 and "val/loss" in m[0] and "init/logit_std" in m[0]
    train = [r for r in m if "train/loss" in r]
    # every step of the first trainer.log_first (100); evaluations also at 1, 2, 4 (< 6)
    assert [r["step"] for r in train] == list(range(1, 13))
    assert all(r["train/grad_norm_in"] > 0 and r["train/grad_norm_out"] > 0 for r in train)
    evaluated = [0, 1, 2, 4, 6, 12]
    assert [r["step"] for r in m if "val/loss" in r] == evaluated
    assert any("probe/emb_norm_mean" in r for r in m)
    assert "test/loss" in m[-1]
    assert sorted(p.name for p in (run_dir / "probes").glob("*.npz")) == [
        f"step_{s:07d}.npz" for s in evaluated
    ]

    for s in (tied, untied):
        assert_wandb_mirrors(tiny_sweep / s["run_id"], s, evaluated)


def assert_wandb_mirrors(rd: Path, s: dict, evaluated: list[int]) -> None:
    """The W&B mirror of run ``rd``, read back with wandb's own tool: the summary's numbers,
    the counts in its config, the validation losses at the ``evaluated`` steps."""
    got = json.loads(wandb_inspect(rd, "--summary"))
    assert got["state"] == "finished" and got["name"] == s["name"]
    assert got["config"]["tie"] == s["tie"]
    assert got["config"]["derived"]["params"]["total"] == s["params"]["total"]
    assert got["summary"]["params/total"] == s["params"]["total"]
    assert got["summary"]["test/loss"] == pytest.approx(s["test_loss"])
    hist = [
        json.loads(line)["history"]["item"]
        for line in wandb_inspect(rd).splitlines()
        if '"type":"history"' in line
    ]
    local_val = [(r["step"], r["val/loss"]) for r in metrics(rd) if "val/loss" in r]
    wandb_val = [(h["_step"], h["val/loss"]) for h in hist if "val/loss" in h]
    assert [s for s, _ in wandb_val] == [s for s, _ in local_val] == evaluated
    assert [v for _, v in wandb_val] == pytest.approx([v for _, v in local_val])


@pytest.mark.slow
def test_rerun_skips_finished_runs(tiny_sweep: Path, tmp_path: Path):
    before = {n: s["updated_at"] for n, s in summaries(tiny_sweep).items()}
    proc = run_cli(["-m", *TINY_SWEEP_OVERRIDES, f"results_dir={tiny_sweep.parent}"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert {n: s["updated_at"] for n, s in summaries(tiny_sweep).items()} == before
    out = proc.stdout + proc.stderr
    assert out.count("already finished") == 4
    assert "Sweep tiny" in out and out.count("finished") >= 8  # the end-of-sweep table


@pytest.mark.slow
def test_sigkill_then_rerun_matches_uninterrupted_run(tmp_path: Path):
    """Killed (kill -9) at step 7: after its checkpoint of step 4 and its evaluation of step 6.
    The rerun resumes from step 4, drops what the killed run wrote past it and ends as the run
    that was never stopped: same identity, losses and metrics."""
    args = byte_run(tmp_path, "resume", "trainer.ckpt_interval=4", "trainer.eval_interval=6")
    ref = run_cli([*args, f"results_dir={tmp_path / 'ref'}"], cwd=tmp_path)
    assert ref.returncode == 0, ref.stderr[-3000:]

    sweep = tmp_path / "results" / "resume"
    killed_proc = run_cli(args, cwd=tmp_path, env_extra=at_step(7, "SIGKILL"))
    assert killed_proc.returncode == -signal.SIGKILL, killed_proc.stderr[-3000:]
    [killed] = summaries(sweep).values()
    assert killed["status"] == "running" and killed["step"] == 6  # its last evaluation
    assert max(r["step"] for r in metrics(sweep / killed["run_id"])) == 7

    again = run_cli(args, cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "resuming from step 4" in again.stderr + again.stdout
    [resumed] = summaries(sweep).values()
    [reference] = summaries(tmp_path / "ref" / "resume").values()
    assert resumed["status"] == "finished" and resumed["resumed_from_step"] == 4
    assert resumed["run_id"] == reference["run_id"]  # identity is the config, not the time
    for key in ("final_val_loss", "best_val_loss", "test_loss", "init_val_loss"):
        assert resumed[key] == pytest.approx(reference[key], rel=0, abs=1e-6), key
    got, want = (
        metrics(sweep / resumed["run_id"]),
        metrics(tmp_path / "ref" / "resume" / reference["run_id"]),
    )
    assert [r["step"] for r in got] == [r["step"] for r in want]
    for g, w in zip(got, want, strict=True):
        timing = ("train/tokens_per_s", "train/mfu")
        assert g.keys() == w.keys()
        assert {k: v for k, v in g.items() if k not in timing} == pytest.approx(
            {k: v for k, v in w.items() if k not in timing}, rel=0, abs=1e-6
        ), g["step"]
    # W&B, read with its own reader: two offline runs of one run id (what `wandb sync` uploads
    # as one run); the killed one ends without an exit record, the resumed one holds it all
    killed_wb, resumed_wb = (
        [json.loads(line) for line in wandb_inspect(w).splitlines()]
        for w in sorted((sweep / resumed["run_id"] / "wandb").glob("offline-run-*"))
    )
    ids = [[r["run"]["run_id"] for r in wb if r["type"] == "run"] for wb in (killed_wb, resumed_wb)]
    assert ids[1] == [resumed["wandb_run_id"]]
    # a kill -9 may land before wandb-core wrote the killed file's run record (a loaded machine):
    # where it did, it is the same run id
    assert ids[0] in ([], [resumed["wandb_run_id"]])
    assert [r["type"] for r in killed_wb].count("exit") == 0
    assert [r["exit"].get("exit_code", 0) for r in resumed_wb if r["type"] == "exit"] == [0]
    history = [r["history"]["item"]["_step"] for r in resumed_wb if r["type"] == "history"]
    assert history == sorted({r["step"] for r in want})  # every logged step, once, in order


@pytest.mark.slow
def test_ctrl_c_saves_checkpoint_and_rerun_resumes(tmp_path: Path):
    """Ctrl-C at step 5 (checkpoints every 2 steps): the run saves step 5 and stops in one line;
    the rerun resumes from it (a checkpoint cut short is test_checkpoint's)."""
    args = byte_run(tmp_path, "ctrlc", "trainer.ckpt_interval=2", "trainer.eval_interval=1000")
    proc = run_cli(args, cwd=tmp_path, env_extra=at_step(5, "SIGINT"))
    sweep = tmp_path / "results" / "ctrlc"
    [s] = summaries(sweep).values()
    assert s["status"] == "interrupted" and "interrupted" in s["error"]  # not done: resumable
    index = json.loads((sweep / "index.json").read_text())
    assert index[s["run_id"]]["status"] == "interrupted"
    # One line, no traceback, and the exit code a shell gives Ctrl-C.
    said = "interrupted at step 5: rerun the same command to resume"
    assert (proc.returncode, proc.stderr.strip()) == (130, said)
    ckpts = sweep / s["run_id"] / "checkpoints"
    assert (ckpts / "last.pt").exists() and (ckpts / "prev.pt").exists()

    again = run_cli(args, cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    out = again.stderr + again.stdout
    assert f"resuming from step {s['step']}" in out
    assert re.search(r"finished: val \d+\.\d{4} .*, test \d+\.\d{4} \(at the best step", out)
    [done] = summaries(sweep).values()
    assert (done["status"], done["step"], done["resumed_from_step"]) == ("finished", 12, 5)
    # Finished: resuming is over, so only the weights stay.
    assert sorted(p.name for p in ckpts.iterdir()) == ["model.pt"]


@pytest.mark.slow
def test_divergence_and_failure_are_recorded_and_the_sweep_goes_on(tmp_path: Path):
    # A corpus whose held-out splits are shorter than one 128-token window: those jobs are
    # refused in one line before anything of theirs is written; a huge learning rate diverges;
    # the sane job finishes. One multirun goes on past each.
    small = tmp_path / "small.txt"
    # val and test: 5% of 2,000 characters, 17 to 128 tokens with GPT-2 and with bytes
    small.write_text(CORPUS.read_text()[:2_000])
    secret = "0123456789abcdef0123456789abcdef01234567"
    env = {"WANDB_API_KEY": secret}
    args = byte_run(
        tmp_path,
        "mixed",
        "optim.grad_clip=0",
        "optim.warmup_steps=0",
        f"data.files={small}",
        "model.block_size=16,128",
        "optim.lr=1e-3,1e5",
    )
    proc = run_cli(["-m", *args], cwd=tmp_path, env_extra=env)
    # Hydra reports the failed job after running the others
    assert proc.returncode == 1, proc.stderr[-3000:]
    sweep = tmp_path / "results" / "mixed"
    by = {}  # (block_size 128?, lr 1e5?) -> summary
    for run_id, entry in json.loads((sweep / "index.json").read_text()).items():
        asked = entry["overrides"]
        key = ("model.block_size=128" in asked, "optim.lr=100000.0" in asked)
        by[key] = json.loads((sweep / run_id / "summary.json").read_text())
    assert sorted(by) == [(False, False), (False, True)]  # the refused jobs wrote nothing
    assert "split 'val' has" in proc.stderr and "fewer than one window" in proc.stderr
    assert by[(False, False)]["status"] == "finished"
    diverged = by[(False, True)]
    assert diverged["status"] == "diverged" and diverged["diverged_at_step"] is not None
    assert "non-finite" in diverged["error"]
    # W&B knows too.
    got = json.loads(
        wandb_inspect(tmp_path / "results" / "mixed" / diverged["run_id"], "--summary")
    )
    assert got["summary"]["status"] == "diverged"
    # The sweep table lists every run with its status, though jobs failed.
    table = proc.stdout[proc.stdout.index("Sweep mixed") :]
    assert table.count("diverged") == 1
    assert table.count("finished") == 1
    # what tells runs of one name apart is in the table
    assert table.count("optim.lr=100000.0") == 1
    # No secret from the environment reached anything the runs wrote.
    for f in (tmp_path / "results").rglob("*"):
        if f.is_file():
            assert secret.encode() not in f.read_bytes(), f


# One of each kind: schema (type, choice, unknown key), relation, value, file, override spelling.
BAD = [
    (["tie=maybe"], "tie"),
    (["tie=1"], "tie=1 is invalid: use true or false"),  # OmegaConf would read it as true
    (
        ["model=huge"],
        "model=huge is invalid: use one of body256x4, body256x8, body384x6, body512x8, body64x2",
    ),
    (["trainer.max_step=5"], "did you mean trainer.max_steps?"),
    (["trainer.precision=fp8"], "trainer.precision=fp8"),
    (["model.n_head=3"], "n_head"),
    (["optim.lr=0"], "optim.lr"),
    (["init_std=abc"], "init_std"),
    (["seed=abc"], "seed=abc"),  # Hydra's own message would be six lines
    (["trainer.max_steps=x"], "trainer.max_steps=x"),
    (["data.files=/no/such.txt"], "data.files"),
    (["tie=false", "head.untie_at=0.5"], "head.untie_at"),
    (
        ["model.t5_rescale=true"],
        "model.t5_rescale is not a key of the config: it is head.t5_rescale now",
    ),
    (["tie=true,maybe"], "tie=maybe"),  # every value of a sweep, before any job starts
    (["+experiment=nope"], "experiment=nope"),
    (["tie=[1"], "tie=[1"),  # the override grammar's own error
]


@pytest.mark.parametrize("override,says", BAD, ids=[b[0][0] for b in BAD])
def test_bad_input_is_one_line_naming_the_key_before_anything_is_made(override, says, tmp_path):
    """Each mistake as the command's check meets it: Hydra composing the config (the schema's
    keys, types, choices and groups), then each job's own checks."""
    # The bad override comes last so nothing after it can mask it; a mistake here would train.
    given = [*CORPUS_OVERRIDES, f"results_dir={tmp_path / 'r'}", "trainer.max_steps=1", *override]
    with pytest.raises(jobs.SweepError) as refused, jobs.composed(given) as (loader, master):
        jobs.check_jobs(loader, master, jobs.expand(loader, master))
    assert "\n" not in str(refused.value) and says in str(refused.value)
    assert list(tmp_path.iterdir()) == []  # the results_dir's check leaves nothing


# Through the command line, once per way a mistake reaches it: Hydra's composition, the run's
# checks (the sweep's check: test_sweep).
@pytest.mark.slow
@pytest.mark.parametrize("bad,says", [("model=huge", "model=huge"), ("tie=1", "tie=1")])
def test_the_command_refuses_in_one_line_and_makes_no_folder(bad, says, tmp_path: Path):
    cache = tmp_path / "cache"
    given = [*CORPUS_OVERRIDES, f"results_dir={tmp_path / 'r'}", "wandb.mode=disabled", bad]
    proc = run_cli(given, cwd=tmp_path, env_extra={"TIEDVSUNTIED_CACHE": str(cache)}, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], lines
    # Nothing made: no results, no cache, and no log folder of Hydra's (outputs/).
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_cfg_job_is_resolved_and_help_lists_groups(tmp_path: Path):
    proc = run_cli(["--cfg", "job", "tie=false", "init_std=inv_sqrt_d", "model=mini"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (
        "tie: false" in proc.stdout
        and "init_std: inv_sqrt_d" in proc.stdout
        and "n_embd: 384" in proc.stdout
    )
    assert "${" not in proc.stdout
    helped = run_cli(["--help"], cwd=tmp_path)
    assert helped.returncode == 0
    for group in ("model:", "data:", "optim:", "trainer:", "wandb:"):
        assert group in helped.stdout
    assert "micro" in helped.stdout and "init_std" in helped.stdout


@pytest.mark.slow
def test_deleting_the_token_cache_mid_run_does_not_fail_the_run(tmp_path: Path):
    """The cache deleted at step 3, before two evaluations and the test split are read."""
    cache = tmp_path / "cache"
    args = byte_run(tmp_path, "rmcache", "trainer.eval_interval=4")
    env = {"TIEDVSUNTIED_CACHE": str(cache), **at_step(3, f"rm:{cache}")}
    proc = run_cli(args, cwd=tmp_path, env_extra=env)
    assert proc.returncode == 0, proc.stderr[-3000:]  # (a failed deletion fails the run too)
    [s] = summaries(tmp_path / "results" / "rmcache").values()
    assert s["status"] == "finished" and math.isfinite(s["test_loss"])


@pytest.mark.slow
def test_parallel_launcher_runs_jobs_in_processes_and_tokenizes_once(tmp_path: Path):
    cache = tmp_path / "fresh_cache"
    # GPT-2's encoding: tokenizing takes long enough for both workers to ask at once
    base = [o for o in TINY_SWEEP_OVERRIDES if not o.startswith(("tie=", "init_std=", "sweep="))]
    args = [
        *base,
        f"results_dir={tmp_path / 'results'}",
        "hydra/launcher=parallel",
        "tie=true,false",
        "trainer.max_steps=4",
        "trainer.eval_interval=2",
        "sweep=par",
    ]
    proc = run_cli(["-m", *args], cwd=tmp_path, env_extra={"TIEDVSUNTIED_CACHE": str(cache)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = summaries(tmp_path / "results" / "par")
    assert {s["status"] for s in runs.values()} == {"finished"} and len(runs) == 2
    assert len(json.loads((tmp_path / "results" / "par" / "index.json").read_text())) == 2
    # Both workers asked for the corpus at once; the lock let exactly one tokenize it.
    [log] = cache.glob("tokens/*/builds.log")
    events = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(events) == 2, events  # one "started", one "finished"


def test_the_sweep_table_says_which_running_runs_another_process_holds(tmp_path: Path):
    sweep = tmp_path / "s"
    for name, status in [("held", "running"), ("killed", "running"), ("done", "finished")]:
        summary = results.RunSummary(
            run_id=name, name=name, sweep="s", tie=True, init_std="0.02", model="nano", seed=0
        )
        summary.status, summary.final_val_loss = results.Status(status), 5.0
        summary.params = {"total": 1234567}
        summary.write(sweep / name)
        (sweep / name / ".lock").touch()  # a lock file outlives the process that held it
    with FileLock(str(sweep / "held" / ".lock")):  # a trainer (flock: another holder)
        table = runs_table(sweep).set_index("run")
    assert table["status"].to_dict() == {
        "done": "finished",
        "held": "running (another process)",
        "killed": "interrupted (a rerun resumes)",
    }
    assert set(table["params"]) == {"1,234,567"} and set(table["final val"]) == {5.0}
    # released: the run is no longer trained by anyone
    assert runs_table(sweep).set_index("run")["status"]["held"] == "interrupted (a rerun resumes)"


@pytest.mark.slow
@pytest.mark.parametrize("mode", [["-m"], []], ids=["multirun", "run"])
def test_a_job_refused_after_hydra_made_its_folder_leaves_no_folder(mode, tmp_path: Path):
    """A Hub dataset that cannot be had: one line, exit 2, and neither multirun/<sweep>/<time>/0/
    nor outputs/ (the command's check finds it now, issue 56; the job's own check would too)."""
    given = [
        *mode,
        "data.source=hub",
        "data.path=nobody/no_such_dataset",
        "data.encoding=bytes",
        f"results_dir={tmp_path / 'r'}",
        "wandb.mode=disabled",
    ]
    env = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_CACHE": str(tmp_path / "hf")}
    proc = run_cli(given, cwd=tmp_path, env_extra=env, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "not available offline" in proc.stderr.strip().splitlines()[-1]
    made = {p.name for p in tmp_path.iterdir()}
    assert made <= {"r", "hf"}, made  # no multirun/ or outputs/ (r: the sweep's planned.json)
