"""tiedvsuntied.analysis on hand-built results directories (tests/fake_results.py)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from fake_results import write_run, write_sweep
from scipy import stats

from tiedvsuntied import analysis

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def sweep(tmp_path):
    """2 ties x 2 inits x 2 seeds on nano; one diverged, one running, one failed run."""
    return write_sweep(
        tmp_path / "sw",
        seeds=(0, 1),
        statuses={
            (True, "1.0", "nano", 1): "diverged",
            (False, "0.036", "nano", 1): "running",
            (False, "1.0", "nano", 1): "failed",
        },
    )


# ----------------------------------------------------------------------------- statistics


def test_init_std_spellings_read_as_one():
    for given, canonical in (
        (1, "1.0"),
        ("1", "1.0"),
        (0.036, "0.036"),
        ("d^-0.5", "inv_sqrt_d"),
        ("inv_sqrt_d", "inv_sqrt_d"),
    ):
        assert analysis.run_row({"init_std": given})["init_std"] == canonical


def test_aggregate_t_interval_single_seed_and_labels():
    df = pd.DataFrame(
        {
            "g": ["a", "a", "a", "b", "b"],
            "x": [1.0, 2.0, 4.0, 5.0, float("nan")],
            "run_id": ["r1", "r2", "r3", "r4", "r5"],
        }
    )
    out = analysis.aggregate(df, ["g"], "x").set_index("g")
    a, b = out.loc["a"], out.loc["b"]
    sem = np.std([1, 2, 4], ddof=1) / math.sqrt(3)
    assert a["n"] == 3 and a["mean"] == pytest.approx(7 / 3) and a["run_ids"] == ["r1", "r2", "r3"]
    assert a["ci_high"] - a["mean"] == pytest.approx(
        4.3027 * sem, rel=1e-4
    )  # t(0.975, dof=2) from the tables
    assert a["ci_label"] == "95% t-CI, n=3"
    assert (
        b["n"] == 1 and b["mean"] == 5.0 and b["ci_label"] == "n=1: no CI"
    )  # the NaN is not a seed
    assert math.isnan(b["ci_half"]) and math.isnan(b["std"])
    with pytest.raises(KeyError, match="nope"):
        analysis.aggregate(df, ["g"], "nope")


# ----------------------------------------------------------------------------- loading


def test_runs_table_one_row_per_run_with_summary_values(sweep):
    res = analysis.load_results(sweep)
    runs = res.runs
    assert list(runs.columns) == analysis.RUN_COLUMNS
    assert len(runs) == 8 and runs["run_id"].is_unique
    assert sorted(runs["status"].value_counts().items()) == [
        ("diverged", 1),
        ("failed", 1),
        ("finished", 5),
        ("running", 1),
    ]
    row = runs[(runs["tie"] == True) & (runs["init_std"] == "0.036") & (runs["seed"] == 0)].iloc[0]  # noqa: E712
    summary = json.loads((sweep / row["run_id"] / "summary.json").read_text())
    assert row["final_val_loss"] == summary["final_val_loss"]
    assert row["params_total"] == summary["params"]["total"]
    assert row["params_non_embedding"] == summary["params"]["non_embedding"]
    assert row["init_std_resolved_emb"] == pytest.approx(0.036)
    assert row["head"] == "tied" and row["model"] == "nano" and row["n_embd"] == 32
    assert row["ln_vocab"] == pytest.approx(math.log(512))
    assert row["data_id"] == summary["data_fingerprint"][:12]
    assert set(runs["init_std"]) == {"1.0", "0.036"}
    assert (runs["variant"] == "").all()
    # the notes say which runs are not finished
    assert any("diverged" in n and "tie=true_init=1.0_model=nano_seed=1" in n for n in res.notes)


def test_history_is_one_row_per_run_and_step(sweep):
    res = analysis.load_results(sweep)
    h = res.history
    assert not h.duplicated(["run_id", "step"]).any()
    assert {
        "run_id",
        "step",
        "tokens",
        "val/loss",
        "train/loss",
        "train/grad_norm_in",
        "tie",
        "init_std",
        "model",
        "seed",
        "status",
    } <= set(h.columns)
    finished = res.runs[res.runs["status"] == "finished"].iloc[0]
    run_history = h[h["run_id"] == finished["run_id"]]
    assert run_history["step"].is_monotonic_increasing
    assert run_history["val/loss"].dropna().iloc[-1] == pytest.approx(finished["final_val_loss"])
    assert run_history["test/loss"].notna().sum() == 1
    # the identity columns match the runs table
    assert set(run_history["tie"]) == {finished["tie"]} and set(run_history["init_std"]) == {
        finished["init_std"]
    }


def test_diverged_history_ends_at_divergence(sweep):
    res = analysis.load_results(sweep)
    run = res.runs[res.runs["status"] == "diverged"].iloc[0]
    run_history = res.history[res.history["run_id"] == run["run_id"]]
    raw_steps = [
        json.loads(line)["step"]
        for line in (sweep / run["run_id"] / "metrics.jsonl").read_text().splitlines()
    ]
    assert max(raw_steps) > run["diverged_at_step"]  # the file has a line past the divergence...
    assert run_history["step"].max() == run["diverged_at_step"]  # ...which the history leaves out
    assert (
        run_history["train/loss"].iloc[-1] != run_history["train/loss"].iloc[-1]
    )  # "nan" written as a string -> NaN


def test_running_run_with_half_written_line(sweep):
    run_dir = next(
        p for p in sweep.iterdir() if p.name.startswith("tie=false_init=0.036_model=nano_seed=1")
    )
    with open(run_dir / "metrics.jsonl", "a") as f:
        f.write('{"step": 99, "tokens": 1, "train/lo')  # the trainer is mid-write
    res = analysis.load_results(sweep)
    assert any("unparsable last line" in n for n in res.notes)
    run_history = res.history[res.history["run_id"] == run_dir.name]
    assert run_history["step"].max() < 99 and len(run_history) > 0
    assert res.runs.set_index("run_id").loc[run_dir.name, "status"] == "running"


def test_resumed_run_later_lines_win(tmp_path):
    recs = [
        {"step": 0, "tokens": 0, "val/loss": 10.0},
        {"step": 2, "tokens": 8, "train/loss": 9.0},
        {"step": 2, "tokens": 8, "train/loss": 8.5, "val/loss": 8.7},
    ]
    h = analysis.history_from_records(recs)
    assert list(h["step"]) == [0, 2]
    assert (
        h.set_index("step").loc[2, "train/loss"] == 8.5
        and h.set_index("step").loc[2, "val/loss"] == 8.7
    )


def test_run_in_index_without_directory(tmp_path):
    sweep = write_sweep(tmp_path / "sw", init_stds=("0.02",), ties=(True,))
    index = json.loads((sweep / "index.json").read_text())
    index["ghost-123"] = {
        "name": "tie=false_init=0.02_model=nano_seed=0",
        "status": "failed",
        "path": "ghost-123",
    }
    (sweep / "index.json").write_text(json.dumps(index))
    res = analysis.load_results(sweep)
    ghost = res.runs.set_index("run_id").loc["ghost-123"]
    assert ghost["status"] == "failed" and ghost["name"] == "tie=false_init=0.02_model=nano_seed=0"
    assert any("ghost-123" in n and "does not exist" in n for n in res.notes)


def test_single_run_dir_and_results_root(tmp_path, sweep):
    one = next(p for p in sweep.iterdir() if p.is_dir())
    assert len(analysis.load_results(one).runs) == 1
    write_sweep(tmp_path / "other", init_stds=("0.02",), ties=(True,))
    res = analysis.load_results(tmp_path)  # a results dir holding two sweeps
    assert set(res.runs["sweep"]) == {"sw", "other"}
    assert any("2 sweeps" in n for n in res.notes)


def test_a_run_found_twice_keeps_its_best_record(tmp_path):
    """Two sweeps (or a sweep and one of its runs) reaching one run_id: finished beats diverged,
    running and failed whatever the order of the paths; within one status the newest record wins."""
    a = write_run(tmp_path / "a", status="finished")
    b = write_run(tmp_path / "b", status="failed")
    assert a.name == b.name
    for paths in (
        (tmp_path / "a", tmp_path / "b"),
        (tmp_path / "b", tmp_path / "a"),
        (tmp_path / "b", a),
    ):
        res = analysis.load_results(*paths)
        assert len(res.runs) == 1 and res.runs["status"].iloc[0] == "finished", paths
        assert res.runs["path"].iloc[0] == str(a)
        assert any("found twice" in n and str(b) in n for n in res.notes)
    for status in ("diverged", "running"):
        write_run(tmp_path / status, status=status)
        assert (
            analysis.load_results(tmp_path / "b", tmp_path / status).runs["status"].iloc[0]
            == status
        )
    newer = write_run(tmp_path / "c", status="finished")
    summary = json.loads((newer / "summary.json").read_text())
    (newer / "summary.json").write_text(
        json.dumps({**summary, "updated_at": "2026-02-01T00:00:00Z"})
    )
    runs = analysis.load_results(tmp_path / "a", tmp_path / "c").runs
    assert runs["path"].iloc[0] == str(newer)


def test_missing_and_empty_directories_are_clear_errors(tmp_path):
    with pytest.raises(analysis.ResultsError, match=r"does not exist"):
        analysis.load_results(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(analysis.ResultsError, match=r"no runs found in .*empty.*sweep directory"):
        analysis.load_results(tmp_path / "empty")
    (tmp_path / "started").mkdir()
    (tmp_path / "started" / "index.json").write_text("{}")
    with pytest.raises(analysis.ResultsError, match=r"started.*has the sweep started"):
        analysis.load_results(tmp_path / "started")
    with pytest.raises(analysis.ResultsError, match="no results directory given"):
        analysis.load_results()


def test_mixed_vocab_sizes_are_noted_and_refused_by_comparisons(tmp_path):
    write_sweep(tmp_path / "a", init_stds=("0.02",), vocab_size=512)
    write_sweep(tmp_path / "b", init_stds=("0.02",), vocab_size=1024, data_files="other.txt")
    res = analysis.load_results(tmp_path / "a", tmp_path / "b")
    assert any(
        "mixed sweeps" in n and "vocab_size" in n and "512" in n and "1024" in n for n in res.notes
    )
    with pytest.raises(analysis.ResultsError, match=r"vocab_size .*512.*1024"):
        analysis.require_single_data(res.runs, "figure X")
    one = res.select(res.runs["vocab_size"] == 512)
    analysis.require_single_data(one.runs)
    assert set(one.history["run_id"]) == set(one.runs["run_id"])
    data_id = one.runs["data_id"].iloc[0]
    assert set(
        analysis.load([tmp_path / "a", tmp_path / "b"], data_id=data_id).runs["vocab_size"]
    ) == {512}
    with pytest.raises(analysis.ResultsError, match="matches no run; data_ids present"):
        analysis.load([tmp_path / "a"], data_id="zzz")


def test_variant_separates_runs_that_differ_in_config(tmp_path):
    write_sweep(tmp_path / "t5", init_stds=("1.0",), t5_rescale=False)
    write_sweep(tmp_path / "t5", init_stds=("1.0",), t5_rescale=True)
    runs = analysis.load_results(tmp_path / "t5").runs
    assert set(runs["variant"]) == {"", "model.t5_rescale=True"}  # the plain runs stay plain
    threads = analysis.variants([{"trainer": {"threads": 1}}, {"trainer": {"threads": 2}}])
    assert threads == ["", ""]  # a floor replicate at another thread count is the same arm
    agg = analysis.aggregate_runs(runs)
    assert len(agg) == 4  # tie x variant, never averaged together
    assert analysis.variants([{"model": {"lr": 1}}, {"model": {}}]) == [
        "",
        "",
    ]  # a missing key is no difference


def test_load_string_with_several_dirs(tmp_path):
    import os

    write_sweep(tmp_path / "a", init_stds=("0.02",), ties=(True,))
    write_sweep(tmp_path / "b", init_stds=("0.5",), ties=(True,))
    res = analysis.load(f"{tmp_path / 'a'}{os.pathsep}{tmp_path / 'b'}")
    assert set(res.runs["sweep"]) == {"a", "b"}


# ----------------------------------------------------------------------------- comparisons


def test_paired_differences(sweep):
    runs = analysis.load_results(sweep).runs
    pairs = analysis.paired_differences(runs)
    # finished pairs: (0.036, seed 0) and (1.0, seed 0); seed 1 partners are diverged/running/failed
    assert sorted(zip(pairs["init_std"], pairs["seed"], strict=True)) == [("0.036", 0), ("1.0", 0)]
    p = pairs.iloc[0]
    by_id = runs.set_index("run_id")
    assert p["diff"] == pytest.approx(
        by_id.loc[p["tied_run_id"], "final_val_loss"]
        - by_id.loc[p["untied_run_id"], "final_val_loss"]
    )
    assert by_id.loc[p["tied_run_id"], "tie"] == True  # noqa: E712
    unpaired = " ".join(pairs.attrs["unpaired"])
    assert (
        "status diverged" in unpaired
        and "status running" in unpaired
        and "status failed" in unpaired
    )
    assert "tie=true_init=0.036_model=nano_seed=1: no untied partner" in unpaired
    summary = analysis.summarize_differences(pairs)
    assert (summary["n"] == 1).all() and (summary["ci_label"] == "n=1: no CI").all()


def test_paired_differences_refuse_duplicates(tmp_path):
    write_sweep(tmp_path / "a", init_stds=("0.02",))
    write_sweep(tmp_path / "b", init_stds=("0.02",), max_steps=30)  # same slots, other run ids
    runs = analysis.load_results(tmp_path / "a", tmp_path / "b").runs
    runs = runs.assign(variant="")  # pretend the sweeps only differ in bookkeeping
    with pytest.raises(analysis.ResultsError, match="select one sweep"):
        analysis.paired_differences(runs)
    with pytest.raises(analysis.ResultsError, match="select one sweep"):  # the one pairing
        analysis.paired_table(runs)


def test_aggregate_runs_counts_only_finished(sweep):
    runs = analysis.load_results(sweep).runs
    agg = analysis.aggregate_runs(runs).set_index(["tie", "init_std"])
    assert agg.loc[(True, "1.0"), "n"] == 1  # seed 1 diverged
    assert agg.loc[(True, "0.036"), "n"] == 2
    both = runs[(runs["tie"] == True) & (runs["init_std"] == "0.036")]["final_val_loss"]  # noqa: E712
    assert agg.loc[(True, "0.036"), "mean"] == pytest.approx(both.mean())


def test_aggregate_history_over_seeds(sweep):
    res = analysis.load_results(sweep)
    agg = analysis.aggregate_history(res.history, "val/loss", by=["tie", "init_std"])
    cell = agg[(agg["tie"] == True) & (agg["init_std"] == "0.036")].set_index("step")  # noqa: E712
    h = res.history
    vals = h[(h["tie"] == True) & (h["init_std"] == "0.036") & (h["step"] == 5)]["val/loss"]  # noqa: E712
    assert cell.loc[5, "n"] == 2 and cell.loc[5, "mean"] == pytest.approx(vals.mean())
    assert cell.loc[5, "tokens"] == 5 * 256
    with pytest.raises(KeyError, match="logged metrics"):
        analysis.aggregate_history(res.history, "val/nope")


def test_representative_runs_largest_size_lowest_finished_seed(tmp_path):
    sweep = write_sweep(
        tmp_path / "sw",
        models=("nano", "micro"),
        seeds=(0, 1),
        statuses={(True, "1.0", "micro", 0): "failed"},
    )
    runs = analysis.load_results(sweep).runs
    rep = analysis.representative_runs(runs)
    assert len(rep) == 4 and set(rep["model"]) == {"micro"}
    tied_big = rep[(rep["tie"] == True) & (rep["init_std"] == "1.0")].iloc[0]  # noqa: E712
    assert tied_big["seed"] == 1 and tied_big["status"] == "finished"  # seed 0 failed
    assert set(rep[rep["init_std"] == "0.036"]["seed"]) == {0}


# ----------------------------------------------------------------------------- probes


def test_token_probes_and_offdiag(sweep):
    runs = analysis.load_results(sweep).runs
    fin = runs[(runs["status"] == "finished") & (runs["seed"] == 0)]
    token_probes = analysis.load_token_probes(fin)
    assert token_probes.attrs["missing"] == []
    assert len(token_probes) == 512 * len(fin)
    last = token_probes.groupby("run_id")["probe_step"].first()
    assert (last == 20).all()
    tied_ids = fin[fin["tie"] == True]["run_id"]  # noqa: E712
    assert token_probes[token_probes["run_id"].isin(tied_ids)]["in_out_cos"].isna().all()
    assert token_probes[~token_probes["run_id"].isin(tied_ids)]["in_out_cos"].notna().all()
    freq = np.load(sweep / fin["run_id"].iloc[0] / "token_freq.npy")
    assert (
        token_probes[token_probes["run_id"] == fin["run_id"].iloc[0]]["count"].to_numpy() == freq
    ).all()
    cosines = analysis.load_stratum_cosines(fin)
    assert set(cosines["which"]) == {"first", "last"} and set(cosines["kind"]) == {"raw", "centred"}
    assert set(cosines["stratum"]) == {"unseen", "rare", "frequent"} and len(
        cosines
    ) == 2 * 3 * 2 * 500 * len(fin)
    last_unseen = cosines[
        (cosines["which"] == "last") & (cosines["stratum"] == "unseen") & (cosines["kind"] == "raw")
    ]
    tied_mean = last_unseen[last_unseen["run_id"].isin(tied_ids)]["cos"].mean()
    assert (
        tied_mean > 0.5 > last_unseen[~last_unseen["run_id"].isin(tied_ids)]["cos"].mean()
    )  # the fake's collapse


def test_missing_probes_are_listed(tmp_path):
    sweep = tmp_path / "sw"
    write_run(sweep, probes=False)
    write_run(sweep, tie=False, token_freq=False)
    runs = analysis.load_results(sweep).runs
    token_probes = analysis.load_token_probes(runs)
    missing = " ".join(token_probes.attrs["missing"])
    assert "tie=true_init=0.02_model=nano_seed=0: no probes/step_*.npz" in missing
    assert "token_freq.npy missing" in missing
    assert set(token_probes["run_id"]) == {runs[runs["tie"] == False]["run_id"].iloc[0]}  # noqa: E712
    assert analysis.load_stratum_cosines(runs).attrs["missing"] == [
        "tie=true_init=0.02_model=nano_seed=0: no probes/step_*.npz"
    ]
    assert "no probe at step 7" in " ".join(
        analysis.load_token_probes(runs, step=7).attrs["missing"]
    )


# ----------------------------------------------------------------------------- theory


def test_gaussian_logit_loss_regimes():
    V = 50257
    assert analysis.gaussian_logit_loss(1e-4, V)[0] == pytest.approx(math.log(V), abs=1e-6)
    small = analysis.gaussian_logit_loss([0.5, 1.0], V)
    assert small == pytest.approx(math.log(V) + np.array([0.125, 0.5]), abs=0.02)
    big = analysis.gaussian_logit_loss(50.0, V)[0]
    # sigma * E[max] from below (the other logits add a little), far below sigma * sqrt(2 ln V)
    assert (
        50 * analysis.expected_max_normal(V)
        < big
        < 1.01 * 50 * analysis.expected_max_normal(V)
        < 0.95 * 50 * math.sqrt(2 * math.log(V))
    )
    approx = analysis.gaussian_logit_loss_approx([0.5, 100.0], V)
    assert approx[0] == pytest.approx(math.log(V) + 0.125)
    assert approx[1] == pytest.approx(100 * analysis.expected_max_normal(V))


def test_expected_max_of_normals_against_monte_carlo():
    rng = np.random.default_rng(1)
    for n in (10, 1000):
        draws = rng.standard_normal((20_000, n)).max(axis=1)
        assert analysis.expected_max_normal(n) == pytest.approx(
            draws.mean(), abs=4 * draws.std() / math.sqrt(len(draws))
        )
    assert analysis.expected_max_normal(50257) == pytest.approx(
        4.2316, abs=1e-4
    )  # sqrt(2 ln V) = 4.653 is 10% high


def test_gaussian_curve_is_exact_to_a_tenth_of_a_percent_and_unbiased():
    V, grid = 50257, np.geomspace(0.05, 300, 40)  # the range figure 3 draws
    value, se = analysis.gaussian_logit_loss(grid, V, return_se=True)
    assert np.all(se / value < 1e-3)
    # against plain Monte Carlo with other draws, at a small V where many draws are cheap
    g = np.random.default_rng(5).standard_normal((4000, 500))
    for sigma in (0.5, 3.0, 10.0):
        plain = np.log(np.exp(sigma * g).sum(axis=1))
        assert analysis.gaussian_logit_loss(sigma, 500)[0] == pytest.approx(
            plain.mean(), abs=4 * plain.std() / 63 + 1e-3
        )


@pytest.mark.parametrize("init_std", [1.0, 0.125])
def test_tied_initial_loss_prediction_against_a_model_built_here(init_std):
    """The tied step-0 loss from the logged quantities (own-token logit, logit std, fraction of
    targets equal to their input) matches a real tied model's, where the Gaussian one does not."""
    import torch

    from tiedvsuntied.model.config import ModelConfig
    from tiedvsuntied.model.gpt import GPT

    V, d = 4096, 64
    model = GPT(
        ModelConfig(n_layer=2, n_head=2, n_embd=d, block_size=64, vocab_size=V),
        tie=True,
        init_std=str(init_std),
        seed=0,
    )
    g = torch.Generator().manual_seed(0)
    x = torch.multinomial(
        1 / torch.arange(1.0, V + 1), 32 * 65, replacement=True, generator=g
    ).view(32, 65)
    x[:, 1::9] = x[:, 0::9][:, : x[:, 1::9].size(1)]  # some targets repeat their input, as in text
    inp, tgt = x[:, :-1], x[:, 1:]
    with torch.no_grad():
        logits, loss = model(inp, tgt)
    self_logit = logits.gather(-1, inp[..., None]).mean().item()
    frac = (inp == tgt).float().mean().item()
    predicted = analysis.tied_initial_loss(self_logit, logits.std().item(), V, frac)[0]
    assert predicted == pytest.approx(loss.item(), rel=0.03)
    if init_std == 1.0:  # the own-token logit dominates: the i.i.d. theory is far off
        assert self_logit == pytest.approx(init_std * d, rel=0.25)
        assert analysis.gaussian_logit_loss(logits.std().item(), V)[0] < 0.6 * loss.item()


