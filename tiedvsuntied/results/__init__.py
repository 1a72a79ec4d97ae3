"""What a run records and how it is read back (``records``: the contract), who it is
(``identity``), how its files are written (``io``) and kept free of credentials (``secrets``), its
metrics and their W&B mirror, the shipped bundles' format. No torch: the analysis and the
figures import it."""
