"""WordPiece: the merge score, the trainer, and greedy longest-match-first encoding."""

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.tokenization import (
    WordPieceTokenizer,
    bert_pre_tokenize,
    train_wordpiece_vocab,
    wordpiece_pair_scores,
    wordpiece_score,
)


def naive_wordpiece_vocab(word_counts: dict[str, int], vocab_size: int) -> list[str]:
    """Reference trainer: recompute every score before every merge; ties -> first pair seen."""
    splits = {w: [w[0]] + ["##" + c for c in w[1:]] for w in word_counts}
    vocab = ["[UNK]"] + sorted({s for sp in splits.values() for s in sp})
    while len(vocab) < vocab_size:
        sym, pairs = {}, {}
        for w, n in word_counts.items():
            sp = splits[w]
            for s in sp:
                sym[s] = sym.get(s, 0) + n
            for p in zip(sp, sp[1:], strict=False):
                pairs[p] = pairs.get(p, 0) + n
        if not pairs:
            break
        best = max(pairs, key=lambda p: Fraction(pairs[p], sym[p[0]] * sym[p[1]]))
        a, b = best
        new = a + b[2:]
        if new not in vocab:
            vocab.append(new)
        for w, sp in splits.items():
            out, i = [], 0
            while i < len(sp):
                if i + 1 < len(sp) and (sp[i], sp[i + 1]) == best:
                    out.append(new)
                    i += 2
                else:
                    out.append(sp[i])
                    i += 1
            splits[w] = out
    return vocab


# --- the score ----------------------------------------------------------------------------------
def test_score_is_pair_count_over_product_of_symbol_counts():
    assert wordpiece_score(4, 8, 2) == pytest.approx(0.25)
    with pytest.raises(ValueError, match="positive"):
        wordpiece_score(1, 0, 3)


def test_score_prefers_rare_symbols_that_always_go_together():
    # "hug" x10 and "pug" x5, "zq" x1: (h,##u) occurs 10 times but ##u is frequent;
    # (z,##q) occurs once, and z and ##q never occur apart: score 1, the maximum.
    scores = wordpiece_pair_scores({"hug": 10, "pug": 5, "zq": 1})
    assert scores[("z", "##q")] == pytest.approx(1.0)
    assert scores[("h", "##u")] == pytest.approx(10 / (10 * 15))
    assert max(scores, key=scores.get) == ("z", "##q")


def test_score_ties_go_to_the_pair_seen_first():
    # ("a", "##b") and ("c", "##d") both score 2 / (2 * 2) = 1/2; the corpus mentions "ab"
    # first, so it is merged first.
    counts = {"ab": 2, "cd": 2}
    scores = wordpiece_pair_scores(counts)
    assert scores[("a", "##b")] == scores[("c", "##d")]
    vocab = train_wordpiece_vocab(counts, vocab_size=6)
    assert vocab[-1] == "ab", f"tie: expected 'ab' (seen first) to be merged, got {vocab[-1]!r}"
    vocab = train_wordpiece_vocab({"cd": 2, "ab": 2}, vocab_size=6)
    assert vocab[-1] == "cd"


# --- the trainer -----------------------------------------------------------------------------------
def test_trainer_vocab_layout():
    vocab = train_wordpiece_vocab("hug hug pug pun bun", vocab_size=12, special_tokens=["[CLS]"])
    assert vocab[:2] == ["[UNK]", "[CLS]"]
    assert vocab[2:8] == ["##g", "##n", "##u", "b", "h", "p"], "then the sorted alphabet"
    assert len(vocab) == 12
    assert len(set(vocab)) == 12, "no duplicates"


def test_trainer_too_small_vocab_is_a_clear_error():
    with pytest.raises(ValueError, match="smaller than"):
        train_wordpiece_vocab("hello world", vocab_size=3)
    with pytest.raises(ValueError, match="empty corpus"):
        train_wordpiece_vocab("   ", vocab_size=30)


@settings(max_examples=60, deadline=None)
@given(words=st.dictionaries(st.text("abcd", min_size=1, max_size=6), st.integers(1, 5),
                             min_size=1, max_size=12),
       extra=st.integers(0, 25))
def test_incremental_trainer_matches_naive(words, extra):
    base = 1 + len({c for w in words for c in [w[0]] + ["##" + x for x in w[1:]]})
    fast = train_wordpiece_vocab(words, base + extra)
    assert fast == naive_wordpiece_vocab(words, base + extra)


def test_trainer_on_text_learns_frequent_words():
    text = "the cat and the hat and the bat " * 20
    tok = WordPieceTokenizer.train(text, vocab_size=40)
    assert tok.tokenize("the hat") == ["the", "hat"]


# --- encoding -----------------------------------------------------------------------------------------
VOCAB = ["[UNK]", "un", "##aff", "##able", "a", "##b", "##c", "ab", "!", "the", "##s", "play",
         "##ing", "##ed", "h", "##u", "##g"]


def test_greedy_longest_match_first():
    tok = WordPieceTokenizer(VOCAB)
    assert tok.tokenize("unaffable") == ["un", "##aff", "##able"]
    assert tok.tokenize("abc") == ["ab", "##c"], "longest first piece 'ab', not 'a'"
    assert tok.tokenize("playing played plays") == ["play", "##ing", "play", "##ed", "play", "##s"]


def test_whole_word_becomes_unk_when_any_part_is_missing():
    tok = WordPieceTokenizer(VOCAB)
    assert tok.tokenize("abx the") == ["[UNK]", "the"], "'x' has no piece: the WHOLE word is [UNK]"


def test_long_words_become_unk():
    tok = WordPieceTokenizer(VOCAB, max_input_chars_per_word=5)
    assert tok.tokenize("hug hugug hugugug") == ["h", "##u", "##g", "h", "##u", "##g", "##u", "##g", "[UNK]"]


def test_pre_tokenizer_splits_whitespace_and_each_punctuation_mark():
    assert bert_pre_tokenize("Don't stop!! ok?") == ["Don", "'", "t", "stop", "!", "!", "ok", "?"]
    assert bert_pre_tokenize("a\u00a0b\u3000c\u2014d") == ["a", "b", "c", "\u2014", "d"]


def test_encode_decode_ids():
    tok = WordPieceTokenizer(VOCAB)
    ids = tok.encode("unaffable!")
    assert ids == [1, 2, 3, 8]
    assert tok.decode(ids) == "unaffable !"
    with pytest.raises(ValueError, match="unknown token id"):
        tok.decode([999])


def test_vocab_must_contain_unk():
    with pytest.raises(ValueError, match=r"\[UNK\]"):
        WordPieceTokenizer(["a", "b"])
