"""Fast unit tests of the trainer's pieces: schedule, optimizer groups, run identity, config
validation, checkpoints, the records' atomic writes."""
from __future__ import annotations

import json

import pytest
import torch
from omegaconf import OmegaConf

from tiedvsuntied import config as C
from tiedvsuntied.model import GPT, ModelConfig
from tiedvsuntied.tracking import RunRecorder, resolve_wandb_mode, scrub
from tiedvsuntied.train import OptimConfig, TrainerConfig, build_optimizer, load_checkpoint, lr_at, save_checkpoint


def make_cfg(**top) -> C.Config:
    """A Config exactly as Hydra would build it: structured schema + interpolation resolved."""
    node = OmegaConf.structured(C.Config)
    node.merge_with(top)
    return OmegaConf.to_object(node)


def tiny_model(tie: bool, seed: int = 0) -> GPT:
    cfg = ModelConfig(name="t", n_layer=1, n_head=2, n_embd=16, block_size=8, vocab_size=97, tie=tie)
    return GPT(cfg, seed=seed)


def test_schedule_warms_up_then_decays_to_floor():
    oc = OptimConfig(lr=1e-3, warmup_steps=10, min_lr_ratio=0.1)
    lrs = [lr_at(s, oc, 100) for s in range(101)]
    assert lrs[0] == pytest.approx(1e-4) and lrs[9] == pytest.approx(1e-3)
    assert all(a <= b for a, b in zip(lrs[:10], lrs[1:10]))
    assert all(a >= b for a, b in zip(lrs[10:], lrs[11:]))
    assert lrs[100] == pytest.approx(1e-4) and lrs[55] == pytest.approx(5.5e-4)


@pytest.mark.parametrize("tie", [True, False])
def test_optimizer_holds_tied_matrix_once_and_skips_decay_on_embeddings(tie):
    model = tiny_model(tie)
    opt = build_optimizer(model, OptimConfig(weight_decay=0.1))
    ids = [id(p) for g in opt.param_groups for p in g["params"]]
    assert len(ids) == len(set(ids)) == len(list(model.parameters()))
    decayed = {id(p) for p in opt.param_groups[0]["params"]}
    assert id(model.transformer.wte.weight) not in decayed
    emb = [p for n, p in model.named_parameters() if n.endswith(("wte.weight", "lm_head.weight"))]
    assert len(emb) == (1 if tie else 2)
    assert all(id(p) not in decayed for p in emb)
    opt = build_optimizer(model, OptimConfig(weight_decay=0.1, decay_embeddings=True))
    decayed = {id(p) for p in opt.param_groups[0]["params"]}
    assert all(id(p) in decayed for p in emb)


def test_run_identity_is_the_config_not_the_spelling():
    a, name = C.run_identity(make_cfg(tie=True, init_std="1.0"), "fp")
    b, _ = C.run_identity(make_cfg(tie=True, init_std="1"), "fp")
    assert a == b and a.startswith(name + "-") and name == "tie=true_init=1.0_model=micro_seed=0"
    # Where and how it is recorded does not matter; what it computes does.
    c, _ = C.run_identity(make_cfg(tie=True, init_std="1.0", results_dir="/elsewhere", sweep="x",
                                   wandb={"mode": "disabled"}, trainer={"progress": False}), "fp")
    assert c == a
    for other in (make_cfg(tie=False, init_std="1.0"), make_cfg(tie=True, init_std="0.036"),
                  make_cfg(tie=True, init_std="1.0", seed=1), make_cfg(tie=True, init_std="1.0", optim={"lr": 3e-4})):
        assert C.run_identity(other, "fp")[0] != a
    assert C.run_identity(make_cfg(tie=True, init_std="1.0"), "other-data")[0] != a


def test_top_level_tie_and_init_reach_the_model():
    cfg = make_cfg(tie=False, init_std="inv_sqrt_d")
    assert cfg.model.tie is False and cfg.model.init_std == "inv_sqrt_d"
    mc = C.model_config(cfg, 1000)
    assert mc.vocab_size == 1000 and mc.tie is False
    C.validate(cfg)


