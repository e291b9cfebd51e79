"""Parity of lesson 08's KV cache and generation with `transformers`' GPT-2 (configs built in code,
random weights, no downloads):

- our cached greedy `generate` on `GPT.from_hf_gpt2(GPT2LMHeadModel(config))` gives the tokens of
  `GPT2LMHeadModel.generate(do_sample=False, num_beams=1)` (no end-of-sequence stop), for a batch
  of 1 and a batch of 2 equal-length prompts;
- our per-step cached logits equal HF's when HF is run step by step with `past_key_values` and
  use_cache=True (1e-5): the prefill, then one token per step;
- after the prompt our KVCache holds HF's keys and values for every layer (transformers 5's
  DynamicCache: `past_key_values.layers[i].keys` / `.values`), shape (B, n_head, T, head_size).
"""

from __future__ import annotations

import pytest
import torch

from course_lib.generation import generate
from course_lib.kv_cache import KVCache
from course_lib.model import GPT
from tests.interop.hf_weights import randomize

pytest.importorskip("transformers")
from transformers import GenerationConfig, GPT2Config, GPT2LMHeadModel  # noqa: E402

F32_TOL = {"atol": 1e-5, "rtol": 1e-5}
CONFIG = {"n_layer": 2, "n_head": 4, "n_embd": 32, "n_positions": 24, "vocab_size": 41}
D_HEAD = CONFIG["n_embd"] // CONFIG["n_head"]


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def models():
    """(HF's GPT2LMHeadModel, our GPT converted from it), both in eval mode."""
    with torch.random.fork_rng():
        torch.manual_seed(0)
        hf = GPT2LMHeadModel(GPT2Config(bos_token_id=0, eos_token_id=0, **CONFIG))
    hf = randomize(hf).eval()
    return hf, GPT.from_hf_gpt2(hf).eval()


def _ids(B, T, seed=0):
    return torch.randint(0, CONFIG["vocab_size"], (B, T), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("B", [1, 2])
def test_cached_greedy_generate_equals_gpt2lmheadmodel_generate(models, B):
    hf, ours = models
    prompt = _ids(B, 5, seed=B)
    config = GenerationConfig(do_sample=False, num_beams=1, max_new_tokens=12, min_new_tokens=12,
                              eos_token_id=None, pad_token_id=0)
    with torch.no_grad():
        expected = hf.generate(prompt, attention_mask=torch.ones_like(prompt), generation_config=config)
    got = generate(ours, prompt, 12, use_cache=True)
    assert got.shape == expected.shape == (B, 17), f"ours {tuple(got.shape)}, HF {tuple(expected.shape)}"
    assert torch.equal(got, expected), f"the greedy tokens differ\nours {got}\nHF   {expected}"
    assert expected[:, 5:].unique().numel() > 1, "HF repeats one token: a weak test"


@pytest.mark.parametrize("B", [1, 2])
def test_per_step_cached_logits_equal_hf_run_step_by_step_with_past_key_values(models, B):
    hf, ours = models
    prompt = _ids(B, 6, seed=10 + B)
    cache = KVCache.for_model(ours, batch_size=B)
    with torch.no_grad():
        theirs = hf(prompt, use_cache=True)
        mine, _ = ours(prompt, cache=cache)
        torch.testing.assert_close(mine, theirs.logits, **F32_TOL, msg=lambda m: f"prefill: {m}")
        past = theirs.past_key_values
        for step in range(8):
            token = theirs.logits[:, -1:].argmax(-1)               # (B, 1): HF's greedy choice
            theirs = hf(token, past_key_values=past, use_cache=True)
            past = theirs.past_key_values
            mine, _ = ours(token, cache=cache)
            assert mine.shape == theirs.logits.shape == (B, 1, CONFIG["vocab_size"]), \
                f"step {step}: ours {tuple(mine.shape)}, HF {tuple(theirs.logits.shape)}"
            torch.testing.assert_close(mine, theirs.logits, **F32_TOL,
                                       msg=lambda m, step=step: f"step {step}: {m}")
    assert cache.length == past.get_seq_length() == 14, \
        f"ours holds {cache.length} tokens, HF {past.get_seq_length()}"


@pytest.mark.parametrize("B", [1, 2])
def test_the_cache_after_the_prompt_holds_hfs_keys_and_values_for_every_layer(models, B):
    hf, ours = models
    T = 7
    prompt = _ids(B, T, seed=20 + B)
    cache = KVCache.for_model(ours, batch_size=B)
    with torch.no_grad():
        past = hf(prompt, use_cache=True).past_key_values
        ours(prompt, cache=cache)
    assert len(past.layers) == cache.n_layer == CONFIG["n_layer"], f"HF has {len(past.layers)} layers"
    for i, layer in enumerate(past.layers):
        shape = (B, CONFIG["n_head"], T, D_HEAD)
        assert layer.keys.shape == layer.values.shape == shape, f"layer {i}: HF's shape {tuple(layer.keys.shape)}"
        torch.testing.assert_close(cache.k[i, :, :, :T], layer.keys, **F32_TOL,
                                   msg=lambda m, i=i: f"layer {i} keys: {m}")
        torch.testing.assert_close(cache.v[i, :, :, :T], layer.values, **F32_TOL,
                                   msg=lambda m, i=i: f"layer {i} values: {m}")
