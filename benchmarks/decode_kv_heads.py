"""Measured (lesson 08): decode time per token against the number of key/value heads (MHA, GQA,
MQA), cached greedy generation with course_lib.generation.generate at a long context.

Two model sizes, random weights, float32, batch 1: the shipped checkpoint's shape (lesson 07's
6 layers x 6 heads x 144, its 65-character vocabulary) and a GPT-2-small shape (12 x 12 x 768,
vocabulary 50257). Each gets n_kv_head = n_head (MHA), a GQA value and 1 (MQA); block_size is
raised to hold the context (learned positions: a longer table, nothing else changes). A prompt of
--context random tokens is prefilled into the KVCache, then --new tokens are decoded greedily
(generate(model, prompt, new, use_cache=True)); a forward pre-hook stamps every call of the
model, and a decode step runs from the start of one call after the prefill to the start of the
next (or the end: the step includes choosing the token). The median step over --rounds runs
(every row and contender in turn, after a short warm-up) is compared with MHA's, measured in the
same run. --clock cpu counts the process's CPU time instead of the wall clock, for a CPU run on a
machine that other processes share.

Two contenders per model: "course_lib" is the library as it is (its fused attention shares each
KV head across its group of query heads, F.scaled_dot_product_attention(..., enable_gqa=True),
with no copy); "copies" first repeats the KV heads up to n_head with repeat_kv, at every step, as
the library did before 2026-11-25 and as most first implementations do. Both must generate
identical tokens (checked).

The KV cache a decode step reads: 2 x n_layer x n_kv_head x head_size x 4 bytes per cached token;
the weights: 4 bytes per parameter (the table counts them all; a step reads one row of the
position and token tables but the whole tied output head). The table prints both, in MB.

    OMP_NUM_THREADS=1 python benchmarks/decode_kv_heads.py            # both sizes, context 1024
    OMP_NUM_THREADS=1 python benchmarks/decode_kv_heads.py --rounds 1 --clock cpu  # a shared CPU
    python benchmarks/decode_kv_heads.py --device cuda --context 8192  # the same on a GPU
    python benchmarks/decode_kv_heads.py --models shipped --context 4096 --new 64
"""

from __future__ import annotations

import argparse
import dataclasses
import platform
import statistics
import time
import types

import torch

from course_lib.attention.grouped import repeat_kv
from course_lib.generation import generate
from course_lib.kv_cache import KVCache
from course_lib.model import GPT, GPTConfig, load_pretrained

GPT2_SMALL = GPTConfig(vocab_size=50257, n_layer=12, n_head=12, n_embd=768)


def shipped_config() -> GPTConfig:
    """The shipped checkpoint's GPTConfig (course_lib/pretrained/shakespeare_char)."""
    model, _, _ = load_pretrained()
    return model.config


def gqa_value(n_head: int) -> int:
    """A GQA group count between MQA and MHA: the divisor of n_head nearest n_head / 3."""
    divisors = [d for d in range(2, n_head) if n_head % d == 0]
    return min(divisors, key=lambda d: (abs(d - n_head / 3), d)) if divisors else n_head


def copying_attend(self, q, k, v, mask=None, is_causal=False, need_weights=False):
    """MultiHeadAttention.attend after repeating each KV head for its query heads (a copy of an
    MHA-sized cache at every step)."""
    if not need_weights:
        k, v = repeat_kv(k, self.n_rep), repeat_kv(v, self.n_rep)
    return type(self).attend(self, q, k, v, mask, is_causal, need_weights)


def use_copying_attention(model: GPT) -> GPT:
    for block in model.blocks:
        block.attn.attend = types.MethodType(copying_attend, block.attn)
    return model


