"""The end-to-end tests of tests/unit/test_train.py: every experiment config trained a few
steps in-process (minutes: the GPT-2-vocabulary configs dominate)."""

from __future__ import annotations

import pytest
from conftest import QUICK, REPO, SWEEP_NAMES, compose
from omegaconf import OmegaConf

from tiedvsuntied.results import records as R
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
    trained = ["data.encoding=bpe", "data.vocab_size=300"] if experiment == "sign_flip" else []
    cfg = compose(f"+experiment={experiment}", *lasts, *QUICK, *trained, f"results_dir={tmp_path}")
    assert cfg.sweep == SWEEP_NAMES.get(experiment, experiment)
    summary = train(cfg)
    assert summary.status == R.Status.finished and summary.step == 4, summary.error
    if experiment == "t5_rescale":  # its runs pair with tie_x_init's plain tied runs
        assert summary.tie and summary.t5_rescale and summary.init_std == "1.0"
