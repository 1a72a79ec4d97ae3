"""The optimizer's named groups and their learning rates: where each parameter goes, the lr each
rule gives each tensor (checked on real AdamW steps), scheduled untying's head group, what a run
records and logs, and that the new keys change no existing run's identity."""

from __future__ import annotations

import math
import re

import pytest
import torch
from conftest import QUICK, check_overrides, compose

from tiedvsuntied.model.config import HeadConfig, ModelConfig
from tiedvsuntied.model.gpt import GPT, set_trainable
from tiedvsuntied.train.checkpoint import CheckpointMismatch, Checkpoints, TrainState
from tiedvsuntied.train.config import (
    ConfigError,
    LrScaling,
    LrSchedule,
    OptimConfig,
    Precision,
    resolved_config,
    run_id,
)
from tiedvsuntied.train.optim import (
    build_optimizer,
    decay_start,
    group_lr_scales,
    lr_at,
    set_lr,
    untie,
)

V, D = 64, 16  # inv_sqrt_d = 0.25


def tiny(tie: bool = True, init_std: str = "0.02", head=None, **model) -> GPT:
    cfg = ModelConfig(n_layer=1, n_head=2, n_embd=D, block_size=8, vocab_size=V, **model)
    return GPT(cfg, tie=tie, init_std=init_std, head=head, seed=0)


def groups(opt: torch.optim.Optimizer) -> dict[str, dict]:
    return {g["name"]: g for g in opt.param_groups}


def group_of(opt: torch.optim.Optimizer, p: torch.Tensor) -> list[str]:
    return [g["name"] for g in opt.param_groups if any(q is p for q in g["params"])]


# ---------------------------------------------------------------------------- groups


@pytest.mark.parametrize("tie", [True, False])
def test_every_trainable_parameter_is_in_exactly_one_named_group(tie):
    model = tiny(tie)
    opt = build_optimizer(model, OptimConfig())
    wte, head = model.transformer.wte.weight, model.lm_head.weight
    expected = {"body", "body_no_decay", *(("tied",) if tie else ("wte", "lm_head"))}
    assert set(groups(opt)) == expected and len(opt.param_groups) == len(expected)
    for p in model.parameters():  # a tied matrix comes once
        assert len(group_of(opt, p)) == 1
    listed = [p for g in opt.param_groups for p in g["params"]]
    assert len(listed) == len(list(model.parameters()))
    if tie:
        assert head is wte and group_of(opt, wte) == ["tied"]
        assert groups(opt)["tied"]["params"] == [wte]  # one parameter, one lr for both roles
    else:
        assert group_of(opt, wte) == ["wte"] and group_of(opt, head) == ["lm_head"]
    # wpe is initialised like the body: with it, undecayed unless decay_embeddings
    assert group_of(opt, model.transformer.wpe.weight) == ["body_no_decay"]
    decayed = build_optimizer(model, OptimConfig(decay_embeddings=True))
    assert group_of(decayed, model.transformer.wpe.weight) == ["body"]
    emb = "tied" if tie else "wte"
    assert groups(opt)[emb]["weight_decay"] == 0 and groups(decayed)[emb]["weight_decay"] == 0.1
    assert all(g.ndim >= 2 for g in groups(opt)["body"]["params"])


def test_frozen_parameters_and_empty_groups_are_left_out():
    model = tiny(tie=False)
    set_trainable(model, "head")  # finetune.trainable=head: the head alone trains
    opt = build_optimizer(model, OptimConfig(emb_lr_mult=2.0))
    assert list(groups(opt)) == ["lm_head"]
    assert groups(opt)["lm_head"]["params"] == [model.lm_head.weight]
    assert groups(opt)["lm_head"]["lr"] == pytest.approx(2e-3)


def test_defaults_train_every_group_at_the_scheduled_lr():
    """The defaults give what the two-group optimizer gave: one lr for every tensor."""
    for tie in (True, False):
        opt = build_optimizer(tiny(tie, "1.0"), OptimConfig())
        assert {g["lr_scale"] for g in opt.param_groups} == {1.0}
        assert {g["lr"] for g in opt.param_groups} == {1e-3}


# ---------------------------------------------------------------------------- the rules

