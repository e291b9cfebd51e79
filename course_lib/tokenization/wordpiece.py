"""WordPiece, the tokenizer of BERT.

Encoding (what BERT does at inference)
--------------------------------------
1. Pre-tokenize: split on whitespace (dropped) and on punctuation (each punctuation character
   becomes its own word). "Don't stop!" -> ``Don ' t stop !``.
2. For each word, greedy longest-match-first: take the longest prefix that is in the
   vocabulary, then the longest vocabulary entry that continues it, written with the prefix
   ``##`` ("unaffable" -> ``un ##aff ##able``), and so on. If at some point no entry matches,
   the *whole word* becomes ``[UNK]``; so does a word longer than ``max_input_chars_per_word``.

Training
--------
Like BPE, start from characters (the first character of a word as is, the others with ``##``)
and merge pairs, but choose the pair with the highest score

    score(a, b) = count(ab) / (count(a) * count(b))

instead of the highest count. The score is high when a and b occur together much more often
than their own frequencies would suggest: it prefers merging two rare symbols that always go
together over two frequent ones that often meet by chance. Ties go to the pair that occurs
first in the corpus, as for BPE.

Punctuation is decided by Python's ``unicodedata`` tables; about 100 punctuation marks added in
recent Unicode versions (e.g. U+2E43) are not yet punctuation in ``tokenizers``' tables, the
only place where the two can disagree.

The trainer here is incremental: merging ``(a, b)`` changes the counts of a few pairs and the
scores of the pairs that contain ``a``, ``b`` or ``ab``; only those are re-scored, in a heap
with lazy invalidation.
"""

from __future__ import annotations

import heapq
import unicodedata
from collections.abc import Iterable
from fractions import Fraction
from itertools import pairwise

from course_lib.tokenization.bpe import merge_pair

__all__ = [
    "WordPieceTokenizer", "bert_pre_tokenize", "is_bert_punctuation", "train_wordpiece_vocab",
    "wordpiece_pair_scores", "wordpiece_score",
]

# Unicode's White_Space property (what the Rust `char::is_whitespace` of `tokenizers` uses);
# note that Python's str.isspace() also accepts U+001C..U+001F.
_WHITESPACE = frozenset(
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)


def is_bert_punctuation(ch: str) -> bool:
    """BERT's punctuation: every ASCII non-alphanumeric symbol, and Unicode categories P*."""
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def bert_pre_tokenize(text: str) -> list[str]:
    """Split on whitespace (removed) and punctuation (kept, one character per word)."""
    words: list[str] = []
    current: list[str] = []
    for ch in text:
        if ch in _WHITESPACE:
            if current:
                words.append("".join(current))
                current = []
        elif is_bert_punctuation(ch):
            if current:
                words.append("".join(current))
                current = []
            words.append(ch)
        else:
            current.append(ch)
    if current:
        words.append("".join(current))
    return words


def wordpiece_score(count_ab: int, count_a: int, count_b: int) -> float:
    """The WordPiece merge score ``count(ab) / (count(a) * count(b))``."""
    if count_a <= 0 or count_b <= 0:
        raise ValueError(f"symbol counts must be positive, got {count_a} and {count_b}")
    return count_ab / (count_a * count_b)


def _initial_split(word: str, prefix: str) -> list[str]:
    return [word[0]] + [prefix + ch for ch in word[1:]]


def _merged(a: str, b: str, prefix: str) -> str:
    return a + (b[len(prefix):] if prefix and b.startswith(prefix) else b)


def wordpiece_pair_scores(word_counts: dict[str, int], prefix: str = "##"
                          ) -> dict[tuple[str, str], float]:
    """Scores of all pairs before the first merge, in first-occurrence order (for the lesson)."""
    pair_n: dict[tuple[str, str], int] = {}
    sym_n: dict[str, int] = {}
    for word, n in word_counts.items():
        pieces = _initial_split(word, prefix)
        for s in pieces:
            sym_n[s] = sym_n.get(s, 0) + n
        for pair in pairwise(pieces):
            pair_n[pair] = pair_n.get(pair, 0) + n
    return {p: wordpiece_score(c, sym_n[p[0]], sym_n[p[1]]) for p, c in pair_n.items()}


