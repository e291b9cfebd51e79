"""Metrics for next-token and classification predictions (lesson 06; lesson 07 logs them)."""

from __future__ import annotations

import torch

__all__ = ["topk_accuracy"]


def topk_accuracy(logits: torch.Tensor, targets: torch.Tensor, k: int = 1,
                  ignore_index: int = -100) -> float:
    """The fraction of positions whose target is among the k largest logits.

    logits (..., V), targets (...) of integer ids. Positions whose target is `ignore_index`
    (padding, as in PyTorch's cross-entropy) are not counted; if none is left, ValueError.
    Ties between logits are broken by torch.topk.
    """
    if logits.shape[:-1] != targets.shape:
        raise ValueError(f"targets must have the shape of logits without the last (vocabulary) dim, "
                         f"{tuple(logits.shape[:-1])}, got {tuple(targets.shape)}.")
    if not 1 <= k <= logits.shape[-1]:
        raise ValueError(f"k must be between 1 and the number of classes {logits.shape[-1]}, got {k}.")
    keep = targets != ignore_index
    if not bool(keep.any()):
        raise ValueError(f"every target is ignore_index={ignore_index}: there is nothing to score.")
    best = logits[keep].topk(k, dim=-1).indices                       # (N, k)
    return (best == targets[keep].unsqueeze(-1)).any(dim=-1).float().mean().item()
