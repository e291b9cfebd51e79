"""Spec of lesson 11's IO-aware attention: the online-softmax merge, the tiled forward and its
recomputing backward (course_lib.attention.flash), and the Triton kernel
(course_lib.attention.flash_triton) run by Triton's interpreter on the CPU.

References: the course's dense attention (values and autograd gradients, float64, 1e-9) and
PyTorch's `F.scaled_dot_product_attention` (float32, 1e-4 for the kernel as the issue asks;
the PyTorch version is far tighter).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.attention import scaled_dot_product_attention
from course_lib.attention.flash import (
    flash_attention,
    flash_attention_backward,
    flash_attention_forward,
    merge_softmax,
    softmax_grad_tile,
)
from course_lib.profiling import record_memory

pytestmark = pytest.mark.usefixtures("one_thread")
F64 = torch.float64


def _qkv(Tq, Tk, d=8, dv=5, batch=(2, 3), dtype=F64, seed=0, grad=False):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(*batch, Tq, d, generator=g, dtype=dtype)
    k = torch.randn(*batch, Tk, d, generator=g, dtype=dtype)
    v = torch.randn(*batch, Tk, dv, generator=g, dtype=dtype)
    return tuple(x.requires_grad_(grad) for x in (q, k, v))


def _end_aligned_causal(Tq, Tk):
    """Query i sees keys j <= i + Tk - Tq; for Tq > Tk the first queries see nothing."""
    return torch.ones(Tq, Tk, dtype=torch.bool).tril(Tk - Tq)


def _dense(q, k, v, causal):
    mask = _end_aligned_causal(q.shape[-2], k.shape[-2]) if causal else None
    return scaled_dot_product_attention(q, k, v, mask)[0]


CASES = [  # (Tq, Tk, causal, block_size): multiples of the block and not, Tq != Tk, tiny and huge blocks
    (37, 37, False, 8), (37, 37, True, 8), (64, 64, True, 16), (5, 41, True, 16), (41, 5, True, 4),
    (41, 5, False, 16), (33, 33, True, 1), (12, 12, True, 64), (1, 1, False, 64), (1, 30, True, 7),
]


@pytest.mark.parametrize(("Tq", "Tk", "causal", "block_size"), CASES)
def test_values_and_gradients_equal_dense_attention_in_float64(Tq, Tk, causal, block_size):
    q, k, v = _qkv(Tq, Tk, grad=True)
    out = flash_attention(q, k, v, causal=causal, block_size=block_size)
    expected = _dense(q, k, v, causal)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-9)
    grad_out = torch.randn_like(out)
    got = torch.autograd.grad(out, (q, k, v), grad_out)
    want = torch.autograd.grad(expected, (q, k, v), grad_out)
    for name, a, b in zip("qkv", got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-9, msg=f"d{name} differs")


def test_gradcheck_through_the_autograd_function():
    q, k, v = _qkv(7, 9, d=4, dv=3, batch=(1,), grad=True)
    assert torch.autograd.gradcheck(lambda q, k, v: flash_attention(q, k, v, causal=True, block_size=3), (q, k, v))


@settings(max_examples=25, deadline=None)
@given(Tq=st.integers(1, 20), Tk=st.integers(1, 20), block=st.integers(1, 24), causal=st.booleans(),
       scale=st.sampled_from([None, 0.1, 2.0]))
def test_any_shape_and_block_equals_dense(Tq, Tk, block, causal, scale):
    q, k, v = _qkv(Tq, Tk, batch=(2,), seed=Tq * 100 + Tk)
    mask = _end_aligned_causal(Tq, Tk) if causal else None
    expected = scaled_dot_product_attention(q, k, v, mask, scale=scale)[0]
    torch.testing.assert_close(flash_attention(q, k, v, causal=causal, block_size=block, scale=scale),
                               expected, rtol=0, atol=1e-9)


def test_float32_equals_pytorch_sdpa():
    q, k, v = _qkv(100, 100, d=16, dv=16, dtype=torch.float32)
    for causal in (False, True):
        torch.testing.assert_close(flash_attention(q, k, v, causal=causal, block_size=32),
                                   F.scaled_dot_product_attention(q, k, v, is_causal=causal), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_is_accumulated_in_float32(dtype):
    """The output equals float32 attention on the same (rounded) inputs, up to one rounding of
    the output; accumulating in half precision would be off by far more over 200 keys."""
    q, k, v = (x.to(dtype) for x in _qkv(200, 200, d=16, dv=16, dtype=torch.float32))
    out, lse = flash_attention_forward(q, k, v, causal=True, block_size=16)
    assert out.dtype == dtype
    assert lse.dtype == torch.float32
    exact = flash_attention(*(x.float() for x in (q, k, v)), causal=True)
    torch.testing.assert_close(out.float(), exact.to(dtype).float(), rtol=0, atol=float(torch.finfo(dtype).eps) * 4)


def test_no_second_derivative_through_the_saved_log_sum_exp():
    q, k, v = _qkv(6, 6, batch=(1,), grad=True)
    (dq,) = torch.autograd.grad(flash_attention(q, k, v).sum(), q, create_graph=True)
    assert not dq.requires_grad, "the backward is once-differentiable: no graph for a second derivative"
    with pytest.raises(RuntimeError):
        dq.sum().backward()


def test_log_sum_exp_and_fully_masked_rows():
    q, k, v = _qkv(6, 3, batch=(1,))
    out, lse = flash_attention_forward(q, k, v, causal=True, block_size=2)
    scores = (q @ k.transpose(-2, -1)) / 8 ** 0.5
    scores = scores.masked_fill(~_end_aligned_causal(6, 3), float("-inf"))
    torch.testing.assert_close(lse, torch.logsumexp(scores, -1), rtol=0, atol=1e-12)
    assert torch.isinf(lse[0, :3]).all(), "the first 3 queries see no key: L = -inf"
    assert (out[0, :3] == 0).all(), "a query that sees no key gets a zero output, as in dense attention"
    dq, dk, dv = flash_attention_backward(q, k, v, out, lse, torch.ones_like(out), causal=True, block_size=2)
    assert torch.isfinite(dq).all()
    assert torch.isfinite(dk).all()
    assert torch.isfinite(dv).all()


def test_no_tensor_of_t_squared_in_forward_or_backward():
    T, block = 512, 32
    q, k, v = _qkv(T, T, d=16, dv=16, batch=(1,), dtype=torch.float32)
    with record_memory() as forward:
        out, lse = flash_attention_forward(q, k, v, causal=True, block_size=block)
    with record_memory() as backward:
        flash_attention_backward(q, k, v, out, lse, torch.ones_like(out), causal=True, block_size=block)
    with record_memory() as dense:
        _dense(q, k, v, True)
    assert dense.largest_numel >= T * T
    for name, record in (("forward", forward), ("backward", backward)):
        assert record.largest_numel <= T * 16, f"{name} allocated {record.largest_shape}: a tile is {block} x {block}"
        assert record.peak_bytes < dense.peak_bytes / 8, f"{name}: peak {record.peak_bytes} vs dense {dense.peak_bytes}"


def test_autograd_saves_no_t_squared_tensor():
    T = 256
    q, k, v = _qkv(T, T, d=8, dv=8, batch=(1,), dtype=torch.float32, grad=True)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.numel()) or t, lambda t: t):
        out = flash_attention(q, k, v, causal=True, block_size=32)
    assert saved, "flash_attention saved nothing for its backward"
    assert max(saved) < T * T / 8, f"autograd saved tensors of sizes {saved}"
    out.sum().backward()
    assert q.grad is not None
    assert k.grad is not None
    assert v.grad is not None


def test_merge_softmax_of_two_halves_equals_one_softmax():
    g = torch.Generator().manual_seed(3)
    s = torch.randn(4, 10, generator=g, dtype=F64) * 5
    v = torch.randn(10, 3, generator=g, dtype=F64)

    def part(cols):
        m = s[:, cols].amax(-1)
        e = torch.exp(s[:, cols] - m[:, None])
        return m, e.sum(-1), (e / e.sum(-1, keepdim=True)) @ v[cols]

    m, l, o = merge_softmax(*part(slice(0, 4)), *part(slice(4, 10)))
    torch.testing.assert_close(o, torch.softmax(s, -1) @ v, rtol=0, atol=1e-12)
    torch.testing.assert_close(m + torch.log(l), torch.logsumexp(s, -1), rtol=0, atol=1e-12)
    empty = (torch.full((4,), float("-inf"), dtype=F64), torch.zeros(4, dtype=F64), torch.zeros(4, 3, dtype=F64))
    m2, l2, o2 = merge_softmax(*empty, *part(slice(0, 10)))
    torch.testing.assert_close(o2, torch.softmax(s, -1) @ v, rtol=0, atol=1e-12)
    m3, l3, o3 = merge_softmax(*empty, *empty)
    assert torch.isinf(m3).all()
    assert (l3 == 0).all()
    assert (o3 == 0).all()


def test_softmax_grad_tile_needs_only_the_rows_of_o_and_do():
    """dS of a tile that holds some of the keys equals autograd's dS restricted to them."""
    g = torch.Generator().manual_seed(4)
    S = torch.randn(2, 5, 9, generator=g, dtype=F64, requires_grad=True)
    V = torch.randn(2, 9, 3, generator=g, dtype=F64)
    dO = torch.randn(2, 5, 3, generator=g, dtype=F64)
    P = torch.softmax(S, -1)
    O = P @ V
    O.backward(dO)
    D = (dO * O).sum(-1, keepdim=True).detach()
    for cols in (slice(0, 4), slice(4, 9)):
        got = softmax_grad_tile(P[..., cols].detach(), (dO @ V.transpose(-2, -1))[..., cols], D)
        torch.testing.assert_close(got, S.grad[..., cols], rtol=0, atol=1e-12)


