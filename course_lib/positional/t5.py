"""T5's relative position bias (Raffel et al. 2020): one learned scalar per distance bucket and head.

T5 adds nothing to the input. Each head adds a learned number r_b to the score of every
(query i, key j) pair, where b = bucket(j - i):

    scores[h, i, j] = q_i . k_j + r[bucket(j - i), h]

The buckets (32, max distance 128 by default): with a bidirectional encoder, half of them are
for keys to the right (j > i) and half for the rest. Within each half, the first half of the
buckets are exact (distances 0 ... 7 of 16 buckets), and the rest cover larger distances on a
log scale that would reach its end at max_distance; with the defaults the last bucket takes
every distance from 91 on (113 for a causal decoder, which only sees j <= i and uses all the
buckets for the past).
Near tokens get their own scalars, far ones share: the bias cannot tell 500 from 5000.

T5 computes the bias in the first layer and shares it across the layers.
"""

from __future__ import annotations

import math
import numbers

import torch
import torch.nn as nn

from course_lib.positional.distances import check_positive, relative_positions

__all__ = ["T5RelativeBias", "t5_relative_bucket"]


def _bucket_layout(bidirectional: bool, num_buckets: int, max_distance: int) -> tuple[int, int]:
    """(buckets per side, exact buckets per side), after checking the arguments."""
    num_buckets = check_positive("num_buckets", num_buckets)
    max_distance = check_positive("max_distance", max_distance)
    if not isinstance(bidirectional, bool):
        raise TypeError(f"bidirectional must be True or False, got {bidirectional!r}.")
    half = num_buckets // 2 if bidirectional else num_buckets
    max_exact = half // 2
    if max_exact < 1 or max_distance <= max_exact:
        raise ValueError(f"num_buckets={num_buckets} and max_distance={max_distance} leave no room "
                         f"for log-spaced buckets: need num_buckets >= {4 if bidirectional else 2} "
                         f"and max_distance > {max(max_exact, 1)}.")
    return half, max_exact


def t5_relative_bucket(relative_position: torch.Tensor, bidirectional: bool = True,
                       num_buckets: int = 32, max_distance: int = 128) -> torch.Tensor:
    """The bucket (int64, same shape) of each relative position j - i.

    Equal to `transformers`' `T5Attention._relative_position_bucket` (the log-spaced buckets
    are computed in float32, as there, so the boundaries agree exactly).
    """
    if not isinstance(relative_position, torch.Tensor):
        raise TypeError(f"relative_position must be a tensor of integers j - i, got "
                        f"{type(relative_position).__name__}; wrap it with torch.tensor(...).")
    if relative_position.dtype.is_floating_point or relative_position.dtype == torch.bool \
            or relative_position.is_complex():
        raise TypeError(f"relative_position must be an integer tensor (j - i), got "
                        f"{relative_position.dtype}.")
    half, max_exact = _bucket_layout(bidirectional, num_buckets, max_distance)

    rel = relative_position.long()
    bucket = torch.zeros_like(rel)
    if bidirectional:
        bucket += (rel > 0).long() * half          # keys to the right get the upper half
        distance = rel.abs()
    else:
        distance = (-rel).clamp(min=0)             # future keys (masked anyway) share bucket 0
    is_exact = distance < max_exact
    # max_exact ... max_distance mapped log-linearly onto max_exact ... half - 1
    log_ratio = torch.log(distance.float().clamp(min=1) / max_exact) / math.log(max_distance / max_exact)
    far = max_exact + (log_ratio * (half - max_exact)).long()
    far = far.clamp(max=half - 1)
    return bucket + torch.where(is_exact, distance, far)


class T5RelativeBias(nn.Module):
    """r[bucket(j - i), h]: a (n_head, Tq, Tk) float bias to add to the attention scores.

    forward(Tq, Tk=None) -> bias (n_head, Tq, Tk); with Tk > Tq the queries are the last Tq
    positions (KV cache). Pass it as the float mask of `MultiHeadAttention` (it broadcasts over
    the batch) together with is_causal=True for a decoder. Parameters: num_buckets * n_head,
    whatever the sequence length. The scalars start at 0 (no positional preference).
    """

    def __init__(self, n_head: int, *, bidirectional: bool = True, num_buckets: int = 32,
                 max_distance: int = 128) -> None:
        super().__init__()
        self.n_head = check_positive("n_head", n_head)
        _bucket_layout(bidirectional, num_buckets, max_distance)
        self.bidirectional, self.num_buckets, self.max_distance = bidirectional, num_buckets, max_distance
        self.relative_attention_bias = nn.Embedding(num_buckets, n_head)
        nn.init.zeros_(self.relative_attention_bias.weight)

    def buckets(self, Tq: int, Tk: int | None = None) -> torch.Tensor:
        device = self.relative_attention_bias.weight.device
        return t5_relative_bucket(relative_positions(Tq, Tk=Tk, device=device), self.bidirectional,
                                  self.num_buckets, self.max_distance)

    def forward(self, Tq: int, Tk: int | None = None) -> torch.Tensor:
        if isinstance(Tq, torch.Tensor) or not isinstance(Tq, numbers.Integral):
            raise TypeError(f"T5RelativeBias takes sequence lengths (Tq, Tk), not a tensor; got "
                            f"{type(Tq).__name__}: call bias = t5_bias(x.shape[1]).")
        return self.relative_attention_bias(self.buckets(Tq, Tk)).permute(2, 0, 1)   # (H, Tq, Tk)

    def extra_repr(self) -> str:
        return (f"n_head={self.n_head}, bidirectional={self.bidirectional}, "
                f"num_buckets={self.num_buckets}, max_distance={self.max_distance}")
