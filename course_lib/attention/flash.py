"""Exact attention without the T x T matrix: FlashAttention's tiling in PyTorch (lesson 11).

Dense attention writes the scores S = Q K^T (Tq x Tk) and the weights A = softmax(S) to memory
before it multiplies by V. FlashAttention (Dao et al., 2022) never forms them. It cuts the
queries into tiles of `block_size` rows and the keys into tiles of `block_size` rows, and for
each query tile walks over the key tiles keeping, per row, three running quantities:

    m    the largest score seen so far
    l    sum_j exp(s_j - m) over the keys seen so far
    acc  sum_j exp(s_j - m) v_j

A new tile with scores S_t changes the maximum to m' = max(m, rowmax S_t); everything kept so
far is rescaled by exp(m - m'), and the tile adds its own terms:

    l'   = exp(m - m') l   + rowsum exp(S_t - m')
    acc' = exp(m - m') acc + exp(S_t - m') V_t

After the last tile O = acc / l, exactly softmax(S) V (the online softmax; `merge_softmax`
is the same update for two arbitrary partial results). The forward also keeps the
log-sum-exp L = m + log l of each row (Tq numbers), which is all the backward needs: it
recomputes each tile's weights as P = exp(S_t - L) instead of storing A.

Backward, for dO = dLoss/dO (the FlashAttention paper, Algorithm 4; FlashAttention-2's order):

    D    = rowsum(dO * O)                 (Tq,), once
    dV  += P^T dO
    dP   = dO V^T
    dS   = P * (dP - D)                   the softmax's backward, with D = rowsum(P * dP)
    dQ  += dS K * scale,   dK += dS^T Q * scale

No score or weight tensor larger than block_size x block_size per batch entry is ever
allocated, in either direction (the inputs, O, L, D and the gradients are T x d or T). Causal attention aligns the queries to the end of the keys, as `causal_mask` does
(query i sees keys j <= i + Tk - Tq), and key tiles entirely in a query tile's future are
skipped. A query that sees no key gets a zero output, as in `scaled_dot_product_attention`.
Half-precision inputs are accumulated in float32 and the output is cast back.
"""

from __future__ import annotations

import math

import torch
from torch.autograd.function import once_differentiable

from course_lib.attention._checks import check_int, check_qkv

__all__ = [
    "FlashAttentionFunction",
    "flash_attention",
    "flash_attention_backward",
    "flash_attention_forward",
    "merge_softmax",
    "softmax_grad_tile",
]


