"""A tokenizer playground: text as coloured token spans with their ids.

:func:`token_pieces` turns any supported tokenizer's output into ``(text, id)`` pairs:

* the course's tokenizers and ``sentencepiece`` (``encode`` + ``id_to_piece``);
* ``tokenizers.Tokenizer`` (an ``Encoding`` with ``ids`` and character ``offsets``);
* ``tiktoken.Encoding`` (``encode`` + ``decode_single_token_bytes``).

:func:`token_spans_html` renders them; :func:`tokenizer_playground` is an ipywidgets text box
that re-renders every tokenizer of a dict on each keystroke.
"""

from __future__ import annotations

import html
from collections import Counter

from course_lib.tokenization.peers import byte_level_alphabet

__all__ = ["token_pieces", "token_spans_html", "tokenizer_playground"]

# Light, distinguishable backgrounds; neighbouring tokens always get different colours.
PALETTE = ("#ffd6a5", "#caffbf", "#9bf6ff", "#bdb2ff", "#ffc6ff", "#fdffb6", "#a0c4ff",
           "#ffadad")


def token_pieces(tokenizer, text: str) -> list[tuple[str, int]]:
    """``[(piece text, id), ...]`` for ``text``, whatever the tokenizer's library."""
    if hasattr(tokenizer, "decode_single_token_bytes"):  # tiktoken
        ids = tokenizer.encode(text, allowed_special="all")
        return [(tokenizer.decode_single_token_bytes(i).decode("utf-8", "backslashreplace"), i)
                for i in ids]
    out = tokenizer.encode(text)
    if hasattr(out, "ids") and hasattr(out, "offsets"):  # tokenizers.Encoding
        return _encoding_pieces(text, out)
    if hasattr(tokenizer, "id_to_piece"):  # course_lib tokenizers, sentencepiece
        return [(tokenizer.id_to_piece(i), i) for i in out]
    raise TypeError(f"don't know how to show the tokens of a {type(tokenizer).__name__}")


_BYTE_OF_CHAR = byte_level_alphabet()


def _encoding_pieces(text: str, encoding) -> list[tuple[str, int]]:
    """A `tokenizers` Encoding as (piece, id). Its offsets are characters, so the byte-level
    tokens of one multi-byte character (an emoji: 4 bytes) all point at the whole character;
    those are shown as their own bytes (partial UTF-8 as \\x escapes, as for tiktoken) instead of
    the character once per token."""
    uses = Counter(encoding.offsets)
    pieces = []
    for (s, e), tok, i in zip(encoding.offsets, encoding.tokens, encoding.ids, strict=True):
        if uses[s, e] > 1 and e > s and all(ch in _BYTE_OF_CHAR for ch in tok):
            piece = bytes(_BYTE_OF_CHAR[ch] for ch in tok).decode("utf-8", "backslashreplace")
        else:
            piece = text[s:e] if e > s else tok
        pieces.append((piece, i))
    return pieces


def _show(piece: str) -> str:
    """Escape for HTML and make whitespace visible."""
    piece = piece.replace("\n", "\u21b5\n").replace("\t", "\u2192")
    return html.escape(piece)


def token_spans_html(tokenizer, text: str, show_ids: bool = True) -> str:
    """HTML with one coloured span per token; the id is shown below it and on hover."""
    pieces = token_pieces(tokenizer, text)
    spans = []
    for k, (piece, idx) in enumerate(pieces):
        color = PALETTE[k % len(PALETTE)]
        label = f"<sub style='font-size:0.6em;color:#555'>{idx}</sub>" if show_ids else ""
        spans.append(
            f"<span title='id {idx}' style='background:{color};border-radius:3px;"
            f"padding:0 1px;margin:0 1px'>{_show(piece)}{label}</span>"
        )
    return (f"<div style='font-family:monospace;white-space:pre-wrap;overflow-wrap:anywhere;line-height:2'>"
            f"{''.join(spans)}</div>"
            f"<div style='color:#555;font-size:0.8em'>{len(pieces)} tokens</div>")


def tokenizer_playground(tokenizers: dict, text: str = "Hello world! Tokenizers split text."):
    """An ipywidgets box: a text field, and below it the tokens of every tokenizer.

    The output (an ``HTML`` widget, ``box.children[1]``) updates whenever the text changes.
    """
    import ipywidgets as widgets

    if not tokenizers:
        raise ValueError("tokenizer_playground needs at least one tokenizer")
    box_text = widgets.Textarea(value=text, description="Text",
                                layout=widgets.Layout(width="100%"), continuous_update=True)
    # the rows wrap inside the box's width instead of widening it (long runs of tokens have no
    # break opportunity between adjacent spans)
    output = widgets.HTML(layout=widgets.Layout(width="100%", overflow="hidden"))

    def render(_change=None) -> None:
        rows = []
        for name, tok in tokenizers.items():
            try:
                body = token_spans_html(tok, box_text.value)
            except Exception as err:  # show the error instead of breaking the widget
                body = f"<pre style='color:#b00'>{html.escape(repr(err))}</pre>"
            rows.append(f"<h4 style='margin:6px 0 2px'>{html.escape(str(name))}</h4>{body}")
        output.value = "".join(rows)

    box_text.observe(render, names="value")
    render()
    return widgets.VBox([box_text, output])
