"""Sparse attention patterns as boolean masks (True = query i may attend to key j), lesson 04.

Each function returns a (T, T) bool mask, non-causal; combine with `causal_mask(T)` by `&`.
A mask on dense attention only *describes* a pattern: the T x T scores are still computed.
`course_lib.attention.sparse` computes local and block patterns without them.

The notes' patterns (0-based positions):
- local, window c (odd): |i - j| <= (c - 1) // 2                         c keys per query
- dilated, window c, dilation s: |i - j| <= s (c - 1) // 2, (i - j) % s == 0
- global + local: local, plus global tokens that see everything and are seen by everything
- global + random + local: the above plus n_random random keys per query (BigBird)
- block-local, n blocks of size T/n and a permutation pi: pi(i // (T/n)) == j // (T/n)
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import torch

from course_lib.attention._checks import check_int

__all__ = ["block_mask", "check_blocks", "check_permutation", "check_window", "covering_permutations",
           "dilated_mask", "global_local_mask", "local_mask", "random_local_global_mask"]

Device = torch.device | str | None


def check_window(c) -> int:
    """c must be a positive odd integer: the query itself plus (c - 1) / 2 keys on each side."""
    if isinstance(c, bool) or not isinstance(c, numbers.Integral) or c < 1 or c % 2 == 0:
        raise ValueError(f"the window c must be a positive odd integer (the token itself and "
                         f"(c - 1) / 2 neighbours on each side, e.g. c=3 or c=5), got {c!r}; "
                         f"for an even width use c + 1.")
    return int(c)


def _offsets(T: int, device: Device) -> torch.Tensor:
    """(T, T) matrix of j - i."""
    pos = torch.arange(T, device=device)
    return pos[None, :] - pos[:, None]


def local_mask(T: int, c: int, device: Device = None) -> torch.Tensor:
    """Sliding window: query i sees keys j with |i - j| <= (c - 1) // 2 (c = 3: i-1, i, i+1)."""
    check_int("T", T, 1)
    r = (check_window(c) - 1) // 2
    ones = torch.ones(T, T, dtype=torch.bool, device=device)
    return ones.tril(r) & ones.triu(-r)                  # j <= i + r and j >= i - r


def dilated_mask(T: int, c: int, dilation: int, device: Device = None) -> torch.Tensor:
    """Dilated window: c keys spaced `dilation` apart, centred on i (dilation 1 is `local_mask`).

    c = 3, dilation = 2: keys i - 2, i, i + 2 ("alternate words"), a span of 5 for 3 keys.
    """
    check_int("T", T, 1)
    check_int("dilation", dilation, 1)
    r = (check_window(c) - 1) // 2
    offsets = _offsets(T, device)
    return (offsets.abs() <= r * dilation) & (offsets % dilation == 0)


def _global_indices(T: int, global_idx: Sequence[int] | torch.Tensor, device: Device) -> torch.Tensor:
    idx = torch.as_tensor(global_idx, device=device)
    if idx.dim() != 1 or (idx.numel() and (idx.dtype.is_floating_point or idx.dtype == torch.bool)):
        raise ValueError(f"global_idx must be a 1-D sequence of integer positions, got {global_idx!r}.")
    idx = idx.long()
    bad = idx[(idx < 0) | (idx >= T)]
    if bad.numel():
        raise ValueError(f"global_idx {bad.tolist()} out of range for T={T}: global tokens are "
                         f"positions 0..{T - 1} (negative indices are not accepted).")
    return idx


def global_local_mask(T: int, c: int, global_idx: Sequence[int] | torch.Tensor,
                      device: Device = None) -> torch.Tensor:
    """`local_mask(T, c)`, plus global tokens: their rows and their columns are all True.

    A global token (e.g. a [CLS] token, or the first token) attends to every token and every
    token attends to it, so information crosses the whole sequence in two steps.
    """
    mask = local_mask(T, c, device)
    idx = _global_indices(T, global_idx, device)
    mask[idx, :] = True
    mask[:, idx] = True
    return mask


def random_local_global_mask(T: int, c: int, global_idx: Sequence[int] | torch.Tensor,
                             n_random: int, generator: torch.Generator | None = None,
                             device: Device = None) -> torch.Tensor:
    """`global_local_mask`, plus n_random keys per query drawn uniformly without replacement
    from all T positions (they may fall inside the window; n_random = 0 adds none).

    Pass a seeded `torch.Generator` for a reproducible pattern (BigBird draws it once per
    layer and keeps it).
    """
    mask = global_local_mask(T, c, global_idx, device)
    check_int("n_random", n_random, 0)
    if n_random > T:
        raise ValueError(f"n_random={n_random} exceeds T={T}: a query cannot pick more distinct "
                         f"random keys than there are positions.")
    if n_random:
        keys = torch.rand(T, T, generator=generator).argsort(dim=1)[:, :n_random].to(mask.device)
        mask.scatter_(1, keys, True)
    return mask


def check_permutation(perm, n_blocks: int) -> torch.Tensor:
    """perm as a long tensor of shape (n,) or (H, n), each row a permutation of 0..n-1."""
    p = torch.as_tensor(perm)
    if p.dtype.is_floating_point or p.dtype == torch.bool or p.dim() not in (1, 2) \
            or p.shape[-1] != n_blocks:
        raise ValueError(f"perm must be a sequence of {n_blocks} block indices (or one per head, "
                         f"shape (H, {n_blocks})), got {perm!r}.")
    p = p.long()
    expected = torch.arange(n_blocks)
    for row in p.reshape(-1, n_blocks):
        if not torch.equal(row.sort().values, expected):
            raise ValueError(f"perm {row.tolist()} is not a permutation of 0..{n_blocks - 1}: "
                             f"each block index must appear exactly once.")
    return p


def check_blocks(T: int, n_blocks: int) -> int:
    """The block size T // n_blocks, or ValueError if the blocks cannot have equal size."""
    check_int("T", T, 1)
    check_int("n_blocks", n_blocks, 1)
    if T % n_blocks:
        raise ValueError(f"T={T} is not divisible by n_blocks={n_blocks}: blocks must have equal "
                         f"size T / n_blocks; pad the sequence or pick n_blocks that divides T.")
    return T // n_blocks


def covering_permutations(n_blocks: int) -> torch.Tensor:
    """(n, n) long: n permutations of the blocks whose block-local heads together see every
    (query block, key block) pair exactly once (a Latin square: no block index repeats in a row
    or a column). Fewer heads cannot cover every pair: each sees n of the n^2 block pairs."""
    check_int("n_blocks", n_blocks, 1)
    index = torch.arange(n_blocks)
    return (index[None, :] + index[:, None]) % n_blocks


def block_mask(T: int, n_blocks: int, perm: Sequence[int] | torch.Tensor | None = None,
               device: Device = None) -> torch.Tensor:
    """Block-local: M[i, j] = perm[i // (T/n)] == j // (T/n), blocks of size T/n.

    Query block b attends to key block perm[b] only. perm defaults to the identity (the
    block diagonal). The notes write the divisor as T; it must be the block size T/n.
    """
    size = check_blocks(T, n_blocks)
    p = torch.arange(n_blocks) if perm is None else check_permutation(perm, n_blocks)
    if p.dim() != 1:
        raise ValueError(f"block_mask takes one permutation of shape ({n_blocks},); for one per "
                         f"head stack the masks: torch.stack([block_mask(T, n, p) for p in perms]).")
    block = torch.arange(T, device=device) // size
    return p.to(block.device)[block][:, None] == block[None, :]
