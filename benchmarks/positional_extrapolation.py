"""Claim (lesson 05): trained at context 64, ALiBi's validation loss degrades least at 128-512;
a learned table cannot run past 64. Also: the two middle terms of the four-term decomposition
are small in a model with learned absolute positions (the course notes' claim).

Five tiny character models on Tiny Shakespeare (course_lib.positional.extrapolation: 2 pre-LN
layers, width 64, 4 heads, no biases), identical but for the position scheme, each trained with
the same seed, batches and budget at context 64, for several seeds. Each is evaluated on the same
validation windows of 64, 128, 256, 512 (and 1024) characters. The ratio printed for each scheme is
its loss at T divided by its own loss at 64 (1.00 = no degradation); the peer is every other
scheme, measured in the same run.

    python benchmarks/positional_extrapolation.py                  # 3 seeds, 600 steps (about 10 min on 2 cores)
    python benchmarks/positional_extrapolation.py --quick          # 1 seed, 60 steps: a smoke test
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import torch

from course_lib.data import get_batch, load_text, train_val_split
from course_lib.positional.extrapolation import (
    SCHEMES,
    run_experiment,
    score_terms,
    term_statistics,
)
from course_lib.tokenization import CharTokenizer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--eval-tokens", type=int, default=32768)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.steps, args.eval_tokens = 1, 60, 4096
    eval_lens = (64, 128, 256, 512, 1024)

    text = load_text("tinyshakespeare")
    chars = CharTokenizer(text)
    train_data, val_data = train_val_split(torch.tensor(chars.encode(text)), 0.1)
    print(f"torch {torch.__version__}, {platform.processor() or platform.machine()}, "
          f"{torch.get_num_threads()} threads; {args.seeds} seeds x {args.steps} steps of "
          f"{args.batch_size} x 64 characters; {args.eval_tokens:,} validation characters per length")

    schemes = SCHEMES[:5]
    losses = {s: {T: [] for T in eval_lens} for s in schemes}
    terms = {}
    start = time.perf_counter()
    for seed in range(args.seeds):
        table, models = run_experiment(train_data, val_data, chars.vocab_size, schemes=schemes, train_len=64,
                                       eval_lens=eval_lens, steps=args.steps, batch_size=args.batch_size,
                                       seed=seed, n_eval_tokens=args.eval_tokens)
        for s, row in table.items():
            for T, loss in row.items():
                losses[s][T].append(loss)
        for scheme in ("learned", "sinusoidal"):
            xb, _ = get_batch(val_data, 16, 64, generator=torch.Generator().manual_seed(5))
            for name, values in term_statistics(score_terms(models[scheme], xb)).items():
                terms.setdefault((scheme, name), []).append(values)
        print(f"seed {seed} done ({time.perf_counter() - start:.0f} s)", flush=True)

    def cell(values):
        if values[0] is None:
            return "cannot run"
        mean = statistics.fmean(values)
        return f"{mean:.3f}" + (f" ± {statistics.stdev(values):.3f}" if len(values) > 1 else "")

    print("\nvalidation loss (nats per character), mean ± std over seeds")
    print(f"{'scheme':<12}" + "".join(f"{'T = ' + str(T):>16}" for T in eval_lens))
    for s in schemes:
        print(f"{s:<12}" + "".join(f"{cell(losses[s][T]):>16}" for T in eval_lens))
    print("\nratio: loss at T / the same model's loss at 64 (mean over seeds)")
    print(f"{'scheme':<12}" + "".join(f"{'T = ' + str(T):>10}" for T in eval_lens[1:]))
    for s in schemes:
        row = []
        for T in eval_lens[1:]:
            if losses[s][T][0] is None:
                row.append("-")
            else:
                row.append(f"{statistics.fmean(a / b for a, b in zip(losses[s][T], losses[s][64], strict=True)):.3f}")
        print(f"{s:<12}" + "".join(f"{r:>10}" for r in row))
    print("\nfour terms of layer 0's scores (mean over seeds): mean |term|, spread over keys, weights moved if removed")
    for (scheme, name), values in terms.items():
        means = [statistics.fmean(v[i] for v in values) for i in range(3)]
        print(f"{scheme:<12}{name:<20}" + "".join(f"{m:>10.3f}" for m in means))
    print(f"\ntotal {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
