"""Lesson 01's wrong answers and right variants (see tests/grading/wrong_answers/__init__.py)."""

from tests.grading.wrong_answers._util import mutate

LESSON = "01_tokenization"

# Right answers in a learner's style, to put single mistakes into.
_GET_STATS = """
    def get_stats(ids, counts=None):
        if counts is None:
            counts = {}
        for i in range(len(ids) - 1):
            pair = (ids[i], ids[i + 1])
            counts[pair] = counts.get(pair, 0) + 1
        return counts
"""

_MERGE = """
    def merge(ids, pair, idx):
        out = []
        i = 0
        while i < len(ids):
            if i < len(ids) - 1 and (ids[i], ids[i + 1]) == pair:
                out.append(idx)
                i += 2
            else:
                out.append(ids[i])
                i += 1
        return out
"""

_TRAIN = """
    def train_bpe(text, vocab_size, pattern=GPT4_SPLIT_PATTERN):
        chunks = [list(chunk.encode("utf-8")) for chunk in split_text(text, pattern)]
        merges = {}
        for idx in range(256, vocab_size):
            counts = {}
            for ids in chunks:
                get_stats(ids, counts)
            if not counts:
                break
            pair = max(counts, key=counts.get)
            chunks = [merge(ids, pair, idx) for ids in chunks]
            merges[pair] = idx
        return merges
"""

_ENCODE = """
    def bpe_encode(text, merges, pattern=GPT4_SPLIT_PATTERN):
        out = []
        for chunk in split_text(text, pattern):
            ids = list(chunk.encode("utf-8"))
            while len(ids) >= 2:
                pair = min(get_stats(ids), key=lambda p: merges.get(p, math.inf))
                if pair not in merges:
                    break
                ids = merge(ids, pair, merges[pair])
            out.extend(ids)
        return out
"""

_WORDPIECE = """
    def best_wordpiece_pair(splits):
        sym, pairs = {}, {}
        for symbols, n in splits.items():
            for s in symbols:
                sym[s] = sym.get(s, 0) + n
            for p in zip(symbols, symbols[1:]):
                pairs[p] = pairs.get(p, 0) + n
        scores = {p: c / (sym[p[0]] * sym[p[1]]) for p, c in pairs.items()}
        best = max(scores, key=scores.get)
        return best, scores[best]
"""

_VITERBI = """
    def viterbi(word, log_probs):
        n = len(word)
        longest = max(len(p) for p in log_probs)
        best = [0.0] + [-math.inf] * n
        back = [0] * (n + 1)
        for end in range(1, n + 1):
            for start in range(max(0, end - longest), end):
                piece = word[start:end]
                if piece in log_probs and best[start] + log_probs[piece] > best[end]:
                    best[end] = best[start] + log_probs[piece]
                    back[end] = start
        pieces = []
        end = n
        while end > 0:
            pieces.append(word[back[end]:end])
            end = back[end]
        return pieces[::-1]
"""

_FERTILITY = """
    def tokens_per_word(encode, text):
        words = text.split()
        if len(words) == 0:
            raise ValueError("no words")
        return len(encode(text)) / len(words)
"""

# Plausible wrong answers: the mistakes learners make, at least three per exercise. The k-th
# wrong answer of every exercise of a lesson share one submission (exercises are graded
# independently), and each must lose at least one of its exercise's points.
# The round trip grades the first 4 wrong answers of each exercise (submissions wrong-1 to
# wrong-4); the rest are tried by tools/try_answers.py.
GRADED = 4

