"""Measured (lesson 05): what each relative position scheme costs over plain attention on CPU, and
Shaw's relative keys and values computed through the 2k + 1 distance vectors (gather / scatter)
are much cheaper than the direct form, which builds (T, T, head_size) tables of a^K_ij and a^V_ij.

One causal self-attention layer (n_embd = 256, 4 heads of 64, float32, inference mode, B = 1),
projections included, on the same input. Peer: course_lib.attention.MultiHeadAttention (fused
causal path, no position information). Each scheme's time is printed with its ratio to the
peer, measured in the same rounds (benchmarks/attention.py's `measure`), and the peak bytes of
the tensors it creates (course_lib.profiling.record_memory; a fused kernel's internal buffers
are not seen). Shaw's direct form is checked to give the same output as ours.

    python benchmarks/positional_attention.py              # T in {256, 1024, 2048}
    python benchmarks/positional_attention.py --quick      # T in {64, 128}
"""

from __future__ import annotations

import argparse
import math
import platform

import torch
from attention import measure  # benchmarks/attention.py, next to this script

from course_lib.attention import MultiHeadAttention, merge_heads
from course_lib.positional import (
    RotaryMultiHeadAttention,
    ShawRelativeAttention,
    T5RelativeBias,
    TransformerXLRelativeAttention,
    alibi_bias,
    relative_positions,
)
from course_lib.profiling import record_memory

D_MODEL, N_HEADS, CLIP = 256, 4, 16


def shaw_direct(layer: ShawRelativeAttention, x: torch.Tensor) -> torch.Tensor:
    """Shaw et al. as written: a^K_ij and a^V_ij gathered into (T, T, head_size) tables."""
    q, k, v = layer.project_qkv(x)
    T = x.shape[1]
    index = relative_positions(T, CLIP) + CLIP
    a_k, a_v = layer.rel_k[index], layer.rel_v[index]                      # (T, T, head_size) each
    scores = (q @ k.transpose(-2, -1) + torch.einsum("bhid,ijd->bhij", q, a_k)) / math.sqrt(layer.head_size)
    scores = scores.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    out = weights @ v + torch.einsum("bhij,ijd->bhid", weights, a_v)
    return layer.out_proj(merge_heads(out))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seq-lens", type=int, nargs="+", default=[256, 1024, 2048])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--target-ms", type=float, default=150.0)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.seq_lens, args.rounds, args.target_ms = [64, 128], 2, 20.0
    torch.manual_seed(0)
    mha = MultiHeadAttention(D_MODEL, N_HEADS).eval()
    rope = RotaryMultiHeadAttention(D_MODEL, N_HEADS).eval()
    shaw = ShawRelativeAttention(D_MODEL, N_HEADS, CLIP).eval()
    txl = TransformerXLRelativeAttention(D_MODEL, N_HEADS).eval()
    t5 = T5RelativeBias(N_HEADS, bidirectional=False).eval()
    torch.nn.init.normal_(t5.relative_attention_bias.weight)
    print(f"# one causal self-attention layer, n_embd={D_MODEL}, {N_HEADS} heads, float32, B=1, inference")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"{platform.processor() or platform.machine()}, rounds={args.rounds}\n")
    print("| T | scheme | time (ms) | time / MHA | peak MiB created |")
    print("|---:|---|---:|---:|---:|")
    with torch.inference_mode():
        for T in args.seq_lens:
            x = torch.randn(1, T, D_MODEL)
            fns = {
                "MHA, no positions (peer)": lambda x=x: mha(x, is_causal=True),
                "RoPE": lambda x=x: rope(x, is_causal=True),
                "ALiBi (bias built per call)": lambda x=x, T=T: mha(x, mask=alibi_bias(N_HEADS, T), is_causal=True),
                "T5 bias (built per call)": lambda x=x, T=T: mha(x, mask=t5(T), is_causal=True),
                "Transformer-XL": lambda x=x: txl(x, is_causal=True),
                f"Shaw, k = {CLIP} (ours: 2k + 1 vectors)": lambda x=x: shaw(x, is_causal=True),
                f"Shaw, k = {CLIP} (direct: T x T x d tables)": lambda x=x: shaw_direct(shaw, x),
            }
            torch.testing.assert_close(shaw_direct(shaw, x), shaw(x, is_causal=True)[0], rtol=1e-4, atol=1e-4)
            results = measure(fns, args.rounds, args.target_ms / 1000)
            for name, fn in fns.items():
                with record_memory() as mem:
                    fn()
                seconds, ratio = results[name]
                print(f"| {T} | {name} | {seconds * 1e3:.2f} | {ratio:.2f}x | {mem.peak_bytes / 2**20:.1f} |",
                      flush=True)


if __name__ == "__main__":
    main()
