"""Spec of lesson 09's decoding strategies (course_lib.generation), against naive references
written out here:

- top_k_filter keeps the entries >= the k-th largest (ties with it kept), top_p_filter the
  smallest most-probable set whose probability reaches p (at least one token), checked row by row
  with Python loops, on the notes' examples (0.31 / 0.25 / 0.15 and the top-p distributions A
  and B), and on random logits; filter_logits applies temperature, then top-k, then top-p;
- greedy_search is generate(strategy='greedy'); beam search with width 1 is greedy; a wider beam
  never scores below greedy; exhaustive_search equals scoring every sequence with
  sequence_log_prob (itertools.product), counts its decoder calls as sum |V|^t, and refuses
  |V|^L beyond its limit; beam width |V| equals exhaustive search for 2 new tokens, width
  |V|^(L-1) for L, and a counter-example for width |V| and 3 new tokens exists;
- the cache changes nothing: cached beam search equals uncached beam search;
- eos_id finishes a sequence (eos at every later step) and stops when all are finished;
- sampling draws only from the kept tokens, is reproducible with a generator, and top_k=1 is
  greedy.
Parity with `transformers` (its warpers and generate) is in tests/interop/test_decoding_transformers.py.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from course_lib.generation import (
    beam_search,
    exhaustive_search,
    filter_logits,
    generate,
    greedy_search,
    sequence_log_prob,
    top_k_filter,
    top_p_filter,
)
from course_lib.model import GPT, GPTConfig
from course_lib.toy_lm import TableLM, markov_gpt

pytestmark = pytest.mark.usefixtures("one_thread")
NEG_INF = float("-inf")


def _tiny(vocab_size=5, seed=0, scale=1.0, **overrides):
    """A 1-layer GPT with a tiny vocabulary and random weights N(0, scale): distributions far from
    uniform, so that searches disagree."""
    config = GPTConfig(**{"vocab_size": vocab_size, "block_size": 16, "n_layer": 1, "n_head": 2,
                          "n_embd": 16, "tie_weights": False, **overrides})
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = GPT(config).double().eval()
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "ln" not in name:
                    p.normal_(0.0, scale)
    return model


def _prompt(vocab_size=5, T=2, seed=0):
    return torch.randint(0, vocab_size, (1, T), generator=torch.Generator().manual_seed(seed))


# ------------------------------------------------------------------------------------------
# filters, against loops
# ------------------------------------------------------------------------------------------

def _naive_top_k(row: list[float], k: int) -> list[float]:
    kth = sorted(row, reverse=True)[min(k, len(row)) - 1]
    return [x if x >= kth else NEG_INF for x in row]


def _naive_top_p(row: list[float], p: float) -> list[float]:
    """Most probable first; keep tokens until their probability sum reaches p."""
    probs = torch.tensor(row, dtype=torch.float64).softmax(0).tolist()
    order = sorted(range(len(row)), key=lambda i: -probs[i])
    kept, total = set(), 0.0
    for i in order:
        kept.add(i)
        total += probs[i]
        if total >= p:
            break
    return [x if i in kept else NEG_INF for i, x in enumerate(row)]


def test_top_k_on_the_notes_example_keeps_three_and_renormalises_to_0437_0352_0211():
    probs = torch.tensor([0.31, 0.25, 0.15, 0.12, 0.10, 0.07])
    kept = top_k_filter(probs.log(), 3).softmax(-1)
    expected = torch.tensor([0.31, 0.25, 0.15]) / 0.71
    torch.testing.assert_close(kept[:3], expected)
    assert kept[3:].eq(0).all(), f"tokens past the top 3 kept probability {kept[3:]}"
    assert [round(x, 3) for x in kept[:3].tolist()] == [0.437, 0.352, 0.211]


@pytest.mark.parametrize("k", [1, 2, 5, 9, 40])
def test_top_k_equals_the_naive_loop_on_random_logits_with_ties(k):
    g = torch.Generator().manual_seed(k)
    logits = torch.randint(-3, 4, (6, 9), generator=g).float()      # many ties
    got = top_k_filter(logits, k)
    for row, got_row in zip(logits.tolist(), got.tolist(), strict=True):
        assert got_row == _naive_top_k(row, k), f"k={k}, row {row}: got {got_row}"


def test_top_p_on_the_notes_distribution_a_keeps_five_and_on_b_keeps_one():
    # The notes' A: w1..w5 = 0.30, 0.15, 0.10, 0.04, 0.03 (cumulative 0.30 ... 0.62); the other
    # 0.38 is spread over 19 tokens of 0.02. Standard rule at p = 0.6: 0.59 < 0.6, so w5 is needed.
    a = torch.tensor([0.30, 0.15, 0.10, 0.04, 0.03] + [0.02] * 19, dtype=torch.float64)
    kept = torch.isfinite(top_p_filter(a.log(), 0.6))
    assert kept.sum() == 5, f"the standard rule keeps 5 tokens of A at p = 0.6 (the notes keep 4), got {int(kept.sum())}"
    assert kept[:5].all()
    b = torch.tensor([0.80] + [0.01] * 20, dtype=torch.float64)
    kept = torch.isfinite(top_p_filter(b.log(), 0.6))
    assert kept.tolist() == [True] + [False] * 20, "B's first token alone passes 0.6: k = 1"


@pytest.mark.parametrize("p", [0.05, 0.3, 0.5, 0.9, 0.999, 1.0])
def test_top_p_equals_the_naive_loop_on_random_logits(p):
    logits = torch.randn(8, 12, generator=torch.Generator().manual_seed(int(p * 1000)), dtype=torch.float64) * 2
    got = top_p_filter(logits, p)
    for row, got_row in zip(logits.tolist(), got.tolist(), strict=True):
        assert got_row == _naive_top_p(row, p), f"p={p}: got {got_row}"


def test_top_p_keeps_at_least_one_token_and_p_one_keeps_all():
    logits = torch.tensor([[5.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    assert torch.isfinite(top_p_filter(logits, 1e-9)).sum(-1).tolist() == [1, 1]
    assert torch.equal(top_p_filter(logits, 1.0), logits)


def test_filter_logits_divides_by_the_temperature_then_applies_top_k_then_top_p():
    logits = torch.randn(4, 10, generator=torch.Generator().manual_seed(3))
    expected = top_p_filter(top_k_filter(logits / 0.7, 6), 0.8)
    assert torch.equal(filter_logits(logits, 0.7, top_k=6, top_p=0.8), expected)
    assert torch.equal(filter_logits(logits), logits)


def test_a_lower_temperature_gives_a_lower_entropy():
    logits = torch.randn(50, generator=torch.Generator().manual_seed(0))
    entropies = []
    for T in (0.25, 0.5, 1.0, 2.0, 4.0):
        probs = filter_logits(logits, T).softmax(-1)
        entropies.append(float(-(probs * probs.log()).sum()))
    assert entropies == sorted(entropies), f"entropy against T = 0.25 ... 4: {entropies}"


@pytest.mark.parametrize(("call", "match"), [
    (lambda x: top_k_filter(x, 0), r"k must be an integer >= 1"),
    (lambda x: top_k_filter(x, 2.0), r"k must be an integer >= 1"),
    (lambda x: top_p_filter(x, 0.0), r"p must be a number in \(0, 1\]"),
    (lambda x: top_p_filter(x, 1.2), r"p must be a number in \(0, 1\]"),
    (lambda x: filter_logits(x, 0.0), r"temperature must be a number > 0, got 0.0; greedy decoding is the limit"),
    (lambda x: top_k_filter(x.long(), 2), r"logits must be a floating tensor"),
], ids=["k-0", "k-float", "p-0", "p-above-1", "temperature-0", "integer-logits"])
def test_bad_filter_arguments_are_refused_with_a_clear_message(call, match):
    with pytest.raises((ValueError, TypeError), match=match):
        call(torch.randn(2, 5))


# ------------------------------------------------------------------------------------------
# greedy, beam, exhaustive
# ------------------------------------------------------------------------------------------

def _all_continuations(model, prompt, L):
    """Every continuation of length L with its log-probability, by brute force."""
    V = model.config.vocab_size
    seqs = torch.tensor(list(itertools.product(range(V), repeat=L)))
    full = torch.cat([prompt.expand(len(seqs), -1), seqs], dim=1)
    return full, sequence_log_prob(model, full, prompt.shape[1])


def test_sequence_log_prob_is_the_sum_of_the_stepwise_log_probabilities():
    model, seq = _tiny(), _prompt(T=6, seed=4)
    expected = 0.0
    with torch.no_grad():
        for t in range(2, 6):
            expected += torch.log_softmax(model(seq[:, :t])[0][0, -1].double(), -1)[seq[0, t]].item()
    assert sequence_log_prob(model, seq, 2).item() == pytest.approx(expected, abs=1e-9)


@pytest.mark.parametrize(("V", "L"), [(3, 1), (3, 2), (4, 3), (5, 3)])
def test_exhaustive_search_finds_the_best_of_every_sequence_and_counts_its_decoder_calls(V, L):
    model, prompt = _tiny(V, seed=V + L), _prompt(V, seed=L)
    best, score, calls = exhaustive_search(model, prompt, L)
    full, scores = _all_continuations(model, prompt, L)
    assert torch.equal(best, full[scores.argmax()][None]), f"exhaustive picked {best}, brute force {full[scores.argmax()]}"
    assert score == pytest.approx(scores.max().item(), abs=1e-9)
    assert calls == sum(V ** t for t in range(L)), f"{calls} decoder calls for |V|={V}, L={L}"


def test_exhaustive_search_of_two_steps_over_three_tokens_calls_the_decoder_1_plus_3_times():
    assert exhaustive_search(_tiny(3), _prompt(3), 2)[2] == 1 + 3
    assert exhaustive_search(_tiny(3), _prompt(3), 3)[2] == 1 + 3 + 9


def test_exhaustive_search_refuses_more_sequences_than_its_limit_naming_the_count():
    with pytest.raises(ValueError, match=r"\|V\|\^L = 5\^9 = 1.95e\+06 sequences is beyond limit=1,000,000"):
        exhaustive_search(_tiny(5), _prompt(5), 9)
    assert exhaustive_search(_tiny(5), _prompt(5), 2, limit=25)[2] == 6
    with pytest.raises(ValueError, match="one prompt"):
        exhaustive_search(_tiny(5), torch.zeros(2, 3, dtype=torch.long), 2)


@pytest.mark.parametrize("seed", range(4))
def test_greedy_search_is_generate_greedy_and_beam_width_one_is_greedy(seed):
    model, prompt = _tiny(7, seed=seed), _prompt(7, T=3, seed=seed)
    greedy = generate(model, prompt, 8)
    assert torch.equal(greedy_search(model, prompt, 8), greedy)
    assert torch.equal(beam_search(model, prompt, 8, 1), greedy), "beam_width=1 must equal greedy search"


@pytest.mark.parametrize("seed", range(6))
def test_a_wider_beam_never_scores_below_greedy_and_exhaustive_is_the_best(seed):
    model, prompt = _tiny(4, seed=seed, scale=1.5), _prompt(4, seed=seed)
    L = 4
    greedy = sequence_log_prob(model, greedy_search(model, prompt, L), 2).item()
    beam = sequence_log_prob(model, beam_search(model, prompt, L, 3), 2).item()
    best = exhaustive_search(model, prompt, L)[1]
    assert greedy <= beam + 1e-9 <= best + 2e-9, f"greedy {greedy}, beam 3 {beam}, exhaustive {best}"


@pytest.mark.parametrize("seed", range(5))
def test_beam_width_v_is_exhaustive_for_two_tokens_and_width_v_to_the_l_minus_1_for_l(seed):
    V = 4
    model, prompt = _tiny(V, seed=seed, scale=1.5), _prompt(V, seed=seed)
    assert torch.equal(beam_search(model, prompt, 2, V), exhaustive_search(model, prompt, 2)[0])
    assert torch.equal(beam_search(model, prompt, 3, V ** 2), exhaustive_search(model, prompt, 3)[0])


# A, B, C = 0, 1, 2: C is rare to reach (0.12) but then certain (0.99); A and B are not
BEAM_TRAP = torch.tensor([[0.45, 0.43, 0.12],
                          [0.42, 0.46, 0.12],
                          [0.005, 0.005, 0.99]], dtype=torch.float64)


def test_the_markov_gpt_reproduces_its_transition_table():
    model = markov_gpt(BEAM_TRAP)
    probs = model(torch.tensor([[0, 1, 2]]))[0][0].softmax(-1)
    torch.testing.assert_close(probs, BEAM_TRAP)


def test_beam_width_v_misses_the_best_sequence_of_three_tokens():
    """The notes (and the first design) claim b = |V| is exhaustive search. From A, the three best
    2-token prefixes are AA (0.2025), BB (0.1978) and AB (0.1935); CC (0.1188) is pruned, yet
    CCC = 0.12 x 0.99 x 0.99 = 0.1176 beats AAA = 0.2025 x 0.45 = 0.0911."""
    model, prompt = markov_gpt(BEAM_TRAP), torch.tensor([[0]])
    assert torch.equal(beam_search(model, prompt, 2, 3), exhaustive_search(model, prompt, 2)[0]), \
        "for 2 new tokens b = |V| keeps every first token, so it is exhaustive"
    beam = beam_search(model, prompt, 3, 3)
    best, best_score, _ = exhaustive_search(model, prompt, 3)
    assert best[0, 1:].tolist() == [2, 2, 2], f"exhaustive search should find CCC, got {best.tolist()}"
    assert best_score == pytest.approx(math.log(0.12 * 0.99 * 0.99), abs=1e-9)
    assert beam[0, 1:].tolist() == [0, 0, 0], f"beam 3 should end with AAA, got {beam.tolist()}"
    assert sequence_log_prob(model, beam, 1).item() == pytest.approx(math.log(0.45 ** 3), abs=1e-9)
    assert torch.equal(beam_search(model, prompt, 3, 9), best), "b = |V|^2 = 9 is exhaustive for 3"


def _naive_beam(model, prompt, n, width):
    """Textbook beam search with Python lists: expand every beam by every token, sort, keep."""
    beams = [(prompt[0].tolist(), 0.0)]
    for _ in range(n):
        candidates = []
        for seq, score in beams:
            with torch.no_grad():
                log_probs = torch.log_softmax(model(torch.tensor([seq]))[0][0, -1].double(), -1)
            candidates += [(seq + [v], score + lp) for v, lp in enumerate(log_probs.tolist())]
        beams = sorted(candidates, key=lambda c: -c[1])[:width]
    return beams[0][0]


@pytest.mark.parametrize(("seed", "width"), [(0, 2), (1, 3), (2, 5), (3, 8)])
def test_beam_search_equals_the_textbook_loop(seed, width):
    model, prompt = _tiny(6, seed=seed, scale=1.5, n_layer=2), _prompt(6, T=2, seed=seed)
    got = beam_search(model, prompt, 5, width)
    assert got[0].tolist() == _naive_beam(model, prompt, 5, width)


@pytest.mark.parametrize("pos_encoding", ["learned", "rope", "alibi"])
def test_cached_beam_search_equals_uncached_beam_search(pos_encoding):
    model = _tiny(11, seed=3, scale=0.5, pos_encoding=pos_encoding, n_layer=2)
    prompt = torch.randint(0, 11, (2, 3), generator=torch.Generator().manual_seed(1))
    cached = beam_search(model, prompt, 9, 4, use_cache=True)
    assert cached.shape == (2, 12)
    assert torch.equal(cached, beam_search(model, prompt, 9, 4, use_cache=False))
    assert torch.equal(cached, generate(model, prompt, 9, strategy="beam", beam_width=4))


def test_beam_search_past_a_learned_block_size_crops_the_context_like_greedy():
    model = _tiny(6, seed=2, block_size=6)
    prompt = _prompt(6, T=4, seed=2)
    assert torch.equal(beam_search(model, prompt, 8, 1), greedy_search(model, prompt, 8))


# ------------------------------------------------------------------------------------------
# eos and sampling
# ------------------------------------------------------------------------------------------

def test_a_sequence_that_produced_eos_gets_eos_after_it_and_generation_stops_when_all_have():
    model = _tiny(6, seed=5)
    prompt = torch.randint(0, 6, (4, 2), generator=torch.Generator().manual_seed(5))
    free = generate(model, prompt, 10)
    eos = int(free[0, 4])                       # the token row 0 produces third
    out = generate(model, prompt, 10, eos_id=eos)
    for row, free_row in zip(out, free, strict=True):
        new = free_row[2:].tolist()
        stop = new.index(eos) if eos in new else None
        if stop is None:
            assert row[2:].tolist() == new[:out.shape[1] - 2]
        else:
            assert row[2:2 + stop + 1].tolist() == new[:stop + 1], "tokens before eos change"
            assert (row[2 + stop:] == eos).all(), f"after eos every token is eos, got {row.tolist()}"
    finished = [(eos in r[2:].tolist()) for r in free]
    if all(finished):
        assert out.shape[1] < 12, "every sequence finished: generation should stop early"


def test_sampling_draws_only_kept_tokens_is_reproducible_and_top_k_one_is_greedy():
    model = _tiny(13, seed=1, scale=0.3)
    prompt = torch.randint(0, 13, (3, 2), generator=torch.Generator().manual_seed(1))

    def draw(seed, **kw):
        return generate(model, prompt, 12, strategy="sample", generator=torch.Generator().manual_seed(seed), **kw)

    assert torch.equal(draw(0, top_p=0.7), draw(0, top_p=0.7)), "the same generator seed must repeat"
    assert not torch.equal(draw(0), draw(1)), "different seeds gave the same 36 tokens"
    assert torch.equal(draw(4, top_k=1), generate(model, prompt, 12)), "top_k=1 sampling is greedy"
    out = draw(2, top_k=3, temperature=1.5)
    with torch.no_grad():
        for t in range(2, out.shape[1]):
            logits = model(out[:, :t])[0][:, -1] / 1.5
            allowed = torch.isfinite(top_k_filter(logits, 3))
            assert allowed.gather(1, out[:, t:t + 1]).all(), f"step {t}: sampled a token outside the top 3"


def test_the_probability_of_each_sampled_top_k_token_converges_to_the_renormalised_one():
    """The notes' 0.31 / 0.25 / 0.15 example: the frequencies of 20,000 draws."""
    logits = torch.tensor([0.31, 0.25, 0.15, 0.12, 0.10, 0.07]).log().expand(20_000, 6)
    probs = filter_logits(logits, top_k=3).softmax(-1)
    draws = torch.multinomial(probs, 1, generator=torch.Generator().manual_seed(0))[:, 0]
    freqs = torch.bincount(draws, minlength=6).double() / 20_000
    expected = torch.tensor([0.31, 0.25, 0.15, 0, 0, 0], dtype=torch.float64) / 0.71
    assert (freqs - expected).abs().max() < 3 * math.sqrt(0.25 / 20_000) * 2, f"frequencies {freqs.tolist()}"


