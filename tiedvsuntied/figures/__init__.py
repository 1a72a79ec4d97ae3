"""The paper's figures and tables from :mod:`tiedvsuntied.analysis` tables;
``python -m tiedvsuntied.figures SWEEP --out DIR`` (:mod:`.cli`) makes them all.

- :mod:`.style`: colours, rc, the output REGISTRY and the ``@figure`` that fills it, panel helpers
- :mod:`.loss` (figures 1, 2), :mod:`.init` (3), :mod:`.geometry` (4), :mod:`.gradients` (5),
  :mod:`.paired` (6, 10, 11), :mod:`.finetune` (7), :mod:`.similarity` (8, 9)
- :mod:`.tables`: parameters per size, the paired comparisons

docs/figures.md lists every output. Importing this package imports every family, so REGISTRY is
full."""

from tiedvsuntied.figures import (  # noqa: F401  (each module registers its outputs)
    books,
    finetune,
    geometry,
    gradients,
    init,
    loss,
    paired,
    similarity,
    tables,
)
from tiedvsuntied.figures.cli import main
from tiedvsuntied.figures.finetune import fig_finetune
from tiedvsuntied.figures.geometry import fig_embedding_geometry
from tiedvsuntied.figures.gradients import fig_grad_split
from tiedvsuntied.figures.init import fig_initial_loss
from tiedvsuntied.figures.loss import fig_loss_vs_params, fig_val_loss
from tiedvsuntied.figures.paired import fig_arms, fig_crossover, fig_paired_difference
from tiedvsuntied.figures.similarity import fig_anisotropy, fig_cka
from tiedvsuntied.figures.style import (
    LINESTYLES,
    MARKERS,
    MFC,
    REF_COLOR,
    REGISTRY,
    STATUS_MARKER,
    STYLE,
    TIE_COLOR,
    Output,
    caption,
    figure,
    publish,
    save_figure,
)
from tiedvsuntied.figures.tables import write_early_table, write_param_tables, write_tables

__all__ = [
    "LINESTYLES",
    "MARKERS",
    "MFC",
    "REF_COLOR",
    "REGISTRY",
    "STATUS_MARKER",
    "STYLE",
    "TIE_COLOR",
    "Output",
    "caption",
    "fig_anisotropy",
    "fig_arms",
    "fig_cka",
    "fig_crossover",
    "fig_embedding_geometry",
    "fig_finetune",
    "fig_grad_split",
    "fig_initial_loss",
    "fig_loss_vs_params",
    "fig_paired_difference",
    "fig_val_loss",
    "figure",
    "main",
    "publish",
    "save_figure",
    "write_early_table",
    "write_param_tables",
    "write_tables",
]
