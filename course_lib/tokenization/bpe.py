"""Byte-level Byte Pair Encoding (BPE), the tokenizer family of GPT-2, GPT-4 and Llama 3.

Training
--------
Start from the UTF-8 bytes of the corpus: every text is a sequence of ids in 0..255. Then
repeat until the vocabulary has ``vocab_size`` entries:

1. count every adjacent pair of ids;
2. take the most frequent pair ``(a, b)``; a **tie** goes to the pair whose first occurrence
   comes earliest in the current token sequence (the rule of the course notes, "we pick the
   first pair", and of minbpe);
3. give it a new id ``256 + k`` and replace every occurrence, left to right, by that id.

With a regex pre-split (``GPT2_SPLIT_PATTERN`` or ``GPT4_SPLIT_PATTERN``) the text is first cut
into chunks (words, numbers, punctuation runs, whitespace) and pairs never cross a chunk
boundary, so " dog" and "dog." do not produce merges that glue words to punctuation. The
chunks keep their text order for the tie rule.

:func:`naive_train_merges` does exactly the three steps above, recounting every pair before
every merge: O(corpus) per merge. :class:`BPETokenizer` produces the *same* merges
incrementally:

* identical chunks are stored once, with a weight (how often they occur), laid out in order of
  first occurrence. A pair's first occurrence in the whole text is then the smallest position
  at which it occurs in this layout.
* the layout is a doubly linked list of tokens; a token keeps the position of its first byte,
  so positions never change when tokens merge.
* an index ``pair -> count`` and ``pair -> min-heap of positions`` is updated *locally* for each
  occurrence of the merged pair: ``(x, a) (a, b) (b, y)`` become ``(x, ab) (ab, y)``.
* a global heap keyed by ``(-count, first position)`` gives the next merge. Entries are never
  updated in place; a new entry is pushed when a count changes and stale ones are skipped
  when popped ("lazy invalidation"). A pair's count rises only in the step that creates its
  newest token and only falls afterwards, so an entry whose count equals the current count is
  the current one.

Encoding
--------
Encoding applies the learned merges in training order: while some adjacent pair has a merge,
merge the pair with the lowest id (everywhere, left to right). This is what tiktoken does with
"mergeable ranks". Chunks repeat a lot in natural text, so encoded chunks are cached.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from itertools import pairwise

import regex

from course_lib.tokenization.base import Tokenizer

__all__ = [
    "GPT2_SPLIT_PATTERN", "GPT4_SPLIT_PATTERN", "BPETokenizer", "merge_pair",
    "naive_train_merges", "pair_counts", "split_text", "train_merges",
]

#: GPT-2's pre-split pattern: contractions, letters, numbers, other symbols, whitespace.
GPT2_SPLIT_PATTERN = (
    r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
)
#: GPT-4's (cl100k) pattern: case-insensitive contractions, numbers in groups of at most 3,
#: newlines split from other whitespace.
GPT4_SPLIT_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+"""
)

_CACHE_MAX_ENTRIES = 200_000
_CACHE_MAX_CHUNK_CHARS = 256
_SHORT_CHUNK = 64  # chunks up to this many bytes use the simple quadratic merge loop


# ---------------------------------------------------------------------------------------------
# The building blocks (minbpe's get_stats and merge), used by the naive trainer and the lesson.
# ---------------------------------------------------------------------------------------------
def pair_counts(ids: list[int], counts: dict[tuple[int, int], int] | None = None
                ) -> dict[tuple[int, int], int]:
    """Count adjacent pairs: ``[1, 2, 3, 1, 2] -> {(1, 2): 2, (2, 3): 1, (3, 1): 1}``.

    The dict keeps first-occurrence order, which is what the tie rule needs. Pass ``counts``
    to accumulate over several chunks.
    """
    counts = {} if counts is None else counts
    for pair in pairwise(ids):
        counts[pair] = counts.get(pair, 0) + 1
    return counts


