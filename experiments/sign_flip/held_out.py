"""One ladder point predicted from all the others: an out-of-sample test of the exploratory
readings (README, "The body ladder so far"; PREDICTIONS.md).

    python experiments/sign_flip/held_out.py experiments/sign_flip/results --point 256,4,8192

Each ladder's own OLS line (tied − untied test bpb at d^-0.5 on the log of rho, of tokens per
parameter, or of the tied model's parameters; analysis.sign_flip_curve.held_out), fitted without
the point, evaluated at the point, with its 95% band; beside it the point's own seeds (none yet:
blank) and ``off`` = point − prediction with a t-interval over the point's seeds. A reading
whose ``off`` interval excludes 0 is contradicted by the point. No torch.
"""

from __future__ import annotations

import argparse
import sys

from tiedvsuntied.analysis.load import ResultsError, load_results
from tiedvsuntied.analysis.sign_flip_curve import held_out

SHOWN = ["axis", "ladder", "at", "fit", "fit_low", "fit_high", "n_seeds", "diff", "low", "high"]
SHOWN += ["off", "off_low", "off_high", "in_range"]


def point(text: str) -> tuple[int, int, int]:
    """``n_embd,n_layer,vocab_size`` as three integers."""
    try:
        n_embd, n_layer, vocab_size = (int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"want n_embd,n_layer,vocab_size, got {text!r}") from None
    return n_embd, n_layer, vocab_size


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", help="the study's bundle or sweep directory")
    parser.add_argument("--point", type=point, required=True, help="n_embd,n_layer,vocab_size")
    args = parser.parse_args(argv)
    try:
        table = held_out(load_results(args.results).runs, *args.point)
    except (ResultsError, ValueError) as error:
        sys.exit(f"held_out.py: {error}")
    text = table[SHOWN].to_markdown(index=False, floatfmt=".4g")
    print(text)
    return text


if __name__ == "__main__":
    main()
