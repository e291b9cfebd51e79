"""course_lib.serving.speculative: greedy gives the target's tokens; sampling keeps its distribution."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from course_lib.generation import generate
from course_lib.model import GPT, GPTConfig
from course_lib.serving import expected_tokens_per_pass, speculative_generate


def _gpt(seed, vocab_size=40, n_layer=2, n_embd=32, scale=1.0, pos_encoding="rope"):
    torch.manual_seed(seed)
    model = GPT(GPTConfig(vocab_size=vocab_size, block_size=64, n_layer=n_layer, n_head=4, n_embd=n_embd,
                          pos_encoding=pos_encoding, tie_weights=False)).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(scale)
    return model


def chi2_pvalue(counts: torch.Tensor, probs: torch.Tensor) -> float:
    """Pearson's chi-square test of counts against probabilities: P(X >= statistic) for X ~ chi-square
    with (bins - 1) degrees of freedom, the cells expected to hold fewer than 5 pooled into one bin."""
    expected = probs.double() * counts.sum()
    small = expected < 5
    observed = torch.cat([counts[~small], counts[small].sum()[None]]).double()
    expected = torch.cat([expected[~small], expected[small].sum()[None]])
    keep = expected > 0
    statistic = ((observed[keep] - expected[keep]) ** 2 / expected[keep]).sum()
    df = int(keep.sum()) - 1
    return float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64), statistic / 2))


@pytest.mark.parametrize("k", [1, 3, 6])
def test_greedy_gives_exactly_the_targets_greedy_tokens(k):
    target, draft = _gpt(0), _gpt(1, n_layer=1, n_embd=16)
    idx = torch.randint(0, 40, (1, 7), generator=torch.Generator().manual_seed(2))
    tokens, stats = speculative_generate(target, draft, idx, 30, k=k)
    assert torch.equal(tokens, generate(target, idx, 30))
    assert stats["proposed"] >= stats["accepted"] >= 0
    assert stats["target_passes"] <= 30


def test_a_draft_equal_to_the_target_is_always_accepted():
    target = _gpt(0)
    idx = torch.arange(5)[None]
    _, stats = speculative_generate(target, target, idx, 20, k=4)
    assert stats["acceptance_rate"] == 1.0
    assert stats["target_passes"] == 4
    assert stats["tokens_per_pass"] == expected_tokens_per_pass(1.0, 4) == 5.0


def test_sampling_keeps_the_targets_distribution():
    """2,000 speculative draws of three tokens over a 5-token vocabulary: their 125 joint counts
    against the target's exact joint distribution, chi-square at the 0.001 level (fixed seed)."""
    V, n, runs = 5, 3, 2000
    target = _gpt(0, vocab_size=V, n_layer=1, scale=8.0, pos_encoding="learned")
    draft = _gpt(1, vocab_size=V, n_layer=1, scale=8.0, pos_encoding="learned")
    prompt = torch.tensor([[1, 3]])
    with torch.no_grad():    # the exact joint p(x1, x2, x3) of the target, and the draft's first token
        seqs = torch.tensor(list(itertools.product(range(V), repeat=n - 1)))       # every (x1, x2)
        p = target(torch.cat([prompt.expand(len(seqs), -1), seqs], 1))[0].softmax(-1)[:, -n:]
        rows = torch.arange(len(seqs))
        p12 = p[0, 0][seqs[:, 0]] * p[rows, 1, seqs[:, 1]]
        joint = (p12[:, None] * p[:, 2]).reshape(-1)                # index x1 * 25 + x2 * 5 + x3
        q1 = draft(prompt)[0].softmax(-1)[0, -1]
    tv = 0.5 * float((p[0, 0] - q1).abs().sum())
    assert tv > 0.2, f"the draft must differ from the target for the test to mean something (TV {tv:.2f})"
    g = torch.Generator().manual_seed(0)
    counts = torch.zeros(V ** n, dtype=torch.float64)
    accepted = proposed = 0
    for _ in range(runs):
        tokens, stats = speculative_generate(target, draft, prompt, n, k=3, strategy="sample", generator=g)
        x = tokens[0, -n:].tolist()
        counts[x[0] * V * V + x[1] * V + x[2]] += 1
        accepted, proposed = accepted + stats["accepted"], proposed + stats["checked"]
    assert 0.05 < accepted / proposed < 0.95, "both branches of the acceptance rule must run"
    assert chi2_pvalue(counts, joint) > 1e-3
    # the same test tells the draft's distribution apart from the target's: it has the power to fail
    assert chi2_pvalue(counts.view(V, V * V).sum(1), q1) < 1e-3


def test_expected_tokens_per_pass():
    assert expected_tokens_per_pass(0.0, 4) == 1.0
    assert math.isclose(expected_tokens_per_pass(0.5, 3), (1 - 0.5 ** 4) / 0.5)
    with pytest.raises(ValueError, match="acceptance_rate must be in"):
        expected_tokens_per_pass(1.5, 3)


def test_misuse_is_refused_with_the_fix():
    target = _gpt(0)
    with pytest.raises(ValueError, match="share a vocabulary"):
        speculative_generate(target, _gpt(1, vocab_size=30), torch.arange(3)[None], 4)
    with pytest.raises(ValueError, match=r"shape \(1, T\)"):
        speculative_generate(target, target, torch.arange(6).view(2, 3), 4)
    learned = GPT(GPTConfig(vocab_size=40, block_size=8, n_layer=1, n_head=2, n_embd=16)).eval()
    with pytest.raises(ValueError, match="keep T \\+ max_new_tokens <= block_size"):
        speculative_generate(learned, learned, torch.arange(5)[None], 4)
