"""The fourth edition's design numbers, measured before any of its runs (HYPOTHESES.md).

    python experiments/size_or_tokens/design.py            # cells, spreads, power, budget
    python experiments/size_or_tokens/design.py --folds    # + each seed's training split (BPE)

Reads the third edition's bundles (experiments/sign_flip/results*, read-only) for its V = 8,192
cells' per-seed paired differences tied - untied (test bits per byte), their noise floors and
each run's CPU seconds per token; computes every planned cell's steps, tokens, parameters,
tokens per parameter and rho from conf/model's shapes; the power of the primary contrast at
4 seeds (noncentral t, the second edition's ``power``); and the budget in CPU-hours from the
third edition's measured rates. ``--folds`` tokenizes seeds 0-3's splits at V = 8,192 (the BPE
trained on each training split; ~3 min a fold, cached after) and says how many steps of
``trainer.sampling=once`` each holds.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent / "tie_x_init_books"))
from power import detectable, power  # noqa: E402  (the second edition's, one definition)

from tiedvsuntied.analysis import sign_flip  # noqa: E402
from tiedvsuntied.analysis.load import load  # noqa: E402
from tiedvsuntied.model.accounting import (  # noqa: E402
    count_parameters_for,
    flops_per_token,
    head_share,
)
from tiedvsuntied.presets import presets  # noqa: E402

THIRD = HERE.parent / "sign_flip"
V = 8192
BYTES_PER_TOKEN = 3.6258  # fold 0's training split at V = 8,192 (sign_flip/run.sh, --folds)
TOKENS_PER_STEP = 2048  # 8 windows of 256
MB10 = 10_000_000
# d = 256 x 8 at micro-at-10 MB's tokens per parameter: micro's 1,347 steps x the ratio of the
# two tied models' parameters (8,481,280 / 1,874,688) = 6,094.0 steps; in bytes at fold 0's rate
MB45 = 6094 * TOKENS_PER_STEP * BYTES_PER_TOKEN  # 45,251,840 bytes
BODIES = {"micro": "micro", "d256x8": "body256x8", "d384x6": "body384x6", "d512x8": "body512x8"}
CELLS = [  # (body, bytes of text, piece), HYPOTHESES.md's design table
    ("micro", MB10, "a (third edition's cell)"),
    ("d256x8", MB10, "a (third edition's cell)"),
    ("micro", MB45, "a"),
    ("d256x8", MB45, "a"),
    ("d512x8", MB10, "b"),
    ("d384x6", MB10, "b"),
]


def steps_for(budget: float) -> int:
    """sign_flip/run.sh's rule: the steps that read ``budget`` bytes at fold 0's rate."""
    return int(budget / (TOKENS_PER_STEP * BYTES_PER_TOKEN) + 0.5)


def shape(body: str) -> dict:
    return {**presets("model")[BODIES[body]], "vocab_size": V}


def planned() -> pd.DataFrame:
    """Every cell's steps, tokens, parameters (tied, untied), tokens per parameter, rho, and
    training FLOPs per token."""
    rows = []
    for body, budget, piece in CELLS:
        cfg, steps = shape(body), steps_for(budget)
        tied, untied = count_parameters_for(cfg, True), count_parameters_for(cfg, False)
        rows.append(
            {
                "body": body,
                "piece": piece,
                "bytes": round(budget),
                "steps": steps,
                "tokens": steps * TOKENS_PER_STEP,
                "params_tied": tied["total"],
                "params_untied": untied["total"],
                "tokens_per_param": steps * TOKENS_PER_STEP / tied["total"],
                **head_share(tied),
                "flops_per_token": flops_per_token(cfg),
            }
        )
    return pd.DataFrame(rows)


def third_edition() -> tuple[pd.DataFrame, pd.DataFrame]:
    """The third edition's runs (all four bundles: for the rates) and the main bundle's runs
    (its map: pairs and floors)."""
    extra = [THIRD / p for p in ("results_clip", "results_mult2d", "results_fp32")]
    main = load([THIRD / "results"]).runs
    return pd.concat([main, load(extra).runs], ignore_index=True), main


def spreads(both: pd.DataFrame) -> pd.DataFrame:
    """Per V = 8,192 cell: the mean and per-seed sd of tied - untied, its seeds, rho, tokens per
    parameter, each arm's lr, precision and the commits its runs record."""

    def row(cell: pd.DataFrame) -> pd.Series:
        cell = cell.sort_values("seed")
        commits = {*cell["git_commit_t"], *cell["git_commit_u"]}
        return pd.Series(
            {
                "seeds": len(cell),
                "diff": cell["diff"].mean(),
                "sd": cell["diff"].std(ddof=1),
                "per_seed": ", ".join(f"{d:+.4f}" for d in cell["diff"]),
                "rho": cell["rho_t"].mean(),
                "tokens_per_param": cell["tokens_per_param_t"].mean(),
                "params_tied": cell["params_total_t"].iloc[0],
                "steps": cell["max_steps_t"].iloc[0],
                "lr_tied": cell["lr_t"].iloc[0],
                "lr_untied": cell["lr_u"].iloc[0],
                "precision": sign_flip.precisions(cell),
                "commits": " ".join(sorted(str(c)[:7] for c in commits)),
            }
        )

    return both.groupby(["n_embd", "n_layer"]).apply(row, include_groups=False)


