"""Byte-level BPE: the building blocks, the merge rule, the incremental trainer, encoding,
special tokens and the file format."""


import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from course_lib.tokenization import (
    GPT2_SPLIT_PATTERN,
    GPT4_SPLIT_PATTERN,
    BPETokenizer,
    merge_pair,
    naive_train_merges,
    pair_counts,
    train_merges,
)

# Text without lone surrogates (they cannot be encoded as UTF-8).
unicode_text = st.text(st.characters(exclude_categories=("Cs",)), max_size=80)
# Few distinct characters: many repeated pairs, overlaps ("aaaa") and ties.
repetitive_text = st.text(st.sampled_from("ab c\n"), min_size=1, max_size=120)
patterns = st.sampled_from([None, GPT2_SPLIT_PATTERN, GPT4_SPLIT_PATTERN])


def reference_encode(tok: BPETokenizer, text: str) -> list[int]:
    """minbpe's encode: repeatedly merge the adjacent pair with the lowest merge id."""
    from course_lib.tokenization import split_text

    out = []
    for chunk in split_text(text, tok.pattern):
        ids = list(chunk.encode("utf-8"))
        while len(ids) >= 2:
            ranked = [p for p in zip(ids, ids[1:], strict=False) if p in tok.merges]
            if not ranked:
                break
            pair = min(ranked, key=tok.merges.__getitem__)
            ids = merge_pair(ids, pair, tok.merges[pair])
        out += ids
    return out


# --- building blocks -----------------------------------------------------------------------
def test_pair_counts_counts_adjacent_pairs_in_first_occurrence_order():
    counts = pair_counts([1, 2, 3, 1, 2])
    assert counts == {(1, 2): 2, (2, 3): 1, (3, 1): 1}
    assert list(counts) == [(1, 2), (2, 3), (3, 1)], "dict order must be first occurrence"


def test_pair_counts_accumulates_across_chunks_without_crossing_them():
    counts = pair_counts([1, 2], pair_counts([2, 1]))
    assert counts == {(2, 1): 1, (1, 2): 1}, "no pair (1, 2) across the chunk boundary"


def test_merge_pair_replaces_non_overlapping_occurrences_left_to_right():
    assert merge_pair([1, 2, 3, 1, 2], (1, 2), 9) == [9, 3, 9]
    assert merge_pair([5, 5, 5], (5, 5), 9) == [9, 5]
    assert merge_pair([5, 5, 5, 5], (5, 5), 9) == [9, 9]


# --- the merge rule ------------------------------------------------------------------------------
def test_training_on_the_wikipedia_example():
    # "aaabdaaabac": aa -> Z, then Za -> Y, then Yb -> X.
    merges = BPETokenizer().train("aaabdaaabac", 256 + 3).merges
    assert merges == {(97, 97): 256, (256, 97): 257, (257, 98): 258}


@pytest.mark.parametrize(("text", "first"), [("cdabcdab", (99, 100)), ("abcdabcd", (97, 98))])
def test_ties_go_to_the_pair_that_occurs_first(text, first):
    # (a, b) and (c, d) both occur twice; the one seen first is merged first.
    merges = list(BPETokenizer().train(text, 257).merges)
    assert merges == [first], f"tie between (a,b) and (c,d) on {text!r}: expected {first}"


def test_ties_follow_chunk_order_with_a_pattern():
    # Chunks "xy", " ab", " xy", " ab": pairs (120,121) and (97,98) both occur twice,
    # (120, 121) first; (32, 97) and (32, 120) too, but later within their chunks.
    merges = list(BPETokenizer(GPT2_SPLIT_PATTERN).train("xy ab xy ab", 257).merges)
    assert merges == [(120, 121)]


def test_vocab_entries_are_concatenations_of_their_parts():
    tok = BPETokenizer().train("the cat sat on the mat with the hat", 270)
    for (a, b), idx in tok.merges.items():
        assert tok.vocab[idx] == tok.vocab[a] + tok.vocab[b]
    assert list(tok.merges.values()) == list(range(256, 256 + len(tok.merges)))