def merge_pair(ids: list[int], pair: tuple[int, int], new_id: int) -> list[int]:
    """Replace every occurrence of ``pair`` by ``new_id``, scanning left to right.

    ``merge_pair([5, 5, 5], (5, 5), 9) == [9, 5]``: occurrences never overlap.
    """
    out = []
    i, n = 0, len(ids)
    a, b = pair
    while i < n:
        if i + 1 < n and ids[i] == a and ids[i + 1] == b:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def split_text(text: str, pattern: str | None) -> list[str]:
    """Pre-split ``text`` into chunks with ``pattern`` (``None``: the whole text is one chunk)."""
    if pattern is None:
        return [text] if text else []
    return regex.findall(pattern, text)


def _check_training_input(text: str, vocab_size: int) -> None:
    if not isinstance(vocab_size, int) or vocab_size < 256:
        raise ValueError(
            f"vocab_size must be an int >= 256 for byte-level BPE (the 256 byte values come "
            f"first), got {vocab_size!r}"
        )
    if not text:
        raise ValueError("cannot train a tokenizer on an empty corpus")


def naive_train_merges(text: str, vocab_size: int, pattern: str | None = None
                       ) -> dict[tuple[int, int], int]:
    """Reference trainer: recount all pairs before every merge (minbpe's algorithm).

    Slow (each merge costs a pass over the whole corpus) but obviously correct; the fast
    trainer in :class:`BPETokenizer` must return exactly the same merges. Training stops early
    if no pair is left (every chunk is a single token).
    """
    _check_training_input(text, vocab_size)
    chunks = [list(chunk.encode("utf-8")) for chunk in split_text(text, pattern)]
    merges: dict[tuple[int, int], int] = {}
    for new_id in range(256, vocab_size):
        counts: dict[tuple[int, int], int] = {}
        for ids in chunks:
            pair_counts(ids, counts)
        if not counts:
            break
        best = max(counts, key=counts.get)  # max keeps the first of equal counts
        chunks = [merge_pair(ids, best, new_id) for ids in chunks]
        merges[best] = new_id
    return merges