def train_wordpiece_vocab(text_or_counts: str | dict[str, int], vocab_size: int, *,
                          unk_token: str = "[UNK]", prefix: str = "##",
                          special_tokens: Iterable[str] = ()) -> list[str]:
    """Learn a WordPiece vocabulary (a list: the index is the id).

    ``text_or_counts`` is raw text (BERT-pre-tokenized here) or a dict word -> count. The
    vocabulary is ``[unk_token, *special_tokens]``, then the sorted alphabet (first characters
    plain, others with ``prefix``), then one new entry per merge, until ``vocab_size`` entries
    or until every word is a single symbol.
    """
    if isinstance(text_or_counts, str):
        word_counts: dict[str, int] = {}
        for w in bert_pre_tokenize(text_or_counts):
            word_counts[w] = word_counts.get(w, 0) + 1
    else:
        word_counts = dict(text_or_counts)
    if not word_counts:
        raise ValueError("cannot train a tokenizer on an empty corpus")

    words = list(word_counts)                       # first-occurrence order
    weights = [word_counts[w] for w in words]
    splits = [_initial_split(w, prefix) for w in words]
    vocab = [unk_token, *special_tokens]
    alphabet = sorted({s for sp in splits for s in sp})
    vocab += [s for s in alphabet if s not in vocab]
    if vocab_size < len(vocab):
        raise ValueError(f"vocab_size={vocab_size} is smaller than the {len(vocab)} entries "
                         f"needed for [UNK], the special tokens and the alphabet")
    in_vocab = set(vocab)

    sym_n: dict[str, int] = {}                      # symbol -> weighted count
    pair_n: dict[tuple[str, str], int] = {}         # pair -> weighted count
    pair_words: dict[tuple[str, str], set[int]] = {}
    pairs_of: dict[str, set[tuple[str, str]]] = {}  # symbol -> pairs it belongs to
    for k, (sp, w) in enumerate(zip(splits, weights, strict=True)):
        for s in sp:
            sym_n[s] = sym_n.get(s, 0) + w
        for pair in pairwise(sp):
            pair_n[pair] = pair_n.get(pair, 0) + w
            pair_words.setdefault(pair, set()).add(k)
            pairs_of.setdefault(pair[0], set()).add(pair)
            pairs_of.setdefault(pair[1], set()).add(pair)

    def entry(pair):
        c, den = pair_n[pair], sym_n[pair[0]] * sym_n[pair[1]]
        return (-c / den, c, den, pair)

    def first_position(pair) -> tuple[int, int]:
        k = min(pair_words[pair])
        sp = splits[k]
        for i in range(len(sp) - 1):
            if (sp[i], sp[i + 1]) == pair:
                return k, i
        raise AssertionError("pair index out of date")  # pragma: no cover

    def is_current(c, den, pair) -> bool:
        return pair_n.get(pair) == c and sym_n[pair[0]] * sym_n[pair[1]] == den

    heap = [entry(p) for p in pair_n]
    heapq.heapify(heap)
    while len(vocab) < vocab_size:
        # The valid entries with the top float score; resolve them exactly (Fraction, then the
        # first occurrence) so that rounding never decides.
        top: list[tuple] = []
        while heap and (not top or heap[0][0] == top[0][0]):
            e = heapq.heappop(heap)
            if is_current(*e[1:]) and all(e[3] != t[3] for t in top):
                top.append(e)
        if not top:
            break
        best_score = max(Fraction(c, den) for _, c, den, _ in top)
        tied = [e for e in top if Fraction(e[1], e[2]) == best_score]
        chosen = min(tied, key=lambda e: first_position(e[3]))
        for e in top:
            if e is not chosen:
                heapq.heappush(heap, e)
        a, b = pair = chosen[3]
        new = _merged(a, b, prefix)
        if new not in in_vocab:
            vocab.append(new)
            in_vocab.add(new)

        # Re-split the words that contain the pair and update the counts locally.
        touched: set[tuple[str, str]] = set()
        for k in sorted(pair_words.pop(pair)):
            old, w = splits[k], weights[k]
            out = merge_pair(old, (a, b), new)
            splits[k] = out
            for s in old:
                sym_n[s] -= w
            for s in out:
                sym_n[s] = sym_n.get(s, 0) + w
            old_pairs, new_pairs = set(pairwise(old)), set(pairwise(out))
            for p in pairwise(old):
                pair_n[p] -= w
                touched.add(p)
            for p in pairwise(out):
                pair_n[p] = pair_n.get(p, 0) + w
                touched.add(p)
            for p in old_pairs - new_pairs:
                if p != pair:
                    pair_words[p].discard(k)
            for p in new_pairs - old_pairs:
                pair_words.setdefault(p, set()).add(k)
                pairs_of.setdefault(p[0], set()).add(p)
                pairs_of.setdefault(p[1], set()).add(p)
        # Every pair whose count changed, or whose symbols' counts changed, gets a new entry.
        for s in (a, b, new):
            touched |= pairs_of.get(s, set())
        touched.discard(pair)
        pair_n.pop(pair, None)
        for p in touched:
            if pair_n.get(p, 0) > 0:
                heapq.heappush(heap, entry(p))
            elif p in pair_n:
                del pair_n[p]
                pair_words.pop(p, None)
                pairs_of[p[0]].discard(p)
                pairs_of[p[1]].discard(p)
        for s in (a, b):
            pairs_of.get(s, set()).discard(pair)
    return vocab


