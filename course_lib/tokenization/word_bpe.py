"""Word-level BPE by hand, as in Sennrich et al. (2016) and the course notes.

Two corpora: the notes' (:data:`NOTES_BPE_CORPUS`, "low lower newest widest", each word once),
whose first merges are (l, o), (lo, w), (e, s), (es, t), after which "newest" is
``n e w est </w>``, the notes' "n, e, w, est" (every pair ties at 2, and the tie goes to the pair
seen first); and the paper's (:data:`SENNRICH_CORPUS`, below, with counts).

The corpus is a table of words with counts. Each word is written as characters separated by
spaces, with an end-of-word marker ``</w>`` so that a suffix ("est</w>") and the same letters
inside a word ("est" in "estimate") stay different symbols::

    l o w </w>          5
    l o w e r </w>      2
    n e w e s t </w>    6
    w i d e s t </w>    3

Each step counts adjacent symbol pairs, weighted by the word counts, merges the most frequent
pair everywhere, and records the merge. A tie goes to the pair seen first (corpus order, then
left to right), which is what the reference code in the paper does. On this corpus the first
merges are ``e s`` (9), ``es t`` (9), ``est </w>`` (9), ``l o`` (7), ``lo w`` (7), ...

To tokenize a new word, split it into characters plus ``</w>`` and replay the merges in the
order they were learned. With the ten merges above, "newest" becomes a single symbol
``newest</w>``; with only the first three, ``n e w est</w>``.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

__all__ = [
    "END_OF_WORD", "NOTES_BPE_CORPUS", "SENNRICH_CORPUS", "MergeStep", "word_bpe_merge_table",
    "word_bpe_tokenize", "newest_example",
]

END_OF_WORD = "</w>"

#: The example corpus of Sennrich et al. (2016): word -> count. (Not the notes': theirs is
#: NOTES_BPE_CORPUS.)
SENNRICH_CORPUS: dict[str, int] = {"low": 5, "lower": 2, "newest": 6, "widest": 3}

#: The notes' corpus (004 l.65-370): "low lower newest widest", each word once.
NOTES_BPE_CORPUS: dict[str, int] = {"low": 1, "lower": 1, "newest": 1, "widest": 1}


@dataclass(frozen=True)
class MergeStep:
    """One row of the merge table."""

    step: int                   # 1-based
    pair: tuple[str, str]       # the symbols merged
    count: int                  # how often the pair occurred before the merge
    new_symbol: str             # pair[0] + pair[1]
    words: dict[str, int]       # the corpus after the merge, as "sym sym sym" -> count


def _symbols(word: str) -> tuple[str, ...]:
    return (*word, END_OF_WORD)


def _pair_counts(corpus: dict[tuple[str, ...], int]) -> dict[tuple[str, str], int]:
    counts: dict[tuple[str, str], int] = {}
    for symbols, n in corpus.items():
        for pair in pairwise(symbols):
            counts[pair] = counts.get(pair, 0) + n
    return counts


def _apply_merge(symbols: tuple[str, ...], pair: tuple[str, str]) -> tuple[str, ...]:
    out, i = [], 0
    while i < len(symbols):
        if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == pair:
            out.append(symbols[i] + symbols[i + 1])
            i += 2
        else:
            out.append(symbols[i])
            i += 1
    return tuple(out)


def word_bpe_merge_table(word_counts: dict[str, int] | None = None, num_merges: int = 10
                         ) -> list[MergeStep]:
    """Learn ``num_merges`` merges on ``word_counts`` and return every step.

    Stops early if every word has become a single symbol.
    """
    word_counts = SENNRICH_CORPUS if word_counts is None else word_counts
    if not word_counts:
        raise ValueError("cannot train on an empty corpus")
    corpus = {_symbols(w): n for w, n in word_counts.items()}
    steps = []
    for step in range(1, num_merges + 1):
        counts = _pair_counts(corpus)
        if not counts:
            break
        pair = max(counts, key=counts.get)  # the first of equal counts wins
        corpus = {_apply_merge(s, pair): n for s, n in corpus.items()}
        steps.append(MergeStep(step, pair, counts[pair], pair[0] + pair[1],
                               {" ".join(s): n for s, n in corpus.items()}))
    return steps


def word_bpe_tokenize(word: str, merges) -> list[str]:
    """Tokenize one word by replaying ``merges`` (pairs, or :class:`MergeStep` rows) in order."""
    symbols = _symbols(word)
    for merge in merges:
        symbols = _apply_merge(symbols, merge.pair if isinstance(merge, MergeStep) else merge)
    return list(symbols)


def newest_example(num_merges: int = 10) -> tuple[list[MergeStep], list[str]]:
    """Sennrich's corpus (not the notes'): the merge table, and the tokens of "newest"."""
    table = word_bpe_merge_table(SENNRICH_CORPUS, num_merges)
    return table, word_bpe_tokenize("newest", table)
