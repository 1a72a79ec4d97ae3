"""The protocol (tiedvsuntied.study) in process: the order of ``all``, the edges, the seeds, the
clip rule, the floor, restore and the refusal to train where trainer.precision=auto is not the
study's, on the declared studies and their shipped lr tables (what they do on the shipped bundles:
tests/e2e/test_study_e2e.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import moved

from tiedvsuntied.studies.sign_flip import pieces
from tiedvsuntied.study import protocol, registry
from tiedvsuntied.study.__main__ import main

SIGN_FLIP = registry.study("sign_flip")
BOOKS = registry.study("tie_x_init_books")


def test_a_point_reads_the_same_bytes_of_text_at_every_point():
    for point in SIGN_FLIP.points.values():
        words = dict(w.split("=") for w in point.overrides().split())
        steps = int(words["trainer.max_steps"])
        read = steps * point.tokens_per_step * point.bytes_per_token
        assert abs(read - point.budget_bytes) <= point.tokens_per_step * point.bytes_per_token / 2
        assert int(words["trainer.eval_interval"]) == -(-steps // 10)


def test_all_runs_the_lr_check_its_edges_the_seeds_and_the_clip_rule_point_by_point():
    steps = list(protocol.all_steps(SIGN_FLIP))
    first = SIGN_FLIP.order[0]
    edges = [("choose", None), ("lr-edge", None)] * SIGN_FLIP.edge_steps
    head = [("lr", first), *edges, ("choose", None), ("grid", first), ("choose", None)]
    assert steps[: len(head) + 1] == [*head, ("clip", first)]
    points = [p for name, p in steps if name == "lr"]
    assert points == list(SIGN_FLIP.order)
    # the multiplier grid once V = 8,192 has its lr, before its seeds; the floor once both ends
    # have theirs; each arm's own multipliers last, where the cut left them
    at = steps.index(("lr", "v8192"))
    assert steps[at + len(edges) + 2 : at + len(edges) + 5] == [
        ("mult2d", None),
        ("mult2d-edge", None),
        ("mult2d-edge", None),
    ]
    assert steps[steps.index(("clip", "v40960")) + 1] == ("floor", None)
    assert steps[-3:] == [("own", p) for p in pieces.OWN_POINTS]
    one = list(protocol.all_steps(SIGN_FLIP, "v2048"))
    assert one[0] == ("lr", "v2048") and one[-1] == ("own", "v2048")


def test_a_study_with_one_lr_check_runs_it_once_then_each_points_seeds():
    steps = [s for s in protocol.all_steps(BOOKS) if s[0] != "choose"]
    assert steps == [("lr", None), ("lr-edge", None), ("primary", None), ("grid", "nano")] + [
        ("grid", "micro"),
        ("floor", None),
    ]


def test_an_edge_runs_x2_beyond_it_at_its_own_point_and_init_std(tmp_path):
    table = protocol.choices(SIGN_FLIP)
    table.loc[0, "run_next"] = "0.00025"
    study = moved(SIGN_FLIP, tmp_path, table)
    row = table.iloc[0]
    point = study.point_of(row)
    (line,) = protocol.lr_edge(study)
    assert line.startswith(f"{study.run()} {study.at(point)} seed=0 +arm={row['arm']} ")
    assert line.endswith(f"init_std={row['init_std']} optim.lr=0.00025")
    assert protocol.lr_edge(moved(BOOKS, tmp_path / "b", protocol.choices(BOOKS))) == []


def test_the_seeds_run_each_arm_at_its_chosen_value():
    table = protocol.choices(SIGN_FLIP).query("model == 'micro' and vocab_size == '4096'")
    lines = protocol.seeds(SIGN_FLIP, "v4096")
    assert lines == [
        f"{SIGN_FLIP.run()} {SIGN_FLIP.at('v4096')} seed=1,2,3 +arm={a} optim.lr={lr}"
        for a, lr in zip(table["arm"], table["lr"], strict=True)
    ]
    books = protocol.seeds(BOOKS, "micro")  # every arm, its init std and its own experiment
    assert len(books) == len(protocol.choices(BOOKS)) and all("init_std=" in b for b in books)
    assert [b for b in books if "+arm=t5 " in b][0].startswith(BOOKS.run("t5"))


def test_the_clip_rule_reruns_an_arm_that_clipped_on_more_than_a_tenth_of_steps():
    table = protocol.choices(SIGN_FLIP)
    rerun = table[table["clip_rerun"].eq("True")]
    assert len(rerun) and (rerun["clip_frac"].astype(float) > 0.10).all()
    for row in rerun.to_dict("records"):
        point = SIGN_FLIP.point_of(row)
        lines = protocol.clip(SIGN_FLIP, point)
        assert [line.split(" seed=")[1].split()[0] for line in lines] == ["0,1", "2,3"]
        assert all("sweep=sign_flip_clip" in x and x.endswith("optim.grad_clip=4.0") for x in lines)
    assert protocol.clip(SIGN_FLIP, "v1024") == []  # no arm of it clipped often


def test_the_floor_runs_seed_0_again_at_two_threads_one_at_a_time():
    lines = protocol.floor(SIGN_FLIP)
    assert lines == [
        line.replace("seed=1,2,3", "seed=0 replicate=1 trainer.threads=2")
        for p in SIGN_FLIP.floor_points
        for line in protocol.seeds(SIGN_FLIP, p)
    ]
    assert protocol.piece(SIGN_FLIP, "floor").jobs == 1


def test_restore_puts_each_bundles_runs_into_its_sweep_and_keeps_a_run_already_there(tmp_path):
    """On a new machine ``restore`` fills every sweep a piece reads (the multiplier grid's
    too, or ``all`` would train it again); a run already in a sweep is left as it is."""
    study = moved(SIGN_FLIP, tmp_path)
    for bundle in study.bundles:
        (study.home / bundle / f"run-{bundle}").mkdir(parents=True)
        (study.home / bundle / f"run-{bundle}" / "summary.json").write_text("shipped")
    kept = tmp_path / "results" / "sign_flip" / "run-results" / "summary.json"
    kept.parent.mkdir(parents=True)
    kept.write_text("trained here")
    protocol.restore(study, tmp_path / "results")
    restored = {
        p.relative_to(tmp_path / "results").as_posix(): p.read_text()
        for p in (tmp_path / "results").rglob("summary.json")
    }
    shipped = {f"{sweep}/run-{b}/summary.json": "shipped" for b, sweep in study.bundles.items()}
    assert len(shipped) >= 4 and "sign_flip_mult2d/run-results_mult2d/summary.json" in shipped
    assert restored == shipped | {"sign_flip/run-results/summary.json": "trained here"}


def no_bf16(monkeypatch, answer: bool = False) -> None:
    """torch's two probes of a CPU's bf16 units answer ``answer``."""
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: answer)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: answer)


@pytest.mark.parametrize("piece", ["rest", "grid v1024", "all"])
def test_a_piece_refuses_to_train_where_auto_resolves_to_fp32(piece, monkeypatch, capsys):
    """The study's runs are bf16: on a CPU without bf16 units a piece stops with one line
    before its first job."""
    no_bf16(monkeypatch)
    with pytest.raises(SystemExit) as stop:
        main(["sign_flip", *piece.split(), "--results", "/nonexistent/results"])
    out = capsys.readouterr()
    assert stop.value.code == 2 and out.out == "" and out.err.count("\n") == 1
    assert "trainer.precision=auto would train fp32" in out.err
    assert not Path("/nonexistent/results").exists()


def test_print_and_the_fp32_piece_need_no_bf16_units(monkeypatch, capsys):
    no_bf16(monkeypatch)
    main(["sign_flip", "print", "precision"])
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4 and all("trainer.precision=fp32" in x for x in lines)
    assert protocol.piece(SIGN_FLIP, "precision").any_precision
    no_bf16(monkeypatch, True)
    protocol.check_precision(SIGN_FLIP)  # bf16 here: nothing to refuse


@pytest.mark.parametrize(
    "words, says",
    [
        (["nostudy", "lr"], "unknown study 'nostudy': "),
        (["sign_flip", "print", "lr", "v3"], "unknown point 'v3': v1024"),
        (["sign_flip", "print", "lr"], "piece 'lr' takes a point: v1024"),
        (["sign_flip", "print", "nopiece"], "unknown piece 'nopiece' of sign_flip: lr"),
    ],
)
def test_a_mistake_is_one_line_naming_what_there_is(words, says, capsys):
    with pytest.raises(SystemExit) as stop:
        main(words)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1 and says in err


def test_bundle_ships_each_sweep_that_ran_into_its_bundle(tmp_path):
    (tmp_path / "sign_flip_clip").mkdir()  # the only sweep that ran here
    home = SIGN_FLIP.home.relative_to(protocol.study_root())
    assert protocol.bundle(SIGN_FLIP, results=tmp_path) == [
        f"python -m tiedvsuntied.bundle --no-arrays {tmp_path / 'sign_flip_clip'} "
        f"{home / 'results_clip'}"
    ]
