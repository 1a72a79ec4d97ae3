"""The results bundle: a real sweep, bundled by the command, reads back as the sweep did (slow:
the tiny sweep trains); a missing sweep is refused in one line; every shipped run keeps its id."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import REPO
from omegaconf import OmegaConf

from tiedvsuntied.analysis.load import ResultsError, load_results
from tiedvsuntied.analysis.probes import load_token_probes
from tiedvsuntied.bundle import main, write_bundle
from tiedvsuntied.results.bundles import MANIFEST, read_manifest
from tiedvsuntied.results.records import read_config, read_summary
from tiedvsuntied.train.config import Config, Precision, resolved_config, run_id


def window_losses(run: pd.Series, split: str, step_col: str) -> np.ndarray | None:
    """The per-window losses of ``split`` at the run's ``step_col`` step (what a bundle keeps of
    every run's probe files), or None."""
    path = Path(run["path"], "probes", f"step_{int(run[step_col]):07d}.npz")
    if not path.exists():
        return None
    with np.load(path) as z:
        key = f"{split}_window_loss"
        return np.asarray(z[key], dtype=np.float64) if key in z.files else None


COMPARED = ["run_id", "name", "tie", "init_std", "seed", "status", "best_step", "test_loss"]


def bundle_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tiedvsuntied.bundle", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def bundled(tiny_sweep: Path, tmp_path_factory) -> Path:
    dest = tmp_path_factory.mktemp("bundle") / "results"
    proc = bundle_cli(str(tiny_sweep), str(dest))
    assert proc.returncode == 0, proc.stderr
    assert "runs of sweep tiny" in proc.stdout
    return dest


@pytest.mark.slow
def test_a_bundle_reads_back_as_its_sweep(tiny_sweep, bundled):
    sweep, bundle = load_results(tiny_sweep), load_results(bundled)
    pd.testing.assert_frame_equal(
        sweep.runs[COMPARED].reset_index(drop=True), bundle.runs[COMPARED].reset_index(drop=True)
    )
    metrics = [c for c in sweep.history.columns if c != "source"]
    pd.testing.assert_frame_equal(
        sweep.history[metrics].reset_index(drop=True),
        bundle.history[metrics].reset_index(drop=True),
    )
    assert any("results bundle (format 1) of sweep tiny" in n for n in bundle.notes)
    # each run's metrics.jsonl travels gzipped, a fraction of its size, and reads back the same
    for run in sweep.runs["run_id"]:
        plain, packed = tiny_sweep / run / "metrics.jsonl", bundled / run / "metrics.jsonl.gz"
        assert not (bundled / run / "metrics.jsonl").exists()
        assert packed.stat().st_size < plain.stat().st_size / 2
    for (_, a), (_, b) in zip(sweep.runs.iterrows(), bundle.runs.iterrows(), strict=True):
        for split, step in (("test", "best_step"), ("val", "step")):
            np.testing.assert_array_equal(
                window_losses(a, split, step), window_losses(b, split, step)
            )


@pytest.mark.slow
def test_a_bundle_keeps_per_token_arrays_of_the_lowest_seed_only_and_no_checkpoints(
    tiny_sweep, bundled
):
    runs = load_results(bundled).runs
    probes = load_token_probes(runs)
    lowest = runs.groupby(["tie", "init_std"])["seed"].transform("min") == runs["seed"]
    assert set(probes["run_id"]) == set(runs.loc[lowest, "run_id"])
    full = load_token_probes(load_results(tiny_sweep).runs)
    merged = probes.merge(full, on=["run_id", "token"], suffixes=("_b", "_s"))
    assert len(merged) == len(probes) > 0
    np.testing.assert_allclose(merged["emb_norm_b"], merged["emb_norm_s"], rtol=1e-3)
    assert not list(bundled.rglob("*.pt")) and not list(bundled.rglob("wandb"))
    assert read_manifest(bundled)["runs"] == len(runs)


