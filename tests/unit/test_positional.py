"""Spec of lesson 05's positional encodings (course_lib.positional) and of
course_lib.embeddings.sinusoidal_encoding.

References are the definitions written out by hand, in float64:
- RoPE as a Python loop over channel pairs with math.cos / math.sin;
- ALiBi's slopes with the paper's get_slopes, its bias as a double loop over (i, j);
- T5's buckets with exact integer arithmetic (no logarithm, so no rounding at the boundaries);
- the relative attentions (Shaw, Transformer-XL, T5 bias, rotary MHA) as a loop over
  (batch, head, query i, key j) with the projections, the scores and the softmax written out,
  every learned table (u, v, rel_k, rel_v, bias weights) random and non-zero.
Queries are the last Tq of the Tk positions (query i sits at position Tk - Tq + i), as with a
KV cache. Parity with `transformers` (Llama's rotary code, T5's buckets, BLOOM's ALiBi) lives in
tests/interop/test_positional_transformers.py.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.attention import MultiHeadAttention
from course_lib.embeddings import sinusoidal_encoding, sinusoidal_positional_encoding
from course_lib.positional import (
    RotaryMultiHeadAttention,
    ShawRelativeAttention,
    T5RelativeBias,
    TransformerXLRelativeAttention,
    alibi_bias,
    alibi_slopes,
    apply_rope,
    interleaved_to_half,
    relative_positions,
    rope_frequencies,
    rope_rotation_matrix,
    shaw_scores,
    t5_relative_bucket,
)

FAST = settings(max_examples=30, deadline=None)
F64 = torch.float64
TIGHT = {"atol": 1e-10, "rtol": 1e-10}
NOTES_SENTENCE = "somewhere something incredible is waiting to be known"


def _randn(*shape, seed=0, dtype=F64):
    return torch.randn(*shape, dtype=dtype, generator=torch.Generator().manual_seed(seed))


def _n_params(module):
    return sum(p.numel() for p in module.parameters())


# ------------------------------------------------------------------------------------------
# naive references
# ------------------------------------------------------------------------------------------

def _naive_rope_row(x, m, base=10000.0, layout="interleaved"):
    """One (d,) vector at position m: pair i turned by the angle m * base^(-2i/d).

    Interleaved pairs are channels (2i, 2i+1), half-split pairs (i, i + d/2)."""
    d = x.shape[-1]
    out = [0.0] * d
    for i in range(d // 2):
        a_at, b_at = (2 * i, 2 * i + 1) if layout == "interleaved" else (i, i + d // 2)
        angle = m * base ** (-2 * i / d)
        a, b = float(x[a_at]), float(x[b_at])
        out[a_at] = a * math.cos(angle) - b * math.sin(angle)
        out[b_at] = a * math.sin(angle) + b * math.cos(angle)
    return torch.tensor(out, dtype=F64)


def _naive_rope(x, positions=None, base=10000.0, layout="interleaved"):
    """x (..., T, d): every row rotated on its own; positions broadcast to x.shape[:-1]."""
    T = x.shape[-2]
    positions = torch.arange(T) if positions is None else positions
    pos = torch.as_tensor(positions).broadcast_to(x.shape[:-1]).reshape(-1)
    rows = x.detach().reshape(-1, x.shape[-1]).to(F64)
    return torch.stack([_naive_rope_row(r, float(p), base, layout)
                        for r, p in zip(rows, pos, strict=True)]).reshape(x.shape)


def _naive_rotation_matrix(m, d, base=10000.0):
    R = torch.zeros(d, d, dtype=F64)
    for i in range(d // 2):
        c, s = math.cos(m * base ** (-2 * i / d)), math.sin(m * base ** (-2 * i / d))
        R[2 * i, 2 * i], R[2 * i, 2 * i + 1] = c, -s
        R[2 * i + 1, 2 * i], R[2 * i + 1, 2 * i + 1] = s, c
    return R


def _paper_alibi_slopes(n):
    """get_slopes from Press et al.'s repository (attention_with_linear_biases), as published."""
    def get_slopes_power_of_2(n):
        start = 2 ** (-2 ** -(math.log2(n) - 3))
        ratio = start
        return [start * ratio ** i for i in range(n)]

    if math.log2(n).is_integer():
        return get_slopes_power_of_2(n)
    closest_power_of_2 = 2 ** math.floor(math.log2(n))
    return (get_slopes_power_of_2(closest_power_of_2)
            + _paper_alibi_slopes(2 * closest_power_of_2)[0::2][: n - closest_power_of_2])


def _naive_bucket(rel, bidirectional=True, num_buckets=32, max_distance=128):
    """T5's bucket of one relative position rel = j - i, in exact integer arithmetic.

    Bidirectional: keys to the right (rel > 0) use the upper half of the buckets, the rest the
    lower half; causal: all buckets are for the past and future keys share bucket 0. In a half
    of n buckets, a distance d < e = n // 2 is its own bucket; a larger one gets
    e + floor(log(d / e) / log(max_distance / e) * (n - e)), at most n - 1. Since
    floor(L * s) >= b exactly when (d / e)^s >= (max_distance / e)^b, that is compared in
    integers."""
    n, offset = num_buckets, 0
    if bidirectional:
        n //= 2
        offset = n if rel > 0 else 0
        d = abs(rel)
    else:
        d = max(-rel, 0)
    e = n // 2
    if d < e:
        return offset + d
    s = n - e
    b = 0
    while b + 1 < s and d ** s * e ** (b + 1) >= max_distance ** (b + 1) * e ** s:
        b += 1
    return offset + e + b


