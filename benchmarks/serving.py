"""Measured (lesson 12): serving 64 requests at once, and speculative decoding.

The model: a GPT-2-style model of the shipped model's size (6 layers, n_embd 144, 6 heads, 65
tokens, block_size 256) with random weights, as a `transformers` GPT2LMHeadModel and, with the
same weights, a course GPT (GPT.from_hf_gpt2). 64 requests, a fixed seeded mix of prompt lengths
(8-120 tokens) and output lengths (8-128 tokens), all arriving at t = 0, greedy, on 2 CPU threads.
Every contender must produce the same tokens as one-at-a-time generation (the script stops if not).

    one at a time     course_lib.generation.generate per request, lesson 08's contiguous KVCache
    static groups     the engine given 16 requests at a time: a group must finish before the next
                      starts (static batching without padding: early finishers leave their row idle)
    HF padded batch   transformers' generate on left-padded groups of 16, attention_mask, its cache;
                      every row runs to the group's longest output
    engine            course_lib.serving.Engine: continuous batching over the paged cache

Reported: tokens/s (generated tokens / wall time), p50 and p95 latency per request (from t = 0 to
its last token), and KV memory: the bytes allocated for keys and values against the bytes the
tokens need, summed over steps (static contiguous caches allocate prompt + max_new for every row).

Speculative decoding: the shipped model as target, a 1-layer draft trained here for --draft-seconds
on Tiny Shakespeare, greedy, k = 4, against plain cached generation (generate), interleaved rounds;
the acceptance rate and the break-even acceptance rate the measured cost ratio implies.

    python benchmarks/serving.py            # about 3-4 minutes on 2 threads
    python benchmarks/serving.py --quick    # 16 requests, shorter, a smoke run
"""

from __future__ import annotations

import argparse
import platform
import time

import torch

from course_lib.generation import generate
from course_lib.model import GPT, GPTConfig, load_pretrained
from course_lib.profiling import interleaved_seconds
from course_lib.serving import Engine, expected_tokens_per_pass, speculative_generate


def request_mix(n: int, vocab: int, seed: int = 0) -> list[tuple[torch.Tensor, int]]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        T = int(torch.randint(8, 121, (), generator=g))
        new = int(torch.randint(8, 129, (), generator=g))
        out.append((torch.randint(0, vocab, (T,), generator=g), new))
    return out


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def one_at_a_time(model, mix):
    start, latencies, outs = time.perf_counter(), [], []
    for prompt, new in mix:
        outs.append(generate(model, prompt[None], new)[0, len(prompt):])
        latencies.append(time.perf_counter() - start)
    per_token = 2 * model.config.n_layer * model.config.n_kv_head * model.config.head_size * 4
    used = sum((len(p) + n) * per_token for p, n in mix)
    return outs, latencies, used, used        # each cache is exactly T + n long


def engine_run(model, mix, group: int | None, block_size: int = 16):
    engine = Engine(model, block_size=block_size, max_batch_size=64, max_batch_tokens=1024)
    start, latencies, outs = time.perf_counter(), [0.0] * len(mix), [None] * len(mix)
    groups = [range(len(mix))] if group is None else [range(i, min(i + group, len(mix))) for i in range(0, len(mix), group)]
    for members in groups:
        ids = {engine.submit(mix[i][0], mix[i][1]): i for i in members}
        while engine.has_work:
            for event in engine.step():
                if event.finished:
                    latencies[ids[event.request]] = time.perf_counter() - start
        for rid, i in ids.items():
            outs[i] = torch.tensor(engine.tokens(rid))
    allocated = sum(a for a, _ in engine.kv_samples)
    used = sum(u for _, u in engine.kv_samples)
    return outs, latencies, allocated, used


def hf_padded(peer, mix, group: int = 16):
    start, latencies, outs = time.perf_counter(), [0.0] * len(mix), [None] * len(mix)
    allocated = used = 0
    c = peer.config
    per_token = 2 * c.n_layer * c.n_embd * 4
    for g0 in range(0, len(mix), group):
        members = list(range(g0, min(g0 + group, len(mix))))
        T = max(len(mix[i][0]) for i in members)
        new = max(mix[i][1] for i in members)
        ids = torch.zeros(len(members), T, dtype=torch.long)
        mask = torch.zeros(len(members), T, dtype=torch.long)
        for r, i in enumerate(members):
            p = mix[i][0]
            ids[r, T - len(p):], mask[r, T - len(p):] = p, 1
        with torch.no_grad():
            got = peer.generate(ids, attention_mask=mask, max_new_tokens=new, min_new_tokens=new, do_sample=False,
                                pad_token_id=0)
        t = time.perf_counter() - start
        for r, i in enumerate(members):
            outs[i] = got[r, T:T + mix[i][1]]
            latencies[i] = t
        allocated += len(members) * (T + new) * per_token
        used += sum(len(mix[i][0]) + mix[i][1] for i in members) * per_token
    return outs, latencies, allocated, used