@pytest.mark.parametrize(("seed", "L", "pos"), [(0, 3, "learned"), (1, 2, "rope"), (2, 4, "none")])
def test_exhaustive_search_with_the_cache_equals_without(seed, L, pos):
    model, prompt = _tiny(4, seed=seed, scale=1.5, pos_encoding=pos), _prompt(4, T=3, seed=seed)
    cached = exhaustive_search(model, prompt, L)
    plain = exhaustive_search(model, prompt, L, use_cache=False)
    assert torch.equal(cached[0], plain[0])
    assert cached[2] == plain[2]
    assert cached[1] == pytest.approx(plain[1], abs=1e-9)


def test_exhaustive_search_past_the_context_window_runs_without_the_cache():
    model, prompt = _tiny(3, seed=4, scale=1.5, block_size=4), _prompt(3, T=3, seed=4)
    tokens, score, _ = exhaustive_search(model, prompt, 3)          # T + L - 1 = 5 > 4
    assert torch.equal(tokens, exhaustive_search(model, prompt, 3, use_cache=False)[0])


# The notes' beam-search tree (V = 3, b = 2), with p(B|A) = 0.4 instead of their 0.2 (their row
# after A sums to 0.8) and the step-3 rows that give their final 0.18 and 0.13.
NOTES_BEAM = {"": {"A": 0.5, "B": 0.4, "C": 0.1},
              "A": {"A": 0.1, "B": 0.4, "C": 0.5},
              "B": {"A": 0.2, "B": 0.2, "C": 0.6},
              "AC": {"A": 0.18, "B": 0.72, "C": 0.10},
              "BC": {"A": 0.54, "B": 0.30, "C": 0.16}}


