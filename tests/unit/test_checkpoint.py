"""The checkpoint files on their own: a round trip keeps tying and optimizer state; a file cut
short falls back to the previous one. (A checkpoint that no longer fits the code, and a resume
end to end: tests/unit/test_train.py, tests/e2e/test_train_e2e.py.)"""

from __future__ import annotations

import logging

import torch

from tiedvsuntied.model.config import ModelConfig
from tiedvsuntied.model.gpt import GPT
from tiedvsuntied.results.records import RunSummary, fields_of
from tiedvsuntied.train.checkpoint import Checkpoints, TrainState
from tiedvsuntied.train.config import OptimConfig
from tiedvsuntied.train.optim import build_optimizer


def tiny_model(tie: bool, seed: int = 0) -> GPT:
    return GPT(
        ModelConfig(name="t", n_layer=1, n_head=2, n_embd=16, block_size=8, vocab_size=97),
        tie=tie,
        seed=seed,
    )


def _trained(tie: bool):
    model = tiny_model(tie)
    opt = build_optimizer(model, OptimConfig())
    x = torch.randint(0, 97, (2, 8))
    model(x, x, return_logits=False)[1].backward()
    opt.step()
    return model, opt


def test_checkpoint_round_trip_keeps_tying_and_optimizer_state(tmp_path):
    model, opt = _trained(True)
    Checkpoints(tmp_path).save(model, opt, TrainState(step=3, tokens=48, best_val_loss=1.5))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.pt"]  # nothing temporary left
    fresh = tiny_model(True, seed=1)
    fresh_opt, state = build_optimizer(fresh, OptimConfig()), TrainState()
    assert Checkpoints(tmp_path).load(fresh, fresh_opt, state) == tmp_path / "last.pt"
    assert state == TrainState(step=3, tokens=48, best_val_loss=1.5)
    assert fresh.lm_head.weight is fresh.transformer.wte.weight
    pairs = zip(model.state_dict().values(), fresh.state_dict().values(), strict=True)
    assert all(torch.equal(p, q) for p, q in pairs)
    s0, s1 = opt.state_dict()["state"], fresh_opt.state_dict()["state"]
    assert all(torch.equal(s0[k]["exp_avg"], s1[k]["exp_avg"]) for k in s0)


def test_a_corrupt_checkpoint_falls_back_to_the_previous_one_naming_the_file(tmp_path, caplog):
    model, opt = _trained(False)
    Checkpoints(tmp_path).save(model, opt, TrainState(step=2))
    Checkpoints(tmp_path).save(model, opt, TrainState(step=4))
    last = tmp_path / "last.pt"
    last.write_bytes(last.read_bytes()[:1000])  # cut short, as by a full disk
    state = TrainState()
    with caplog.at_level(logging.WARNING):
        assert (
            Checkpoints(tmp_path).load(
                tiny_model(False),
                build_optimizer(tiny_model(False), OptimConfig()),
                state,
            )
            == tmp_path / "prev.pt"
        )
    assert state.step == 2 and str(last) in caplog.text
    assert (tmp_path / "last.pt.bad").exists() and not last.exists()  # the next save keeps prev.pt
    (tmp_path / "prev.pt").write_bytes(b"not a checkpoint")
    assert (
        Checkpoints(tmp_path).load(
            tiny_model(False),
            build_optimizer(tiny_model(False), OptimConfig()),
            TrainState(),
        )
        is None
    )  # nothing usable: the run starts over


# The train_state of a last.pt that the code before the record was one class (6ce70e5) wrote:
# tests/interrupted.py's run (trainer.max_steps=6, optim.grad_clip=0.05), stopped at step 2 (its
# seconds rounded). A study's runs that code checkpointed are resumed by this one.
WRITTEN_BEFORE = {
    "step": 2,
    "tokens": 512,
    "init_val_loss": 5.577859878540039,
    "init_logit_std": 0.16638848185539246,
    "init_self_logit": 0.7479705810546875,
    "init_self_target_frac": 0.01171875,
    "best_val_loss": 5.568151473999023,
    "best_step": 2,
    "last_val_loss": 5.568151473999023,
    "clipped_steps": 2,
    "time_s": {"other": 0.12, "eval": 0.98, "probes": 0.69, "checkpoint": 0.05, "step": 2.9},
}


def test_an_earlier_codes_checkpoint_restores_into_the_record_and_is_written_back_as_it_was(
    tmp_path,
):
    """The run's record (a RunSummary, whose TrainState part the loop updates) writes a checkpoint's
    train_state with the keys the earlier code wrote, in their order, and nothing of its other
    parts; the earlier code's dict restores into it whole."""
    model, opt = _trained(True)
    Checkpoints(tmp_path).save(model, opt, TrainState())
    ckpt = torch.load(tmp_path / "last.pt", weights_only=True)
    assert list(ckpt["train_state"]) == [*WRITTEN_BEFORE, "cpu_s", "starts"]  # added since
    torch.save({**ckpt, "train_state": WRITTEN_BEFORE}, tmp_path / "last.pt")
    record = RunSummary("r", "n", "s", tie=True, init_std="0.02", model="t", seed=0, vocab_size=97)
    fresh = tiny_model(True, seed=1)
    Checkpoints(tmp_path).load(fresh, build_optimizer(fresh, OptimConfig()), record)
    # its processes' CPU seconds were not counted, so the run's are unknown from here on; so is
    # the code of its steps so far
    unrecorded = {"step": 0, "at": None, "git_commit": None, "git_dirty": None}
    after = {**WRITTEN_BEFORE, "cpu_s": None, "starts": [unrecorded]}
    assert fields_of(record, TrainState) == after and record.vocab_size == 97
    assert record.to_dict()["step"] == 2 and "clipped_steps" not in record.to_dict()
    Checkpoints(tmp_path).save_final(fresh, record)
    assert torch.load(tmp_path / "model.pt", weights_only=True)["train_state"] == after
