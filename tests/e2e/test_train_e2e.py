"""The end-to-end tests of tests/unit/test_train.py: every experiment config trained a few
steps in-process (minutes: the GPT-2-vocabulary configs dominate)."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
from conftest import QUICK, REPO, SWEEP_NAMES, compose
from interrupted import interrupted_run
from omegaconf import OmegaConf

from tiedvsuntied.data.cache import prepare_data
from tiedvsuntied.results import records as R
from tiedvsuntied.train.config import (
    resolved_config,
)
from tiedvsuntied.train.trainer import train

CONF = REPO / "conf"
EXPERIMENTS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))


@pytest.mark.slow  # 15 configs, 4 steps each: minutes
@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_experiment_trains_a_few_steps(experiment, tmp_path):
    """Each experiment config, with every swept key at its last value (the arm that differs from
    the defaults: head.untie_at=0.67, data.encoding=bytes, ...), on a tiny budget."""
    sweep = OmegaConf.load(CONF / "experiment" / f"{experiment}.yaml").hydra.sweeper.params
    lasts = [f"{k}={str(v).split(',')[-1]}" for k, v in sweep.items() if k not in ("model", "seed")]
    if experiment == "finetune":  # it starts from the run that finetune_pretrain makes
        train(compose("+experiment=finetune_pretrain", *QUICK, f"results_dir={tmp_path}"))
    # QUICK's bytes replace a vocabulary trained on the corpus by a small one trained here
    trained = (
        ["data.encoding=bpe", "data.vocab_size=300"]
        if experiment in ("sign_flip", "size_or_tokens")
        else []
    )
    cfg = compose(f"+experiment={experiment}", *lasts, *QUICK, *trained, f"results_dir={tmp_path}")
    assert cfg.sweep == SWEEP_NAMES.get(experiment, experiment)
    summary = train(cfg)
    assert summary.status == R.Status.finished and summary.step == 4, summary.error
    if experiment == "t5_rescale":  # its runs pair with tie_x_init's plain tied runs
        assert summary.tie and summary.t5_rescale and summary.init_std == "1.0"


def test_a_replicate_is_another_run_of_one_config_that_changes_nothing_else(tmp_path):
    """The noise floor needs one config trained twice: replicate=1 is not skipped as done, and
    (eager CPU runs being bitwise reproducible) it trains exactly the losses of replicate 0."""
    runs = []
    for replicate in (0, 1):
        over = [*QUICK, f"results_dir={tmp_path}", f"replicate={replicate}"]
        runs.append(train(compose(*over), overrides=over))
    first, second = runs
    assert first.status == second.status == R.Status.finished
    assert first.run_id != second.run_id and second.name.endswith("_seed0_rep1")
    assert (first.replicate, second.replicate) == (0, 1)

    def losses(summary):
        lines = R.read_metrics(tmp_path / summary.sweep / summary.run_id)
        return [(m["step"], m[k]) for m in lines for k in sorted(m) if k.endswith("/loss")]

    assert losses(first) == losses(second) and len(losses(first)) >= 3


def test_a_truncated_last_checkpoint_resumes_from_the_previous_one_and_finishes_clean(
    tmp_path, monkeypatch
):
    cfg, run_dir = interrupted_run(tmp_path, monkeypatch, "trainer.ckpt_interval=1")
    last = run_dir / "checkpoints" / "last.pt"
    last.write_bytes(last.read_bytes()[:1000])  # cut short, as by a full disk
    s = train(cfg)
    assert s.status == R.Status.finished and s.resumed_from_step == 1
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["model.pt"]  # no .bad
    steps = [r["step"] for r in R.read_metrics(run_dir) if "val/loss" in r]
    assert steps == [0, 1, 2, 4]  # step 2 trained again, logged once (1: an early evaluation)


def test_a_run_records_window_losses_test_at_its_best_step_clipping_and_the_seen_vocabulary(
    tmp_path,
):
    """What the paired, bootstrapped comparisons read: the loss of every fixed window at every
    evaluation, the test split at each new best validation step and at the end."""
    cfg = compose(
        "tie=true",
        "init_std=1.0",
        *QUICK,
        "trainer.max_steps=6",
        "trainer.eval_windows=0",
        # the learning rate climbs to 3 at the last step: it helps first and overshoots last,
        # so the best weights are not the last ones on any corpus (GPT-2 or bytes)
        "optim.lr=3",
        "optim.warmup_steps=6",
        "optim.grad_clip=1e-6",
        f"results_dir={tmp_path}",
    )
    s = train(cfg)
    run_dir = next((tmp_path / cfg.sweep).glob("tied_*"))
    metrics = R.read_metrics(run_dir)
    val = {m["step"]: m["val/loss"] for m in metrics if "val/loss" in m}
    assert sorted(val) == [0, 1, 2, 4, 6]  # 1: the early evaluations below eval_interval
    n_windows = len(prepare_data(cfg.data).tokens("val")) // (
        cfg.model.block_size + 1
    )  # all that fit
    tested = {}
    for step, loss in val.items():
        with np.load(run_dir / "probes" / f"step_{step:07d}.npz") as z:
            assert z["val_window_loss"].shape == (n_windows,)
            assert float(z["val_window_loss"].mean()) == pytest.approx(loss, rel=1e-5)
            if "test_window_loss" in z.files:
                tested[step] = float(z["test_window_loss"].mean())
    assert (
        s.best_step == min(val, key=val.get) < 6
    )  # the rising learning rate overshoots: the best weights are not the last
    assert s.best_val_loss == pytest.approx(val[s.best_step])
    assert sorted(tested) == sorted(
        {s.best_step, 6}
    )  # the best weights (kept in best.pt until now) and the last
    assert s.test_loss_at_best == pytest.approx(tested[s.best_step], rel=1e-5)
    assert s.test_loss == pytest.approx(tested[6], rel=1e-5)
    assert s.clip_frac == 1.0 and {
        m["train/clip_frac"] for m in metrics if "train/clip_frac" in m
    } == {1.0}
    assert s.seen_vocab_frac == pytest.approx(
        float((np.load(run_dir / "token_freq.npy") > 0).mean())
    )
    # tied at init std 1: the input token's own logit is about std * d, far above the others
    assert s.init_self_logit > 0.5 * cfg.model.n_embd and s.init_self_logit > 5 * s.init_logit_std
    assert s.peak_tflops > 0 and R.read_summary(run_dir).test_loss_at_best == s.test_loss_at_best
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["model.pt"]


def test_a_rerun_restores_a_done_runs_lost_config_and_check_stops_naming_it(tmp_path, caplog):
    """A finished run's config.yaml deleted, then made unreadable: the next run of its command
    skips it, writes the file again in one logged line, and the sweep's check finds no damage."""
    from tiedvsuntied.results.state import damage
    from tiedvsuntied.sweep.progress import damaged

    cfg = compose(*QUICK, "trainer.test_eval=false", f"results_dir={tmp_path}")
    s = train(cfg)
    run_dir, sweep = tmp_path / cfg.sweep / s.run_id, tmp_path / cfg.sweep
    written = OmegaConf.to_container(OmegaConf.load(run_dir / "config.yaml"))
    for harm, phrase in ((Path.unlink, "missing"), (lambda p: p.write_text("a: [b"), "unreadable")):
        harm(run_dir / "config.yaml")
        assert damage(run_dir) == [f"config.yaml {phrase}"] and len(damaged(sweep)) == 1
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="tiedvsuntied"):
            assert train(cfg).step == s.step  # skipped, not trained again
        assert [r.getMessage() for r in caplog.records if "config.yaml" in r.getMessage()] == [
            f"[{s.name}] config.yaml {phrase}: rewritten from the resolved config and summary.json"
        ]
        assert damage(run_dir) == [] and damaged(sweep) == []
        restored = OmegaConf.to_container(OmegaConf.load(run_dir / "config.yaml"))
        assert {k: v for k, v in restored.items() if k != "derived"} == resolved_config(cfg)
        assert {k: v for k, v in written.items() if k != "derived"} == resolved_config(cfg)
        derived, stds = dict(restored["derived"]), "init_std_resolved"  # the summary: emb, head
        assert derived.pop(stds).items() <= written["derived"][stds].items()
        assert derived == {k: v for k, v in written["derived"].items() if k in derived}
        assert derived["vocab_size"] == 257 and len(derived) >= 15