def test_the_table_lm_returns_its_rows_as_log_probabilities():
    lm = TableLM("ABC", NOTES_BEAM)
    logits, _ = lm(torch.tensor([[0, 0, 2], [1, 1, 1]]))           # position 0 is the start token
    assert logits[0, 0].exp().tolist() == pytest.approx([0.5, 0.4, 0.1])
    assert logits[0, 2].exp().tolist() == pytest.approx([0.18, 0.72, 0.10])
    assert logits[1, 2].exp().tolist() == pytest.approx([1 / 3] * 3), "unlisted prefix: uniform"
    assert lm.probs("A C") == lm.probs("AC")
    with pytest.raises(ValueError, match="sums to"):
        TableLM("ABC", {"": {"A": 0.5, "B": 0.2, "C": 0.1}})
    with pytest.raises(ValueError, match="unknown tokens"):
        TableLM("ABC", {"AD": {"A": 1.0}})


def test_the_notes_beam_example_ends_with_acb_at_0_18():
    lm, start = TableLM("ABC", NOTES_BEAM), torch.tensor([[0]])
    beam = beam_search(lm, start, 3, 2)
    assert lm.decode(beam[0, 1:]) == "A C B"
    assert sequence_log_prob(lm, beam, 1).exp().item() == pytest.approx(0.25 * 0.72)
    second = torch.tensor([[0] + lm.encode("BCA")])
    assert sequence_log_prob(lm, second, 1).exp().item() == pytest.approx(0.24 * 0.54)
    tokens, score, calls = exhaustive_search(lm, start, 3)
    assert torch.equal(tokens, beam)
    assert calls == 1 + 3 + 9
