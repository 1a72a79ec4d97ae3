"""One ladder point predicted from all the others, or a body not run yet predicted from them all:
out-of-sample tests of the exploratory readings (README, "The body ladder"; PREDICTIONS.md).

    python experiments/sign_flip/held_out.py experiments/sign_flip/results --point 256,4,8192
    python experiments/sign_flip/held_out.py experiments/sign_flip/results --model body512x8

Each ladder's own OLS line (tied − untied test bpb at d^-0.5, on the log of rho, of tokens per
parameter, or of the tied model's parameters; studies.sign_flip.curve), read at the point's
value on that axis, with its 95% band. ``--point``: the lines fitted without the point
(curve.held_out), beside the point's own seeds and ``off`` = point − prediction with a
t-interval over its seeds; a reading whose ``off`` interval excludes 0 is contradicted by the
point. ``--model``: a body of conf/model/ at ``--vocab-size`` (its parameters counted from the
config, its tokens those of the runs at that vocabulary: every point reads the same text), from
every point (curve.predict). No torch.
"""

from __future__ import annotations

import argparse
import sys

import pandas as pd

from tiedvsuntied.analysis.load import ResultsError, load_results
from tiedvsuntied.model.accounting import count_parameters_for, head_share
from tiedvsuntied.presets import presets
from tiedvsuntied.studies.sign_flip.curve import held_out, predict

SHOWN = ["axis", "ladder", "at", "fit", "fit_low", "fit_high", "n_seeds", "diff", "low", "high"]
SHOWN += ["off", "off_low", "off_high", "in_range"]


def point(text: str) -> tuple[int, int, int]:
    """``n_embd,n_layer,vocab_size`` as three integers."""
    try:
        n_embd, n_layer, vocab_size = (int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"want n_embd,n_layer,vocab_size, got {text!r}") from None
    return n_embd, n_layer, vocab_size


def coordinates(runs: pd.DataFrame, model: str, vocab_size: int) -> dict[str, float]:
    """A body of conf/model/ at ``vocab_size``: its rho, tokens per parameter and parameters
    (tied), the tokens being what the finished runs at that vocabulary read."""
    found = presets("model")
    if model not in found:
        raise ValueError(f"--model {model!r} is not in conf/model; valid: {sorted(found)}")
    config = found[model] | {"vocab_size": vocab_size}
    tokens = runs.loc[runs["status"].eq("finished") & runs["vocab_size"].eq(vocab_size), "tokens"]
    if tokens.empty:
        ran = sorted(runs["vocab_size"].dropna().unique().tolist())
        raise ValueError(f"--vocab-size {vocab_size}: no finished run read it; valid: {ran}")
    counts = count_parameters_for(config, tie=True)
    return {
        "rho": head_share(counts)["rho"],
        "tokens_per_param": float(tokens.median()) / counts["total"],
        "params_total": counts["total"],
    }


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", help="the study's bundle or sweep directory")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--point", type=point, help="a point that ran: n_embd,n_layer,vocab_size")
    which.add_argument("--model", help="a body of conf/model/ (e.g. body512x8), not run yet")
    parser.add_argument("--vocab-size", type=int, default=8192, help="with --model (8192)")
    args = parser.parse_args(argv)
    try:
        runs = load_results(args.results).runs
        if args.point:
            table = held_out(runs, *args.point)
        else:
            table = predict(runs, coordinates(runs, args.model, args.vocab_size))
    except (ResultsError, ValueError) as error:
        sys.exit(f"held_out.py: {error}")
    text = table[[c for c in SHOWN if c in table]].to_markdown(index=False, floatfmt=".4g")
    print(text)
    return text


if __name__ == "__main__":
    main()
