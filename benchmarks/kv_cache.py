"""Measured (lesson 08): greedy generation with our KV cache, against our uncached generation and
against `transformers`' GPT2LMHeadModel.generate with its own cache, on the same weights.

A GPT-2-small-sized model with random weights (GPT2Config's defaults, float32) is converted to a
course GPT with GPT.from_hf_gpt2. From the same 32-token prompt each contender generates 256
tokens greedily at batch 1; all three must produce identical tokens (the script stops if not).
Rounds alternate the contenders; the medians are compared and printed as ratios (>= 1: ours is
faster). A fourth contender is our cached generation with every weight stored contiguous (out, in),
nn.Linear's default, which measures what GPT's input-major layout of widening weights buys.

    python benchmarks/kv_cache.py                  # GPT-2 small, prompt 32, 256 new tokens
    python benchmarks/kv_cache.py --device cuda    # the same on a GPU
    python benchmarks/kv_cache.py --quick          # a 2-layer model, a few seconds
"""

from __future__ import annotations

import argparse
import platform
import statistics

import torch

from course_lib.generation import generate
from course_lib.model import GPT
from course_lib.profiling import timed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompt", type=int, default=32)
    parser.add_argument("--new", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the cached contenders")
    parser.add_argument("--uncached-rounds", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    from transformers import GenerationConfig, GPT2Config, GPT2LMHeadModel
    from transformers import __version__ as hf_version

    size = dict(n_layer=2, n_head=4, n_embd=128, vocab_size=1000) if args.quick else {}
    torch.manual_seed(0)
    hf_config = GPT2Config(**size, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                           activation_function="gelu_new", bos_token_id=0, eos_token_id=0)
    peer = GPT2LMHeadModel(hf_config).eval().to(args.device)
    ours = GPT.from_hf_gpt2(peer).eval()
    plain = GPT.from_hf_gpt2(peer).eval().use_plain_layout()
    prompt = torch.randint(0, hf_config.vocab_size, (1, args.prompt), device=args.device)
    # eos_token_id=None: generate exactly `new` tokens, whatever they are (no early stop)
    greedy = GenerationConfig(max_new_tokens=args.new, do_sample=False, num_beams=1,
                              eos_token_id=None, pad_token_id=0, use_cache=True)

    def peer_generate():
        with torch.inference_mode():
            return peer.generate(prompt, attention_mask=torch.ones_like(prompt), generation_config=greedy)

    contenders = {
        "ours, cached": lambda: generate(ours, prompt, args.new, use_cache=True),
        "transformers, cached": peer_generate,
        "ours, plain layout": lambda: generate(plain, prompt, args.new, use_cache=True),
        "ours, uncached": lambda: generate(ours, prompt, args.new, use_cache=False),
    }
    rounds = {"ours, cached": args.rounds, "transformers, cached": args.rounds,
              "ours, plain layout": args.rounds, "ours, uncached": args.uncached_rounds}
    print(f"torch {torch.__version__}, transformers {hf_version}, {platform.machine()}, "
          f"{torch.get_num_threads()} threads, device {args.device}; {ours.num_params():,} parameters "
          f"({ours.config.n_layer} x {ours.config.n_embd}), float32, batch 1, prompt {args.prompt}, "
          f"{args.new} new tokens, greedy")
    for fn in (contenders["ours, cached"], peer_generate, contenders["ours, plain layout"]):  # warm-up
        fn()
    times: dict[str, list[float]] = {name: [] for name in contenders}
    outputs = {}
    for r in range(max(rounds.values())):
        for name, fn in contenders.items():
            if r < rounds[name]:
                seconds, outputs[name] = timed(fn, args.device)
                times[name].append(seconds)
    reference = outputs["ours, cached"]
    for name, out in outputs.items():
        if not torch.equal(out.cpu(), reference.cpu()):
            first = int((out.cpu() != reference.cpu()).nonzero()[0, 1])
            raise SystemExit(f"{name} generated different tokens (first at position {first}): not comparable")
    print("tokens identical: ours cached == ours uncached == transformers cached == ours plain layout")
    medians = {name: statistics.median(t) for name, t in times.items()}
    print(f"{'contender':<22} {'rounds':>6} {'seconds':>9} {'ms/token':>9} {'tokens/s':>9}")
    for name, seconds in medians.items():
        print(f"{name:<22} {len(times[name]):>6} {seconds:>9.2f} {1000 * seconds / args.new:>9.1f} "
              f"{args.new / seconds:>9.1f}")
    ours_s = medians["ours, cached"]
    print(f"ours cached vs ours uncached:  {medians['ours, uncached'] / ours_s:.2f}x faster (goal >= 5x)")
    print(f"ours cached vs transformers:   {medians['transformers, cached'] / ours_s:.2f}x "
          "(their time / ours; goal >= 1.0x)")
    print(f"input-major vs plain layout:   {medians['ours, plain layout'] / ours_s:.2f}x faster")


if __name__ == "__main__":
    main()
