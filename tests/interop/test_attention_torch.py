"""Parity of course_lib.attention with PyTorch's own attention.

- torch.nn.functional.scaled_dot_product_attention (bool and float masks, broadcasting,
  Tq != Tk, GQA, float64 to ~1e-12, gradients);
- torch.nn.MultiheadAttention with the same weights copied in (masks, key padding,
  averaged and per-head weights, cross-attention, bias=False).

Note the opposite mask conventions: F.scaled_dot_product_attention's bool mask is
True = may attend (ours too), while nn.MultiheadAttention's attn_mask and key_padding_mask
are True = blocked.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.attention import (
    MultiHeadAttention,
    causal_mask,
    scaled_dot_product_attention,
)

FAST = settings(max_examples=30, deadline=None)
F64 = torch.float64
EXACT = {"atol": 1e-12, "rtol": 1e-12}


def _randn(*shape, seed=0, dtype=F64):
    return torch.randn(*shape, dtype=dtype, generator=torch.Generator().manual_seed(seed))


# ------------------------------------------------------------------------------------------
# against torch.nn.functional.scaled_dot_product_attention
# ------------------------------------------------------------------------------------------

MASK_SHAPES = ["none", "full", "TqTk", "1Tk", "B11Tk", "1H1Tk"]


def _mask_shape(kind, B, H, Tq, Tk):
    return {"full": (B, H, Tq, Tk), "TqTk": (Tq, Tk), "1Tk": (1, Tk), "B11Tk": (B, 1, 1, Tk),
            "1H1Tk": (1, H, 1, Tk)}[kind]


@FAST
@given(B=st.integers(1, 3), H=st.integers(1, 3), Tq=st.integers(1, 9), Tk=st.integers(1, 9),
       d=st.sampled_from([1, 4, 16]), dv=st.sampled_from([1, 8]),
       mask_kind=st.sampled_from(MASK_SHAPES), mask_dtype=st.sampled_from(["bool", "float"]),
       seed=st.integers(0, 10**6))
def test_sdpa_matches_torch_in_float64_for_any_shape_and_mask(B, H, Tq, Tk, d, dv, mask_kind,
                                                              mask_dtype, seed):
    q, k, v = _randn(B, H, Tq, d, seed=seed), _randn(B, H, Tk, d, seed=seed + 1), \
        _randn(B, H, Tk, dv, seed=seed + 2)
    mask = None
    if mask_kind != "none":
        shape = _mask_shape(mask_kind, B, H, Tq, Tk)
        if mask_dtype == "bool":
            mask = _randn(*shape, seed=seed + 3) > -0.3   # fully masked rows do happen
        else:
            mask = 3 * _randn(*shape, seed=seed + 3)
            mask = mask.masked_fill(mask < -2, float("-inf"))
    out, w = scaled_dot_product_attention(q, k, v, mask)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
                               **EXACT)
    assert w.shape == (B, H, Tq, Tk)


@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_sdpa_matches_torch_on_a_realistic_causal_problem(dtype):
    q, k, v = (_randn(2, 8, 64, 32, seed=s, dtype=dtype) for s in (1, 2, 3))
    out, _ = scaled_dot_product_attention(q, k, v, causal_mask(64))
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    tol = EXACT if dtype == F64 else {"atol": 1e-5, "rtol": 1e-5}
    torch.testing.assert_close(out, ref, **tol)
    torch.testing.assert_close(scaled_dot_product_attention(q, k, v, is_causal=True)[0], ref,
                               **tol)


def test_sdpa_fully_masked_rows_match_torch_zeros():
    q, k, v = _randn(1, 2, 3, 4, seed=1), _randn(1, 2, 5, 4, seed=2), _randn(1, 2, 5, 4, seed=3)
    mask = torch.ones(3, 5, dtype=torch.bool)
    mask[1] = False
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert torch.equal(ref[..., 1, :], torch.zeros(1, 2, 4, dtype=F64))   # PyTorch >= 2.5
    torch.testing.assert_close(scaled_dot_product_attention(q, k, v, mask)[0], ref, **EXACT)


def test_sdpa_batch_dims_broadcast_between_q_and_kv_like_torch():
    q = _randn(2, 4, 5, 8, seed=1)          # 4 heads of queries
    k, v = _randn(2, 1, 7, 8, seed=2), _randn(2, 1, 7, 8, seed=3)   # one shared KV head
    torch.testing.assert_close(scaled_dot_product_attention(q, k, v)[0],
                               F.scaled_dot_product_attention(q, k.expand(2, 4, 7, 8),
                                                              v.expand(2, 4, 7, 8)), **EXACT)


def test_sdpa_is_causal_agrees_with_torch_for_square_and_is_end_aligned_otherwise():
    q, k, v = _randn(1, 2, 3, 8, seed=1), _randn(1, 2, 7, 8, seed=2), _randn(1, 2, 7, 8, seed=3)
    ours = scaled_dot_product_attention(q, k, v, is_causal=True)[0]
    end_aligned = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_mask(3, 7))
    torch.testing.assert_close(ours, end_aligned, **EXACT)
    start_aligned = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert not torch.allclose(ours, start_aligned)   # PyTorch aligns is_causal to the start


def test_sdpa_custom_scale_matches_torch():
    q, k, v = _randn(3, 5, 8, seed=1), _randn(3, 6, 8, seed=2), _randn(3, 6, 8, seed=3)
    torch.testing.assert_close(scaled_dot_product_attention(q, k, v, scale=0.7)[0],
                               F.scaled_dot_product_attention(q, k, v, scale=0.7), **EXACT)


def test_sdpa_gradients_match_torch_including_masked_rows():
    mask = _randn(2, 1, 6, 6, seed=4) > 0
    mask[0, 0, 2] = False                                  # a fully masked row
    ours = [_randn(2, 3, 6, 8, seed=s).requires_grad_() for s in (1, 2, 3)]
    theirs = [t.detach().clone().requires_grad_() for t in ours]
    g = _randn(2, 3, 6, 8, seed=5)
    (scaled_dot_product_attention(*ours, mask)[0] * g).sum().backward()
    (F.scaled_dot_product_attention(*theirs, attn_mask=mask) * g).sum().backward()
    for a, b, name in zip(ours, theirs, "qkv", strict=True):
        assert torch.isfinite(a.grad).all(), name
        torch.testing.assert_close(a.grad, b.grad, **EXACT, msg=f"d loss / d {name}")


@pytest.mark.parametrize(("n_head", "n_kv_head"), [(8, 8), (8, 2), (8, 1)])
def test_mha_attend_matches_torch_enable_gqa(n_head, n_kv_head):
    torch.manual_seed(0)
    mha = MultiHeadAttention(8 * n_head, n_head, n_kv_head).double().eval()
    q = _randn(2, n_head, 10, 8, seed=1)
    k, v = _randn(2, n_kv_head, 10, 8, seed=2), _randn(2, n_kv_head, 10, 8, seed=3)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    for need_weights in (False, True):
        out, _ = mha.attend(q, k, v, is_causal=True, need_weights=need_weights)
        torch.testing.assert_close(out, ref, **EXACT)


# ------------------------------------------------------------------------------------------
# against torch.nn.MultiheadAttention with copied weights
# ------------------------------------------------------------------------------------------

def _pair(n_embd=32, n_head=4, bias=True, seed=0):
    """Our MHA and nn.MultiheadAttention(batch_first=True) holding the same weights."""
    torch.manual_seed(seed)
    ours = MultiHeadAttention(n_embd, n_head, bias=bias).double().eval()
    theirs = nn.MultiheadAttention(n_embd, n_head, bias=bias, batch_first=True).double().eval()
    with torch.no_grad():
        theirs.in_proj_weight.copy_(torch.cat([ours.q_proj.weight, ours.k_proj.weight,
                                               ours.v_proj.weight]))
        theirs.out_proj.weight.copy_(ours.out_proj.weight)
        if bias:
            theirs.in_proj_bias.copy_(torch.cat([ours.q_proj.bias, ours.k_proj.bias,
                                                 ours.v_proj.bias]))
            theirs.out_proj.bias.copy_(ours.out_proj.bias)
    return ours, theirs


@pytest.mark.parametrize("bias", [True, False])
def test_mha_matches_torch_multihead_attention_without_masks(bias):
    ours, theirs = _pair(bias=bias)
    x = _randn(3, 10, 32, seed=1)
    ref, ref_w = theirs(x, x, x, need_weights=True, average_attn_weights=False)
    out, w = ours(x, need_weights=True)
    torch.testing.assert_close(out, ref, **EXACT)
    torch.testing.assert_close(w, ref_w, **EXACT)
    torch.testing.assert_close(ours(x)[0], ref, **EXACT)          # fast path too


def test_mha_matches_torch_with_causal_attn_mask_and_averaged_weights():
    ours, theirs = _pair()
    x = _randn(2, 9, 32, seed=1)
    blocked = ~causal_mask(9)                              # torch: True = blocked
    ref, ref_w = theirs(x, x, x, attn_mask=blocked, need_weights=True)   # averaged over heads
    out, w = ours(x, is_causal=True, need_weights=True)
    torch.testing.assert_close(out, ref, **EXACT)
    torch.testing.assert_close(w.mean(dim=1), ref_w, **EXACT)
    torch.testing.assert_close(ours(x, mask=~blocked)[0], ref, **EXACT)


def test_mha_matches_torch_with_a_float_attn_mask():
    ours, theirs = _pair()
    x = _randn(2, 7, 32, seed=1)
    bias = _randn(7, 7, seed=2)                            # float masks are added in both
    ref, _ = theirs(x, x, x, attn_mask=bias, need_weights=False)
    torch.testing.assert_close(ours(x, mask=bias)[0], ref, **EXACT)
    torch.testing.assert_close(ours(x, mask=bias, need_weights=True)[0], ref, **EXACT)


def test_mha_matches_torch_with_key_padding_and_causal_masks():
    ours, theirs = _pair()
    x = _randn(3, 8, 32, seed=1)
    lengths = torch.tensor([8, 5, 2])
    key_padding = torch.arange(8)[None, :] >= lengths[:, None]   # torch: True = padding
    blocked = ~causal_mask(8)
    ref, ref_w = theirs(x, x, x, key_padding_mask=key_padding, attn_mask=blocked,
                        need_weights=True, average_attn_weights=False)
    may_attend = ~key_padding[:, None, None, :]                  # (B, 1, 1, Tk)
    for need_weights in (False, True):
        out, w = ours(x, mask=may_attend, is_causal=True, need_weights=need_weights)
        torch.testing.assert_close(out, ref, **EXACT)
    torch.testing.assert_close(w, ref_w, **EXACT)


def test_mha_cross_attention_matches_torch():
    ours, theirs = _pair()
    x, memory = _randn(2, 4, 32, seed=1), _randn(2, 11, 32, seed=2)
    key_padding = torch.zeros(2, 11, dtype=torch.bool)
    key_padding[1, 6:] = True
    ref, ref_w = theirs(x, memory, memory, key_padding_mask=key_padding, need_weights=True)
    out, w = ours(x, kv=memory, mask=~key_padding[:, None, None, :], need_weights=True)
    torch.testing.assert_close(out, ref, **EXACT)
    torch.testing.assert_close(w.mean(1), ref_w, **EXACT)


def test_mha_matches_torch_fused_inference_path_in_float32():
    torch.manual_seed(0)
    ours, theirs = _pair(n_embd=64, n_head=8)
    ours, theirs = ours.float(), theirs.float()
    x = torch.randn(2, 16, 64)
    with torch.inference_mode():
        ref, _ = theirs(x, x, x, need_weights=False)   # takes nn.MHA's fast path
        out, _ = ours(x)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


def test_mha_gradients_match_torch():
    ours, theirs = _pair()
    x = _randn(2, 6, 32, seed=1)
    blocked = ~causal_mask(6)
    g = _randn(2, 6, 32, seed=2)
    (ours(x, is_causal=True)[0] * g).sum().backward()
    (theirs(x, x, x, attn_mask=blocked, need_weights=False)[0] * g).sum().backward()
    torch.testing.assert_close(torch.cat([ours.q_proj.weight.grad, ours.k_proj.weight.grad,
                                          ours.v_proj.weight.grad]),
                               theirs.in_proj_weight.grad, **EXACT)
    torch.testing.assert_close(ours.out_proj.weight.grad, theirs.out_proj.weight.grad, **EXACT)
