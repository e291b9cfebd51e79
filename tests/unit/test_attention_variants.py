"""Spec of lesson 04's attention variants: pattern masks, local and block attention computed
without the T x T matrix, Linformer, the KV-cache size, and course_lib.profiling.record_memory.

References are the definitions written out by hand: each mask is a Python double loop over
(i, j) taken from the docstring of course_lib/attention/patterns.py, and the sparse functions
are checked against dense attention under the same mask. Parity with PyTorch's SDPA and
FlexAttention lives in tests/interop/test_attention_variants_torch.py.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.attention import (
    LinformerAttention,
    MultiHeadAttention,
    block_attention,
    block_mask,
    causal_mask,
    dilated_mask,
    global_local_mask,
    kv_cache_bytes,
    linformer_attention,
    local_attention,
    local_mask,
    random_local_global_mask,
    scaled_dot_product_attention,
)
from course_lib.profiling import record_memory

FAST = settings(max_examples=40, deadline=None)
F64 = torch.float64
TIGHT = {"atol": 1e-9, "rtol": 0}
NOTES_PERMS = [(0, 1, 2), (0, 2, 1), (1, 0, 2)]


def _randn(*shape, seed=0, dtype=F64):
    return torch.randn(*shape, dtype=dtype, generator=torch.Generator().manual_seed(seed))


def _qkv(*batch, T, d=4, dv=None, seed=0, dtype=F64):
    dv = d if dv is None else dv
    return (_randn(*batch, T, d, seed=seed, dtype=dtype),
            _randn(*batch, T, d, seed=seed + 1, dtype=dtype),
            _randn(*batch, T, dv, seed=seed + 2, dtype=dtype))


def _dense(q, k, v, mask=None, **kw):
    return scaled_dot_product_attention(q, k, v, mask, **kw)[0]


def _from_rule(T, rule):
    """The (T, T) bool mask with M[i, j] = rule(i, j), built with a Python double loop."""
    return torch.tensor([[bool(rule(i, j)) for j in range(T)] for i in range(T)], dtype=torch.bool)


def _naive_local(T, c):
    return _from_rule(T, lambda i, j: abs(i - j) <= (c - 1) // 2)


def _naive_dilated(T, c, s):
    return _from_rule(T, lambda i, j: abs(i - j) <= s * ((c - 1) // 2) and (i - j) % s == 0)


def _naive_global_local(T, c, global_idx):
    g = set(global_idx)
    return _from_rule(T, lambda i, j: abs(i - j) <= (c - 1) // 2 or i in g or j in g)


def _naive_block(T, n, perm):
    size = T // n
    return _from_rule(T, lambda i, j: perm[i // size] == j // size)


# ------------------------------------------------------------------------------------------
# pattern masks against the definitions
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("T", [1, 2, 5, 8, 17])
@pytest.mark.parametrize("c", [1, 3, 5, 7, 33])
def test_local_mask_is_the_window_of_half_width_c_minus_one_over_two(T, c):
    m = local_mask(T, c)
    assert m.dtype == torch.bool
    assert m.shape == (T, T)
    assert torch.equal(m, _naive_local(T, c))


def test_local_mask_small_case_written_out():
    # c = 3: i - 1, i, i + 1 (the notes' example)
    expected = torch.tensor([[1, 1, 0, 0, 0], [1, 1, 1, 0, 0], [0, 1, 1, 1, 0], [0, 0, 1, 1, 1],
                             [0, 0, 0, 1, 1]], dtype=torch.bool)
    assert torch.equal(local_mask(5, 3), expected)
    assert torch.equal(local_mask(5, 1), torch.eye(5, dtype=torch.bool))
    assert torch.equal(local_mask(5, 9), torch.ones(5, 5, dtype=torch.bool))


@pytest.mark.parametrize("T", [1, 6, 13, 20])
@pytest.mark.parametrize(("c", "dilation"), [(1, 3), (3, 1), (3, 2), (5, 2), (3, 4), (7, 3)])
def test_dilated_mask_keeps_c_keys_spaced_dilation_apart(T, c, dilation):
    assert torch.equal(dilated_mask(T, c, dilation), _naive_dilated(T, c, dilation))


def test_dilated_mask_with_dilation_one_is_the_local_mask_and_c3_s2_skips_every_other_key():
    assert torch.equal(dilated_mask(11, 5, 1), local_mask(11, 5))
    row = dilated_mask(9, 3, 2)[4]
    assert row.nonzero().flatten().tolist() == [2, 4, 6]      # i - 2, i, i + 2


@pytest.mark.parametrize("T", [1, 7, 16])
@pytest.mark.parametrize("c", [1, 3, 5])
@pytest.mark.parametrize("global_idx", [[], [0], [0, 3], [6], [5, 2, 5]])
def test_global_local_mask_adds_full_rows_and_columns_for_global_tokens(T, c, global_idx):
    global_idx = [g for g in global_idx if g < T]
    m = global_local_mask(T, c, global_idx)
    assert torch.equal(m, _naive_global_local(T, c, global_idx))
    assert torch.equal(global_local_mask(T, c, torch.tensor(global_idx, dtype=torch.long)), m)


def test_global_local_mask_without_globals_is_the_local_mask():
    assert torch.equal(global_local_mask(9, 3, []), local_mask(9, 3))


@pytest.mark.parametrize("T", [3, 6, 12])
@pytest.mark.parametrize("perm", NOTES_PERMS)
def test_block_mask_with_the_notes_permutations(T, perm):
    m = block_mask(T, 3, perm)
    assert torch.equal(m, _naive_block(T, 3, perm))
    assert m.sum() == T * T // 3                              # each row sees one block


def test_block_mask_defaults_to_the_block_diagonal():
    assert torch.equal(block_mask(6, 3), _naive_block(6, 3, (0, 1, 2)))
    assert torch.equal(block_mask(6, 3), torch.block_diag(*[torch.ones(2, 2)] * 3).bool())
    assert torch.equal(block_mask(5, 1), torch.ones(5, 5, dtype=torch.bool))


@pytest.mark.parametrize("n", [2, 4, 8])
def test_block_mask_at_T_512_has_blocks_of_T_over_n_and_density_one_over_n(n):
    T = 512
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(n)).tolist()
    m = block_mask(T, n, perm)
    assert torch.equal(m, _naive_block(T, n, perm))
    assert m.float().mean().item() == pytest.approx(1 / n, abs=0)
    size = T // n                                              # 256, 128, 64
    assert m[0].nonzero().flatten().tolist() == list(range(perm[0] * size, (perm[0] + 1) * size))


@pytest.mark.parametrize(("T", "c", "global_idx"), [(16, 1, []), (16, 3, [0]), (40, 5, [0, 39])])
@pytest.mark.parametrize("n_random", [0, 1, 3])
def test_random_mask_contains_global_local_and_adds_at_most_n_random_keys_per_row(
        T, c, global_idx, n_random):
    m = random_local_global_mask(T, c, global_idx, n_random, torch.Generator().manual_seed(0))
    base = global_local_mask(T, c, global_idx)
    assert torch.equal(m & base, base), "the random mask must contain global_local_mask"
    extra = (m & ~base).sum(dim=1)
    assert (extra <= n_random).all()
    if n_random == 0:
        assert torch.equal(m, base)


@pytest.mark.parametrize("n_random", [1, 2, 5, 16])
def test_random_mask_with_c1_and_no_globals_has_n_random_or_one_more_keys_per_row(n_random):
    T = 16
    m = random_local_global_mask(T, 1, [], n_random, torch.Generator().manual_seed(3))
    per_row = m.sum(dim=1)
    # the diagonal, plus n_random distinct random keys that may include the diagonal
    assert ((per_row == n_random) | (per_row == n_random + 1)).all(), per_row.tolist()
    assert m.diagonal().all()
    if n_random == T:
        assert m.all()


def test_random_mask_is_reproducible_with_a_seeded_generator():
    def make(seed):
        return random_local_global_mask(64, 3, [0], 4, torch.Generator().manual_seed(seed))
    assert torch.equal(make(7), make(7))
    assert not torch.equal(make(7), make(8))


# ------------------------------------------------------------------------------------------
# pattern masks: clear errors
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("c", [2, 4, 0, -1, -3, 3.0, "3", True, None])
@pytest.mark.parametrize("make", [
    lambda c: local_mask(8, c),
    lambda c: dilated_mask(8, c, 2),
    lambda c: global_local_mask(8, c, [0]),
    lambda c: random_local_global_mask(8, c, [0], 1),
], ids=["local", "dilated", "global_local", "random"])
def test_masks_reject_a_window_that_is_not_a_positive_odd_integer(make, c):
    with pytest.raises(ValueError, match="window c must be a positive odd integer"):
        make(c)


@pytest.mark.parametrize(("perm", "match"), [
    ((0, 0, 2), r"\[0, 0, 2\] is not a permutation"),               # a duplicate
    ((0, 1, 3), r"\[0, 1, 3\] is not a permutation"),               # out of range
    ((-1, 0, 1), r"is not a permutation"),                          # negative
    ((0, 1), r"perm must be a sequence of 3 block indices"),        # too short
    ((0, 1, 2, 3), r"perm must be a sequence of 3 block indices"),  # too long
    ((0.0, 1.0, 2.0), r"perm must be a sequence of 3 block indices"),
    ([[0, 1, 2]], r"block_mask takes one permutation"),             # per-head perms
])
def test_block_mask_rejects_a_perm_that_is_not_a_permutation(perm, match):
    with pytest.raises(ValueError, match=match):
        block_mask(6, 3, perm)


@pytest.mark.parametrize(("T", "n"), [(10, 3), (7, 2), (4, 8)])
def test_block_mask_rejects_T_not_divisible_by_n_blocks(T, n):
    with pytest.raises(ValueError, match=f"T={T} is not divisible by n_blocks={n}"):
        block_mask(T, n)


def test_block_mask_rejects_a_non_positive_block_count():
    with pytest.raises(ValueError, match="n_blocks must be an integer >= 1"):
        block_mask(6, 0)


@pytest.mark.parametrize(("global_idx", "bad"), [([8], r"\[8\]"), ([0, 9], r"\[9\]"),
                                                 ([-1], r"\[-1\]"), ([2, -8], r"\[-8\]")])
def test_global_indices_out_of_range_including_negative_are_rejected(global_idx, bad):
    with pytest.raises(ValueError, match=f"global_idx {bad} out of range for T=8"):
        global_local_mask(8, 3, global_idx)
    with pytest.raises(ValueError, match="out of range"):
        random_local_global_mask(8, 3, global_idx, 1)


def test_global_indices_must_be_integers():
    with pytest.raises(ValueError, match="global_idx must be a 1-D sequence of integer"):
        global_local_mask(8, 3, [0.5])


def test_random_mask_rejects_more_random_keys_than_positions():
    with pytest.raises(ValueError, match="n_random=9 exceeds T=8"):
        random_local_global_mask(8, 3, [], 9)
    with pytest.raises(ValueError, match="n_random must be an integer >= 0"):
        random_local_global_mask(8, 3, [], -1)


@pytest.mark.parametrize("dilation", [0, -2, 1.5])
def test_dilated_mask_rejects_dilation_below_one(dilation):
    with pytest.raises(ValueError, match="dilation must be an integer >= 1"):
        dilated_mask(8, 3, dilation)


# ------------------------------------------------------------------------------------------
# local_attention equals dense attention under local_mask
# ------------------------------------------------------------------------------------------

@FAST
@given(batch=st.sampled_from([(), (2,), (2, 3)]), T=st.integers(1, 70),
       c=st.sampled_from([1, 3, 5, 9, 17, 129]),
       block_size=st.sampled_from([None, 1, 3, 8, 32, 500]), causal=st.booleans(),
       dv=st.sampled_from([1, 4, 6]), seed=st.integers(0, 10**6))
def test_local_attention_equals_dense_attention_under_the_local_mask(batch, T, c, block_size,
                                                                     causal, dv, seed):
    q, k, v = _qkv(*batch, T=T, dv=dv, seed=seed)
    mask = local_mask(T, c) & causal_mask(T) if causal else local_mask(T, c)
    out = local_attention(q, k, v, c, causal=causal, block_size=block_size)
    assert out.shape == (*batch, T, dv)
    torch.testing.assert_close(out, _dense(q, k, v, mask), **TIGHT)


@pytest.mark.parametrize(("T", "c", "block_size"), [
    (1, 5, None),        # a single token
    (3, 7, None),        # T < window
    (33, 5, 32),         # T not a multiple of the block size
    (100, 9, 7),
    (64, 3, 64),
    (50, 49, 16),        # the window is most of the sequence
])
@pytest.mark.parametrize("causal", [False, True])
def test_local_attention_edge_cases_of_length_window_and_block(T, c, block_size, causal):
    q, k, v = _qkv(2, T=T, d=5, seed=T)
    mask = local_mask(T, c) & causal_mask(T) if causal else local_mask(T, c)
    torch.testing.assert_close(local_attention(q, k, v, c, causal=causal, block_size=block_size),
                               _dense(q, k, v, mask), **TIGHT)


@pytest.mark.parametrize("T", [1, 4, 10, 31])
def test_local_attention_with_a_window_covering_everything_is_dense_attention(T):
    q, k, v = _qkv(3, T=T, seed=1)
    c = 2 * T - 1                                             # reaches T - 1 on each side
    torch.testing.assert_close(local_attention(q, k, v, c), _dense(q, k, v), **TIGHT)
    torch.testing.assert_close(local_attention(q, k, v, c + 10, causal=True),
                               _dense(q, k, v, is_causal=True), **TIGHT)


def test_local_attention_with_window_one_returns_v():
    q, k, v = _qkv(2, T=9, seed=2)
    torch.testing.assert_close(local_attention(q, k, v, 1), v, atol=0, rtol=0)


def test_local_attention_accepts_non_contiguous_heads_and_a_custom_scale():
    x = _randn(2, 12, 3 * 4, seed=3)
    q = x.unflatten(-1, (3, 4)).transpose(1, 2)               # (B, H, T, d), a strided view
    assert not q.is_contiguous()
    mask = local_mask(12, 3)
    torch.testing.assert_close(local_attention(q, q, q, 3, scale=0.3),
                               _dense(q, q, q, mask, scale=0.3), **TIGHT)
    torch.testing.assert_close(local_attention(q, q, q, 1, block_size=5), q, **TIGHT)


@pytest.mark.parametrize("causal", [False, True])
def test_local_attention_passes_gradcheck(causal):
    q, k, v = (t.requires_grad_() for t in _qkv(1, T=7, d=3, seed=4))
    assert torch.autograd.gradcheck(
        lambda a, b, c: local_attention(a, b, c, 3, causal=causal, block_size=3), (q, k, v))


def test_local_attention_gradients_equal_dense_gradients():
    ours = [t.requires_grad_() for t in _qkv(2, T=40, d=8, seed=5)]
    dense = [t.detach().clone().requires_grad_() for t in ours]
    g = _randn(2, 40, 8, seed=9)
    (local_attention(*ours, 9, causal=True, block_size=6) * g).sum().backward()
    (_dense(*dense, local_mask(40, 9) & causal_mask(40)) * g).sum().backward()
    for a, b, name in zip(ours, dense, "qkv", strict=True):
        torch.testing.assert_close(a.grad, b.grad, **TIGHT, msg=f"d loss / d {name}")


def test_local_attention_rejects_bad_window_block_size_and_shapes():
    q, k, v = _qkv(T=8)
    with pytest.raises(ValueError, match="window c must be a positive odd integer"):
        local_attention(q, k, v, 4)
    with pytest.raises(ValueError, match="block_size must be an integer >= 1"):
        local_attention(q, k, v, 3, block_size=0)
    with pytest.raises(ValueError, match="block_size must be an integer >= 1"):
        local_attention(q, k, v, 3, block_size=2.5)
    with pytest.raises(ValueError, match="same length T"):
        local_attention(q, k[:5], v[:5], 3)
    with pytest.raises(TypeError, match="floating point"):
        local_attention(q.long(), k, v, 3)


# ------------------------------------------------------------------------------------------
# block_attention equals dense attention under block_mask
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("perm", [None, *NOTES_PERMS])
@pytest.mark.parametrize("T", [3, 12])
@pytest.mark.parametrize("causal", [False, True])
def test_block_attention_equals_dense_attention_under_the_block_mask(perm, T, causal):
    q, k, v = _qkv(2, 2, T=T, dv=3, seed=T)
    mask = block_mask(T, 3, perm)
    if causal:
        mask = mask & causal_mask(T)
    out = block_attention(q, k, v, 3, perm, causal=causal)
    assert out.shape == (2, 2, T, 3)
    torch.testing.assert_close(out, _dense(q, k, v, mask), **TIGHT)


@pytest.mark.parametrize("n", [2, 4, 8])
def test_block_attention_at_T_64_with_a_random_permutation(n):
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(n))
    q, k, v = _qkv(3, T=64, d=8, seed=n)
    torch.testing.assert_close(block_attention(q, k, v, n, perm),
                               _dense(q, k, v, block_mask(64, n, perm)), **TIGHT)


@pytest.mark.parametrize("causal", [False, True])
def test_block_attention_with_one_permutation_per_head(causal):
    perms = torch.tensor(NOTES_PERMS)                          # (H=3, n=3)
    T = 9
    q, k, v = _qkv(2, 3, T=T, seed=6)
    mask = torch.stack([block_mask(T, 3, p) for p in perms])  # (H, T, T)
    if causal:
        mask = mask & causal_mask(T)
    torch.testing.assert_close(block_attention(q, k, v, 3, perms, causal=causal),
                               _dense(q, k, v, mask), **TIGHT)


def test_causal_block_attention_sending_a_block_to_a_later_one_gives_zero_rows():
    T, bs = 12, 4
    q, k, v = _qkv(2, T=T, seed=7)
    out = block_attention(q, k, v, 3, (1, 0, 2), causal=True)
    dense = _dense(q, k, v, block_mask(T, 3, (1, 0, 2)) & causal_mask(T))
    assert torch.equal(out[:, :bs], torch.zeros(2, bs, 4, dtype=F64))   # block 0 -> block 1
    assert torch.equal(dense[:, :bs], torch.zeros(2, bs, 4, dtype=F64))
    assert (out[:, bs:].abs().sum(-1) > 0).all()
    torch.testing.assert_close(out, dense, **TIGHT)


@pytest.mark.parametrize("causal", [False, True])
def test_block_attention_with_one_block_is_dense_attention(causal):
    q, k, v = _qkv(2, T=10, seed=8)
    torch.testing.assert_close(block_attention(q, k, v, 1, causal=causal),
                               _dense(q, k, v, is_causal=causal), **TIGHT)


def test_block_attention_gradients_equal_dense_gradients():
    ours = [t.requires_grad_() for t in _qkv(2, T=12, seed=9)]
    dense = [t.detach().clone().requires_grad_() for t in ours]
    g = _randn(2, 12, 4, seed=10)
    (block_attention(*ours, 3, (2, 0, 1)) * g).sum().backward()
    (_dense(*dense, block_mask(12, 3, (2, 0, 1))) * g).sum().backward()
    for a, b, name in zip(ours, dense, "qkv", strict=True):
        torch.testing.assert_close(a.grad, b.grad, **TIGHT, msg=f"d loss / d {name}")


def test_block_attention_rejects_bad_block_counts_and_permutations():
    q, k, v = _qkv(3, T=12)
    with pytest.raises(ValueError, match="T=12 is not divisible by n_blocks=5"):
        block_attention(q, k, v, 5)
    with pytest.raises(ValueError, match="n_blocks must be an integer >= 1"):
        block_attention(q, k, v, 0)
    with pytest.raises(ValueError, match="not a permutation"):
        block_attention(q, k, v, 3, (0, 0, 1))
    with pytest.raises(ValueError, match="one permutation per head needs q of shape"):
        block_attention(q, k, v, 3, [[0, 1, 2], [1, 0, 2]])      # 2 perms, 3 heads


# ------------------------------------------------------------------------------------------
# the sparse functions never build T x T
# ------------------------------------------------------------------------------------------

def _local_memory(T, window=5, d=16):
    q, k, v = _qkv(T=T, d=d, dtype=torch.float32)
    with torch.inference_mode(), record_memory() as mem:
        local_attention(q, k, v, window)
    return mem


def test_local_attention_at_T_4096_allocates_no_tensor_near_T_by_T():
    T = 4096
    mem = _local_memory(T)
    assert mem.largest_numel < T * T // 16, (mem.largest_numel, mem.largest_shape)


def test_local_attention_memory_grows_linearly_in_T():
    small, large = _local_memory(2048), _local_memory(8192)
    ratio = large.peak_bytes / small.peak_bytes
    assert 3 < ratio < 5, f"T x 4 should give memory x 4 (linear), got x {ratio:.2f}"


def test_dense_attention_under_the_local_mask_does_build_T_by_T():
    # the contrast that makes the two tests above meaningful
    T = 512
    q, k, v = _qkv(T=T, d=16, dtype=torch.float32)
    mask = local_mask(T, 5)
    with torch.inference_mode(), record_memory() as mem:
        _dense(q, k, v, mask)
    assert mem.largest_numel == T * T


@pytest.mark.parametrize("n", [1, 4, 16])
def test_block_attention_largest_tensor_is_T_squared_over_n(n):
    T = 1024
    q, k, v = _qkv(T=T, d=16, dtype=torch.float32)
    with torch.inference_mode(), record_memory() as mem:
        block_attention(q, k, v, n, causal=True)
    assert mem.largest_numel == T * T // n, mem.largest_shape


# ------------------------------------------------------------------------------------------
# Linformer
# ------------------------------------------------------------------------------------------

def _naive_linformer(layer, x):
    """out_proj(concat_h softmax(Q_h (E K_h)^T / sqrt(head_size)) (F V_h)), one (b, h) at a time."""
    B, T, D = x.shape
    H = layer.n_head
    dh = D // H
    Q, K, V = (x @ p.weight.T + p.bias for p in (layer.q_proj, layer.k_proj, layer.v_proj))
    E, F_ = layer.E[:, :T], layer.F[:, :T]
    heads = torch.zeros(B, T, D, dtype=x.dtype)
    for b in range(B):
        for h in range(H):
            cols = slice(h * dh, (h + 1) * dh)
            Qh, Kh, Vh = Q[b, :, cols], K[b, :, cols], V[b, :, cols]
            A = torch.softmax(Qh @ (E @ Kh).T / math.sqrt(dh), dim=-1)    # (T, k)
            heads[b, :, cols] = A @ (F_ @ Vh)
    return heads @ layer.out_proj.weight.T + layer.out_proj.bias


@pytest.mark.parametrize("T", [10, 6, 1])
def test_linformer_matches_its_formula_from_its_own_parameters(T):
    torch.manual_seed(0)
    layer = LinformerAttention(n_embd=12, n_head=3, seq_len=10, k=4).double()
    x = _randn(2, T, 12, seed=T)
    out, weights = layer(x)
    assert isinstance(layer, MultiHeadAttention)      # a drop-in for MHA: (out, weights)
    assert weights is None
    assert out.shape == (2, T, 12)
    torch.testing.assert_close(out, _naive_linformer(layer, x), atol=1e-6, rtol=0)


def test_linformer_with_k_equal_to_T_and_identity_projections_is_dense_attention():
    q, k, v = _qkv(2, 3, T=7, dv=5, seed=11)
    eye = torch.eye(7, dtype=F64)
    torch.testing.assert_close(linformer_attention(q, k, v, eye, eye), _dense(q, k, v), **TIGHT)


def test_linformer_rejects_causal_masks_and_sequences_longer_than_seq_len():
    layer = LinformerAttention(n_embd=8, n_head=2, seq_len=6, k=3)
    x = torch.randn(1, 6, 8)
    with pytest.raises(ValueError, match="not causal"):
        layer(x, is_causal=True)
    with pytest.raises(ValueError, match="takes no mask"):
        layer(x, mask=torch.ones(6, 6, dtype=torch.bool))
    with pytest.raises(ValueError, match="length 7 is longer than seq_len=6"):
        layer(torch.randn(1, 7, 8))
    with pytest.raises(ValueError, match="k=7 > seq_len=6"):
        LinformerAttention(n_embd=8, n_head=2, seq_len=6, k=7)
    with pytest.raises(ValueError, match="E and F must both have shape"):
        linformer_attention(x, x, x, torch.eye(5), torch.eye(5))


# ------------------------------------------------------------------------------------------
# kv_cache_bytes
# ------------------------------------------------------------------------------------------

def test_kv_cache_bytes_for_gpt3_from_the_notes():
    # 96 layers, 96 heads of 128, float32
    assert kv_cache_bytes(96, 96, 128, 4) == 9_437_184                       # per token
    # its 2048-token context: 19.3 GB (the notes' "2000 x 9.4 MB = 19.2 GB" rounds twice)
    assert kv_cache_bytes(96, 96, 128, 4, n_tokens=2048) == 19_327_352_832
    assert kv_cache_bytes(96, 96, 128, 4, n_tokens=2048) == 2048 * 9_437_184
    # MQA keeps one KV head: exactly 96x smaller
    assert kv_cache_bytes(96, 1, 128, 4) * 96 == kv_cache_bytes(96, 96, 128, 4)


@pytest.mark.parametrize(("layers", "heads", "head_size", "nbytes", "tokens"), [
    (1, 1, 1, 1, 1), (12, 12, 64, 2, 1024), (32, 8, 128, 2, 4096), (2, 3, 5, 4, 7),
    (4, 2, 8, 1, 0)])
def test_kv_cache_bytes_is_two_times_layers_heads_d_head_bytes_tokens(layers, heads, head_size,
                                                                      nbytes, tokens):
    got = kv_cache_bytes(layers, heads, head_size, nbytes, n_tokens=tokens)
    assert got == 2 * layers * heads * head_size * nbytes * tokens
    assert isinstance(got, int)


def test_kv_cache_bytes_defaults_to_two_bytes_and_one_token_and_allows_half_bytes():
    assert kv_cache_bytes(2, 3, 4) == 2 * 2 * 3 * 4 * 2
    assert kv_cache_bytes(1, 1, 3, 0.5) == 3           # 4-bit values
    assert kv_cache_bytes(1, 1, 1, 0.5) == 1
    assert kv_cache_bytes(1, 1, 1, 0.25) == 0.5


@pytest.mark.parametrize(("n_kv_head", "dtype"), [(4, torch.float32), (2, torch.float32),
                                                   (1, torch.float32), (2, F64)])
def test_kv_cache_bytes_equals_the_bytes_of_k_and_v_in_multi_head_attention(n_kv_head, dtype):
    B, T = 3, 5
    mha = MultiHeadAttention(32, 4, n_kv_head).to(dtype)
    with torch.no_grad():
        _, k, v = mha.project_qkv(torch.randn(B, T, 32, dtype=dtype))
    stored = k.numel() * k.element_size() + v.numel() * v.element_size()
    expected = kv_cache_bytes(1, n_kv_head, mha.head_size, torch.finfo(dtype).bits // 8, n_tokens=T)
    assert stored == B * expected


@pytest.mark.parametrize(("args", "match"), [
    ((0, 1, 1), "n_layer must be an integer >= 1"),
    ((1, 0, 1), "n_kv_head must be an integer >= 1"),
    ((1, 1, 1.5), "head_size must be an integer >= 1"),
    ((True, 1, 1), "n_layer must be an integer >= 1"),
    ((1, 1, 1, 0), "bytes_per_value must be a positive number"),
    ((1, 1, 1, -2), "bytes_per_value must be a positive number"),
    ((1, 1, 1, "2"), "bytes_per_value must be a positive number"),
    ((1, 1, 1, 2, -1), "n_tokens must be an integer >= 0"),
])
def test_kv_cache_bytes_rejects_bad_arguments(args, match):
    with pytest.raises(ValueError, match=match):
        kv_cache_bytes(*args)


# ------------------------------------------------------------------------------------------
# record_memory
# ------------------------------------------------------------------------------------------

def test_record_memory_records_the_exact_size_of_a_product():
    x, y = torch.randn(8, 16), torch.randn(16, 32)
    with record_memory() as mem:
        z = x @ y
    assert z.shape == (8, 32)
    # 8 x 32 float32 numbers of 4 bytes each: 1024 bytes
    assert (mem.peak_bytes, mem.largest_bytes, mem.largest_numel) == (1024, 1024, 8 * 32)
    assert mem.largest_shape == (8, 32)
    assert mem.n_allocations == 1


def test_record_memory_ignores_views_and_in_place_ops():
    x, y = torch.randn(8, 16), torch.randn(16, 32)
    with record_memory() as mem:
        z = x @ y
        views = z.view(-1), z.t(), z[1:], z.unsqueeze(0)
        z.mul_(2).add_(1)
        x.mul_(3)                                   # in place on a tensor made outside
    assert len(views) == 4
    assert mem.n_allocations == 1
    assert mem.peak_bytes == 8 * 32 * 4


def test_record_memory_subtracts_frees():
    x, y = torch.randn(8, 16), torch.randn(16, 32)
    one = 8 * 32 * 4
    with record_memory() as sequential:
        a = x @ y
        del a
        b = x @ y
        del b
    assert (sequential.peak_bytes, sequential.n_allocations, sequential.live_bytes) == (one, 2, 0)
    with record_memory() as together:
        a, b = x @ y, x @ y
        del a, b
    assert (together.peak_bytes, together.live_bytes) == (2 * one, 0)


@pytest.mark.parametrize("mode", ["grad", "no_grad", "inference"])
def test_record_memory_counts_both_of_two_live_batched_products(mode):
    # 4-D matmul: outside inference mode it runs as bmm + _unsafe_view (an alias of the bmm
    # output); both results stay alive, so both must be counted
    x, y = torch.randn(2, 3, 8, 16), torch.randn(2, 3, 16, 32)
    one = 2 * 3 * 8 * 32 * 4
    ctx = {"grad": torch.enable_grad, "no_grad": torch.no_grad,
           "inference": torch.inference_mode}[mode]
    with ctx(), record_memory() as mem:
        a = x @ y
        b = x @ y
    assert a.shape == b.shape == (2, 3, 8, 32)
    assert (mem.peak_bytes, mem.live_bytes) == (2 * one, 2 * one), (
        f"two live (2, 3, 8, 32) float32 results hold {2 * one} bytes; record_memory says peak "
        f"{mem.peak_bytes}, live {mem.live_bytes}")


@pytest.mark.parametrize("mode", ["grad", "inference"])
@pytest.mark.parametrize("alias", ["view", "detach"])
def test_record_memory_keeps_a_tensor_alive_through_its_views(mode, alias):
    x, y = torch.randn(8, 16), torch.randn(16, 32)
    ctx = torch.enable_grad if mode == "grad" else torch.inference_mode
    with ctx(), record_memory() as mem:
        a = x @ y
        kept = a.view(-1) if alias == "view" else a.detach()
        del a                                   # the storage lives on in `kept`
        b = x @ y
    assert kept.numel() == b.numel()
    assert (mem.peak_bytes, mem.live_bytes) == (2 * 1024, 2 * 1024), (
        f"a's storage is still held by its {alias}: expected 2048 live bytes, got peak "
        f"{mem.peak_bytes}, live {mem.live_bytes}")


def test_block_attention_accepts_numpy_integer_block_counts():
    np = pytest.importorskip("numpy")
    q, k, v = _qkv(T=12)
    expected = block_attention(q, k, v, 3)
    assert torch.equal(block_attention(q, k, v, np.int64(3)), expected)


def test_record_memory_largest_numel_counts_elements_not_bytes():
    x64 = torch.ones(4, 4, dtype=torch.float64)
    x8 = torch.ones(10, 10, dtype=torch.bool)
    with record_memory() as mem:
        a = x64 * 2          # 16 elements, 128 bytes
        b = x8 & x8          # 100 elements, 100 bytes
    assert (mem.largest_numel, mem.largest_shape, mem.largest_bytes) == (100, (10, 10), 128)
    del a, b


def test_linformer_attention_rejects_projections_of_different_k():
    q, k, v = _qkv(T=6)
    with pytest.raises(ValueError, match="same k"):
        linformer_attention(q, k, v, torch.zeros(3, 6, dtype=F64), torch.zeros(2, 6, dtype=F64))


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
def test_covering_permutations_are_permutations_whose_heads_see_every_pair_once(n):
    from course_lib.attention import block_mask, covering_permutations
    from course_lib.attention.patterns import check_permutation

    perms = covering_permutations(n)
    assert perms.shape == (n, n)
    check_permutation(perms, n)  # every row a permutation
    T = 2 * n
    masks = torch.stack([block_mask(T, n, p) for p in perms])
    assert torch.equal(masks.sum(0), torch.ones(T, T, dtype=torch.long))  # each pair exactly once