def rates(runs: pd.DataFrame) -> pd.DataFrame:
    """CPU seconds per million tokens trained (whole runs: steps, evaluation, set-up) and MFU
    against each run's own measured peak, per body and precision, at V = 8,192 (finished runs
    that counted their CPU time)."""
    done = runs[runs["status"].eq("finished") & (runs["vocab_size"] == V)]
    done = done[done["cpu_time_s"].notna()]
    done = done.assign(
        cpu_s_per_mtok=done["cpu_time_s"] / done["tokens"] * 1e6,
        mfu=done["flops_per_token"]
        * done["tokens"]
        / done["cpu_time_s"]
        / (done["peak_tflops"] * 1e12),
    )
    keys = ["n_embd", "n_layer", "precision"]
    return done.groupby(keys).agg(
        runs=("run_id", "size"),
        cpu_s_per_mtok=("cpu_s_per_mtok", "median"),
        mfu=("mfu", "median"),
        peak_tflops=("peak_tflops", "median"),
        flops_per_token=("flops_per_token", "first"),
    )


def power_table(cells: pd.DataFrame) -> pd.DataFrame:
    """The primary contrast (d = 256 x 8: tied - untied at 45 MB minus at 10 MB, per seed) at
    4 seeds: its sd from the third edition's per-seed sd at 10 MB (the 45 MB cell's assumed the
    same, the two independent: sqrt 2), and, as the pessimistic case, micro's (the 2 x 2's
    largest); the smallest effect found with 80% power, and the power at the two readings'
    predicted difference (tokens: micro-at-10 MB's effect - d = 256 x 8's at 10 MB; size: 0)."""
    d256, micro = cells.loc[(256, 8)], cells.loc[(128, 4)]
    predicted = micro["diff"] - d256["diff"]
    rows = []
    for source, sd in (("d = 256 x 8's sd", d256["sd"]), ("micro's sd", micro["sd"])):
        for scale in (1, 2):
            sd_delta = math.sqrt(2) * sd * scale
            rows.append(
                {
                    "sd from": source + (" x 2" if scale == 2 else ""),
                    "sd of the contrast": sd_delta,
                    "detectable at 80%": detectable(sd_delta, 4),
                    "predicted difference": predicted,
                    "power there": power(predicted, sd_delta, 4),
                }
            )
    return pd.DataFrame(rows)


def folds() -> pd.DataFrame:
    """Each seed's training split at V = 8,192 (its own BPE): tokens, bytes, bytes per token,
    and the steps of 8 x 256 tokens that ``trainer.sampling=once`` allows (check_budget)."""
    from tiedvsuntied.data.__main__ import load_config
    from tiedvsuntied.data.cache import prepare_data

    rows = []
    for seed in range(4):
        cfg = load_config("gutenberg", [f"heldout_fold={seed}", "encoding=bpe", f"vocab_size={V}"])
        info = prepare_data(cfg).info()
        tokens, bpt = info["n_tokens"]["train"], info["bytes_per_token"]["train"]
        allowed = (tokens - 1) // 256 // 8
        rows.append(
            {
                "seed": seed,
                "train_tokens": tokens,
                "bytes_per_token": bpt,
                "train_bytes": tokens * bpt,
                "steps_allowed": allowed,
                "steps_45MB": steps_for(MB45),
                "bytes_read_45MB": steps_for(MB45) * TOKENS_PER_STEP * bpt,
                "share_read": steps_for(MB45) / allowed,
            }
        )
    return pd.DataFrame(rows)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--folds", action="store_true", help="also tokenize seeds 0-3's splits")
    args = p.parse_args(argv)
    pd.set_option("display.width", 200, "display.max_columns", 30)
    print(f"budget: {MB45:,.0f} bytes = {steps_for(MB45):,} steps at {BYTES_PER_TOKEN} bytes/token")
    print("\n## planned cells\n" + planned().round(4).to_markdown(index=False))
    runs, main = third_edition()
    both = sign_flip.pairs(main)
    cells = spreads(both[both["vocab_size"] == V])
    print("\n## third edition, V = 8,192 cells\n" + cells.round(5).to_markdown())
    print("\n## noise floors (|replicate - first| of tied - untied, seed 0, 2 threads)")
    print(sign_flip.floors(main, both).round(5).to_markdown())
    print(
        "\n## power of the primary contrast, 4 seeds\n" + power_table(cells).round(4).to_markdown()
    )
    print("\n## measured rates (third edition)\n" + rates(runs).round(3).to_markdown())
    if args.folds:
        print("\n## each seed's training split\n" + folds().round(4).to_markdown(index=False))


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
