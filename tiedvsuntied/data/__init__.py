"""Data: a corpus (local text files or a Hugging Face Hub dataset) -> tiktoken -> cached token
arrays -> batches. Tied and untied runs must see the same tokens in the same order.

=========================  =================================================================
``data.config``            ``DataConfig`` (the ``data`` node of the Hydra schema), its enums
                           and errors; field checks in ``__post_init__``
``data.sources``           the tokenizer, text files and the Hub: rows, held-out tails,
                           documents; ``check_data`` and the offline check
``data.cache``             the token cache: identity/key, building under a lock, ``Corpus``,
                           ``prepare_data``
``data.batches``           ``BatchSampler`` and the fixed evaluation windows
``python -m ...data``      the CLI (``data.__main__``): prepare a corpus, print its info
=========================  =================================================================

An end-of-text token separates DOCUMENTS (``DataConfig.documents``), never lines; each document
is tokenized whole. See docs/data.md.
"""

from tiedvsuntied.data.cache import (
    DEBUG_SLEEP_ENV,
    FORMAT_VERSION,
    SPLITS,
    Corpus,
    corpus_dir,
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
