"""Results -> tidy pandas DataFrames, and the statistics and theory the figures draw.

- :mod:`.rows`: the runs-table columns; one row per run from a summary or a W&B run
- :mod:`.load`: sweep directories or a W&B project -> :class:`Results` (runs, history, notes)
- :mod:`.probes`: the per-token and per-window probe files of a few runs
- :mod:`.stats`: means over seeds with t-intervals, the tied/untied pairing, paired tables
- :mod:`.arms`: every arm of a sweep against its tied arm
- :mod:`.theory`: the initial loss in theory, parameters and FLOPs per size

No torch: ``python -m tiedvsuntied.figures`` and the notebooks read results without it.
docs/figures.md lists the columns."""

from tiedvsuntied.analysis.arms import ARM_KEYS, arm_label, arms_table, with_arms
from tiedvsuntied.analysis.load import (
    Results,
    ResultsError,
    WandbUnavailableError,
    check_consistency,
    load,
    load_results,
    load_wandb,
    require_single_data,
)
from tiedvsuntied.analysis.probes import (
    iter_probes,
    load_stratum_cosines,
    load_token_probes,
    window_losses,
)
from tiedvsuntied.analysis.rows import (
    HISTORY_ID_COLUMNS,
    RUN_COLUMNS,
    STATUS_RANK,
    flatten,
    history_from_records,
    run_row,
    unflatten,
    variants,
    wandb_run_row,
)
from tiedvsuntied.analysis.stats import (
    CELL,
    CONFIDENCE,
    GROUP_COLUMNS,
    MIN_BAND_SEEDS,
    MIN_SEEDS,
    N_BOOT,
    PAIR_COLUMNS,
    POINTS,
    aggregate,
    aggregate_history,
    aggregate_runs,
    best_lr_comparison,
    bootstrap_mean,
    markdown,
    match,
    paired_differences,
    paired_interval,
    paired_table,
    pairs,
    representative_runs,
    summarize_differences,
    t_interval,
    unpaired,
)
from tiedvsuntied.analysis.theory import (
    THEORY_DRAWS,
    expected_max_normal,
    gaussian_logit_loss,
    gaussian_logit_loss_approx,
    initial_loss_table,
    parameter_table,
    tied_initial_loss,
)

__all__ = [
    "ARM_KEYS",
    "CELL",
    "CONFIDENCE",
    "GROUP_COLUMNS",
    "HISTORY_ID_COLUMNS",
    "MIN_BAND_SEEDS",
    "MIN_SEEDS",
    "N_BOOT",
    "PAIR_COLUMNS",
    "POINTS",
    "RUN_COLUMNS",
    "STATUS_RANK",
    "THEORY_DRAWS",
    "Results",
    "ResultsError",
    "WandbUnavailableError",
    "aggregate",
    "aggregate_history",
    "aggregate_runs",
    "arm_label",
    "arms_table",
    "best_lr_comparison",
    "bootstrap_mean",
    "check_consistency",
    "expected_max_normal",
    "flatten",
    "gaussian_logit_loss",
    "gaussian_logit_loss_approx",
    "history_from_records",
    "initial_loss_table",
    "iter_probes",
    "load",
    "load_results",
    "load_stratum_cosines",
    "load_token_probes",
    "load_wandb",
    "markdown",
    "match",
    "paired_differences",
    "paired_interval",
    "paired_table",
    "pairs",
    "parameter_table",
    "representative_runs",
    "require_single_data",
    "run_row",
    "summarize_differences",
    "t_interval",
    "tied_initial_loss",
    "unflatten",
    "unpaired",
    "variants",
    "wandb_run_row",
    "window_losses",
    "with_arms",
]
