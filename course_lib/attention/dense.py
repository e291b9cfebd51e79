"""Dense attention: scaled dot-product attention and multi-head attention (lesson 03).

For queries Q (Tq, d), keys K (Tk, d) and values V (Tk, d_v):

    S = Q K^T / sqrt(d)                 scores, (Tq, Tk)
    S = S + M   (float mask)   or   S[~M] = -inf   (bool mask, True = may attend)
    A = softmax(S, dim=-1)              A[i, j] = P(query i attends to key j), rows sum to 1
    O = A V                             (Tq, d_v)

The 1/sqrt(d) keeps the variance of the scores at about 1 when q and k have unit-variance
entries (a dot product of d such terms has variance d), so the softmax does not saturate.

Multi-head attention runs H = n_head of these in parallel on head_size = n_embd / H slices
and mixes the concatenated results with W_O. With grouped-query attention (GQA) only
n_kv_head <= H key/value heads are projected, and each is shared by H / n_kv_head query heads
(n_kv_head == 1 is multi-query attention, MQA).

Conventions (the same as PyTorch's):
- masks broadcast against the scores (..., Tq, Tk); a bool mask is True where attention is
  allowed, a float mask is *added* to the scores (0 = allowed, -inf = blocked);
- a row whose keys are all blocked attends to nothing: its weights and its output are 0
  (this is what torch.nn.functional.scaled_dot_product_attention returns since PyTorch 2.5,
  instead of the NaN of a naive softmax).
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from course_lib.attention.grouped import repeat_kv
from course_lib.vocabulary import accepts_older_names

__all__ = [
    "MultiHeadAttention",
    "causal_mask",
    "merge_heads",
    "scaled_dot_product_attention",
    "split_heads",
    "stable_softmax",
]


# ------------------------------------------------------------------------------------------
# Softmax and masks
# ------------------------------------------------------------------------------------------

def stable_softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """softmax(x)_j = exp(x_j - m) / sum_k exp(x_k - m), with m = max_k x_k.

    Subtracting the row maximum changes nothing mathematically (it cancels between numerator
    and denominator) but keeps every exponent <= 0, so exp never overflows, even for logits
    like 1e4. The largest term is exp(0) = 1, so the sum is >= 1 and never underflows to 0.

    Entries equal to -inf get probability 0. If a whole row is -inf (every key masked), the
    row is all zeros instead of NaN (0/0), matching PyTorch's attention. (+inf or NaN inputs
    still give NaN.) m is detached: it is a constant shift, which the gradient ignores anyway.
    """
    m = x.amax(dim=dim, keepdim=True)
    # a row of all -inf has m = -inf and x - m = -inf - (-inf) = NaN: shift it by 0 instead
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m)).detach()
    e = (x - m).exp_()         # exp in place on the temporary x - m: one buffer fewer
    s = e.sum(dim=dim, keepdim=True)
    return e / torch.where(s == 0, torch.ones_like(s), s)


def causal_mask(Tq: int, Tk: int | None = None,
                device: torch.device | str | None = None) -> torch.Tensor:
    """Bool mask (Tq, Tk), True where query i may attend to key j, i.e. j <= i + (Tk - Tq).

    With Tk = Tq (the default) this is the lower triangle: token i sees tokens 0..i and never
    the future, which is what lets a decoder be trained on every position at once.

    With Tk > Tq the queries are the *last* Tq positions of the Tk keys (aligned to the end).
    This is the shape needed with a KV cache: a new query at position Tk-1 sees all Tk keys.
    (PyTorch's `is_causal=True` aligns to the start instead; the two agree when Tq == Tk.)
    """
    Tk = Tq if Tk is None else Tk
    if Tq < 0 or Tk < 0:
        raise ValueError(f"sequence lengths must be non-negative, got Tq={Tq}, Tk={Tk}.")
    if Tk < Tq:
        raise ValueError(f"causal_mask needs Tk >= Tq (the queries are the last Tq of the Tk "
                         f"positions), got Tq={Tq}, Tk={Tk}.")
    return torch.ones(Tq, Tk, dtype=torch.bool, device=device).tril(diagonal=Tk - Tq)


def _check_mask(mask: torch.Tensor, Tq: int, Tk: int) -> None:
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"mask must be a torch.Tensor, got {type(mask).__name__}.")
    if mask.dtype != torch.bool and not mask.dtype.is_floating_point:
        raise TypeError(f"mask must be bool (True = may attend) or floating (added to the "
                        f"scores), got {mask.dtype}; convert a 0/1 mask with mask.bool().")
    if mask.dim() < 2 or mask.shape[-2] not in (1, Tq) or mask.shape[-1] not in (1, Tk):
        raise ValueError(f"mask of shape {tuple(mask.shape)} does not broadcast to the scores' "
                         f"last two dims (Tq, Tk) = ({Tq}, {Tk}); masks need at least 2 dims "
                         f"(use mask[None, :] for one (Tk,) row), and a key-padding mask of "
                         f"shape (B, Tk) needs mask[:, None, None, :] for (B, H, Tq, Tk) "
                         f"scores.")


def _combine_masks(mask: torch.Tensor | None, is_causal: bool, Tq: int, Tk: int,
                   dtype: torch.dtype, device: torch.device) -> torch.Tensor | None:
    """Merge an optional user mask with the causal mask into a single mask."""
    if not is_causal:
        return mask
    causal = causal_mask(Tq, Tk, device=device)
    if mask is None:
        return causal
    if mask.dtype == torch.bool:
        return mask & causal
    return mask.to(dtype).masked_fill(~causal, float("-inf"))


# ------------------------------------------------------------------------------------------
# Scaled dot-product attention (the explicit version)
# ------------------------------------------------------------------------------------------

def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    *,
    is_causal: bool = False,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """O = softmax(Q K^T / sqrt(d) + mask) V, computed step by step. Returns (O, A).

    Shapes: q (..., Tq, d), k (..., Tk, d), v (..., Tk, d_v); the batch dims "..." (any
    number, e.g. (B, H)) broadcast. Returns out (..., Tq, d_v) and the attention weights
    A (..., Tq, Tk), whose rows sum to 1 (or are all 0 for a fully masked row).

    mask: bool (True = may attend) or float (added to the scores), broadcastable to
        (..., Tq, Tk).
    dropout_p: probability of zeroing each attention weight (rescaling the rest by
        1/(1-p)), applied whenever > 0 like PyTorch; pass 0.0 at eval time. The returned
        weights are the softmax *before* dropout.
    is_causal: also apply `causal_mask(Tq, Tk)` (aligned to the end when Tk > Tq).
    scale: multiplier of the scores; default 1/sqrt(d).
    """
    if q.dim() < 2 or k.dim() < 2 or v.dim() < 2:
        raise ValueError(f"q, k and v need shape (..., T, d), got {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, {tuple(v.shape)}.")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must have the same last dim d to be dotted, got "
                         f"q {tuple(q.shape)} and k {tuple(k.shape)}: did you transpose K "
                         "before calling? Pass k as (..., Tk, d).")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v need one row per key (same Tk), got k {tuple(k.shape)} and "
                         f"v {tuple(v.shape)}.")
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p must be in [0, 1), got {dropout_p!r}.")
    Tq, Tk = q.shape[-2], k.shape[-2]
    try:
        batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except RuntimeError:
        raise ValueError(f"the batch dims of q {tuple(q.shape)}, k {tuple(k.shape)} and v "
                         f"{tuple(v.shape)} do not broadcast together.") from None
    if mask is not None:
        _check_mask(mask, Tq, Tk)
        if torch.broadcast_shapes(mask.shape, (*batch, Tq, Tk)) != (*batch, Tq, Tk):
            raise ValueError(f"mask of shape {tuple(mask.shape)} has more or larger batch dims "
                             f"than the scores {(*batch, Tq, Tk)}; like PyTorch, the mask must "
                             "broadcast *to* the scores' shape.")
    mask = _combine_masks(mask, is_causal, Tq, Tk, q.dtype, q.device)

    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    # scaling q (T*d numbers) is cheaper than scaling the scores (T*T numbers)
    scores = (q * scale) @ k.transpose(-2, -1)            # (..., Tq, Tk)
    if mask is not None:
        if mask.dtype == torch.bool:
            # in place on the fresh scores (autograd allows it: matmul keeps q and k, not S)
            scores.masked_fill_(~mask, float("-inf"))       # blocked -> -inf
        else:
            scores += mask.to(scores.dtype)                 # 0 allowed, -inf blocked
    weights = stable_softmax(scores, dim=-1)               # (..., Tq, Tk)
    attn = F.dropout(weights, p=dropout_p) if dropout_p > 0 else weights
    return attn @ v, weights


# ------------------------------------------------------------------------------------------
# Heads
# ------------------------------------------------------------------------------------------

def split_heads(x: torch.Tensor, n_head: int) -> torch.Tensor:
    """(..., T, H*head_size) -> (..., H, T, head_size): cut the last dim into H slices, one per head.

    Head h gets columns h*head_size : (h+1)*head_size of the projected vectors.
    """
    if x.dim() < 2:
        raise ValueError(f"split_heads needs x of shape (..., T, D), got {tuple(x.shape)}.")
    D = x.shape[-1]
    if n_head < 1 or D % n_head != 0:
        raise ValueError(f"the last dim {D} is not divisible by n_head={n_head}; "
                         "choose n_head that divides the model width.")
    return x.unflatten(-1, (n_head, D // n_head)).transpose(-3, -2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(..., H, T, head_size) -> (..., T, H*head_size): the inverse of `split_heads` (concatenation)."""
    if x.dim() < 3:
        raise ValueError(f"merge_heads needs x of shape (..., H, T, head_size), got "
                         f"{tuple(x.shape)}.")
    return x.transpose(-3, -2).flatten(-2)


# ------------------------------------------------------------------------------------------
# Multi-head attention with MHA / GQA / MQA
# ------------------------------------------------------------------------------------------

class MultiHeadAttention(nn.Module):
    """Multi-head attention with n_kv_head key/value heads.

    MultiHeadAttention(n_embd, n_head, n_kv_head=None, dropout=0.0, bias=True): the names of
    GPTConfig and the KV cache (n_embd = d_model, n_head = H, n_kv_head = H_kv, head_size =
    d_h = n_embd / n_head; the public API's older keywords d_model, n_heads, n_kv_heads are
    accepted too).

        Q = X W_Q  (B, T, H*d_h),   K = X W_K,  V = X W_V  (B, T, H_kv*d_h)
        head_h = softmax(Q_h K_g^T / sqrt(d_h) + mask) V_g,   g = h // (H / H_kv)
        out = concat(head_1, ..., head_H) W_O

    n_kv_head = n_head (default): standard MHA; 1: MQA; in between: GQA. Fewer KV heads
    shrink the KV cache by n_head / n_kv_head.

    Steps are separate methods so later lessons can extend one of them:
        project_qkv -> cached_kv (lesson 08) -> attend -> merge_heads -> out_proj

    forward(x, kv=None, mask=None, is_causal=False, need_weights=False, *, cache=None)
    -> (out, weights):
        x (B, Tq, n_embd); kv (B, Tk, n_embd) for cross-attention (default: x);
        mask broadcastable to (B, H, Tq, Tk), bool True = may attend or float added;
        is_causal adds causal_mask(Tq, Tk);
        weights (B, H, Tq, Tk) per head if need_weights else None;
        cache: one layer of a `course_lib.kv_cache.KVCache` (`cache.layer(i)`): x holds only the
        new tokens, their k, v are appended, and they attend to every cached position.
    Without need_weights the fused torch.nn.functional.scaled_dot_product_attention runs
    (fast path); with it, the explicit `scaled_dot_product_attention` of this module does.
    """

    @accepts_older_names
    def __init__(self, n_embd: int, n_head: int, n_kv_head: int | None = None,
                 dropout: float = 0.0, bias: bool = True) -> None:
        super().__init__()
        n_kv_head = n_head if n_kv_head is None else n_kv_head
        if n_head < 1 or n_embd % n_head != 0:
            raise ValueError(f"n_embd={n_embd} is not divisible by n_head={n_head}: each "
                             "head gets n_embd / n_head dims; pick n_head that divides "
                             "n_embd.")
        if n_kv_head < 1 or n_head % n_kv_head != 0:
            raise ValueError(f"n_head={n_head} is not divisible by n_kv_head={n_kv_head}: "
                             "each KV head is shared by n_head / n_kv_head query heads; "
                             "pick n_kv_head that divides n_head.")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout!r}.")
        self.n_embd, self.n_head, self.n_kv_head = n_embd, n_head, n_kv_head
        self.head_size = n_embd // n_head
        self.n_rep = n_head // n_kv_head            # query heads per KV head
        self.dropout = dropout

        self.q_proj = nn.Linear(n_embd, n_head * self.head_size, bias=bias)
        self.k_proj = nn.Linear(n_embd, n_kv_head * self.head_size, bias=bias)
        self.v_proj = nn.Linear(n_embd, n_kv_head * self.head_size, bias=bias)
        self.out_proj = nn.Linear(n_head * self.head_size, n_embd, bias=bias)

    def _check_input(self, name: str, x: torch.Tensor) -> None:
        if x.dim() != 3 or x.shape[-1] != self.n_embd:
            hint = " (add a batch dim with x.unsqueeze(0))" if x.dim() == 2 else ""
            raise ValueError(f"{name} must have shape (B, T, n_embd={self.n_embd}), got "
                             f"{tuple(x.shape)}{hint}.")

    def project_qkv(self, x: torch.Tensor, kv: torch.Tensor | None = None
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q (B, H, Tq, d_h) from x; k, v (B, H_kv, Tk, d_h) from kv (default x)."""
        kv = x if kv is None else kv
        q = split_heads(self.q_proj(x), self.n_head)
        k = split_heads(self.k_proj(kv), self.n_kv_head)
        v = split_heads(self.v_proj(kv), self.n_kv_head)
        return q, k, v

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               mask: torch.Tensor | None = None, is_causal: bool = False,
               need_weights: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Per-head attention: q (B, H, Tq, d_h), k/v (B, H_kv, Tk, d_h) -> (B, H, Tq, d_h).

        The explicit path (need_weights) repeats the KV heads to H first; the fused path lets
        PyTorch share each KV head across its group of query heads (`enable_gqa`), without the
        copy, which would cost GQA and MQA most of their saving at decode time. Returns (out,
        weights), weights (B, H, Tq, Tk) only when need_weights, else None.
        """
        if need_weights:
            k, v = repeat_kv(k, self.n_rep), repeat_kv(v, self.n_rep)
        gqa = {"enable_gqa": True} if self.n_rep > 1 else {}
        dropout_p = self.dropout if self.training else 0.0
        Tq, Tk = q.shape[-2], k.shape[-2]
        if mask is not None:
            _check_mask(mask, Tq, Tk)
        if is_causal and Tq == 1:
            is_causal = False   # one query, aligned to the end, sees every key: nothing to mask
        if need_weights:
            return scaled_dot_product_attention(q, k, v, mask, dropout_p, is_causal=is_causal)
        if is_causal and mask is None and Tq == Tk:
            # PyTorch's is_causal (start-aligned) equals ours when Tq == Tk; it lets the fused
            # kernel skip the masked half instead of reading a mask
            out = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True, **gqa)
            return out, None
        mask = _combine_masks(mask, is_causal, Tq, Tk, q.dtype, q.device)
        if mask is not None and mask.dtype != torch.bool:
            mask = mask.to(q.dtype)   # the fused kernel wants the float mask in q's dtype
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, **gqa)
        return out, None

    def forward(self, x: torch.Tensor, kv: torch.Tensor | None = None,
                mask: torch.Tensor | None = None, is_causal: bool = False,
                need_weights: bool = False, *, cache=None) -> tuple[torch.Tensor, torch.Tensor | None]:
        self._check_input("x", x)
        if kv is not None:
            self._check_input("kv", kv)
            if kv.shape[0] != x.shape[0]:
                raise ValueError(f"x and kv must have the same batch size, got {x.shape[0]} "
                                 f"and {kv.shape[0]}.")
            if cache is not None:
                raise ValueError("cache= is for self-attention (kv=None): a decoder caches the keys "
                                 "and values of its own past tokens.")
        q, k, v = self.project_qkv(x, kv)
        k, v = self.cached_kv(k, v, cache)
        out, weights = self.attend(q, k, v, mask=mask, is_causal=is_causal,
                                   need_weights=need_weights)
        return self.out_proj(merge_heads(out)), weights

    @staticmethod
    def cached_kv(k: torch.Tensor, v: torch.Tensor, cache) -> tuple[torch.Tensor, torch.Tensor]:
        """With a layer cache (anything with update(k, v), such as course_lib.kv_cache's), append
        the new tokens' k, v (B, H_kv, T, d_h) and return every cached position's; else k, v.

        The queries are then the last T of the Tk positions, which is how `is_causal` and
        `causal_mask(Tq, Tk)` align them.
        """
        return (k, v) if cache is None else cache.update(k, v)

    def extra_repr(self) -> str:
        return (f"n_embd={self.n_embd}, n_head={self.n_head}, n_kv_head={self.n_kv_head}, "
                f"head_size={self.head_size}, dropout={self.dropout}")
