"""FlashAttention's forward pass as a Triton kernel (lesson 11).

One program instance computes one tile of BLOCK_M query rows of one (batch, head): it loads
its Q tile once, walks over the key/value tiles of BLOCK_N rows keeping the online softmax's
running max m, sum l and unnormalised output acc in registers (`online_softmax_step`), and
writes O = acc / l and the log-sum-exp L = m + log l. The grid is (ceil(Tq / BLOCK_M),
batch * heads). Neither the scores nor the weights ever leave the chip.

Triton compiles the kernel for an NVIDIA or AMD GPU. Without one, Triton's interpreter
(`TRITON_INTERPRET=1`) runs the same kernel on CPU tensors with NumPy, one program instance at a
time: slow, but exact enough to test against PyTorch. Importing this module on a machine without
CUDA sets `TRITON_INTERPRET=1` when it is unset, so the kernel runs there too; that must happen
before anything else in the process imports triton (the import says so otherwise).

`triton` exists for Linux (and for Windows as the separate `triton-windows`), not for macOS:
without it this module's import raises an ImportError that says so.
"""

from __future__ import annotations

import math
import os

import torch

from course_lib.attention._checks import check_qkv

try:
    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")   # read when the kernels are decorated below
    import triton
    import triton.language as tl
except ImportError as error:  # macOS, or a Linux install without the course's dependencies
    raise ImportError(
        "course_lib.attention.flash_triton needs the `triton` package, which is published for "
        "Linux only (the course installs it there: pip install -c constraints.txt triton). On "
        "macOS or Windows use course_lib.attention.flash.flash_attention, the same algorithm "
        f"in PyTorch. ({error})"
    ) from error

__all__ = ["flash_attention_triton", "interpreted", "online_softmax_step"]


def _check_interpreter_is_whole() -> None:
    """TRITON_INTERPRET is read when triton decorates its own library at import: a process that
    imported triton before setting it has compiled-mode `tl` functions, which the interpreter
    cannot call."""
    from triton.runtime.interpreter import InterpretedFunction

    if interpreted() and not isinstance(tl.zeros, InterpretedFunction):
        raise ImportError(
            "TRITON_INTERPRET=1 was set after triton had been imported in this process (by "
            "transformers or torch.compile, say), so Triton's interpreter cannot run kernels here. "
            "Set TRITON_INTERPRET=1 before anything imports triton: in the environment, or before "
            "the first import (a Jupyter kernel: restart it and import this module first)."
        )


