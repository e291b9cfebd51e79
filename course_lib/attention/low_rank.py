"""Low-rank attention: Linformer (Wang et al., 2020), lesson 04.

Attention weights A = softmax(Q K^T / sqrt(d)) of real models are close to low rank. Linformer
uses it: two learned projections E, F in R^{k x T} compress the T keys and values to k rows,

    K' = E K  (k, d),   V' = F V  (k, d_v),   A' = softmax(Q K'^T / sqrt(d))  (T, k),   O = A' V'

so time and memory are O(T k d) instead of O(T^2 d): linear in T for a fixed k.

Not causal as written: every row of E K mixes keys from *all* T positions, so position i
would see the future. Linformer is an encoder (bidirectional) method.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from course_lib.attention._checks import check_int
from course_lib.attention.dense import MultiHeadAttention, stable_softmax
from course_lib.vocabulary import accepts_older_names

__all__ = ["LinformerAttention", "linformer_attention"]


def linformer_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, E: torch.Tensor,
                        F: torch.Tensor, *, scale: float | None = None) -> torch.Tensor:
    """softmax(Q (E K)^T / sqrt(d)) (F V): q, k (..., T, d), v (..., T, d_v), E and F (k, T)
    -> (..., T, d_v)."""
    if E.dim() != 2 or F.dim() != 2 or E.shape[-1] != k.shape[-2] or F.shape[-1] != v.shape[-2] \
            or E.shape[0] != F.shape[0]:
        raise ValueError(f"E and F must both have shape (k, T) with T = {k.shape[-2]} keys and the "
                         f"same k, got E {tuple(E.shape)} and F {tuple(F.shape)}.")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    k_proj, v_proj = E @ k, F @ v                                   # (..., k, d), (..., k, d_v)
    weights = stable_softmax((q * scale) @ k_proj.transpose(-2, -1), dim=-1)   # (..., T, k)
    return weights @ v_proj


class LinformerAttention(MultiHeadAttention):
    """Multi-head self-attention with Linformer's learned length projections E, F in R^{k x T}.

    A `MultiHeadAttention` (same projections, same forward(x, ...) -> (out, weights)) whose
    `attend` step compresses the keys and values to k rows before the softmax. Shapes:
    x (B, T, n_embd) with T <= seq_len -> out (B, T, n_embd); weights are None (there is no
    T x T matrix to return). One E and one F per layer, shared by all heads (the paper's
    "headwise sharing"); a shorter input uses the first T columns. E and F start as random
    projections with N(0, 1/k) entries (the Johnson-Lindenstrauss construction of the paper's
    analysis) and are trained.

    Not causal: E K mixes the keys of every position, so the output at position i depends on
    later tokens. Asking for `is_causal=True` or a mask raises; use it in encoders, or use
    local or block attention in a decoder.
    """

    @accepts_older_names
    def __init__(self, n_embd: int, n_head: int, seq_len: int, k: int, bias: bool = True) -> None:
        super().__init__(n_embd, n_head, bias=bias)
        self.seq_len, self.k = check_int("seq_len", seq_len, 1), check_int("k", k, 1)
        if k > seq_len:
            raise ValueError(f"k={k} > seq_len={seq_len}: the projection would add rows instead "
                             "of compressing; pick k <= seq_len (e.g. 64 to 256).")
        self.E = nn.Parameter(torch.randn(k, seq_len) / math.sqrt(k))
        self.F = nn.Parameter(torch.randn(k, seq_len) / math.sqrt(k))

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               mask: torch.Tensor | None = None, is_causal: bool = False,
               need_weights: bool = False) -> tuple[torch.Tensor, None]:
        """q, k, v (B, H, T, d_h) -> (B, H, T, d_h) through E k and F v (k rows each)."""
        if is_causal or mask is not None:
            raise ValueError("LinformerAttention is not causal and takes no mask: E and F mix "
                             "all T positions into k rows, so no (query, key) pair can be "
                             "blocked. Use it bidirectionally, or use local_attention / "
                             "block_attention for a decoder.")
        T = k.shape[-2]
        if T > self.seq_len:
            raise ValueError(f"sequence of length {T} is longer than seq_len={self.seq_len}: E and "
                             "F have one column per position; build the layer with a larger seq_len.")
        return linformer_attention(q, k, v, self.E[:, :T], self.F[:, :T]), None

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, seq_len={self.seq_len}, k={self.k}"