class WordPieceTokenizer:
    """Greedy longest-match-first WordPiece (the encoder of BERT and of ``tokenizers``).

    ``vocab`` is a list of tokens (the index is the id) or a dict token -> id, and must contain
    ``unk_token``.
    """

    def __init__(self, vocab, unk_token: str = "[UNK]", prefix: str = "##",
                 max_input_chars_per_word: int = 100) -> None:
        if isinstance(vocab, dict):
            self.vocab: dict[str, int] = dict(vocab)
        else:
            self.vocab = {tok: i for i, tok in enumerate(vocab)}
        if unk_token not in self.vocab:
            raise ValueError(f"the unknown token {unk_token!r} must be in the vocabulary")
        self.unk_token = unk_token
        self.prefix = prefix
        self.max_input_chars_per_word = max_input_chars_per_word
        self.id_to_token = {i: t for t, i in self.vocab.items()}

    @classmethod
    def train(cls, text_or_counts, vocab_size: int, *, unk_token: str = "[UNK]",
              prefix: str = "##", special_tokens: Iterable[str] = ()) -> WordPieceTokenizer:
        """Learn a vocabulary with the WordPiece score (see the module docstring)."""
        vocab = train_wordpiece_vocab(text_or_counts, vocab_size, unk_token=unk_token,
                                      prefix=prefix, special_tokens=special_tokens)
        return cls(vocab, unk_token=unk_token, prefix=prefix)

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def tokenize_word(self, word: str) -> list[str]:
        """Greedy longest-match-first on one pre-tokenized word."""
        if len(word) > self.max_input_chars_per_word:
            return [self.unk_token]
        pieces, start = [], 0
        while start < len(word):
            end = len(word)
            while end > start:
                piece = word[start:end] if start == 0 else self.prefix + word[start:end]
                if piece in self.vocab:
                    break
                end -= 1
            else:
                return [self.unk_token]  # no entry matches: the whole word is unknown
            pieces.append(piece)
            start = end
        return pieces

    def tokenize(self, text: str) -> list[str]:
        return [p for word in bert_pre_tokenize(text) for p in self.tokenize_word(word)]

    def encode(self, text: str) -> list[int]:
        return [self.vocab[p] for p in self.tokenize(text)]

    def id_to_piece(self, idx: int) -> str:
        if idx not in self.id_to_token:
            raise ValueError(f"unknown token id {idx!r}")
        return self.id_to_token[idx]

    def decode(self, ids) -> str:
        """Join pieces with spaces, gluing ``##`` continuations to the previous piece."""
        out: list[str] = []
        for idx in ids:
            piece = self.id_to_piece(idx)
            if out and self.prefix and piece.startswith(self.prefix):
                out[-1] += piece[len(self.prefix):]
            else:
                out.append(piece)
        return " ".join(out)
