"""Each arm's embedding-side lr multiplier, from the lr check (HYPOTHESES.md, "Learning rates").

    python experiments/tie_x_init_books/choose_lr.py results/tie_x_init_books

Reads the sweep's finished runs (the lr check is its nano, seed-0 runs; the rule is
``tiedvsuntied.studies.tie_x_init_books.analysis.chosen_lr``; no torch) and writes
``lr_choice.tsv`` beside this file: per arm, the final validation loss at each multiplier, the one
with the lowest, and ``run_next`` where that is an edge (run.sh's ``lr-edge`` piece runs it;
then rerun this). The test split is never read.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tiedvsuntied.analysis.load import load_results
from tiedvsuntied.studies.tie_x_init_books.analysis import chosen_lr

OUT = Path(__file__).with_name("lr_choice.tsv")


def main(argv: list[str]) -> None:
    if len(argv) != 1:
        sys.exit("usage: choose_lr.py SWEEP_DIR (e.g. results/tie_x_init_books)")
    table = chosen_lr(load_results(argv[0]).runs)
    if table.empty:
        sys.exit(f"no finished nano seed-0 run in {argv[0]}")
    table.to_csv(OUT, sep="\t", index=False)
    print(table.round(4).to_string(index=False))
    print(f"written: {OUT}")


if __name__ == "__main__":
    main(sys.argv[1:])
