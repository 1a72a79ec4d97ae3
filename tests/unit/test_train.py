"""The trainer in-process: every config composes, every experiment trains a few steps, bad
input is refused naming its key, and the records (identity, checkpoints, metrics, W&B mode)
behave as the results contract says."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from pathlib import Path

import pytest
import torch
from conftest import QUICK, REPO, check_overrides, compose
from hydra.errors import ConfigCompositionException
from interrupted import interrupted_run
from omegaconf import OmegaConf

from tiedvsuntied.model.config import HeadConfig
from tiedvsuntied.results import records as R
from tiedvsuntied.results.metrics import VAL_LOSS
from tiedvsuntied.train.config import (
    Config,
    ConfigError,
    Precision,
    Schedule,
    TrainerConfig,
    resolved_config,
    run_id,
)
from tiedvsuntied.train.plan import check_config
from tiedvsuntied.train.trainer import train

CONF = REPO / "conf"


# ---------------------------------------------------------------------------- configs


def test_the_trainer_and_optim_yaml_hold_no_values_the_dataclasses_hold_the_defaults():
    """A default is written once, in its dataclass field beside its doc and check: a value typed
    into conf/trainer/default.yaml or conf/optim/adamw.yaml would be a second copy."""
    for yaml in ("trainer/default.yaml", "optim/adamw.yaml"):
        assert (CONF / yaml).read_text().strip(), yaml  # the comment that points to the class
        assert OmegaConf.load(CONF / yaml) in ({}, None), yaml


def test_run_identity_is_the_config_not_its_spelling_or_where_it_is_recorded(tmp_path):
    def rid(*o):
        return run_id(resolved_config(compose(*o)), "n", "fp", Precision.bf16)

    a = rid("init_std=1.0")
    assert rid("init_std=1") == rid("init_std=1e0") == a
    assert (
        rid(
            "init_std=1.0",
            f"results_dir={tmp_path}",
            "sweep=x",
            "wandb.mode=disabled",
            "trainer.progress=false",
            "trainer.log_interval=3",
            "data.num_threads=1",
            "replicate=0",  # the key's neutral value: runs made before it existed are found
        )
        == a
    )
    others = ("tie=false", "init_std=0.036", "seed=1", "replicate=1", "optim.lr=3e-4", "model=nano")
    for other in others:
        assert rid("init_std=1.0", other) != a, other
    assert run_id(resolved_config(compose("init_std=1.0")), "n", "other-data", Precision.bf16) != a


def _file(tmp_path: Path, name: str, data: bytes) -> Path:
    (tmp_path / name).write_bytes(data)
    return tmp_path / name


BAD_VALUES = [  # override -> text the one-line error must contain
    (["optim.lr=0"], "optim.lr"),
    (["optim.beta2=1.0"], "optim.beta2"),
    (["seed=-1"], "seed"),
    (["replicate=-1"], "replicate"),
    (["trainer.max_steps=0"], "trainer.max_steps"),
    (["sweep=a/b"], "sweep"),
    (["init_std=abc"], "init_std"),
    (["init_std=0"], "init_std"),
    (["model.n_head=3"], "n_head"),
    (["trainer.device=tpu"], "trainer.device"),
    (["data.files=/no/such/file.txt"], "data.files"),
]
if not torch.cuda.is_available():
    BAD_VALUES.append((["trainer.device=cuda"], "trainer.device"))


@pytest.mark.parametrize("override,key", BAD_VALUES, ids=[b[0][0] for b in BAD_VALUES])
def test_bad_values_are_one_line_naming_the_key_before_anything_is_written(override, key, tmp_path):
    with pytest.raises(ValueError) as err:  # a field refuses it as the config is made
        check_config(compose(*QUICK, f"results_dir={tmp_path / 'r'}", *override))
    assert key in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "r").exists()


def test_binary_data_and_unwritable_results_dir_are_refused(tmp_path):
    binary = _file(tmp_path, "model.bin", bytes(range(256)) * 64)
    with pytest.raises(ValueError, match="data.files"):
        check_config(compose(*QUICK, f"data.files={binary}"))
    blocker = _file(tmp_path, "a_file", b"x")
    for unwritable in (blocker / "results", Path("/proc/x")):  # /proc: even root cannot write
        with pytest.raises(ConfigError, match="results_dir") as err:
            check_config(compose(*QUICK, f"results_dir={unwritable}"))
        assert "\n" not in str(err.value)


def test_a_number_that_is_another_widths_inv_sqrt_d_is_explained_once(tmp_path, caplog):
    """The user's own command (init_std=0.036) on nano (d = 64): one warning naming inv_sqrt_d
    and this width's value; 0.02 gets none. The config is left as the user wrote it."""
    cfg = compose(*QUICK, f"results_dir={tmp_path}", "init_std=0.036")
    with caplog.at_level(logging.WARNING):
        plan = check_config(cfg)
    notes = [r.getMessage() for r in caplog.records if "inv_sqrt_d" in r.getMessage()]
    assert len(notes) == 1 and "d=768" in notes[0] and "d=64 (0.12)" in notes[0]
    assert plan.cfg.init_std == "0.036"
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        check_config(compose(*QUICK, f"results_dir={tmp_path}", "init_std=0.02"))
    assert not [r for r in caplog.records if "inv_sqrt_d" in r.getMessage()]