def merge_softmax(m1: torch.Tensor, l1: torch.Tensor, o1: torch.Tensor,
                  m2: torch.Tensor, l2: torch.Tensor, o2: torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Merge two partial softmax results over disjoint sets of keys into one.

    Each part is (m, l, o): per row, the largest score m (...,), the sum l = sum exp(s - m)
    (...,), and the *normalised* output o = sum softmax-weight * v (..., d_v) over its keys.
    The merged part is the same triple over the union of the keys. A part with no keys has
    m = -inf, l = 0 (its o is ignored); two empty parts merge to (-inf, 0, 0).
    """
    m = torch.maximum(m1, m2)
    safe = torch.where(torch.isfinite(m), m, torch.zeros_like(m))  # rows with no key at all
    w1 = torch.exp(m1 - safe) * l1                                   # each part's share, unnormalised
    w2 = torch.exp(m2 - safe) * l2
    l = w1 + w2
    denominator = torch.where(l > 0, l, torch.ones_like(l))[..., None]
    o = (w1[..., None] * torch.nan_to_num(o1) + w2[..., None] * torch.nan_to_num(o2)) / denominator
    return m, l, o


def softmax_grad_tile(p: torch.Tensor, dp: torch.Tensor, D: torch.Tensor) -> torch.Tensor:
    """dS = P * (dP - D) for one tile: p and dp (..., Br, Bc), D (..., Br, 1) = rowsum(dO * O).

    The softmax's backward needs sum_k P_ik dP_ik over *all* keys of row i, which a tile does
    not hold; it equals dO_i . O_i (dP = dO V^T and O = P V), computed once per row.
    """
    return p * (dp - D)


def _prepare(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_size: int, scale: float | None):
    """The checked block size and scale, the accumulation dtype (float32 for half precision),
    and q, k, v in it."""
    check_qkv("flash_attention", q, k, v)
    block_size = check_int("block_size", block_size, 1)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    acc_dtype = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    return block_size, scale, acc_dtype, q.to(acc_dtype), k.to(acc_dtype), v.to(acc_dtype)


def _tile_scores(q_tile: torch.Tensor, k_tile: torch.Tensor, scale: float, causal: bool,
                 q_start: int, k_start: int, offset: int) -> torch.Tensor:
    """The scores of one (query tile, key tile) pair, with the causal mask applied."""
    s = (q_tile * scale) @ k_tile.transpose(-2, -1)
    if causal:
        rows = torch.arange(q_start, q_start + q_tile.shape[-2], device=s.device)[:, None]
        cols = torch.arange(k_start, k_start + k_tile.shape[-2], device=s.device)[None, :]
        s = s.masked_fill(cols > rows + offset, float("-inf"))
    return s


def _key_tiles(q_start: int, q_end: int, Tk: int, block_size: int, causal: bool, offset: int):
    """The starts of the key tiles a query tile [q_start, q_end) can see."""
    end = min(Tk, q_end + offset) if causal else Tk   # the last row, q_end - 1, sees keys <= q_end - 1 + offset
    return range(0, max(end, 0), block_size)


def flash_attention_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *,
                            causal: bool = False, block_size: int = 64,
                            scale: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Tiled forward: (O, L), O (..., Tq, d_v) in q's dtype and the log-sum-exp L (..., Tq) of
    each row's scores (-inf for a row that sees no key), in the accumulation dtype."""
    block_size, scale, acc_dtype, qa, ka, va = _prepare(q, k, v, block_size, scale)
    Tq, Tk = q.shape[-2], k.shape[-2]
    offset = Tk - Tq
    out = torch.empty(*q.shape[:-1], v.shape[-1], dtype=q.dtype, device=q.device)
    lse = torch.empty(q.shape[:-1], dtype=acc_dtype, device=q.device)
    for q_start in range(0, Tq, block_size):
        q_tile = qa[..., q_start:q_start + block_size, :]
        rows = q_tile.shape[-2]
        m = torch.full((*q.shape[:-2], rows), float("-inf"), dtype=acc_dtype, device=q.device)
        l = torch.zeros_like(m)
        acc = torch.zeros(*q.shape[:-2], rows, v.shape[-1], dtype=acc_dtype, device=q.device)
        for k_start in _key_tiles(q_start, q_start + rows, Tk, block_size, causal, offset):
            s = _tile_scores(q_tile, ka[..., k_start:k_start + block_size, :], scale, causal,
                             q_start, k_start, offset)
            m_new = torch.maximum(m, s.amax(dim=-1))
            shift = torch.where(torch.isfinite(m_new), m_new, torch.zeros_like(m_new))
            p = torch.exp(s - shift[..., None])                  # this tile's weights, unnormalised
            alpha = torch.exp(m - shift)                         # rescales what was kept so far
            l = alpha * l + p.sum(dim=-1)
            acc = alpha[..., None] * acc + p @ va[..., k_start:k_start + block_size, :]
            m = m_new
        seen = l > 0
        out[..., q_start:q_start + rows, :] = (acc / torch.where(seen, l, torch.ones_like(l))[..., None]).to(q.dtype)
        lse[..., q_start:q_start + rows] = torch.where(seen, m + torch.log(torch.where(seen, l, torch.ones_like(l))),
                                                       torch.full_like(m, float("-inf")))
    return out, lse


def flash_attention_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                             lse: torch.Tensor, grad_out: torch.Tensor, *, causal: bool = False,
                             block_size: int = 64, scale: float | None = None
                             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dQ, dK, dV) from the saved O and L, recomputing each tile's weights (see the module
    docstring); no (Tq, Tk) tensor is allocated."""
    block_size, scale, acc_dtype, qa, ka, va = _prepare(q, k, v, block_size, scale)
    Tq, Tk = q.shape[-2], k.shape[-2]
    offset = Tk - Tq
    do = grad_out.to(acc_dtype)
    D = (do * out.to(acc_dtype)).sum(dim=-1)                     # (..., Tq): rowsum(dO * O)
    lse = torch.where(torch.isfinite(lse), lse, torch.full_like(lse, float("inf")))  # no key: P = 0
    dq, dk, dv = torch.zeros_like(qa), torch.zeros_like(ka), torch.zeros_like(va)
    for q_start in range(0, Tq, block_size):
        q_end = min(q_start + block_size, Tq)
        q_tile, do_tile = qa[..., q_start:q_end, :], do[..., q_start:q_end, :]
        lse_tile, D_tile = lse[..., q_start:q_end, None], D[..., q_start:q_end, None]
        for k_start in _key_tiles(q_start, q_end, Tk, block_size, causal, offset):
            k_end = min(k_start + block_size, Tk)
            k_tile, v_tile = ka[..., k_start:k_end, :], va[..., k_start:k_end, :]
            s = _tile_scores(q_tile, k_tile, scale, causal, q_start, k_start, offset)
            p = torch.exp(s - lse_tile)                          # the weights, recomputed
            dv[..., k_start:k_end, :] += p.transpose(-2, -1) @ do_tile
            ds = softmax_grad_tile(p, do_tile @ v_tile.transpose(-2, -1), D_tile)
            dq[..., q_start:q_end, :] += (ds @ k_tile) * scale
            dk[..., k_start:k_end, :] += (ds.transpose(-2, -1) @ q_tile) * scale
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


class FlashAttentionFunction(torch.autograd.Function):
    """Autograd for `flash_attention`: saves q, k, v, O and the log-sum-exp L, never A."""

    @staticmethod
    def forward(ctx, q, k, v, causal, block_size, scale):
        out, lse = flash_attention_forward(q, k, v, causal=causal, block_size=block_size, scale=scale)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal, ctx.block_size, ctx.scale = causal, block_size, scale
        return out

    @staticmethod
    @once_differentiable  # L is saved as a constant: a second derivative through it would be wrong
    def backward(ctx, grad_out):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = flash_attention_backward(q, k, v, out, lse, grad_out, causal=ctx.causal,
                                              block_size=ctx.block_size, scale=ctx.scale)
        return dq, dk, dv, None, None, None


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
                    block_size: int = 64, scale: float | None = None) -> torch.Tensor:
    """softmax(Q K^T * scale) V, tiled: equal to `scaled_dot_product_attention(q, k, v,
    is_causal=causal)[0]` (and its gradients), with memory O(T d + block_size^2) per batch entry.

    q (..., Tq, d), k (..., Tk, d), v (..., Tk, d_v) with the same batch dims; any Tq, Tk (not
    only multiples of block_size); scale defaults to 1/sqrt(d).
    """
    return FlashAttentionFunction.apply(q, k, v, bool(causal), block_size, scale)
