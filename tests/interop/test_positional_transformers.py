"""Parity of course_lib.positional with the code of `transformers` (configs built in code, no
downloads, random weights):

- `apply_rope(layout="half")` against Llama's `apply_rotary_pos_emb(q, k, cos, sin)` with cos and
  sin from `LlamaRotaryEmbedding` (float32: it computes its angles in float32, so atol = rtol =
  1e-5 at positions below 64); the default interleaved layout against the same after the
  channel permutation `interleaved_to_half`;
- `t5_relative_bucket` against `T5Attention._relative_position_bucket` for every j - i in
  -5000 ... 5000, both directions, several (num_buckets, max_distance): equal, not close;
  `T5RelativeBias` against `T5Attention.compute_bias` with the same weights;
- `alibi_slopes` against BLOOM's `build_alibi_tensor` (entry [:, 0, 1] is each head's slope)
  for 1 ... 64 heads; `alibi_bias` against BLOOM's bias, which differs from -m_h |i - j| by a
  constant per row on the causal part, so the causal softmax is the same.
"""

from __future__ import annotations

import inspect

import pytest
import torch

from course_lib.attention import causal_mask, stable_softmax
from course_lib.positional import (
    T5RelativeBias,
    alibi_bias,
    alibi_slopes,
    apply_rope,
    interleaved_to_half,
    relative_positions,
    t5_relative_bucket,
)

pytest.importorskip("transformers")
from transformers import LlamaConfig, T5Config  # noqa: E402
from transformers.models.bloom.modeling_bloom import build_alibi_tensor  # noqa: E402
from transformers.models.llama.modeling_llama import (  # noqa: E402
    LlamaRotaryEmbedding,
    apply_rotary_pos_emb,
)
from transformers.models.t5.modeling_t5 import T5Attention  # noqa: E402

F32_TOL = {"atol": 1e-5, "rtol": 1e-5}


def _randn(*shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, dtype=dtype, generator=torch.Generator().manual_seed(seed))


# ------------------------------------------------------------------------------------------
# RoPE against Llama
# ------------------------------------------------------------------------------------------

def _llama_cos_sin(n_head, n_kv_head, head_dim, theta, like, position_ids):
    config = LlamaConfig(hidden_size=n_head * head_dim, num_attention_heads=n_head,
                         num_key_value_heads=n_kv_head, head_dim=head_dim, intermediate_size=16,
                         num_hidden_layers=1, vocab_size=32, max_position_embeddings=64,
                         rope_theta=theta)
    try:
        rotary = LlamaRotaryEmbedding(config=config)
    except TypeError:
        pytest.skip("this transformers' LlamaRotaryEmbedding is not built from a config "
                    "(before 4.45)")
    return rotary(like, position_ids)


LLAMA_CASES = [(2, 2, 8, 10000.0), (4, 2, 16, 10000.0), (4, 1, 64, 500000.0), (3, 3, 2, 100.0)]


@pytest.mark.parametrize(("n_head", "n_kv_head", "head_dim", "theta"), LLAMA_CASES)
@pytest.mark.parametrize("offsets", [(0, 0), (0, 11), (40, 3)])
def test_half_layout_matches_llama_apply_rotary_pos_emb(n_head, n_kv_head, head_dim, theta,
                                                        offsets):
    B, T = 2, 9
    q = _randn(B, n_head, T, head_dim, seed=head_dim)
    k = _randn(B, n_kv_head, T, head_dim, seed=head_dim + 1)
    position_ids = torch.stack([torch.arange(o, o + T) for o in offsets])       # (B, T)
    cos, sin = _llama_cos_sin(n_head, n_kv_head, head_dim, theta, q, position_ids)
    q_ref, k_ref = apply_rotary_pos_emb(q, k, cos, sin)
    positions = position_ids[:, None, :]                                          # (B, 1, T)
    q_ours = apply_rope(q, positions, base=theta, layout="half")
    k_ours = apply_rope(k, positions, base=theta, layout="half")
    torch.testing.assert_close(q_ours, q_ref, **F32_TOL)
    torch.testing.assert_close(k_ours, k_ref, **F32_TOL)
    if offsets == (0, 0):
        torch.testing.assert_close(apply_rope(q, base=theta, layout="half"), q_ref, **F32_TOL)


@pytest.mark.parametrize(("n_head", "n_kv_head", "head_dim", "theta"), LLAMA_CASES)
def test_interleaved_layout_matches_llama_after_the_channel_permutation(n_head, n_kv_head,
                                                                        head_dim, theta):
    B, T = 2, 7
    q = _randn(B, n_head, T, head_dim, seed=3)
    k = _randn(B, n_kv_head, T, head_dim, seed=4)
    position_ids = torch.stack([torch.arange(T), torch.arange(20, 20 + T)])
    cos, sin = _llama_cos_sin(n_head, n_kv_head, head_dim, theta, q, position_ids)
    p = interleaved_to_half(head_dim)
    q_ref, k_ref = apply_rotary_pos_emb(q[..., p], k[..., p], cos, sin)
    positions = position_ids[:, None, :]
    torch.testing.assert_close(apply_rope(q, positions, base=theta)[..., p], q_ref, **F32_TOL)
    torch.testing.assert_close(apply_rope(k, positions, base=theta)[..., p], k_ref, **F32_TOL)
    if head_dim > 2:
        assert not torch.allclose(apply_rope(q, positions, base=theta), apply_rope(
            q, positions, base=theta, layout="half"), **F32_TOL), "the layouts pair other channels"


