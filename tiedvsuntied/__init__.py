"""tiedvsuntied: tied vs untied output heads in GPT-2-style language models."""

__version__ = "0.1.0"
