"""Claim (lesson 04): `local_attention` computes sliding-window attention without the T x T
matrix, so at T = 16384 it runs >= 5x faster than PyTorch's fused attention given the
equivalent bool mask, and its memory grows linearly in T (log-log slope about 1).

Peers, on the same (B, H, T, head_size) float32 tensors, in inference mode:
- F.sdpa:   torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=local_mask);
- explicit: course_lib.attention.scaled_dot_product_attention(q, k, v, local_mask), the
            lesson 03 version (T x T scores, softmax, weights @ V).
Ours: course_lib.attention.local_attention(q, k, v, window). Window c = 129 (c must be odd:
the token and 64 neighbours on each side, the nearest to "window 128"). The bool mask is
built once before timing, as a user would cache it, and is not counted in the peers' time or
memory (it is T^2 bytes; the table notes it).

Second table: block_attention with n = T / 128 blocks (a fixed random permutation) against
F.sdpa with the equivalent block_mask. Where CUDA is available, a third table adds
FlexAttention (torch.compile'd flex_attention with a BlockMask from the same mask_mod).

Memory, two figures per call:
- record_memory: course_lib.profiling.record_memory, the bytes of the tensors the ATen
  operators return (deterministic). It cannot see inside a fused kernel: for F.sdpa it only
  counts the output.
- allocator: the peak of the CPU allocator during the call, from torch.profiler's memory
  events (it includes a fused kernel's own buffers, e.g. F.sdpa's float copy of the mask).
  On CUDA: torch.cuda.max_memory_allocated.

Timing: per method, one warm-up call, then at least `--rounds` calls in a row (more when a
call is fast: about 0.5 s worth, at most 20); the table gives the median. The methods are not
interleaved call by call: a GB-sized allocation freed by one method makes the next method's
first allocations fault pages in again, which would charge the dense peers' cost to
local_attention; and each method waits `--settle` seconds first (see `settle`). Slopes are
least-squares fits of log(time) and log(memory) against log(T). Outputs are checked against
local_attention (atol = rtol = 1e-4).

    python benchmarks/sparse_attention.py            # T in {1024, 4096, 16384}, B = 1, H = 2
    python benchmarks/sparse_attention.py --quick    # T in {256, 512, 1024}: a smoke test
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gc
import json
import os
import platform
import statistics
import tempfile
import time

import torch
import torch.nn.functional as F

from course_lib.attention import (
    block_attention,
    block_mask,
    local_attention,
    local_mask,
    scaled_dot_product_attention,
)
from course_lib.profiling import record_memory
from course_lib.viz.plots import loglog_slope as slope

D_HEAD = 64
BLOCK = 128                 # block_attention: n = T / BLOCK blocks
GOAL_SPEEDUP = 5.0          # local vs F.sdpa with the mask ...
GOAL_T = 16384              # ... at this T
TOL = {"atol": 1e-4, "rtol": 1e-4}
MB = 2**20


@contextlib.contextmanager
def _quiet_stderr():
    """Silence the profiler's C++ start/stop lines (written to file descriptor 2)."""
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def allocator_peak(fn, device: str) -> int:
    """Peak bytes the device allocator holds during fn() beyond what it held before."""
    if device == "cuda":
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        fn()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - before
    from torch.profiler import ProfilerActivity, profile
    with _quiet_stderr(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        with _quiet_stderr():
            prof.export_chrome_trace(path)
        with open(path) as f:
            events = [e["args"] for e in json.load(f)["traceEvents"] if e.get("name") == "[memory]"]
    if not events:
        return 0
    # "Total Allocated" counts what the allocator handed out since profiling began
    baseline = events[0]["Total Allocated"] - events[0]["Bytes"]
    return max(e["Total Allocated"] for e in events) - baseline


def record_peak(fn) -> int:
    with record_memory() as mem:
        fn()
    return mem.peak_bytes


def measure(fn, rounds: int, device: str, target_s: float = 0.5):
    """(median seconds per call, output of the warm-up call). One warm-up call, then
    max(rounds, about target_s worth, at most 20) timed calls in a row."""
    _sync(device)
    start = time.perf_counter()
    out = fn()
    _sync(device)
    n = max(rounds, min(20, int(target_s / (time.perf_counter() - start))))
    times = []
    for _ in range(n):
        _sync(device)
        start = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def settle(seconds: float) -> None:
    """Let the machine settle before timing: on a VM, freeing the dense peers' GBs keeps the
    guest kernel busy returning pages for a second or two, which slows whatever runs next."""
    gc.collect()
    time.sleep(seconds)


def run_table(title: str, seq_lens, make_fns, rounds: int, device: str,
              settle_s: float) -> dict:
    """Time and measure every method at every T; print a markdown table; return the figures."""
    print(f"\n### {title}\n")
    print("| T | method | time (ms) | time / ours | record_memory peak (MB) "
          "| allocator peak (MB) | allocator peak / ours |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    results: dict[str, dict[str, list[float]]] = {}
    for T in seq_lens:
        fns, note = make_fns(T)
        times, outputs = {}, {}
        for name, fn in fns.items():
            settle(settle_s)
            times[name], outputs[name] = measure(fn, rounds, device)
        ours_name = next(iter(fns))
        for name, out in outputs.items():
            torch.testing.assert_close(out, outputs[ours_name], **TOL,
                                       msg=lambda m, name=name, T=T: f"{name} at T={T}: {m}")
        del outputs
        # compiled FlexAttention is a higher-order operator that record_memory's dispatch mode
        # cannot see into (and trying poisons its compile cache): the allocator column counts it
        rec = {name: float("nan") if name == "FlexAttention" else record_peak(fn)
               for name, fn in fns.items()}
        alloc = {name: allocator_peak(fn, device) for name, fn in fns.items()}
        for name in fns:
            r = results.setdefault(name, {"T": [], "time": [], "record": [], "alloc": []})
            r["T"].append(T)
            r["time"].append(times[name])
            r["record"].append(rec[name])
            r["alloc"].append(alloc[name])
            print(f"| {T} | {name} | {times[name] * 1e3:.2f} "
                  f"| {times[name] / times[ours_name]:.2f}x | {rec[name] / MB:.1f} "
                  f"| {alloc[name] / MB:.1f} | {alloc[name] / max(alloc[ours_name], 1):.1f}x |",
                  flush=True)
        if note:
            print(f"| {T} | ({note}) | | | | | |")
    if len(seq_lens) > 1:
        print("\nlog-log slopes against T (time; record_memory peak; allocator peak):")
        for name, r in results.items():
            print(f"- {name}: time {slope(r['T'], r['time']):.2f}, record_memory "
                  f"{slope(r['T'], r['record']):.2f}, allocator {slope(r['T'], r['alloc']):.2f}")
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seq-lens", type=int, nargs="+", default=None)
    parser.add_argument("--quick", action="store_true", help="T in {256, 512, 1024}")
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--window", type=int, default=129)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--settle", type=float, default=2.0,
                        help="seconds of pause before timing each method")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch.set_num_threads (default: PyTorch's choice)")
    parser.add_argument("--skip-cpu", action="store_true", help="only the CUDA table")
    args = parser.parse_args()
    seq_lens = args.seq_lens or ([256, 512, 1024] if args.quick else [1024, 4096, 16384])
    if args.threads:
        torch.set_num_threads(args.threads)
    c, H = args.window, args.heads
    gen = torch.Generator().manual_seed(0)

    print(f"# sparse attention on CPU: B=1, H={H}, head_size={D_HEAD}, window c={c}, float32, "
          f"inference mode")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"{os.cpu_count()} CPUs, {platform.processor() or platform.machine()}, "
          f"rounds={args.rounds}, {datetime.date.today()}")

    def qkv(T, device="cpu"):
        return tuple(torch.randn(1, H, T, D_HEAD, generator=gen).to(device) for _ in range(3))

    def local_fns(T):
        q, k, v = qkv(T)
        mask = local_mask(T, c)
        return ({"local_attention": lambda: local_attention(q, k, v, c),
                 "F.sdpa + mask": lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
                 "explicit + mask": lambda: scaled_dot_product_attention(q, k, v, mask)[0]},
                f"bool mask not counted: {T * T / MB:.1f} MB")

    def block_fns(T):
        n = T // BLOCK
        q, k, v = qkv(T)
        perm = torch.randperm(n, generator=gen)
        mask = block_mask(T, n, perm)
        return ({"block_attention": lambda: block_attention(q, k, v, n, perm),
                 "F.sdpa + block_mask": lambda: F.scaled_dot_product_attention(q, k, v,
                                                                               attn_mask=mask)},
                f"n = {n} blocks; bool mask not counted: {T * T / MB:.1f} MB")

    if args.skip_cpu:
        if not torch.cuda.is_available():
            raise SystemExit("--skip-cpu leaves only the CUDA table, and CUDA is not available")
        run_cuda(seq_lens, c, H, args.rounds, args.settle)
        return
    with torch.inference_mode():
        local = run_table(f"local attention, window {c}", seq_lens, local_fns, args.rounds, "cpu",
                          args.settle)
        run_table(f"block attention, blocks of {BLOCK}", seq_lens, block_fns, args.rounds, "cpu",
                  args.settle)

    T_max = max(seq_lens)
    speedup = local["F.sdpa + mask"]["time"][-1] / local["local_attention"]["time"][-1]
    mem_slope = slope(local["local_attention"]["T"], local["local_attention"]["alloc"])
    met = speedup >= GOAL_SPEEDUP and mem_slope < 1.2
    verdict = ("met" if met else "NOT met") if T_max >= GOAL_T else \
        f"not judged (the goal is stated at T = {GOAL_T})"
    print(f"\nat T={T_max}: local_attention is {speedup:.1f}x faster than F.sdpa + mask "
          f"(goal >= {GOAL_SPEEDUP}x); its memory slope is {mem_slope:.2f} (goal: linear, ~1): "
          f"{verdict}")

    if torch.cuda.is_available():
        run_cuda(seq_lens, c, H, args.rounds, args.settle)
    else:
        print("\nCUDA not available: FlexAttention (compiled) skipped.")


def run_cuda(seq_lens, c: int, H: int, rounds: int, settle_s: float) -> None:
    """local_attention vs F.sdpa + mask vs compiled FlexAttention, on the GPU."""
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    except ImportError:
        print("\nthis torch has no FlexAttention: CUDA table skipped.")
        return
    r = (c - 1) // 2
    flex = torch.compile(flex_attention)
    gen = torch.Generator().manual_seed(1)

    def mask_mod(b, h, q_idx, kv_idx):
        return (q_idx - kv_idx <= r) & (kv_idx - q_idx <= r)

    def cuda_fns(T):
        q, k, v = (torch.randn(1, H, T, D_HEAD, generator=gen).cuda() for _ in range(3))
        mask = local_mask(T, c, device="cuda")
        block = create_block_mask(mask_mod, None, None, T, T, device="cuda")
        return ({"local_attention": lambda: local_attention(q, k, v, c),
                 "F.sdpa + mask": lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
                 "FlexAttention": lambda: flex(q, k, v, block_mask=block)}, None)

    print(f"\n{torch.cuda.get_device_name()}")
    with torch.inference_mode():
        run_table(f"CUDA: local attention, window {c}", seq_lens, cuda_fns, rounds, "cuda",
                  settle_s)


if __name__ == "__main__":
    main()
