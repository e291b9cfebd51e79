"""Token embeddings, positional encodings and cosine similarity (lesson 02).

An embedding matrix E has one row per token id: E is (vocab_size, n_embd). Looking a token
up is the same as multiplying its one-hot row vector by E,

    one_hot(id) @ E == E[id],

which is why an embedding layer is "just a linear layer without a bias" that PyTorch
implements as an index lookup (no multiplications at all).

A transformer sees a *set* of vectors unless we add position information, so the input to
the first block is

    X[t] = E[ids[t]] + P[t],          t = 0, 1, ..., T-1

where P is either learned (another embedding table, one row per position) or the fixed
sinusoidal table of "Attention Is All You Need":

    P[p, 2i]   = sin(p * base^(-2i/d))
    P[p, 2i+1] = cos(p * base^(-2i/d))
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from course_lib.vocabulary import accepts_older_names

__all__ = [
    "PretrainedNotCached",
    "TokenAndPositionEmbedding",
    "analogy",
    "cosine_distance",
    "cosine_similarity",
    "load_gpt2_token_embeddings",
    "nearest_rows",
    "one_hot_embed",
    "sinusoidal_encoding",
    "sinusoidal_positional_encoding",
]


def _check_ids(ids: torch.Tensor, vocab_size: int, what: str = "token ids") -> None:
    """Raise a clear error unless `ids` is an integer tensor with values in [0, vocab_size)."""
    if not isinstance(ids, torch.Tensor):
        raise TypeError(f"{what} must be a torch.Tensor of integers, got {type(ids).__name__}; "
                        "wrap them with torch.tensor(ids).")
    if ids.dtype.is_floating_point or ids.dtype == torch.bool or ids.is_complex():
        raise TypeError(f"{what} must have an integer dtype (torch.long), got {ids.dtype}; "
                        "convert them with ids.long().")
    if ids.numel() == 0:
        return
    lo, hi = int(ids.min()), int(ids.max())
    if lo < 0 or hi >= vocab_size:
        bad = lo if lo < 0 else hi
        raise ValueError(f"{what} must lie in [0, {vocab_size - 1}] (vocab_size={vocab_size}), "
                         f"got {bad}: is the tokenizer's vocabulary larger than the embedding "
                         "table?")


# ------------------------------------------------------------------------------------------
# Sinusoidal positional encoding
# ------------------------------------------------------------------------------------------

@accepts_older_names
def sinusoidal_positional_encoding(
    seq_len: int,
    n_embd: int,
    base: float = 10000.0,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """The fixed sinusoidal position table of Vaswani et al. (2017), shape (seq_len, n_embd).

    Positions are 0-based. For pair index i = 0, 1, ..., the angular frequency is
    w_i = base^(-2i/d) and

        PE[p, 2i]   = sin(p * w_i)
        PE[p, 2i+1] = cos(p * w_i)

    so row 0 is [0, 1, 0, 1, ...]. Frequencies fall geometrically from 1 (one radian per
    position) to about 1/base, so the wavelengths range from 2*pi to about 2*pi*base.

    Because sin/cos of p*w and (p+k)*w are related by a rotation that depends only on k,
    PE[p] . PE[p+k] = sum_i cos(k * w_i) depends only on the offset k, not on p.

    An odd n_embd is allowed: the formula above is applied with d = n_embd to every column
    that exists, so the last column is a sine. (This is not the first n_embd columns of the
    n_embd + 1 table, whose frequencies use d = n_embd + 1.)

    The angles are computed in float64 and then cast to `dtype`, so large positions keep
    their accuracy even when the result is float32.
    """
    if not isinstance(seq_len, int) or seq_len < 0:
        raise ValueError(f"seq_len must be a non-negative int, got {seq_len!r}.")
    position = torch.arange(seq_len, dtype=torch.float64, device=device)
    return sinusoidal_encoding(position, n_embd, base, dtype=dtype)


def sinusoidal_encoding(
    positions: torch.Tensor,
    n_embd: int,
    base: float = 10000.0,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """The sinusoidal encoding of arbitrary positions: shape (*positions.shape, n_embd).

    The same formula as `sinusoidal_positional_encoding`, at any real positions, negative ones
    included (Transformer-XL encodes relative distances i - j this way).
    """
    if not isinstance(positions, torch.Tensor):
        raise TypeError(f"positions must be a torch.Tensor, got {type(positions).__name__}; "
                        "wrap them with torch.tensor(positions).")
    if positions.dtype == torch.bool or positions.is_complex():
        raise TypeError(f"positions must be integer or floating, got {positions.dtype}.")
    if not isinstance(n_embd, int) or n_embd < 1:
        raise ValueError(f"n_embd must be a positive int, got {n_embd!r}.")
    if not (isinstance(base, (int, float)) and base > 0 and math.isfinite(base)):
        raise ValueError(f"base must be a positive finite number, got {base!r}.")

    n_pairs = (n_embd + 1) // 2
    position = positions.to(torch.float64)[..., None]                                     # (..., 1)
    two_i = torch.arange(0, 2 * n_pairs, 2, dtype=torch.float64, device=positions.device)  # (n_pairs,)
    freq = base ** (-two_i / n_embd)                                                     # w_i
    angle = position * freq                                                               # (..., n_pairs)

    pe = torch.stack([torch.sin(angle), torch.cos(angle)], dim=-1).flatten(-2)          # sin, cos interleaved
    return pe[..., :n_embd].to(dtype)


# ------------------------------------------------------------------------------------------
# Token + position embedding
# ------------------------------------------------------------------------------------------

class TokenAndPositionEmbedding(nn.Module):
    """X = Dropout(E_tok[ids] + P[start_pos : start_pos + T]).

    Args:
        vocab_size: number of rows of the token table E_tok, (vocab_size, n_embd).
        n_embd:    width of each vector.
        max_len:    the longest sequence the module accepts (the rows of P).
        positional: "learned"    -> P is an nn.Embedding(max_len, n_embd), trained like E_tok
                                    (GPT-2);
                    "sinusoidal" -> P is the fixed `sinusoidal_positional_encoding` table,
                                    stored as a non-trainable buffer (Vaswani et al.).
        dropout:    dropout probability applied to the sum (0 disables it).

    forward(ids, start_pos=0): ids is (T,) or (B, T) of token ids; returns (T, n_embd) or
    (B, T, n_embd). `start_pos` shifts the positions (used when generating with a KV cache,
    where the new token sits at position start_pos).
    """

    def __init__(self, vocab_size: int, n_embd: int, max_len: int,
                 positional: str = "learned", dropout: float = 0.0) -> None:
        super().__init__()
        for name, value in (("vocab_size", vocab_size), ("n_embd", n_embd),
                            ("max_len", max_len)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}.")
        if positional not in ("learned", "sinusoidal"):
            raise ValueError(f"positional must be 'learned' or 'sinusoidal', got {positional!r}.")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout!r}.")
        self.vocab_size, self.n_embd, self.max_len = vocab_size, n_embd, max_len
        self.positional = positional

        self.token_emb = nn.Embedding(vocab_size, n_embd)
        if positional == "learned":
            self.pos_emb = nn.Embedding(max_len, n_embd)
        else:
            self.pos_emb = None
            # persistent=False: the table is recomputed, not saved in the state_dict
            self.register_buffer("pe", sinusoidal_positional_encoding(max_len, n_embd),
                                 persistent=False)
        self.dropout = nn.Dropout(dropout)

    def position_vectors(self, T: int, start_pos: int = 0) -> torch.Tensor:
        """P[start_pos : start_pos + T], shape (T, n_embd)."""
        if start_pos < 0 or start_pos + T > self.max_len:
            raise ValueError(
                f"positions {start_pos}..{start_pos + T - 1} do not fit max_len={self.max_len}: "
                f"the sequence is too long; crop it to the last {self.max_len - start_pos} "
                "tokens or build the module with a larger max_len.")
        if self.pos_emb is not None:
            pos = torch.arange(start_pos, start_pos + T, device=self.pos_emb.weight.device)
            return self.pos_emb(pos)
        return self.pe[start_pos:start_pos + T]

    def forward(self, ids: torch.Tensor, start_pos: int = 0) -> torch.Tensor:
        _check_ids(ids, self.vocab_size)
        if ids.dim() not in (1, 2):
            raise ValueError(f"ids must have shape (T,) or (B, T), got {tuple(ids.shape)}.")
        T = ids.shape[-1]
        tok = self.token_emb(ids)                       # (B, T, D)
        pos = self.position_vectors(T, start_pos)       # (T, D), broadcast over B
        return self.dropout(tok + pos.to(tok.dtype))

    def extra_repr(self) -> str:
        return (f"vocab_size={self.vocab_size}, n_embd={self.n_embd}, max_len={self.max_len}, "
                f"positional={self.positional!r}")


# ------------------------------------------------------------------------------------------
# One-hot lookup and cosine similarity
# ------------------------------------------------------------------------------------------

def one_hot_embed(ids: torch.Tensor, E: torch.Tensor) -> torch.Tensor:
    """one_hot(ids) @ E: the explicit matrix product that an embedding lookup E[ids] computes.

    ids is any integer tensor (...), E is (vocab_size, d); the result is (..., d) and equals
    E[ids] exactly (each output row is 1 * one row of E plus zeros).
    """
    if not isinstance(E, torch.Tensor) or E.dim() != 2:
        shape = tuple(E.shape) if isinstance(E, torch.Tensor) else type(E).__name__
        raise ValueError(f"E must be a 2-D (vocab_size, d) tensor, got {shape}.")
    _check_ids(ids, E.shape[0])
    one_hot = F.one_hot(ids, num_classes=E.shape[0]).to(E.dtype)   # (..., vocab_size)
    return one_hot @ E


def cosine_similarity(a: torch.Tensor, b: torch.Tensor, dim: int = -1,
                      eps: float = 1e-8) -> torch.Tensor:
    """cos(a, b) = a . b / (max(|a|, eps) * max(|b|, eps)), along `dim`, with broadcasting.

    1 means same direction, 0 orthogonal, -1 opposite. A zero vector has similarity 0 with
    everything (the eps keeps the division finite). Same formula and defaults as
    torch.nn.functional.cosine_similarity, except `dim` defaults to the last axis.
    """
    a, b = torch.broadcast_tensors(a, b)
    a_norm = a.norm(dim=dim, keepdim=True).clamp_min(eps)
    b_norm = b.norm(dim=dim, keepdim=True).clamp_min(eps)
    return ((a / a_norm) * (b / b_norm)).sum(dim=dim)


def cosine_distance(a: torch.Tensor, b: torch.Tensor, dim: int = -1,
                    eps: float = 1e-8) -> torch.Tensor:
    """1 - cosine_similarity(a, b): 0 for the same direction, 1 orthogonal, 2 opposite.

    (Not a metric: the triangle inequality can fail. It is still the usual "distance" for
    comparing embedding directions.)
    """
    return 1.0 - cosine_similarity(a, b, dim=dim, eps=eps)


def nearest_rows(query: torch.Tensor, E: torch.Tensor, k: int = 5,
                 exclude: torch.Tensor | list[int] | None = None,
                 allowed: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The k rows of E closest to `query` (D,) by cosine similarity: (similarities, ids).

    `exclude` lists ids never returned (for example the words of an analogy); `allowed`, a
    boolean mask (V,), restricts the search (for example to tokens that occur in the text).
    """
    if query.ndim != 1 or E.ndim != 2 or query.shape[0] != E.shape[1]:
        raise ValueError(f"query must be (D,) and E (V, D) with the same D; got {tuple(query.shape)} "
                         f"and {tuple(E.shape)}")
    sims = cosine_similarity(query[None, :], E)
    candidates = torch.ones(E.shape[0], dtype=torch.bool) if allowed is None else allowed.clone()
    if exclude is not None:
        candidates[torch.as_tensor(exclude, dtype=torch.long)] = False
    n = int(candidates.sum())
    if not 1 <= k <= n:
        raise ValueError(f"k={k} but only {n} rows can be returned; pass 1 <= k <= {n}")
    sims = sims.masked_fill(~candidates, float("-inf"))
    top = sims.topk(k)
    return top.values, top.indices


