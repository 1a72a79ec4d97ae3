"""Data: a corpus (local text files or a Hugging Face Hub dataset) -> tiktoken -> cached token
arrays -> batches; tied and untied runs see the same tokens in the same order. See docs/data.md.
"""
