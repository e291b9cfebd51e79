"""ALiBi: attention with linear biases (Press, Smith and Lewis, 2022, "Train Short, Test Long").

No position vector is added anywhere. Each head h adds a fixed penalty proportional to the
distance to every score:

    scores[h, i, j] = q_i . k_j / sqrt(d) - m_h * |i - j|

The slopes m_h form a geometric sequence. For n heads (a power of two) they start at
2^(-8/n) with that same ratio: n = 8 gives 1/2, 1/4, ..., 1/256, n = 16 gives 2^(-0.5), 2^(-1),
..., 2^(-8). For other head counts the paper takes the 2^floor(log2 n) slopes of the nearest
smaller power of two, then fills the remaining heads with every other slope of the next power
of two, starting from the first (0-based indices 0, 2, 4, ...: they fall in between).
Steep heads look only at their neighbours; shallow ones see far back.
"""

from __future__ import annotations

import math

import torch

from course_lib.positional.distances import check_positive, relative_positions
from course_lib.vocabulary import accepts_older_names

__all__ = ["alibi_bias", "alibi_slopes"]


def _power_of_two_slopes(n: int) -> list[float]:
    start = 2.0 ** (-8.0 / n)
    return [start ** (h + 1) for h in range(n)]


@accepts_older_names
def alibi_slopes(n_head: int) -> torch.Tensor:
    """The paper's slopes m_0 ... m_(H-1), float32, shape (n_head,), for any head count."""
    n = check_positive("n_head", n_head)
    if n & (n - 1) == 0:
        slopes = _power_of_two_slopes(n)
    else:
        below = 2 ** math.floor(math.log2(n))
        slopes = _power_of_two_slopes(below) + _power_of_two_slopes(2 * below)[0::2][: n - below]
    return torch.tensor(slopes, dtype=torch.float32)


@accepts_older_names
def alibi_bias(n_head: int, T: int, *, Tk: int | None = None,
               device: torch.device | str | None = None) -> torch.Tensor:
    """-m_h * |i - j|, shape (n_head, T, Tk): add it to the scores (it broadcasts over batches).

    Tk (default T) > T puts the queries at the last T positions (for a KV cache). Combine it
    with a causal mask for a decoder; the paper's decoder only ever sees j <= i, where the
    bias is -m_h * (i - j).
    """
    distance = relative_positions(T, Tk=Tk, device=device).abs().to(torch.float32)  # (T, Tk)
    return 0.0 - alibi_slopes(n_head).to(device)[:, None, None] * distance   # 0 - 0 is +0, not -0

