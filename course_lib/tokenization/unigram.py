"""The Unigram language-model tokenizer (Kudo 2018), as in SentencePiece.

Model
-----
Every piece ``x`` in the vocabulary has a probability ``p(x)``, and a segmentation
``x_1 ... x_k`` of a word has probability ``p(x_1) * ... * p(x_k)`` (pieces are independent:
a *unigram* model). We work with log-probabilities, so a segmentation scores
``sum_i log p(x_i)``.

Viterbi
-------
The most probable segmentation is found by dynamic programming over end positions::

    best[0] = 0
    best[e] = max over s < e with word[s:e] in the vocabulary of  best[s] + log p(word[s:e])

and following back-pointers from ``best[len(word)]``. That is O(len(word) * max piece length)
instead of the 2^(n-1) segmentations a brute-force search tries
(:func:`brute_force_segmentation`, used to check it).

The notes' example (:data:`NOTES_UNIGRAM_COUNTS`): a BPE vocabulary of 23 pieces counted in
"I love playing volleyball and football. I also love meeting people sharing ideas and learning
from their experiences", 35 uses in all, so p(x) = count(x) / 35 (p(ing) = 4/35). "volleyball"
has three segmentations into those pieces; in log10, as the notes compute them:

* ``vol le y ball``   log(1/35) + log(3/35) + 2 log(2/35) = -5.0971   (the notes: -5.09)
* ``volley ball``     log(1/35) + log(2/35)               = -2.7871   (the notes: -2.71, a slip)
* ``volleyball``      log(1/35)                           = -1.5441   <- Viterbi picks this

A second example, ours (:data:`VOLLEYBALL_PROBS`): with no ``volleyball`` piece and
p(volley) = 0.05, p(ball) = 0.08, p(vol) = p(ley) = 0.02, p(bal) = 0.03 and 0.01 for each letter,
``volley ball`` (4.0e-3) beats ``vol ley ball`` (3.2e-5), ``volley bal l`` (1.5e-5) and the
letters (1e-20): the answer depends on the vocabulary and its probabilities.

Training (EM + pruning)
-----------------------
1. **Seed vocabulary.** Every character, plus the most promising substrings of the words
   (frequency x length, up to ``seed_size`` of them and ``max_piece_len`` characters).
   Words are the whitespace-separated words of the text, each prefixed with ``▁`` (U+2581)
   to mark the word start, as SentencePiece does.
2. **EM.** E-step: for each word, the forward-backward algorithm over all its segmentations
   gives the *expected* number of times each piece is used. M-step: ``p(x)`` = expected count
   of ``x`` / total expected count.
3. **Pruning.** For each piece, the loss is how much the corpus log-likelihood drops if it is
   removed and its occurrences in the Viterbi segmentations are re-segmented with the best
   alternative (SentencePiece's approximation)::

       loss(x) = freq(x) * (log p(x) - sum of log p over the best segmentation of x without x)

   Keep the ``shrink`` fraction (75%) of the pieces with the highest loss; single characters
   are never removed, so every word can still be segmented.
4. Repeat 2-3 until ``vocab_size`` pieces are left, then run EM once more.

Simplifications against SentencePiece: plain maximum likelihood in the M-step (SentencePiece
uses a digamma "Bayesian" update), a substring count instead of a suffix array for the seed,
and no normalization of the text.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

__all__ = [
    "NOTES_UNIGRAM_COUNTS", "SPACE_MARK", "VOLLEYBALL_PROBS", "UnigramTokenizer",
    "brute_force_segmentation", "notes_unigram_log_probs", "segmentation_score",
    "volleyball_log_probs",
]

SPACE_MARK = "\u2581"  # "▁", SentencePiece's word-start marker
UNK_PENALTY = 10.0     # an unknown character scores (lowest log-prob) - UNK_PENALTY

#: The notes' frequency table (004 l.517-557): the 23 pieces of their BPE vocabulary and how
#: often each is used in their corpus, 35 in all. (Their count table writes "shar" for the
#: vocabulary's "share".)
NOTES_UNIGRAM_COUNTS: dict[str, int] = {
    "I": 2, "love": 2, "play": 1, "ing": 4, "vol": 1, "le": 3, "y": 2, "volley": 1, "ball": 2,
    "volleyball": 1, "and": 2, "foot": 1, "football": 1, "al": 3, "also": 1, "meet": 1,
    "people": 1, "share": 1, "ideas": 1, "learn": 1, "from": 1, "their": 1, "experiences": 1,
}


def notes_unigram_log_probs(base: float = math.e) -> dict[str, float]:
    """log p(x) = log(count(x) / 35) for the notes' table (base 10 gives the notes' numbers)."""
    total = sum(NOTES_UNIGRAM_COUNTS.values())
    return {piece: math.log(n / total, base) for piece, n in NOTES_UNIGRAM_COUNTS.items()}


#: Piece probabilities of a second "volleyball" example, ours, not the notes' (see the module
#: docstring): without a `volleyball` piece, the split volley|ball wins.
VOLLEYBALL_PROBS: dict[str, float] = {
    **{ch: 0.01 for ch in "voleyba"},
    "vol": 0.02, "ley": 0.02, "volley": 0.05, "bal": 0.03, "ball": 0.08,
}


def volleyball_log_probs() -> dict[str, float]:
    """:data:`VOLLEYBALL_PROBS` as log-probabilities."""
    return {piece: math.log(p) for piece, p in VOLLEYBALL_PROBS.items()}


def segmentation_score(pieces: Iterable[str], log_probs: dict[str, float]) -> float:
    """Sum of the log-probabilities of ``pieces`` (KeyError for a piece not in ``log_probs``)."""
    return sum(log_probs[p] for p in pieces)


def brute_force_segmentation(word: str, log_probs: dict[str, float]
                             ) -> tuple[list[str] | None, float]:
    """Try all 2^(n-1) segmentations; return the best one and its score.

    Returns ``(None, -inf)`` if no segmentation uses only known pieces. Exponential: for tests
    on short words only.
    """
    n = len(word)
    best, best_score = None, -math.inf
    for mask in range(1 << max(n - 1, 0)):
        pieces, start = [], 0
        for i in range(1, n):
            if mask >> (i - 1) & 1:
                pieces.append(word[start:i])
                start = i
        pieces.append(word[start:])
        if all(p in log_probs for p in pieces):
            score = segmentation_score(pieces, log_probs)
            if score > best_score:
                best, best_score = pieces, score
    return best, best_score


def _logaddexp(x: float, y: float) -> float:
    if x < y:
        x, y = y, x
    if y == -math.inf:
        return x
    return x + math.log1p(math.exp(y - x))


class UnigramTokenizer:
    """SentencePiece-style Unigram tokenizer.

    ``log_probs``: piece -> log-probability (natural log). Train one with :meth:`train`, or
    pass a hand-made table (e.g. :func:`volleyball_log_probs`) to experiment with Viterbi.
    """

    unk_token = "<unk>"

    def __init__(self, log_probs: dict[str, float] | None = None) -> None:
        self.log_probs: dict[str, float] = dict(log_probs) if log_probs else {}
        self._refresh()

    def _refresh(self) -> None:
        lp = self.log_probs
        self._max_len = max((len(p) for p in lp), default=1)
        self._unk_score = (min(lp.values()) if lp else 0.0) - UNK_PENALTY
        # ids: <unk> first, then pieces from most to least probable.
        self.pieces = [self.unk_token] + sorted(lp, key=lambda p: (-lp[p], p))
        self.piece_to_id = {p: i for i, p in enumerate(self.pieces)}

    @property
    def vocab_size(self) -> int:
        """Number of pieces, not counting ``<unk>``."""
        return len(self.log_probs)

    # --- segmentation -----------------------------------------------------------------------
    def viterbi(self, word: str, exclude: str | None = None) -> list[str]:
        """The most probable segmentation of ``word`` (a string taken as is).

        A character not in the vocabulary becomes a one-character piece scored as unknown
        (lowest log-prob minus ``UNK_PENALTY``), so ``"".join(viterbi(w)) == w`` always.
        ``exclude`` forbids one piece (used when pruning). Ties keep the longest last piece.
        """
        lp, max_len, unk = self.log_probs, self._max_len, self._unk_score
        n = len(word)
        best = [0.0] + [-math.inf] * n
        back = [0] * (n + 1)
        for end in range(1, n + 1):
            for start in range(max(0, end - max_len), end):
                piece = word[start:end]
                score = lp.get(piece)
                if score is None or piece == exclude:
                    if end - start > 1:
                        continue
                    score = unk  # an unknown (or excluded) single character
                total = best[start] + score
                if total > best[end]:
                    best[end], back[end] = total, start
        pieces, end = [], n
        while end > 0:
            start = back[end]
            pieces.append(word[start:end])
            end = start
        return pieces[::-1]

    def score(self, pieces: Iterable[str]) -> float:
        """Log-probability of a segmentation (unknown characters scored as in :meth:`viterbi`)."""
        return sum(self.log_probs.get(p, self._unk_score) for p in pieces)

    def tokenize(self, text: str) -> list[str]:
        """Split on whitespace, prefix each word with ``▁`` and segment it with Viterbi."""
        return [p for w in text.split() for p in self.viterbi(SPACE_MARK + w)]

    def encode(self, text: str) -> list[int]:
        """Ids of :meth:`tokenize`; unknown characters become ``<unk>`` (id 0)."""
        ids = self.piece_to_id
        return [ids.get(p, 0) for p in self.tokenize(text)]

    def id_to_piece(self, idx: int) -> str:
        if not isinstance(idx, int) or not 0 <= idx < len(self.pieces):
            raise ValueError(f"unknown token id {idx!r}: valid ids are 0..{len(self.pieces) - 1}")
        return self.pieces[idx]

    def decode(self, ids) -> str:
        """Join pieces and turn ``▁`` back into spaces (whitespace is normalized to one space)."""
        text = "".join(self.id_to_piece(i) for i in ids)
        return text.replace(SPACE_MARK, " ").lstrip(" ")

    # --- training ----------------------------------------------------------------------------
    def train(self, text: str, vocab_size: int, *, max_piece_len: int = 16,
              seed_size: int | None = None, em_iters: int = 2, shrink: float = 0.75,
              ) -> UnigramTokenizer:
        """Learn ``vocab_size`` pieces from ``text`` by EM and pruning; return ``self``.

        ``seed_size`` (default ``4 * vocab_size``) caps the seed substrings.
        """
        word_counts: dict[str, int] = {}
        for w in text.split():
            w = SPACE_MARK + w
            word_counts[w] = word_counts.get(w, 0) + 1
        if not word_counts:
            raise ValueError("cannot train a tokenizer on an empty corpus")
        char_counts: dict[str, int] = {}
        for w, n in word_counts.items():
            for ch in w:
                char_counts[ch] = char_counts.get(ch, 0) + n
        if vocab_size < len(char_counts):
            raise ValueError(f"vocab_size={vocab_size} is smaller than the {len(char_counts)} "
                             f"distinct characters of the corpus, which must all be pieces")
        if not 0 < shrink < 1:
            raise ValueError(f"shrink must be in (0, 1), got {shrink}")
        self._chars = set(char_counts)
        seed_size = 4 * vocab_size if seed_size is None else seed_size

        # 1. Seed: frequent substrings, scored by frequency x length.
        sub_counts: dict[str, int] = {}
        for w, n in word_counts.items():
            for i in range(len(w)):
                for j in range(i + 2, min(len(w), i + max_piece_len) + 1):
                    s = w[i:j]
                    sub_counts[s] = sub_counts.get(s, 0) + n
        candidates = [s for s, c in sub_counts.items() if c >= 2]
        candidates.sort(key=lambda s: (-sub_counts[s] * len(s), s))
        counts = dict(char_counts)
        counts.update((s, sub_counts[s]) for s in candidates[:seed_size])
        self.log_probs = self._normalize(counts)
        self._refresh()

        # 2-4. EM, then prune, until the target size.
        while True:
            for _ in range(em_iters):
                self.log_probs = self._normalize(self._expected_counts(word_counts))
                self._refresh()
            if len(self.log_probs) <= vocab_size:
                break
            self._prune(word_counts, max(vocab_size, int(len(self.log_probs) * shrink)))
        return self

    def _normalize(self, counts: dict[str, float]) -> dict[str, float]:
        """M-step: log(count / total). Pieces with (near) zero count get a tiny floor."""
        floor = 1e-3
        total = sum(max(c, floor) for c in counts.values())
        return {p: math.log(max(c, floor) / total) for p, c in counts.items()}

    def _expected_counts(self, word_counts: dict[str, int]) -> dict[str, float]:
        """E-step: expected piece counts under the current model (forward-backward).

        ``alpha[i]`` sums the probabilities of all segmentations of ``word[:i]``, ``beta[i]``
        those of ``word[i:]``; a piece spanning ``word[s:e]`` is used with posterior probability
        ``alpha[s] * p(piece) * beta[e] / alpha[n]``. Computed with plain probabilities, and in
        log space for the rare word whose probability would underflow.
        """
        lp, max_len = self.log_probs, self._max_len
        prob = {p: math.exp(v) for p, v in lp.items()}
        expected = dict.fromkeys(lp, 0.0)
        for word, n_word in word_counts.items():
            n = len(word)
            # The lattice: edges (start, end, piece, p), sorted by end.
            edges = []
            for end in range(1, n + 1):
                for start in range(max(0, end - max_len), end):
                    piece = word[start:end]
                    p = prob.get(piece)
                    if p is not None:
                        edges.append((start, end, piece, p))
            alpha = [1.0] + [0.0] * n
            for s, e, _, p in edges:
                alpha[e] += alpha[s] * p
            if alpha[n] < 1e-250:
                self._expected_counts_log(word, n_word, edges, expected)
                continue
            beta = [0.0] * n + [1.0]
            for s, e, _, p in reversed(edges):
                beta[s] += p * beta[e]
            scale = n_word / alpha[n]
            for s, e, piece, p in edges:
                expected[piece] += alpha[s] * p * beta[e] * scale
        return expected

    def _expected_counts_log(self, word, n_word, edges, expected) -> None:
        """The same forward-backward in log space (no underflow on very long words)."""
        lp, n, ninf = self.log_probs, len(word), -math.inf
        alpha = [0.0] + [ninf] * n
        for s, e, piece, _ in edges:
            alpha[e] = _logaddexp(alpha[e], alpha[s] + lp[piece])
        beta = [ninf] * n + [0.0]
        for s, e, piece, _ in reversed(edges):
            beta[s] = _logaddexp(beta[s], lp[piece] + beta[e])
        z = alpha[n]
        for s, e, piece, _ in edges:
            expected[piece] += n_word * math.exp(alpha[s] + lp[piece] + beta[e] - z)

    def _prune(self, word_counts: dict[str, int], target: int) -> None:
        """Keep the ``target`` pieces whose removal would cost the most likelihood."""
        lp = self.log_probs
        freq = dict.fromkeys(lp, 0)
        for word, n in word_counts.items():
            for piece in self.viterbi(word):
                freq[piece] += n
        losses = {}
        for piece in lp:
            if piece in self._chars:
                continue
            if freq[piece] == 0:
                losses[piece] = 0.0
            else:
                alternative = self.viterbi(piece, exclude=piece)
                losses[piece] = freq[piece] * (lp[piece] - self.score(alternative))
        n_keep = target - sum(1 for p in lp if p in self._chars)
        keep = sorted(losses, key=lambda p: (-losses[p], p))[:n_keep]
        kept = {p: lp[p] for p in lp if p in self._chars}
        kept.update((p, lp[p]) for p in keep)
        # Renormalise the survivors' probabilities exactly (no count floor: these are probabilities).
        log_total = math.log(sum(math.exp(v) for v in kept.values()))
        self.log_probs = {p: v - log_total for p, v in kept.items()}
        self._refresh()