def test_initial_loss_table(sweep):
    runs = analysis.load_results(sweep).runs
    t = analysis.initial_loss_table(runs)
    assert len(t) == len(runs)
    r = t[t["tie"] == False].iloc[0]  # noqa: E712
    assert r["predicted"] == pytest.approx(
        analysis.gaussian_logit_loss(r["init_logit_std"], 512)[0]
    )
    assert r["excess"] == pytest.approx(r["init_val_loss"] - r["predicted"])
    assert t.loc[t["tie"] == True, "predicted_tied"].isna().all()  # noqa: E712 (the fakes log no own-token logit)


# ----------------------------------------------------------------------------- parameter table


def test_parameter_table_counts_every_size():
    """GPT-2 small: 124,439,808 tied, 163,037,184 untied (the published counts)."""
    t = analysis.parameter_table().set_index("size")
    assert list(t.index) == [
        "nano",
        "micro",
        "mini",
        "small",
        "medium",
        "large",
        "xl",
    ]  # smallest first
    assert (
        t.loc["small", "total (tied)"] == 124_439_808
        and t.loc["small", "total (untied)"] == 163_037_184
    )
    assert (t["total (untied)"] - t["total (tied)"] == t["head (untied)"]).all()
    assert (t["head (untied)"] == t["embedding (wte)"]).all()
    assert analysis.parameter_table(vocab_size=512).loc[3, "embedding (wte)"] == 512 * 768


