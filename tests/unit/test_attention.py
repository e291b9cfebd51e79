"""Spec of course_lib.attention (and its viz): softmax, masks, SDPA, heads, MHA/GQA/MQA.

Parity with PyTorch's own attention lives in tests/interop/test_attention_torch.py; here the
references are the formulas written out by hand.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.attention import (
    MultiHeadAttention,
    causal_mask,
    merge_heads,
    repeat_kv,
    scaled_dot_product_attention,
    split_heads,
    stable_softmax,
)

FAST = settings(max_examples=20, deadline=None)
F64 = torch.float64


def _randn(*shape, seed=0, dtype=F64):
    return torch.randn(*shape, dtype=dtype, generator=torch.Generator().manual_seed(seed))


def _naive_attention(q, k, v, allowed=None):
    """softmax(q k^T / sqrt(d)) v for one (Tq, d) problem, with Python loops and math.exp."""
    Tq, d = q.shape
    Tk = k.shape[0]
    out = torch.zeros(Tq, v.shape[1], dtype=F64)
    weights = torch.zeros(Tq, Tk, dtype=F64)
    for i in range(Tq):
        keys = [j for j in range(Tk) if allowed is None or allowed[i, j]]
        if not keys:
            continue
        scores = {j: float(q[i].detach() @ k[j].detach()) / math.sqrt(d) for j in keys}
        top = max(scores.values())
        z = sum(math.exp(s - top) for s in scores.values())
        for j in keys:
            weights[i, j] = math.exp(scores[j] - top) / z
            out[i] += weights[i, j] * v[j]
    return out, weights


# ------------------------------------------------------------------------------------------
# stable_softmax
# ------------------------------------------------------------------------------------------

def test_softmax_rows_are_probabilities_matching_the_definition():
    x = _randn(4, 6)
    p = stable_softmax(x)
    torch.testing.assert_close(p, torch.exp(x) / torch.exp(x).sum(-1, keepdim=True))
    torch.testing.assert_close(p.sum(-1), torch.ones(4, dtype=F64))
    assert (p > 0).all()


def test_softmax_along_another_dim():
    x = _randn(3, 5)
    torch.testing.assert_close(stable_softmax(x, dim=0), stable_softmax(x.T, dim=-1).T)


@FAST
@given(shift=st.floats(-1e4, 1e4), seed=st.integers(0, 10**6))
def test_softmax_is_invariant_to_adding_a_constant(shift, seed):
    x = _randn(2, 7, seed=seed)
    torch.testing.assert_close(stable_softmax(x + shift), stable_softmax(x), atol=1e-9, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, F64, torch.bfloat16])
def test_softmax_survives_huge_logits_where_the_naive_formula_overflows(dtype):
    x = torch.tensor([[1000.0, 996.0, -1000.0], [1e4, 1e4, 0.0]], dtype=dtype)
    naive = torch.exp(x) / torch.exp(x).sum(-1, keepdim=True)
    assert torch.isnan(naive).any()                       # the reason the max is subtracted
    p = stable_softmax(x)
    assert torch.isfinite(p).all()
    e = math.exp(-4)
    expected = torch.tensor([[1 / (1 + e), e / (1 + e), 0.0], [0.5, 0.5, 0.0]], dtype=F64)
    torch.testing.assert_close(p.double(), expected, atol=1e-2 if dtype == torch.bfloat16
                               else 1e-6, rtol=0)


def test_softmax_gives_zero_to_minus_inf_and_a_zero_row_when_everything_is_minus_inf():
    inf = float("inf")
    x = torch.tensor([[0.0, -inf, 0.0], [-inf, -inf, -inf]], requires_grad=True)
    p = stable_softmax(x)
    assert torch.equal(p.detach(), torch.tensor([[0.5, 0.0, 0.5], [0.0, 0.0, 0.0]]))
    (p * torch.arange(3.0)).sum().backward()
    assert torch.isfinite(x.grad).all(), "a fully masked row must not send NaN gradients back"


# ------------------------------------------------------------------------------------------
# causal_mask
# ------------------------------------------------------------------------------------------

def test_causal_mask_is_the_lower_triangle():
    m = causal_mask(4)
    assert m.dtype == torch.bool
    assert torch.equal(m, torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]],
                                       dtype=torch.bool))


def test_causal_mask_with_more_keys_than_queries_is_aligned_to_the_end():
    # 2 new queries at positions 3 and 4 of 5 keys (a KV cache of 3 past tokens)
    m = causal_mask(2, 5)
    assert torch.equal(m, torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], dtype=torch.bool))
    assert torch.equal(causal_mask(1, 7), torch.ones(1, 7, dtype=torch.bool))
    assert torch.equal(causal_mask(3, 3), causal_mask(3))


def test_causal_mask_rejects_fewer_keys_than_queries():
    with pytest.raises(ValueError, match="Tk >= Tq"):
        causal_mask(5, 3)


# ------------------------------------------------------------------------------------------
# scaled_dot_product_attention
# ------------------------------------------------------------------------------------------

def test_sdpa_matches_the_formula_written_with_loops():
    q, k, v = _randn(3, 4, seed=1), _randn(5, 4, seed=2), _randn(5, 2, seed=3)
    out, w = scaled_dot_product_attention(q, k, v)
    ref_out, ref_w = _naive_attention(q, k, v)
    torch.testing.assert_close(w, ref_w, atol=1e-12, rtol=0)
    torch.testing.assert_close(out, ref_out, atol=1e-12, rtol=0)


def test_sdpa_with_a_bool_mask_matches_the_loops_and_blocked_weights_are_exactly_zero():
    q, k, v = _randn(4, 8, seed=1), _randn(6, 8, seed=2), _randn(6, 3, seed=3)
    allowed = _randn(4, 6, seed=4) > 0
    allowed[:, 0] = True
    out, w = scaled_dot_product_attention(q, k, v, allowed)
    ref_out, ref_w = _naive_attention(q, k, v, allowed)
    torch.testing.assert_close(out, ref_out, atol=1e-12, rtol=0)
    torch.testing.assert_close(w, ref_w, atol=1e-12, rtol=0)
    assert (w[~allowed] == 0).all()


def test_sdpa_float_mask_is_added_to_the_scores():
    q, k, v = _randn(3, 4, seed=1), _randn(5, 4, seed=2), _randn(5, 4, seed=3)
    allowed = causal_mask(3, 5)
    additive = torch.zeros(3, 5, dtype=F64).masked_fill(~allowed, float("-inf"))
    for a, b in zip(scaled_dot_product_attention(q, k, v, additive),
                    scaled_dot_product_attention(q, k, v, allowed), strict=True):
        torch.testing.assert_close(a, b, atol=0, rtol=0)
    # a finite bias: adding log(prior) multiplies the weights by the prior, then renormalises
    prior = torch.tensor([1.0, 2.0, 3.0, 4.0, 10.0], dtype=F64)
    _, w0 = scaled_dot_product_attention(q, k, v)
    _, w1 = scaled_dot_product_attention(q, k, v, prior.log()[None, :])
    expected = w0 * prior / (w0 * prior).sum(-1, keepdim=True)
    torch.testing.assert_close(w1, expected, atol=1e-12, rtol=0)


def test_sdpa_fully_masked_row_gives_zero_weights_and_zero_output_not_nan():
    q, k, v = _randn(3, 4, seed=1), _randn(5, 4, seed=2), _randn(5, 4, seed=3)
    allowed = torch.ones(3, 5, dtype=torch.bool)
    allowed[1] = False
    out, w = scaled_dot_product_attention(q, k, v, allowed)
    assert torch.equal(w[1], torch.zeros(5, dtype=F64))
    assert torch.equal(out[1], torch.zeros(4, dtype=F64))
    torch.testing.assert_close(w[[0, 2]].sum(-1), torch.ones(2, dtype=F64))


@FAST
@given(batch=st.lists(st.integers(1, 3), min_size=0, max_size=3), Tq=st.integers(1, 6),
       Tk=st.integers(1, 6), d=st.integers(1, 8), dv=st.integers(1, 5), seed=st.integers(0, 99))
def test_sdpa_batches_any_leading_dims_like_a_loop_over_them(batch, Tq, Tk, d, dv, seed):
    q, k, v = _randn(*batch, Tq, d, seed=seed), _randn(*batch, Tk, d, seed=seed + 1), \
        _randn(*batch, Tk, dv, seed=seed + 2)
    out, w = scaled_dot_product_attention(q, k, v)
    assert out.shape == (*batch, Tq, dv)
    assert w.shape == (*batch, Tq, Tk)
    flat = [scaled_dot_product_attention(a, b, c)[0] for a, b, c in
            zip(q.reshape(-1, Tq, d), k.reshape(-1, Tk, d), v.reshape(-1, Tk, dv), strict=True)]
    torch.testing.assert_close(out.reshape(-1, Tq, dv), torch.stack(flat), atol=1e-12, rtol=0)


def test_sdpa_mask_broadcasts_over_batch_and_heads():
    q, k, v = _randn(2, 3, 4, 8, seed=1), _randn(2, 3, 6, 8, seed=2), _randn(2, 3, 6, 8, seed=3)
    per_batch = _randn(2, 1, 1, 6, seed=4) > -0.5     # a key-padding-like mask (B, 1, 1, Tk)
    per_batch[..., 0] = True
    out, w = scaled_dot_product_attention(q, k, v, per_batch)
    full = per_batch.expand(2, 3, 4, 6)
    out_full, _ = scaled_dot_product_attention(q, k, v, full.contiguous())
    torch.testing.assert_close(out, out_full, atol=0, rtol=0)
    assert (w[~full] == 0).all()


def test_sdpa_is_causal_equals_passing_the_causal_mask_and_combines_with_a_mask():
    q, k, v = _randn(2, 4, 8, seed=1), _randn(2, 6, 8, seed=2), _randn(2, 6, 8, seed=3)
    a = scaled_dot_product_attention(q, k, v, is_causal=True)[0]
    b = scaled_dot_product_attention(q, k, v, causal_mask(4, 6))[0]
    torch.testing.assert_close(a, b, atol=0, rtol=0)
    pad = torch.tensor([[False, True, True, True, True, True]])   # (1, Tk): hide key 0
    c = scaled_dot_product_attention(q, k, v, pad, is_causal=True)[1]
    assert (c[..., 0] == 0).all()
    assert (c[..., 0, 3:] == 0).all()
    c_float = scaled_dot_product_attention(
        q, k, v, torch.zeros(1, 6, dtype=F64).masked_fill(~pad, float("-inf")), is_causal=True)[1]
    torch.testing.assert_close(c, c_float, atol=0, rtol=0)


def test_sdpa_scale_defaults_to_one_over_sqrt_d():
    q, k, v = _randn(3, 16, seed=1), _randn(4, 16, seed=2), _randn(4, 2, seed=3)
    _, w_default = scaled_dot_product_attention(q, k, v)
    _, w_quarter = scaled_dot_product_attention(q, k, v, scale=0.25)
    torch.testing.assert_close(w_default, w_quarter, atol=1e-15, rtol=0)
    _, w_one = scaled_dot_product_attention(q, k, v, scale=1.0)
    assert not torch.allclose(w_one, w_default)


def test_sdpa_huge_logits_stay_finite_and_pick_the_best_key():
    q = torch.full((2, 4), 1e4)
    k = torch.tensor([[1.0, 1.0, 1.0, 1.0], [-1.0, -1.0, -1.0, -1.0], [0.9, 0.9, 0.9, 0.9]])
    v = torch.eye(3)
    out, w = scaled_dot_product_attention(q, k, v)
    assert torch.isfinite(out).all()
    assert torch.isfinite(w).all()
    torch.testing.assert_close(out, torch.tensor([[1.0, 0.0, 0.0]] * 2))


def test_sdpa_gradients_reach_q_k_and_v():
    q, k, v = (_randn(2, 3, 4, seed=s).requires_grad_() for s in (1, 2, 3))
    out, _ = scaled_dot_product_attention(q, k, v, is_causal=True)
    out.pow(2).sum().backward()
    for name, t in (("q", q), ("k", k), ("v", v)):
        assert t.grad is not None, name
        assert torch.isfinite(t.grad).all(), name
        assert t.grad.abs().sum() > 0, name
    assert torch.autograd.gradcheck(lambda a, b, c: scaled_dot_product_attention(a, b, c)[0],
                                    (q.detach()[:1].requires_grad_(), k.detach()[:1]
                                     .requires_grad_(), v.detach()[:1].requires_grad_()))


def test_sdpa_dropout_zeroes_weights_in_the_output_but_returns_the_clean_softmax():
    torch.manual_seed(0)
    q, k, v = _randn(64, 8, seed=1), _randn(64, 8, seed=2), _randn(64, 8, seed=3)
    clean_out, clean_w = scaled_dot_product_attention(q, k, v)
    out, w = scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    torch.testing.assert_close(w, clean_w, atol=0, rtol=0)
    assert not torch.allclose(out, clean_out)


@pytest.mark.parametrize(("shapes", "match"), [
    (((3, 4), (5, 6), (5, 4)), "same last dim"),
    (((3, 4), (5, 4), (6, 4)), "same Tk"),
    (((4,), (5, 4), (5, 4)), r"\(\.\.\., T, d\)"),
])
def test_sdpa_rejects_mismatched_shapes_with_a_clear_message(shapes, match):
    q, k, v = (torch.randn(*s) for s in shapes)
    with pytest.raises(ValueError, match=match):
        scaled_dot_product_attention(q, k, v)


def test_sdpa_rejects_integer_masks_and_masks_of_the_wrong_size():
    q, k, v = torch.randn(3, 4), torch.randn(5, 4), torch.randn(5, 4)
    with pytest.raises(TypeError, match=r"mask\.bool\(\)"):
        scaled_dot_product_attention(q, k, v, torch.ones(3, 5, dtype=torch.long))
    with pytest.raises(ValueError, match=r"\(Tq, Tk\) = \(3, 5\)"):
        scaled_dot_product_attention(q, k, v, torch.ones(5, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"mask\[None, :\]"):     # PyTorch rejects 1-D masks too
        scaled_dot_product_attention(q, k, v, torch.ones(5, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"mask\[None, :\]"):      # PyTorch rejects 1-D masks too
        scaled_dot_product_attention(q, k, v, torch.ones(5, dtype=torch.bool))
    with pytest.raises(ValueError, match="dropout_p"):
        scaled_dot_product_attention(q, k, v, dropout_p=1.0)
    with pytest.raises(ValueError, match=r"broadcast \*to\*"):   # as in PyTorch
        scaled_dot_product_attention(q, k, v, torch.ones(2, 3, 5, dtype=torch.bool))


def test_sdpa_rejects_batch_dims_that_do_not_broadcast():
    with pytest.raises(ValueError, match="do not broadcast"):
        scaled_dot_product_attention(torch.randn(2, 3, 4), torch.randn(3, 5, 4),
                                     torch.randn(3, 5, 4))


# ------------------------------------------------------------------------------------------
# split_heads / merge_heads / repeat_kv
# ------------------------------------------------------------------------------------------

def test_split_heads_gives_head_h_its_own_column_slice():
    x = torch.arange(2 * 3 * 12.0).reshape(2, 3, 12)
    heads = split_heads(x, 4)
    assert heads.shape == (2, 4, 3, 3)
    for h in range(4):
        assert torch.equal(heads[:, h], x[..., 3 * h:3 * (h + 1)])


@FAST
@given(batch=st.lists(st.integers(1, 3), max_size=2), T=st.integers(1, 5),
       n_head=st.integers(1, 4), head_size=st.integers(1, 4))
def test_merge_heads_undoes_split_heads(batch, T, n_head, head_size):
    x = torch.randn(*batch, T, n_head * head_size)
    heads = split_heads(x, n_head)
    assert heads.shape == (*batch, n_head, T, head_size)
    assert torch.equal(merge_heads(heads), x)


def test_split_heads_rejects_a_width_not_divisible_by_the_heads():
    with pytest.raises(ValueError, match="not divisible by n_head=5"):
        split_heads(torch.randn(2, 3, 12), 5)


def test_repeat_kv_lets_query_head_h_use_kv_head_h_over_group_size():
    kv = torch.randn(2, 3, 5, 4)
    rep = repeat_kv(kv, 4)
    assert rep.shape == (2, 12, 5, 4)
    for h in range(12):
        assert torch.equal(rep[:, h], kv[:, h // 4])
    assert repeat_kv(kv, 1) is kv


# ------------------------------------------------------------------------------------------
# MultiHeadAttention
# ------------------------------------------------------------------------------------------

def _mha(n_embd=16, n_head=4, n_kv_head=None, seed=0, **kw):
    torch.manual_seed(seed)
    return MultiHeadAttention(n_embd, n_head, n_kv_head, **kw).double().eval()


def _reference_mha(mha, x, allowed=None):
    """Concat over heads of softmax(Q_h K_g^T/sqrt(d_h)) V_g with g = h // n_rep, then W_O."""
    B, T, _ = x.shape
    dh = mha.head_size
    q, k, v = mha.q_proj(x), mha.k_proj(x), mha.v_proj(x)
    outs = []
    for b in range(B):
        heads = []
        for h in range(mha.n_head):
            g = h // (mha.n_head // mha.n_kv_head)
            o, _ = _naive_attention(q[b, :, h * dh:(h + 1) * dh], k[b, :, g * dh:(g + 1) * dh],
                                    v[b, :, g * dh:(g + 1) * dh], allowed)
            heads.append(o)
        outs.append(torch.cat(heads, dim=-1))
    return mha.out_proj(torch.stack(outs))


