"""The model's settings (tiedvsuntied.model.config): the init-std spellings a run is named by,
the notes on a d^-0.5 of another width, and every bad setting refused in one line naming its
key, before anything is allocated."""

from __future__ import annotations

import re
from dataclasses import asdict

import pytest
from conftest import tiny
from omegaconf import OmegaConf

from tiedvsuntied.model.config import (
    HeadConfig,
    ModelConfig,
    ModelConfigError,
    canonical_init_std,
    check_config,
    init_std_note,
    init_std_notes,
    resolve_init_std,
)
from tiedvsuntied.model.gpt import GPT


@pytest.mark.parametrize(
    "value, spelling",
    [
        ("1", "1.0"),
        ("1.0", "1.0"),
        ("1e0", "1.0"),
        (1, "1.0"),
        (0.036, "0.036"),
        (" 0.02 ", "0.02"),
        ("inv_sqrt_d", "inv_sqrt_d"),
        ("d^-0.5", "inv_sqrt_d"),
    ],
)
def test_canonical_init_std(value, spelling):
    assert canonical_init_std(value) == spelling


@pytest.mark.parametrize("value", ["big", "0", "-1.0", "nan", "inf", True, None, ""])
def test_canonical_init_std_refuses_with_one_line_naming_the_key(value):
    with pytest.raises(ModelConfigError, match=r"^init_std=.* inv_sqrt_d") as e:
        canonical_init_std(value)
    assert "\n" not in str(e.value)


def test_resolve_init_std_follows_the_width_only_for_inv_sqrt_d():
    assert resolve_init_std("0.036", 768) == 0.036
    assert resolve_init_std(1.0, 768) == 1.0
    assert resolve_init_std("inv_sqrt_d", 768) == 768**-0.5
    assert resolve_init_std("d^-0.5", 64) == 0.125


@pytest.mark.parametrize(
    "value, n_embd, note",
    [
        (
            0.036,
            128,
            "init_std=0.036 is d^-0.5 at d=768, not at this model's d=128 (0.088): "
            "use init_std=inv_sqrt_d for d^-0.5 at every width",
        ),
        ("0.125", 128, "init_std=0.125 is d^-0.5 at d=64, not at this model's d=128 (0.088)"),
        ("0.036", 768, None),  # this width's d^-0.5: the number is what it says
        ("0.088", 128, None),
        ("inv_sqrt_d", 128, None),
        ("0.02", 128, None),  # GPT-2's std is no width's d^-0.5
        ("1.0", 128, None),
    ],
)
def test_init_std_note_names_inv_sqrt_d_and_this_widths_value(value, n_embd, note):
    got = init_std_note(value, n_embd)
    if note is None:
        assert got is None
    else:
        assert got.startswith(note) and "\n" not in got


def test_init_std_notes_cover_the_overrides_and_change_no_identity():
    notes = init_std_notes(128, "0.036", HeadConfig(init_std="0.036"))
    assert [n.split("=")[0] for n in notes] == ["init_std", "head.init_std"]
    assert init_std_notes(128, "inv_sqrt_d", HeadConfig()) == []
    assert canonical_init_std("0.036") == "0.036"  # the run keeps its name and hash


@pytest.mark.parametrize(
    "value, says",
    [
        (dict(n_head=3, n_embd=100), "must divide model.n_embd=100"),
        (dict(n_layer=0), "> 0"),
        (dict(block_size=0), "> 0"),
        (dict(dropout=1.0), r"\[0, 1\)"),
        (dict(dropout=-0.1), r"\[0, 1\)"),
        (dict(body_init_std=float("nan")), "> 0"),
        (dict(emb_scale="sqrt"), "give a number > 0, inv_sqrt_d or sqrt_d"),
        (dict(head=dict(emb_init_std="big")), "inv_sqrt_d"),
        (dict(head=dict(emb_init_std="0")), "give a finite number > 0"),
        (dict(head=dict(init_std="-1")), ">= 0"),  # a head may start at 0, never below
        (dict(head=dict(logit_scale="0")), "give a number > 0, inv_sqrt_d or sqrt_d"),
        (dict(head=dict(untie="cut")), "'cut' is not a valid Untie"),
        (dict(head=dict(tied_input_grad_scale=0.0)), "give a finite number > 0"),
        (dict(head=dict(tied_input_grad_scale=float("inf"))), "give a finite number > 0"),
    ],
)
def test_a_bad_field_is_refused_where_the_config_is_made(value, says):
    """A check that needs only a node's own fields runs in its __post_init__."""
    node, cls = ("head", HeadConfig) if "head" in value else ("model", ModelConfig)
    value = value.get("head", value)
    key = next(iter(value))  # the key the message names
    with pytest.raises(ValueError, match=f"^({node}.{key}=.*)?{says}") as e:
        cls(**value)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    "key, run_keys, says",
    [
        ("init_std", dict(init_std="0"), "> 0"),
        ("tie", dict(tie="false"), "true or false"),
        (
            "head.t5_rescale",
            dict(tie=False, head=HeadConfig(t5_rescale=True)),
            "head.logit_scale=inv_sqrt_d$",
        ),
        (
            "head.tied_input_grad_scale",
            dict(tie=False, head=HeadConfig(tied_input_grad_scale=4.0)),
            "untied head .*use 1.0, or tie=true$",
        ),
        (
            "head.tied_input_grad_scale",
            dict(head=HeadConfig(tied_input_grad_scale=4.0, untie="copy")),
            "untied head .*use 1.0, or tie=true$",
        ),
        (
            "head.emb_init_std",
            dict(head=HeadConfig(emb_init_std="1.0", init_std="0.02")),
            "tie=true shares one matrix",
        ),
    ],
)
def test_a_bad_run_key_is_refused_before_allocating_in_one_line(key, run_keys, says):
    # a vocabulary this large could not be allocated: the error must come first
    with pytest.raises(ModelConfigError, match=f"^{re.escape(key)}=.*{says}") as e:
        GPT(ModelConfig(vocab_size=10**12), **run_keys)
    assert "\n" not in str(e.value)


def test_check_config_checks_a_field_set_after_construction_and_returns_the_stds():
    cfg = tiny()
    cfg.n_layer = 0  # as an OmegaConf merge or a dataclass attribute write can do
    with pytest.raises(ModelConfigError, match=r"^model.n_layer=0 is invalid: it must be > 0$"):
        check_config(cfg)
    head = HeadConfig(emb_init_std="1.0", init_std="0")
    stds = check_config(tiny(), tie=False, init_std="0.5", head=head)
    assert stds == {"emb": 1.0, "head": 0.0, "body": 0.02, "resid": 0.01}
    agreeing = HeadConfig(emb_init_std="0.5", init_std="0.5")  # tied: fine when they agree
    assert check_config(tiny(), tie=True, init_std="1.0", head=agreeing)["emb"] == 0.5


def test_config_from_a_mapping_rejects_unknown_keys():
    assert GPT(asdict(tiny()), tie=False, seed=0).config == tiny()
    assert GPT(OmegaConf.structured(tiny()), seed=0).config == tiny()
    with pytest.raises(ModelConfigError, match="unknown model key.*n_layers"):
        GPT({"n_layers": 2})
