"""Results -> tidy pandas DataFrames, and the statistics and theory the figures draw.

- :mod:`.rows`: the runs-table columns; one row per run from a summary or a W&B run
- :mod:`.load`: sweep directories or a W&B project -> :class:`Results` (runs, history, notes)
- :mod:`.probes`: the per-token and per-window probe files of a few runs
- :mod:`.stats`: means over seeds with t-intervals, the tied/untied pairing, paired tables with
  t-intervals over seeds, the noise floor (replicates), PRIMARY_CONTRAST, tables as markdown
- :mod:`.arms`: every arm against its tied arm, each arm at its best lr, interactions
- :mod:`.early`: the first steps: when the loss falls below ln V and below the d^-0.5 arm
- :mod:`.theory`: the initial loss in theory, parameters and FLOPs per size
- :mod:`.books`: the second edition's per-book and per-document comparisons
- :mod:`.notebook`: the notebooks' loading step

Import names from the module that defines them. No torch: ``python -m tiedvsuntied.figures``
and the notebooks read results without it. docs/figures.md lists the columns."""