@pytest.mark.parametrize(
    "override,echo",
    [
        ("head.untie_at=5", "head.untie_at=5 "),
        ("optim.lr=0", "optim.lr=0 "),
        ("optim.eps=0.0", "eps=0 "),
    ],
)
def test_a_refused_value_is_echoed_as_typed_not_as_a_float(override, echo):
    with pytest.raises(ConfigError) as err:
        compose(*QUICK, override)
    assert echo in str(err.value)


@pytest.mark.parametrize(
    "override",
    [
        "tie=maybe",
        "trainer.precision=fp8",
        "wandb.mode=sometimes",
        "trainer.max_step=5",
        "data.documents=pages",
    ],
)
def test_wrong_types_and_choices_are_refused_by_the_schema(override):
    with pytest.raises(ConfigCompositionException):
        compose(override)


def test_booleans_are_true_or_false_not_one_or_yes():
    for bad in ("tie=1", "tie=yes", "model.bias=0", "trainer.compile=on"):
        with pytest.raises(ConfigError, match=bad.split("=")[0]):
            check_overrides([bad])
    check_overrides(
        ["tie=true", "tie=False", "trainer.compile=null", "init_std=1", "+experiment=smoke"]
    )


# ---------------------------------------------------------------------------- records


def test_a_resume_refused_for_a_renamed_parameter_keeps_every_file_of_the_run(
    tmp_path, monkeypatch
):
    cfg, run_dir = interrupted_run(tmp_path, monkeypatch)
    last = run_dir / "checkpoints" / "last.pt"
    ckpt = torch.load(last, weights_only=True)
    ckpt["model"]["transformer.ln_f.w"] = ckpt["model"].pop("transformer.ln_f.weight")
    torch.save(ckpt, last)
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    with pytest.raises(ConfigError, match="model .*transformer.ln_f.weight"):
        train(cfg)
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before
    assert R.read_metrics(run_dir)  # metrics.jsonl is never emptied


def test_a_run_is_named_so_its_path_passes_to_hydra_and_an_old_name_is_found_by_its_hash(
    tmp_path,
):
    cfg = compose(*QUICK, "trainer.test_eval=false", f"results_dir={tmp_path}", "seed=3")
    s = train(cfg)
    assert s.name == "tied_init0.02_nano_seed3" and not set("=,") & set(s.run_id)
    old = tmp_path / cfg.sweep / f"tie=true_init=0.02_model=nano_seed=3-{s.run_id[-8:]}"
    (tmp_path / cfg.sweep / s.run_id).rename(old)  # as the runs made before this naming
    assert train(cfg).status == R.Status.finished  # skipped: found, not trained again
    assert R.read_index(tmp_path / cfg.sweep)[old.name].path == old.name
    assert [p.name for p in (tmp_path / cfg.sweep).iterdir() if p.is_dir()] == [old.name]


