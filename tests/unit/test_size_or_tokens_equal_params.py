"""studies.size_or_tokens.analysis: the exploratory reading at equal total parameters (issue 55,
item 3): each arm against its own recorded parameter count, and where tied's and untied's lines
on ln(parameters) cross (on the third edition's bundle:
tests/e2e/test_size_or_tokens_equal_params_e2e.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tiedvsuntied.studies.size_or_tokens import analysis

CROSS_AT = 3e6  # where the fake lines below cross, in parameters
SLOPES = {True: -0.10, False: -0.05}  # tied's line is the steeper
NOISE = (0.01, -0.01, 0.02, -0.02)  # per seed: sums to 0 at each cell, so the fit is exact


def fake_runs(cross_at: float = CROSS_AT) -> pd.DataFrame:
    """A V-ladder of four cells, both arms, four seeds: each arm's test bpb a line in ln of its
    own (recorded) parameters; the two lines meet at ``cross_at``."""
    rows = []
    for k, vocab in enumerate((1024, 2048, 4096, 8192)):
        for tie in (True, False):
            params = 1e6 * 2**k * (1.0 if tie else 1.5)
            a = 3.0 if tie else 3.0 + (SLOPES[True] - SLOPES[False]) * np.log(cross_at)
            for seed, noise in enumerate(NOISE):
                bpb = a + SLOPES[tie] * np.log(params) + noise
                rows.append(fake_run(vocab, tie, seed, params, bpb))
    return pd.DataFrame(rows)


def fake_run(vocab: int, tie: bool, seed: int, params: float, bpb: float) -> dict:
    body = {"n_layer": 4, "n_head": 4, "n_embd": 128, "block_size": 256, "vocab_size": vocab}
    return body | {
        "sweep": "sign_flip",
        "status": "finished",
        "replicate": 0,
        "seed": seed,
        "tie": tie,
        "init_std": "inv_sqrt_d",
        "init_std_resolved_emb": 0.088,
        "init_std_resolved_head": 0.088,
        "t5_rescale": False,
        "untie_step": np.nan,
        "variant": "",
        "lr": 1e-3,
        "emb_lr_mult": 4.0,
        "head_lr_mult": np.nan,
        "max_steps": 1000,
        "train_bytes": 10_000_000.0,
        "final_val_loss": 1.0,
        "params_total": params,
        "test_bpb": bpb,
        "rho": 0.5,
        "tokens_per_param": 1.0,
    }


def test_two_lines_crossing_at_a_known_parameter_count_give_that_crossover():
    cross = analysis.crossovers(fake_runs()).set_index("ladder")
    row = cross.loc["V"]
    assert row["params"] == pytest.approx(CROSS_AT, rel=1e-9)
    assert row["low"] < CROSS_AT < row["high"]
    assert row["slope_tied"] == pytest.approx(SLOPES[True])
    assert row["tied_lower_above"]  # the steeper tied line is the lower past the crossover


def test_lines_that_meet_outside_both_arms_range_say_none_in_range():
    cross = analysis.crossovers(fake_runs(cross_at=1e9)).set_index("ladder")
    assert np.isnan(cross.loc["V", "params"])
    assert cross.loc["V", "note"].startswith("none in range")


def test_cells_of_equal_parameters_pair_by_seed():
    runs = fake_runs()  # untied at V has 1.5 x 2^k M; make tied at 2V share it exactly
    runs.loc[runs["tie"] & runs["vocab_size"].eq(2048), "params_total"] = 1.5e6
    matched = analysis.matched(runs)
    assert matched[["label_tied", "label_untied"]].values.tolist() == [["128×4/V=2k", "128×4/V=1k"]]
    expected = runs[runs["params_total"].eq(1.5e6)].groupby("tie")["test_bpb"].mean()
    assert matched["diff"].iloc[0] == pytest.approx(expected[True] - expected[False])


def test_a_cell_both_editions_ran_is_one_point_read_from_the_later_edition():
    """Piece a0 re-ran third-edition cells under the pinned bf16: each such cell is one row,
    the fourth edition's, so matching tied and untied at equal parameters finds one pair."""
    third = fake_runs()
    fourth = third[third["vocab_size"].eq(8192)].assign(
        sweep="size_or_tokens", test_bpb=lambda r: r["test_bpb"] + 0.5
    )
    rows = analysis.equal_params(pd.concat([third, fourth], ignore_index=True))
    at = rows[rows["vocab_size"].eq(8192)]
    assert len(at) == 2 and set(at["sweep"]) == {"size_or_tokens"}
    mean = at.set_index("arm")["bpb"]
    assert mean["tied"] == pytest.approx(
        third.query("vocab_size == 8192 and tie")["test_bpb"].mean() + 0.5
    )
    assert len(rows) == 8  # the other three V's of the third edition stay, both arms
