"""What the precision moved (experiments/sign_flip/precision.py) on the shipped bundles: each run
of the fp32 bundle stands beside the bf16 run of its config (found here from the two runs' own
config.yaml, all but the precision and the sweep equal), its shift their summaries' test bpb."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from helpers import script_module

from tiedvsuntied.analysis.load import load_results

pytestmark = pytest.mark.slow  # reads the shipped bundles (tests/e2e)

STUDY = Path(__file__).parents[2] / "experiments" / "sign_flip"
BUNDLES = [STUDY / "results", STUDY / "results_fp32"]


@pytest.fixture(scope="module")
def precision():
    return script_module(STUDY / "precision.py")


def runs_by_config(bundle: Path) -> dict[str, dict]:
    """Each run's summary by its config less the precision, the sweep and what it derived."""
    out = {}
    for run in (p for p in bundle.iterdir() if p.is_dir()):
        config = yaml.safe_load((run / "config.yaml").read_text())
        config["trainer"].pop("precision")
        for key in ("sweep", "derived"):
            config.pop(key)
        out[json.dumps(config, sort_keys=True)] = json.loads((run / "summary.json").read_text())
    return out


def test_each_fp32_run_stands_beside_the_bf16_run_of_its_config(precision):
    table = precision.shifts(load_results(*BUNDLES).runs)
    bf16, fp32 = (runs_by_config(bundle) for bundle in BUNDLES)
    assert {s["precision"] for s in fp32.values()} == {"fp32"} and len(table) == len(fp32)
    for config, mine in fp32.items():
        twin = bf16[config]  # the study's run of this config: a KeyError if none
        arm = "tied" if mine["tie"] else "untied"
        row = table.set_index(["vocab_size", "arm"]).loc[(mine["vocab_size"], arm)]
        assert twin["precision"] == "bf16"
        assert row["test_bpb_bf16"] == pytest.approx(twin["test_bpb"])
        assert row["shift"] == pytest.approx(mine["test_bpb"] - twin["test_bpb"])


def test_a_pairs_move_is_the_tied_runs_shift_less_the_untied_runs(precision):
    table = precision.shifts(load_results(*BUNDLES).runs)
    moved = precision.moved(table)
    assert len(moved) == len(table) // 2 > 0
    for row in moved.itertuples():
        arms = table[table["vocab_size"] == row.vocab_size].set_index("arm")
        assert row.diff_moved == pytest.approx(
            arms.loc["tied", "shift"] - arms.loc["untied", "shift"]
        )
        assert row.diff_fp32 == pytest.approx(
            arms.loc["tied", "test_bpb_fp32"] - arms.loc["untied", "test_bpb_fp32"]
        )