# ----------------------------------------------------------------------------- W&B


def _as_wandb(run_dir):
    """What the W&B API returns for a run the trainer mirrored: config = resolved config plus
    the derived values at the top level; summary = summary.json with dicts flattened to
    "params/total" etc., plus the last logged metrics and W&B's own keys."""
    import yaml

    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    summary = json.loads((run_dir / "summary.json").read_text())
    config.update(
        {
            "run_id": summary["run_id"],
            "name": summary["name"],
            "vocab_size": summary["vocab_size"],
            "params": summary["params"],
            "init_std_resolved": summary["init_std_resolved"],
            "data_fingerprint": summary["data_fingerprint"],
        }
    )
    wb_summary = {}
    for k, v in summary.items():
        if isinstance(v, dict):
            wb_summary.update({f"{k}/{kk}": vv for kk, vv in v.items()})
        else:
            wb_summary[k] = v
    wb_summary.update(
        {"val/loss": summary["final_val_loss"], "_step": summary["step"], "_runtime": 12.5}
    )
    return config, wb_summary


def test_wandb_row_has_the_same_columns_as_the_directory_row(sweep):
    res = analysis.load_results(sweep)
    for _, row in res.runs.iterrows():
        config, wb_summary = _as_wandb(sweep / row["run_id"])
        state = {"diverged": "finished", "failed": "crashed"}.get(row["status"], row["status"])
        wb = analysis.wandb_run_row(
            config, wb_summary, run_id="tvu-abc", name=row["name"], group="sw", state=state
        )
        assert list(wb) == analysis.RUN_COLUMNS
        for col in [
            "run_id",
            "name",
            "sweep",
            "status",
            "tie",
            "head",
            "init_std",
            "init_std_resolved_emb",
            "model",
            "n_embd",
            "seed",
            "vocab_size",
            "data_id",
            "params_total",
            "params_non_embedding",
            "init_val_loss",
            "final_val_loss",
            "test_loss",
            "diverged_at_step",
            "ln_vocab",
        ]:
            a, b = row[col], wb[col]
            assert (pd.isna(a) and pd.isna(b)) or a == b, (col, a, b)


