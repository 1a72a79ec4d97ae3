"""Data: a corpus -> tiktoken -> cached token arrays -> batches (docs/data.md)."""
