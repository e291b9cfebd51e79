"""Benchmark: our incremental BPE trainer and encoder against the naive trainer and `tokenizers`.

    python benchmarks/bpe.py            # Tiny Shakespeare, GPT-4 split pattern
    python benchmarks/bpe.py --quick    # the naive comparison on the first 200,000 characters

Measured in one run, on one machine:

1. ours vs the naive recount trainer at 256 + 128 merges (goal >= 50x), asserting that the
   merges are identical;
2. ours vs `tokenizers`' BpeTrainer at vocabulary sizes 512 and 4096 (goal: within 5x);
3. encoding throughput in MB/s, ours vs `tokenizers`, on the whole corpus.

Times are the best of ``--repeat`` runs (the naive trainer runs once).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from course_lib.data import load_text  # noqa: E402
from course_lib.tokenization import (  # noqa: E402
    GPT4_SPLIT_PATTERN,
    BPETokenizer,
    naive_train_merges,
    train_merges,
)
from course_lib.tokenization.peers import train_hf_bpe  # noqa: E402


def best_time(fn, repeat: int):
    best, result = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t0)
    return best, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="naive comparison on the first 200,000 characters only")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    text = load_text("tinyshakespeare")
    n_mb = len(text.encode("utf-8")) / 1e6
    rows = []

    # 1. ours vs naive at 256 + 128 merges.
    naive_text = text[:200_000] if args.quick else text
    label = f"{len(naive_text.encode('utf-8')) / 1e6:.2f} MB"
    t_naive, naive = best_time(lambda: naive_train_merges(naive_text, 256 + 128,
                                                          GPT4_SPLIT_PATTERN), 1)
    t_ours, ours = best_time(lambda: train_merges(naive_text, 256 + 128, GPT4_SPLIT_PATTERN),
                             args.repeat)
    identical = list(ours.items()) == list(naive.items())
    rows.append((f"train 384 vocab ({label})", "naive recount", t_ours, t_naive,
                 t_naive / t_ours, ">= 50x faster", "merges identical" if identical else
                 "MERGES DIFFER"))
    assert identical, "the incremental trainer must reproduce the naive trainer's merges"

    # 2. ours vs tokenizers' BpeTrainer.
    ours_tok = None
    for vocab_size in (512, 4096):
        t_hf, _ = best_time(lambda v=vocab_size: train_hf_bpe(text, v), args.repeat)
        t_ours, ours_tok = best_time(
            lambda v=vocab_size: BPETokenizer(GPT4_SPLIT_PATTERN).train(text, v), args.repeat)
        rows.append((f"train {vocab_size} vocab ({n_mb:.2f} MB)", "tokenizers BpeTrainer",
                     t_ours, t_hf, t_hf / t_ours, "within 5x (ratio >= 0.2)", ""))

    # 3. encoding throughput (vocab 4096), cold cache, whole corpus as one string.
    hf_tok = train_hf_bpe(text, 4096)

    def encode_ours():
        ours_tok.clear_cache()
        return ours_tok.encode(text)

    t_enc, ids = best_time(encode_ours, args.repeat)
    t_hf_enc, enc = best_time(lambda: hf_tok.encode(text), args.repeat)
    rows.append((f"encode ({n_mb:.2f} MB, vocab 4096)", "tokenizers encode", t_enc, t_hf_enc,
                 t_hf_enc / t_enc, "",
                 f"ours {n_mb / t_enc:.1f} MB/s, tokenizers {n_mb / t_hf_enc:.1f} MB/s; "
                 f"{len(ids)} vs {len(enc.ids)} tokens"))
    assert ours_tok.decode(ids) == text
    lines = text.splitlines(keepends=True)
    t_hf_batch, _ = best_time(lambda: hf_tok.encode_batch(lines), args.repeat)
    rows.append((f"encode ({n_mb:.2f} MB, vocab 4096)", "tokenizers encode_batch (lines)",
                 t_enc, t_hf_batch, t_hf_batch / t_enc, "",
                 f"tokenizers {n_mb / t_hf_batch:.1f} MB/s on {len(lines)} lines, all cores"))

    print("| task | peer | ours (s) | peer (s) | peer time / ours | goal | note |")
    print("|---|---|---:|---:|---:|---|---|")
    for task, peer, t_a, t_b, ratio, goal, note in rows:
        print(f"| {task} | {peer} | {t_a:.3f} | {t_b:.3f} | {ratio:.2f}x | {goal} | {note} |")


if __name__ == "__main__":
    main()
