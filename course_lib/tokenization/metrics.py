"""Comparing tokenizers: fertility and compression.

* **Fertility** = tokens per word (words = whitespace-separated). 1.0 is a word-level
  tokenizer; character-level is the average word length plus one (the space). Lower means shorter
  sequences, so more text fits into the context window and each step of the model covers
  more text.
* **Compression** = UTF-8 bytes per token: the same idea measured on bytes.

Both work with any tokenizer that has ``encode(text)`` returning a list of ids (ours,
``tiktoken``, ``sentencepiece``) or an object with ``.ids`` (``tokenizers``), or with a plain
function ``text -> tokens``.
"""

from __future__ import annotations

__all__ = ["compression_ratio", "count_tokens", "fertility"]


def count_tokens(tokenizer, text: str) -> int:
    """Number of tokens ``tokenizer`` produces for ``text``."""
    if hasattr(tokenizer, "encode"):
        out = tokenizer.encode(text)
    elif callable(tokenizer):
        out = tokenizer(text)
    else:
        raise TypeError(f"{type(tokenizer).__name__} has no encode method and is not callable")
    if hasattr(out, "ids"):  # a tokenizers.Encoding
        out = out.ids
    return len(out)


def fertility(tokenizer, text: str) -> float:
    """Tokens per whitespace-separated word of ``text``."""
    n_words = len(text.split())
    if n_words == 0:
        raise ValueError("fertility needs a text with at least one word")
    return count_tokens(tokenizer, text) / n_words


def compression_ratio(tokenizer, text: str) -> float:
    """UTF-8 bytes per token of ``text``."""
    n_tokens = count_tokens(tokenizer, text)
    if n_tokens == 0:
        raise ValueError("compression ratio needs a text that gives at least one token")
    return len(text.encode("utf-8")) / n_tokens
