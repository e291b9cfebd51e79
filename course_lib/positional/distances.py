"""Relative distances: the (query, key) offset matrix that relative position schemes index.

Entry (i, j) is j - i: how far key j lies from query i (positive = to the right, in the
future). For the course notes' sentence "somewhere something incredible is waiting to be
known" (T = 8) the rows run 0 ... 7, -1 ... 6, ..., -7 ... 0: 2T - 1 = 15 distinct values.
Clipping at k keeps only -k ... k, 2k + 1 values, whatever the length (Shaw et al.).
"""

from __future__ import annotations

import torch

from course_lib.attention._checks import check_int

__all__ = ["relative_positions"]


def check_positive(name: str, value) -> int:
    return check_int(name, value, 1, "a positive integer")


def check_clip(k) -> int:
    return check_int("the clipping distance k", k, 0,
                     "an integer >= 0 (distances are clipped to -k ... k)")


def relative_positions(T: int, k: int | None = None, *, Tk: int | None = None,
                       device: torch.device | str | None = None) -> torch.Tensor:
    """(T, Tk) int64 matrix of clip(j - i, -k, k); k=None does not clip.

    Tk (default T) > T puts the T queries at the *last* T of the Tk positions (query i sits at
    position Tk - T + i), which is what a KV cache needs: one new query against Tk keys.
    """
    Tq = check_positive("T", T)
    Tk = Tq if Tk is None else check_positive("Tk", Tk)
    if Tk < Tq:
        raise ValueError(f"Tk={Tk} < T={Tq}: the queries are the last T of the Tk positions, so "
                         "Tk must be >= T.")
    query_pos = torch.arange(Tk - Tq, Tk, device=device)
    key_pos = torch.arange(Tk, device=device)
    distance = key_pos[None, :] - query_pos[:, None]
    if k is None:
        return distance
    k = check_clip(k)
    return distance.clamp(-k, k)
