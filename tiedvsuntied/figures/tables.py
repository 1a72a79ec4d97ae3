"""The tables: parameters of every named size (md, tex) and the paired comparisons (md), each
of the latter under a first line that says how many intervals it holds, their method, the
primary contrast and the noise floor (:func:`analysis.caption`)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from tiedvsuntied.analysis import (
    PRIMARY_CONTRAST,
    arms_table,
    best_lr_comparison,
    interaction_table,
    markdown,
    paired_table,
    parameter_table,
)
from tiedvsuntied.figures.style import REGISTRY, Output, model_order


def write_param_tables(out_dir: str | Path, runs: pd.DataFrame | None = None) -> list[Path]:
    """:func:`analysis.parameter_table` as ``table_params.md`` and ``.tex`` in ``out_dir`` (counts
    with thousands separators), for the runs' vocabulary when they share one, else GPT-2's 50257."""
    vocab = runs["vocab_size"].dropna().unique() if runs is not None else []
    table = parameter_table(int(vocab[0]) if len(vocab) == 1 else 50257).rename(
        columns=lambda c: c.replace("_", " ")
    )
    tex = table.to_latex(
        index=False, float_format="%.3f", formatters={c: "{:,}".format for c in table.columns[5:-1]}
    )
    texts = {
        "md": table.to_markdown(index=False, intfmt=",") + "\n",
        "tex": tex.replace(",", "{,}"),
    }
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    paths = [Path(out_dir, f"table_params.{ext}") for ext in texts]
    for path, text in zip(paths, texts.values(), strict=True):
        path.write_text(text)
    return paths


REGISTRY["table_params"] = Output(
    "parameters of every named size, tied and untied (md, tex)",
    lambda results, out_dir, formats: (write_param_tables(out_dir, results.runs), None),
)


def interaction_text(runs: pd.DataFrame) -> str:
    """``table_interaction.md``: the tie effect at one init std minus at the other
    (PRIMARY_CONTRAST's levels, its row marked), and with several sizes, at the largest size minus
    at the smallest; or why there is none."""
    first, second = PRIMARY_CONTRAST.levels
    by_init = interaction_table(runs, "init_std", PRIMARY_CONTRAST.levels, ("final", "best"))
    parts = [
        "## Tying x init std\n\n"
        + (
            markdown(by_init)
            if len(by_init)
            else f"No cell has finished tied/untied pairs at both init_std={first} and {second}."
        )
    ]
    sizes = model_order(runs[runs["status"] == "finished"])
    if len(sizes) > 1:
        by_size = interaction_table(runs, "model", (sizes[-1], sizes[0]), ("final",))
        parts.append(
            f"## Tying x size ({sizes[-1]} − {sizes[0]})\n\n"
            + (markdown(by_size) if len(by_size) else "No seed has pairs at both sizes.")
        )
    return "\n\n".join(parts)


def write_tables(out_dir: str | Path, runs: pd.DataFrame) -> list[Path]:
    """``table_paired.md`` (every cell, final and best, with the noise floor),
    ``table_interaction.md`` (:func:`interaction_text`), ``table_classic.md`` (each arm at its own
    best learning rate) and ``table_arms.md`` (every arm against the tied one) in ``out_dir``."""
    classic, arms = best_lr_comparison(runs), arms_table(runs)
    texts = {
        "table_paired.md": markdown(paired_table(runs, ("final", "best", "final_val"))),
        "table_interaction.md": interaction_text(runs),
        "table_classic.md": markdown(classic)
        if len(classic)
        else "No learning-rate grid in these runs: no arm can be compared at its own best rate.",
        "table_arms.md": markdown(arms)
        if len(arms)
        else "No tied arm to compare the other arms with.",
    }
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    for name, text in texts.items():
        Path(out_dir, name).write_text(text + "\n")
    return [Path(out_dir, name) for name in texts]


REGISTRY["table_paired"] = Output(
    "tied − untied per cell with the noise floor, the interactions, each arm at its best lr (md)",
    lambda results, out_dir, formats: (write_tables(out_dir, results.runs), None),
)
