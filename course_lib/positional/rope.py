"""Rotary position embedding (RoPE, Su et al. 2021, "RoFormer").

RoPE encodes position by *rotating* each query and key instead of adding a vector to the
input. Cut a head's d channels into d/2 pairs; pair i of the vector at position m is turned by
the angle m * theta_i, with

    theta_i = base^(-2i/d),     i = 0, 1, ..., d/2 - 1        (base = 10000)

(0-based; RoFormer writes theta_i = 10000^(-2(i-1)/d) for i = 1 ... d/2). As a matrix, R_m is
block-diagonal with the 2 x 2 rotations [[cos m theta_i, -sin m theta_i], [sin m theta_i,
cos m theta_i]], and since rotations compose, R_m^T R_n = R_(n-m):

    (R_m q) . (R_n k) = q^T R_m^T R_n k = q^T R_(n-m) k

The score of query m and key n depends on the positions only through n - m. Values are not
rotated.

Two channel layouts are in use. RoFormer (and this module's default) pairs neighbours
(2i, 2i+1): "interleaved". GPT-NeoX, Llama and `transformers`' `rotate_half` pair channel i
with channel i + d/2: "half". They are the same rotation applied to permuted channels:
apply_rope(x[..., p], layout="half") == apply_rope(x)[..., p] with p = `interleaved_to_half(d)`.
"""

from __future__ import annotations

import math
import numbers

import torch

from course_lib.attention import merge_heads
from course_lib.positional.self_attention import RelativeSelfAttention

__all__ = ["RotaryMultiHeadAttention", "apply_rope", "interleaved_to_half", "rope_angles", "rope_frequencies",
           "rope_rotation_matrix"]

LAYOUTS = ("interleaved", "half")


def _check_dim(d: int) -> int:
    if isinstance(d, bool) or not isinstance(d, numbers.Integral) or d < 2 or d % 2:
        raise ValueError(f"RoPE rotates pairs of channels, so the head dim must be a positive even "
                         f"integer, got d={d!r}; use an even head_size (e.g. 64).")
    return int(d)


def _check_base(base: float) -> float:
    if isinstance(base, bool) or not isinstance(base, numbers.Real) or not (
            base > 1 and math.isfinite(base)):
        raise ValueError(f"base must be a finite number > 1 (RoFormer uses 10000), got {base!r}.")
    return float(base)


def rope_frequencies(d: int, base: float = 10000.0,
                     device: torch.device | str | None = None) -> torch.Tensor:
    """theta_i = base^(-2i/d) for i = 0 ... d/2 - 1, float64, shape (d/2,)."""
    d, base = _check_dim(d), _check_base(base)
    two_i = torch.arange(0, d, 2, dtype=torch.float64, device=device)
    return base ** (-two_i / d)


def _positions(positions, T: int, batch_shape: torch.Size, device) -> torch.Tensor:
    if positions is None:
        return torch.arange(T, device=device)
    if isinstance(positions, numbers.Integral) and not isinstance(positions, bool):
        raise TypeError(f"positions must be a tensor of T={T} positions, got the int {positions}; "
                        f"for an offset p use torch.arange(p, p + {T}).")
    if not isinstance(positions, torch.Tensor):
        raise TypeError(f"positions must be a torch.Tensor, got {type(positions).__name__}; "
                        "wrap them with torch.tensor(positions).")
    if positions.dtype == torch.bool or positions.is_complex():
        raise TypeError(f"positions must be integer or floating, got {positions.dtype}.")
    shape_ok = positions.dim() >= 1 and positions.shape[-1] == T
    if shape_ok:
        try:
            shape_ok = torch.broadcast_shapes(positions.shape, (*batch_shape, T)) == (*batch_shape, T)
        except RuntimeError:
            shape_ok = False
    if not shape_ok:
        raise ValueError(f"positions of shape {tuple(positions.shape)} do not match x: they need one "
                         f"position per row, shape (T,) = ({T},) or one that broadcasts to x's "
                         f"leading dims {(*batch_shape, T)} (e.g. (B, 1, T) for x of shape "
                         "(B, H, T, d)).")
    return positions.to(device)


def rope_angles(positions: torch.Tensor, d: int, base: float = 10000.0) -> torch.Tensor:
    """m * theta_i for every position m: shape (*positions.shape, d/2), float64."""
    theta = rope_frequencies(d, base, device=positions.device)
    return positions.to(torch.float64)[..., None] * theta


