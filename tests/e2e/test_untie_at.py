"""Scheduled untying (``untie_at``): tied until the switch, then two parameters that start equal,
each with a copy of the shared matrix's Adam moments; a run interrupted after the switch resumes
to the numbers of one that was not."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import QUICK, compose, stop_after_checkpoint

from tiedvsuntied.train.config import ConfigError
from tiedvsuntied.train.plan import check_config
from tiedvsuntied.train.trainer import train

STEPS = [
    "trainer.max_steps=4",
    "trainer.eval_interval=1",
    "trainer.test_eval=false",
    "trainer.log_interval=1",
]


def _run(root, *extra):
    over = [*QUICK, *STEPS, f"results_dir={root}", "sweep=u", *extra]
    s = train(compose(*over), overrides=over)
    run_dir = root / "u" / s.run_id
    metrics = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return s, run_dir, {m["step"]: m["val/loss"] for m in metrics if "val/loss" in m}


def test_untie_at_switches_to_two_equal_matrices_with_copied_moments_and_resumes(
    tmp_path, monkeypatch
):
    _, _, tied = _run(tmp_path / "tied")
    ref, _, untied = _run(tmp_path / "ref", "head.untie_at=0.5")
    assert ref.status.value == "finished" and ref.untie_step == 2
    # The function is unchanged at the switch: the same losses as the tied run up to it.
    assert [untied[s] for s in (0, 1, 2)] == pytest.approx([tied[s] for s in (0, 1, 2)], abs=1e-6)
    assert untied[4] != pytest.approx(tied[4], abs=1e-6)  # then they part
    d = ref.params["embedding"]
    assert ref.params_untied["total"] == ref.params["total"] + d and ref.params_untied["head"] == d

    with monkeypatch.context() as patch:  # stopped right after the switch's checkpoint
        stop_after_checkpoint(patch, 2)
        with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
            _run(tmp_path / "run", "head.untie_at=2", "trainer.ckpt_interval=2")
    ckpt = torch.load(
        next((tmp_path / "run" / "u").glob("*/checkpoints/last.pt")), weights_only=True
    )
    assert ckpt["train_state"]["step"] == 2
    w = ckpt["model"]
    assert torch.equal(w["transformer.wte.weight"], w["lm_head.weight"])  # equal at the switch...
    groups = {g["name"]: g for g in ckpt["optimizer"]["param_groups"]}
    state = ckpt["optimizer"]["state"]
    (wte_id,) = groups["tied"]["params"]  # the embedding keeps the tied matrix's group and lr
    (head_id,) = groups["lm_head"]["params"]  # ...the head is a parameter of its own
    for key in ("weight_decay", "lr_scale", "lr"):  # with the embedding's hyperparameters
        assert groups["lm_head"][key] == groups["tied"][key], key
    for k in ("exp_avg", "exp_avg_sq", "step"):
        assert torch.equal(state[head_id][k], state[wte_id][k])

    s, run_dir, resumed = _run(tmp_path / "run", "head.untie_at=2", "trainer.ckpt_interval=2")
    assert (
        s.status.value == "finished"
        and s.resumed_from_step == 2
        and s.params_untied == ref.params_untied
    )
    assert resumed[4] == pytest.approx(untied[4], abs=1e-6)  # as if never interrupted
    final = torch.load(run_dir / "checkpoints" / "model.pt", weights_only=True)["model"]
    assert not torch.equal(
        final["transformer.wte.weight"], final["lm_head.weight"]
    )  # ...and apart after it


@pytest.mark.parametrize(
    "extra",
    [
        ["head.untie_at=4"],
        ["head.untie_at=1.5"],
        ["head.untie_at=0"],
        ["tie=false", "head.untie_at=0.5"],
    ],
)
def test_an_untie_at_outside_training_or_on_an_untied_run_is_refused_in_one_line(extra):
    with pytest.raises(ConfigError, match="head.untie_at") as e:
        check_config(compose(*QUICK, *STEPS, *extra))
    assert "\n" not in str(e.value)


def test_a_run_untied_on_schedule_starts_a_fine_tuning_run_as_the_untied_model_it_ended_as(
    tmp_path,
):
    from tiedvsuntied.train.finetune import build, read_start

    s, run_dir, _ = _run(tmp_path, "head.untie_at=0.5")
    start = read_start(str(run_dir))
    assert start.tie is False  # its config says tie=true, but it ended with a head of its own
    over = [*QUICK, f"init_from='{run_dir}'"]
    model = build(start, compose(*over))
    saved = torch.load(run_dir / "checkpoints" / "model.pt", weights_only=True)["model"]
    assert torch.equal(model.lm_head.weight, saved["lm_head.weight"])
    assert torch.equal(model.transformer.wte.weight, saved["transformer.wte.weight"])


def test_the_arms_figure_pairs_scheduled_untying_and_the_untied_arm_with_the_tied_one_by_seed(
    tmp_path,
):
    from tiedvsuntied.analysis.arms import arms_table
    from tiedvsuntied.analysis.load import load_results
    from tiedvsuntied.figures import paired

    test = [
        "trainer.test_eval=true",
        "trainer.max_steps=6",
        "trainer.eval_interval=2",
        "trainer.log_interval=2",
        "trainer.log_first=0",  # the switch's step logs no training loss: its tokens interpolate
    ]
    for seed in (0, 1):
        for arm in ([], ["head.untie_at=0.5"], ["tie=false"]):
            _run(tmp_path, *test, f"seed={seed}", *arm)
    runs = load_results(tmp_path / "u").runs
    table = arms_table(runs, ("final",)).set_index("arm")
    assert (
        set(table.index) == {"untied at step 3", "untied"} and (table["reference"] == "tied").all()
    )

    def by(tie: bool, sched: bool):
        return runs[(runs["tie"] == tie) & (runs["untie_step"].isna() != sched)].sort_values("seed")

    tied = by(tie=True, sched=False)["test_loss"].to_numpy()
    for arm, rows in (
        ("untied at step 3", by(tie=True, sched=True)),
        ("untied", by(tie=False, sched=False)),
    ):
        assert table.loc[arm, "seed_diffs"] == pytest.approx(
            tied - rows["test_loss"].to_numpy(),
            abs=1e-5,  # tied − arm, as tied − untied
        )
    assert table.loc["untied at step 3", "share"] == pytest.approx(
        table.loc["untied at step 3", "diff"] / table.loc["untied", "diff"]
    )
    fig = paired.fig_arms(runs, load_results(tmp_path / "u").history)
    curves, diffs = fig.axes
    assert [
        line.get_label() for line in curves.get_lines() if not line.get_label().startswith("_")
    ] == ["tied", "untied at step 3", "untied"]
    switch = [
        line for line in curves.get_lines() if list(line.get_xdata()) == [line.get_xdata()[0]] * 2
    ]
    history = load_results(tmp_path / "u").history
    at_switch = history.loc[history["step"] == 3, "tokens"]
    assert (
        at_switch.isna().all()
    )  # the switch's own record (params/*) carries no tokens: interpolated
    per_step = history.loc[history["step"] == 2, "tokens"].iloc[0] / 2
    assert len(switch) == 1 and switch[0].get_xdata()[0] == pytest.approx(3 * per_step)
    assert [t.get_text() for t in diffs.get_xticklabels()] == ["untied at step 3", "untied"]
