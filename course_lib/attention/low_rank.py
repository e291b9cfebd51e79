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

from course_lib.attention.dense import merge_heads, split_heads, stable_softmax

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


class LinformerAttention(nn.Module):
    """Multi-head self-attention with Linformer's learned length projections E, F in R^{k x T}.

    Shapes: x (B, T, d_model) with T <= seq_len -> (B, T, d_model). One E and one F per layer,
    shared by all heads (the paper's "headwise sharing"). A shorter input uses the first T
    columns of E and F. E and F start as random projections with N(0, 1/k) entries (the
    Johnson-Lindenstrauss construction of the paper's analysis) and are trained.

    Not causal: E K mixes the keys of every position, so the output at position i depends on
    later tokens. Asking for `is_causal=True` or a mask raises; use it in encoders, or use
    local or block attention in a decoder.
    """

    def __init__(self, d_model: int, n_heads: int, seq_len: int, k: int, bias: bool = True) -> None:
        super().__init__()
        if n_heads < 1 or d_model % n_heads != 0:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}.")
        if seq_len < 1 or not 1 <= k:
            raise ValueError(f"seq_len and k must be >= 1, got seq_len={seq_len}, k={k}.")
        if k > seq_len:
            raise ValueError(f"k={k} > seq_len={seq_len}: the projection would add rows instead "
                             "of compressing; pick k <= seq_len (e.g. 64 to 256).")
        self.d_model, self.n_heads, self.seq_len, self.k = d_model, n_heads, seq_len, k
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        self.E = nn.Parameter(torch.randn(k, seq_len) / math.sqrt(k))
        self.F = nn.Parameter(torch.randn(k, seq_len) / math.sqrt(k))

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None,
                is_causal: bool = False) -> torch.Tensor:
        if is_causal or mask is not None:
            raise ValueError("LinformerAttention is not causal and takes no mask: E and F mix "
                             "all T positions into k rows, so no (query, key) pair can be "
                             "blocked. Use it bidirectionally, or use local_attention / "
                             "block_attention for a decoder.")
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"x must have shape (B, T, d_model={self.d_model}), got {tuple(x.shape)}.")
        T = x.shape[1]
        if T > self.seq_len:
            raise ValueError(f"sequence of length {T} is longer than seq_len={self.seq_len}: E and "
                             "F have one column per position; build the layer with a larger seq_len.")
        q, k, v = (split_heads(proj(x), self.n_heads) for proj in (self.q_proj, self.k_proj, self.v_proj))
        out = linformer_attention(q, k, v, self.E[:, :T], self.F[:, :T])
        return self.out_proj(merge_heads(out))

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, n_heads={self.n_heads}, seq_len={self.seq_len}, k={self.k}"
