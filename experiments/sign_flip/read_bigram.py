"""The second reference bigram: fitted on the text each run read, not on its whole training split.

    python experiments/sign_flip/read_bigram.py experiments/sign_flip/results

From the repository root (the runs' data paths are relative to it). Every run's summary holds
the count models fitted on its whole training split: a bar a short run may not pass, since the
runs here read 10 MB of its ~90. This asks the other question (../../shared/DESIGN.md, "Two
reference bigrams"): did the model learn more than counting what it read? Per (corpus, seed,
steps): the windows the run's batches read (data.batches.BatchSampler.read, so tied and untied
of a seed share them), a unigram and a Kneser-Ney bigram fitted on them (data.baselines.fit:
no pair crosses windows), scored on the run's test windows in bits per byte. The split's bigram
is recomputed beside it and checked against the one the run recorded. Then per ladder cell at
d^-0.5, each arm's test bpb beside both bigrams and how many of its seeds end below each.

Writes ``read_bigram.tsv`` beside this file (or ``--out``). Builds a corpus cache that is missing
(minutes per vocabulary and fold); no torch.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from omegaconf import OmegaConf

from tiedvsuntied.analysis.load import ResultsError, load_results
from tiedvsuntied.data.baselines import bits_per_byte, fit, score_windows
from tiedvsuntied.data.batches import BatchSampler, EvalSet
from tiedvsuntied.data.cache import prepare_data
from tiedvsuntied.data.config import DataConfig
from tiedvsuntied.results.records import read_config
from tiedvsuntied.studies.sign_flip.analysis import PRIMARY_INIT, body_label, pairs

OUT = Path(__file__).with_name("read_bigram.tsv")
KEY = ["vocab_size", "seed", "steps"]  # what the text a run read depends on, in this study


def reading(run: pd.Series) -> dict:
    """What decides the text a run read and the windows its test loss was measured on."""
    config = read_config(Path(run["path"]))
    trainer = config["trainer"]
    return {
        "data": json.dumps(config["data"], sort_keys=True),
        "seed": config["seed"],
        "steps": int(run["step"]),
        "block_size": config["model"]["block_size"],
        **{k: trainer[k] for k in ("batch_size", "grad_accum", "sampling", "eval_windows")},
        "recorded_split_bigram_bpb": run["test_bigram_bpb"],
    }


def read_bigram(setup: dict) -> dict:
    """One setup's two bigrams (and unigrams) on its test windows, in bits per byte."""
    data = OmegaConf.merge(OmegaConf.structured(DataConfig), json.loads(setup["data"]))
    corpus = prepare_data(OmegaConf.to_object(data))
    block = setup["block_size"]
    sampler = BatchSampler(
        corpus.tokens("train"),
        block,
        setup["batch_size"],
        setup["seed"],
        once=setup["sampling"] == "once",
        grad_accum=setup["grad_accum"],
    )
    rows = sampler.read(setup["steps"])
    test = EvalSet.of(corpus, "test", block, setup["eval_windows"])
    read = score_windows(fit(rows, corpus.vocab_size), test.windows)
    out = {"vocab_size": corpus.vocab_size, "read_tokens": rows[:, 1:].size}
    out |= {"train_tokens": corpus.n_tokens("train"), "bytes_per_token": test.bytes_per_token}
    for name, scores in (("read", read), ("split", test.baselines)):
        for model in ("unigram", "bigram"):
            out[f"{name}_{model}_bpb"] = bits_per_byte(np.mean(scores[model]), test.bytes_per_token)
    return out


def bigrams(runs: pd.DataFrame) -> pd.DataFrame:
    """Per distinct setup of the finished runs: :func:`read_bigram`."""
    setups = pd.DataFrame([reading(run) for _, run in runs.iterrows()])
    setups = setups.drop_duplicates(subset=setups.columns.drop("recorded_split_bigram_bpb"))
    rows = []
    for setup in setups.to_dict("records"):
        print(f"read_bigram.py: seed {setup['seed']}, {setup['steps']} steps", file=sys.stderr)
        rows.append({**setup, **read_bigram(setup)})
    table = pd.DataFrame(rows).drop(columns="data")
    # the same corpus and windows as the runs had, or the read bigram is not beside their loss
    table["split_matches_record"] = np.isclose(
        table["split_bigram_bpb"], table["recorded_split_bigram_bpb"], rtol=1e-9, atol=0
    )
    if not table["split_matches_record"].all():
        print("read_bigram.py: the split's bigram differs from a run's record", file=sys.stderr)
    return table[[*KEY, *table.columns.drop(KEY)]].sort_values(KEY, ignore_index=True)


def cells(runs: pd.DataFrame, table: pd.DataFrame) -> pd.DataFrame:
    """Each d^-0.5 cell: tied and untied test bpb beside both bigrams, and how many of its seeds
    end below each (below the split's: HYPOTHESES.md's H9)."""
    both = pairs(runs)
    both = both[both["init_std"].eq(PRIMARY_INIT)].assign(steps=both["step_t"])
    both = both.merge(table[[*KEY, "read_bigram_bpb", "split_bigram_bpb"]], on=KEY)
    for arm in ("t", "u"):
        for name in ("read", "split"):
            below = both[f"test_bpb_{arm}"] < both[f"{name}_bigram_bpb"]
            both[f"{arm}_below_{name}"] = below.astype(int)
    point = ["n_embd", "n_layer", "vocab_size"]
    out = both.groupby(point).agg(
        rho=("rho_t", "mean"),
        n=("seed", "size"),
        tied=("test_bpb_t", "mean"),
        untied=("test_bpb_u", "mean"),
        split_bigram=("split_bigram_bpb", "mean"),
        read_bigram=("read_bigram_bpb", "mean"),
        tied_below_split=("t_below_split", "sum"),
        untied_below_split=("u_below_split", "sum"),
        tied_below_read=("t_below_read", "sum"),
        untied_below_read=("u_below_read", "sum"),
    )
    out.insert(0, "body", [body_label(d, n) for d, n, _ in out.index])
    return out.reset_index().sort_values("rho", ignore_index=True)


def main(argv: list[str] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", help="the study's bundle or sweep directory")
    parser.add_argument("--out", type=Path, default=OUT, help=f"the TSV (default {OUT.name})")
    args = parser.parse_args(argv)
    try:
        runs = load_results(args.results).runs
    except ResultsError as error:
        sys.exit(f"read_bigram.py: {error}")
    runs = runs[runs["status"].eq("finished")]
    table = bigrams(runs)
    table.to_csv(args.out, sep="\t", index=False, float_format="%.6g")
    by_cell = cells(runs, table)
    print(by_cell.to_markdown(index=False, floatfmt=".4f"))
    return table, by_cell


if __name__ == "__main__":
    main()