def sync(device: str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def decode_step_seconds(model: GPT, prompt: torch.Tensor, new: int, device: str,
                        clock=time.perf_counter):
    """(the seconds of each decode step, tokens) of one cached greedy generate call: a step runs
    from the start of one call of the model to the start of the next (or the end)."""
    stamps: list[float] = []

    def stamp(module, args):
        sync(device)
        stamps.append(clock())

    handle = model.register_forward_pre_hook(stamp)
    try:
        out = generate(model, prompt, new, use_cache=True)
        sync(device)
        stamps.append(clock())
    finally:
        handle.remove()
    if len(stamps) != new + 1:
        raise SystemExit(f"expected {new} calls of the model (a prefill, then one per token), "
                         f"got {len(stamps) - 1}")
    return [b - a for a, b in zip(stamps[1:-1], stamps[2:], strict=True)], out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", choices=("shipped", "gpt2"),
                        default=["shipped", "gpt2"])
    parser.add_argument("--context", type=int, default=1024, help="tokens prefilled into the cache")
    parser.add_argument("--new", type=int, default=17, help="tokens generated (>= 2): a prefill, "
                        "then new - 1 timed decode steps")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="wall: time.perf_counter; cpu: the process's CPU time "
                        "(time.process_time), for a CPU run on a machine that other processes "
                        "share (time spent waiting for a core is not counted; with several threads "
                        "their times add up)")
    args = parser.parse_args()
    if args.clock == "cpu" and torch.device(args.device).type != "cpu":
        parser.error("--clock cpu measures CPU runs only")
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    if args.new < 2:
        parser.error("--new must be >= 2 (the first token comes from the prefill)")
    print(f"torch {torch.__version__}, {platform.machine()}, {torch.get_num_threads()} threads, "
          f"device {args.device}; float32, batch 1, greedy, context {args.context} tokens "
          "prefilled, "
          f"{args.new - 1} decode steps per run, {args.rounds} rounds after a short warm-up; "
          f"median step time, {args.clock} clock")
    bases = {"shipped": shipped_config(), "gpt2": GPT2_SMALL}
    for name in args.models:
        base = bases[name]
        H = base.n_head
        rows = []
        for n_kv in dict.fromkeys((H, gqa_value(H), 1)):
            config = dataclasses.replace(base, n_kv_head=n_kv, dropout=0.0,
                                         block_size=max(base.block_size, args.context + args.new))
            torch.manual_seed(0)
            model = GPT(config).eval().to(args.device)
            kind = "MHA" if n_kv == H else "MQA" if n_kv == 1 else "GQA"
            rows.append(dict(kind=kind, n_kv=n_kv, model=model,
                             cache_mb=KVCache.for_model(model, 1, args.context).nbytes / 1e6,
                             weights_mb=sum(p.nbytes for p in model.parameters()) / 1e6,
                             steps={"course_lib": [], "copies": []}, out={}))
        torch.manual_seed(1)
        prompt = torch.randint(0, base.vocab_size, (1, args.context), device=args.device)
        # every round runs every row and contender in turn, so that a change in the machine's
        # load spreads over all of them
        for r in range(args.rounds + 1):  # round 0 warms up, on a short prompt
            for row in rows:
                for contender in ("course_lib", "copies"):
                    model = row["model"]
                    if contender == "copies":
                        use_copying_attention(model)
                    steps, row["out"][contender] = decode_step_seconds(
                        model, prompt if r else prompt[:, :8], args.new if r else 3,
                        args.device, clock,
                    )
                    if contender == "copies":
                        for block in model.blocks:
                            del block.attn.attend  # back to the library's method
                    if r:
                        row["steps"][contender] += steps
        label = f"{name} {base.n_layer}x{H}x{base.n_embd}"
        print(f"{label}, context {args.context}:")
        print(f"{'attention':<9} {'n_kv':>4} {'cache MB':>9} {'weights MB':>10} "
              f"{'course_lib ms':>13} {'vs MHA':>7} {'copies ms':>10} {'vs MHA':>7}")
        mha = {c: statistics.median(rows[0]["steps"][c]) for c in ("course_lib", "copies")}
        for row in rows:
            if not torch.equal(row["out"]["course_lib"], row["out"]["copies"]):
                raise SystemExit(f"{label}, n_kv_head={row['n_kv']}: the copying attention "
                                 "generated different tokens")
            med = {c: statistics.median(t) for c, t in row["steps"].items()}
            print(f"{row['kind']:<9} {row['n_kv']:>4} {row['cache_mb']:>9.1f} "
                  f"{row['weights_mb']:>10.1f} {1e3 * med['course_lib']:>13.2f} "
                  f"{mha['course_lib'] / med['course_lib']:>6.2f}x {1e3 * med['copies']:>10.2f} "
                  f"{mha['copies'] / med['copies']:>6.2f}x", flush=True)
        del rows
    print("ms: median time of one decode step (one token); vs MHA: MHA's time / this row's "
          "(> 1: faster than MHA), each contender against its own MHA row. For MHA both contenders "
          "run the same code (nothing to copy): their difference is the noise of the run.")


if __name__ == "__main__":
    main()