def test_training_stops_when_no_pair_is_left():
    tok = BPETokenizer().train("abab", 1000)
    assert len(tok.merges) == 2, "ab, then abab: nothing left to merge"
    assert tok.encode("abab") == [257]


@pytest.mark.parametrize("vocab_size", [0, 100, 255])
def test_vocab_size_below_256_is_a_clear_error(vocab_size):
    with pytest.raises(ValueError, match="vocab_size must be .*>= 256"):
        BPETokenizer().train("hello", vocab_size)


def test_empty_corpus_is_a_clear_error():
    with pytest.raises(ValueError, match="empty corpus"):
        BPETokenizer(GPT4_SPLIT_PATTERN).train("", 300)


# --- incremental trainer == naive recount trainer ----------------------------------------------
@pytest.mark.parametrize(("pattern", "n_chars"), [(GPT4_SPLIT_PATTERN, 120_000), (None, 40_000)])
def test_incremental_trainer_matches_naive_on_shakespeare(shakespeare, pattern, n_chars):
    text = shakespeare[:n_chars]
    fast = train_merges(text, 256 + 64, pattern)
    naive = naive_train_merges(text, 256 + 64, pattern)
    assert len(fast) == 64
    first_diff = next((k for k, (x, y) in enumerate(zip(fast, naive, strict=True)) if x != y),
                      None)
    assert list(fast.items()) == list(naive.items()), f"merge {first_diff} differs"


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=unicode_text | repetitive_text, pattern=patterns, n_merges=st.integers(0, 40))
def test_incremental_trainer_matches_naive_on_any_text(text, pattern, n_merges):
    assume(text)
    fast = train_merges(text, 256 + n_merges, pattern)
    naive = naive_train_merges(text, 256 + n_merges, pattern)
    assert list(fast.items()) == list(naive.items())


# --- encoding and decoding -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def trained(shakespeare) -> BPETokenizer:
    return BPETokenizer(GPT4_SPLIT_PATTERN).train(shakespeare[:100_000], 256 + 200)


@settings(max_examples=200, deadline=None)
@given(text=unicode_text)
def test_decode_inverts_encode(trained, text):
    assert trained.decode(trained.encode(text)) == text


@settings(max_examples=100, deadline=None)
@given(text=unicode_text | repetitive_text)
def test_encode_matches_the_reference_merge_loop(trained, text):
    assert trained.encode(text) == reference_encode(trained, text)


@settings(max_examples=30, deadline=None)
@given(text=st.text(st.sampled_from("ab "), min_size=65, max_size=400))
def test_long_chunks_encode_like_the_reference(text):
    # Without a pattern the whole text is one chunk: long chunks use the heap-based merge.
    tok = BPETokenizer().train("ab ba aab abb " * 20 + "aaaa bbbb", 256 + 20)
    assert tok.encode(text) == reference_encode(tok, text)
    assert tok.decode(tok.encode(text)) == text


def test_encoding_compresses_the_training_text(shakespeare, trained):
    text = shakespeare[:20_000]
    ids = trained.encode(text)
    assert len(ids) < 0.6 * len(text.encode("utf-8")), "200 merges should save > 40% of tokens"
    assert trained.encode(text) == ids, "the chunk cache must not change the result"


def test_decode_of_an_unknown_id_is_a_clear_error(trained):
    with pytest.raises(ValueError, match="unknown token id 99999"):
        trained.decode([72, 99999])


def test_decode_accepts_tensors(trained):
    import torch

    ids = trained.encode("To be")
    assert trained.decode(torch.tensor(ids)) == "To be"


def test_decode_of_a_partial_character_gives_the_replacement_character():
    tok = BPETokenizer()
    assert tok.decode(list("é".encode())[:1]) == "\ufffd"