def apply_rope(x: torch.Tensor, positions: torch.Tensor | None = None, base: float = 10000.0,
               *, layout: str = "interleaved") -> torch.Tensor:
    """Rotate every channel pair of x (..., T, d) by position * theta_i. Returns x's shape and dtype.

    positions: None for 0 ... T-1, or a tensor of shape (T,) (or broadcasting to x's leading
        dims, e.g. (B, 1, T)): the absolute position of each row, such as
        torch.arange(p, p + T) for new tokens after p cached ones.
    layout: "interleaved" pairs channels (2i, 2i+1) (RoFormer); "half" pairs (i, i + d/2)
        (GPT-NeoX, Llama, `transformers`).

    Pair (a, b) becomes (a cos - b sin, a sin + b cos). The angles are computed in float64 and
    cast to x's dtype, so large positions stay accurate.
    """
    if not isinstance(x, torch.Tensor) or x.dim() < 2:
        raise ValueError(f"x must be a tensor of shape (..., T, d), got "
                         f"{tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__}.")
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}.")
    T, d = x.shape[-2], _check_dim(x.shape[-1])
    pos = _positions(positions, T, x.shape[:-2], x.device)
    angles = rope_angles(pos, d, base)                       # (..., T, d/2)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    if layout == "interleaved":
        a, b = x[..., 0::2], x[..., 1::2]
        return torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2)
    a, b = x[..., : d // 2], x[..., d // 2:]
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)


def interleaved_to_half(d: int) -> torch.Tensor:
    """The channel order p = (0, 2, 4, ..., 1, 3, 5, ...) that turns the interleaved layout into
    the half layout: apply_rope(x[..., p], layout="half") == apply_rope(x)[..., p]."""
    d = _check_dim(d)
    return torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])


def rope_rotation_matrix(position: float, d: int, base: float = 10000.0,
                         dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """R_m (d, d): block-diagonal 2 x 2 rotations by m * theta_i, so apply_rope(x)[m] == R_m @ x[m].

    (With row vectors, as in the course notes, x R_m^T.) Built explicitly for teaching; apply_rope
    never forms it.
    """
    angles = rope_angles(torch.tensor(float(position)), d, base)
    cos, sin = angles.cos(), angles.sin()
    R = torch.zeros(d, d, dtype=torch.float64)
    i = torch.arange(0, d, 2)
    R[i, i], R[i, i + 1] = cos, -sin
    R[i + 1, i], R[i + 1, i + 1] = sin, cos
    return R.to(dtype)


class RotaryMultiHeadAttention(RelativeSelfAttention):
    """Multi-head self-attention whose queries and keys are rotated by `apply_rope` per head.

    The same module as `MultiHeadAttention` (MHA, GQA or MQA), with forward(x, mask=None,
    is_causal=False, need_weights=False, positions=None): positions are the tokens' absolute
    positions, (T,) for every sequence or (B, T) per sequence (like `transformers`'
    position_ids); default 0 ... T-1. Values are not rotated. Self-attention only.
    With a KV cache (cache=, lesson 08) x holds only the new tokens: pass their true positions
    (L ... L+T-1 after L cached tokens), or they would be rotated as if they came first.
    """

    def __init__(self, n_embd: int, n_head: int, n_kv_head: int | None = None,
                 dropout: float = 0.0, bias: bool = True, base: float = 10000.0) -> None:
        super().__init__(n_embd, n_head, n_kv_head, dropout, bias)
        _check_dim(self.head_size)
        self.base = _check_base(base)

    def forward(self, x: torch.Tensor, kv: torch.Tensor | None = None,
                mask: torch.Tensor | None = None, is_causal: bool = False,
                need_weights: bool = False, positions: torch.Tensor | None = None, *, cache=None
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        self.reject_kv(kv)
        self._check_input("x", x)
        B, T = x.shape[:2]
        if isinstance(positions, torch.Tensor) and positions.dim() != 1:
            if positions.shape != (B, T):
                raise ValueError(f"positions of shape {tuple(positions.shape)} do not match x of shape "
                                 f"{tuple(x.shape)}: pass (T,) = ({T},) positions shared by the batch "
                                 f"or (B, T) = ({B}, {T}), one row per sequence.")
            positions = positions[:, None, :]          # (B, 1, T): the same row for every head
        q, k, v = self.project_qkv(x)
        q = apply_rope(q, positions, self.base)
        k = apply_rope(k, positions, self.base)
        k, v = self.cached_kv(k, v, cache)      # keys are cached rotated, at their own positions
        out, weights = self.attend(q, k, v, mask=mask, is_causal=is_causal, need_weights=need_weights)
        return self.out_proj(merge_heads(out)), weights

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, base={self.base}"
