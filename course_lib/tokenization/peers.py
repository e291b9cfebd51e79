"""Tokenizers from the `tokenizers` library, set up like ours, for side-by-side comparisons.

Used by the lesson's comparison table, the parity tests and `benchmarks/bpe.py`. `tokenizers`
is a test/course extra, not a core dependency, so it is imported on first use.
"""

from __future__ import annotations

from course_lib.tokenization.bpe import GPT4_SPLIT_PATTERN

__all__ = ["train_hf_bpe", "hf_wordpiece"]


def _tokenizers():
    try:
        import tokenizers
    except ImportError as error:
        raise ImportError(
            "this comparison needs the `tokenizers` library: pip install tokenizers "
            "(make lab and make test install it)"
        ) from error
    return tokenizers


def train_hf_bpe(text: str, vocab_size: int, pattern: str = GPT4_SPLIT_PATTERN):
    """A `tokenizers` byte-level BPE trained like `BPETokenizer(pattern).train(text, vocab_size)`.

    The regex pre-split isolates the same chunks as ours, ByteLevel maps bytes to printable
    characters without a second split, and the initial alphabet holds all 256 bytes.
    """
    tk = _tokenizers()
    tok = tk.Tokenizer(tk.models.BPE())
    tok.pre_tokenizer = tk.pre_tokenizers.Sequence([
        tk.pre_tokenizers.Split(tk.Regex(pattern), behavior="isolated"),
        tk.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    trainer = tk.trainers.BpeTrainer(
        vocab_size=vocab_size, show_progress=False, initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator([text], trainer)
    return tok


def hf_wordpiece(vocab: dict[str, int], unk_token: str = "[UNK]", prefix: str = "##", max_input_chars_per_word: int = 100):
    """A `tokenizers` WordPiece encoder over `vocab`, with BERT's pre-tokenizer, like `WordPieceTokenizer`."""
    tk = _tokenizers()
    tok = tk.Tokenizer(tk.models.WordPiece(
        vocab, unk_token=unk_token, continuing_subword_prefix=prefix, max_input_chars_per_word=max_input_chars_per_word
    ))
    tok.pre_tokenizer = tk.pre_tokenizers.BertPreTokenizer()
    return tok