# --- special tokens --------------------------------------------------------------------------------
@pytest.fixture
def with_specials(shakespeare) -> BPETokenizer:
    tok = BPETokenizer(GPT4_SPLIT_PATTERN).train(shakespeare[:100_000], 256 + 200)
    tok.register_special_tokens({"<|endoftext|>": 1000, "<bos>": 1001})
    return tok


def test_special_tokens_are_single_ids(with_specials):
    ids = with_specials.encode("<bos>Hello<|endoftext|>")
    assert ids[0] == 1001
    assert ids[-1] == 1000
    assert with_specials.decode(ids) == "<bos>Hello<|endoftext|>"


def test_allowed_special_none_encodes_them_as_text(with_specials):
    ids = with_specials.encode("<bos>", allowed_special="none")
    assert 1001 not in ids
    assert with_specials.decode(ids) == "<bos>"


def test_allowed_special_subset_and_none_raise(with_specials):
    ids = with_specials.encode("<bos>x<|endoftext|>", allowed_special={"<bos>"})
    assert ids[0] == 1001
    assert 1000 not in ids
    with pytest.raises(ValueError, match="special token"):
        with_specials.encode("x<bos>", allowed_special="none_raise")


@pytest.mark.parametrize("bad", [{"<x>": 300}, {"": 2000}, {"<x>": 1000}])
def test_special_token_ids_must_not_collide(with_specials, bad):
    with pytest.raises(ValueError, match="id|non-empty"):
        with_specials.register_special_tokens(bad)


# --- save and load ---------------------------------------------------------------------------
def test_save_load_round_trip(tmp_path, with_specials):
    path = with_specials.save(tmp_path / "tok.bpe")
    loaded = BPETokenizer().load(path)
    assert loaded.pattern == GPT4_SPLIT_PATTERN
    assert list(loaded.merges.items()) == list(with_specials.merges.items())
    assert loaded.special_tokens == with_specials.special_tokens
    text = "<bos>To be, or not to be: that is the question.<|endoftext|>"
    assert loaded.encode(text) == with_specials.encode(text)


def test_saved_file_is_readable_text(tmp_path, trained):
    lines = trained.save(tmp_path / "tok.bpe").read_text(encoding="utf-8").splitlines()
    assert lines[0] == "course_lib.tokenization bpe v1"
    assert lines[1].startswith("pattern ")
    assert lines[3] == "merges 200"
    a, b = map(int, lines[4].split())
    assert trained.merges[(a, b)] == 256


@pytest.mark.parametrize(("corrupt", "line"), [
    (lambda ls: ["minbpe v1"] + ls[1:], 1),
    (lambda ls: ls[:1] + ["pattern {not json"] + ls[2:], 2),
    (lambda ls: ls[:1] + ['pattern "(unclosed"'] + ls[2:], 2),
    (lambda ls: ls[:2] + ["special x"] + ls[3:], 3),
    (lambda ls: ls[:5] + ["104 oops"] + ls[6:], 6),
    (lambda ls: ls[:5] + ["999 1"] + ls[6:], 6),
    (lambda ls: ls[:10], 11),
])
def test_corrupt_file_is_a_clear_error_naming_file_and_line(tmp_path, trained, corrupt, line):
    path = trained.save(tmp_path / "tok.bpe")
    lines = path.read_text(encoding="utf-8").splitlines()
    path.write_text("\n".join(corrupt(lines)) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=rf"tok\.bpe:{line}: corrupt tokenizer file"):
        BPETokenizer().load(path)


def test_assigning_merges_rebuilds_vocab_and_encoding():
    trained = BPETokenizer(GPT4_SPLIT_PATTERN).train("low lower lowest " * 20, 270)
    fresh = BPETokenizer(GPT4_SPLIT_PATTERN)
    assert fresh.encode("lowest") == list(b"lowest")
    fresh.merges = trained.merges
    assert fresh.vocab == trained.vocab
    assert fresh.encode("lowest lower") == trained.encode("lowest lower")
