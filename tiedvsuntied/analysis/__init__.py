"""Results -> tidy pandas DataFrames, and the statistics and theory the figures draw. No torch:
``python -m tiedvsuntied.figures`` and the notebooks read results without it. docs/figures.md
lists the modules and the columns."""