WRONG: dict[str, list[str]] = {
    "get_stats_answer": [
        mutate(_GET_STATS, "range(len(ids) - 1)", "range(len(ids) - 2)"),  # misses the last pair
        mutate(_GET_STATS, "if counts is None:", "if not counts:"),  # a new dict for an empty `counts`
        """
        def get_stats(ids, counts=None):  # dict.update overwrites the counts already there
            new = Counter(zip(ids, ids[1:]))
            if counts is None:
                return dict(new)
            counts.update(new)
            return counts
        """,
        """
        def get_stats(ids, counts=None):  # consumes the caller's list while counting
            counts = {} if counts is None else counts
            while len(ids) > 1:
                pair = (ids.pop(0), ids[0])
                counts[pair] = counts.get(pair, 0) + 1
            return counts
        """,
        """
        def get_stats(ids, counts=None):  # most frequent first, not first-occurrence order
            counts = {} if counts is None else counts
            for pair in zip(ids, ids[1:]):
                counts[pair] = counts.get(pair, 0) + 1
            return dict(Counter(counts).most_common())
        """,
        """
        def get_stats(ids, counts=None):  # pairs in sorted order
            counts = {} if counts is None else counts
            for pair in sorted(zip(ids, ids[1:])):
                counts[pair] = counts.get(pair, 0) + 1
            return counts
        """,
    ],
    "merge_answer": [
        """
        def merge(ids, pair, idx):  # overlapping matches: [5, 5, 5] becomes [9, 9]
            out = []
            for i in range(len(ids)):
                if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
                    out.append(idx)
                elif not (i > 0 and (ids[i - 1], ids[i]) == pair):
                    out.append(ids[i])
            return out
        """,
        mutate(_MERGE, "while i < len(ids):", "while i < len(ids) - 1:"),  # drops the last id
        """
        def merge(ids, pair, idx):  # replaces in place: the caller's list changes
            i = 0
            while i < len(ids) - 1:
                if (ids[i], ids[i + 1]) == pair:
                    ids[i:i + 2] = [idx]
                i += 1
            return ids
        """,
        mutate(_MERGE, "    out = []\n", "    if pair not in zip(ids, ids[1:]):\n            return ids  # nothing to merge\n        out = []\n"),
        """
        def merge(ids, pair, idx):  # string replace: '1 2' also matches inside '11 2' or '1 21'
            text = " ".join(map(str, ids)).replace(f"{pair[0]} {pair[1]}", str(idx))
            return [int(t) for t in text.split()]
        """,
        """
        def merge(ids, pair, idx):  # merges only the first occurrence
            for i in range(len(ids) - 1):
                if (ids[i], ids[i + 1]) == pair:
                    return ids[:i] + [idx] + ids[i + 2:]
            return list(ids)
        """,
    ],
    "train_bpe_answer": [
        mutate(_TRAIN, "max(counts, key=counts.get)", "sorted(counts, key=counts.get)[-1]"),  # last of ties
        mutate(_TRAIN, "max(counts, key=counts.get)",
               "max(counts, key=lambda p: (counts[p], -p[0], -p[1]))"),  # ties to the smallest ids
        mutate(_TRAIN, "            if not counts:\n                break\n", ""),  # never stops early
        mutate(_TRAIN, 'list(chunk.encode("utf-8"))', "[ord(ch) for ch in chunk]"),  # code points, not bytes
        """
        def train_bpe(text, vocab_size, pattern=GPT4_SPLIT_PATTERN):  # counts pairs across chunks
            ids = list(text.encode("utf-8"))
            merges = {}
            for idx in range(256, vocab_size):
                counts = get_stats(ids)
                if not counts:
                    break
                pair = max(counts, key=counts.get)
                ids = merge(ids, pair, idx)
                merges[pair] = idx
            return merges
        """,
        mutate(_TRAIN, "range(256, vocab_size)", "range(256, vocab_size + 1)"),  # one merge too many
    ],
    "bpe_encode_answer": [
        """
        def bpe_encode(text, merges, pattern=GPT4_SPLIT_PATTERN):  # leftmost mergeable pair first
            out = []
            for chunk in split_text(text, pattern):
                ids = list(chunk.encode("utf-8"))
                while True:
                    found = [p for p in zip(ids, ids[1:]) if p in merges]
                    if not found:
                        break
                    ids = merge(ids, found[0], merges[found[0]])
                out.extend(ids)
            return out
        """,
        mutate(_ENCODE, "for chunk in split_text(text, pattern):", "for chunk in [text]:"),  # no pre-split
        mutate(_ENCODE, 'list(chunk.encode("utf-8"))', "[ord(ch) for ch in chunk]"),  # code points
        """
        def bpe_encode(text, merges, pattern=GPT4_SPLIT_PATTERN):  # the most frequent pair first
            out = []
            for chunk in split_text(text, pattern):
                ids = list(chunk.encode("utf-8"))
                while True:
                    stats = {p: n for p, n in get_stats(ids).items() if p in merges}
                    if not stats:
                        break
                    pair = max(stats, key=stats.get)
                    ids = merge(ids, pair, merges[pair])
                out.extend(ids)
            return out
        """,
        """
        def bpe_encode(text, merges, pattern=GPT4_SPLIT_PATTERN):  # one pass over the merges, chunk ignored
            ids = list(text.encode("utf-8"))
            for pair, idx in merges.items():
                ids = merge(ids, pair, idx)
            return ids
        """,
    ],
    "wordpiece_answer": [
        mutate(_WORDPIECE, "c / (sym[p[0]] * sym[p[1]])", "c"),  # BPE's rule: the count alone
        """
        def best_wordpiece_pair(splits):  # ignores the word counts
            sym, pairs = Counter(), Counter()
            for symbols in splits:
                sym.update(symbols)
                pairs.update(zip(symbols, symbols[1:]))
            scores = {p: c / (sym[p[0]] * sym[p[1]]) for p, c in pairs.items()}
            best = max(scores, key=scores.get)
            return best, scores[best]
        """,
        mutate(_WORDPIECE, "best = max(scores, key=scores.get)",
               "best = sorted(scores, key=scores.get)[-1]"),  # the last of equal scores
        mutate(_WORDPIECE, "c / (sym[p[0]] * sym[p[1]])", "c / sym[p[0]] / sym[p[1]]"),  # two roundings
        mutate(_WORDPIECE, "best = max(scores, key=scores.get)",
               "best = max(scores, key=lambda p: (scores[p], p))"),  # ties to the largest pair
        mutate(_WORDPIECE, "        for symbols, n in splits.items():\n",
               "        for symbols, n in splits.items():\n            if len(symbols) < 2:\n"
               "                continue\n"),  # skips one-symbol words when counting symbols
    ],
    "viterbi_answer": [
        """
        def viterbi(word, log_probs):  # greedy longest match, as WordPiece encodes
            pieces, start = [], 0
            while start < len(word):
                end = len(word)
                while word[start:end] not in log_probs:
                    end -= 1
                pieces.append(word[start:end])
                start = end
            return pieces
        """,
        mutate(_VITERBI, "range(max(0, end - longest), end)", "range(max(0, end - 2), end)"),  # pieces <= 2
        """
        def viterbi(word, log_probs):  # tries every segmentation: exponential
            if not word:
                return []
            best, best_score = None, -math.inf
            for k in range(1, len(word) + 1):
                if word[:k] in log_probs:
                    rest = viterbi(word[k:], log_probs)
                    if rest is not None:
                        score = log_probs[word[:k]] + sum(log_probs[p] for p in rest)
                        if score > best_score:
                            best, best_score = [word[:k], *rest], score
            return best
        """,
        mutate(_VITERBI, "best = [0.0] + [-math.inf] * n", "best = [0.0] * (n + 1)  # 0.0 marks 'not reached yet'")
        .replace("best[start] + log_probs[piece] > best[end]:",
                 "(best[end] == 0.0 or best[start] + log_probs[piece] > best[end]):"),
        mutate(_VITERBI, "        while end > 0:\n            pieces.append(word[back[end]:end])\n"
                         "            end = back[end]\n",
               "        while True:\n            pieces.append(word[back[end]:end])\n"
               "            end = back[end]\n            if end == 0:\n                break\n"),  # [''] for ''
        mutate(_VITERBI, "best[start] + log_probs[piece] > best[end]",
               "best[start] * log_probs[piece] > best[end]"),  # multiplies log-probabilities
        mutate(_VITERBI, "range(max(0, end - longest), end)", "range(max(0, end - longest + 1), end)"),
    ],
    "fertility_answer": [
        mutate(_FERTILITY, "len(encode(text)) / len(words)", "len(encode(text)) // len(words)"),  # //
        mutate(_FERTILITY, "text.split()", 'text.split(" ")'),  # only single spaces separate words
        mutate(_FERTILITY, "        if len(words) == 0:\n            raise ValueError(\"no words\")\n",
               ""),  # ZeroDivisionError, not ValueError
        mutate(_FERTILITY, "if len(words) == 0:", "if not text:"),  # a text of only whitespace divides by 0
        """
        def tokens_per_word(encode, text):  # encodes word by word: loses the spaces' tokens
            words = text.split()
            if not words:
                raise ValueError("no words")
            return sum(len(encode(w)) for w in words) / len(words)
        """,
        """
        def tokens_per_word(encode, text):  # words as runs of letters: punctuation is not a word
            words = re.findall(r"\\w+", text)
            if not words:
                raise ValueError("no words")
            return len(encode(text)) / len(words)
        """,
        mutate(_FERTILITY, "len(encode(text)) / len(words)", "len(set(encode(text))) / len(words)"),
    ],
}