RULES = [  # (tie, init_std, model overrides, optim) -> expected scale per embedding-side group
    (True, "1.0", {}, dict(lr_scaling="init_std"), {"tied": 50.0}),
    (True, "1.0", {"body_init_std": 0.04}, dict(lr_scaling="init_std"), {"tied": 25.0}),
    (True, "inv_sqrt_d", {}, dict(lr_scaling="init_std"), {"tied": 12.5}),
    (True, "1.0", {}, dict(lr_scaling="none", emb_lr_mult=3.0), {"tied": 3.0}),
    (True, "1.0", {}, dict(lr_scaling="init_std", tied_lr_mult=0.1), {"tied": 5.0}),
    (True, "1.0", {}, dict(emb_lr_mult=3.0, head_lr_mult=7.0), {"tied": 3.0}),  # no head group
    (
        False,
        "0.02",
        {"head": HeadConfig(emb_init_std="1.0", init_std="inv_sqrt_d")},
        dict(lr_scaling="init_std"),
        {"wte": 50.0, "lm_head": 12.5},
    ),
    (
        False,
        "0.02",
        {"head": HeadConfig(emb_init_std="1.0", init_std="inv_sqrt_d")},
        dict(lr_scaling="init_std", emb_lr_mult=0.5, head_lr_mult=2.0),
        {"wte": 25.0, "lm_head": 25.0},
    ),
    (False, "1.0", {}, dict(emb_lr_mult=3.0), {"wte": 3.0, "lm_head": 3.0}),  # head follows emb
    (False, "1.0", {}, dict(emb_lr_mult=3.0, tied_lr_mult=9.0), {"wte": 3.0, "lm_head": 3.0}),
    # a zero-init head has no scale to keep: factor 1, its multiplier still applies
    (
        False,
        "1.0",
        {"head": HeadConfig(init_std="0")},
        dict(lr_scaling="init_std", head_lr_mult=2.0),
        {"wte": 50.0, "lm_head": 2.0},
    ),
]


@pytest.mark.parametrize("tie,init_std,model_kw,optim,scales", RULES)
def test_each_rule_gives_the_stated_lr_to_the_stated_tensors(
    tie, init_std, model_kw, optim, scales
):
    model = tiny(tie, init_std, **model_kw)
    cfg = OptimConfig(lr=2e-3, **optim)
    assert group_lr_scales(model, cfg) == pytest.approx(
        {"body": 1.0, "body_no_decay": 1.0, **scales}
    )
    opt = build_optimizer(model, cfg)
    tensors = {"tied": "transformer.wte.weight", "wte": "transformer.wte.weight"}
    tensors["lm_head"] = "lm_head.weight"
    params = dict(model.named_parameters())
    for name, scale in scales.items():
        (group,) = [
            g for g in opt.param_groups if any(p is params[tensors[name]] for p in g["params"])
        ]
        assert group["name"] == name and group["lr_scale"] == pytest.approx(scale)
        assert group["lr"] == pytest.approx(2e-3 * scale)
    assert groups(opt)["body"]["lr"] == groups(opt)["body_no_decay"]["lr"] == 2e-3


def test_an_adamw_step_moves_each_tensor_by_its_own_lr():
    """Real steps: set_lr (what the loop calls) puts every group at lr_at(step) x its scale, and
    Adam's first update of an undecayed weight is that lr times the sign of its gradient, so
    the tied std-1.0 matrix moves 50x as far per element as a LayerNorm gain."""
    model = tiny(True, "1.0")
    cfg = OptimConfig(lr=1e-3, warmup_steps=4, lr_scaling=LrScaling.init_std)
    opt = build_optimizer(model, cfg)
    x = torch.randint(0, V, (4, 8))
    for step in range(3):
        lr = lr_at(step, cfg, max_steps=10)
        set_lr(opt, lr)
        for g in opt.param_groups:
            assert g["lr"] == pytest.approx(lr * g["lr_scale"])
        wte = model.transformer.wte.weight.detach().clone()
        ln = model.transformer.ln_f.weight.detach().clone()
        model(x, x, return_logits=False)[1].backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step == 0:
            moved_wte = (model.transformer.wte.weight - wte).abs().max().item()
            moved_ln = (model.transformer.ln_f.weight - ln).abs().max().item()
            assert moved_wte == pytest.approx(50 * lr, rel=1e-3)
            assert moved_ln == pytest.approx(lr, rel=1e-3)
    assert groups(opt)["tied"]["lr"] == pytest.approx(50 * lr_at(2, cfg, 10))


# ---------------------------------------------------------------------------- scheduled untying


