"""analysis.theory (the initial loss in theory, parameters per size) and analysis.probes (the
per-token and per-stratum probe files)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from fake_results import write_run
from scipy import integrate, stats

from tiedvsuntied.analysis.load import (
    load_results,
)
from tiedvsuntied.analysis.probes import load_stratum_cosines, load_token_probes
from tiedvsuntied.analysis.theory import (
    expected_max_normal,
    gaussian_logit_loss,
    gaussian_logit_loss_approx,
    initial_loss_table,
    parameter_table,
    tied_initial_loss,
)
from tiedvsuntied.presets import presets


def test_gaussian_logit_loss_regimes():
    V = 50257
    assert gaussian_logit_loss(1e-4, V)[0] == pytest.approx(math.log(V), abs=1e-6)
    small = gaussian_logit_loss([0.5, 1.0], V)
    assert small == pytest.approx(math.log(V) + np.array([0.125, 0.5]), abs=0.02)
    big = gaussian_logit_loss(50.0, V)[0]
    # sigma * E[max] from below (the other logits add a little), far below sigma * sqrt(2 ln V)
    assert (
        50 * expected_max_normal(V)
        < big
        < 1.01 * 50 * expected_max_normal(V)
        < 0.95 * 50 * math.sqrt(2 * math.log(V))
    )
    approx = gaussian_logit_loss_approx([0.5, 100.0], V)
    assert approx[0] == pytest.approx(math.log(V) + 0.125)
    assert approx[1] == pytest.approx(100 * expected_max_normal(V))


def test_expected_max_of_normals_against_monte_carlo():
    rng = np.random.default_rng(1)
    for n in (10, 1000):
        draws = rng.standard_normal((20_000, n)).max(axis=1)
        assert expected_max_normal(n) == pytest.approx(
            draws.mean(), abs=4 * draws.std() / math.sqrt(len(draws))
        )
    # At V = 50257, against the other formula, E[M] = int_0^inf (1 - F^n) - int_-inf^0 F^n (F: the
    # normal cdf), where sqrt(2 ln V) = 4.653 would be 10% high.
    n = 50257
    above = integrate.quad(lambda x: -math.expm1(n * stats.norm.logcdf(x)), 0, 12, limit=200)[0]
    below = integrate.quad(lambda x: math.exp(n * stats.norm.logcdf(x)), -12, 0, limit=200)[0]
    assert expected_max_normal(n) == pytest.approx(above - below, abs=1e-6)


def test_gaussian_curve_is_exact_to_a_tenth_of_a_percent_and_unbiased():
    V, grid = 50257, np.geomspace(0.05, 300, 40)  # the range figure 3 draws
    value, se = gaussian_logit_loss(grid, V, return_se=True)
    assert np.all(se / value < 1e-3)
    # against plain Monte Carlo with other draws, at a small V where many draws are cheap
    g = np.random.default_rng(5).standard_normal((4000, 500))
    for sigma in (0.5, 3.0, 10.0):
        plain = np.log(np.exp(sigma * g).sum(axis=1))
        assert gaussian_logit_loss(sigma, 500)[0] == pytest.approx(
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
    predicted = tied_initial_loss(self_logit, logits.std().item(), V, frac)[0]
    assert predicted == pytest.approx(loss.item(), rel=0.03)
    if init_std == 1.0:  # the own-token logit dominates: the i.i.d. theory is far off
        assert self_logit == pytest.approx(init_std * d, rel=0.25)
        assert gaussian_logit_loss(logits.std().item(), V)[0] < 0.6 * loss.item()


def test_initial_loss_table(fake_sweep):
    runs = load_results(fake_sweep).runs
    t = initial_loss_table(runs)
    assert len(t) == len(runs)
    r = t[t["tie"] == False].iloc[0]  # noqa: E712
    assert r["predicted"] == pytest.approx(gaussian_logit_loss(r["init_logit_std"], 512)[0])
    assert r["excess"] == pytest.approx(r["init_val_loss"] - r["predicted"])
    assert t.loc[t["tie"] == True, "predicted_tied"].isna().all()  # noqa: E712 (the fakes log no own-token logit)


def test_parameter_table_counts_every_size():
    """GPT-2 small: 124,439,808 tied, 163,037,184 untied (the published counts)."""
    t = parameter_table().set_index("size")
    assert set(t.index) == set(presets("model"))  # every conf/model/*.yaml
    assert t["total (tied)"].is_monotonic_increasing  # smallest first
    assert (
        t.loc["small", "total (tied)"] == 124_439_808
        and t.loc["small", "total (untied)"] == 163_037_184
    )
    assert (t["total (untied)"] - t["total (tied)"] == t["head (untied)"]).all()
    assert (t["head (untied)"] == t["embedding (wte)"]).all()
    small = parameter_table(vocab_size=512).set_index("size").loc["small"]
    assert small["embedding (wte)"] == 512 * 768


def test_token_probes_and_offdiag(fake_sweep):
    runs = load_results(fake_sweep).runs
    fin = runs[(runs["status"] == "finished") & (runs["seed"] == 0)]
    token_probes = load_token_probes(fin)
    assert token_probes.attrs["missing"] == []
    assert len(token_probes) == 512 * len(fin)
    last = token_probes.groupby("run_id")["probe_step"].first()
    assert (last == 20).all()
    tied_ids = fin[fin["tie"] == True]["run_id"]  # noqa: E712
    assert token_probes[token_probes["run_id"].isin(tied_ids)]["in_out_cos"].isna().all()
    assert token_probes[~token_probes["run_id"].isin(tied_ids)]["in_out_cos"].notna().all()
    freq = np.load(fake_sweep / fin["run_id"].iloc[0] / "token_freq.npy")
    assert (
        token_probes[token_probes["run_id"] == fin["run_id"].iloc[0]]["count"].to_numpy() == freq
    ).all()
    cosines = load_stratum_cosines(fin)
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
    runs = load_results(sweep).runs
    token_probes = load_token_probes(runs)
    missing = " ".join(token_probes.attrs["missing"])
    assert "tie=true_init=0.02_model=nano_seed=0: no probes/step_*.npz" in missing
    assert "token_freq.npy missing" in missing
    assert set(token_probes["run_id"]) == {runs[runs["tie"] == False]["run_id"].iloc[0]}  # noqa: E712
    assert load_stratum_cosines(runs).attrs["missing"] == [
        "tie=true_init=0.02_model=nano_seed=0: no probes/step_*.npz"
    ]
    assert "no probe at step 7" in " ".join(load_stratum_cosines(runs, [7]).attrs["missing"])