@pytest.mark.parametrize(("args", "kwargs", "error", "words"), [
    ((torch.zeros(4, 8), torch.zeros(4, 6), torch.zeros(4, 8)), {}, ValueError, "same last dim"),
    ((torch.zeros(4, 8), torch.zeros(4, 8), torch.zeros(5, 8)), {}, ValueError, "one row per key"),
    ((torch.zeros(2, 4, 8), torch.zeros(3, 4, 8), torch.zeros(3, 4, 8)), {}, ValueError, "same batch dims"),
    ((torch.zeros(4, 8), torch.zeros(4, 8), torch.zeros(4, 8)), {"block_size": 0}, ValueError, "block_size"),
    ((torch.zeros(4, 8, dtype=torch.long),) * 3, {}, TypeError, "floating point"),
    ((torch.zeros(8), torch.zeros(8), torch.zeros(8)), {}, ValueError, "(..., T, d)"),
])
def test_bad_input_gets_a_clear_error(args, kwargs, error, words):
    with pytest.raises(error, match=words.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        flash_attention(*args, **kwargs)


# --- The Triton kernel, under the interpreter -------------------------------------------------

# Without a GPU the kernel runs in Triton's interpreter (the root conftest.py turns it on before
# anything imports triton); with one, it is compiled and runs on CUDA tensors, where float32
# products use TF32 (about 1e-3 relative error).
if sys.platform == "linux":  # a dependency there: these tests must run (in the interpreter), never skip
    import course_lib.attention.flash_triton as triton_kernel
else:
    triton_kernel = pytest.importorskip("course_lib.attention.flash_triton", reason="triton exists for Linux only")


KERNEL_DEVICE = "cpu" if triton_kernel.interpreted() else "cuda"
KERNEL_TOL = 1e-4 if KERNEL_DEVICE == "cpu" else 1e-2


def _on_kernel_device(*tensors):
    return [t.to(KERNEL_DEVICE) for t in tensors]


def test_without_cuda_the_kernel_runs_in_the_interpreter():
    if not torch.cuda.is_available():
        assert triton_kernel.interpreted(), "without CUDA the tests must run the kernel in Triton's interpreter"


def test_importing_triton_before_the_interpreter_is_on_gets_a_clear_error():
    if torch.cuda.is_available():
        pytest.skip("with CUDA, flash_triton does not turn the interpreter on")
    code = "import triton\nimport course_lib.attention.flash_triton"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.returncode != 0
    assert "Set TRITON_INTERPRET=1 before anything imports triton" in done.stderr, done.stderr[-500:]


def test_without_cuda_importing_the_kernel_turns_the_interpreter_on():
    code = ("import os, torch; os.environ.pop('TRITON_INTERPRET', None)\n"
            "import course_lib.attention.flash_triton as f\n"
            "print(f.interpreted() == (not torch.cuda.is_available()))")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    printed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    assert printed.strip() == "True", printed


@pytest.mark.parametrize(("Tq", "Tk", "causal", "d", "dv"), [
    (37, 37, False, 8, 8), (37, 37, True, 16, 24), (5, 41, True, 16, 16), (41, 5, True, 32, 16), (17, 17, True, 64, 64),
])
def test_triton_kernel_equals_sdpa_in_float32(Tq, Tk, causal, d, dv):
    q, k, v = _qkv(Tq, Tk, d=d, dv=dv, dtype=torch.float32, seed=Tq + Tk)
    mask = _end_aligned_causal(Tq, Tk) if causal else None
    out, lse = triton_kernel.flash_attention_triton(*_on_kernel_device(q, k, v), causal=causal, return_lse=True)
    torch.testing.assert_close(out.cpu(), F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
                               rtol=KERNEL_TOL, atol=KERNEL_TOL)
    _, expected_lse = flash_attention_forward(q, k, v, causal=causal)
    torch.testing.assert_close(lse.cpu(), expected_lse, rtol=KERNEL_TOL, atol=KERNEL_TOL)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_triton_kernel_in_half_precision(dtype):
    """What the kernel is for: half-precision inputs, float32 accumulators, output in the input dtype.
    Triton 3.9's interpreter reads bfloat16 wrongly, so there bfloat16 is refused with a message."""
    if dtype == torch.bfloat16 and triton_kernel.interpreted():
        with pytest.raises(TypeError, match="interpreter"):
            triton_kernel.flash_attention_triton(*(torch.zeros(1, 16, 16, dtype=dtype),) * 3)
        return
    q, k, v = (x.to(dtype) for x in _qkv(33, 33, d=16, dv=16, batch=(1, 2), dtype=torch.float32))
    out = triton_kernel.flash_attention_triton(*_on_kernel_device(q, k, v), causal=True)
    assert out.dtype == dtype
    expected = F.scaled_dot_product_attention(*(x.float() for x in (q, k, v)), is_causal=True)
    torch.testing.assert_close(out.cpu().float(), expected, rtol=0, atol=4 * float(torch.finfo(dtype).eps))


def test_triton_kernel_with_larger_tiles_and_a_step_of_ones_own():
    if not triton_kernel.interpreted():
        pytest.skip("a plain Python step runs only in the interpreter")
    q, k, v = _qkv(40, 40, d=16, dv=16, batch=(1, 2), dtype=torch.float32)
    calls = []

    def counting_step(*args):  # a plain Python step: the interpreter calls it like a jit function
        calls.append(1)
        return triton_kernel.online_softmax_step(*args)

    out = triton_kernel.flash_attention_triton(q, k, v, causal=True, block_m=32, block_n=16, step=counting_step)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True), rtol=1e-4, atol=1e-4)
    # 2 query tiles x 2 heads; causal: tile 0 sees key tiles 0-1, tile 1 sees 0-2
    assert len(calls) == 2 * (2 + 3), len(calls)


def test_triton_kernel_refuses_bad_input():
    with pytest.raises(TypeError, match="float32, float16 and bfloat16"):
        triton_kernel.flash_attention_triton(*(torch.zeros(4, 8, dtype=F64),) * 3)
    with pytest.raises(ValueError, match="power of two"):
        triton_kernel.flash_attention_triton(*(torch.zeros(4, 16),) * 3, block_m=24)
    with pytest.raises(ValueError, match="same batch dims"):
        triton_kernel.flash_attention_triton(torch.zeros(2, 4, 16), torch.zeros(3, 4, 16), torch.zeros(3, 4, 16))


def test_without_triton_the_import_error_says_what_to_do():
    code = ("import sys; sys.modules['triton'] = None\n"
            "try:\n    import course_lib.attention.flash_triton\n"
            "except ImportError as e:\n    print(e)\nelse:\n    print('imported')")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    printed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    assert "needs the `triton` package" in printed, printed
    assert "flash_attention" in printed, printed