@pytest.mark.parametrize("head_lr_mult,expected", [(None, 50.0), (2.0, 100.0)])
def test_untying_puts_the_head_in_its_own_group_at_the_tied_matrix_scale(head_lr_mult, expected):
    """The head starts as a copy of the tied matrix (its std): the tied group's scale carries on
    unless head_lr_mult is set, which then composes with the same std factor."""
    model = tiny(True, "1.0")
    cfg = OptimConfig(lr_scaling="init_std", head_lr_mult=head_lr_mult)
    opt = build_optimizer(model, cfg)
    set_lr(opt, 5e-4)
    untie(model, opt, cfg)
    assert not model.tie
    assert list(groups(opt)) == ["body", "body_no_decay", "tied", "lm_head"]
    assert group_of(opt, model.lm_head.weight) == ["lm_head"]
    assert group_of(opt, model.transformer.wte.weight) == ["tied"]  # its lr unchanged
    head = groups(opt)["lm_head"]
    assert head["lr_scale"] == pytest.approx(expected) and head["lr"] == pytest.approx(
        5e-4 * expected
    )
    assert groups(opt)["tied"]["lr_scale"] == pytest.approx(50.0)


# ---------------------------------------------------------------------------- checkpoints


def test_a_checkpoint_of_the_two_group_optimizer_is_a_one_line_mismatch(tmp_path):
    """What a run interrupted before the named groups left: two groups (decay, no_decay)."""
    model = tiny(True)
    decay = [p for p in model.parameters() if p.ndim >= 2 and p is not model.transformer.wte.weight]
    rest = [p for p in model.parameters() if not any(p is q for q in decay)]
    old = torch.optim.AdamW([{"params": decay}, {"params": rest, "weight_decay": 0.0}])
    x = torch.randint(0, V, (2, 8))
    model(x, x, return_logits=False)[1].backward()
    old.step()
    Checkpoints(tmp_path).save(model, old, TrainState(step=2))
    with pytest.raises(CheckpointMismatch) as err:
        Checkpoints(tmp_path).load(
            tiny(True), build_optimizer(tiny(True), OptimConfig()), TrainState()
        )
    message = str(err.value)
    assert "optimizer" in message and "last.pt" in message and "\n" not in message


# ---------------------------------------------------------------------------- the config


@pytest.mark.parametrize(
    "override,key",
    [
        ("optim.emb_lr_mult=0", "optim.emb_lr_mult"),
        ("optim.head_lr_mult=-1", "optim.head_lr_mult"),
        ("optim.tied_lr_mult=0", "optim.tied_lr_mult"),
    ],
)
def test_a_bad_multiplier_is_one_line_naming_the_key(override, key):
    with pytest.raises(ConfigError) as err:
        compose(*QUICK, override)
    assert str(err.value).startswith(key + "=") and "> 0" in str(err.value)
    assert "\n" not in str(err.value)


def test_a_bad_lr_scaling_is_one_line_naming_the_key_and_the_valid_values():
    with pytest.raises(ConfigError) as err:
        check_overrides(["optim.lr_scaling=bogus"])  # the command line's check
    with pytest.raises(ConfigError) as direct:
        OptimConfig(lr_scaling="bogus")  # the dataclass's own, for code that builds one
    for e in (err, direct):
        message = str(e.value)
        assert "optim.lr_scaling=bogus" in message and "\n" not in message
        assert "none" in message and "init_std" in message
    check_overrides(["optim.lr_scaling=init_std", "optim.head_lr_mult=null"])


def rid(config: dict) -> str:
    """The id of a run of ``config`` named n on data fp, trained where ``auto`` is bf16."""
    return run_id(config, "n", "fp", Precision.bf16)


def test_the_new_keys_at_their_defaults_leave_every_run_id_as_it_was():
    """Runs made before the keys existed are found again (skipped or resumed), and a key set to
    anything else is another run."""
    new = ("emb_lr_mult", "head_lr_mult", "tied_lr_mult", "lr_scaling")
    for overrides in ((), ("tie=false", "init_std=1.0")):
        config = resolved_config(compose(*overrides))
        before = {**config, "optim": {k: v for k, v in config["optim"].items() if k not in new}}
        assert rid(config) == rid(before)
    default = rid(resolved_config(compose()))
    for other in ("optim.emb_lr_mult=2", "optim.tied_lr_mult=1", "optim.lr_scaling=init_std"):
        assert rid(resolved_config(compose(other))) != default, other


# Keys of the third edition (issue 40), each with a value that makes another run.
EDITION3 = {"head.tied_input_grad_scale": "4", "optim.schedule": "wsd", "optim.decay_frac": "0.5"}