@pytest.mark.parametrize("n_kv_head", [4, 2, 1])
def test_mha_projection_shapes_for_mha_gqa_and_mqa(n_kv_head):
    mha = MultiHeadAttention(32, 4, n_kv_head)
    assert mha.head_size == 8
    assert mha.q_proj.weight.shape == (32, 32)
    assert mha.k_proj.weight.shape == mha.v_proj.weight.shape == (n_kv_head * 8, 32)
    assert mha.out_proj.weight.shape == (32, 32)
    n_params = sum(p.numel() for p in mha.parameters())
    assert n_params == 2 * (32 * 32 + 32) + 2 * (32 * n_kv_head * 8 + n_kv_head * 8)


def test_mha_without_bias_has_no_bias_parameters():
    mha = MultiHeadAttention(16, 4, 2, bias=False)
    assert all(p.dim() == 2 for p in mha.parameters())


@pytest.mark.parametrize("n_kv_head", [4, 2, 1])
@pytest.mark.parametrize("causal", [False, True])
def test_mha_matches_the_head_by_head_reference(n_kv_head, causal):
    mha = _mha(n_kv_head=n_kv_head)
    x = _randn(2, 5, 16, seed=1)
    out, w = mha(x, is_causal=causal, need_weights=True)
    ref = _reference_mha(mha, x, causal_mask(5) if causal else None)
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=0)
    assert w.shape == (2, 4, 5, 5)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 4, 5, dtype=F64))


