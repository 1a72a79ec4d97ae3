"""What a run records and how it is read back (``records``: the contract), its metrics and their
W&B mirror, the shipped bundles' format. No torch: the analysis and the figures import it."""