def analogy(E: torch.Tensor, a: int, b: int, c: int, k: int = 5,
            allowed: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """"a is to b as c is to ?": the k rows nearest to E[b] - E[a] + E[c], a, b and c excluded.

    king - man + woman is analogy(E, man, king, woman). Excluding the three inputs is the
    usual convention of analogy benchmarks (Mikolov et al., 2013); without it the nearest row
    is almost always b or c itself.
    """
    return nearest_rows(E[b] - E[a] + E[c], E, k=k, exclude=[a, b, c], allowed=allowed)


class PretrainedNotCached(RuntimeError):
    """Pretrained weights were asked for, but they are not on this machine (nothing is downloaded)."""


def load_gpt2_token_embeddings():
    """GPT-2 small's token table wte (50257, 768) and its tokenizer, from the local cache only.

    Needs `transformers` (the test extras) and the weights in the Hugging Face cache
    (~/.cache/huggingface or $HF_HOME). Never downloads: raises PretrainedNotCached with the
    command that fetches them once while online.
    """
    try:
        from transformers import GPT2LMHeadModel, GPT2TokenizerFast
    except ImportError as error:
        raise PretrainedNotCached("GPT-2's embeddings need `transformers`: "
                                  "pip install -e '.[test]'") from error
    try:
        model = GPT2LMHeadModel.from_pretrained("gpt2", local_files_only=True)
        tokenizer = GPT2TokenizerFast.from_pretrained("gpt2", local_files_only=True)
    except OSError as error:
        raise PretrainedNotCached(
            "GPT-2's weights are not in the local Hugging Face cache, and the course never "
            "downloads them by itself. Fetch them once while online: `hf download gpt2` "
            "(or `huggingface-cli download gpt2`), then run this cell again.") from error
    return model.transformer.wte.weight.detach(), tokenizer
