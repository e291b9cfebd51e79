"""The two simplest tokenizers, and why neither is enough.

* :class:`CharTokenizer`: one token per character. Tiny vocabulary (65 symbols for Tiny
  Shakespeare), never out-of-vocabulary for characters seen in training, robust to
  misspellings, but sequences are long: one token per character means the model spends its
  context window and its compute on spelling.
* :class:`WordTokenizer`: one token per word (and per punctuation mark). Short sequences, but
  the vocabulary explodes (every inflection "walk, walks, walked" is a separate, unrelated
  entry), the softmax over it is expensive, and every word not seen in training, including
  every misspelling, becomes the same ``<unk>``.

Sub-word tokenizers (BPE, WordPiece, Unigram) sit between the two.
"""

from __future__ import annotations

from collections import Counter

import regex

__all__ = ["CharTokenizer", "WordTokenizer", "WORD_PATTERN"]

#: A word is a run of letters/digits/underscore; every other non-space character stands alone.
WORD_PATTERN = r"\w+|[^\w\s]"


class _LookupTokenizer:
    """Shared code: a list of tokens (id = index) with an ``<unk>`` entry at id 0."""

    unk_token = "<unk>"

    def __init__(self, tokens=None) -> None:
        self.itos: list[str] = [self.unk_token]
        self.stoi: dict[str, int] = {self.unk_token: 0}
        if tokens is not None:
            self._set_tokens(tokens)

    def _set_tokens(self, tokens) -> None:
        self.itos = [self.unk_token] + [t for t in tokens if t != self.unk_token]
        self.stoi = {t: i for i, t in enumerate(self.itos)}

    @property
    def vocab_size(self) -> int:
        return len(self.itos)

    @property
    def vocab(self) -> dict[int, str]:
        return dict(enumerate(self.itos))

    def tokenize(self, text: str) -> list[str]:
        raise NotImplementedError

    def encode(self, text: str) -> list[int]:
        """Ids of the tokens; anything not in the vocabulary becomes ``<unk>`` (id 0)."""
        stoi = self.stoi
        return [stoi.get(t, 0) for t in self.tokenize(text)]

    def id_to_piece(self, idx: int) -> str:
        if not isinstance(idx, int) or not 0 <= idx < len(self.itos):
            raise ValueError(f"unknown token id {idx!r}: valid ids are 0..{len(self.itos) - 1}")
        return self.itos[idx]


class CharTokenizer(_LookupTokenizer):
    """One token per character; ids in sorted character order after ``<unk>`` (id 0).

    >>> tok = CharTokenizer().train("hello")
    >>> tok.encode("hole"), tok.decode(tok.encode("hole"))
    ([2, 4, 3, 1], 'hole')
    """

    def __init__(self, chars=None) -> None:
        super().__init__(sorted(set(chars)) if chars is not None else None)

    def train(self, text: str) -> CharTokenizer:
        """Use every distinct character of ``text`` as the vocabulary."""
        if not text:
            raise ValueError("cannot train a tokenizer on an empty corpus")
        self._set_tokens(sorted(set(text)))
        return self

    def tokenize(self, text: str) -> list[str]:
        return list(text)

    def decode(self, ids) -> str:
        return "".join(self.id_to_piece(i) for i in ids)


class WordTokenizer(_LookupTokenizer):
    """One token per word or punctuation mark, with ``<unk>`` (id 0) for unknown words.

    ``vocab_size`` (counting ``<unk>``) keeps only the most frequent words; ``None`` keeps all.
    Decoding joins tokens with spaces, so it does not restore the original spacing.
    """

    def __init__(self, words=None) -> None:
        super().__init__(words)

    def train(self, text: str, vocab_size: int | None = None) -> WordTokenizer:
        if not text.strip():
            raise ValueError("cannot train a tokenizer on an empty corpus")
        if vocab_size is not None and vocab_size < 2:
            raise ValueError(f"vocab_size must be at least 2 (<unk> and one word), got {vocab_size}")
        counts = Counter(self.tokenize(text))
        # most_common keeps first-occurrence order among equal counts: deterministic.
        limit = None if vocab_size is None else vocab_size - 1
        self._set_tokens(w for w, _ in counts.most_common(limit))
        return self

    def tokenize(self, text: str) -> list[str]:
        return regex.findall(WORD_PATTERN, text)

    def decode(self, ids) -> str:
        return " ".join(self.id_to_piece(i) for i in ids)