# ---------------------------------------------------------------------------------------------
# The incremental trainer.
# ---------------------------------------------------------------------------------------------
def train_merges(text: str, vocab_size: int, pattern: str | None = None
                 ) -> dict[tuple[int, int], int]:
    """Learn BPE merges incrementally; same result as :func:`naive_train_merges`.

    See the module docstring for the data structures.
    """
    _check_training_input(text, vocab_size)

    # 1. Unique chunks in first-occurrence order, with their counts (dicts keep order).
    weights: dict[str, int] = {}
    for chunk in split_text(text, pattern):
        weights[chunk] = weights.get(chunk, 0) + 1

    # 2. One linked list over all chunks. tok[i] is the id of the token whose first byte is at
    #    position i (-1 once the position is absorbed by a merge); nxt/prv link the tokens of
    #    one chunk (-1 at the chunk's ends); wt[i] is the weight of the chunk.
    tok: list[int] = []
    nxt: list[int] = []
    prv: list[int] = []
    wt: list[int] = []
    for chunk, w in weights.items():
        data = chunk.encode("utf-8")
        start, n = len(tok), len(data)
        if n == 0:
            continue  # a pattern that matches the empty string
        tok.extend(data)
        nxt.extend(range(start + 1, start + n + 1))
        nxt[-1] = -1
        prv.append(-1)
        prv.extend(range(start, start + n - 1))
        wt.extend([w] * n)

    # 3. The pair index: count (weighted) and a min-heap of start positions per pair. The
    #    positions are appended in increasing order, so each list is already a heap.
    count: dict[tuple[int, int], int] = {}
    where: dict[tuple[int, int], list[int]] = {}
    for i, j in enumerate(nxt):
        if j >= 0:
            pair = (tok[i], tok[j])
            count[pair] = count.get(pair, 0) + wt[i]
            if pair in where:
                where[pair].append(i)
            else:
                where[pair] = [i]

    def first_position(pair: tuple[int, int]) -> int:
        """Smallest position where ``pair`` currently starts (drops stale heap entries)."""
        heap = where[pair]
        a, b = pair
        while True:
            i = heap[0]
            j = nxt[i]
            if tok[i] == a and j >= 0 and tok[j] == b:
                return i
            heapq.heappop(heap)

    # 4. The global heap of candidate merges.
    queue = [(-c, where[pair][0], pair) for pair, c in count.items()]
    heapq.heapify(queue)

    merges: dict[tuple[int, int], int] = {}
    for new_id in range(256, vocab_size):
        # Pop until an entry matches its pair's current count.
        while queue:
            neg_c, _, pair = heapq.heappop(queue)
            if count.get(pair) == -neg_c:
                break
        else:
            break  # no pairs left at all
        merges[pair] = new_id
        a, b = pair
        changed: set[tuple[int, int]] = set()
        # Merge every occurrence, left to right. Entries for positions that an earlier merge in
        # this loop consumed (pair (a, a) in "aaa") fail the validity check and are skipped.
        for i in sorted(where.pop(pair)):
            if tok[i] != a:
                continue
            j = nxt[i]
            if j < 0 or tok[j] != b:
                continue
            w = wt[i]
            p, n = prv[i], nxt[j]
            # (x, a) (a, b) (b, y)  ->  (x, new) (new, y)
            if p >= 0:
                lost, gained = (tok[p], a), (tok[p], new_id)
                count[lost] -= w
                count[gained] = count.get(gained, 0) + w
                if gained in where:
                    heapq.heappush(where[gained], p)
                else:
                    where[gained] = [p]
                changed.add(lost)
                changed.add(gained)
            if n >= 0:
                lost, gained = (b, tok[n]), (new_id, tok[n])
                count[lost] -= w
                count[gained] = count.get(gained, 0) + w
                if gained in where:
                    heapq.heappush(where[gained], i)
                else:
                    where[gained] = [i]
                changed.add(lost)
                changed.add(gained)
                prv[n] = i
            tok[i], tok[j], nxt[i] = new_id, -1, n

        del count[pair]
        changed.discard(pair)
        for p in changed:
            c = count[p]
            if c > 0:
                heapq.heappush(queue, (-c, first_position(p), p))
            else:
                del count[p]
                del where[p]
    return merges


