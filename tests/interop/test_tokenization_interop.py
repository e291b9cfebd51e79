"""Our tokenizers against the real libraries: tiktoken, tokenizers and sentencepiece."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.tokenization import (
    GPT4_SPLIT_PATTERN,
    BPETokenizer,
    UnigramTokenizer,
    WordPieceTokenizer,
    compression_ratio,
    fertility,
    train_wordpiece_vocab,
)
from course_lib.tokenization.peers import (
    SentencePieceUnigram,
    byte_level_alphabet,
    hf_wordpiece,
    train_hf_bpe,
)

tiktoken = pytest.importorskip("tiktoken")
tokenizers = pytest.importorskip("tokenizers")
spm = pytest.importorskip("sentencepiece")

TRICKY = [
    "Hello world", "I'm here, you're there; they'LL see.", "  leading and trailing  ",
    "numbers 1234567 and 3.14159", "tabs\tand\nnewlines\r\n\n\nend", "ÉCOLE café naïve",
    "emoji 😀👍🏽 and 中文字符", "???!!! ... --", "'s 't 're 've 'm 'll 'd", "",
]


@pytest.fixture(scope="module")
def split(shakespeare) -> tuple[str, str]:
    """Train on the first 1,000,000 characters, test on the rest."""
    return shakespeare[:1_000_000], shakespeare[1_000_000:]


# --- BPE against tiktoken: same merges applied by rank give the same ids ------------------------
@pytest.mark.parametrize("vocab_size", [512, 4096])
def test_bpe_encode_matches_tiktoken_with_our_ranks(split, vocab_size):
    train, held_out = split
    ours = BPETokenizer(GPT4_SPLIT_PATTERN).train(train, vocab_size)
    ranks = {token: idx for idx, token in ours.vocab.items()}
    assert len(ranks) == vocab_size, "our vocab has duplicate byte strings: ranks are ambiguous"
    enc = tiktoken.Encoding(f"course-{vocab_size}", pat_str=GPT4_SPLIT_PATTERN,
                            mergeable_ranks=ranks, special_tokens={})
    assert ours.encode(held_out) == enc.encode_ordinary(held_out)
    for text in TRICKY:
        assert ours.encode(text) == enc.encode_ordinary(text), f"differs on {text!r}"
    assert enc.decode(ours.encode(held_out)) == held_out


# --- BPE against tokenizers' BpeTrainer ------------------------------------------------------------
def test_bpe_learns_the_same_merges_as_tokenizers(split):
    train, held_out = split
    ours = BPETokenizer(GPT4_SPLIT_PATTERN).train(train, 512)
    hf = train_hf_bpe(train, 512)
    to_byte = byte_level_alphabet()
    hf_merges = []
    for merge in json.loads(hf.to_str())["model"]["merges"]:
        a, b = merge.split(" ") if isinstance(merge, str) else merge
        hf_merges.append((bytes(map(to_byte.get, a)), bytes(map(to_byte.get, b))))
    our_merges = [(ours.vocab[a], ours.vocab[b]) for a, b in ours.merges]
    # tokenizers breaks count ties differently (by pair, not by first occurrence), so the
    # order may differ among equal counts; the learned merges are the same.
    assert set(our_merges) == set(hf_merges)
    assert our_merges[:20] == hf_merges[:20], "the first merges have distinct counts"
    n_ours, n_hf = len(ours.encode(held_out)), len(hf.encode(held_out).ids)
    assert abs(n_ours - n_hf) <= 0.005 * n_hf, f"ours {n_ours} tokens, tokenizers {n_hf}"


# --- WordPiece against tokenizers' WordPiece model ----------------------------------------------------
@pytest.fixture(scope="module")
def wordpiece_pair(shakespeare):
    vocab = train_wordpiece_vocab(shakespeare[:200_000], 800)
    vocab += [t for t in ["中", "##文", "é", "##é", "😀"] if t not in vocab]
    ours = WordPieceTokenizer(vocab, max_input_chars_per_word=20)
    hf = hf_wordpiece({t: i for i, t in enumerate(vocab)}, max_input_chars_per_word=20)
    return ours, hf


def test_wordpiece_matches_tokenizers_on_shakespeare(shakespeare, wordpiece_pair):
    ours, hf = wordpiece_pair
    text = shakespeare[200_000:300_000]
    assert ours.encode(text) == hf.encode(text).ids


@pytest.mark.parametrize("text", TRICKY + [
    "supercalifragilisticexpialidocious and antidisestablishment", "a" * 20 + " " + "b" * 21,
    "Hark! Who goes there? 'Tis I, good sir—Romeo…", "x\u00a0y\u3000z\u2028w\x1cv",
    "KING HENRY VI: Unknownwordzzz", "中文 café 😀",
])
def test_wordpiece_matches_tokenizers_on_tricky_strings(wordpiece_pair, text):
    ours, hf = wordpiece_pair
    expected = hf.encode(text).tokens
    assert ours.tokenize(text) == expected


# Latin to Hebrew, general punctuation, CJK punctuation and ideographs, emoji. (About 100
# punctuation marks added in recent Unicode versions, e.g. U+2E43, are punctuation for Python's
# unicodedata but not yet in tokenizers' tables; they are left out.)
any_char = (st.characters(max_codepoint=0x5FF, exclude_categories=("Cs",))
            | st.characters(min_codepoint=0x2000, max_codepoint=0x206F)
            | st.characters(min_codepoint=0x3000, max_codepoint=0x303F)
            | st.characters(min_codepoint=0x4E00, max_codepoint=0x4E80)
            | st.characters(min_codepoint=0x1F600, max_codepoint=0x1F64F))


@settings(max_examples=150, deadline=None)
@given(st.text(any_char, max_size=60)
       | st.text(st.sampled_from("thequickbrownfox THE .,;!?'-\n\t\u00a0"), max_size=60))
def test_wordpiece_matches_tokenizers_on_any_text(wordpiece_pair, text):
    ours, hf = wordpiece_pair
    assert ours.tokenize(text) == hf.encode(text).tokens


# --- Unigram against sentencepiece -----------------------------------------------------------------
def test_unigram_is_competitive_with_sentencepiece(shakespeare):
    train, held_out = shakespeare[:200_000], shakespeare[1_000_000:1_100_000]
    vocab_size = 1000
    ours = UnigramTokenizer().train(train, vocab_size)
    sp = SentencePieceUnigram(train, vocab_size)
    assert sp.vocab_size == vocab_size
    f_ours, f_sp = fertility(ours, held_out), fertility(sp, held_out)
    c_ours, c_sp = compression_ratio(ours, held_out), compression_ratio(sp, held_out)
    print(f"\nunigram vocab {vocab_size}: fertility ours {f_ours:.3f} vs sentencepiece {f_sp:.3f}; "
          f"bytes/token ours {c_ours:.3f} vs sentencepiece {c_sp:.3f}")
    assert 0.8 <= f_ours / f_sp <= 1.2, f"fertility ours {f_ours:.3f}, sentencepiece {f_sp:.3f}"
    assert 0.8 <= c_ours / c_sp <= 1.25
    # Both should find the same frequent whole words.
    common = {"▁the", "▁and", "▁to", "▁of", "▁my"}
    assert common <= set(ours.log_probs)
    assert common <= sp.pieces()


# --- the playground shows the real libraries' tokens too -------------------------------------------
def test_token_pieces_for_tiktoken_and_tokenizers(split):
    from course_lib.viz.tokens import token_pieces, token_spans_html

    train, _ = split
    ours = BPETokenizer(GPT4_SPLIT_PATTERN).train(train[:50_000], 300)
    enc = tiktoken.Encoding("course-300", pat_str=GPT4_SPLIT_PATTERN, special_tokens={},
                            mergeable_ranks={t: i for i, t in ours.vocab.items()})
    hf = train_hf_bpe(train[:50_000], 300)
    text = "Good morrow, cousin!"
    for tok in (ours, enc, hf):
        pieces = token_pieces(tok, text)
        assert "".join(p for p, _ in pieces) == text, f"{type(tok).__name__}: {pieces}"
        assert f"{len(pieces)} tokens" in token_spans_html(tok, text)
