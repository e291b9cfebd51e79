"""Tokenizers from real libraries (`tokenizers`, `sentencepiece`), set up like ours, for comparisons.

Used by the lesson's comparison table, the parity tests and `benchmarks/bpe.py`. Both
libraries are test extras (installed by `make lab` and `make test`), not core dependencies,
so they are imported on first use.
"""

from __future__ import annotations

import importlib
import io

from course_lib.tokenization.bpe import GPT4_SPLIT_PATTERN

__all__ = ["SentencePieceUnigram", "byte_level_alphabet", "hf_wordpiece", "train_hf_bpe"]


def byte_level_alphabet() -> dict[str, int]:
    """GPT-2's printable stand-in for each byte (the ByteLevel alphabet of `tokenizers`),
    inverted: character -> byte. Printable Latin-1 bytes stand for themselves; the other 68
    bytes get the characters 256, 257, ... in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
                 *range(ord("®"), ord("ÿ") + 1)]
    others = [b for b in range(256) if b not in printable]
    return {**{chr(b): b for b in printable}, **{chr(256 + n): b for n, b in enumerate(others)}}


def _import(name: str):
    try:
        return importlib.import_module(name)
    except ImportError as error:
        raise ImportError(
            f"this comparison needs the `{name}` library: pip install {name} (make lab and make test install it)"
        ) from error


def _tokenizers():
    return _import("tokenizers")


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


class SentencePieceUnigram:
    """`sentencepiece`'s Unigram model trained in memory on `text`, one line per sentence.

    No normalisation and full character coverage, to compare like with like with
    `UnigramTokenizer`. `encode` works line by line, as sentencepiece expects sentences.
    """

    def __init__(self, text: str, vocab_size: int):
        spm = _import("sentencepiece")
        model = io.BytesIO()
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(text.splitlines()), model_writer=model, vocab_size=vocab_size,
            model_type="unigram", character_coverage=1.0, normalization_rule_name="identity",
            num_threads=1, minloglevel=2,
        )
        self.processor = spm.SentencePieceProcessor(model_proto=model.getvalue())
        self.vocab_size = self.processor.get_piece_size()

    def encode(self, text: str) -> list[int]:
        return [i for line in text.splitlines() for i in self.processor.encode(line)]

    def pieces(self) -> set[str]:
        return {self.processor.id_to_piece(i) for i in range(self.vocab_size)}
