"""Measured: time to a validation loss for variants of one preset, each run alone, one after the
other, through course_lib.training.train (the clock of benchmarks/training.py time-to-loss).

    python benchmarks/time_to_loss_sweep.py --config shakespeare_char_gpu --device cuda \
        "" "lr_decay_iters=2000,max_iters=2000" "batch_size=128,learning_rate=3e-3"

Each positional argument is one variant: comma-separated FIELD=VALUE overrides of the preset
(TrainConfig fields or model.FIELD), "" for the preset itself. Values are parsed as Python
literals (3e-3, 128, True) and otherwise kept as strings.
"""

from __future__ import annotations

import argparse
import ast
import time

import torch

from course_lib.training import CONFIGS, train
from course_lib.training.__main__ import with_overrides


def parse_variant(text: str) -> dict:
    overrides = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        if "=" not in item:
            raise SystemExit(f"variant item {item!r} is not FIELD=VALUE (e.g. batch_size=128)")
        key, value = item.split("=", 1)
        try:
            overrides[key.strip()] = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError):
            overrides[key.strip()] = value.strip()
    return overrides


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("variants", nargs="*", default=[""])
    parser.add_argument("--config", default="shakespeare_char_gpu", choices=sorted(CONFIGS))
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--target", type=float, default=1.47)
    args = parser.parse_args()
    name = torch.cuda.get_device_name() if args.device.startswith("cuda") else args.device
    print(f"torch {torch.__version__}, {name}; preset {args.config}; target {args.target}")
    rows = []
    for text in args.variants:
        overrides = parse_variant(text)
        config = with_overrides(CONFIGS[args.config], {
            "target_loss": args.target, "device": args.device, "plot": False, "progress": False,
            "out_dir": "benchmarks/out/sweep", **overrides})
        start = time.perf_counter()
        result = train(config)
        wall = time.perf_counter() - start
        best = min(r["val_loss"] for r in result.history)
        rows.append((text or "(preset)", result, best, wall))
        reached = result.target_reached_at
        print(f"  {text or '(preset)'}: step {result.step}, best val {best:.4f}, "
              f"{'reached at %.1f s' % reached if reached is not None else 'not reached'}, "
              f"{result.tokens_per_second:,.0f} tok/s, wall {wall:.1f} s", flush=True)
    print(f"\n| variant | steps | best val | time to {args.target} | tokens/s | wall |")
    print("|---|---:|---:|---:|---:|---:|")
    for text, result, best, wall in rows:
        reached = result.target_reached_at
        print(f"| `{text}` | {result.step} | {best:.4f} | "
              f"{('%.1f s' % reached) if reached is not None else 'not reached'} | "
              f"{result.tokens_per_second:,.0f} | {wall:.0f} s |")


if __name__ == "__main__":
    main()
