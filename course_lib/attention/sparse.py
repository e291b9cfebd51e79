"""Sparse attention that is actually sparse: local (sliding-window) and block-local attention
computed without ever building the T x T score matrix (lesson 04).

Dense attention under `local_mask` still computes all T^2 scores and throws most away. Here:

- `local_attention` cuts the queries into blocks of b rows. The keys that block [s, s + b)
  can see lie in [s - r, s + b + r) (r = (c - 1) / 2), so each block is scored against
  b + 2r keys only: scores of shape (T/b, b, b + 2r) instead of (T, T). Time and memory
  O(T (b + 2r) d), linear in T. The band inside each block (and keys beyond the sequence)
  is masked, so the result equals dense attention under `local_mask(T, c)`.
- `block_attention` reshapes the sequence into n blocks of T/n and attends block b to key
  block perm[b]: scores (n, T/n, T/n), i.e. T^2/n numbers instead of T^2.

A query whose keys are all masked (block attention with a causal mask, where perm sends a
block to a later one) gets zero weights and a zero output, as in `scaled_dot_product_attention`.
"""

from __future__ import annotations

import math

import torch

from course_lib.attention._checks import check_int, check_qkv
from course_lib.attention.dense import stable_softmax
from course_lib.attention.patterns import check_blocks, check_permutation, check_window

__all__ = ["block_attention", "local_attention"]


def _pad_rows(x: torch.Tensor, before: int, after: int) -> torch.Tensor:
    """Zero rows before and after along dim -2."""
    if before == after == 0:
        return x
    return torch.nn.functional.pad(x, (0, 0, before, after))


def local_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int, *,
                    causal: bool = False, block_size: int | None = None,
                    scale: float | None = None) -> torch.Tensor:
    """Sliding-window self-attention: equals dense attention under `local_mask(T, window)`
    (and `& causal_mask(T)` when causal), in O(T * window * d) time and memory.

    q, k (..., T, d), v (..., T, d_v) -> (..., T, d_v). window: odd c, the query sees
    |i - j| <= (c - 1) // 2 (causal: i - (c - 1) // 2 <= j <= i). block_size: queries per
    block (default max(r, 32)); any value gives the same result, it only trades the wasted
    corner scores against the number of blocks. Returns the output only: the weights are
    never materialised as a (T, T) matrix.
    """
    check_qkv("local_attention", q, k, v, same_length=True)
    r = (check_window(window) - 1) // 2
    T, d = q.shape[-2], q.shape[-1]
    b = max(r, 32) if block_size is None else check_int("block_size", block_size, 1)
    b = min(b, max(T, 1))
    n_blocks = math.ceil(T / b)
    padded = n_blocks * b
    right = 0 if causal else r                          # keys a block sees after its last query
    width = b + r + right                               # keys per block
    scale = 1.0 / math.sqrt(d) if scale is None else scale

    q_blocks = _pad_rows(q * scale, 0, padded - T).unflatten(-2, (n_blocks, b))   # (..., n, b, d)
    # unfold takes overlapping windows of `width` rows, `b` apart; it is a view, no copy
    k_windows = _pad_rows(k, r, padded - T + right).unfold(-2, width, b)         # (..., n, d, width)
    v_windows = _pad_rows(v, r, padded - T + right).unfold(-2, width, b)         # (..., n, d_v, width)
    scores = q_blocks @ k_windows                                                 # (..., n, b, width)

    # query i = s + a (a < b) and key j = s - r + w (w < width): allowed if -r <= j - i <= right
    a = torch.arange(b, device=q.device)[:, None]
    w = torch.arange(width, device=q.device)[None, :]
    band = ((w - r - a) >= -r) & ((w - r - a) <= right)                          # (b, width)
    j = torch.arange(n_blocks, device=q.device)[:, None] * b - r + w             # (n, width)
    allowed = band & ((j >= 0) & (j < T))[:, None, :]                            # (n, b, width)
    scores.masked_fill_(~allowed, float("-inf"))
    weights = stable_softmax(scores, dim=-1)
    out = weights @ v_windows.transpose(-2, -1)                                  # (..., n, b, d_v)
    return out.flatten(-3, -2)[..., :T, :]


def block_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, n_blocks: int,
                    perm=None, *, causal: bool = False, scale: float | None = None) -> torch.Tensor:
    """Block-local self-attention: equals dense attention under `block_mask(T, n_blocks, perm)`
    (and `& causal_mask(T)` when causal), with n score blocks of (T/n)^2: O(T^2 d / n).

    q, k (..., T, d), v (..., T, d_v) -> (..., T, d_v). perm: a permutation of
    0..n_blocks-1 (default identity), query block b attending to key block perm[b]; or one
    per head, shape (H, n_blocks), with q of shape (..., H, T, d). With causal=True, a block
    sent to a later block has no visible key: its rows are zero.
    """
    check_qkv("block_attention", q, k, v, same_length=True)
    T, d = q.shape[-2], q.shape[-1]
    bs = check_blocks(T, n_blocks)
    n_blocks = int(n_blocks)
    p = torch.arange(n_blocks) if perm is None else check_permutation(perm, n_blocks)
    p = p.to(q.device)
    if p.dim() == 2 and (q.dim() < 3 or q.shape[-3] != p.shape[0]):
        raise ValueError(f"one permutation per head needs q of shape (..., H={p.shape[0]}, T, d), "
                         f"got {tuple(q.shape)}.")
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    q_blocks = (q * scale).unflatten(-2, (n_blocks, bs))                 # (..., n, bs, d)
    k_blocks, v_blocks = k.unflatten(-2, (n_blocks, bs)), v.unflatten(-2, (n_blocks, bs))
    if p.dim() == 1:
        k_blocks, v_blocks = k_blocks.index_select(-3, p), v_blocks.index_select(-3, p)
    else:
        heads = torch.arange(p.shape[0], device=q.device)[:, None]
        k_blocks, v_blocks = k_blocks[..., heads, p, :, :], v_blocks[..., heads, p, :, :]
    scores = q_blocks @ k_blocks.transpose(-2, -1)                       # (..., n, bs, bs)
    if causal:
        offs = torch.arange(bs, device=q.device)
        query_pos = (torch.arange(n_blocks, device=q.device)[:, None] * bs + offs)[..., :, None]
        key_pos = (p[..., None] * bs + offs)[..., None, :]                # (.., n, 1, bs)
        scores.masked_fill_(~(key_pos <= query_pos), float("-inf"))
    weights = stable_softmax(scores, dim=-1)
    return (weights @ v_blocks).flatten(-3, -2)