def test_wandb_row_from_metrics_only():
    """A run whose summary holds only W&B's last metrics (no mirrored summary.json keys)."""
    config = {
        "tie": False,
        "init_std": "inv_sqrt_d",
        "seed": 3,
        "sweep": "s",
        "model": {"name": "micro", "n_layer": 4, "n_head": 4, "n_embd": 128, "vocab_size": 50257},
        "data": {"name": "wikitext2"},
    }
    summary = {
        "val/loss": 4.2,
        "test/loss": 4.3,
        "_step": 2000,
        "init/logit_std": 1.0,
        "test/loss_at_best": 4.25,
        "init/self_logit": 0.5,
    }
    row = analysis.wandb_run_row(
        config, summary, run_id="abc", name="n", group="s", state="crashed"
    )
    assert row["test_loss_at_best"] == 4.25 and row["init_self_logit"] == 0.5
    assert row["status"] == "failed"  # crashed in W&B
    stale = analysis.wandb_run_row(
        config, {**summary, "status": "running"}, run_id="abc", state="finished"
    )
    assert stale["status"] == "failed"  # stopped without recording an end
    live = analysis.wandb_run_row(
        config, {**summary, "status": "running"}, run_id="abc", state="running"
    )
    assert live["status"] == "running"
    assert row["final_val_loss"] == 4.2 and row["test_loss"] == 4.3 and row["step"] == 2000
    assert row["tie"] is False and row["head"] == "untied" and row["init_std"] == "inv_sqrt_d"
    assert row["model"] == "micro" and row["n_embd"] == 128 and row["seed"] == 3
    assert row["ln_vocab"] == pytest.approx(math.log(50257))
    assert row["data_id"].startswith("cfg-")
    # a dotted flat config reads the same
    flat = analysis.wandb_run_row(
        analysis.flatten(config), summary, run_id="abc", name="n", group="s", state="finished"
    )
    assert flat["model"] == "micro" and flat["n_embd"] == 128 and flat["status"] == "finished"