@pytest.mark.slow
def test_a_changed_file_or_a_newer_format_is_reported(bundled, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(bundled, copy)
    summary = next(copy.glob("*/summary.json"))
    summary.write_text(summary.read_text().replace('"status"', '"status" ', 1))
    notes = load_results(copy).notes
    assert any("1 files differ from the bundle's manifest" in n for n in notes)
    manifest = json.loads((copy / MANIFEST).read_text())
    (copy / MANIFEST).write_text(json.dumps({**manifest, "version": 2}))
    with pytest.raises(ResultsError, match="format version 2; this code reads version 1"):
        load_results(copy)


@pytest.mark.slow
def test_bundling_in_pieces_keeps_the_runs_already_bundled(tiny_sweep, tmp_path):
    runs = load_results(tiny_sweep).runs
    part = tmp_path / "part" / "tiny"
    shutil.copytree(tiny_sweep, part)
    gone = runs["run_id"].iloc[0]
    shutil.rmtree(part / gone)
    (part / "index.json").unlink()
    dest = tmp_path / "bundle"
    write_bundle([tiny_sweep], dest)
    manifest = write_bundle([part], dest)  # the second piece lacks one run: still shipped
    assert manifest["runs"] == len(runs)
    assert gone in set(load_results(dest).runs["run_id"])
    again = write_bundle([part], dest)  # nothing new: the bundle is left byte for byte
    assert again["made_at"] == manifest["made_at"]
    assert not list(tmp_path.glob(".bundle.*"))  # no partial or old copy left behind


def test_the_command_refuses_a_missing_sweep_in_one_line(tmp_path, capsys):
    assert main([str(tmp_path / "nowhere"), str(tmp_path / "dest")]) == 2
    err = capsys.readouterr().err
    assert err.strip().count("\n") == 0 and "does not exist" in err
    assert not (tmp_path / "dest").exists()


@pytest.mark.slow
def test_without_arrays_a_bundle_keeps_window_losses_and_no_per_token_probes(tiny_sweep, tmp_path):
    proc = bundle_cli(str(tiny_sweep), str(tmp_path / "lean"), "--no-arrays")
    assert proc.returncode == 0, proc.stderr
    runs = load_results(tmp_path / "lean").runs
    assert load_token_probes(runs).empty
    assert not list((tmp_path / "lean").rglob("token_freq.npy"))
    assert all(len(window_losses(run, "test", "best_step")) for _, run in runs.iterrows())
    assert "per-token" not in read_manifest(tmp_path / "lean")["kept"]


def test_the_shipped_bundles_stay_under_30_mb_together():
    """Issue 40: all bundles together stay at or under 30 MB (gzipped metrics make room)."""
    bundles = [d for d in REPO.glob("experiments/*/results*") if (d / "BUNDLE.json").is_file()]
    size = sum(p.stat().st_size for d in bundles for p in d.rglob("*") if p.is_file())
    assert len(bundles) >= 3 and size <= 30e6, f"{size / 1e6:.1f} MB in {len(bundles)} bundles"
    assert not list(REPO.glob("experiments/*/results*/*/metrics.jsonl"))  # each one gzipped


# ---------------------------------------------------------------------------- run identity


def test_every_shipped_run_keeps_its_id_under_todays_schema():
    """A shipped run's config.yaml (written before the head node: untie_at, model.t5_rescale,
    ...) read in today's layout and composed into today's Config, in the precision it trained
    in, hashes to the id it is stored under: rerunning an old sweep skips its finished runs, and
    the paper's bundles stay put. A run of trainer.precision=auto that trained in fp32 (a CPU
    without bf16 units) has another id than its bf16 twin, and says the id it had before."""
    shipped = sorted(REPO.glob("experiments/*/results*/*/config.yaml"))  # results_clip too
    assert len(shipped) > 100
    renamed = 0
    for path in shipped:
        config, summary = read_config(path.parent), read_summary(path.parent)
        fingerprint = summary.data_fingerprint or config["derived"]["data_fingerprint"]
        precision = config.pop("derived")["precision"]
        cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(Config), config))
        got = run_id(resolved_config(cfg), summary.name, fingerprint, precision)
        assert got == summary.run_id == path.parent.name, path
        if cfg.trainer.precision == Precision.auto and precision == "fp32":
            twin = run_id(resolved_config(cfg), summary.name, fingerprint, Precision.bf16)
            assert summary.formerly == twin != got, path
            renamed += 1
        else:
            assert summary.formerly is None, path
    assert renamed == 6  # the third edition's: sign_flip's results/ (README, "Precision")


def rid(config: dict) -> str:
    """The id of a run of ``config`` named n on data fp, trained where ``auto`` is bf16."""
    return run_id(config, "n", "fp", Precision.bf16)


def test_keys_added_later_at_their_neutral_values_keep_earlier_runs_identity():
    before = {"tie": True, "init_std": "0.02", "model": {"n_embd": 64}, "optim": {"lr": 1e-3}}
    head = {"untie_at": None, "untie": "keep", "logit_scale": "1"}
    now = {
        **before,
        "init_from": None,
        "head": head,
        "finetune": {"trainable": "all"},
        "model": {"n_embd": 64, "emb_scale": "1"},
    }
    assert rid(now) == rid(before)  # a rerun finds the old run
    for changed in (
        {"init_from": "results/pre"},
        {"head": {**head, "untie": "copy"}},
        {"head": {**head, "logit_scale": "0.5"}},
        {"finetune": {"trainable": "head"}},
    ):
        assert rid({**now, **changed}) != rid(before)


@pytest.mark.parametrize(
    "head, pinned",  # ids computed by the code before the head node, from the same config
    [
        ({}, "n-34b5c358"),
        ({"untie_at": 0.67}, "n-94e85514"),
        ({"untie_at": 0.67, "untie": "copy", "logit_scale": "inv_sqrt_d"}, "n-76f6c4b6"),
    ],
)
def test_a_head_setting_hashes_where_it_was_before_the_head_node(head, pinned):
    path = REPO / "experiments/tie_x_init/results/tied_init1.0_nano_seed0-b12997bf"
    config = read_config(path)
    del config["derived"]
    config["head"] = {**config["head"], **head}
    assert rid(config) == pinned
