"""Unigram tokenizer: Viterbi segmentation, EM training and pruning."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.tokenization import (
    NOTES_UNIGRAM_COUNTS,
    SPACE_MARK,
    UnigramTokenizer,
    brute_force_segmentation,
    notes_unigram_log_probs,
    segmentation_score,
    volleyball_log_probs,
)

SMALL_CORPUS = ("the cat sat on the mat . the hat is on the cat . "
                "a cat and a hat sat on a mat . ") * 10


# --- Viterbi ------------------------------------------------------------------------------------
def test_the_notes_frequency_table_has_23_pieces_and_35_uses():
    assert len(NOTES_UNIGRAM_COUNTS) == 23
    assert sum(NOTES_UNIGRAM_COUNTS.values()) == 35
    assert math.exp(notes_unigram_log_probs()["ing"]) == pytest.approx(4 / 35), "the notes' P(ing)"


def test_the_notes_volleyball_example_keeps_the_whole_word():
    """004 l.559-571: log10 scores -5.09, -2.71 [sic: -2.79] and -1.54; `volleyball` wins."""
    log10 = notes_unigram_log_probs(base=10)
    scores = {" ".join(s): segmentation_score(s, log10)
              for s in (["vol", "le", "y", "ball"], ["volley", "ball"], ["volleyball"])}
    assert scores["vol le y ball"] == pytest.approx(math.log10(1 * 3 * 2 * 2 / 35**4))
    assert round(scores["vol le y ball"], 2) == -5.10, "the notes truncate -5.097 to -5.09"
    assert round(scores["volley ball"], 2) == -2.79, "the notes' -2.71 is a slip"
    assert round(scores["volleyball"], 2) == -1.54
    assert UnigramTokenizer(notes_unigram_log_probs()).viterbi("volleyball") == ["volleyball"]
    assert brute_force_segmentation("volleyball", log10)[0] == ["volleyball"]


def test_our_second_volleyball_example_splits_the_word():
    """Not the notes': a vocabulary without `volleyball`, where volley|ball wins."""
    log_probs = volleyball_log_probs()
    best = UnigramTokenizer(log_probs).viterbi("volleyball")
    assert best == ["volley", "ball"]
    for other in (["vol", "ley", "ball"], ["volley", "bal", "l"], list("volleyball")):
        assert segmentation_score(best, log_probs) > segmentation_score(other, log_probs) + 2


def test_viterbi_equals_brute_force_on_both_examples():
    pieces, score = brute_force_segmentation("volleyball", volleyball_log_probs())
    assert pieces == ["volley", "ball"]
    assert score == pytest.approx(math.log(0.05 * 0.08))
    pieces, score = brute_force_segmentation("volleyball", notes_unigram_log_probs())
    assert pieces == ["volleyball"]
    assert score == pytest.approx(math.log(1 / 35))


@st.composite
def vocab_and_word(draw):
    """Random log-probs over all letters of 'abc' plus some multi-letter pieces, and a word."""
    pieces = set("abc") | set(draw(st.lists(st.text("abc", min_size=2, max_size=4), max_size=12)))
    log_probs = {p: draw(st.floats(-12.0, -0.1)) for p in sorted(pieces)}
    word = draw(st.text("abc", min_size=1, max_size=10))
    return log_probs, word


@settings(max_examples=200, deadline=None)
@given(vocab_and_word())
def test_viterbi_equals_brute_force_optimum(case):
    log_probs, word = case
    got = UnigramTokenizer(log_probs).viterbi(word)
    best, best_score = brute_force_segmentation(word, log_probs)
    assert "".join(got) == word
    assert segmentation_score(got, log_probs) == pytest.approx(best_score, abs=1e-9)


def test_viterbi_marks_unknown_characters_without_failing():
    tok = UnigramTokenizer({"a": -1.0, "b": -1.0, "ab": -1.5})
    assert tok.viterbi("abzab") == ["ab", "z", "ab"]
    assert tok.encode("zz") == [0, 0, 0], "'▁', 'z', 'z' are all unknown: three <unk>"


# --- training ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def trained() -> UnigramTokenizer:
    return UnigramTokenizer().train(SMALL_CORPUS, vocab_size=30)


def test_training_reaches_the_target_size_and_keeps_every_character(trained):
    assert len(trained.log_probs) == 30
    for ch in set(SMALL_CORPUS.replace(" ", "")) | {SPACE_MARK}:
        assert ch in trained.log_probs, f"character {ch!r} was pruned: words could not be segmented"


def test_log_probs_are_a_distribution(trained):
    assert math.fsum(math.exp(v) for v in trained.log_probs.values()) == pytest.approx(1.0)


def test_frequent_words_become_single_pieces(trained):
    assert trained.tokenize("the cat") == [SPACE_MARK + "the", SPACE_MARK + "cat"]


def test_training_increases_corpus_likelihood():
    words = SMALL_CORPUS.split()

    def log_likelihood(tok):
        return sum(tok.score(tok.viterbi(SPACE_MARK + w)) for w in words)

    chars = {ch for w in words for ch in SPACE_MARK + w}
    uniform = UnigramTokenizer({ch: -math.log(len(chars)) for ch in chars})
    trained = UnigramTokenizer().train(SMALL_CORPUS, vocab_size=30)
    assert log_likelihood(trained) > log_likelihood(uniform) + 100


def test_more_pieces_means_fewer_tokens():
    small = UnigramTokenizer().train(SMALL_CORPUS, vocab_size=20)
    large = UnigramTokenizer().train(SMALL_CORPUS, vocab_size=40)
    assert len(large.tokenize(SMALL_CORPUS)) < len(small.tokenize(SMALL_CORPUS))


def test_decode_restores_words(trained):
    text = "the hat sat on a mat"
    assert trained.decode(trained.encode(text)) == text


def test_bad_training_input_is_a_clear_error():
    with pytest.raises(ValueError, match="empty corpus"):
        UnigramTokenizer().train(" \n", vocab_size=10)
    with pytest.raises(ValueError, match="distinct characters"):
        UnigramTokenizer().train("abcdef", vocab_size=3)


def test_expected_counts_sum_to_one_segmentation_per_occurrence():
    # E-step on "volleyball" x 3: every character is covered exactly once per segmentation,
    # so expected counts weighted by piece length add up to 3 * 10 characters.
    tok = UnigramTokenizer(volleyball_log_probs())
    expected = tok._expected_counts({"volleyball": 3})
    assert math.fsum(c * len(p) for p, c in expected.items()) == pytest.approx(30.0)
    assert expected["volley"] > 2.9, "volley ball dominates: ~3 expected uses of 'volley'"


def test_expected_counts_survive_probability_underflow():
    # p("x")^300 = 1e-900 underflows to 0.0 in floating point: the log-space path takes over.
    tok = UnigramTokenizer({"x": math.log(1e-3)})
    expected = tok._expected_counts({"x" * 300: 2})
    assert expected["x"] == pytest.approx(600.0)
