"""Fine-tuning from a finished run: the facts the study rests on, measured through the trainer
(real runs, real checkpoints), and the starts it refuses in one line."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
import yaml
from conftest import QUICK, USE_GPT2, compose, needs_gpt2, run_cli
from fake_corpus import generated_corpus
from test_untie_at import stop_after_checkpoint

from tiedvsuntied.train.config import ConfigError
from tiedvsuntied.train.trainer import train

STEPS = ["trainer.max_steps=4", "trainer.eval_interval=2", "trainer.test_eval=false"]


@pytest.fixture(scope="module")
def start(tmp_path_factory):
    """A finished tied nano run on the shared corpus, and a second corpus to fine-tune on."""
    root = tmp_path_factory.mktemp("ft")
    over = [*QUICK, f"results_dir={root}", "sweep=pre"]
    summary = train(compose(*over), overrides=over)
    assert summary.status.value == "finished"
    other = generated_corpus(root / "other.txt", seed=7)
    data = ["data=text", f"data.files={other}"]  # in QUICK's encoding (bytes)
    return root, root / "pre" / summary.run_id, summary, data


def _finetune(root, start_dir, data, *extra):
    over = [
        *QUICK,
        *data,
        *STEPS,
        f"init_from='{start_dir}'",
        f"results_dir={root}",
        "sweep=ft",
        *extra,
    ]
    s = train(compose(*over), overrides=over)
    run_dir = root / "ft" / s.run_id
    metrics = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    weights = torch.load(run_dir / "checkpoints" / "model.pt", weights_only=True)["model"]
    return s, run_dir, [m for m in metrics if "val/loss" in m], weights


def _start_weights(start_dir):
    return torch.load(start_dir / "checkpoints" / "model.pt", weights_only=True)["model"]


@pytest.mark.slow
def test_a_run_path_pasted_unquoted_into_init_from_starts_the_fine_tune(start, tmp_path):
    """The user copies a run directory from the listing into the command as it is."""
    _, start_dir, _, data = start
    assert not set("=,") & set(start_dir.name)
    proc = run_cli(
        [*QUICK, *data, *STEPS, f"init_from={start_dir}", f"results_dir={tmp_path}", "sweep=ft"],
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    (run_dir,) = [p for p in (tmp_path / "ft").iterdir() if p.is_dir()]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["step"] == 4
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["init_from"] == str(start_dir)


def test_tied_head_training_moves_embedding_rows_of_tokens_absent_from_the_new_data(start):
    root, start_dir, pre, data = start
    s, run_dir, evals, w = _finetune(root, start_dir, data, "finetune.trainable=head")
    assert (
        s.status.value == "finished" and s.params["trainable"] == s.params["embedding"]
    )  # the one matrix
    unseen = np.load(run_dir / "token_freq.npy") == 0
    moved = (
        (w["transformer.wte.weight"] != _start_weights(start_dir)["transformer.wte.weight"])
        .any(1)
        .numpy()
    )
    assert unseen.any() and moved[unseen].all()
    assert evals[-1]["drift/emb_cos_unseen"] < 1.0 and "drift/head_cos_seen" not in evals[-1]
    assert evals[0]["retain/loss"] == pytest.approx(
        pre.final_val_loss, abs=1e-4
    )  # step 0: the start itself


def test_untied_by_copy_head_training_leaves_the_embedding_bit_for_bit(start):
    root, start_dir, pre, data = start
    s, run_dir, evals, w = _finetune(
        root, start_dir, data, "head.untie=copy", "finetune.trainable=head"
    )
    sw = _start_weights(start_dir)
    assert torch.equal(w["transformer.wte.weight"], sw["transformer.wte.weight"])
    assert not torch.equal(w["lm_head.weight"], sw["transformer.wte.weight"])
    assert s.tie is True and s.params["head"] == s.params["embedding"] == s.params["trainable"]
    assert all(e["drift/emb_cos_seen"] == pytest.approx(1.0, abs=1e-6) for e in evals)
    assert evals[-1]["drift/head_cos_seen"] < 1.0
    assert evals[0]["val/loss"] == pytest.approx(
        _finetune(root, start_dir, data)[2][0]["val/loss"], abs=1e-5
    )
    assert evals[0]["probe/frequent/in_out_cos_mean"] == pytest.approx(
        1.0, abs=1e-6
    )  # step 0: head = embedding
    fresh = _finetune(root, start_dir, data, "head.untie=fresh", "finetune.trainable=head")[2]
    assert (
        abs(fresh[0]["probe/frequent/in_out_cos_mean"]) < 0.05
    )  # a random head: unrelated to the embedding


@pytest.mark.parametrize(
    "extra, says",
    [
        (
            ["init_from=/nonexistent/run"],
            "init_from=/nonexistent/run: no finished run of this harness",
        ),
        (["model.n_embd=128"], "model.n_embd=128 conflicts with init_from (its n_embd is 64)"),
        (
            ["tie=false"],
            "tie=false conflicts with init_from (tie=true): "
            "to untie a tied start use head.untie=copy",
        ),
        pytest.param(  # the other tokenizer: GPT-2, where the start (QUICK) is byte-level
            ["data.encoding=gpt2"],
            "fine-tune with the start's tokenizer",
            marks=[] if USE_GPT2 else needs_gpt2,
            id="another-tokenizer",
        ),
    ],
)
def test_starts_that_cannot_be_fine_tuned_are_refused_in_one_line(start, extra, says):
    root, start_dir, _, data = start
    over = [
        *QUICK,
        *data,
        *STEPS,
        f"init_from='{start_dir}'",
        f"results_dir={root / 'bad'}",
        *extra,
    ]
    with pytest.raises(ConfigError, match=None) as e:
        train(compose(*over), overrides=over)
    assert says in str(e.value) and "\n" not in str(e.value)
    assert not (root / "bad").exists()


def test_untie_from_an_untied_start_is_refused(start, tmp_path):
    root, _, _, data = start
    over = [*QUICK, "tie=false", f"results_dir={tmp_path}", "sweep=pre"]
    untied = train(compose(*over), overrides=over)
    over = [
        *QUICK,
        *data,
        *STEPS,
        f"init_from='{tmp_path / 'pre' / untied.run_id}'",
        "head.untie=copy",
        f"results_dir={tmp_path}",
    ]
    with pytest.raises(
        ConfigError, match="head.untie=copy needs a tied start; init_from is untied"
    ):
        train(compose(*over), overrides=over)


def test_an_interrupted_fine_tuning_run_resumes_to_the_same_numbers(start, tmp_path, monkeypatch):
    _, start_dir, _, data = start
    extra = ("head.untie=copy", "finetune.trainable=head", "trainer.ckpt_interval=2")
    ref = _finetune(tmp_path / "ref", start_dir, data, *extra)[2]
    with monkeypatch.context() as patch:  # stopped right after the step-2 checkpoint
        stop_after_checkpoint(patch, 2)
        with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
            _finetune(tmp_path / "run", start_dir, data, *extra)
    s, _, evals, _ = _finetune(tmp_path / "run", start_dir, data, *extra)
    assert s.status.value == "finished" and s.resumed_from_step == 2
    assert evals[-1]["step"] == 4 and evals[-1] == pytest.approx(
        ref[-1], rel=0, abs=1e-6
    )  # drift from step 0, not 2


def test_a_hugging_face_gpt2_directory_starts_a_fine_tuning_run(start, tmp_path):
    from tiedvsuntied.model.config import ModelConfig
    from tiedvsuntied.model.gpt import GPT
    from tiedvsuntied.model.hf import save_pretrained

    _, _, started, data = start
    shape = dict(n_layer=2, n_head=2, n_embd=64, block_size=128, vocab_size=started.vocab_size)
    save_pretrained(
        GPT(ModelConfig(**shape), seed=0),
        tmp_path / "gpt2-like",
    )
    s, run_dir, evals, w = _finetune(tmp_path, tmp_path / "gpt2-like", data, "head.untie=copy")
    assert s.status.value == "finished" and s.tie is True and "lm_head.weight" in w
    assert "retain/loss" not in evals[0]  # no data of its own to retain


def _cut_short(start, tmp_path):
    """A copy of the finished start whose model.pt was cut short (as a full disk leaves it)."""
    root, start_dir, _, _ = start
    copy = tmp_path / "pre" / start_dir.name
    shutil.copytree(start_dir, copy)
    weights = copy / "checkpoints" / "model.pt"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    return copy, weights


@pytest.mark.slow
def test_init_from_a_run_whose_model_pt_is_cut_short_is_one_line(start, tmp_path):
    _, _, _, data = start
    copy, weights = _cut_short(start, tmp_path)
    proc = run_cli(
        [*QUICK, *data, *STEPS, f"init_from={copy}", f"results_dir={tmp_path}", "sweep=ft"],
        cwd=tmp_path,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith(f"error: init_from={copy}: {weights} does not load (")
    assert not (tmp_path / "ft").exists()


def test_a_finished_run_whose_model_pt_is_cut_short_is_trained_again(start, tmp_path, caplog):
    copy, weights = _cut_short(start, tmp_path)
    over = [*QUICK, f"results_dir={tmp_path}", "sweep=pre"]
    summary = train(compose(*over), overrides=over)
    assert f"finished, but {weights} does not load" in caplog.text
    assert "training it again from step 0" in caplog.text
    assert summary.status.value == "finished" and summary.run_id == copy.name
    assert torch.load(weights, weights_only=True)["model"]  # a whole file again
    assert sorted(p.name for p in weights.parent.iterdir()) == ["model.pt"]