# ------------------------------------------------------------------------------------------
# T5 buckets and bias against T5Attention
# ------------------------------------------------------------------------------------------

BUCKET_CASES = [(32, 128), (16, 64), (64, 256), (8, 16), (10, 20), (33, 100), (4, 5),
                (128, 1024), (32, 100)]


@pytest.mark.parametrize(("num_buckets", "max_distance"), BUCKET_CASES)
@pytest.mark.parametrize("bidirectional", [True, False])
def test_t5_buckets_equal_transformers_far_beyond_max_distance(num_buckets, max_distance,
                                                               bidirectional):
    rel = torch.arange(-5000, 5001)
    ours = t5_relative_bucket(rel, bidirectional, num_buckets, max_distance)
    ref = T5Attention._relative_position_bucket(rel, bidirectional=bidirectional,
                                                num_buckets=num_buckets,
                                                max_distance=max_distance)
    differ = (ours != ref).nonzero().flatten()
    assert differ.numel() == 0, (f"buckets differ at j - i = {rel[differ][:8].tolist()}: ours "
                                 f"{ours[differ][:8].tolist()}, transformers "
                                 f"{ref[differ][:8].tolist()}")
    # and on a (Tq, Tk) matrix of an int32 input, shape kept
    rel2 = relative_positions(6, Tk=300).int()
    ref2 = T5Attention._relative_position_bucket(rel2, bidirectional, num_buckets, max_distance)
    assert torch.equal(t5_relative_bucket(rel2, bidirectional, num_buckets, max_distance), ref2)


def _compute_bias(attn, Tq, Tk):
    """T5Attention.compute_bias with the queries at the last Tq of Tk positions."""
    params = inspect.signature(attn.compute_bias).parameters
    if "past_seen_tokens" in params:
        return attn.compute_bias(Tq, Tk, past_seen_tokens=Tk - Tq)
    if "cache_position" in params:
        return attn.compute_bias(Tq, Tk, cache_position=torch.arange(Tk - Tq, Tk))
    if Tq != Tk:
        pytest.skip("this transformers' compute_bias cannot offset the queries")
    return attn.compute_bias(Tq, Tk)


@pytest.mark.parametrize("is_decoder", [False, True])
@pytest.mark.parametrize(("num_buckets", "max_distance"), [(32, 128), (8, 16)])
@pytest.mark.parametrize(("Tq", "Tk"), [(40, 40), (1, 200), (5, 30)])
def test_t5_bias_equals_t5_attention_compute_bias(is_decoder, num_buckets, max_distance, Tq,
                                                   Tk):
    H = 4
    config = T5Config(d_model=16, d_kv=4, num_heads=H, d_ff=8, num_layers=1,
                      relative_attention_num_buckets=num_buckets,
                      relative_attention_max_distance=max_distance, is_decoder=is_decoder)
    attn = T5Attention(config, has_relative_attention_bias=True, layer_idx=0)
    ours = T5RelativeBias(H, bidirectional=not is_decoder, num_buckets=num_buckets,
                          max_distance=max_distance)
    with torch.no_grad():
        attn.relative_attention_bias.weight.copy_(_randn(num_buckets, H, seed=num_buckets))
        ours.relative_attention_bias.weight.copy_(attn.relative_attention_bias.weight)
    ref = _compute_bias(attn, Tq, Tk)                                     # (1, H, Tq, Tk)
    assert torch.equal(ours(Tq, Tk), ref[0])


# ------------------------------------------------------------------------------------------
# ALiBi against BLOOM
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n_head", range(1, 65))
def test_alibi_slopes_equal_bloom_build_alibi_tensor(n_head):
    bloom = build_alibi_tensor(torch.ones(1, 4, dtype=torch.long), n_head, torch.float32)
    assert bloom.shape == (n_head, 1, 4)
    torch.testing.assert_close(alibi_slopes(n_head), bloom[:, 0, 1], atol=0, rtol=1e-6)


@pytest.mark.parametrize("n_head", [1, 5, 8, 12])
def test_alibi_bias_gives_blooms_causal_attention(n_head):
    """BLOOM adds m_h * j to row i; ALiBi's -m_h (i - j) on j <= i differs by -m_h * i, a
    constant per row, so the causal softmax is the same."""
    T = 16
    ours = alibi_bias(n_head, T)                                          # (H, T, T)
    bloom = build_alibi_tensor(torch.ones(1, T, dtype=torch.long), n_head, torch.float32)
    slopes = alibi_slopes(n_head)
    causal = causal_mask(T)
    row_shift = -slopes[:, None, None] * torch.arange(T, dtype=torch.float32)[:, None]
    torch.testing.assert_close((ours - bloom)[:, causal], row_shift.expand(-1, T, T)[:, causal],
                               atol=1e-5, rtol=1e-6)
    scores = _randn(n_head, T, T, seed=n_head)
    ours_w = stable_softmax((scores + ours).masked_fill(~causal, float("-inf")))
    bloom_w = stable_softmax((scores + bloom).masked_fill(~causal, float("-inf")))
    torch.testing.assert_close(ours_w, bloom_w, **F32_TOL)