def interpreted() -> bool:
    """True when Triton runs kernels in its CPU interpreter instead of compiling them."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


_check_interpreter_is_whole()


@triton.jit
def online_softmax_step(q, k, v, m_i, l_i, acc, allowed, scale):
    """One key tile of the online softmax, for a tile of BLOCK_M query rows.

    q (BLOCK_M, BLOCK_D), k (BLOCK_N, BLOCK_D), v (BLOCK_N, BLOCK_DV); m_i, l_i (BLOCK_M,) and
    acc (BLOCK_M, BLOCK_DV) in float32; allowed (BLOCK_M, BLOCK_N) is True where query row r
    may attend to key c. Returns the updated (m_i, l_i, acc).
    """
    s = tl.dot(q, tl.trans(k)) * scale                      # (BLOCK_M, BLOCK_N) scores
    s = tl.where(allowed, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    shift = tl.where(m_new == float("-inf"), 0.0, m_new)    # a row that has seen no key yet
    p = tl.exp(s - shift[:, None])
    alpha = tl.exp(m_i - shift)
    l_new = alpha * l_i + tl.sum(p, 1)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
    return m_new, l_new, acc


@triton.jit
def _flash_forward_kernel(
    Q, K, V, O, L,
    stride_qb, stride_qt, stride_kb, stride_kt, stride_vb, stride_vt, stride_ob, stride_ot,
    Tq, Tk, D, DV, scale,
    CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr, STEP: tl.constexpr,
):
    tile = tl.program_id(0)                       # which BLOCK_M query rows
    bh = tl.program_id(1)                         # which (batch, head)
    rows = tile * BLOCK_M + tl.arange(0, BLOCK_M)
    cols_d = tl.arange(0, BLOCK_D)
    cols_dv = tl.arange(0, BLOCK_DV)
    q = tl.load(Q + bh * stride_qb + rows[:, None] * stride_qt + cols_d[None, :],
                mask=(rows[:, None] < Tq) & (cols_d[None, :] < D), other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_DV], dtype=tl.float32)
    offset = Tk - Tq                              # queries aligned to the end of the keys
    end = Tk
    if CAUSAL:                                    # key tiles wholly in this tile's future: skipped
        end = tl.minimum(Tk, (tile + 1) * BLOCK_M + offset)
    for start in range(0, end, BLOCK_N):
        keys = start + tl.arange(0, BLOCK_N)
        k = tl.load(K + bh * stride_kb + keys[:, None] * stride_kt + cols_d[None, :],
                    mask=(keys[:, None] < Tk) & (cols_d[None, :] < D), other=0.0)
        v = tl.load(V + bh * stride_vb + keys[:, None] * stride_vt + cols_dv[None, :],
                    mask=(keys[:, None] < Tk) & (cols_dv[None, :] < DV), other=0.0)
        allowed = (keys[None, :] < Tk) & (rows[:, None] >= 0)   # (the rows term only broadcasts to 2-D)
        if CAUSAL:
            allowed = allowed & (keys[None, :] <= rows[:, None] + offset)
        m_i, l_i, acc = STEP(q, k, v, m_i, l_i, acc, allowed, scale)
    seen = l_i > 0
    l_safe = tl.where(seen, l_i, 1.0)
    out = acc / l_safe[:, None]                   # a row that saw no key: 0, as in dense attention
    tl.store(O + bh * stride_ob + rows[:, None] * stride_ot + cols_dv[None, :], out.to(O.dtype.element_ty),
             mask=(rows[:, None] < Tq) & (cols_dv[None, :] < DV))
    tl.store(L + bh * Tq + rows, tl.where(seen, m_i + tl.log(l_safe), float("-inf")), mask=rows < Tq)


def _block(n: int, smallest: int) -> int:
    return max(smallest, triton.next_power_of_2(max(n, 1)))


def flash_attention_triton(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
                           scale: float | None = None, block_m: int | None = None,
                           block_n: int | None = None, step=None, return_lse: bool = False):
    """softmax(Q K^T * scale) V by the Triton kernel: forward only (no autograd).

    q (..., Tq, d), k (..., Tk, d), v (..., Tk, d_v) with the same batch dims, on a CUDA device
    or, under TRITON_INTERPRET=1, on the CPU. Causal attention aligns the queries to the end of
    the keys, as `causal_mask` does. Tiles default to 64 x 64 on a GPU and 16 x 16 under the
    interpreter (powers of two; at least 16, tl.dot's smallest tile). On a GPU, float32 inputs go
    through tl.dot's default TF32 products (about 1e-3 relative error); bfloat16 and float16 are
    what the kernel is for. `step` replaces
    `online_softmax_step` (lesson 11 passes the learner's). Returns O (..., Tq, d_v) in q's
    dtype, and with return_lse=True also L (..., Tq) in float32.
    """
    check_qkv("flash_attention_triton", q, k, v)
    if q.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"flash_attention_triton: q, k and v need one dtype among float32, float16 and "
                        f"bfloat16, got {q.dtype}.")
    if q.dtype == torch.bfloat16 and interpreted():
        raise TypeError("flash_attention_triton: Triton's interpreter (TRITON_INTERPRET=1) reads bfloat16 "
                        "tensors wrongly (triton 3.9); use float16 or float32 here, bfloat16 on a GPU.")
    if not (q.device == k.device == v.device):
        raise ValueError("flash_attention_triton: q, k and v must be on one device.")
    if q.device.type == "cpu" and not interpreted():
        raise RuntimeError("flash_attention_triton got CPU tensors but Triton compiles for a GPU here: "
                           "move q, k, v to CUDA, or set TRITON_INTERPRET=1 before importing this module.")
    Tq, Tk, d, dv = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    batch = q.shape[:-2]
    q3, k3, v3 = (x.reshape(-1, x.shape[-2], x.shape[-1]).contiguous() for x in (q, k, v))
    out = torch.empty(q3.shape[0], Tq, dv, dtype=q.dtype, device=q.device)
    lse = torch.empty(q3.shape[0], Tq, dtype=torch.float32, device=q.device)
    default = 16 if interpreted() else 64
    block_m = block_m or default
    block_n = block_n or default
    for name, b in (("block_m", block_m), ("block_n", block_n)):
        if b < 16 or b & (b - 1):
            raise ValueError(f"flash_attention_triton: {name} must be a power of two >= 16, got {b}.")
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    if q3.shape[0] and Tq:
        grid = (triton.cdiv(Tq, block_m), q3.shape[0])
        _flash_forward_kernel[grid](
            q3, k3, v3, out, lse,
            q3.stride(0), q3.stride(1), k3.stride(0), k3.stride(1), v3.stride(0), v3.stride(1),
            out.stride(0), out.stride(1),
            Tq, Tk, d, dv, scale,
            CAUSAL=bool(causal), BLOCK_M=block_m, BLOCK_N=block_n,
            BLOCK_D=_block(d, 16), BLOCK_DV=_block(dv, 16), STEP=step or online_softmax_step,
        )
    out = out.reshape(*batch, Tq, dv)
    return (out, lse.reshape(*batch, Tq)) if return_lse else out
