"""Transformer-XL's relative attention (Dai et al. 2019), the paper's four terms.

No position vector is added to the input. With R_(i-j) the fixed sinusoidal encoding of the
distance i - j, separate key matrices W_(k,E) (for content) and W_(k,R) (for positions), and
two learned vectors u and v per head (they replace the query's position term, which would
otherwise depend on the absolute position i):

    A_ij = q_i . k_j                 (a) content-content,   q_i = x_i W_q, k_j = x_j W_(k,E)
         + q_i . r_(i-j)             (b) content-position,  r = R W_(k,R)
         + u . k_j                   (c) a global content bias
         + v . r_(i-j)               (d) a global position bias
       = (q_i + u) . k_j + (q_i + v) . r_(i-j)

and the scores are A / sqrt(d_h). (The course notes write terms (b) and (d) with W_Q and W_K
and R_(j-i); the paper projects R with its own W_(k,R).) The recurrence that gives the paper
its name, reusing the previous segment's hidden states as extra keys, is not implemented.

Computed with one projection of the Tq + Tk - 1 distinct distances, gathered per (i, j).
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from course_lib.embeddings import sinusoidal_encoding
from course_lib.positional.distances import relative_positions
from course_lib.positional.self_attention import RelativeSelfAttention, masked_scores

__all__ = ["TransformerXLRelativeAttention"]


class TransformerXLRelativeAttention(RelativeSelfAttention):
    """Multi-head self-attention with Transformer-XL's relative positions.

    A `MultiHeadAttention` (same q/k/v/out projections; `k_proj` is W_(k,E)) plus `r_proj`
    (W_(k,R), no bias), and `u`, `v` of shape (n_head, head_size). forward(x, mask=None,
    is_causal=False, need_weights=False) -> (out, weights); with Tq < Tk (a KV cache) the
    queries are the last Tq positions. Self-attention only. `base` is the sinusoid's base.
    """

    def __init__(self, n_embd: int, n_head: int, n_kv_head: int | None = None,
                 dropout: float = 0.0, bias: bool = True, base: float = 10000.0) -> None:
        super().__init__(n_embd, n_head, n_kv_head, dropout, bias)
        sinusoidal_encoding(torch.zeros(1), n_embd, base)     # rejects a bad base now, not at forward
        self.base = base
        self.r_proj = nn.Linear(n_embd, n_head * self.head_size, bias=False)      # W_(k,R)
        self.u = nn.Parameter(torch.zeros(n_head, self.head_size))
        self.v = nn.Parameter(torch.zeros(n_head, self.head_size))

    def position_keys(self, Tq: int, Tk: int) -> tuple[torch.Tensor, torch.Tensor]:
        """r for the distances i - j = 1 - Tq ... Tk - 1, shape (H, Tq + Tk - 1, d_h), and the
        (Tq, Tk) index of each pair's distance in it."""
        distances = torch.arange(1 - Tq, Tk, device=self.r_proj.weight.device)
        R = sinusoidal_encoding(distances, self.n_embd, self.base, dtype=self.r_proj.weight.dtype)
        r = self.r_proj(R).unflatten(-1, (self.n_head, self.head_size)).transpose(0, 1)
        index = -relative_positions(Tq, Tk=Tk, device=distances.device) + (Tq - 1)   # (i - j) - (1 - Tq)
        return r, index

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               mask: torch.Tensor | None = None, is_causal: bool = False,
               need_weights: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        Tq, Tk = q.shape[-2], k.shape[-2]
        r, index = self.position_keys(Tq, Tk)
        position = torch.gather((q + self.v[:, None]) @ r.transpose(-2, -1), -1,
                                index.expand(*q.shape[:-1], Tk))             # (b) + (d)
        # (a) + (c) is (q + u) . k; MultiHeadAttention.attend scales it by 1/sqrt(d_h) and adds
        # the float mask, so (b) + (d) goes in as a mask, scaled the same way
        bias = masked_scores(position / math.sqrt(self.head_size), mask, is_causal)
        return super().attend(q + self.u[:, None], k, v, mask=bias, need_weights=need_weights)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, base={self.base}"
