"""Exploratory (not in HYPOTHESES.md, added after the runs started): count baselines fitted on
exactly the tokens a run trained on, beside those fitted on the whole training split.

    python experiments/tie_x_init_books/seen_baselines.py            # writes seen_baselines.tsv

The study's models see 0.5 M (nano) or 1.0 M (micro) of the ~19 M training tokens
(`trainer.sampling=once`: 500 steps of 8 windows, no token twice); the registered reference
points (summary.json `heldout`) are fitted on all ~19 M. A bigram fitted on the run's own
windows answers "does the model beat counting on what it saw?", the fairer bar for H5.

Per size and seed it rebuilds the run's training windows from the config alone (the sampler is
a pure function of seed and step, the same for every arm), fits the add-one unigram and the
interpolated Kneser-Ney bigram on them, and scores the test split's evaluation windows (the ones
every run's test loss is measured on). Windows are concatenated in window order: each boundary
adds one pair that is not in the text (1 in 129 pairs at nano, 1 in 257 at micro).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from tiedvsuntied.data.baselines import fit, score_documents
from tiedvsuntied.data.batches import eval_window_starts
from tiedvsuntied.data.cache import prepare_data
from tiedvsuntied.train.config import Config
from tiedvsuntied.train.setup import train_sampler

CONF = Path(__file__).resolve().parents[2] / "conf"
OUT = Path(__file__).with_name("seen_baselines.tsv")
SIZES = ("nano", "micro")
SEEDS = range(5)


def compose_run(model: str, seed: int) -> Config:
    """The typed config of the study's run (any arm: the data and the windows are shared)."""
    ConfigStore.instance().store(name="base_config", node=Config)
    overrides = ["+experiment=tie_x_init_books", f"model={model}", f"seed={seed}"]
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        return OmegaConf.to_object(compose(config_name="config", overrides=overrides))


def trained_tokens(corpus, cfg) -> np.ndarray:
    """The run's training windows (each block_size + 1 tokens), concatenated in order."""
    t = cfg.trainer
    sampler = train_sampler(cfg, corpus)  # the trainer's own batches
    starts = [sampler.starts(s, m) for s in range(t.max_steps) for m in range(t.grad_accum)]
    starts = np.concatenate(starts)
    tokens = corpus.tokens("train")
    return np.asarray(tokens[starts[:, None] + np.arange(cfg.model.block_size + 1)]).ravel()


def heldout_windows(corpus, cfg, split: str = "test") -> tuple[np.ndarray, np.ndarray]:
    """The split's evaluation windows as one stream and each window's offset in it."""
    block = cfg.model.block_size
    tokens = corpus.tokens(split)
    starts = eval_window_starts(len(tokens), block, cfg.trainer.eval_windows)
    windows = np.asarray(tokens[starts[:, None] + np.arange(block + 1)])
    return windows.ravel(), np.arange(len(starts)) * (block + 1)


def one_run(model: str, seed: int) -> dict:
    cfg = compose_run(model, seed)
    corpus = prepare_data(cfg.data)
    stream, offsets = heldout_windows(corpus, cfg)
    row = {"model": model, "seed": seed}
    for fitted_on, train in (("seen", trained_tokens(corpus, cfg)), ("split", None)):
        train = corpus.tokens("train") if train is None else train
        models = fit(train, corpus.vocab_size)
        scores = score_documents(models, stream, offsets)
        weights = scores["n_tokens"]
        row[f"n_train_{fitted_on}"] = int(models.n_train)
        for key in ("unigram", "bigram", "unseen_frac"):
            row[f"test_{key}_{fitted_on}"] = float(np.average(scores[key], weights=weights))
    return row


def main() -> None:
    table = pd.DataFrame([one_run(model, seed) for model in SIZES for seed in SEEDS])
    table.to_csv(OUT, sep="\t", index=False, float_format="%.4f")
    print(table.round(3).to_string(index=False))
    print(f"written: {OUT}")


if __name__ == "__main__":
    main()