def test_gqa_with_n_kv_heads_equal_to_n_heads_is_plain_mha():
    plain, gqa = _mha(n_kv_head=None, seed=3), _mha(n_kv_head=4, seed=3)
    x = _randn(2, 6, 16, seed=1)
    torch.testing.assert_close(gqa(x, is_causal=True)[0], plain(x, is_causal=True)[0],
                               atol=0, rtol=0)


@pytest.mark.parametrize("n_kv_head", [2, 1])
def test_gqa_and_mqa_equal_mha_with_expanded_kv_weights(n_kv_head):
    grouped = _mha(n_kv_head=n_kv_head, seed=5)
    full = _mha(n_kv_head=4, seed=6)
    n_rep, dh = 4 // n_kv_head, grouped.head_size
    with torch.no_grad():
        for name in ("q_proj", "out_proj"):
            getattr(full, name).load_state_dict(getattr(grouped, name).state_dict())
        for name in ("k_proj", "v_proj"):
            src, dst = getattr(grouped, name), getattr(full, name)
            # rows of KV head g, repeated for each of its n_rep query heads
            dst.weight.copy_(src.weight.view(n_kv_head, dh, 16)
                             .repeat_interleave(n_rep, dim=0).reshape(16, 16))
            dst.bias.copy_(src.bias.view(n_kv_head, dh).repeat_interleave(n_rep, 0).reshape(16))
    x = _randn(3, 7, 16, seed=1)
    mask = _randn(3, 1, 7, 7, seed=2) > -1.0
    for need_weights in (False, True):
        a = grouped(x, mask=mask, is_causal=True, need_weights=need_weights)[0]
        b = full(x, mask=mask, is_causal=True, need_weights=need_weights)[0]
        torch.testing.assert_close(a, b, atol=1e-12, rtol=0)


