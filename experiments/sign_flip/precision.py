"""What the precision moved: the study's seed-0 pairs again in fp32, against their bf16 runs.

    python experiments/sign_flip/precision.py \\
        experiments/sign_flip/results experiments/sign_flip/results_fp32

``trainer.precision=auto`` trains bf16 where the processor has bf16 units (the AMX machines most
of the study ran on) and fp32 elsewhere (the AVX2 EPYC of 11-29, where 6 shipped runs trained
in fp32). ``python -m tiedvsuntied.study sign_flip precision`` trains the seed-0 pairs of
V = 40,960 and 8,192 (tied and untied at d^-0.5, each at its chosen lr) in fp32, in the sweep
``sign_flip_fp32``. Per run: its test bpb in bf16 and in fp32 and the shift; per pair: tied −
untied in each and how far it moved, the precision floor of a contrast whose arms trained in
different precisions. No torch.
"""

from __future__ import annotations

import argparse
import sys

import pandas as pd

from tiedvsuntied.analysis.load import ResultsError, load_results
from tiedvsuntied.studies.sign_flip.analysis import CELL, VALUE, grid, ladder

KEY = [*CELL, "seed", "arm", "lr"]  # a run and its twin in the other precision


def shifts(runs: pd.DataFrame) -> pd.DataFrame:
    """Per run trained in both precisions: test bpb in bf16 (the study's run at its arm's chosen
    lr) and in fp32, and fp32 − bf16."""
    bf16 = grid(runs[runs["precision"].eq("bf16")])
    fp32 = ladder(runs[runs["sweep"].eq("sign_flip_fp32") & runs["precision"].eq("fp32")])
    both = bf16[[*KEY, VALUE]].merge(fp32[[*KEY, VALUE]], on=KEY, suffixes=("_bf16", "_fp32"))
    return both.assign(shift=both[f"{VALUE}_fp32"] - both[f"{VALUE}_bf16"])


def moved(table: pd.DataFrame) -> pd.DataFrame:
    """Per (cell, seed) with both arms in both precisions: tied − untied in each, and how far
    fp32 moved it."""
    wide = table.pivot_table(
        index=[*CELL, "seed"], columns="arm", values=[f"{VALUE}_bf16", "shift"]
    )
    both = pd.MultiIndex.from_product([[f"{VALUE}_bf16", "shift"], ["tied", "untied"]])
    wide, out = wide.reindex(columns=both), pd.DataFrame(index=wide.index)
    out["diff_bf16"] = wide[(f"{VALUE}_bf16", "tied")] - wide[(f"{VALUE}_bf16", "untied")]
    out["diff_moved"] = wide[("shift", "tied")] - wide[("shift", "untied")]
    out["diff_fp32"] = out["diff_bf16"] + out["diff_moved"]
    return out.dropna().reset_index()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("results", nargs="+", help="the study's bundle and its fp32 bundle")
    args = parser.parse_args(argv)
    try:
        runs = load_results(*args.results).runs
    except ResultsError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    table = shifts(runs)
    if table.empty:
        print("error: no run of sweep sign_flip_fp32 with its bf16 twin", file=sys.stderr)
        return 2
    print(table.round(4).to_markdown(index=False), end="\n\n")
    print(moved(table).round(4).to_markdown(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