def test_a_runs_files_are_its_records_parts_and_what_follows_from_them(tmp_path):
    """summary.json is the record less the loop's own fields, config.yaml's ``derived`` its Derived
    part (in order, with every init std), model.pt's train_state its TrainState part; the summary
    adds what follows from them (the last validation loss, the clipped part of the steps)."""
    over = [*QUICK, "optim.grad_clip=0.05", f"results_dir={tmp_path}"]
    s = train(compose(*over))
    run_dir = tmp_path / "default" / s.run_id
    written = json.loads((run_dir / "summary.json").read_text())
    fields = dataclasses.fields(R.RunSummary)
    assert set(written) == {f.name for f in fields if f.metadata != R.LOOP_ONLY}
    derived = OmegaConf.to_container(OmegaConf.load(run_dir / "config.yaml"))["derived"]
    assert list(derived) == [f.name for f in dataclasses.fields(R.Derived)]
    assert {k: derived[k] for k in ("vocab_size", "params", "lr_scales")} == {
        k: written[k] for k in ("vocab_size", "params", "lr_scales")
    }
    assert written["init_std_resolved"] == {
        k: derived["init_std_resolved"][k] for k in ("emb", "head")
    }
    state = torch.load(run_dir / "checkpoints" / "model.pt", weights_only=True)["train_state"]
    assert list(state) == [f.name for f in dataclasses.fields(R.TrainState)]
    assert {k: state[k] for k in ("step", "tokens", "best_val_loss")} == {
        k: written[k] for k in ("step", "tokens", "best_val_loss")
    }
    last_val = [m[VAL_LOSS] for m in R.read_metrics(run_dir) if VAL_LOSS in m][-1]
    assert written["final_val_loss"] == state["last_val_loss"] == last_val
    assert written["clip_frac"] == state["clipped_steps"] / state["step"] > 0


def test_the_schedule_evaluates_the_first_steps_logs_each_early_step_saves_and_unties():
    def steps(ask, max_steps, untie_at=None, **kw):
        head = HeadConfig(untie_at=untie_at)
        schedule = Schedule.of(Config(head=head, trainer=TrainerConfig(max_steps, **kw)))
        assert schedule.done(max_steps) and not schedule.done(max_steps - 1)
        return [s for s in range(max_steps + 1) if getattr(schedule, ask)(s)]

    # init 1.0 collapses within ~100 steps: powers of two below eval_interval see it
    assert steps("evaluates", 500, eval_interval=100) == [
        *(0, 1, 2, 4, 8, 16, 32, 64),
        *(100, 200, 300, 400, 500),
    ]
    assert steps("evaluates", 250, eval_interval=100, eval_log_steps=False) == [0, 100, 200, 250]
    logged = steps("logs", 250, log_first=3, log_interval=50)
    assert logged == [0, 1, 2, 3, 50, 100, 150, 200, 250]
    assert steps("saves", 250, ckpt_interval=100) == [0, 100, 200, 250]
    assert steps("unties", 250, untie_at=0.5) == [125] and steps("unties", 250) == []


def test_a_batch_that_cannot_fit_is_refused_up_front_with_the_memory_it_needs(tmp_path):
    """A batch needing twice the machine's memory (at least): one line naming the key and the
    memory, before any data is read or a tensor allocated, and nothing written."""
    import resource

    from tiedvsuntied.train.hardware import resolve_precision
    from tiedvsuntied.train.plan import least_memory

    here = resolve_precision(Precision.auto, torch.device("cpu"))  # as the run's plan resolves it
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    one = least_memory(compose(*QUICK, "trainer.batch_size=1"), here)["activations"]
    batch = 2 * total // one
    cfg = compose(*QUICK, f"trainer.batch_size={batch}", f"results_dir={tmp_path / 'r'}")
    need = sum(least_memory(cfg, here).values())
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(ConfigError) as err:
        train(cfg)
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024  # kB on Linux
    message = str(err.value)
    assert message.startswith(f"trainer.batch_size={batch} needs at least ") and "\n" not in message
    assert f"{need / 2**30:.1f} GiB per process" in message and need > total
    assert f"cpu has {total / 2**30:.1f} GiB" in message
    assert grown < total / 100 and not (tmp_path / "r").exists()
    check_config(compose(*QUICK, "trainer.batch_size=64"))  # a batch that fits passes
