"""Data: a corpus (local text files or a Hugging Face Hub dataset) -> tiktoken -> cached token
arrays -> batches; tied and untied runs see the same tokens in the same order. Modules:
``config`` (DataConfig, checks beside the fields), ``sources`` (tokenizer, files, Hub, documents,
offline check), ``cache`` (key, building, Corpus, prepare_data), ``batches``, ``baselines``
(count models), ``__main__`` (CLI). See docs/data.md.
"""