def test_wandb_without_credentials_fails_fast_and_clearly(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc, no wandb settings
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb"))
    monkeypatch.setenv(
        "WANDB_BASE_URL", "http://127.0.0.1:9"
    )  # nothing listens: never the internet
    t0 = time.time()
    with pytest.raises(
        analysis.WandbUnavailableError,
        match=r"cannot read W&B project 'someone/proj'.*load_results",
    ):
        analysis.load_wandb("someone/proj", timeout=3)
    assert time.time() - t0 < 30


# ------------------------------------------------------------------ paired, with evaluation noise


def test_bootstrap_recovers_a_known_difference_and_narrows_with_more_windows():
    rng = np.random.default_rng(0)
    text = rng.gamma(4.0, 0.25, 2000)  # window difficulty: the same windows in both arms
    tied = text + 0.1 + 0.2 * rng.standard_normal((3, 2000))
    untied = text + 0.2 * rng.standard_normal((3, 2000))
    d = tied - untied  # paired window by window: the difficulty cancels
    low, high, method = analysis.bootstrap_mean(d)
    assert low < d.mean() < high and low < 0.1 < high and "3 seeds x 2000 windows" in method
    # the interval is as narrow as the arms' own noise makes it: the difficulty (std 0.5) is not
    # in it, where an arm's own mean carries it
    alone = analysis.bootstrap_mean(tied)
    assert high - low < 0.7 * (alone[1] - alone[0])
    narrow = analysis.bootstrap_mean(d[:, :2000])[1] - analysis.bootstrap_mean(d[:, :2000])[0]
    wide = analysis.bootstrap_mean(d[:, :100])[1] - analysis.bootstrap_mean(d[:, :100])[0]
    assert wide > 3 * narrow  # sqrt(20) ~ 4.5 times fewer windows


def test_bootstrap_below_three_seeds_covers_windows_only():
    rng = np.random.default_rng(1)
    seeds = np.array([[0.0], [1.0]]) + 0.05 * rng.standard_normal((2, 300))  # seeds far apart
    low, high, method = analysis.bootstrap_mean(seeds)
    assert "windows only" in method and "seed noise not included" in method
    assert high - low < 0.05  # the seed spread (1.0) is not in it: the label says so
    one = analysis.bootstrap_mean(seeds[:1])
    g = np.random.default_rng(7)
    manual = [
        seeds[0, g.integers(0, 300, 300)].mean() for _ in range(2000)
    ]  # the textbook bootstrap
    assert one[1] - one[0] == pytest.approx(
        np.quantile(manual, 0.975) - np.quantile(manual, 0.025), rel=0.15
    )
    three = analysis.bootstrap_mean(
        np.vstack([seeds, [[2.0]] + 0.05 * rng.standard_normal((1, 300))])
    )
    assert three[1] - three[0] > 1.0  # with 3 seeds their spread enters the interval


def test_paired_table_pairs_by_seed_and_reads_the_windows(tmp_path):
    sweep = write_sweep(tmp_path / "sw", init_stds=("1.0",), seeds=(0, 1, 2))
    write_run(sweep, tie=True, init_std="1.0", seed=3)  # no untied partner
    runs = analysis.load_results(sweep).runs
    t = analysis.paired_table(runs).set_index("point")
    fin = runs[runs["status"] == "finished"]
    by_seed = fin.pivot_table(index="seed", columns="tie", values="test_loss")
    expected = (by_seed[True] - by_seed[False]).dropna()
    assert t.loc["final", "n_seeds"] == 3 and t.loc["final", "n_windows"] == 40
    assert t.loc["final", "diff"] == pytest.approx(
        expected.mean(), abs=1e-5
    )  # window means are the summary values
    assert sorted(t.loc["final", "seed_diffs"]) == pytest.approx(
        sorted(expected.tolist()), abs=1e-5
    )
    # the primary interval: Student's t over the 3 seeds' differences (scipy's, by hand here)
    half = stats.t.ppf(0.975, 2) * expected.std() / np.sqrt(3)
    assert t.loc["final", "low"] == pytest.approx(expected.mean() - half, abs=1e-5)
    assert t.loc["final", "high"] == pytest.approx(expected.mean() + half, abs=1e-5)
    assert t.loc["final", "method"] == "95% t over 3 seeds' paired differences"
    # the secondary bootstrap reads the windows, and is narrower (it undercovers at 3 seeds)
    assert "3 seeds x 40 windows" in t.loc["final", "boot_method"]
    assert t.loc["final", "boot_high"] - t.loc["final", "boot_low"] < 2 * half
    assert t["floor"].isna().all()  # no replicates: no floor
    best = runs.pivot_table(index="seed", columns="tie", values="test_loss_at_best").dropna()
    assert t.loc["best", "diff"] == pytest.approx((best[True] - best[False]).mean(), abs=1e-5)


def test_paired_table_without_window_losses_falls_back_to_summary_values(tmp_path):
    sweep = write_sweep(tmp_path / "sw", init_stds=("1.0",), seeds=(0, 1), probes=False)
    t = analysis.paired_table(analysis.load_results(sweep).runs).set_index("point")
    assert t.loc["final", "n_windows"] == 0 and t.loc["final", "boot_method"] == "none"
    assert np.isnan(t.loc["final", "boot_low"]) and t.loc["final", "low"] < t.loc["final", "high"]


def test_one_seed_has_no_interval_never_a_windows_only_one(tmp_path):
    sweep = write_sweep(tmp_path / "sw", init_stds=("1.0",), seeds=(0,))
    t = analysis.paired_table(analysis.load_results(sweep).runs).set_index("point")
    assert np.isnan(t.loc["final", "low"]) and np.isnan(t.loc["final", "high"])
    assert t.loc["final", "method"] == "1 seed: no interval (needs 2)"
    text = analysis.markdown(t.reset_index())
    assert text.startswith("0 intervals at 95% each") and "| none " in text


def test_classic_comparison_picks_each_arms_own_best_learning_rate(tmp_path):
    sweep = tmp_path / "classic"
    shift = {
        (True, 1e-3): 0.6,
        (True, 3e-3): 0.0,
        (False, 1e-3): 0.0,
        (False, 3e-3): 0.6,
    }  # tied best at 3e-3
    for (tie, lr), s in shift.items():
        for seed in (0, 1, 2):
            write_run(sweep, tie=tie, init_std="0.02", seed=seed, lr=lr, floor_shift=s)
    runs = analysis.load_results(sweep).runs
    assert (
        sorted(runs["lr"].unique()) == [1e-3, 3e-3]
        and runs["variant"].str.contains("optim.lr").all()
    )
    t = analysis.best_lr_comparison(runs).set_index("point")
    assert t.loc["best", "lr_tied"] == 3e-3 and t.loc["best", "lr_untied"] == 1e-3

    def pick(tie, lr):
        chosen = runs[(runs["tie"] == tie) & (runs["lr"] == lr)]
        return chosen.set_index("seed")["test_loss_at_best"]

    assert t.loc["best", "diff"] == pytest.approx(
        (pick(True, 3e-3) - pick(False, 1e-3)).mean(), abs=1e-5
    )
    assert t.loc["best", "n_seeds"] == 3 and t.loc["best", "lrs"] == 2


def test_runs_measured_against_different_mfu_peaks_are_noted(sweep):
    runs = analysis.load_results(sweep).runs
    assert not any(
        "MFU peaks" in n for n in analysis.check_consistency(runs.assign(peak_tflops=1.5))
    )
    notes = analysis.check_consistency(runs.assign(peak_tflops=np.arange(len(runs)) + 1.0))
    assert any(
        f"{len(runs)} different MFU peaks" in n and "trainer.peak_tflops" in n for n in notes
    )


def test_reading_side_loads_no_torch():
    """Figures and notebooks read results without torch (the reading side imports none)."""
    code = (
        "import sys, tiedvsuntied.figures, tiedvsuntied.analysis, tiedvsuntied.results\n"
        "assert 'torch' not in sys.modules, 'torch was imported'"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]


# ------------------------------------------------------------------ replicates and interactions


def _with_replicates(tmp_path, seeds=(0, 1, 2), models=("nano",)):
    """tie x init std {1.0, inv_sqrt_d} x seeds, and a second replicate of seed 0 at init 1.0."""
    sweep = write_sweep(
        tmp_path / "sw", init_stds=("1.0", "inv_sqrt_d"), seeds=seeds, models=models
    )
    for tie in (True, False):
        write_run(sweep, tie=tie, init_std="1.0", seed=0, replicate=1)
    return analysis.load_results(sweep).runs


def test_replicates_measure_the_floor_and_enter_no_seed_statistic(tmp_path):
    runs = _with_replicates(tmp_path)
    assert runs["replicate"].dtype == "Int64" and sorted(runs["replicate"].unique()) == [0, 1]
    floors = analysis.noise_floor(runs).set_index("init_std")
    assert list(floors.index) == ["1.0"] and floors.loc["1.0", "n"] == 2
    by = runs[runs["init_std"] == "1.0"].set_index(["tie", "seed", "replicate"])["test_loss"]
    expected = np.mean([abs(by[(tie, 0, 0)] - by[(tie, 0, 1)]) for tie in (True, False)])
    assert floors.loc["1.0", "floor_final"] == pytest.approx(expected)
    assert floors.loc["1.0", "floor_final"] > 0  # the fake replicate trains its own noise
    # replicates are no extra seeds: pairs, means and single-run picks see replicate 0 only
    t = analysis.paired_table(runs, ("final",)).set_index("init_std")
    assert (t["n_seeds"] == 3).all()
    assert t.loc["1.0", "floor"] == pytest.approx(expected) and np.isnan(
        t.loc["inv_sqrt_d", "floor"]
    )
    assert (analysis.aggregate_runs(runs)["n"] == 3).all()
    assert (analysis.representative_runs(runs)["replicate"] == 0).all()
    unpaired = analysis.paired_differences(runs).attrs["unpaired"]
    assert len(unpaired) == 2 and all("replicate 1 (noise floor only)" in u for u in unpaired)
    text = analysis.markdown(t.reset_index())
    assert (
        "noise floor (mean |replicate 0 − replicate k| of one config, another thread count)" in text
    )
    assert "| not measured " in text
    hist = analysis.load_results(tmp_path / "sw").history
    assert (analysis.aggregate_history(hist, by=["tie", "init_std"])["n"] <= 3).all()


def test_a_rerun_at_the_same_thread_count_is_a_determinism_check_not_a_floor(tmp_path):
    sweep = write_sweep(tmp_path / "sw", init_stds=("1.0",), seeds=(0, 1), threads=2)
    write_run(sweep, tie=True, init_std="1.0", seed=0, replicate=1, threads=1)
    write_run(sweep, tie=True, init_std="1.0", seed=0, replicate=2, threads=2)
    runs = analysis.load_results(sweep).runs
    pairs = analysis.reruns(runs)
    assert dict(zip(pairs["replicate_k"], pairs["same_threads"], strict=True)) == {
        1: False,
        2: True,
    }
    floors = analysis.noise_floor(runs)
    assert floors["n"].tolist() == [1]  # replicate 1 (another thread count) alone
    by = runs.set_index(["tie", "seed", "replicate"])["test_loss"]
    assert floors["floor_final"].iloc[0] == pytest.approx(abs(by[True, 0, 0] - by[True, 0, 1]))


def test_old_runs_without_a_replicate_key_are_replicate_0(sweep):
    summary = json.loads(next(sweep.glob("*/summary.json")).read_text())
    summary.pop("replicate")
    assert analysis.run_row(summary)["replicate"] == 0


def test_interaction_is_the_tie_effect_at_one_init_minus_at_the_other_paired_by_seed(tmp_path):
    runs = _with_replicates(tmp_path, models=("nano", "micro"))
    table = analysis.interaction_table(runs, levels=("1", "d^-0.5"))  # spellings made canonical
    assert list(table["contrast"]) == ["init_std: 1.0 − inv_sqrt_d"] * 2
    first = runs[(runs["replicate"] == 0) & (runs["model"] == "micro")]
    effect = first.pivot_table(index="seed", columns=["init_std", "tie"], values="test_loss")
    per_seed = (effect[("1.0", True)] - effect[("1.0", False)]) - (
        effect[("inv_sqrt_d", True)] - effect[("inv_sqrt_d", False)]
    )
    row = table.set_index("model").loc["micro"]
    assert row["n_seeds"] == 3 and row["diff"] == pytest.approx(per_seed.mean())
    half = stats.t.ppf(0.975, 2) * per_seed.std() / np.sqrt(3)
    assert (row["low"], row["high"]) == pytest.approx(
        (per_seed.mean() - half, per_seed.mean() + half)
    )
    # the primary contrast is the row of the largest size
    assert table.set_index("model")["primary"].to_dict() == {"micro": True, "nano": False}
    sizes = analysis.interaction_table(runs, "model", ("micro", "nano")).set_index("init_std")
    assert list(sizes["contrast"]) == ["model: micro − nano"] * 2 and not sizes["primary"].any()
    with pytest.raises(KeyError, match="valid factors are data_id, model, variant, init_std"):
        analysis.interaction_table(runs, "tie")
    assert analysis.interaction_table(runs, levels=("1.0", "0.02")).empty
    assert analysis.markdown(table).startswith("2 intervals at 95% each")
    assert "primary contrast: interaction of tying with init std at the largest size" in (
        analysis.markdown(table)
    )
