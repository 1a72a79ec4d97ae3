"""Results -> tidy pandas DataFrames, and the statistics and theory the figures draw; no torch
(docs/figures.md lists the modules and the columns)."""
