"""The shared base of the byte-level tokenizers (in the style of Karpathy's minbpe).

A byte-level tokenizer is fully described by three things:

* ``merges``: an *ordered* dict ``(id_a, id_b) -> new_id``. Ids 0..255 are the raw bytes; merge
  number k creates id ``256 + k``. The order is the order of training, which is also the
  priority ("rank") at encoding time: a merge learned earlier is applied first.
* ``pattern``: an optional regex that pre-splits text into chunks; merges never cross a chunk
  boundary (``None`` means the whole text is one chunk).
* ``special_tokens``: a dict ``str -> id`` of strings that are never split (``<|endoftext|>``,
  ``<bos>``, ...). Their ids come after the merges.

``vocab`` (``id -> bytes``) is derived from those: byte ``i`` is ``bytes([i])`` and each merge
concatenates the bytes of its two parts. Decoding is therefore the same for every byte-level
tokenizer: look up each id, join the bytes, decode UTF-8. This module holds that shared part,
plus the readable save/load format.
"""

from __future__ import annotations

import json
from pathlib import Path

import regex

#: First line of a saved tokenizer file; bump the version when the format changes.
FILE_HEADER = "course_lib.tokenization bpe v1"


class Tokenizer:
    """Base class: merges, special tokens, vocab, decode, save and load.

    Subclasses implement ``train`` and ``encode``.
    """

    def __init__(self, pattern: str | None = None) -> None:
        self.pattern = pattern
        self._merges: dict[tuple[int, int], int] = {}
        self.special_tokens: dict[str, int] = {}
        self.vocab: dict[int, bytes] = self._build_vocab()

    @property
    def merges(self) -> dict[tuple[int, int], int]:
        """The learned merges in order, ``(id_a, id_b) -> new id``. Assigning rebuilds the vocab."""
        return self._merges

    @merges.setter
    def merges(self, merges: dict[tuple[int, int], int]) -> None:
        self._merges = dict(merges)
        self._merges_changed()

    # --- to be implemented by subclasses -------------------------------------------------
    def train(self, text: str, vocab_size: int) -> Tokenizer:
        raise NotImplementedError

    def encode(self, text: str) -> list[int]:
        raise NotImplementedError

    # --- vocabulary --------------------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        """Number of ids in use: 256 bytes + merges + special tokens."""
        return len(self.vocab)

    def _build_vocab(self) -> dict[int, bytes]:
        vocab = {i: bytes([i]) for i in range(256)}
        for (a, b), idx in self.merges.items():
            vocab[idx] = vocab[a] + vocab[b]
        for token, idx in self.special_tokens.items():
            vocab[idx] = token.encode("utf-8")
        return vocab

    def _merges_changed(self) -> None:
        """Called whenever merges or special tokens change: rebuild derived tables."""
        self.vocab = self._build_vocab()

    def register_special_tokens(self, special_tokens: dict[str, int]) -> None:
        """Add special tokens, e.g. ``{"<|endoftext|>": 512}``.

        Their ids must not collide with a byte, a merge or another special token.
        """
        n_regular = 256 + len(self.merges)
        taken = {idx: tok for tok, idx in self.special_tokens.items()}
        for token, idx in special_tokens.items():
            if not isinstance(token, str) or not token:
                raise ValueError(f"special token must be a non-empty string, got {token!r}")
            if not isinstance(idx, int) or idx < n_regular:
                raise ValueError(
                    f"special token {token!r} has id {idx!r}, but ids 0..{n_regular - 1} are "
                    f"bytes and merges: use an id >= {n_regular}"
                )
            if idx in taken and taken[idx] != token:
                raise ValueError(f"id {idx} is already used by special token {taken[idx]!r}")
            taken[idx] = token
        self.special_tokens.update(special_tokens)
        self._merges_changed()

    def id_to_piece(self, idx: int) -> str:
        """A printable form of one token (invalid UTF-8 shown as ``\\xNN`` escapes)."""
        self._check_ids([idx])
        return self.vocab[idx].decode("utf-8", errors="backslashreplace")

    # --- decoding ----------------------------------------------------------------------------
    def _check_ids(self, ids) -> None:
        vocab = self.vocab
        for idx in ids:
            if idx not in vocab:
                raise ValueError(
                    f"unknown token id {idx!r}: this tokenizer has ids 0..{256 + len(self.merges) - 1}"
                    + (f" and special ids {sorted(self.special_tokens.values())}"
                       if self.special_tokens else "")
                )

    def decode_bytes(self, ids) -> bytes:
        """Ids to raw bytes (no UTF-8 decoding). Accepts lists, tensors and arrays of ids."""
        if hasattr(ids, "tolist"):
            ids = ids.tolist()
        vocab = self.vocab
        try:
            return b"".join(vocab[idx] for idx in ids)
        except (KeyError, TypeError):
            self._check_ids(ids)  # raises a clear error naming the bad id
            raise

    def decode(self, ids) -> str:
        """Ids to text. A sequence that cuts a UTF-8 character in half decodes to U+FFFD."""
        return self.decode_bytes(ids).decode("utf-8", errors="replace")

    # --- save / load ---------------------------------------------------------------------------
    def save(self, path) -> Path:
        """Write the tokenizer to ``path`` as readable text and return the path.

        Format (one item per line)::

            course_lib.tokenization bpe v1
            pattern <JSON string, or null>
            special <n>
            <JSON string> <id>          (n lines)
            merges <m>
            <id_a> <id_b>               (m lines; line k creates id 256 + k)
        """
        path = Path(path)
        lines = [FILE_HEADER, f"pattern {json.dumps(self.pattern)}",
                 f"special {len(self.special_tokens)}"]
        lines += [f"{json.dumps(tok)} {idx}" for tok, idx in self.special_tokens.items()]
        lines.append(f"merges {len(self.merges)}")
        lines += [f"{a} {b}" for a, b in self.merges]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return path

    def load(self, path) -> Tokenizer:
        """Read a file written by :meth:`save` into this tokenizer and return ``self``.

        A malformed file raises ``ValueError`` naming the file and the line.
        """
        path = Path(path)
        lines = path.read_text(encoding="utf-8").splitlines()
        lineno = 0

        def fail(msg: str):
            raise ValueError(f"{path}:{lineno}: corrupt tokenizer file: {msg}")

        def next_line() -> str:
            nonlocal lineno
            if lineno >= len(lines):
                lineno += 1
                fail("unexpected end of file")
            lineno += 1
            return lines[lineno - 1]

        def count_line(keyword: str) -> int:
            line = next_line()
            key, _, value = line.partition(" ")
            if key != keyword or not value.isdigit():
                fail(f"expected '{keyword} <count>', got {line!r}")
            return int(value)

        header = next_line()
        if header != FILE_HEADER:
            fail(f"expected header {FILE_HEADER!r}, got {header!r}")

        line = next_line()
        key, _, value = line.partition(" ")
        pattern = None
        ok = key == "pattern"
        if ok:
            try:
                pattern = json.loads(value)
            except json.JSONDecodeError:
                ok = False
        if not ok or not (pattern is None or isinstance(pattern, str)):
            fail(f"expected 'pattern <JSON string or null>', got {line!r}")
        if pattern is not None:
            try:
                regex.compile(pattern)
            except regex.error as err:
                fail(f"the pattern is not a valid regular expression ({err})")

        special: dict[str, int] = {}
        for _ in range(count_line("special")):
            line = next_line()
            token_json, _, idx = line.rpartition(" ")
            try:
                token = json.loads(token_json)
            except json.JSONDecodeError:
                token = None
            if not isinstance(token, str) or not idx.isdigit():
                fail(f"expected '<JSON string> <id>', got {line!r}")
            special[token] = int(idx)

        merges: dict[tuple[int, int], int] = {}
        for k in range(count_line("merges")):
            line = next_line()
            parts = line.split()
            if len(parts) != 2 or not all(p.isdigit() for p in parts):
                fail(f"expected two token ids '<id_a> <id_b>', got {line!r}")
            a, b = int(parts[0]), int(parts[1])
            new_id = 256 + k
            if a >= new_id or b >= new_id:
                fail(f"merge {a} {b} uses an id that does not exist yet (this line creates {new_id})")
            if (a, b) in merges:
                fail(f"merge {a} {b} appears twice")
            merges[(a, b)] = new_id
        if any(line.strip() for line in lines[lineno:]):
            lineno += 1
            fail("unexpected content after the merges")

        self.pattern = pattern
        self.merges = merges
        self.special_tokens = {}
        self._merges_changed()
        try:
            self.register_special_tokens(special)
        except ValueError as err:
            raise ValueError(f"{path}: corrupt tokenizer file: {err}") from None
        return self
