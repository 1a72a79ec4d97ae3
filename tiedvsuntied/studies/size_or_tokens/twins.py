"""The reuse floor (HYPOTHESES.md, "Which third-edition runs are reused"): piece a0 ran the
third edition's 10 MB cells again under the pinned bf16, at the lr that edition chose; each a0
run against its third-edition twin (the same body, V, steps, seed, arm, lr and init std, bf16
under ``auto``) says how far the re-run moved each arm and tying's effect. The floor of a seed
is |(tied − untied) here − (tied − untied) there|.

The processor floor: a shipped run trained again on another processor (the same id, so the same
config, seed and precision, in a results directory of its own: ``python -m
tiedvsuntied.studies.size_or_tokens.twins AGAIN``) says how far the processor alone moves a run
and tying's effect, since a study's seeds run on whichever CPU a session is lent."""

from __future__ import annotations

import argparse
import sys

import pandas as pd

from tiedvsuntied.analysis.arms import arms_of
from tiedvsuntied.analysis.load import ResultsError, load_results
from tiedvsuntied.analysis.stats import first_replicates
from tiedvsuntied.studies.size_or_tokens import effects, pieces

THIRD = "sign_flip"  # the third edition's sweep
SAME = ["model", "vocab_size", "max_steps", "seed", "arm", "lr", "init_std"]
TWIN_COLUMNS = [*SAME, "point", "fourth", "third", "shift", "cpu_s_fourth", "cpu_s_third"]
FLOOR_COLUMNS = ["point", "seed", "fourth", "third", "floor"]
SHIPPED = effects.STUDY.home / "results"  # the study's bundle
AGAIN_COLUMNS = [*SAME, "point", "shipped", "again", "shift", "hardware_shipped", "hardware_again"]


def _third(runs: pd.DataFrame) -> pd.DataFrame:
    """The third edition's finished replicate-0 runs that trained bf16, with their arm."""
    done = first_replicates(
        runs[
            runs["sweep"].astype(str).eq(THIRD)
            & runs["status"].eq("finished")
            & runs["precision"].eq("bf16")
        ]
    )
    return done.assign(arm=arms_of(done))


def twins(runs: pd.DataFrame) -> pd.DataFrame:
    """TWIN_COLUMNS: each a0 run (``effects.chosen`` at pieces.REUSED's points) beside its twin;
    ``fourth``, ``third``: test bits per byte; ``shift``: fourth − third; CPU-seconds of each."""
    fourth = effects.chosen(runs)
    fourth = fourth[fourth["point"].isin(pieces.REUSED)]
    if fourth.empty or "precision" not in runs:
        return pd.DataFrame(columns=TWIN_COLUMNS)
    keep = [*SAME, effects.VALUE, "cpu_time_s"]
    both = fourth[[*keep, "point"]].merge(
        _third(runs)[keep], on=SAME, suffixes=("_fourth", "_third")
    )
    both = both.rename(
        columns={
            f"{effects.VALUE}_fourth": "fourth",
            f"{effects.VALUE}_third": "third",
            "cpu_time_s_fourth": "cpu_s_fourth",
            "cpu_time_s_third": "cpu_s_third",
        }
    )
    both["shift"] = both["fourth"] - both["third"]
    return both[TWIN_COLUMNS].sort_values(["point", "seed", "arm"]).reset_index(drop=True)


def floor(table: pd.DataFrame, pair: tuple[str, str] = ("fourth", "third")) -> pd.DataFrame:
    """FLOOR_COLUMNS (``pair`` in place of fourth and third): per point and seed where both arms
    have twins, tied − untied here (``pair[0]``) and there (``pair[1]``), and |here − there|."""
    here, there = pair
    columns = ["point", "seed", here, there, "floor"]
    wide = table.pivot_table(index=["point", "seed"], columns="arm", values=list(pair))
    if wide.empty or not {"tied", "untied"} <= set(wide.columns.get_level_values("arm")):
        return pd.DataFrame(columns=columns)
    out = pd.DataFrame({e: wide[(e, "tied")] - wide[(e, "untied")] for e in pair}).dropna()
    out["floor"] = (out[here] - out[there]).abs()
    return out.reset_index()[columns]


def again(shipped: pd.DataFrame, rerun: pd.DataFrame) -> pd.DataFrame:
    """AGAIN_COLUMNS: each finished run of ``rerun`` beside the shipped run of its id (test bpb;
    ``shift``: again − shipped) and the processor each computed on; no run of another id."""
    keep = [*SAME, "point", "run_id", effects.VALUE, "hardware"]
    mine = effects.chosen(shipped)[keep]
    done = rerun[rerun["status"].eq("finished")]
    done = done.assign(
        arm=arms_of(done), point=[effects.point_of(r) for r in done.to_dict("records")]
    )
    both = mine.merge(done[keep], on=[*SAME, "point", "run_id"], suffixes=("_shipped", "_again"))
    both = both.rename(
        columns={f"{effects.VALUE}_shipped": "shipped", f"{effects.VALUE}_again": "again"}
    )
    both["shift"] = both["again"] - both["shipped"]
    return both[AGAIN_COLUMNS].sort_values(["point", "seed", "arm"]).reset_index(drop=True)


def main(argv: list[str] | None = None) -> int:
    """Print the processor floor: the runs in AGAIN beside the shipped runs of the same ids."""
    parser = argparse.ArgumentParser(prog="python -m tiedvsuntied.studies.size_or_tokens.twins")
    parser.add_argument("again", help="a results directory of shipped runs trained again")
    parser.add_argument("--shipped", default=SHIPPED, help="the study's bundle (its results/)")
    args = parser.parse_args(argv)
    try:
        table = again(load_results(args.shipped).runs, load_results(args.again).runs)
    except ResultsError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if table.empty:
        print(
            f"error: no finished run in {args.again} has a shipped twin in {args.shipped}",
            file=sys.stderr,
        )
        return 2
    print(table.to_markdown(index=False, floatfmt=".6f"))
    print()
    print(floor(table, ("again", "shipped")).to_markdown(index=False, floatfmt=".6f"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
