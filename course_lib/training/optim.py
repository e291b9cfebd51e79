"""AdamW with weight decay on matrices only, and the warmup + cosine learning rate."""

from __future__ import annotations

import inspect
import math

import torch
import torch.nn as nn
from torch.optim.lr_scheduler import LRScheduler


def warmup_cosine_lr(step: int, *, max_lr: float, min_lr: float, warmup_iters: int,
                     decay_iters: int) -> float:
    """The learning rate at optimizer step `step` (0-based), as in nanoGPT:

        step <  warmup_iters:                 max_lr * (step + 1) / (warmup_iters + 1)
        warmup_iters <= step <= decay_iters:  min_lr + (max_lr - min_lr) * (1 + cos(pi r)) / 2,
                                              r = (step - warmup) / (decay - warmup)
        step >  decay_iters:                  min_lr
    """
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}.")
    if decay_iters < warmup_iters:
        raise ValueError(f"decay_iters={decay_iters} must be >= warmup_iters={warmup_iters}.")
    if step < warmup_iters:
        return max_lr * (step + 1) / (warmup_iters + 1)
    if step > decay_iters:
        return min_lr
    ratio = (step - warmup_iters) / max(1, decay_iters - warmup_iters)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (max_lr - min_lr)


class WarmupCosineLR(LRScheduler):
    """`warmup_cosine_lr` as a scheduler: call .step() after each optimizer step."""

    def __init__(self, optimizer: torch.optim.Optimizer, *, min_lr: float, warmup_iters: int,
                 decay_iters: int, last_epoch: int = -1) -> None:
        self.min_lr, self.warmup_iters, self.decay_iters = min_lr, warmup_iters, decay_iters
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        return [warmup_cosine_lr(self.last_epoch, max_lr=base, min_lr=self.min_lr,
                                 warmup_iters=self.warmup_iters, decay_iters=self.decay_iters)
                for base in self.base_lrs]


def parameter_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Decay the matrices (Linear weights, embedding tables), not the vectors (biases, LN gains).

    Decay pulls weights towards 0; for a LayerNorm gain that would mean "switch the feature
    off", and for a bias it only constrains an offset, so (as in GPT-2 and nanoGPT) 1-D
    parameters are left alone. A tied table is one parameter and appears once.
    """
    params = [p for p in model.parameters() if p.requires_grad]
    return [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]


def make_optimizer(model: nn.Module, *, learning_rate: float, weight_decay: float,
                   betas: tuple[float, float], device_type: str) -> torch.optim.AdamW:
    """AdamW over `parameter_groups`; the fused CUDA kernel where there is one."""
    fused = device_type == "cuda" and "fused" in inspect.signature(torch.optim.AdamW).parameters
    extra = {"fused": True} if fused else {}
    return torch.optim.AdamW(parameter_groups(model, weight_decay), lr=learning_rate, betas=betas,
                             **extra)
