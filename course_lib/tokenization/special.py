"""Special tokens and chat templates.

Special tokens are strings that the tokenizer never splits and that mean something to the
model rather than being text:

* ``<bos>`` (beginning of sequence) and ``<eos>`` (end of sequence): where a document starts
  and stops; generation stops when the model emits ``<eos>``.
* ``<pad>``: fills the short sequences of a batch up to the same length; the attention mask
  and the loss ignore it.
* chat roles ``<|system|>``, ``<|user|>``, ``<|assistant|>``: a chat model sees a conversation
  as one token sequence, and these markers say who speaks. :func:`render_chat` writes that
  sequence; the model is trained to continue after ``<|assistant|>`` and to end its turn
  with ``<eos>``.

Their ids come after the regular vocabulary (``special_token_ids(vocab_size)``), and
``BPETokenizer.register_special_tokens`` makes the tokenizer emit them.
"""

from __future__ import annotations

__all__ = [
    "BOS", "EOS", "PAD", "SYSTEM", "USER", "ASSISTANT", "CHAT_ROLES", "SPECIAL_TOKENS",
    "pad_sequences", "render_chat", "special_token_ids",
]

BOS, EOS, PAD = "<bos>", "<eos>", "<pad>"
SYSTEM, USER, ASSISTANT = "<|system|>", "<|user|>", "<|assistant|>"
CHAT_ROLES = {"system": SYSTEM, "user": USER, "assistant": ASSISTANT}
#: All special tokens, in the order their ids are assigned.
SPECIAL_TOKENS = (BOS, EOS, PAD, SYSTEM, USER, ASSISTANT)


def special_token_ids(first_id: int, tokens=SPECIAL_TOKENS) -> dict[str, int]:
    """``{token: id}`` with consecutive ids from ``first_id`` (the size of the regular vocab)."""
    return {tok: first_id + k for k, tok in enumerate(tokens)}


def render_chat(messages: list[dict[str, str]], add_generation_prompt: bool = False) -> str:
    """Render a conversation as one string with chat tokens.

    Each message ``{"role": "user", "content": "Hi"}`` becomes ``<|user|>Hi<eos>``; the whole
    conversation starts with ``<bos>``. With ``add_generation_prompt=True`` it ends with
    ``<|assistant|>``, the cue for the model to answer.

    >>> render_chat([{"role": "user", "content": "Hi"}], add_generation_prompt=True)
    '<bos><|user|>Hi<eos><|assistant|>'
    """
    parts = [BOS]
    for k, message in enumerate(messages):
        role, content = message.get("role"), message.get("content")
        if role not in CHAT_ROLES:
            raise ValueError(f"message {k}: role must be one of {sorted(CHAT_ROLES)}, got {role!r}")
        if not isinstance(content, str):
            raise ValueError(f"message {k}: content must be a string, got {type(content).__name__}")
        found = [tok for tok in SPECIAL_TOKENS if tok in content]
        if found:
            raise ValueError(f"message {k}: content contains special token(s) {found}; a user "
                             f"could otherwise forge a turn")
        parts.append(f"{CHAT_ROLES[role]}{content}{EOS}")
    if add_generation_prompt:
        parts.append(ASSISTANT)
    return "".join(parts)


def pad_sequences(sequences: list[list[int]], pad_id: int, side: str = "right"
                  ) -> tuple[list[list[int]], list[list[int]]]:
    """Pad id lists to the same length; return ``(padded, attention_mask)`` (1 = real token)."""
    if side not in ("right", "left"):
        raise ValueError(f"side must be 'right' or 'left', got {side!r}")
    length = max((len(s) for s in sequences), default=0)
    padded, mask = [], []
    for seq in sequences:
        fill = [pad_id] * (length - len(seq))
        ones, zeros = [1] * len(seq), [0] * (length - len(seq))
        if side == "right":
            padded.append(list(seq) + fill)
            mask.append(ones + zeros)
        else:
            padded.append(fill + list(seq))
            mask.append(zeros + ones)
    return padded, mask
