"""Claim (lesson 11): tiled attention with an online softmax is exact and its memory grows
linearly in T, where dense attention's grows as T^2; on a GPU, the Triton kernel's forward is
within 2x of PyTorch's FlashAttention backend at T >= 4k.

CPU table (float32, B = 1, H = 4, d = 64, causal, one thread), per T:
- dense:    course_lib.attention.scaled_dot_product_attention (lesson 03: S and A are T x T);
- tiled:    course_lib.attention.flash.flash_attention (PyTorch loops over 128 x 128 tiles,
            recomputing backward);
- F.sdpa:   torch.nn.functional.scaled_dot_product_attention (PyTorch's fused CPU kernel).
Forward time, forward + backward time (the gradients of all three are compared), and the peak
of the tensors allocated in the forward (course_lib.profiling.record_memory: exact, but blind
inside a fused kernel, which for F.sdpa counts only its outputs). Times are medians of
`--rounds` calls after a warm-up. Slopes are least-squares fits of log(y) against log(T).

GPU table (only where CUDA is available; bfloat16, B = 4, H = 16, d = 64, causal): forward
time of course_lib.attention.flash_triton.flash_attention_triton (64 x 64 tiles), of F.sdpa
restricted to its FlashAttention backend, and of the naive dense PyTorch version (where its
T x T matrices fit), T = 1k ... 16k, with CUDA events; the ratio Triton / flash backend.

    python benchmarks/flash_attention.py            # CPU: T in {512, 1024, 2048, 4096}
    python benchmarks/flash_attention.py --quick    # CPU: T in {256, 512}: a smoke test
"""

from __future__ import annotations

import argparse
import datetime
import platform
import statistics
import time

import torch
import torch.nn.functional as F

from course_lib.attention import scaled_dot_product_attention
from course_lib.attention.flash import flash_attention
from course_lib.profiling import record_memory
from course_lib.viz.plots import loglog_slope


def median_seconds(fn, rounds: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def cpu_table(lengths: list[int], rounds: int) -> None:
    torch.set_num_threads(1)
    methods = {
        "dense": lambda q, k, v: scaled_dot_product_attention(q, k, v, is_causal=True)[0],
        "tiled": lambda q, k, v: flash_attention(q, k, v, causal=True, block_size=128),
        "F.sdpa": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
    }
    rows, peaks = [], {name: [] for name in methods}
    for T in lengths:
        g = torch.Generator().manual_seed(T)
        q, k, v = (torch.randn(1, 4, T, 64, generator=g) for _ in range(3))
        grad = torch.randn(1, 4, T, 64, generator=g)
        reference = None
        row = {"T": T}
        for name, fn in methods.items():
            with torch.inference_mode():
                with record_memory() as mem:
                    out = fn(q, k, v)
                row[f"{name} fwd"] = median_seconds(lambda fn=fn, q=q, k=k, v=v: fn(q, k, v), rounds)
            peaks[name].append(mem.peak_bytes)
            row[f"{name} MiB"] = mem.peak_bytes / 2**20
            leaves = [x.clone().requires_grad_() for x in (q, k, v)]

            def forward_backward(fn=fn, leaves=leaves, grad=grad):
                return torch.autograd.grad(fn(*leaves), leaves, grad)

            grads = forward_backward()
            row[f"{name} fwd+bwd"] = median_seconds(forward_backward, rounds)
            if reference is None:
                reference = (out, grads)
            else:
                torch.testing.assert_close(out, reference[0], rtol=1e-4, atol=1e-4, msg=f"{name} output differs")
                for a, b in zip(grads, reference[1], strict=True):
                    torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-3, msg=f"{name} gradient differs")
        rows.append(row)
        print(f"T = {T}: " + ", ".join(f"{key} {value:.4g}" for key, value in row.items() if key != "T"), flush=True)

    print("\n| T | dense fwd (ms) | tiled fwd (ms) | F.sdpa fwd (ms) | dense fwd+bwd (ms) | tiled fwd+bwd (ms) "
          "| F.sdpa fwd+bwd (ms) | tiled / dense, fwd+bwd | dense peak (MiB) | tiled peak (MiB) |")
    print("|---:" * 10 + "|")
    for r in rows:
        print(f"| {r['T']} | {1e3 * r['dense fwd']:.1f} | {1e3 * r['tiled fwd']:.1f} | {1e3 * r['F.sdpa fwd']:.1f} "
              f"| {1e3 * r['dense fwd+bwd']:.1f} | {1e3 * r['tiled fwd+bwd']:.1f} | {1e3 * r['F.sdpa fwd+bwd']:.1f} "
              f"| {r['tiled fwd+bwd'] / r['dense fwd+bwd']:.2f}× | {r['dense MiB']:.1f} | {r['tiled MiB']:.2f} |")
    print("\nlog-log slopes against T:")
    for name in methods:
        fwd = [r[f"{name} fwd"] for r in rows]
        print(f"  {name:7} forward time {loglog_slope(lengths, fwd):.2f}, peak memory {loglog_slope(lengths, peaks[name]):.2f}")


def gpu_table(lengths: list[int], rounds: int) -> None:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from course_lib.attention.flash_triton import flash_attention_triton

    def cuda_ms(fn) -> float:
        fn()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        times = []
        for _ in range(rounds):
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        return statistics.median(times)

    print(f"\nGPU: {torch.cuda.get_device_name()}, bfloat16, B = 4, H = 16, d = 64, causal, forward")
    print("| T | Triton (ms) | F.sdpa flash backend (ms) | naive PyTorch (ms) | Triton / flash backend |")
    print("|---:|---:|---:|---:|---:|")
    for T in lengths:
        q, k, v = (torch.randn(4, 16, T, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        out = flash_attention_triton(q, k, v, causal=True)
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            flash_ms = cuda_ms(lambda q=q, k=k, v=v: F.scaled_dot_product_attention(q, k, v, is_causal=True))
        torch.testing.assert_close(out, expected, rtol=2e-2, atol=2e-2)
        triton_ms = cuda_ms(lambda q=q, k=k, v=v: flash_attention_triton(q, k, v, causal=True))
        naive = "out of memory"
        if 4 * 16 * T * T * 2 * 3 < torch.cuda.mem_get_info()[0]:   # S, A and a temporary, in bf16
            naive = f"{cuda_ms(lambda q=q, k=k, v=v: scaled_dot_product_attention(q, k, v, is_causal=True)[0]):.2f}"
        print(f"| {T} | {triton_ms:.2f} | {flash_ms:.2f} | {naive} | {triton_ms / flash_ms:.2f}× |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke test")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--skip-cpu", action="store_true", help="only the GPU table")
    args = parser.parse_args()
    print(f"{datetime.date.today()} {platform.machine()} {platform.system()}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads available")
    if not args.skip_cpu:
        cpu_table([256, 512] if args.quick else [512, 1024, 2048, 4096], args.rounds)
    if torch.cuda.is_available():
        gpu_table([1024, 2048] if args.quick else [1024, 2048, 4096, 8192, 16384], max(args.rounds, 10))
    else:
        print("\nno CUDA GPU: the Triton kernel's timings need one (under TRITON_INTERPRET=1 it runs in NumPy)")


if __name__ == "__main__":
    main()