# ---------------------------------------------------------------------------------------------
# The tokenizer.
# ---------------------------------------------------------------------------------------------
class BPETokenizer(Tokenizer):
    """Byte-level BPE with an optional regex pre-split and special tokens.

    >>> tok = BPETokenizer(GPT4_SPLIT_PATTERN).train(corpus, vocab_size=512)  # doctest: +SKIP
    >>> tok.decode(tok.encode("Hello world")) == "Hello world"  # doctest: +SKIP
    True
    """

    def __init__(self, pattern: str | None = None) -> None:
        super().__init__(pattern)
        self._cache: dict[str, tuple[int, ...]] = {}
        self._merges_changed()

    def _merges_changed(self) -> None:
        super()._merges_changed()
        self._compiled = regex.compile(self.pattern) if self.pattern is not None else None
        self._cache = {}
        if self.special_tokens:
            alternatives = sorted(self.special_tokens, key=len, reverse=True)
            self._special_re = regex.compile("(" + "|".join(map(regex.escape, alternatives)) + ")")
        else:
            self._special_re = None

    def clear_cache(self) -> None:
        """Forget the encoded chunks (for timing a cold start)."""
        self._cache = {}

    # --- training ---------------------------------------------------------------------------
    def train(self, text: str, vocab_size: int) -> BPETokenizer:
        """Learn ``vocab_size - 256`` merges from ``text`` (incrementally) and return ``self``.

        Special tokens registered before are dropped (their ids may collide with new merges).
        """
        self.merges = train_merges(text, vocab_size, self.pattern)
        self.special_tokens = {}
        self._merges_changed()
        return self

    # --- encoding ---------------------------------------------------------------------------
    def _merge_chunk(self, ids: list[int]) -> list[int]:
        """Apply the merges to one chunk's byte ids, lowest merge id first."""
        merges = self.merges
        if len(ids) > _SHORT_CHUNK:
            return _merge_long(ids, merges)
        while len(ids) >= 2:
            # The adjacent pair that was learned first (pairs without a merge rank as +inf).
            pair = min(pairwise(ids), key=lambda p: merges.get(p, float("inf")))
            if pair not in merges:
                break
            ids = merge_pair(ids, pair, merges[pair])
        return ids

    def encode_ordinary(self, text: str) -> list[int]:
        """Encode ``text`` ignoring special tokens (their text is encoded like any other)."""
        chunks = self._compiled.findall(text) if self._compiled is not None else [text]
        cache = self._cache
        out: list[int] = []
        for chunk in chunks:
            ids = cache.get(chunk)
            if ids is None:
                ids = tuple(self._merge_chunk(list(chunk.encode("utf-8"))))
                if len(chunk) <= _CACHE_MAX_CHUNK_CHARS:
                    if len(cache) >= _CACHE_MAX_ENTRIES:
                        cache.clear()
                    cache[chunk] = ids
            out.extend(ids)
        return out

    def encode(self, text: str, allowed_special: str | Iterable[str] = "all") -> list[int]:
        """Encode text to ids.

        ``allowed_special`` says which registered special tokens are recognised in ``text``:
        ``"all"`` (default), ``"none"`` (treat them as plain text), ``"none_raise"`` (raise
        if one appears, tiktoken's default), or a set of token strings.
        """
        if allowed_special == "all":
            special = self.special_tokens
        elif allowed_special == "none":
            special = {}
        elif allowed_special == "none_raise":
            special = {}
            found = [tok for tok in self.special_tokens if tok in text]
            if found:
                raise ValueError(f"text contains special token(s) {found} "
                                 f"but allowed_special='none_raise'")
        else:
            allowed = set(allowed_special)
            unknown = allowed - set(self.special_tokens)
            if unknown:
                raise ValueError(f"not registered as special tokens: {sorted(unknown)}")
            special = {tok: idx for tok, idx in self.special_tokens.items() if tok in allowed}
        if not special:
            return self.encode_ordinary(text)
        if special is self.special_tokens:
            pattern = self._special_re
        else:
            alternatives = sorted(special, key=len, reverse=True)
            pattern = regex.compile("(" + "|".join(map(regex.escape, alternatives)) + ")")
        out: list[int] = []
        # With a capturing group, split returns [text, special, text, special, ..., text].
        for k, part in enumerate(pattern.split(text)):
            if k % 2:
                out.append(special[part])
            elif part:
                out.extend(self.encode_ordinary(part))
        return out


def _merge_long(ids: list[int], merges: dict[tuple[int, int], int]) -> list[int]:
    """Same result as the quadratic loop in ``BPETokenizer._merge_chunk``, in O(n log n).

    A heap holds ``(merge id, position)`` for every adjacent pair that has a merge. Popping
    the smallest gives the lowest-ranked merge, leftmost first; pairs created by a merge always
    have a larger id, so all occurrences of one merge are done before any later merge, exactly
    like the loop.
    """
    n = len(ids)
    tok = list(ids)
    nxt = list(range(1, n + 1))
    nxt[-1] = -1
    prv = list(range(-1, n - 1))
    heap = [(merges[p], i) for i, p in enumerate(pairwise(ids)) if p in merges]
    heapq.heapify(heap)
    while heap:
        rank, i = heapq.heappop(heap)
        j = nxt[i]
        if tok[i] < 0 or j < 0 or merges.get((tok[i], tok[j])) != rank:
            continue  # stale: one side was merged since this entry was pushed
        k = nxt[j]
        tok[i], tok[j], nxt[i] = rank, -1, k
        if k >= 0:
            prv[k] = i
            r = merges.get((rank, tok[k]))
            if r is not None:
                heapq.heappush(heap, (r, i))
        p = prv[i]
        if p >= 0:
            r = merges.get((tok[p], rank))
            if r is not None:
                heapq.heappush(heap, (r, p))
    return [t for t in tok if t >= 0]
