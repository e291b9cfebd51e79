"""Positional encodings beyond lesson 02's absolute tables, one submodule per scheme (lesson 05).

- `distances`: the relative-distance matrix clip(j - i, -k, k)
- `self_attention`: the base of the attention modules below (self-attention only, masks)
- `shaw`: relative keys and values inside attention (Shaw et al. 2018)
- `transformer_xl`: the four-term relative attention with u, v and W_(k,R) (Dai et al. 2019)
- `t5`: one learned scalar per log-spaced distance bucket and head (Raffel et al. 2020)
- `rope`: rotary position embedding of queries and keys (Su et al. 2021)
- `alibi`: fixed linear distance penalties per head (Press et al. 2022)
- `extrapolation`: the tiny language model and the train-short, test-long experiment

Every name is re-exported here; the absolute encodings stay in `course_lib.embeddings`.
"""

from course_lib.positional.alibi import alibi_bias, alibi_slopes
from course_lib.positional.distances import relative_positions
from course_lib.positional.rope import (
    RotaryMultiHeadAttention,
    apply_rope,
    interleaved_to_half,
    rope_angles,
    rope_frequencies,
    rope_rotation_matrix,
)
from course_lib.positional.self_attention import RelativeSelfAttention, masked_scores
from course_lib.positional.shaw import ShawRelativeAttention, shaw_scores
from course_lib.positional.t5 import T5RelativeBias, t5_relative_bucket
from course_lib.positional.transformer_xl import TransformerXLRelativeAttention

__all__ = [
    "RelativeSelfAttention", "RotaryMultiHeadAttention", "ShawRelativeAttention", "T5RelativeBias",
    "TransformerXLRelativeAttention", "alibi_bias", "alibi_slopes", "apply_rope",
    "interleaved_to_half", "masked_scores", "relative_positions", "rope_angles",
    "rope_frequencies", "rope_rotation_matrix", "shaw_scores", "t5_relative_bucket",
]
