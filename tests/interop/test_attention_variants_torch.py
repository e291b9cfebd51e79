"""Parity of lesson 04's attention variants with PyTorch's own attention.

- `local_attention` against torch.nn.functional.scaled_dot_product_attention with the
  equivalent bool mask (float32, atol = rtol = 1e-5);
- `MultiHeadAttention(n_kv_head=g).attend` against F.scaled_dot_product_attention(...,
  enable_gqa=True) on the same q, k, v;
- `local_attention` and `block_attention` against FlexAttention
  (torch.nn.attention.flex_attention) with a BlockMask built from the same mask_mod. On CPU,
  FlexAttention runs eagerly (an unfused reference that PyTorch warns about, fine for small
  sizes; tolerance 1e-5 in float32); on CUDA it is compiled (tolerance 1e-4: a fused kernel
  with a different summation order). The CUDA cases skip on a machine without a GPU.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from course_lib.attention import (
    MultiHeadAttention,
    block_attention,
    block_mask,
    causal_mask,
    local_attention,
    local_mask,
)

F32_TOL = {"atol": 1e-5, "rtol": 1e-5}
CUDA_TOL = {"atol": 1e-4, "rtol": 1e-4}
NO_CUDA = "CUDA is not available on this machine (torch.cuda.is_available() is False)"
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(),
                                                                 reason=NO_CUDA))]


def _randn(*shape, seed=0, dtype=torch.float32, device="cpu"):
    x = torch.randn(*shape, dtype=dtype, generator=torch.Generator().manual_seed(seed))
    return x.to(device)


def _qkv(B, H, T, d, seed=0, device="cpu"):
    return tuple(_randn(B, H, T, d, seed=seed + i, device=device) for i in range(3))


# ------------------------------------------------------------------------------------------
# local_attention against F.scaled_dot_product_attention with the bool mask
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("T", "c", "block_size"), [(1, 3, None), (17, 5, None), (64, 9, 16),
                                                    (100, 33, None), (130, 129, 32), (256, 3, 7)])
@pytest.mark.parametrize("causal", [False, True])
def test_local_attention_matches_torch_sdpa_with_the_local_mask(T, c, block_size, causal):
    q, k, v = _qkv(2, 3, T, 16, seed=T)
    mask = local_mask(T, c) & causal_mask(T) if causal else local_mask(T, c)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(local_attention(q, k, v, c, causal=causal, block_size=block_size),
                               ref, **F32_TOL)


@pytest.mark.parametrize("n", [1, 3, 4])
@pytest.mark.parametrize("causal", [False, True])
def test_block_attention_matches_torch_sdpa_with_the_block_mask(n, causal):
    T = 48
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(n))
    q, k, v = _qkv(2, 2, T, 8, seed=n)
    mask = block_mask(T, n, perm) & causal_mask(T) if causal else block_mask(T, n, perm)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)   # zero rows where all masked
    torch.testing.assert_close(block_attention(q, k, v, n, perm, causal=causal), ref, **F32_TOL)


# ------------------------------------------------------------------------------------------
# GQA against enable_gqa
# ------------------------------------------------------------------------------------------

def _torch_has_enable_gqa() -> bool:
    x = torch.zeros(1, 2, 1, 1)
    try:
        F.scaled_dot_product_attention(x, x[:, :1], x[:, :1], enable_gqa=True)
    except TypeError:
        return False
    return True


@pytest.mark.skipif(not _torch_has_enable_gqa(),
                    reason="this torch's F.scaled_dot_product_attention has no enable_gqa (added "
                           "in PyTorch 2.5)")
@pytest.mark.parametrize("n_kv_head", [6, 3, 2, 1])
@pytest.mark.parametrize("mask_kind", ["none", "causal", "local"])
def test_grouped_attend_matches_torch_enable_gqa(n_kv_head, mask_kind):
    torch.manual_seed(0)
    mha = MultiHeadAttention(6 * 8, 6, n_kv_head).eval()
    T = 12
    q = _randn(2, 6, T, 8, seed=1)
    k, v = _randn(2, n_kv_head, T, 8, seed=2), _randn(2, n_kv_head, T, 8, seed=3)
    mask = {"none": None, "causal": causal_mask(T), "local": local_mask(T, 5)}[mask_kind]
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    for need_weights in (False, True):
        out, _ = mha.attend(q, k, v, mask=mask, need_weights=need_weights)
        torch.testing.assert_close(out, ref, **F32_TOL)


# ------------------------------------------------------------------------------------------
# FlexAttention with the same mask_mod
# ------------------------------------------------------------------------------------------

try:
    from torch.nn.attention import flex_attention as flex
except ImportError:              # PyTorch < 2.5
    flex = None
needs_flex = pytest.mark.skipif(flex is None, reason="this torch has no "
                                "torch.nn.attention.flex_attention (added in PyTorch 2.5)")


def _local_mod(c, causal):
    r = (c - 1) // 2

    def mask_mod(b, h, q_idx, kv_idx):
        near = (q_idx - kv_idx <= r) & (kv_idx - q_idx <= r)
        return near & (kv_idx <= q_idx) if causal else near
    return mask_mod


def _block_mod(perm, block, causal):
    """perm (n,) or (H, n): query block b of head h attends to key block perm[h, b]."""
    def mask_mod(b, h, q_idx, kv_idx):
        target = perm[q_idx // block] if perm.dim() == 1 else perm[h, q_idx // block]
        allowed = target == kv_idx // block
        return allowed & (kv_idx <= q_idx) if causal else allowed
    return mask_mod


def _flex(q, k, v, mask_mod, H=None):
    T = q.shape[-2]
    block = flex.create_block_mask(mask_mod, None, H, T, T, device=q.device.type)
    fn = flex.flex_attention
    if q.device.type == "cuda":
        fn = torch.compile(flex.flex_attention)
    return fn(q, k, v, block_mask=block)


def _tol(device):
    return CUDA_TOL if device == "cuda" else F32_TOL


@needs_flex
@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("T", "c"), [(64, 5), (200, 33), (256, 129)])
@pytest.mark.parametrize("causal", [False, True])
def test_local_attention_matches_flex_attention_with_a_sliding_window_mask_mod(device, T, c,
                                                                               causal):
    q, k, v = _qkv(1, 2, T, 16, seed=c, device=device)
    ours = local_attention(q, k, v, c, causal=causal)
    torch.testing.assert_close(ours, _flex(q, k, v, _local_mod(c, causal)), **_tol(device))


@needs_flex
@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("perm", [(0, 1, 2, 3), (1, 0, 3, 2), (3, 2, 1, 0)])
@pytest.mark.parametrize("causal", [False, True])
def test_block_attention_matches_flex_attention_with_a_permuted_block_mask_mod(device, perm,
                                                                               causal):
    T, n = 256, 4
    q, k, v = _qkv(1, 2, T, 16, seed=sum(perm), device=device)
    p = torch.tensor(perm, device=device)
    ours = block_attention(q, k, v, n, p, causal=causal)
    # flex gives fully masked rows (causal, block sent to a later block) a zero output too
    torch.testing.assert_close(ours, _flex(q, k, v, _block_mod(p, T // n, causal)), **_tol(device))


@needs_flex
@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
@pytest.mark.parametrize("device", DEVICES)
def test_block_attention_with_per_head_permutations_matches_flex_attention(device):
    T, n, H = 128, 4, 3
    perms = torch.tensor([[0, 1, 2, 3], [2, 3, 0, 1], [1, 0, 3, 2]], device=device)
    q, k, v = _qkv(2, H, T, 8, seed=5, device=device)
    ours = block_attention(q, k, v, n, perms)
    torch.testing.assert_close(ours, _flex(q, k, v, _block_mod(perms, T // n, False), H=H),
                               **_tol(device))
