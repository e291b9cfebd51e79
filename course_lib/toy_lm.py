"""Two language models small enough to read, for the hand-worked examples of lesson 09.

`TableLM` writes a language model out as a table: for each listed prefix, the probability of
every next token. It has GPT's interface (model(idx) -> (logits (B, T, V), None), model.config),
so every search in `course_lib.generation` runs on it unchanged (without a KV cache, which a
table does not need). The course notes' beam-search tree (V = 3, b = 2) and their greedy
counter-example (S1 against S2) are such tables.

`markov_gpt` builds a real `GPT` whose next-token distribution depends only on the last token:
the blocks write nothing (zero output projections), and the head maps LN(one-hot(token)) to the
log of a row of the transition table. It runs with a KV cache like any GPT.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from course_lib.model import GPT, GPTConfig

__all__ = ["TableLM", "TableLMConfig", "markov_gpt"]


@dataclass(frozen=True)
class TableLMConfig:
    """What the searches read from a model's config."""

    vocab_size: int
    block_size: int = 1 << 30
    pos_encoding: str = "none"      # no position table: no context window to crop to


class TableLM(nn.Module):
    """A language model given as a table of next-token probabilities.

    tokens: the vocabulary, one name per token id ("ABC" means A = 0, B = 1, C = 2).
    table: {prefix: {token: probability}}, where a prefix is a string of token names separated by
        spaces ("" is the start, "A C" is A then C; single-letter names may also be written
        together, "AC"). A token missing from a row gets probability 0.
    default: the distribution after any prefix the table does not list (uniform when None).

    Position 0 of every sequence is the start token (the notes' <go>): it is not looked up, so
    any id may stand there, and the prefix of position t is tokens 1 .. t. Rows must sum to 1.
    """

    def __init__(self, tokens, table: dict[str, dict[str, float]],
                 default: dict[str, float] | None = None):
        super().__init__()
        self.tokens = list(tokens)
        if len(set(self.tokens)) != len(self.tokens) or not self.tokens:
            raise ValueError(f"tokens must be distinct names, got {self.tokens}.")
        self._ids = {name: i for i, name in enumerate(self.tokens)}
        self.config = TableLMConfig(vocab_size=len(self.tokens))
        V = len(self.tokens)
        self.default = self._row("default", default) if default is not None \
            else torch.full((V,), 1.0 / V, dtype=torch.float64)
        self.table = {self._prefix(key): self._row(repr(key), row) for key, row in table.items()}

    # --- reading the table -------------------------------------------------------------------
    def _prefix(self, key: str) -> tuple[int, ...]:
        names = key.split() if " " in key.strip() or key.strip() in self._ids else list(key)
        unknown = [n for n in names if n not in self._ids]
        if unknown:
            raise ValueError(f"prefix {key!r} names unknown tokens {unknown}; the vocabulary is "
                             f"{self.tokens}.")
        return tuple(self._ids[n] for n in names)

    def _row(self, where: str, row: dict[str, float]) -> torch.Tensor:
        probs = torch.zeros(len(self.tokens), dtype=torch.float64)
        for name, p in row.items():
            if name not in self._ids:
                raise ValueError(f"row {where} gives a probability to {name!r}, which is not in the "
                                 f"vocabulary {self.tokens}.")
            if not 0 <= p <= 1:
                raise ValueError(f"row {where}: p({name}) = {p} is not a probability.")
            probs[self._ids[name]] = p
        if not math.isclose(float(probs.sum()), 1.0, abs_tol=1e-9):
            raise ValueError(f"row {where} sums to {float(probs.sum()):.6g}, not 1: every "
                             "next-token distribution must sum to 1.")
        return probs

    def probs(self, prefix: str = "") -> dict[str, float]:
        """The next-token distribution after prefix, by token name."""
        row = self.table.get(self._prefix(prefix), self.default)
        return dict(zip(self.tokens, row.tolist(), strict=True))

    def encode(self, names: str) -> list[int]:
        """Token ids of a string of names ("A C B" or "ACB")."""
        return list(self._prefix(names))

    def decode(self, ids) -> str:
        return " ".join(self.tokens[int(i)] for i in ids)

    # --- GPT's interface --------------------------------------------------------------------
    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        """(logits (B, T, V) float64, None): log-probabilities after each prefix (-inf for 0)."""
        if targets is not None:
            raise ValueError("TableLM computes no loss: call it without targets.")
        if not isinstance(idx, torch.Tensor) or idx.dim() != 2:
            raise ValueError("idx must be a (B, T) tensor of token ids.")
        B, T = idx.shape
        logits = torch.empty(B, T, len(self.tokens), dtype=torch.float64)
        for b, row in enumerate(idx.tolist()):
            for t in range(T):
                logits[b, t] = self.table.get(tuple(row[1:t + 1]), self.default).log()
        return logits.to(idx.device), None


def markov_gpt(transitions: torch.Tensor) -> GPT:
    """A float64 GPT whose next-token distribution is transitions[last token] (V, V), rows > 0
    summing to 1: the blocks write nothing, there are no positions, and the head maps
    LN(one-hot) to log transitions (through a pseudo-inverse of the normalised one-hots)."""
    if transitions.dim() != 2 or transitions.shape[0] != transitions.shape[1]:
        raise ValueError(f"transitions must be (V, V), got {tuple(transitions.shape)}.")
    if not bool((transitions > 0).all()) or not torch.allclose(
            transitions.sum(-1).double(), torch.ones(transitions.shape[0], dtype=torch.float64)):
        raise ValueError("every row of transitions must be positive and sum to 1.")
    V = transitions.shape[0]
    model = GPT(GPTConfig(vocab_size=V, block_size=64, n_layer=1, n_head=1, n_embd=2 * V,
                          pos_encoding="none", tie_weights=False)).double().eval()
    with torch.no_grad():
        for p in model.blocks.parameters():
            p.zero_()
        model.wte.weight.copy_(torch.eye(V, 2 * V, dtype=torch.float64))
        normed = model.ln_f(model.wte.weight)                           # (V, 2V), rank V
        model.lm_head.weight.copy_((torch.linalg.pinv(normed) @ transitions.double().log()).T)
    return model
