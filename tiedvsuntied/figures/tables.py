"""The tables (docs/figures.md): parameters of every named size, the paired comparisons under
the line :func:`analysis.stats.caption` writes, and the first steps."""

from __future__ import annotations

import pandas as pd

from tiedvsuntied.analysis.arms import ARMS_SIGN, arms_table, best_lr_comparison, interaction_table
from tiedvsuntied.analysis.early import STEP_COLUMNS, early_steps, early_summary
from tiedvsuntied.analysis.stats import PRIMARY_CONTRAST, markdown, paired_table
from tiedvsuntied.analysis.theory import parameter_table
from tiedvsuntied.figures import style


@style.table("table_params", "parameters of every named size, tied and untied (md, tex)")
def write_param_tables(runs: pd.DataFrame | None = None) -> dict[str, str]:
    """:func:`analysis.parameter_table` as ``table_params.md`` and ``.tex`` (counts with thousands
    separators), for the runs' vocabulary when they share one, else GPT-2's 50257."""
    vocab = runs["vocab_size"].dropna().unique() if runs is not None else []
    table = parameter_table(int(vocab[0]) if len(vocab) == 1 else 50257)
    table = table.rename(columns=lambda c: c.replace("_", " "))
    thousands = {c: "{:,}".format for c in table.columns[5:-1]}
    tex = table.to_latex(index=False, float_format="%.3f", formatters=thousands)
    md = table.to_markdown(index=False, intfmt=",") + "\n"
    return {"table_params.md": md, "table_params.tex": tex.replace(",", "{,}")}


def interaction_text(runs: pd.DataFrame) -> str:
    """``table_interaction.md``: the tie effect at one of PRIMARY_CONTRAST's init stds minus at
    the other (its row marked), and at the largest size minus the smallest; or why there is none."""
    first, second = PRIMARY_CONTRAST.levels
    by_init = interaction_table(runs, "init_std", PRIMARY_CONTRAST.levels, ("final", "best"))
    none = f"No cell has finished tied/untied pairs at both init_std={first} and {second}."
    sign = f"(tied − untied at {first}) − (tied − untied at {second})"
    shown = markdown(by_init, sign) if len(by_init) else none
    parts = [f"## Tying x init std\n\n{shown}"]
    sizes = style.model_order(runs[runs["status"] == "finished"])
    if len(sizes) > 1:
        by_size = interaction_table(runs, "model", (sizes[-1], sizes[0]), ("final",))
        none = "No seed has pairs at both sizes."
        parts.append(f"## Tying x size ({sizes[-1]} − {sizes[0]})\n\n")
        sign = f"(tied − untied at {sizes[-1]}) − (tied − untied at {sizes[0]})"
        parts[-1] += markdown(by_size, sign) if len(by_size) else none
    return "\n\n".join(parts)


@style.table(
    "table_paired",
    "tied − untied per cell with the noise floor, the interactions; with a learning-rate grid "
    "each arm at its best lr; with more arms, each against the tied one (md)",
)
def write_tables(runs: pd.DataFrame) -> dict[str, str]:
    """``table_paired.md``, ``table_interaction.md``, and where the runs have them
    ``table_classic.md`` and ``table_arms.md`` (as the registered description says)."""
    texts = {
        "table_paired.md": markdown(paired_table(runs, ("final", "best", "final_val"))),
        "table_interaction.md": interaction_text(runs),
    }
    classic = best_lr_comparison(runs)
    if len(classic) and (classic["lrs"] > 1).any():  # a learning-rate grid: two rates or more
        texts["table_classic.md"] = markdown(classic[classic["lrs"] > 1])
    arms = arms_table(runs)
    if len(arms) and not set(arms["arm"]) <= {"untied"}:  # arms beyond tied, untied (as paired)
        texts["table_arms.md"] = markdown(arms, ARMS_SIGN)
    return {name: text + "\n" for name, text in texts.items()}


def _steps_text(row: pd.Series, col: str) -> str:
    """'12 [10–15]' (median [range] over the runs that got there), '+ 1 never', or 'never'."""
    n, never = row[f"{col}_n"], row[f"{col}_never"]
    if n == 0:
        return "no d^-0.5 arm" if col == "step_below_arm" else "no runs"
    if never == n:
        return f"never (by step {int(row['last_step'])})"
    low, high = int(row[f"{col}_min"]), int(row[f"{col}_max"])
    text = f"{row[f'{col}_median']:g} [{low}–{high}]" if low != high else f"{low}"
    return text + (f"; {never} of {n} never" if never else "")


def _early_runs(table: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """early_steps' rows for reading: names, not run ids; steps as integers, NaN as '–'."""
    names = runs.set_index("run_id")["name"]
    steps = {c: table[c].map(lambda v: f"{v:.0f}" if pd.notna(v) else "–") for c in STEP_COLUMNS}
    return pd.DataFrame(
        {
            "run": table["name"],
            "status": table["status"],
            "loss": table["metric"],
            "last step": table["last_step"],
            "below ln V": steps["step_below_ln_v"],
            "d^-0.5 arm": table["arm_run_id"].map(names).fillna("–"),
            "its loss": table["arm_metric"].fillna("–"),
            "below the arm": steps["step_below_arm"],
        }
    )


@style.table("table_early", "first step below ln V and below the d^-0.5 arm, per cell and run (md)")
def write_early_table(runs: pd.DataFrame, history: pd.DataFrame) -> dict[str, str]:
    """``table_early.md``: per cell (median [range] over seeds), then per run, under what the
    runs are and how the steps were read (analysis.early_steps)."""
    table = early_steps(runs, history)
    summary = early_summary(table)
    steps = {c: [_steps_text(r, c) for _, r in summary.iterrows()] for c in STEP_COLUMNS}
    shown = pd.DataFrame(
        {
            "model": summary["model"],
            "variant": summary["variant"].replace("", "none"),
            "head": summary["tie"].map({True: "tied", False: "untied"}),
            "init std": summary["init_std"],
            "n": summary["n"],
            "below ln V": steps["step_below_ln_v"],
            "below the d^-0.5 arm": steps["step_below_arm"],
        }
    )
    metrics = ", ".join(sorted(table["metric"].dropna().unique())) or "none logged"
    parts = [
        style.describe_runs(runs),
        "First training step whose loss is below ln V, and below the loss of the run's "
        "d^-0.5 arm (same data, size, variant, tie and seed) at the same step: median "
        "[min–max] over seeds; 'never': not by the run's last logged step. Loss: "
        "train/loss where it was logged at every step from step 1, else val/loss "
        f"(here: {metrics}); past the steps logged one by one, a step is the first logged "
        "one (every trainer.log_interval steps, or at each evaluation); replicates are left "
        "out.",
        shown.to_markdown(index=False) if len(shown) else "No runs.",
        "## Every run",
        _early_runs(table, runs).to_markdown(index=False) if len(table) else "No runs.",
    ]
    return {"table_early.md": "\n\n".join(parts) + "\n"}
