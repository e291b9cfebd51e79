"""Helpers shared by the parity tests against `transformers`' GPT-2."""

from __future__ import annotations

import torch


def randomize(model, seed=0):
    """Every parameter random: weights N(0, 0.1), biases N(0, 0.1), LayerNorm weights 1 + N(0, 0.1).

    GPT-2's own init (N(0, 0.02), LayerNorms at 1 and 0) leaves logits close together and a wrong
    LayerNorm bias invisible; these weights make every parameter matter."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = 0.1 * torch.randn(p.shape, generator=g).to(p.dtype)
            p.copy_(1 + noise if "ln_" in name and name.endswith("weight") else noise)
    return model
