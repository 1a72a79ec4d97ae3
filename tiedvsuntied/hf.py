"""Hugging Face GPT-2 import/export; the code lives in :mod:`tiedvsuntied.model.hf`."""

from tiedvsuntied.model.hf import from_pretrained, save_pretrained

__all__ = ["from_pretrained", "save_pretrained"]
