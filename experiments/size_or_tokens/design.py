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
from pathlib import Path

import numpy as np
import pandas as pd

from tiedvsuntied.analysis.load import load
from tiedvsuntied.analysis.stats import detectable, power
from tiedvsuntied.model.accounting import count_parameters_for, flops_per_token, head_share
from tiedvsuntied.presets import presets
from tiedvsuntied.studies.sign_flip import analysis as sign_flip

HERE = Path(__file__).parent
THIRD = HERE.parent / "sign_flip"
V = 8192
BYTES_PER_TOKEN = 3.6258  # fold 0's training split at V = 8,192 (tiedvsuntied/studies/sign_flip/)
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
    """tiedvsuntied.study.declare.Point's steps rule: the steps that read ``budget`` bytes at fold
    0's rate."""
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
    """Each committed contrast at 4 seeds (two-sided t, df = 3, alpha 0.05): its per-seed sd
    from the third edition's at 10 MB (a 45 MB cell's assumed the same as its body's at 10 MB,
    the two budgets independent; and that sd doubled), the smallest effect found with 80%
    power, and the power at the readings' predicted difference. P: d = 256 x 8's tied - untied
    at 45 MB minus at 10 MB (tokens: micro-at-10 MB's effect - d = 256 x 8's; size: 0). S1: the
    same for micro (tokens: the body ladder's slope on ln tokens per parameter x ln 4.525;
    size: 0). S2: d = 256 x 8 at 45 MB minus micro at 10 MB, equal tokens per parameter
    (tokens: 0; size: the same difference as P, negative). Sign: d = 512 x 8's tied - untied
    (sd: d = 256 x 8's; PREDICTIONS.md's body-ladder line, -0.005)."""
    d256, micro = cells.loc[(256, 8)], cells.loc[(128, 4)]
    gap = micro["diff"] - d256["diff"]
    contrasts = [
        ("P: d256x8 45 MB - 10 MB", math.sqrt(2) * d256["sd"], gap),
        ("S1: micro 45 MB - 10 MB", math.sqrt(2) * micro["sd"], 0.0125 * math.log(MB45 / MB10)),
        ("S2: d256x8 45 MB - micro 10 MB", math.hypot(d256["sd"], micro["sd"]), gap),
        ("sign: d512x8 10 MB", d256["sd"], 0.005),
    ]
    rows = []
    for name, sd, predicted in contrasts:
        for scale in (1, 2):
            rows.append(
                {
                    "contrast": name,
                    "sd": sd * scale,
                    "sd scaled": scale,
                    "detectable at 80%": detectable(sd * scale, 4),
                    "predicted |difference|": predicted,
                    "power there": power(predicted, sd * scale, 4),
                }
            )
    return pd.DataFrame(rows)


# HYPOTHESES.md's pieces in priority order: (piece, body, bytes, runs, what runs). A new cell's
# 14: each arm's lr check at seed 0 (3 lr, and one x2 step beyond an edge expected), seeds 1-3.
PIECES = [
    ("a0", "d256x8", MB10, 8, "10 MB row again, pinned bf16: seeds 0-3 x 2 arms"),
    ("a0", "micro", MB10, 8, "10 MB row again, pinned bf16: seeds 0-3 x 2 arms"),
    ("a1", "d256x8", MB45, 14, "lr check 2 x (3 + 1 edge), seeds 1-3 x 2"),
    ("a2", "micro", MB45, 14, "lr check 2 x (3 + 1 edge), seeds 1-3 x 2"),
    ("b1", "d512x8", MB10, 14, "lr check 2 x (3 + 1 edge), seeds 1-3 x 2"),
    ("b1-own", "d512x8", MB10, 4, "untied at its own multipliers (emb 4, head 1), seeds 0-3"),
    ("b2", "d384x6", MB10, 14, "lr check 2 x (3 + 1 edge), seeds 1-3 x 2"),
    ("c1", "d256x8", MB45, 7, "tie then untie: lr check 3 + 1 edge, seeds 1-3"),
    ("c2", "d512x8", MB10, 7, "tie then untie: lr check 3 + 1 edge, seeds 1-3"),
]


# This session's bench (docs/speed.md, "The fourth edition's bodies"): tokens per CPU-second of
# the bf16 compiled step, tied, one thread, on an AMX Xeon, 2026-12-01; a whole run's rate is
# ~0.89 of its step's (the third edition's d = 256 x 8: 1,777 a run against the bench's 1,995)
BENCH_STEP = {"micro": 7386, "d256x8": 2759, "d384x6": 1600, "d512x8": 1190}
RUN_PER_STEP = 0.89


def budget(measured: pd.DataFrame) -> pd.DataFrame:
    """CPU-hours per piece at the third edition's bf16 rates (whole runs' CPU seconds per
    token: micro and d = 256 x 8 measured; d = 384 x 6 and 512 x 8 d = 256 x 8's scaled by
    FLOPs per token, i.e. at its MFU), and at this session's bench (``_here``: BENCH_STEP x
    RUN_PER_STEP), with running totals."""
    rate = {
        "micro": measured.loc[(128, 4, "bf16"), "cpu_s_per_mtok"],
        "d256x8": measured.loc[(256, 8, "bf16"), "cpu_s_per_mtok"],
    }
    for body in ("d384x6", "d512x8"):
        ratio = flops_per_token(shape(body)) / flops_per_token(shape("d256x8"))
        rate[body] = rate["d256x8"] * ratio
    rows = []
    for piece, body, budget_bytes, runs, what in PIECES:
        tokens = steps_for(budget_bytes) * TOKENS_PER_STEP
        per_run = tokens / 1e6 * rate[body] / 3600
        here = tokens / (BENCH_STEP[body] * RUN_PER_STEP) / 3600
        rows.append(
            {
                "piece": piece,
                "cell": f"{body} @ {budget_bytes / 1e6:.2f} MB",
                "runs": runs,
                "what": what,
                "cpu_h_per_run": per_run,
                "cpu_h": runs * per_run,
                "cpu_h_per_run_here": here,
                "cpu_h_here": runs * here,
            }
        )
    table = pd.DataFrame(rows)
    return table.assign(
        cumulative=table["cpu_h"].cumsum(), cumulative_here=table["cpu_h_here"].cumsum()
    )


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
    print("\n## power at 4 seeds\n" + power_table(cells).round(4).to_markdown(index=False))
    measured = rates(runs)
    print("\n## measured rates (third edition)\n" + measured.round(3).to_markdown())
    print("\n## budget, CPU-hours\n" + budget(measured).round(2).to_markdown(index=False))
    if args.folds:
        print("\n## each seed's training split\n" + folds().round(4).to_string(index=False))


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
