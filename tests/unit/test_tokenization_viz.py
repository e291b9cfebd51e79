"""The tokenizer playground: coloured token spans with ids, and the ipywidgets explorer."""

import pytest

from course_lib.tokenization import BPETokenizer, CharTokenizer, WordPieceTokenizer
from course_lib.viz.tokens import token_pieces, token_spans_html, tokenizer_playground


@pytest.fixture(scope="module")
def bpe() -> BPETokenizer:
    return BPETokenizer().train("hello hello world <b>", 260)


def test_token_pieces_reassemble_the_text(bpe):
    pieces = token_pieces(bpe, "hello <b>")
    assert "".join(p for p, _ in pieces) == "hello <b>"
    assert [i for _, i in pieces] == bpe.encode("hello <b>")


def test_spans_html_has_one_span_per_token_with_its_id_and_escaped_text(bpe):
    html = token_spans_html(bpe, "hello <b>")
    n = len(bpe.encode("hello <b>"))
    assert html.count("<span") == n
    assert "&lt;" in html
    assert "<b>" not in html, "token text must be HTML-escaped"
    assert f"{n} tokens" in html
    for idx in bpe.encode("hello <b>"):
        assert f"id {idx}" in html


def test_pieces_for_other_tokenizers():
    wp = WordPieceTokenizer(["[UNK]", "hel", "##lo"])
    assert token_pieces(wp, "hello") == [("hel", 1), ("##lo", 2)]
    char = CharTokenizer().train("ab")
    assert token_pieces(char, "ba") == [("b", 2), ("a", 1)]


def test_playground_updates_every_tokenizer_when_the_text_changes(bpe):
    box = tokenizer_playground({"bpe": bpe, "chars": CharTokenizer().train("helo wrd")})
    text, output = box.children
    assert "bpe" in output.value
    assert "chars" in output.value
    text.value = "held"
    assert "4 tokens" in output.value, "the char tokenizer gives 4 tokens for 'held'"


def test_playground_rows_wrap_inside_the_box_after_an_edit(bpe):
    box = tokenizer_playground({"chars": CharTokenizer().train("ab ")})
    text, output = box.children
    text.value = "ab" * 500  # one long run of tokens with no space to break at
    assert output.layout.width == "100%", "the output must take the box's width, not its content's"
    assert "overflow-wrap:anywhere" in output.value, "a long run of tokens must wrap, not widen the row"


def test_playground_needs_a_tokenizer():
    with pytest.raises(ValueError, match="at least one"):
        tokenizer_playground({})


def test_byte_tokens_of_one_character_are_shown_as_their_bytes_not_the_character_again():
    """A `tokenizers` byte-level BPE gives an emoji 4 tokens whose offsets all span the emoji;
    the playground showed it 4 times. Each token now shows its own bytes, as tiktoken's do."""
    from course_lib.tokenization.peers import train_hf_bpe

    tok = train_hf_bpe("hello world, hello there. " * 20, 280)
    pieces = token_pieces(tok, "hi 😀")
    assert [p for p, _ in pieces].count("😀") == 0
    emoji_bytes = "".join(p for p, _ in pieces if p.startswith("\\x"))
    assert emoji_bytes == "\\xf0\\x9f\\x98\\x80", pieces
    assert "".join(p for p, _ in pieces).startswith("hi ")
