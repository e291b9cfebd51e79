"""Tokenizers from characters to sub-words (lesson 01).

* :mod:`~course_lib.tokenization.simple`: :class:`CharTokenizer`, :class:`WordTokenizer`.
* :mod:`~course_lib.tokenization.word_bpe`: BPE by hand on "low lower newest widest".
* :mod:`~course_lib.tokenization.bpe`: byte-level :class:`BPETokenizer` (GPT-2/GPT-4 style),
  its incremental trainer and the naive reference trainer.
* :mod:`~course_lib.tokenization.wordpiece`: :class:`WordPieceTokenizer` (BERT).
* :mod:`~course_lib.tokenization.unigram`: :class:`UnigramTokenizer` (SentencePiece).
* :mod:`~course_lib.tokenization.special`: special and chat tokens.
* :mod:`~course_lib.tokenization.metrics`: :func:`fertility`, :func:`compression_ratio`.
"""

from course_lib.tokenization.base import Tokenizer
from course_lib.tokenization.bpe import (
    GPT2_SPLIT_PATTERN,
    GPT4_SPLIT_PATTERN,
    BPETokenizer,
    merge_pair,
    naive_train_merges,
    pair_counts,
    split_text,
    train_merges,
)
from course_lib.tokenization.metrics import compression_ratio, count_tokens, fertility
from course_lib.tokenization.simple import CharTokenizer, WordTokenizer
from course_lib.tokenization.special import (
    ASSISTANT,
    BOS,
    EOS,
    PAD,
    SPECIAL_TOKENS,
    SYSTEM,
    USER,
    pad_sequences,
    render_chat,
    special_token_ids,
)
from course_lib.tokenization.unigram import (
    NOTES_UNIGRAM_COUNTS,
    SPACE_MARK,
    VOLLEYBALL_PROBS,
    UnigramTokenizer,
    brute_force_segmentation,
    notes_unigram_log_probs,
    segmentation_score,
    volleyball_log_probs,
)
from course_lib.tokenization.word_bpe import (
    NOTES_BPE_CORPUS,
    SENNRICH_CORPUS,
    MergeStep,
    newest_example,
    word_bpe_merge_table,
    word_bpe_tokenize,
)
from course_lib.tokenization.wordpiece import (
    WordPieceTokenizer,
    bert_pre_tokenize,
    train_wordpiece_vocab,
    wordpiece_pair_scores,
    wordpiece_score,
)

__all__ = [
    "ASSISTANT", "BOS", "EOS", "GPT2_SPLIT_PATTERN", "GPT4_SPLIT_PATTERN", "NOTES_BPE_CORPUS",
    "NOTES_UNIGRAM_COUNTS", "PAD",
    "SENNRICH_CORPUS", "SPACE_MARK", "SPECIAL_TOKENS", "SYSTEM", "USER", "VOLLEYBALL_PROBS",
    "BPETokenizer", "CharTokenizer", "MergeStep", "Tokenizer", "UnigramTokenizer",
    "WordPieceTokenizer", "WordTokenizer",
    "bert_pre_tokenize", "brute_force_segmentation", "compression_ratio", "count_tokens",
    "fertility", "merge_pair", "naive_train_merges", "newest_example", "notes_unigram_log_probs", "pad_sequences",
    "pair_counts", "render_chat", "segmentation_score", "special_token_ids", "split_text",
    "train_merges", "train_wordpiece_vocab", "volleyball_log_probs", "word_bpe_merge_table",
    "word_bpe_tokenize", "wordpiece_pair_scores", "wordpiece_score",
]
