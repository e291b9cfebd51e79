"""Metrics for next-token and classification predictions (lesson 06; lesson 07 logs them)."""

from __future__ import annotations

import torch

__all__ = ["corpus_loss", "topk_accuracy"]


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


@torch.no_grad()
def corpus_loss(model, data: torch.Tensor, block_size: int, batch_size: int = 32) -> float:
    """The mean next-token cross-entropy (nats) of a language model over a whole token stream.

    `data` (N,) is cut into consecutive windows of block_size + 1 tokens that overlap by one
    (so every token after the first is predicted exactly once, from up to block_size tokens of
    context); the last, shorter window is kept. Deterministic: no sampling, so two runs (or
    two machines) give the same number up to float rounding. model(x) must return
    (logits, _) like course_lib.model.GPT; it is put in eval mode and restored.
    """
    if data.dim() != 1 or len(data) < 2:
        raise ValueError(f"data must be a 1-D tensor of at least 2 token ids, got shape "
                         f"{tuple(data.shape)}.")
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    starts = list(range(0, len(data) - 1, block_size))
    total, count = 0.0, 0
    try:
        for i in range(0, len(starts), batch_size):
            group = starts[i:i + batch_size]
            full = [s for s in group if s + block_size < len(data)]
            windows = [torch.stack([data[s:s + block_size + 1] for s in full])] if full else []
            windows += [data[s:][None] for s in group if s + block_size >= len(data)]
            for window in windows:
                window = window.to(device)
                logits, _ = model(window[:, :-1])
                losses = torch.nn.functional.cross_entropy(
                    logits.float().flatten(0, 1), window[:, 1:].flatten(), reduction="sum")
                total += losses.item()
                count += window[:, 1:].numel()
    finally:
        model.train(was_training)
    return total / count
