"""What the relative-position attention modules share: self-attention only, and masks applied
to scores that already carry position terms."""

from __future__ import annotations

import torch

from course_lib.attention import MultiHeadAttention
from course_lib.attention.dense import _check_mask, _combine_masks

__all__ = ["RelativeSelfAttention", "masked_scores"]


def masked_scores(scores: torch.Tensor, mask: torch.Tensor | None, is_causal: bool) -> torch.Tensor:
    """scores with a bool mask (True = may attend), a float mask (added) and/or causal applied."""
    Tq, Tk = scores.shape[-2:]
    if mask is not None:
        _check_mask(mask, Tq, Tk)
    mask = _combine_masks(mask, is_causal, Tq, Tk, scores.dtype, scores.device)
    if mask is None:
        return scores
    if mask.dtype == torch.bool:
        return scores.masked_fill(~mask, float("-inf"))
    return scores + mask.to(scores.dtype)


class RelativeSelfAttention(MultiHeadAttention):
    """A `MultiHeadAttention` whose positions relate queries and keys of one sequence, so it
    refuses `kv` (cross-attention). Subclasses override `attend` (or `forward`)."""

    def reject_kv(self, kv: torch.Tensor | None) -> None:
        if kv is not None:
            raise ValueError(f"{type(self).__name__} is self-attention only (relative positions "
                             "need queries and keys from one sequence): call it with kv=None.")

    def forward(self, x: torch.Tensor, kv: torch.Tensor | None = None,
                mask: torch.Tensor | None = None, is_causal: bool = False,
                need_weights: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        self.reject_kv(kv)
        return super().forward(x, mask=mask, is_causal=is_causal, need_weights=need_weights)
