"""Measured (lesson 07): training speed of course_lib.training.

    python benchmarks/training.py throughput        # (a) tokens/s of one training step (forward,
                                                    #     backward, AdamW) against transformers'
                                                    #     GPT2LMHeadModel with the same config
    python benchmarks/training.py time-to-loss      # (b) wall-clock time to a validation loss:
        --device cpu   our shakespeare_char_cpu preset against nanoGPT's CPU recipe, target 1.88
        --device cuda  our shakespeare_char_gpu preset against nanogpt_shakespeare_char, 1.47

Time to loss runs both recipes through the same trainer (course_lib.training.train) in one
process, one after the other, and stops each at its first evaluation with val loss <= target.
Its clock includes everything after the data is loaded: the model's first step (torch.compile
when the recipe compiles) and every evaluation. The printed ratio is the reference's time
over ours (>= 2 on a CPU and >= 5 on a GPU are the course's goals).
"""

from __future__ import annotations

import argparse
import platform
import time

import torch
from attention import measure  # benchmarks/attention.py, next to this script

from course_lib.training import CONFIGS, flops_per_token, train

PAIRS = {"cpu": ("shakespeare_char_cpu", "nanogpt_shakespeare_char_cpu", 1.88),
         "cuda": ("shakespeare_char_gpu", "nanogpt_shakespeare_char", 1.47)}


def time_to_loss(args) -> None:
    ours_name, ref_name, target = PAIRS[args.device]
    target = args.target or target
    device_name = torch.cuda.get_device_name() if args.device == "cuda" else platform.processor()
    print(f"torch {torch.__version__}, {device_name or platform.machine()}, "
          f"{torch.get_num_threads()} threads; target validation loss {target}")
    runs = [(ref_name, ref_name, {}), (ours_name, ours_name, {})]
    if args.device == "cuda":
        runs.append((ours_name + " +compile", ours_name, {"compile": True}))
    if args.only:
        runs = [(args.only, args.only, {})]
    rows = []
    for name, preset_name, extra in runs:
        overrides = dict(**extra, target_loss=target, out_dir=f"benchmarks/out/{preset_name}", plot=False,
                         progress=args.progress)
        if args.device == "cuda":
            overrides["device"] = "cuda"
        if args.max_iters:
            overrides["max_iters"] = args.max_iters
        config = CONFIGS[preset_name].replace(**overrides)
        start = time.perf_counter()
        result = train(config)
        wall = time.perf_counter() - start
        reached = result.target_reached_at
        fpt = flops_per_token(result.model.config)
        rows.append((name, result, reached, wall, fpt))
        last = result.history[-1]
        print(f"  {name}: step {result.step}, val {last['val_loss']:.4f}, "
              f"{'reached at %.1f s' % reached if reached is not None else 'NOT reached'} "
              f"(first step {result.first_step_seconds:.1f} s), {result.tokens_per_second:,.0f} tok/s",
              flush=True)
    print(f"\n{'recipe':<30} {'steps':>6} {'val':>7} {'time to target':>15} {'first step':>11} "
          f"{'tokens/s':>11} {'MFU':>6}")
    for name, result, reached, _wall, _fpt in rows:
        mfu = result.mfu
        print(f"{name:<30} {result.step:>6} {result.history[-1]['val_loss']:>7.4f} "
              f"{('%.1f s' % reached) if reached is not None else 'not reached':>15} "
              f"{result.first_step_seconds:>10.1f}s {result.tokens_per_second:>11,.0f} "
              f"{('%.1f%%' % (100 * mfu)) if mfu is not None else '-':>6}")
    ref, ours = rows[0], rows[1] if len(rows) > 1 else None
    if ours is None:
        return
    if ref[2] is not None and ours[2] is not None:
        print(f"\nreference time / ours: {ref[2] / ours[2]:.2f}x")
    elif ref[2] is None:   # the reference missed the target: compare at the best loss it reached
        best = ref[1].best_val_loss
        t_ref = next(r["elapsed"] for r in ref[1].history if r["val_loss"] <= best)
        t_ours = next((r["elapsed"] for r in ours[1].history if r["val_loss"] <= best), None)
        print(f"\nthe reference never reached {target}; its best was {best:.4f} at {t_ref:.1f} s; "
              + (f"ours reached {best:.4f} at {t_ours:.1f} s: reference time / ours = "
                 f"{t_ref / t_ours:.2f}x" if t_ours is not None else f"ours never reached {best:.4f}"))


def throughput(args) -> None:
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers import __version__ as hf_version

    from course_lib.model import GPT

    c = CONFIGS[args.preset]
    m = c.model
    B, T = c.batch_size, m.block_size
    hf_config = GPT2Config(vocab_size=65, n_positions=T, n_layer=m.n_layer, n_head=m.n_head,
                           n_embd=m.n_embd, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                           activation_function="gelu_new", bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    peer = GPT2LMHeadModel(hf_config).train()
    ours = GPT.from_hf_gpt2(peer).train()
    idx = torch.randint(65, (B, T), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        same = torch.allclose(ours(idx, idx)[1], peer(idx, labels=idx).loss, atol=1e-5)
    if not same:
        raise SystemExit("the two models disagree on the loss; not comparing speeds")

    def step_fn(model, hf: bool):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def step():
            loss = model(idx, labels=idx).loss if hf else model(idx, idx)[1]
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
        return step

    print(f"torch {torch.__version__}, transformers {hf_version}, {platform.machine()}, "
          f"{torch.get_num_threads()} threads; preset {args.preset}: {c.n_layer} x {c.n_embd}, "
          f"B x T = {B} x {T}, float32, forward + backward + clip + AdamW")
    timings = measure({"peer": step_fn(peer, True), "ours": step_fn(ours, False)},
                      rounds=args.rounds, target_s=args.target_ms / 1000)
    peer_s, ours_s = timings["peer"][0], timings["ours"][0]
    tokens = B * T
    fpt = flops_per_token(ours.config)
    print(f"{'peer tok/s':>11} {'ours tok/s':>11} {'ours / peer':>12} {'ours GFLOP/s':>13}")
    print(f"{tokens / peer_s:>11,.0f} {tokens / ours_s:>11,.0f} {1 / timings['ours'][1]:>12.2f} "
          f"{fpt * tokens / ours_s / 1e9:>13.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    p = sub.add_parser("time-to-loss")
    p.add_argument("--device", choices=sorted(PAIRS), default="cpu")
    p.add_argument("--target", type=float, default=None)
    p.add_argument("--max-iters", type=int, default=None)
    p.add_argument("--only", choices=sorted(CONFIGS), default=None)
    p.add_argument("--progress", action="store_true")
    p = sub.add_parser("throughput")
    p.add_argument("--preset", default="shakespeare_char_cpu", choices=sorted(CONFIGS))
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--target-ms", type=float, default=1000.0)
    args = parser.parse_args()
    (time_to_loss if args.what == "time-to-loss" else throughput)(args)


if __name__ == "__main__":
    main()
