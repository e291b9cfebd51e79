"""Attention, one submodule per idea, every public name re-exported here.

- `dense`: scaled dot-product attention, masks, multi-head attention (lesson 03)
- `grouped`: MQA/GQA key-value sharing and the KV-cache size (lesson 04)
- `patterns`: sparse attention patterns as masks (lesson 04)
- `sparse`: local and block attention computed without the T x T matrix (lesson 04)
- `low_rank`: Linformer (lesson 04)
- `flash`: exact attention without the T x T matrix, tiled with an online softmax (lesson 11);
  `flash_triton` is its Triton kernel (imported on its own: it needs `triton`)
"""

from course_lib.attention.dense import (
    MultiHeadAttention,
    causal_mask,
    merge_heads,
    scaled_dot_product_attention,
    split_heads,
    stable_softmax,
)
from course_lib.attention.flash import flash_attention
from course_lib.attention.grouped import kv_cache_bytes, repeat_kv
from course_lib.attention.low_rank import LinformerAttention, linformer_attention
from course_lib.attention.patterns import (
    block_mask,
    covering_permutations,
    dilated_mask,
    global_local_mask,
    local_mask,
    random_local_global_mask,
)
from course_lib.attention.sparse import block_attention, local_attention

__all__ = [
    "LinformerAttention", "MultiHeadAttention", "block_attention", "block_mask", "causal_mask",
    "covering_permutations", "dilated_mask", "flash_attention", "global_local_mask", "kv_cache_bytes", "linformer_attention",
    "local_attention", "local_mask", "merge_heads", "random_local_global_mask", "repeat_kv",
    "scaled_dot_product_attention", "split_heads", "stable_softmax",
]