def _naive_sinusoid(p, d, base=10000.0):
    """[sin(p w_0), cos(p w_0), sin(p w_1), cos(p w_1), ...][:d], w_i = base^(-2i/d)."""
    return torch.tensor([math.sin(p * base ** (-2 * (c // 2) / d)) if c % 2 == 0
                         else math.cos(p * base ** (-2 * (c // 2) / d)) for c in range(d)],
                        dtype=F64)


def _randomize(module, seed=0):
    """float64, eval mode, and every parameter random and non-zero (u, v and the T5 scalars
    start at 0, which would hide a term that is computed wrongly)."""
    module.double().eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(0.5 * torch.randn(p.shape, dtype=F64, generator=g))
    return module


def _linear(x, layer):
    return x @ layer.weight.T + (0 if layer.bias is None else layer.bias)


def _split(y, n_head):
    """(B, T, n_head * d_h) -> (B, n_head, T, d_h): head h gets columns h*d_h : (h+1)*d_h."""
    d_h = y.shape[-1] // n_head
    return torch.stack([y[..., h * d_h:(h + 1) * d_h] for h in range(n_head)], dim=1)


@torch.no_grad()
def _naive_qkv(mha, x):
    return (_split(_linear(x, mha.q_proj), mha.n_head),
            _split(_linear(x, mha.k_proj), mha.n_kv_head),
            _split(_linear(x, mha.v_proj), mha.n_kv_head))


@torch.no_grad()
def _naive_merge(mha, heads):
    """(B, H, T, d_h) -> out_proj(concatenation of the heads)."""
    return _linear(torch.cat(heads.unbind(1), dim=-1), mha.out_proj)


@torch.no_grad()
def _naive_attend(shape, score, value, allowed, added):
    """(out (B, H, Tq, d_v), weights (B, H, Tq, Tk)), one (b, h, i, j) at a time.

    shape = (B, H, H_kv, Tq, Tk); query head h uses KV head g = h // (H / H_kv);
    w[b, h, i, :] = softmax over the keys j with allowed(b, i, j) of score(b, h, g, i, j)
    + added(b, i, j) (0 elsewhere); out[b, h, i] = sum_j w_ij value(b, h, g, i, j)."""
    B, H, H_kv, Tq, Tk = shape
    weights = torch.zeros(B, H, Tq, Tk, dtype=F64)
    out = None
    for b, h, i in itertools.product(range(B), range(H), range(Tq)):
        g = h // (H // H_kv)
        logits = {j: score(b, h, g, i, j) + added(b, i, j) for j in range(Tk) if allowed(b, i, j)}
        top = max(logits.values())
        z = sum(math.exp(s - top) for s in logits.values())
        row = 0.0
        for j, s in logits.items():
            weights[b, h, i, j] = math.exp(s - top) / z
            row = row + weights[b, h, i, j] * value(b, h, g, i, j)
        if out is None:
            out = torch.zeros(B, H, Tq, row.shape[-1], dtype=F64)
        out[b, h, i] = row
    return out, weights


MASKS = ["none", "causal", "key_padding", "float_and_causal"]


def _mask_case(kind, B, Tq, Tk):
    """(mask, is_causal) for the module and (allowed(b, i, j), added(b, i, j)) for the loop."""
    def pos(i):
        return Tk - Tq + i

    def zero(b, i, j):
        return 0.0

    if kind == "none":
        return None, False, lambda b, i, j: True, zero
    if kind == "causal":
        return None, True, lambda b, i, j: j <= pos(i), zero
    if kind == "key_padding":                                # the last batch's first 2 keys
        keep = torch.ones(B, Tk, dtype=torch.bool)
        keep[-1, :2] = False
        return keep[:, None, None, :], False, lambda b, i, j: bool(keep[b, j]), zero
    add = _randn(Tq, Tk, seed=99)
    return add, True, lambda b, i, j: j <= pos(i), lambda b, i, j: float(add[i, j])


def _naive_shaw(mod, q, k, v, allowed, added):
    """e_ij = q_i . (k_j + a^K_ij) / sqrt(d_h), z_i = sum_j alpha_ij (v_j + a^V_ij),
    a_ij = w_clip(j - i, K): row clip(j - i, -K, K) + K of rel_k / rel_v, for every head."""
    (B, H, Tq, d_h), (H_kv, Tk), K = q.shape, k.shape[1:3], mod.max_relative_position

    def a(table, i, j):
        return table[min(max(j - (Tk - Tq + i), -K), K) + K]

    def score(b, h, g, i, j):
        return float(q[b, h, i] @ (k[b, g, j] + a(mod.rel_k, i, j))) / math.sqrt(d_h)

    def value(b, h, g, i, j):
        return v[b, g, j] + a(mod.rel_v, i, j)

    return _naive_attend((B, H, H_kv, Tq, Tk), score, value, allowed, added)


def _naive_txl(mod, q, k, v, allowed, added):
    """A_ij = q_i.k_j + q_i.r_(i-j) + u.k_j + v.r_(i-j) (the paper's terms (a)-(d)), scaled by
    1/sqrt(d_h); r_(i-j) = W_(k,R) R_(i-j), R the sinusoid of n_embd channels."""
    (B, H, Tq, d_h), (H_kv, Tk) = q.shape, k.shape[1:3]
    u, v_bias, W_R = mod.u.detach(), mod.v.detach(), mod.r_proj.weight.detach()
    r = {delta: W_R @ _naive_sinusoid(delta, mod.n_embd, mod.base)
         for delta in range(1 - Tq, Tk)}                      # every i - j that occurs

    def score(b, h, g, i, j):
        r_ij = r[(Tk - Tq + i) - j][h * d_h:(h + 1) * d_h]
        terms = (q[b, h, i] @ k[b, g, j], q[b, h, i] @ r_ij, u[h] @ k[b, g, j], v_bias[h] @ r_ij)
        return float(sum(terms)) / math.sqrt(d_h)

    return _naive_attend((B, H, H_kv, Tq, Tk), score, lambda b, h, g, i, j: v[b, g, j],
                         allowed, added)


# ------------------------------------------------------------------------------------------
# sinusoidal_encoding
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("d", [1, 2, 7, 16])
def test_sinusoidal_encoding_of_arange_is_the_positional_table(d):
    expected = sinusoidal_positional_encoding(12, d, dtype=F64)
    assert torch.equal(sinusoidal_encoding(torch.arange(12), d, dtype=F64), expected)
    assert torch.equal(sinusoidal_encoding(torch.arange(12.0), d), expected.float())


@pytest.mark.parametrize("d", [6, 9])
def test_sinusoidal_encoding_at_any_real_position_is_the_formula(d):
    positions = torch.tensor([[-7.0, -1.5, 0.0], [0.25, 3.0, 1234.0]], dtype=F64)
    pe = sinusoidal_encoding(positions, d, base=100.0, dtype=F64)
    assert pe.shape == (2, 3, d)
    for idx in itertools.product(range(2), range(3)):
        torch.testing.assert_close(pe[idx], _naive_sinusoid(float(positions[idx]), d, 100.0),
                                   **TIGHT, msg=lambda m, idx=idx: f"position {idx}: {m}")


def test_sinusoidal_encoding_at_negative_positions_negates_the_sines_and_keeps_the_cosines():
    p = torch.arange(1, 20)
    pos, neg = sinusoidal_encoding(p, 10, dtype=F64), sinusoidal_encoding(-p, 10, dtype=F64)
    exact = {"atol": 1e-15, "rtol": 0}      # a vectorised sin may differ from -sin in the last bit
    torch.testing.assert_close(neg[:, 0::2], -pos[:, 0::2], **exact, msg="sin(-x) = -sin(x)")
    torch.testing.assert_close(neg[:, 1::2], pos[:, 1::2], **exact, msg="cos(-x) = cos(x)")
    assert (pos[:, 0::2].abs() > 1e-3).any(), "the sines must not all be 0"


# ------------------------------------------------------------------------------------------
# relative_positions
# ------------------------------------------------------------------------------------------

def test_relative_positions_of_the_notes_sentence_are_j_minus_i():
    T = len(NOTES_SENTENCE.split())
    assert T == 8
    rel = relative_positions(T)
    assert rel.dtype == torch.int64
    assert torch.equal(rel, torch.tensor([[j - i for j in range(T)] for i in range(T)]))
    assert rel[0].tolist() == list(range(0, 8))
    assert rel[1].tolist() == list(range(-1, 7))
    assert rel[7].tolist() == list(range(-7, 1))
    assert rel.unique().numel() == 2 * T - 1 == 15


@pytest.mark.parametrize("k", [0, 1, 2, 3, 6, 7, 20])
def test_clipped_relative_positions_keep_2k_plus_1_values(k):
    T = 8
    rel = relative_positions(T, k)
    assert torch.equal(rel, torch.tensor([[min(max(j - i, -k), k) for j in range(T)]
                                          for i in range(T)]))
    assert rel.unique().numel() == min(2 * k + 1, 2 * T - 1)
    if k >= T - 1:
        assert torch.equal(rel, relative_positions(T)), "clipping at k >= T - 1 changes nothing"


@pytest.mark.parametrize("k", [None, 0, 2])
@pytest.mark.parametrize("T", [1, 3, 8])
def test_relative_positions_with_more_keys_are_the_last_rows_of_the_full_matrix(k, T):
    Tk = 8
    rel = relative_positions(T, k, Tk=Tk)
    assert rel.shape == (T, Tk)
    assert torch.equal(rel, relative_positions(Tk, k)[Tk - T:])


# ------------------------------------------------------------------------------------------
# RoPE: apply_rope, the rotation matrix, the layouts
# ------------------------------------------------------------------------------------------

def test_rope_frequencies_are_base_to_the_minus_2i_over_d():
    torch.testing.assert_close(rope_frequencies(8), torch.tensor([1.0, 0.1, 0.01, 0.001], dtype=F64),
                               atol=0, rtol=1e-14)
    torch.testing.assert_close(rope_frequencies(4, base=16.0), torch.tensor([1.0, 0.25], dtype=F64),
                               atol=0, rtol=1e-14)


@pytest.mark.parametrize("shape", [(5, 8), (3, 5, 8), (2, 3, 5, 4), (2, 1, 3, 4, 6)])
@pytest.mark.parametrize("layout", ["interleaved", "half"])
@pytest.mark.parametrize("base", [10000.0, 50.0])
def test_apply_rope_rotates_every_pair_of_every_row_for_any_leading_dims(shape, layout, base):
    x = _randn(*shape, seed=len(shape))
    out = apply_rope(x, base=base, layout=layout)
    assert out.shape == x.shape
    assert out.dtype == x.dtype
    torch.testing.assert_close(out, _naive_rope(x, None, base, layout), **TIGHT)


@pytest.mark.parametrize("layout", ["interleaved", "half"])
def test_apply_rope_at_explicit_integer_and_fractional_positions(layout):
    x = _randn(2, 3, 5, 6, seed=3)
    for positions in (torch.tensor([4, 0, 9, 2, 100]), torch.tensor([0.5, -3.0, 2.25, 7.0, 1e3]),
                      torch.tensor([[[3, 4, 5, 6, 7]], [[90, 91, 92, 93, 94]]])):   # (B, 1, T)
        torch.testing.assert_close(apply_rope(x, positions, layout=layout),
                                   _naive_rope(x, positions, layout=layout), **TIGHT)


def test_rope_rotation_matrix_is_block_diagonal_2x2_rotations():
    for m in (0, 1, 5, -3, 2.5):
        torch.testing.assert_close(rope_rotation_matrix(m, 8), _naive_rotation_matrix(m, 8),
                                   **TIGHT)
    assert torch.equal(rope_rotation_matrix(0, 6), torch.eye(6, dtype=F64))
    assert rope_rotation_matrix(3, 6, dtype=torch.float32).dtype == torch.float32


def test_apply_rope_equals_R_m_times_x_at_every_position():
    T, d = 7, 8
    x = _randn(T, d, seed=4)
    out = apply_rope(x)
    for m in range(T):
        torch.testing.assert_close(out[m], rope_rotation_matrix(m, d) @ x[m], **TIGHT,
                                   msg=lambda msg, m=m: f"position {m}: {msg}")


def test_rotation_matrices_are_orthogonal_and_compose_to_the_difference():
    d = 8
    for m, n in [(0, 3), (2, 9), (7, 4), (100, 37)]:
        Rm, Rn = rope_rotation_matrix(m, d), rope_rotation_matrix(n, d)
        torch.testing.assert_close(Rm.T @ Rm, torch.eye(d, dtype=F64), **TIGHT)
        torch.testing.assert_close(Rm.T @ Rn, rope_rotation_matrix(n - m, d), atol=1e-9, rtol=0)


@FAST
@given(st.lists(st.integers(-5000, 5000), min_size=1, max_size=6), st.integers(-10_000, 10_000))
def test_rope_scores_depend_only_on_the_offset_n_minus_m(positions, shift):
    d = 8
    p = torch.tensor(positions)
    q, k = _randn(len(positions), d, seed=5), _randn(len(positions), d, seed=6)
    scores = apply_rope(q, p) @ apply_rope(k, p).T
    shifted = apply_rope(q, p + shift) @ apply_rope(k, p + shift).T
    torch.testing.assert_close(shifted, scores, atol=1e-8, rtol=0)
    # q_m . k_n = q^T R_(n-m) k
    m, n = positions[0], positions[-1]
    expected = q[0] @ rope_rotation_matrix(n - m, d) @ k[-1]
    torch.testing.assert_close(scores[0, -1], expected, atol=1e-8, rtol=0)


@pytest.mark.parametrize("layout", ["interleaved", "half"])
def test_rope_preserves_the_norm_of_every_pair_and_of_the_vector(layout):
    x = _randn(3, 11, 10, seed=7)
    out = apply_rope(x, torch.arange(50, 61), layout=layout)
    pairs = (lambda t: torch.stack([t[..., 0::2], t[..., 1::2]], -1)) if layout == "interleaved" \
        else (lambda t: torch.stack([t[..., :5], t[..., 5:]], -1))
    torch.testing.assert_close(pairs(out).norm(dim=-1), pairs(x).norm(dim=-1), **TIGHT)
    torch.testing.assert_close(out.norm(dim=-1), x.norm(dim=-1), **TIGHT)
    assert not torch.allclose(out, x), "positions 50 ... 60 must rotate x"


def test_rope_with_positions_none_is_arange_and_position_zero_is_the_identity():
    x = _randn(2, 6, 8, seed=8)
    assert torch.equal(apply_rope(x), apply_rope(x, torch.arange(6)))
    assert torch.equal(apply_rope(x, torch.zeros(6, dtype=torch.long)), x)
    assert torch.equal(apply_rope(x[:, :1]), x[:, :1])


@FAST
@given(st.integers(1, 12), st.data())
def test_rope_of_a_suffix_at_its_positions_is_the_suffix_of_the_full_result(T, data):
    """KV cache: rotating only the new tokens, at positions p ... T-1, matches the full pass."""
    p = data.draw(st.integers(0, T - 1))
    x = _randn(2, 3, T, 8, seed=T)
    for layout in ("interleaved", "half"):
        torch.testing.assert_close(apply_rope(x[..., p:, :], torch.arange(p, T), layout=layout),
                                   apply_rope(x, layout=layout)[..., p:, :], **TIGHT)


@pytest.mark.parametrize("start", [10_000, 1_000_000, 50_000_000])
@pytest.mark.parametrize("layout", ["interleaved", "half"])
def test_rope_in_float32_at_large_positions_stays_close_to_float64(start, layout):
    x = _randn(4, 16, seed=9)
    positions = torch.arange(start, start + 4)
    out32 = apply_rope(x.float(), positions, layout=layout)
    assert out32.dtype == torch.float32
    torch.testing.assert_close(out32, apply_rope(x, positions, layout=layout).float(),
                               atol=2e-6, rtol=1e-5)
    torch.testing.assert_close(apply_rope(x, positions, layout=layout),
                               _naive_rope(x, positions, layout=layout), atol=1e-7, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_apply_rope_returns_x_dtype(dtype):
    assert apply_rope(_randn(3, 4, dtype=dtype)).dtype == dtype


def test_interleaved_to_half_is_evens_then_odds():
    assert interleaved_to_half(8).tolist() == [0, 2, 4, 6, 1, 3, 5, 7]
    assert interleaved_to_half(2).tolist() == [0, 1]


@pytest.mark.parametrize("d", [2, 6, 16])
def test_half_layout_is_the_interleaved_rotation_on_permuted_channels(d):
    x = _randn(2, 9, d, seed=d)
    positions = torch.tensor([0, 3, 1, 8, 20, 5, 6, 700, 2])
    p = interleaved_to_half(d)
    torch.testing.assert_close(apply_rope(x[..., p], positions, layout="half"),
                               apply_rope(x, positions)[..., p], **TIGHT)
    inverse = torch.argsort(p)
    torch.testing.assert_close(apply_rope(x, positions, layout="half")[..., inverse],
                               apply_rope(x[..., inverse], positions), **TIGHT)
    if d > 2:
        assert not torch.allclose(apply_rope(x, positions, layout="half"), apply_rope(x, positions)), \
            "the two layouts pair different channels"


# ------------------------------------------------------------------------------------------
# RotaryMultiHeadAttention
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n_kv_head", [None, 1])
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize(("offset", "base"), [(0, 10000.0), (37, 100.0)])
def test_rotary_mha_is_mha_with_q_and_k_rotated_per_head(n_kv_head, is_causal, need_weights,
                                                          offset, base):
    mod = _randomize(RotaryMultiHeadAttention(16, 4, n_kv_head, base=base), seed=10)
    x = _randn(2, 5, 16, seed=11)
    positions = torch.arange(offset, offset + 5)
    out, weights = mod(x, is_causal=is_causal, need_weights=need_weights,
                       positions=None if offset == 0 else positions)
    q, k, v = _naive_qkv(mod, x)
    q, k = _naive_rope(q, positions, base), _naive_rope(k, positions, base)

    def score(b, h, g, i, j):
        return float(q[b, h, i] @ k[b, g, j]) / math.sqrt(mod.head_size)

    ref, ref_w = _naive_attend((2, 4, mod.n_kv_head, 5, 5), score,
                               lambda b, h, g, i, j: v[b, g, j],
                               (lambda b, i, j: j <= i) if is_causal else (lambda b, i, j: True),
                               lambda b, i, j: 0.0)
    torch.testing.assert_close(out, _naive_merge(mod, ref), **TIGHT)
    if need_weights:
        torch.testing.assert_close(weights, ref_w, **TIGHT)
    else:
        assert weights is None


@pytest.mark.parametrize("shift", [1, 1000, 123_456])
def test_rotary_mha_outputs_do_not_change_when_every_position_shifts(shift):
    mod = _randomize(RotaryMultiHeadAttention(16, 2), seed=12)
    x = _randn(2, 6, 16, seed=13)
    out, w = mod(x, is_causal=True, need_weights=True)
    out_s, w_s = mod(x, is_causal=True, need_weights=True, positions=torch.arange(6) + shift)
    torch.testing.assert_close(out_s, out, atol=1e-9, rtol=0)
    torch.testing.assert_close(w_s, w, atol=1e-9, rtol=0)
    # per-sequence positions (B, T): a different shift for each sequence changes nothing
    per_seq = torch.stack([torch.arange(6), torch.arange(6) + shift])
    torch.testing.assert_close(mod(x, is_causal=True, positions=per_seq)[0], out, atol=1e-9, rtol=0)


def test_rotary_mha_depends_on_the_positions_it_is_given():
    mod = _randomize(RotaryMultiHeadAttention(16, 2), seed=14)
    x = _randn(1, 6, 16, seed=15)
    out = mod(x)[0]
    permuted = mod(x, positions=torch.tensor([5, 4, 3, 2, 1, 0]))[0]
    assert not torch.allclose(out, permuted), "positions are not only an offset here: outputs differ"


@pytest.mark.parametrize("n_head", [4, 2])
def test_rotary_mha_takes_one_row_of_positions_per_sequence(n_head):
    """(B, T) positions, like transformers' position_ids, give each sequence its own row, also
    when B == n_head (they must not be broadcast against the heads of q (B, H, T, d_h))."""
    torch.manual_seed(0)
    mod = RotaryMultiHeadAttention(16, n_head).double()
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    positions = torch.stack([torch.arange(5), torch.arange(7, 12)])          # (B, T) = (2, 5)
    out, _ = mod(x, positions=positions, is_causal=True)
    for b in range(2):
        alone, _ = mod(x[b:b + 1], positions=positions[b], is_causal=True)
        torch.testing.assert_close(out[b:b + 1], alone, rtol=1e-12, atol=1e-12)


def test_rotary_mha_rejects_positions_of_another_shape():
    mod = RotaryMultiHeadAttention(16, 2)
    with pytest.raises(ValueError, match=r"positions of shape \(2, 4\)"):
        mod(torch.zeros(2, 5, 16), positions=torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(ValueError, match=r"positions of shape \(1, 2, 5\)"):
        mod(torch.zeros(2, 5, 16), positions=torch.zeros(1, 2, 5, dtype=torch.long))


# ------------------------------------------------------------------------------------------
# ALiBi
# ------------------------------------------------------------------------------------------

def test_alibi_slopes_for_8_heads_are_one_half_to_one_over_256():
    assert alibi_slopes(8).tolist() == [1 / 2 ** (h + 1) for h in range(8)]
    assert alibi_slopes(8).dtype == torch.float32
    torch.testing.assert_close(alibi_slopes(16),
                               torch.tensor([2 ** (-0.5 * (h + 1)) for h in range(16)]),
                               atol=0, rtol=1e-6)


def test_alibi_slopes_for_6_heads_take_4_then_every_other_of_8():
    assert alibi_slopes(6).tolist() == [1 / 4, 1 / 16, 1 / 64, 1 / 256, 1 / 2, 1 / 8]


@pytest.mark.parametrize("n", range(1, 65))
def test_alibi_slopes_match_the_papers_get_slopes(n):
    expected = torch.tensor(_paper_alibi_slopes(n), dtype=torch.float32)
    torch.testing.assert_close(alibi_slopes(n), expected, atol=0, rtol=1e-6)


@pytest.mark.parametrize(("n_head", "T", "Tk"), [(1, 1, None), (4, 6, None), (3, 5, 5),
                                                  (8, 2, 7), (5, 1, 9)])
def test_alibi_bias_is_minus_slope_times_distance(n_head, T, Tk):
    bias = alibi_bias(n_head, T, Tk=Tk)
    Tk = T if Tk is None else Tk
    m = _paper_alibi_slopes(n_head)
    assert bias.shape == (n_head, T, Tk)
    assert bias.dtype == torch.float32
    expected = torch.tensor([[[-m[h] * abs((Tk - T + i) - j) for j in range(Tk)]
                              for i in range(T)] for h in range(n_head)])
    torch.testing.assert_close(bias, expected, atol=0, rtol=1e-6)


def test_alibi_bias_on_the_diagonal_is_plus_zero_not_minus_zero():
    bias = alibi_bias(3, 5, Tk=7)
    zeros = bias == 0
    assert zeros.sum() == 3 * 5, "one zero per row, at j = i"
    assert not torch.signbit(bias[zeros]).any(), "-m_h * 0 must print as 0, not -0"


def test_alibi_bias_for_the_last_queries_is_the_last_rows_of_the_full_bias():
    full = alibi_bias(4, 10)
    for T in (1, 3, 10):
        assert torch.equal(alibi_bias(4, T, Tk=10), full[:, 10 - T:])


# ------------------------------------------------------------------------------------------
# T5 buckets and bias
# ------------------------------------------------------------------------------------------

def test_t5_buckets_written_out_for_the_default_32_buckets_and_max_distance_128():
    rel = torch.tensor([-7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7])
    assert t5_relative_bucket(rel).tolist() == [7, 6, 5, 4, 3, 2, 1, 0, 17, 18, 19, 20, 21, 22, 23]
    # log buckets: 8 + floor(8 log(d / 8) / log 16); everything from 128 on shares the last one
    far = torch.tensor([-8, -16, -32, -127, -128, -5000, 8, 16, 128, 5000])
    assert t5_relative_bucket(far).tolist() == [8, 10, 12, 15, 15, 15, 24, 26, 31, 31]
    # causal: all 32 buckets for the past (16 exact, then 16 + floor(16 log(d / 16) / log 8)),
    # the future shares bucket 0
    causal = torch.tensor([3, 1, 0, -1, -15, -16, -32, -128, -9999])
    assert t5_relative_bucket(causal, bidirectional=False).tolist() == [0, 0, 0, 1, 15, 16, 21,
                                                                        31, 31]


@pytest.mark.parametrize(("num_buckets", "max_distance"), [(32, 128), (8, 16), (10, 20),
                                                           (33, 100), (4, 5), (64, 256)])
@pytest.mark.parametrize("bidirectional", [True, False])
def test_t5_buckets_match_the_definition_in_exact_arithmetic(num_buckets, max_distance,
                                                             bidirectional):
    rel = torch.cat([torch.arange(-300, 301), torch.tensor([-10**6, -4097, 4097, 10**6])])
    got = t5_relative_bucket(rel, bidirectional, num_buckets, max_distance)
    assert got.dtype == torch.int64
    expected = [_naive_bucket(r, bidirectional, num_buckets, max_distance) for r in rel.tolist()]
    wrong = [(r, g, e) for r, g, e in zip(rel.tolist(), got.tolist(), expected, strict=True) if g != e]
    assert not wrong, f"(j - i, got, expected) where the buckets differ: {wrong[:8]}"
    assert got.min() >= 0
    assert got.max() < num_buckets


def test_t5_buckets_keep_the_shape_and_accept_any_integer_dtype():
    rel = relative_positions(5, Tk=9)
    expected = t5_relative_bucket(rel.flatten()).reshape(5, 9)
    assert torch.equal(t5_relative_bucket(rel), expected)
    assert torch.equal(t5_relative_bucket(rel.int()), expected)


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize(("Tq", "Tk"), [(6, 6), (1, 9), (4, 11)])
def test_t5_bias_is_one_scalar_per_bucket_and_head(bidirectional, Tq, Tk):
    bias_mod = _randomize(T5RelativeBias(3, bidirectional=bidirectional, num_buckets=8,
                                         max_distance=16), seed=16)
    W = bias_mod.relative_attention_bias.weight.detach()               # (num_buckets, n_head)
    bias = bias_mod(Tq, Tk)
    assert bias.shape == (3, Tq, Tk)
    expected = torch.tensor([[[W[_naive_bucket(j - (Tk - Tq + i), bidirectional, 8, 16), h]
                               for j in range(Tk)] for i in range(Tq)] for h in range(3)],
                            dtype=F64)
    torch.testing.assert_close(bias, expected, atol=0, rtol=0)
    assert torch.equal(bias, bias_mod(Tk)[:, Tk - Tq:]), "queries are the last Tq positions"


def test_t5_bias_starts_at_zero_and_has_num_buckets_times_n_heads_parameters():
    bias_mod = T5RelativeBias(4, num_buckets=32, max_distance=128)
    assert _n_params(bias_mod) == 32 * 4
    assert _n_params(T5RelativeBias(6, bidirectional=False, num_buckets=10)) == 10 * 6
    assert torch.equal(bias_mod(5), torch.zeros(4, 5, 5))


@pytest.mark.parametrize(("bidirectional", "is_causal"), [(False, True), (True, False),
                                                          (True, True)])
@pytest.mark.parametrize("need_weights", [True, False])
def test_t5_bias_as_the_float_mask_of_mha_equals_the_naive_loop(bidirectional, is_causal,
                                                                need_weights):
    T, H = 10, 4
    mha = _randomize(MultiHeadAttention(16, H), seed=17)
    bias_mod = _randomize(T5RelativeBias(H, bidirectional=bidirectional, num_buckets=8,
                                         max_distance=16), seed=18)
    W = bias_mod.relative_attention_bias.weight.detach()
    x = _randn(2, T, 16, seed=19)
    out, weights = mha(x, mask=bias_mod(T), is_causal=is_causal, need_weights=need_weights)
    q, k, v = _naive_qkv(mha, x)

    def score(b, h, g, i, j):
        bucket = _naive_bucket(j - i, bidirectional, 8, 16)
        return float(q[b, h, i] @ k[b, g, j]) / math.sqrt(mha.head_size) + float(W[bucket, h])

    ref, ref_w = _naive_attend((2, H, H, T, T), score, lambda b, h, g, i, j: v[b, g, j],
                               (lambda b, i, j: j <= i) if is_causal else (lambda b, i, j: True),
                               lambda b, i, j: 0.0)
    torch.testing.assert_close(out, _naive_merge(mha, ref), **TIGHT)
    if need_weights:
        torch.testing.assert_close(weights, ref_w, **TIGHT)


def test_t5_bias_gradient_reaches_exactly_the_buckets_in_use():
    T, H = 6, 2
    mha = _randomize(MultiHeadAttention(8, H), seed=20)
    bias_mod = _randomize(T5RelativeBias(H, bidirectional=False, num_buckets=16,
                                         max_distance=64), seed=21)
    out, _ = mha(_randn(1, T, 8, seed=22), mask=bias_mod(T), is_causal=True)
    (out * _randn(*out.shape, seed=23)).sum().backward()
    grad = bias_mod.relative_attention_bias.weight.grad
    assert grad is not None
    used = set(t5_relative_bucket(relative_positions(T), False, 16, 64).flatten().tolist())
    assert used == {0, 1, 2, 3, 4, 5}
    for bucket in range(16):
        if bucket in used - {0}:     # bucket 0 holds the diagonal and the (masked) future
            assert (grad[bucket] != 0).all(), f"bucket {bucket} is used but got no gradient"
        elif bucket not in used:
            assert (grad[bucket] == 0).all(), f"bucket {bucket} is unused but got a gradient"


# ------------------------------------------------------------------------------------------
# Shaw and Transformer-XL relative attention
# ------------------------------------------------------------------------------------------

RELATIVE = {
    "shaw": (lambda n_kv: ShawRelativeAttention(16, 4, 2, n_kv), _naive_shaw),
    "txl": (lambda n_kv: TransformerXLRelativeAttention(16, 4, n_kv, base=500.0), _naive_txl),
}


@pytest.mark.parametrize("kind", sorted(RELATIVE))
@pytest.mark.parametrize("n_kv_head", [None, 2])
@pytest.mark.parametrize("mask_kind", MASKS)
@pytest.mark.parametrize("need_weights", [True, False])
def test_relative_attention_forward_equals_the_naive_loop(kind, n_kv_head, mask_kind,
                                                          need_weights):
    make, naive = RELATIVE[kind]
    mod = _randomize(make(n_kv_head), seed=24)
    B, T = 2, 6                                  # Shaw clips at k = 2 < T - 1
    x = _randn(B, T, 16, seed=25)
    mask, is_causal, allowed, added = _mask_case(mask_kind, B, T, T)
    out, weights = mod(x, mask=mask, is_causal=is_causal, need_weights=need_weights)
    ref, ref_w = naive(mod, *_naive_qkv(mod, x), allowed, added)
    torch.testing.assert_close(out, _naive_merge(mod, ref), **TIGHT)
    if need_weights:
        torch.testing.assert_close(weights, ref_w, **TIGHT)
    else:
        assert weights is None


@pytest.mark.parametrize("K", [0, 1, 3, 9])
@pytest.mark.parametrize(("Tq", "Tk"), [(6, 6), (2, 8), (1, 5)])
def test_shaw_scores_are_q_dot_k_plus_the_relative_key_over_sqrt_d(K, Tq, Tk):
    q, k, rel_k = _randn(2, 3, Tq, 4, seed=40), _randn(2, 3, Tk, 4, seed=41), _randn(2 * K + 1, 4,
                                                                                    seed=42)
    scores = shaw_scores(q, k, rel_k, K)
    assert scores.shape == (2, 3, Tq, Tk)
    expected = torch.tensor([[[[float(q[b, h, i] @ (k[b, h, j] + rel_k[min(max(j - (Tk - Tq + i),
                                                                               -K), K) + K])) / 2
                                for j in range(Tk)] for i in range(Tq)] for h in range(3)]
                             for b in range(2)], dtype=F64)
    torch.testing.assert_close(scores, expected, **TIGHT)


@pytest.mark.parametrize("kind", sorted(RELATIVE))
@pytest.mark.parametrize("Tq", [1, 3])
@pytest.mark.parametrize("mask_kind", ["none", "causal", "float_and_causal"])
@pytest.mark.parametrize("need_weights", [True, False])
def test_relative_attend_with_fewer_queries_puts_them_at_the_last_positions(kind, Tq, mask_kind,
                                                                            need_weights):
    make, naive = RELATIVE[kind]
    mod = _randomize(make(2), seed=26)
    Tk = 7
    q, k, v = _naive_qkv(mod, _randn(2, Tk, 16, seed=27))
    mask, is_causal, allowed, added = _mask_case(mask_kind, 2, Tq, Tk)
    out, weights = mod.attend(q[:, :, Tk - Tq:], k, v, mask=mask, is_causal=is_causal,
                              need_weights=need_weights)
    ref, ref_w = naive(mod, q[:, :, Tk - Tq:], k, v, allowed, added)
    torch.testing.assert_close(out, ref, **TIGHT)
    if need_weights:
        torch.testing.assert_close(weights, ref_w, **TIGHT)
    if mask_kind != "float_and_causal":          # that mask is drawn for (Tq, Tk) only
        full, _ = mod.attend(q, k, v, is_causal=is_causal)
        torch.testing.assert_close(out, full[:, :, Tk - Tq:], **TIGHT)


@pytest.mark.parametrize("kind", sorted(RELATIVE))
@pytest.mark.parametrize("need_weights", [True, False])
def test_a_fully_masked_query_gets_a_zero_head_output_like_mha(kind, need_weights):
    """Left padding with a causal mask: queries 0 and 1 see no key at all. Like
    MultiHeadAttention, their attention output is 0 (so out = out_proj's bias), never NaN."""
    mod = _randomize(RELATIVE[kind][0](None), seed=35)
    keep = torch.tensor([[False, False, True, True, True]])[:, None, None, :]
    out, weights = mod(_randn(1, 5, 16, seed=36), mask=keep, is_causal=True,
                       need_weights=need_weights)
    assert not out.isnan().any()
    torch.testing.assert_close(out[0, :2], mod.out_proj.bias.detach().expand(2, 16), **TIGHT)
    if need_weights:
        assert (weights[0, :, :2] == 0).all()


def test_shaw_adds_2_times_2k_plus_1_times_d_head_parameters_shared_by_the_heads():
    for n_embd, n_head, n_kv_head, k in [(32, 4, None, 3), (32, 4, 2, 0), (24, 3, 1, 16)]:
        shaw = ShawRelativeAttention(n_embd, n_head, k, n_kv_head)
        head_size = n_embd // n_head
        assert shaw.rel_k.shape == shaw.rel_v.shape == (2 * k + 1, head_size)
        extra = _n_params(shaw) - _n_params(MultiHeadAttention(n_embd, n_head, n_kv_head))
        assert extra == 2 * (2 * k + 1) * head_size, (n_embd, n_head, k, extra)


def test_each_shaw_layer_has_its_own_tables():
    a, b = ShawRelativeAttention(16, 2, 3), ShawRelativeAttention(16, 2, 3)
    assert a.rel_k is not b.rel_k
    assert a.rel_v is not b.rel_v
    assert {"rel_k", "rel_v"} <= {name for name, _ in a.named_parameters()}


def test_shaw_with_zero_tables_is_plain_mha():
    shaw = _randomize(ShawRelativeAttention(16, 4, 2), seed=28)
    with torch.no_grad():
        shaw.rel_k.zero_()
        shaw.rel_v.zero_()
    mha = MultiHeadAttention(16, 4).double()
    mha.load_state_dict({n: p for n, p in shaw.state_dict().items() if not n.startswith("rel_")})
    x = _randn(2, 6, 16, seed=29)
    torch.testing.assert_close(shaw(x, is_causal=True)[0], mha(x, is_causal=True)[0], **TIGHT)


def test_txl_with_zero_u_v_and_r_proj_is_plain_mha_and_its_parameters_are_r_proj_u_v():
    txl = _randomize(TransformerXLRelativeAttention(16, 4), seed=30)
    extra = {"u", "v", "r_proj.weight"}
    assert {n for n, _ in txl.named_parameters()} - set(MultiHeadAttention(16, 4).state_dict()) \
        == extra
    assert txl.u.shape == txl.v.shape == (4, 4)
    assert txl.r_proj.weight.shape == (16, 16)
    assert _n_params(txl) - _n_params(MultiHeadAttention(16, 4)) == 16 * 16 + 2 * 16
    with torch.no_grad():
        for name in extra:
            txl.get_parameter(name).zero_()
    mha = MultiHeadAttention(16, 4).double()
    mha.load_state_dict({n: p for n, p in txl.state_dict().items() if n not in extra})
    x = _randn(2, 6, 16, seed=31)
    torch.testing.assert_close(txl(x, is_causal=True)[0], mha(x, is_causal=True)[0], **TIGHT)


@pytest.mark.parametrize(("kind", "names"), [("shaw", ["rel_k", "rel_v"]),
                                             ("txl", ["u", "v", "r_proj.weight"])])
@pytest.mark.parametrize("need_weights", [True, False])
def test_gradients_reach_the_relative_position_parameters(kind, names, need_weights):
    mod = _randomize(RELATIVE[kind][0](2), seed=32)
    out, _ = mod(_randn(2, 6, 16, seed=33), is_causal=True, need_weights=need_weights)
    (out * _randn(*out.shape, seed=34)).sum().backward()
    for name in names + ["q_proj.weight", "k_proj.weight"]:
        grad = mod.get_parameter(name).grad
        assert grad is not None, f"{name} got no gradient"
        assert grad.abs().sum() > 0, f"{name} got a zero gradient"
    if kind == "shaw":      # T = 6 > k = 2; causal: rows of -2 ... 0 are used, +1 and +2 not
        for name in ("rel_k", "rel_v"):
            per_row = mod.get_parameter(name).grad.abs().sum(-1)
            assert (per_row[:3] > 0).all(), f"{name}: rows of distances -2 ... 0 unused: {per_row}"
            assert (per_row[3:] == 0).all(), f"{name}: rows of masked distances used: {per_row}"


# ------------------------------------------------------------------------------------------
# clear errors
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("make", [
    lambda: apply_rope(torch.zeros(4, 5)),
    lambda: apply_rope(torch.zeros(4, 0)),
    lambda: rope_frequencies(7),
    lambda: rope_rotation_matrix(1, 3),
    lambda: interleaved_to_half(5),
    lambda: RotaryMultiHeadAttention(12, 4),                 # head_size = 3
], ids=["apply_rope", "apply_rope_d0", "frequencies", "rotation_matrix", "interleaved_to_half",
        "rotary_mha"])
def test_rope_rejects_an_odd_head_dim(make):
    with pytest.raises(ValueError, match=r"head dim must be a positive even integer"):
        make()


@pytest.mark.parametrize(("positions", "error", "match"), [
    (torch.arange(3), ValueError, r"positions of shape \(3,\) do not match x"),
    (torch.arange(6)[None], ValueError, r"positions of shape \(1, 6\) do not match x"),
    (torch.zeros(3, 1, 5, dtype=torch.long), ValueError, r"positions of shape \(3, 1, 5\)"),
    (torch.zeros(2, 5, dtype=torch.long), ValueError, r"positions of shape \(2, 5\)"),
    (torch.ones(5, dtype=torch.bool), TypeError, r"positions must be integer or floating, got "
                                                 r"torch.bool"),
    (3, TypeError, r"positions must be a tensor of T=5 positions, got the int 3"),
    ([0, 1, 2, 3, 4], TypeError, r"positions must be a torch.Tensor, got list"),
])
def test_apply_rope_rejects_positions_that_do_not_fit_x(positions, error, match):
    x = torch.zeros(2, 3, 5, 4)                              # (B, H, T, d)
    with pytest.raises(error, match=match):
        apply_rope(x, positions)


@pytest.mark.parametrize("make", [lambda: apply_rope(torch.zeros(3, 4), base=1.0),
                                  lambda: rope_frequencies(8, base=float("inf")),
                                  lambda: RotaryMultiHeadAttention(16, 2, base=0.5)],
                         ids=["apply_rope", "frequencies", "rotary_mha"])
def test_rope_rejects_a_base_that_is_not_above_one(make):
    with pytest.raises(ValueError, match=r"base must be a finite number > 1"):
        make()


def test_apply_rope_rejects_an_unknown_layout_and_a_vector():
    with pytest.raises(ValueError, match=r"layout must be one of \('interleaved', 'half'\), got "
                                         r"'neox'"):
        apply_rope(torch.zeros(3, 4), layout="neox")
    with pytest.raises(ValueError, match=r"x must be a tensor of shape \(\.\.\., T, d\), got \(4,\)"):
        apply_rope(torch.zeros(4))


@pytest.mark.parametrize("make", [
    lambda: relative_positions(5, -1),
    lambda: relative_positions(5, 1.5),
    lambda: ShawRelativeAttention(16, 2, -2),
], ids=["relative_positions", "relative_positions_float", "shaw"])
def test_a_negative_or_fractional_clipping_distance_is_rejected(make):
    with pytest.raises(ValueError, match=r"clipping distance k must be an integer >= 0"):
        make()


@pytest.mark.parametrize(("rel_k", "K", "match"), [
    (torch.zeros(5, 4), 1, r"rel_k must have shape \(2 \* max_relative_position \+ 1, d\) = \(3, 4\), "
                           r"got \(5, 4\)"),
    (torch.zeros(3, 8), 1, r"= \(3, 4\), got \(3, 8\)"),
    (torch.zeros(3), 1, r"got \(3,\)"),
    (torch.zeros(3, 4), -1, r"clipping distance k must be an integer >= 0"),
])
def test_shaw_scores_reject_a_table_that_does_not_fit(rel_k, K, match):
    q = torch.zeros(5, 4)
    with pytest.raises(ValueError, match=match):
        shaw_scores(q, q, rel_k, K)


def test_relative_positions_rejects_fewer_keys_than_queries():
    with pytest.raises(ValueError, match=r"Tk=3 < T=5"):
        relative_positions(5, Tk=3)
    with pytest.raises(ValueError, match=r"Tk=3 < T=5"):
        alibi_bias(2, 5, Tk=3)


@pytest.mark.parametrize(("make", "match"), [
    (lambda: alibi_slopes(0), r"n_head must be a positive integer, got 0"),
    (lambda: alibi_bias(0, 4), r"n_head must be a positive integer, got 0"),
    (lambda: alibi_slopes(True), r"n_head must be a positive integer, got True"),
    (lambda: T5RelativeBias(0), r"n_head must be a positive integer, got 0"),
    (lambda: ShawRelativeAttention(16, 0, 2), r"not divisible by n_head=0"),
    (lambda: TransformerXLRelativeAttention(16, 0), r"not divisible by n_head=0"),
    (lambda: RotaryMultiHeadAttention(16, 0), r"not divisible by n_head=0"),
], ids=["alibi_slopes", "alibi_bias", "alibi_bool", "t5_bias", "shaw", "txl", "rotary"])
def test_zero_heads_are_rejected(make, match):
    with pytest.raises(ValueError, match=match):
        make()


@pytest.mark.parametrize(("bidirectional", "num_buckets", "max_distance", "match"), [
    (True, 3, 128, r"num_buckets=3 and max_distance=128 leave no room for log-spaced buckets: "
                   r"need num_buckets >= 4"),
    (True, 2, 128, r"need num_buckets >= 4"),
    (False, 1, 128, r"num_buckets=1 .* need num_buckets >= 2"),
    (True, 32, 8, r"max_distance=8 leave no room .* max_distance > 8"),
    (False, 32, 16, r"max_distance > 16"),
])
def test_too_few_buckets_or_too_short_a_max_distance_are_rejected(bidirectional, num_buckets,
                                                                  max_distance, match):
    with pytest.raises(ValueError, match=match):
        t5_relative_bucket(torch.arange(3), bidirectional, num_buckets, max_distance)
    with pytest.raises(ValueError, match=match):
        T5RelativeBias(2, bidirectional=bidirectional, num_buckets=num_buckets,
                       max_distance=max_distance)


@pytest.mark.parametrize(("rel", "match"), [
    (torch.tensor([1.0, -2.0]), r"relative_position must be an integer tensor \(j - i\), got "
                                r"torch.float32"),
    (torch.tensor([True]), r"got torch.bool"),
    ([1, 2], r"relative_position must be a tensor of integers j - i, got list"),
])
def test_t5_buckets_reject_relative_positions_that_are_not_integer_tensors(rel, match):
    with pytest.raises(TypeError, match=match):
        t5_relative_bucket(rel)


def test_t5_bias_takes_lengths_not_a_tensor():
    with pytest.raises(TypeError, match=r"takes sequence lengths \(Tq, Tk\), not a tensor"):
        T5RelativeBias(2)(torch.zeros(1, 5, 8))


@pytest.mark.parametrize("make", [lambda: ShawRelativeAttention(16, 2, 2),
                                  lambda: TransformerXLRelativeAttention(16, 2),
                                  lambda: RotaryMultiHeadAttention(16, 2)],
                         ids=["shaw", "txl", "rotary"])
def test_self_attention_only_modules_reject_kv(make):
    mod = make()
    x = torch.zeros(1, 4, 16)
    with pytest.raises(ValueError, match=r"is self-attention only.*call it with kv=None"):
        mod(x, kv=x)


def test_sinusoidal_encoding_rejects_bool_and_non_tensor_positions():
    with pytest.raises(TypeError, match=r"positions must be integer or floating, got torch.bool"):
        sinusoidal_encoding(torch.tensor([True, False]), 4)
    with pytest.raises(TypeError, match=r"positions must be a torch.Tensor, got list"):
        sinusoidal_encoding([0, 1], 4)