@FAST
@given(n_head=st.sampled_from([1, 2, 4]), group=st.sampled_from([1, 2, 4]),
       Tq=st.integers(1, 6), extra_keys=st.integers(0, 3), causal=st.booleans(),
       mask_kind=st.sampled_from(["none", "bool", "float"]), seed=st.integers(0, 99))
def test_mha_fast_path_equals_explicit_path(n_head, group, Tq, extra_keys, causal, mask_kind,
                                            seed):
    if n_head % group:
        group = 1
    mha = _mha(n_embd=8 * n_head, n_head=n_head, n_kv_head=n_head // group, seed=seed)
    x = _randn(2, Tq, 8 * n_head, seed=seed)
    kv = _randn(2, Tq + extra_keys, 8 * n_head, seed=seed + 1)
    mask = None
    if mask_kind != "none":
        mask = _randn(2, 1, Tq, Tq + extra_keys, seed=seed + 2) > 0
        mask[..., -1] = True
        if mask_kind == "float":
            mask = torch.zeros(mask.shape, dtype=F64).masked_fill(~mask, float("-inf"))
    fast, none = mha(x, kv=kv, mask=mask, is_causal=causal)
    explicit, w = mha(x, kv=kv, mask=mask, is_causal=causal, need_weights=True)
    assert none is None
    assert w.shape == (2, n_head, Tq, Tq + extra_keys)
    torch.testing.assert_close(fast, explicit, atol=1e-12, rtol=0)


def test_mha_fast_path_equals_explicit_path_in_float32():
    torch.manual_seed(0)
    mha = MultiHeadAttention(64, 8, 2).eval()
    x = torch.randn(2, 33, 64)
    torch.testing.assert_close(mha(x, is_causal=True)[0],
                               mha(x, is_causal=True, need_weights=True)[0],
                               atol=1e-5, rtol=1e-5)


def test_causal_mha_output_at_t_ignores_tokens_after_t():
    mha = _mha(n_kv_head=2)
    x = _randn(1, 8, 16, seed=1)
    y = x.clone()
    y[:, 5:] = _randn(1, 3, 16, seed=9)        # change the future of position 4
    a, b = mha(x, is_causal=True)[0], mha(y, is_causal=True)[0]
    torch.testing.assert_close(a[:, :5], b[:, :5], atol=1e-12, rtol=0)
    assert not torch.allclose(a[:, 5:], b[:, 5:])
    assert not torch.allclose(mha(x)[0][:, :5], mha(y)[0][:, :5])   # without the mask it leaks


def test_mha_cross_attention_uses_kv_for_keys_and_values():
    mha = _mha()
    x, memory = _randn(2, 3, 16, seed=1), _randn(2, 9, 16, seed=2)
    out, w = mha(x, kv=memory, need_weights=True)
    assert out.shape == (2, 3, 16)
    assert w.shape == (2, 4, 3, 9)
    q, k, v = mha.project_qkv(x, memory)
    manual = mha.out_proj(merge_heads(scaled_dot_product_attention(q, k, v)[0]))
    torch.testing.assert_close(out, manual, atol=1e-12, rtol=0)


@pytest.mark.parametrize("need_weights", [False, True])
def test_mha_gradients_reach_every_parameter_and_the_input(need_weights):
    mha = _mha(n_kv_head=2).train()
    x = _randn(2, 5, 16, seed=1).requires_grad_()
    out, _ = mha(x, is_causal=True, need_weights=need_weights)
    out.pow(2).mean().backward()
    for name, p in [*mha.named_parameters(), ("x", x)]:
        assert p.grad is not None, f"no gradient reached {name}"
        assert torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, name


def test_mha_dropout_is_only_active_in_training_mode():
    torch.manual_seed(0)
    mha = MultiHeadAttention(32, 4, dropout=0.5)
    x = torch.randn(2, 16, 32)
    mha.eval()
    for need_weights in (False, True):
        assert torch.equal(mha(x, need_weights=need_weights)[0],
                           mha(x, need_weights=need_weights)[0])
    mha.train()
    for need_weights in (False, True):
        assert not torch.equal(mha(x, need_weights=need_weights)[0],
                               mha(x, need_weights=need_weights)[0])


@pytest.mark.parametrize(("args", "match"), [
    ((30, 4), "n_embd=30 is not divisible by n_head=4"),
    ((32, 4, 3), "n_head=4 is not divisible by n_kv_head=3"),
    ((32, 4, 0), "n_kv_head=0"),
    ((32, 0), "n_head=0"),
    ((32, 4, None, 1.5), "dropout"),
])
def test_mha_rejects_bad_configuration_naming_the_problem(args, match):
    with pytest.raises(ValueError, match=match):
        MultiHeadAttention(*args)


@pytest.mark.parametrize(("shape", "match"), [
    ((5, 32), r"unsqueeze\(0\)"), ((2, 5, 16), r"\(B, T, n_embd=32\)"), ((1, 2, 5, 32), "got"),
])
def test_mha_rejects_inputs_of_the_wrong_shape(shape, match):
    mha = MultiHeadAttention(32, 4)
    with pytest.raises(ValueError, match=match):
        mha(torch.randn(*shape))


def test_mha_rejects_kv_of_the_wrong_shape_or_batch_and_a_bad_mask():
    mha = MultiHeadAttention(32, 4)
    x = torch.randn(2, 5, 32)
    with pytest.raises(ValueError, match="kv must have shape"):
        mha(x, kv=torch.randn(2, 5, 16))
    with pytest.raises(ValueError, match="same batch size"):
        mha(x, kv=torch.randn(3, 5, 32))
    with pytest.raises(ValueError, match="does not broadcast"):
        mha(x, mask=torch.ones(2, 5, dtype=torch.bool))   # a (B, Tk) mask needs [:, None, None]


# ------------------------------------------------------------------------------------------
# viz: heatmaps and the explorer
# ------------------------------------------------------------------------------------------

@pytest.fixture
def plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    yield plt
    plt.close("all")


def test_attention_heatmap_puts_tokens_on_both_axes(plt):
    from course_lib.viz import attention_heatmap

    w = scaled_dot_product_attention(torch.randn(3, 4), torch.randn(5, 4), torch.randn(5, 4))[1]
    ax = attention_heatmap(w, ["the", "dog", "ran"], ["a", "b", "c", "d", "e"], title="t")
    assert [t.get_text() for t in ax.get_yticklabels()] == ["the", "dog", "ran"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "b", "c", "d", "e"]
    assert ax.get_title() == "t"
    with pytest.raises(ValueError, match="labels"):
        attention_heatmap(w, ["too", "few"])
    with pytest.raises(ValueError, match="attention_heads_grid"):
        attention_heatmap(torch.rand(2, 3, 3), ["a", "b", "c"])


def test_attention_heads_grid_draws_one_panel_per_head(plt):
    from course_lib.viz import attention_heads_grid

    fig = attention_heads_grid(torch.rand(6, 4, 4), list("abcd"), ncols=4)
    titled = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert titled == [f"head {h}" for h in range(6)]
    colour_bars = [ax for ax in fig.axes if ax.get_ylabel() == "attention weight"]
    assert len(colour_bars) == 1, "one shared colour bar, labelled, for all heads"
    sizes = {t.get_fontsize() for ax in fig.axes[:6] for t in ax.get_xticklabels()}
    assert min(sizes) >= 6, f"tick labels must stay legible, got font sizes {sizes}"


def test_attention_explorer_recomputes_on_sentence_and_mask_changes(plt):
    from course_lib.viz import attention_explorer

    mha = _mha()
    calls = []

    def attention_fn(sentence, causal):
        calls.append((sentence, causal))
        x = _randn(1, len(sentence.split()), 16, seed=len(sentence))
        return mha(x, is_causal=causal, need_weights=True)[1].detach()

    ui = attention_explorer(["the dog chased the cat", "hello world"], str.split, attention_fn)
    assert ui.weights.shape == (4, 5, 5)
    assert ui.head.max == 3
    ui.causal.value = True
    assert calls[-1] == ("the dog chased the cat", True)
    assert (torch.from_numpy(ui.weights).triu(1) == 0).all()
    ui.head.value = 2
    ui.sentence.value = "hello world"
    assert ui.tokens == ["hello", "world"]
    assert ui.weights.shape == (4, 2, 2)
    n_calls = len(calls)
    ui.sentence.value = "the dog chased the cat"     # cached: no new call
    assert len(calls) == n_calls


@pytest.mark.parametrize(("n_kv_head", "is_causal", "masked"), [(2, False, False), (1, True, False), (2, False, True)])
def test_fused_gqa_attention_reads_the_shared_kv_heads_without_copying_them(n_kv_head, is_causal, masked):
    """The fused path lets each KV head serve its group of query heads as it is (enable_gqa):
    no tensor of H heads' keys is built, and the result equals the explicit path, which repeats."""
    from course_lib.profiling import record_memory

    mha = _mha(n_embd=32, n_head=8, n_kv_head=n_kv_head)
    q = torch.randn(1, 8, 1, 4, dtype=torch.float64)
    k, v = torch.randn(2, 1, n_kv_head, 2048, 4, dtype=torch.float64).unbind(0)
    mask = (torch.rand(1, 1, 1, 2048) > 0.5) if masked else None
    with record_memory() as mem:
        fused, _ = mha.attend(q, k, v, mask=mask, is_causal=is_causal)
    explicit, _ = mha.attend(q, k, v, mask=mask, is_causal=is_causal, need_weights=True)
    assert torch.allclose(fused, explicit, atol=1e-12)
    assert mem.largest_numel < 8 * 2048 * 4, f"a tensor of {mem.largest_shape} was created: K/V repeated to all heads"