def train_draft(seconds: float, text: str, vocab) -> GPT:
    """A 1-layer GPT trained for `seconds` on Tiny Shakespeare (AdamW, batches of 32 x 128)."""
    torch.manual_seed(0)
    draft = GPT(GPTConfig(vocab_size=len(vocab), block_size=256, n_layer=1, n_head=4, n_embd=64, dropout=0.0,
                          bias=False))
    data = torch.tensor(vocab.encode(text), dtype=torch.long)
    opt = torch.optim.AdamW(draft.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(0)
    end, steps = time.perf_counter() + seconds, 0
    while time.perf_counter() < end:
        starts = torch.randint(0, len(data) - 129, (32,), generator=g)
        x = torch.stack([data[s:s + 128] for s in starts])
        y = torch.stack([data[s + 1:s + 129] for s in starts])
        _, loss = draft(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        steps += 1
    print(f"draft: 1 layer, n_embd 64, {draft.num_params():,} parameters, {steps} steps in {seconds:.0f} s, "
          f"last training loss {loss.item():.2f}")
    return draft.eval()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--draft-seconds", type=float, default=60.0)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.requests, args.draft_seconds = 16, 10.0
    torch.set_num_threads(args.threads)
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers import __version__ as hf_version

    print(f"{platform.processor() or platform.machine()}, torch {torch.__version__}, transformers {hf_version}, "
          f"{torch.get_num_threads()} threads, {time.strftime('%Y-%m-%d')}")
    torch.manual_seed(0)
    peer = GPT2LMHeadModel(GPT2Config(vocab_size=65, n_positions=256, n_layer=6, n_head=6, n_embd=144,
                                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                      activation_function="gelu_new", bos_token_id=0, eos_token_id=None)).eval()
    model = GPT.from_hf_gpt2(peer).eval()
    mix = request_mix(args.requests, 65)
    total = sum(n for _, n in mix)
    print(f"{len(mix)} requests: prompts {min(len(p) for p, _ in mix)}-{max(len(p) for p, _ in mix)} tokens, "
          f"outputs {min(n for _, n in mix)}-{max(n for _, n in mix)}, {total} tokens to generate")
    rows = {}
    reference = None
    for name, run in (("one at a time (lesson 08 cache)", lambda: one_at_a_time(model, mix)),
                      ("static groups of 16 (engine)", lambda: engine_run(model, mix, 16)),
                      ("HF padded batch of 16", lambda: hf_padded(peer, mix)),
                      ("engine (continuous batching)", lambda: engine_run(model, mix, None))):
        start = time.perf_counter()
        outs, latencies, allocated, used = run()
        seconds = time.perf_counter() - start
        if reference is None:
            reference = outs
        same = all(torch.equal(a.cpu(), b.cpu()) for a, b in zip(outs, reference, strict=True))
        if not same:
            raise SystemExit(f"{name}: the tokens differ from one-at-a-time generation")
        rows[name] = (total / seconds, percentile(latencies, 0.5), percentile(latencies, 0.95), allocated / used, seconds)
    print(f"\n{'contender':34s} {'tokens/s':>9s} {'p50 s':>7s} {'p95 s':>7s} {'KV alloc/used':>14s} {'wall s':>7s}")
    for name, (tps, p50, p95, ratio, seconds) in rows.items():
        print(f"{name:34s} {tps:9.0f} {p50:7.1f} {p95:7.1f} {ratio:14.2f} {seconds:7.1f}")
    engine_tps, hf_tps = rows["engine (continuous batching)"][0], rows["HF padded batch of 16"][0]
    print(f"\nengine / HF padded batch: {engine_tps / hf_tps:.2f}x tokens/s (goal >= 3); "
          f"engine KV allocated / used: {rows['engine (continuous batching)'][3]:.3f} (goal <= 1.1)")

    # speculative decoding: the shipped model as target
    from course_lib.data import load_text
    target, vocab = load_pretrained("shakespeare_char")[:2]
    target.eval()
    draft = train_draft(args.draft_seconds, load_text(), vocab)
    prompt = torch.tensor([vocab.encode("ROMEO:\nWhat light is this")])
    n = 200
    plain = generate(target, prompt, n)
    spec, stats = speculative_generate(target, draft, prompt, n, k=4)
    if not torch.equal(plain, spec):
        raise SystemExit("speculative greedy differs from the target's greedy tokens")
    times = interleaved_seconds({"plain": lambda: generate(target, prompt, n),
                                 "speculative": lambda: speculative_generate(target, draft, prompt, n, k=4),
                                 "draft alone": lambda: generate(draft, prompt, n)}, rounds=3)
    a = stats["acceptance_rate"]
    # one target pass ~ one plain step; c = draft step / target step; a round of k draft steps and one
    # pass yields E(a) tokens: speedup = E(a) / (1 + k c). Break-even: E(a) = 1 + k c.
    c = times["draft alone"] / times["plain"]
    k = 4
    breakeven = next((x / 100 for x in range(0, 101) if expected_tokens_per_pass(x / 100, k) >= 1 + k * c), None)
    print(f"\nspeculative greedy, k = 4, {n} tokens: acceptance rate {a:.2f}, {stats['tokens_per_pass']:.2f} tokens per "
          f"target pass; plain {n / times['plain']:.0f} tokens/s, speculative {n / times['speculative']:.0f} tokens/s "
          f"({times['plain'] / times['speculative']:.2f}x); draft step / target step = {c:.2f}, so the break-even "
          f"acceptance rate is about {breakeven if breakeven is not None else '> 1 (never pays)'}")


if __name__ == "__main__":
    main()
