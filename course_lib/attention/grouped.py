"""Sharing keys and values between heads: multi-query (MQA) and grouped-query (GQA) attention.

With H query heads and H_kv key/value heads (H_kv divides H), query head h reads KV head
h // (H / H_kv). H_kv = H is standard multi-head attention, H_kv = 1 is MQA, anything in
between is GQA with H_kv groups. The model keeps H different questions (queries) but only
H_kv different answers (keys and values), so the K and V projections and, above all, the
KV cache shrink by H / H_kv.
"""

from __future__ import annotations

import numbers

import torch

from course_lib.attention._checks import check_int
from course_lib.vocabulary import accepts_older_names

__all__ = ["kv_cache_bytes", "repeat_kv"]


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """(..., H_kv, T, d) -> (..., H_kv*n_rep, T, d): each KV head repeated for its n_rep
    query heads, so that query head h uses KV head h // n_rep (as repeat_interleave does, and
    as F.scaled_dot_product_attention(enable_gqa=True) does)."""
    return x if n_rep == 1 else x.repeat_interleave(n_rep, dim=-3)


@accepts_older_names
def kv_cache_bytes(n_layer: int, n_kv_head: int, head_size: int, bytes_per_value: float = 2,
                   n_tokens: int = 1) -> int | float:
    """Bytes a KV cache needs: 2 (K and V) x layers x (KV heads x head_size) x bytes x tokens.

    Every layer stores one key and one value vector of width n_kv_head * head_size per token.
    GPT-3 (96 layers, 96 heads of 128, float32): kv_cache_bytes(96, 96, 128, 4) = 9,437,184 B
    per token, 19.3 GB for its 2048-token context; with MQA (n_kv_head=1) 96x less.
    bytes_per_value: 4 for float32, 2 for float16/bfloat16 (the default), 1 for int8, 0.5 for
    4-bit. Returns an int when the result is whole.
    """
    check_int("n_layer", n_layer, 1)
    check_int("n_kv_head", n_kv_head, 1)
    check_int("head_size", head_size, 1)
    check_int("n_tokens", n_tokens, 0)
    if isinstance(bytes_per_value, bool) or not isinstance(bytes_per_value, numbers.Real) \
            or not bytes_per_value > 0:
        raise ValueError(f"bytes_per_value must be a positive number (4 for float32, 2 for "
                         f"bfloat16), got {bytes_per_value!r}.")
    total = 2 * n_layer * n_kv_head * head_size * bytes_per_value * n_tokens
    return int(total) if float(total).is_integer() else total
