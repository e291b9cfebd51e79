"""Shaw, Uszkoreit and Vaswani (2018): relative position representations inside attention.

Instead of adding a position vector to each input, learn one vector per *clipped distance*
and use it where query i meets key j, with a_ij = w_clip(j - i, k):

    e_ij  = q_i . (k_j + a^K_ij) / sqrt(d_h)          (relative keys)
    z_i   = sum_j alpha_ij (v_j + a^V_ij)             (relative values), alpha = softmax_j(e)

Distances beyond k share w_k (or w_-k), so 2k + 1 vectors of size d_h serve any length. The
vectors are shared by all heads and each layer has its own: 2 (2k + 1) d_h parameters per layer.

Computed without a (T, T, d_h) tensor: q_i . w_r for the 2k + 1 vectors, then gathered per
(i, j); for the values, the weights of the pairs at each distance are summed first.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from course_lib.attention import repeat_kv, stable_softmax
from course_lib.positional.distances import check_clip, relative_positions
from course_lib.positional.self_attention import RelativeSelfAttention, masked_scores

__all__ = ["ShawRelativeAttention", "shaw_scores"]


def _distance_index(Tq: int, Tk: int, max_relative_position: int, device) -> torch.Tensor:
    """(Tq, Tk) row of a (2k + 1)-row table used by each pair: clip(j - i, -k, k) + k."""
    k = max_relative_position
    return relative_positions(Tq, k, Tk=Tk, device=device) + k


def shaw_scores(q: torch.Tensor, k: torch.Tensor, rel_k: torch.Tensor,
                max_relative_position: int) -> torch.Tensor:
    """e_ij = q_i . (k_j + rel_k[clip(j - i, -K, K) + K]) / sqrt(d), without a (T, T, d) tensor.

    q (..., Tq, d), k (..., Tk, d), rel_k (2K + 1, d) with K = max_relative_position; with
    Tq < Tk the queries are the last Tq positions. Returns (..., Tq, Tk).
    """
    K = check_clip(max_relative_position)
    if rel_k.dim() != 2 or rel_k.shape != (2 * K + 1, q.shape[-1]):
        raise ValueError(f"rel_k must have shape (2 * max_relative_position + 1, d) = "
                         f"({2 * K + 1}, {q.shape[-1]}), got {tuple(rel_k.shape)}.")
    Tq, Tk = q.shape[-2], k.shape[-2]
    index = _distance_index(Tq, Tk, K, q.device).expand(*q.shape[:-1], Tk)
    content = q @ k.transpose(-2, -1)                                  # q_i . k_j
    position = torch.gather(q @ rel_k.T, -1, index)                    # q_i . a^K_ij
    return (content + position) / math.sqrt(q.shape[-1])


class ShawRelativeAttention(RelativeSelfAttention):
    """Multi-head self-attention with Shaw et al.'s relative keys and values, clipped at k.

    ShawRelativeAttention(n_embd, n_head, max_relative_position=k, ...) is a
    `MultiHeadAttention` (same projections and forward(x, mask=None, is_causal=False,
    need_weights=False) -> (out, weights)) with two extra tables, `rel_k` and `rel_v`, of shape
    (2k + 1, head_size): row r is the vector of distance r - k. With Tq < Tk (a KV cache) the
    queries are the last Tq positions. Self-attention only: `kv` must be None.
    """

    def __init__(self, n_embd: int, n_head: int, max_relative_position: int,
                 n_kv_head: int | None = None, dropout: float = 0.0, bias: bool = True) -> None:
        super().__init__(n_embd, n_head, n_kv_head, dropout, bias)
        self.max_relative_position = check_clip(max_relative_position)
        n_distances = 2 * self.max_relative_position + 1
        self.rel_k = nn.Parameter(torch.randn(n_distances, self.head_size) / math.sqrt(self.head_size))
        self.rel_v = nn.Parameter(torch.randn(n_distances, self.head_size) / math.sqrt(self.head_size))

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               mask: torch.Tensor | None = None, is_causal: bool = False,
               need_weights: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        k, v = repeat_kv(k, self.n_rep), repeat_kv(v, self.n_rep)
        K = self.max_relative_position
        scores = masked_scores(shaw_scores(q, k, self.rel_k, K), mask, is_causal)
        weights = stable_softmax(scores, dim=-1)
        attn = F.dropout(weights, self.dropout) if self.training and self.dropout > 0 else weights
        # sum_j alpha_ij a^V_ij: add up each query's weights per distance, then one product
        index = _distance_index(q.shape[-2], k.shape[-2], K, q.device).expand_as(attn)
        per_distance = torch.zeros(*attn.shape[:-1], 2 * K + 1, dtype=attn.dtype,
                                   device=attn.device).scatter_add_(-1, index, attn)
        out = attn @ v + per_distance @ self.rel_v
        return out, (weights if need_weights else None)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, max_relative_position={self.max_relative_position}"