def test_the_third_editions_keys_at_their_defaults_leave_every_run_id_as_it_was():
    """Today's config without the new keys (as an earlier version wrote it) hashes to the id
    of today's config at their defaults; each key set otherwise is another run. The shipped
    runs' ids are recomputed under today's schema in test_bundle.py."""
    for overrides in ((), ("tie=false", "init_std=1.0")):
        config = resolved_config(compose(*overrides))
        before = {k: dict(v) if isinstance(v, dict) else v for k, v in config.items()}
        for key in EDITION3:
            node, leaf = key.split(".")
            del before[node][leaf]
        assert rid(config) == rid(before)
    default = rid(resolved_config(compose()))
    for key, value in EDITION3.items():
        assert rid(resolved_config(compose(f"{key}={value}"))) != default, key


# ---------------------------------------------------------------------------- a run


def test_schedule_warms_up_then_decays_to_floor():
    oc = OptimConfig(lr=1e-3, warmup_steps=10, min_lr_ratio=0.1)
    assert lr_at(0, oc, 100) == pytest.approx(1e-4)
    assert lr_at(9, oc, 100) == pytest.approx(1e-3)
    assert lr_at(55, oc, 100) == pytest.approx(0.55e-3)
    assert lr_at(100, oc, 100) == pytest.approx(1e-4) == lr_at(500, oc, 100)


def test_cosine_stays_todays_schedule_bit_for_bit():
    """The default: the formula every run before optim.schedule existed trained with."""
    oc = OptimConfig(lr=3e-3, warmup_steps=7, min_lr_ratio=0.1)
    assert LrSchedule(oc.schedule) == LrSchedule.cosine
    for step in range(7, 130):
        progress = min(1.0, (step - 7) / 113)
        min_lr = oc.lr * oc.min_lr_ratio
        old = min_lr + 0.5 * (1 + math.cos(math.pi * progress)) * (oc.lr - min_lr)
        assert lr_at(step, oc, 120) == old, step


def test_wsd_warms_up_holds_then_decays_as_one_minus_sqrt():
    lr, floor, max_steps = 1e-3, 0.1e-3, 200
    oc = OptimConfig(lr=lr, warmup_steps=10, min_lr_ratio=0.1, schedule="wsd", decay_frac=0.2)
    start = decay_start(oc, max_steps)
    assert start == max_steps - 0.2 * max_steps  # the last 40 steps decay
    assert lr_at(0, oc, max_steps) == pytest.approx(lr / 10)  # warmup as in cosine
    assert lr_at(9, oc, max_steps) == lr_at(10, oc, max_steps) == lr  # stable from warmup's end
    assert lr_at(start - 1, oc, max_steps) == lr_at(start, oc, max_steps) == lr
    quarter = start + (max_steps - start) // 4  # sqrt(1/4) = 1/2: halfway to the floor
    assert lr_at(quarter, oc, max_steps) == pytest.approx(floor + 0.5 * (lr - floor))
    assert lr_at(max_steps, oc, max_steps) == pytest.approx(floor) == lr_at(999, oc, max_steps)
    after = [lr_at(s, oc, max_steps) for s in range(10, max_steps + 1)]
    assert all(a >= b for a, b in zip(after, after[1:], strict=False))  # never rises after warmup
    assert lr_at(max_steps - 1, oc, max_steps) > floor  # the last update is above the floor


def test_wsd_decays_from_warmups_end_when_decay_frac_reaches_into_it():
    """decay_frac=1: 1 - sqrt from the end of warmup, continuous (no jump down to mid-decay)."""
    oc = OptimConfig(lr=1.0, warmup_steps=20, min_lr_ratio=0.0, schedule="wsd", decay_frac=1.0)
    assert decay_start(oc, 100) == 20
    assert lr_at(19, oc, 100) == lr_at(20, oc, 100) == 1.0
    assert lr_at(40, oc, 100) == pytest.approx(1 - math.sqrt(20 / 80))
    assert decay_start(OptimConfig(schedule="wsd", decay_frac=0.001), 100) == 99  # >= 1 step


@pytest.mark.parametrize(
    "override,says",
    [
        ("optim.decay_frac=0", "optim.decay_frac=0 is invalid: it must be in (0, 1]"),
        ("optim.decay_frac=1.5", "optim.decay_frac=1.5 is invalid: it must be in (0, 1]"),
        ("optim.schedule=linear", "optim.schedule=linear"),
    ],
)
def test_a_bad_schedule_is_one_line_naming_the_key(override, says):
    with pytest.raises(ConfigError) as err:  # the command line's check (an enum: Hydra's)
        check_overrides([override]) if "schedule" in override else compose(override)
    assert says in str(err.value) and "\n" not in str(err.value)
    key, _, value = override.partition("=")
    with pytest.raises(ConfigError, match=re.escape(says)):  # the dataclass's own check
        OptimConfig(**{key.split(".")[1]: float(value) if "frac" in key else value})