@pytest.mark.parametrize("top,key", [
    ({"seed": -1}, "seed"),
    ({"sweep": "a/b"}, "sweep"),
    ({"trainer": {"max_steps": 0}}, "trainer.max_steps"),
    ({"trainer": {"device": "tpu"}}, "trainer.device"),
    ({"optim": {"lr": 0.0}}, "optim.lr"),
    ({"optim": {"beta2": 1.0}}, "optim.beta2"),
    ({"wandb": {"mode": "maybe"}}, "wandb.mode"),
    ({"init_std": "0"}, "init_std"),
    ({"model": {"tie": False}}, "tie"),
])
def test_invalid_values_name_their_key(top, key):
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        C.validate(make_cfg(**top))


def test_checkpoint_round_trip_keeps_tying_and_optimizer_state(tmp_path):
    model = tiny_model(True)
    opt = build_optimizer(model, OptimConfig())
    x = torch.randint(0, 97, (2, 8))
    _, loss = model(x, x, return_logits=False)
    loss.backward()
    opt.step()
    save_checkpoint(tmp_path / "last.pt", model=model, optimizer=opt, step=3, tokens=48, state={"best_val_loss": 1.5})
    assert not list(tmp_path.glob(".*tmp*"))  # written atomically, nothing left behind
    fresh = tiny_model(True, seed=1)
    fresh_opt = build_optimizer(fresh, OptimConfig())
    ckpt = load_checkpoint(tmp_path / "last.pt", model=fresh, optimizer=fresh_opt)
    assert ckpt["step"] == 3 and ckpt["state"]["best_val_loss"] == 1.5
    assert fresh.lm_head.weight is fresh.transformer.wte.weight
    for (n, p), (_, q) in zip(model.state_dict().items(), fresh.state_dict().items()):
        assert torch.equal(p, q), n
    s0, s1 = opt.state_dict()["state"], fresh_opt.state_dict()["state"]
    assert all(torch.equal(s0[k]["exp_avg"], s1[k]["exp_avg"]) for k in s0)


def test_metrics_resume_drops_lines_past_the_checkpoint(tmp_path):
    rec = RunRecorder(tmp_path, {"status": "running"})
    rec.open_metrics(None)
    for step in range(0, 50, 10):
        rec.log({"train/loss": float(step), "val/loss": float("nan") if step == 40 else 1.0}, step)
    rec.finish()
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"step": 45, "train/lo')  # a line cut by a kill
    rec = RunRecorder(tmp_path, {"status": "running"})
    rec.open_metrics(20)
    rec.log({"train/loss": 30.0}, 30)
    rec.finish()
    rows = [json.loads(l) for l in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 10, 20, 30]
    rec.update_summary(best=float("inf"))
    assert json.loads((tmp_path / "summary.json").read_text())["best"] == "inf"  # valid JSON, not Infinity


def test_wandb_mode_auto_and_secret_scrubbing(monkeypatch, tmp_path):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    assert resolve_wandb_mode("auto") == "offline"
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    assert resolve_wandb_mode("auto") == "online"
    assert resolve_wandb_mode("disabled") == "disabled"
    monkeypatch.setenv("WANDB_MODE", "offline")
    assert resolve_wandb_mode("auto") == "offline"
    text = scrub(f"failed with key {'k' * 40} and token=abc123 and api_key: xyz")
    assert "k" * 40 not in text and "abc123" not in text and "xyz" not in text


def test_trainer_config_is_the_yaml_default():
    # conf/trainer/default.yaml and the dataclass must not drift apart.
    yaml = OmegaConf.load(C.__file__.replace("tiedvsuntied/config.py", "conf/trainer/default.yaml"))
    assert OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(TrainerConfig), yaml)) == TrainerConfig()
    yaml = OmegaConf.load(C.__file__.replace("tiedvsuntied/config.py", "conf/optim/adamw.yaml"))
    assert OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(OptimConfig), yaml)) == OptimConfig()
