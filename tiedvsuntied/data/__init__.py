"""Data: a corpus (local text files or a Hugging Face Hub dataset) -> tiktoken -> cached token
arrays -> batches; tied and untied runs see the same tokens in the same order. Modules:
``config`` (DataConfig, checks beside the fields), ``sources`` (tokenizer, files, Hub, documents,
offline check), ``cache`` (key, building, Corpus, prepare_data), ``batches``, ``__main__`` (CLI).
See docs/data.md.
"""

from tiedvsuntied.data.cache import (
    DEBUG_SLEEP_ENV,
    FORMAT_VERSION,
    SPLITS,
    Corpus,
    corpus_dir,
    corpus_fingerprint,
    corpus_identity,
    corpus_key,
    prepare_data,
    resolve_cache_dir,
)
from tiedvsuntied.data.config import (
    DataConfig,
    DataError,
    DataUnavailableError,
    Documents,
    Source,
    Vocab,
    encoding_names,
)
from tiedvsuntied.data.sources import check_available, check_data, gpt2_available, load_encoding

__all__ = [
    "DEBUG_SLEEP_ENV",
    "FORMAT_VERSION",
    "SPLITS",
    "Corpus",
    "DataConfig",
    "DataError",
    "DataUnavailableError",
    "Documents",
    "Source",
    "Vocab",
    "check_available",
    "check_data",
    "corpus_dir",
    "corpus_fingerprint",
    "corpus_identity",
    "corpus_key",
    "encoding_names",
    "gpt2_available",
    "load_config",
    "load_encoding",
    "main",
    "prepare_data",
    "resolve_cache_dir",
]


def __getattr__(name: str):
    """``load_config`` and ``main`` live in the CLI module, imported on use: ``python -m``
    would warn if the package imported its ``__main__`` first."""
    if name in ("load_config", "main", "CONF_DATA_DIR"):
        from tiedvsuntied.data import __main__ as cli

        return getattr(cli, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
