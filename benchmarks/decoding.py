"""Measured (lesson 09): our beam search against `transformers`' GPT2LMHeadModel.generate(num_beams)
on the same weights.

A GPT-2-small-sized model with random weights (GPT2Config's defaults without an end-of-sequence
token, float32) is converted to a course GPT with GPT.from_hf_gpt2. From the same 32-token prompt,
each contender runs beam search with 4 beams for 128 new tokens (no length penalty, no early
stop); the tokens must be identical (the script stops if not). Rounds alternate the contenders;
the medians are compared and printed as a ratio (>= 1: ours is faster).

    python benchmarks/decoding.py                  # GPT-2 small, 4 beams, 128 new tokens
    python benchmarks/decoding.py --device cuda    # the same on a GPU
    python benchmarks/decoding.py --quick          # a 2-layer model, a few seconds
"""

from __future__ import annotations

import argparse
import platform
import statistics

import torch

from course_lib.generation import beam_search
from course_lib.model import GPT
from course_lib.profiling import timed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompt", type=int, default=32)
    parser.add_argument("--new", type=int, default=128)
    parser.add_argument("--beams", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    from transformers import GenerationConfig, GPT2Config, GPT2LMHeadModel
    from transformers import __version__ as hf_version

    size = dict(n_layer=2, n_head=4, n_embd=128, vocab_size=1000) if args.quick else {}
    torch.manual_seed(0)
    hf_config = GPT2Config(**size, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                           activation_function="gelu_new", bos_token_id=None, eos_token_id=None)
    peer = GPT2LMHeadModel(hf_config).eval().to(args.device)
    ours = GPT.from_hf_gpt2(peer).eval()
    prompt = torch.randint(0, hf_config.vocab_size, (1, args.prompt), device=args.device)
    beams = GenerationConfig(max_new_tokens=args.new, do_sample=False, num_beams=args.beams,
                             length_penalty=0.0, early_stopping=True, eos_token_id=None,
                             pad_token_id=0, use_cache=True)

    def peer_generate():
        with torch.inference_mode():
            return peer.generate(prompt, attention_mask=torch.ones_like(prompt), generation_config=beams)

    contenders = {"ours": lambda: beam_search(ours, prompt, args.new, args.beams),
                  "transformers": peer_generate}
    print(f"torch {torch.__version__}, transformers {hf_version}, {platform.machine()}, "
          f"{torch.get_num_threads()} threads, device {args.device}; {ours.num_params():,} parameters "
          f"({ours.config.n_layer} x {ours.config.n_embd}), float32, prompt {args.prompt}, "
          f"{args.new} new tokens, {args.beams} beams")
    for fn in contenders.values():      # warm-up
        fn()
    times: dict[str, list[float]] = {name: [] for name in contenders}
    outputs = {}
    for _ in range(args.rounds):
        for name, fn in contenders.items():
            seconds, outputs[name] = timed(fn, args.device)
            times[name].append(seconds)
    if not torch.equal(outputs["ours"].cpu(), outputs["transformers"].cpu()):
        diff = (outputs["ours"].cpu() != outputs["transformers"].cpu()).nonzero()
        raise SystemExit(f"the beams differ (first at position {int(diff[0, 1])}): not comparable")
    print("tokens identical: ours == transformers")
    medians = {name: statistics.median(t) for name, t in times.items()}
    print(f"{'contender':<14} {'rounds':>6} {'seconds':>9} {'ms/token':>9}")
    for name, seconds in medians.items():
        print(f"{name:<14} {len(times[name]):>6} {seconds:>9.2f} {1000 * seconds / args.new:>9.1f}")
    print(f"ours vs transformers: {medians['transformers'] / medians['ours']:.2f}x "
          "(their time / ours; goal >= 1.0x)")


if __name__ == "__main__":
    main()
