"""What a run records and how it is read back: ``records`` (the contract: identity, summary,
index, readers), ``metrics_log`` (metrics.jsonl and its W&B mirror) and ``bundles`` (the
shipped bundles' format). No torch: the analysis and the figures import this package."""
