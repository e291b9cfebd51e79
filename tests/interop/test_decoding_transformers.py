"""Parity of lesson 09's decoding with `transformers` (random weights, no downloads):

- top_k_filter and top_p_filter equal TopKLogitsWarper and TopPLogitsWarper on random logits,
  ties included (logits rounded to a coarse grid), and filter_logits equals Temperature ->
  TopK -> TopP, the order `generate` builds them in;
- the model has no end-of-sequence token (GPT2Config(eos_token_id=None)): with one, `generate`
  would also suppress it until min_new_tokens, a logits processor ours does not have;
- beam search equals GPT2LMHeadModel.generate(num_beams=b, do_sample=False) with no
  end-of-sequence token: with every beam the same length, its length penalty cannot change the
  ranking, and its early_stopping does not matter, so it is the textbook algorithm;
- sampling: from the same global seed, generate(strategy='sample', top_k, top_p, temperature)
  draws the same tokens as HF's generate(do_sample=True) (same probabilities, same
  torch.multinomial call on the same RNG).
"""

from __future__ import annotations

import pytest
import torch

from course_lib.generation import beam_search, filter_logits, generate, top_k_filter, top_p_filter
from course_lib.model import GPT
from tests.interop.hf_weights import randomize

pytest.importorskip("transformers")
from transformers import GenerationConfig, GPT2Config, GPT2LMHeadModel  # noqa: E402
from transformers.generation.logits_process import (  # noqa: E402
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

pytestmark = pytest.mark.usefixtures("one_thread")
CONFIG = {"n_layer": 2, "n_head": 4, "n_embd": 32, "n_positions": 40, "vocab_size": 23}


def _logits(seed, rows=16, V=40, grid=0.5):
    """Random logits rounded to a grid, so that many values tie."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(rows, V, generator=g) * 3 / grid).round() * grid


@pytest.mark.parametrize("k", [1, 2, 3, 7, 20, 40, 100])
def test_top_k_filter_equals_top_k_logits_warper_ties_included(k):
    logits = _logits(k)
    expected = TopKLogitsWarper(top_k=k)(None, logits.clone())
    assert torch.equal(top_k_filter(logits, k), expected)


@pytest.mark.parametrize("p", [0.01, 0.1, 0.35, 0.5, 0.6, 0.9, 0.99, 1.0])
@pytest.mark.parametrize("grid", [0.5, 1e-6])
def test_top_p_filter_equals_top_p_logits_warper_ties_included(p, grid):
    logits = _logits(int(p * 100), grid=grid)
    expected = TopPLogitsWarper(top_p=p)(None, logits.clone())
    assert torch.equal(top_p_filter(logits, p), expected)


def test_the_notes_top_p_example_gives_the_warpers_five_tokens():
    probs = torch.tensor([[0.30, 0.15, 0.10, 0.04, 0.03] + [0.02] * 19])
    expected = TopPLogitsWarper(top_p=0.6)(None, probs.log())
    assert torch.equal(top_p_filter(probs.log(), 0.6), expected)
    assert int(torch.isfinite(expected).sum()) == 5


@pytest.mark.parametrize(("T", "k", "p"), [(0.7, 5, 0.8), (1.5, None, 0.5), (0.3, 2, None)])
def test_filter_logits_equals_temperature_then_top_k_then_top_p_warpers(T, k, p):
    logits = _logits(3, grid=1e-3)
    expected = TemperatureLogitsWarper(T)(None, logits.clone())
    if k is not None:
        expected = TopKLogitsWarper(k)(None, expected)
    if p is not None:
        expected = TopPLogitsWarper(p)(None, expected)
    torch.testing.assert_close(filter_logits(logits, T, k, p), expected, rtol=0, atol=0)


@pytest.fixture(scope="module")
def models():
    with torch.random.fork_rng():
        torch.manual_seed(0)
        hf = GPT2LMHeadModel(GPT2Config(bos_token_id=None, eos_token_id=None, **CONFIG))
    hf = randomize(hf).eval()
    return hf, GPT.from_hf_gpt2(hf).eval()


@pytest.mark.parametrize(("B", "width", "n"), [(1, 1, 10), (1, 2, 12), (1, 4, 16), (2, 3, 9), (1, 8, 6)])
def test_beam_search_equals_gpt2lmheadmodel_generate_with_num_beams(models, B, width, n):
    hf, ours = models
    prompt = torch.randint(0, CONFIG["vocab_size"], (B, 5), generator=torch.Generator().manual_seed(width))
    config = GenerationConfig(num_beams=width, do_sample=False, max_new_tokens=n, eos_token_id=None,
                              pad_token_id=0, length_penalty=0.0, early_stopping=True)
    with torch.no_grad():
        expected = hf.generate(prompt, attention_mask=torch.ones_like(prompt), generation_config=config)
    got = beam_search(ours, prompt, n, width)
    assert torch.equal(got, expected), f"B={B}, beams {width}:\nours {got}\nHF   {expected}"
    assert torch.equal(generate(ours, prompt, n, strategy="beam", beam_width=width), expected)


@pytest.mark.parametrize(("T", "k", "p", "seed"), [(1.0, None, None, 0), (0.8, 8, None, 1),
                                                   (1.3, None, 0.7, 2), (0.9, 5, 0.9, 3)])
def test_sampling_from_the_same_global_seed_draws_the_tokens_of_hf_generate(models, T, k, p, seed):
    hf, ours = models
    prompt = torch.randint(0, CONFIG["vocab_size"], (1, 4), generator=torch.Generator().manual_seed(seed))
    config = GenerationConfig(do_sample=True, max_new_tokens=15, eos_token_id=None, pad_token_id=0,
                              temperature=T, top_k=k or 0, top_p=p or 1.0)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        with torch.no_grad():
            expected = hf.generate(prompt, attention_mask=torch.ones_like(prompt), generation_config=config)
        torch.manual_seed(seed)
        got = generate(ours, prompt, 15, strategy="sample", temperature=T, top_k=k, top_p=p)
    assert torch.equal(got, expected), f"T={T}, top_k={k}, top_p={p}:\nours {got}\nHF   {expected}"