# Right answers written differently from the solution: each must earn its exercise's full points.
RIGHT: dict[str, str] = {
    # idiom: postponed annotations, a private alias of an import
    "get_stats_answer": """
        from __future__ import annotations
        from collections import defaultdict as _dd

        def get_stats(ids: list[int], counts: dict | None = None) -> dict[tuple[int, int], int]:
            tally = _dd(int) if counts is None else counts
            for left, right in zip(ids, ids[1:]):
                if (left, right) in tally:
                    tally[left, right] += 1
                else:
                    tally[left, right] = 1
            return dict(tally) if counts is None else tally
    """,
    "merge_answer": """
        def merge(ids, pair, idx):
            out = list(ids)              # a copy, then merge it in place
            i = 0
            while i + 1 < len(out):
                if out[i] == pair[0] and out[i + 1] == pair[1]:
                    out[i:i + 2] = [idx]
                i += 1
            return out
    """,
    # idiom: typing.Optional
    "train_bpe_answer": """
        from typing import Optional
        from course_lib.tokenization import pair_counts, merge_pair

        def train_bpe(text: str, vocab_size: int, pattern: Optional[str] = GPT4_SPLIT_PATTERN):
            pieces = [list(bytes(c, "utf-8")) for c in split_text(text, pattern)]
            learned = {}
            next_id = 256
            while next_id < vocab_size:
                tally = {}
                for p in pieces:
                    pair_counts(p, tally)
                if not tally:
                    return learned
                top = max(tally.values())
                winner = next(p for p, n in tally.items() if n == top)
                pieces = [merge_pair(p, winner, next_id) for p in pieces]
                learned[winner] = next_id
                next_id += 1
            return learned
    """,
    "bpe_encode_answer": """
        def bpe_encode(text, merges, pattern=GPT4_SPLIT_PATTERN):
            # replaying every merge in the order learned is the same as "lowest id first":
            # a merge only ever creates pairs whose own merge was learned later
            result = []
            for chunk in split_text(text, pattern):
                ids = list(chunk.encode("utf-8"))
                for pair, idx in merges.items():
                    if len(ids) < 2:
                        break
                    ids = merge(ids, pair, idx)
                result += ids
            return result
    """,
    # idiom: fractions.Fraction, operator
    "wordpiece_answer": """
        from fractions import Fraction
        import operator

        def best_wordpiece_pair(splits):
            sym, pairs = Counter(), Counter()
            for symbols, n in splits.items():
                for s in symbols:
                    sym[s] += n
                for p in zip(symbols, symbols[1:]):
                    pairs[p] += n
            exact = [(p, Fraction(c, sym[p[0]] * sym[p[1]])) for p, c in pairs.items()]
            best, score = max(exact, key=operator.itemgetter(1))
            return best, float(score)
    """,
    # idiom: functools.lru_cache
    "viterbi_answer": """
        from functools import lru_cache

        def viterbi(word, log_probs):
            longest = max(map(len, log_probs))

            @lru_cache(maxsize=None)
            def best_from(start):              # the best (score, pieces) for word[start:]
                if start == len(word):
                    return 0.0, ()
                options = []
                for end in range(start + 1, min(len(word), start + longest) + 1):
                    piece = word[start:end]
                    if piece in log_probs:
                        score, rest = best_from(end)
                        options.append((log_probs[piece] + score, (piece, *rest)))
                return max(options, default=(-math.inf, ()), key=lambda o: o[0])

            for start in range(len(word), -1, -1):   # fill from the end: no deep recursion
                best_from(start)
            return list(best_from(0)[1])
    """,
    # idiom: operator, a generator expression
    "fertility_answer": """
        import operator

        def tokens_per_word(encode, text):
            n_words = sum(1 for _ in text.split())
            if not n_words:
                raise ValueError(f"no words in {text!r}")
            return operator.truediv(len(list(encode(text))), n_words)
    """,
}

# RIGHT answers written with an idiom careful people use: the answer policy must let each one
# through (tests/grader/test_answer_policy.py counts them).
IDIOMS: dict[str, str] = {
    "get_stats_answer": "postponed annotations, a private alias of an import",
    "train_bpe_answer": "typing.Optional",
    "wordpiece_answer": "fractions.Fraction, operator",
    "viterbi_answer": "functools.lru_cache",
    "fertility_answer": "operator, a generator expression",
}
