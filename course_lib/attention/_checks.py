"""Argument checks shared by the attention modules, with messages that name the argument."""

from __future__ import annotations

import numbers

import torch


def check_int(name: str, value, minimum: int, requirement: str | None = None) -> int:
    """value as an int, or ValueError if it is not an integer >= minimum (bools are refused).

    The message says "{name} must be {requirement}", by default "an integer >= {minimum}".
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        requirement = requirement or f"an integer >= {minimum}"
        raise ValueError(f"{name} must be {requirement}, got {value!r}.")
    return int(value)


def check_qkv(name: str, q, k, v, *, same_length: bool = False) -> None:
    """q (..., Tq, d), k (..., Tk, d), v (..., Tk, d_v): floating point, one dtype, the same batch
    dims (no broadcasting); with same_length (self-attention) also Tq == Tk. Errors name `name`."""
    for label, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor) or x.dim() < 2:
            raise ValueError(f"{name}: {label} must be a tensor of shape (..., T, d), got "
                             f"{getattr(x, 'shape', type(x).__name__)}.")
        if not x.dtype.is_floating_point:
            raise TypeError(f"{name}: {label} must be floating point, got {x.dtype}.")
    if same_length and not q.shape[-2] == k.shape[-2] == v.shape[-2]:
        raise ValueError(f"{name} is self-attention: q, k and v need the same length T, got "
                         f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}.")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"{name}: q and k need the same last dim d, got q {tuple(q.shape)} and k "
                         f"{tuple(k.shape)}: pass k as (..., Tk, d), not transposed.")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"{name}: k and v need one row per key (the same Tk), got k {tuple(k.shape)} "
                         f"and v {tuple(v.shape)}.")
    if not q.shape[:-2] == k.shape[:-2] == v.shape[:-2]:
        raise ValueError(f"{name}: q, k and v need the same batch dims, got {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, {tuple(v.shape)}; expand them first (k.expand(...)).")
    if not q.dtype == k.dtype == v.dtype:
        raise TypeError(f"{name}: q, k and v need one dtype, got {q.dtype}, {k.dtype}, {v.dtype}.")
