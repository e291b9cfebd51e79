"""Spec of lesson 08's generation (course_lib.generation) and of the cache path of the model and
of its attention layers.

Pinned here:
- greedy tokens with and without the KV cache are identical (torch.equal) for every
  pos_encoding ("learned", "sinusoidal", "rope", "alibi", "none") and MHA / GQA / MQA, with a
  batch of 3 and with a one-token prompt;
- the logits of a cached forward equal the full forward's logits at the same positions (1e-5),
  after a one-call prefill then one token per step, and after a prefill in chunks of several
  tokens (queries Tq > 1 against Tk > Tq keys: the causal mask aligned to the end);
- `generate(..., use_cache=False)` and `generate(..., use_cache=True)` both equal a naive loop
  written here (run the whole prefix, argmax of the last logits, append);
- learned positions past block_size: both paths crop the context to its last block_size tokens
  (nanoGPT's rule), as a naive cropping loop does; other encodings run past block_size uncropped;
- sampling from a seeded torch.Generator gives the same tokens cached and uncached, and the same
  tokens again with the same seed; max_new_tokens=0 returns the prompt;
- generate runs in eval mode (dropout off, so cached == uncached even for a model with dropout in
  train mode) and gives the model its mode back;
- bad arguments are refused with a clear message: empty prompt, 1-D idx, temperature <= 0,
  unknown strategy, negative max_new_tokens, a generator that is not a torch.Generator;
- the attention layers alone: MultiHeadAttention, and RotaryMultiHeadAttention given the tokens'
  positions, fed one token (or a few) at a time with cache=KVCache(...).layer(0), give the full
  causal forward's outputs (1e-5), for MHA and GQA; a cache with kv (cross-attention) is refused.
The KVCache container itself is specified in test_kv_cache.py.
"""

from __future__ import annotations

import pytest
import torch

from course_lib.attention import MultiHeadAttention
from course_lib.generation import STRATEGIES, generate, next_token
from course_lib.kv_cache import KVCache
from course_lib.model import GPT, POS_ENCODINGS, GPTConfig
from course_lib.positional import RotaryMultiHeadAttention

TOL = {"atol": 1e-5, "rtol": 1e-5}
# an untied head: tiny random models with a tied head soon repeat one token forever
TINY = {"vocab_size": 29, "block_size": 32, "n_layer": 2, "n_head": 4, "n_embd": 16, "tie_weights": False}
HEADS = {"MHA": 4, "GQA": 2, "MQA": 1}
CHUNKS = [3, 1, 4, 2, 5]            # a chunked prefill and decode: 15 tokens in all


pytestmark = pytest.mark.usefixtures("one_thread")


def _gpt(seed=0, **overrides):
    """A tiny GPT in eval mode with every parameter random and large enough (N(0, 0.3); LayerNorm
    weights 1 + N(0, 0.1)) that the logits are far apart: GPT's N(0, 0.02) start gives
    near-uniform logits, where float rounding could decide a greedy tie."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = GPT(GPTConfig(**{**TINY, **overrides}))
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            layer_norm_weight = ("ln_" in name) and name.endswith("weight")
            p.copy_(1 + 0.1 * noise if layer_norm_weight else 0.3 * noise)
    return model.eval()


def _ids(B, T, seed=0):
    return torch.randint(0, TINY["vocab_size"], (B, T), generator=torch.Generator().manual_seed(seed))


@torch.no_grad()
def _naive_greedy(model, idx, max_new_tokens, crop=None):
    """The reference: run the whole (cropped) prefix, take the argmax of its last logits, append."""
    out = idx
    for _ in range(max_new_tokens):
        context = out if crop is None else out[:, -crop:]
        logits, _ = model(context)
        out = torch.cat([out, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return out


def _assert_same_tokens(got, expected, what):
    assert got.shape == expected.shape, f"{what}: shape {tuple(got.shape)} != {tuple(expected.shape)}"
    assert torch.equal(got, expected), f"{what}: the tokens differ\n{got}\n{expected}"


# ------------------------------------------------------------------------------------------
# greedy: cached == uncached
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("heads", HEADS)
@pytest.mark.parametrize("pos_encoding", POS_ENCODINGS)
def test_greedy_tokens_with_and_without_the_cache_are_identical(pos_encoding, heads):
    model = _gpt(pos_encoding=pos_encoding, n_kv_head=HEADS[heads])
    prompt = _ids(3, 4)
    cached = generate(model, prompt, 10, use_cache=True)
    uncached = generate(model, prompt, 10, use_cache=False)
    assert torch.equal(cached[:, :4], prompt), "the prompt is not the start of the output"
    _assert_same_tokens(cached, uncached, f"{pos_encoding} {heads}")
    assert cached[:, 4:].unique().numel() > 1, "every row repeats one token: a weak test"


@pytest.mark.parametrize("pos_encoding", POS_ENCODINGS)
def test_greedy_tokens_from_a_one_token_prompt_are_identical_with_and_without_the_cache(pos_encoding):
    model = _gpt(pos_encoding=pos_encoding, n_kv_head=2)
    prompt = _ids(2, 1, seed=3)
    cached = generate(model, prompt, 8, use_cache=True)
    _assert_same_tokens(cached, generate(model, prompt, 8, use_cache=False), pos_encoding)
    _assert_same_tokens(cached, _naive_greedy(model, prompt, 8), f"{pos_encoding} vs the naive loop")


# ------------------------------------------------------------------------------------------
# cached logits == full forward's logits
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("heads", HEADS)
@pytest.mark.parametrize("pos_encoding", POS_ENCODINGS)
def test_cached_logits_equal_the_full_forward_after_a_prefill_and_one_token_per_step(pos_encoding, heads):
    model = _gpt(pos_encoding=pos_encoding, n_kv_head=HEADS[heads])
    seq = _ids(3, 12, seed=1)
    with torch.no_grad():
        full, _ = model(seq)                 # causal: position t's logits see tokens 0..t only
        cache = KVCache.for_model(model, batch_size=3, max_len=12)
        prefill, _ = model(seq[:, :5], cache=cache)
        torch.testing.assert_close(prefill, full[:, :5], **TOL, msg=f"{pos_encoding} {heads}: prefill")
        for t in range(5, 12):
            step, _ = model(seq[:, t:t + 1], cache=cache)
            assert step.shape == (3, 1, TINY["vocab_size"]), f"step {t}: shape {tuple(step.shape)}"
            torch.testing.assert_close(step, full[:, t:t + 1], **TOL,
                                       msg=lambda m, t=t: f"{pos_encoding} {heads}, position {t}: {m}")
    assert cache.length == 12, f"the cache holds {cache.length} tokens after 12"


@pytest.mark.parametrize("heads", HEADS)
@pytest.mark.parametrize("pos_encoding", POS_ENCODINGS)
def test_cached_logits_equal_the_full_forward_when_fed_in_chunks(pos_encoding, heads):
    """Chunks of Tq > 1 new tokens attend to Tk > Tq keys: the causal mask is aligned to the end
    (query i sits at position Tk - Tq + i), and ALiBi's distances and RoPE's angles follow."""
    model = _gpt(pos_encoding=pos_encoding, n_kv_head=HEADS[heads])
    seq = _ids(2, sum(CHUNKS), seed=2)
    with torch.no_grad():
        full, _ = model(seq)
        cache = KVCache.for_model(model, batch_size=2, max_len=sum(CHUNKS))
        start = 0
        for size in CHUNKS:
            chunk, _ = model(seq[:, start:start + size], cache=cache)
            torch.testing.assert_close(chunk, full[:, start:start + size], **TOL,
                                       msg=lambda m, s=start: f"{pos_encoding} {heads}, chunk at {s}: {m}")
            start += size
    assert cache.length == sum(CHUNKS), f"the cache holds {cache.length} tokens"


def test_hidden_states_with_a_cache_equal_the_full_hidden_states():
    model = _gpt(pos_encoding="alibi", n_kv_head=1)
    seq = _ids(2, 9, seed=4)
    with torch.no_grad():
        full = model.hidden_states(seq)
        cache = KVCache.for_model(model, batch_size=2)
        first = model.hidden_states(seq[:, :6], cache=cache)
        rest = model.hidden_states(seq[:, 6:], cache=cache)
    torch.testing.assert_close(torch.cat([first, rest], dim=1), full, **TOL)


# ------------------------------------------------------------------------------------------
# generate == the naive loop; learned positions past block_size
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("pos_encoding", POS_ENCODINGS)
def test_generate_with_and_without_the_cache_equals_the_naive_loop(pos_encoding):
    model = _gpt(pos_encoding=pos_encoding, n_kv_head=2)
    prompt = _ids(2, 5, seed=5)
    expected = _naive_greedy(model, prompt, 12)
    _assert_same_tokens(generate(model, prompt, 12, use_cache=False), expected, "uncached vs naive")
    _assert_same_tokens(generate(model, prompt, 12, use_cache=True), expected, "cached vs naive")


@pytest.mark.parametrize("prompt_len", [5, 11], ids=["prompt-inside", "prompt-longer-than-block"])
def test_learned_positions_past_block_size_crop_to_the_last_block_size_tokens(prompt_len):
    model = _gpt(block_size=8)                     # learned positions: 0..7 only
    prompt = _ids(2, prompt_len, seed=6)
    expected = _naive_greedy(model, prompt, 20, crop=8)
    uncached = generate(model, prompt, 20, use_cache=False)
    cached = generate(model, prompt, 20, use_cache=True)
    assert uncached.shape == (2, prompt_len + 20), f"output shape {tuple(uncached.shape)}"
    _assert_same_tokens(uncached, expected, "uncached vs the naive cropping loop")
    _assert_same_tokens(cached, expected, "cached vs the naive cropping loop")


def test_other_encodings_run_past_block_size_without_cropping():
    model = _gpt(block_size=8, pos_encoding="rope")
    prompt = _ids(1, 5, seed=7)
    expected = _naive_greedy(model, prompt, 15)
    _assert_same_tokens(generate(model, prompt, 15, use_cache=False), expected, "uncached")
    _assert_same_tokens(generate(model, prompt, 15, use_cache=True), expected, "cached")
    cropped = _naive_greedy(model, prompt, 15, crop=8)
    assert not torch.equal(expected, cropped), "cropping made no difference here: a weak test"


# ------------------------------------------------------------------------------------------
# sampling, max_new_tokens=0, train/eval mode
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("pos_encoding", ["learned", "rope"])
def test_sampling_from_a_seeded_generator_is_the_same_cached_and_uncached_and_reproducible(pos_encoding):
    model = _gpt(pos_encoding=pos_encoding, block_size=8)

    def sample(use_cache, seed=0):
        g = torch.Generator().manual_seed(seed)
        return generate(model, _ids(3, 3, seed=8), 12, strategy="sample", temperature=2.0,
                        use_cache=use_cache, generator=g)

    cached = sample(True)
    _assert_same_tokens(cached, sample(False), "sampling, cached vs uncached")
    _assert_same_tokens(cached, sample(True), "sampling twice with the same seed")
    assert not torch.equal(cached, sample(True, seed=1)), "another seed gave the same tokens"
    greedy = generate(model, _ids(3, 3, seed=8), 12)
    assert not torch.equal(cached, greedy), "sampling at temperature 2 gave the greedy tokens"


def test_next_token_greedy_takes_the_first_maximum_and_sample_draws_from_the_softmax():
    logits = torch.tensor([[1.0, 3.0, 3.0, -2.0], [0.0, 0.0, 0.0, 5.0]])
    assert next_token(logits).tolist() == [[1], [3]], "greedy is not the first argmax"
    certain = torch.tensor([[-float("inf"), 0.0, -float("inf")]]).expand(50, 3)
    drawn = next_token(certain, "sample", generator=torch.Generator().manual_seed(0))
    assert drawn.shape == (50, 1), f"sample returned shape {tuple(drawn.shape)}, expected (50, 1)"
    assert (drawn == 1).all(), "sampled a token of probability 0"
    assert STRATEGIES == ("greedy", "sample", "beam"), f"STRATEGIES is {STRATEGIES}"


@pytest.mark.parametrize("use_cache", [True, False])
def test_max_new_tokens_zero_returns_the_prompt(use_cache):
    prompt = _ids(2, 4, seed=9)
    out = generate(_gpt(), prompt, 0, use_cache=use_cache)
    _assert_same_tokens(out, prompt, "max_new_tokens=0")


def test_generate_gives_the_model_its_train_or_eval_mode_back():
    model = _gpt(dropout=0.3)
    model.train()
    generate(model, _ids(1, 3), 4)
    assert model.training, "generate left a training model in eval mode"
    assert all(m.training for m in model.modules()), "some submodules were left in eval mode"
    model.eval()
    generate(model, _ids(1, 3), 4, use_cache=False)
    assert not any(m.training for m in model.modules()), "generate left an eval model in train mode"


@pytest.mark.parametrize("use_cache", [True, False])
def test_generate_gives_every_submodule_its_own_mode_back(use_cache):
    """A training model whose first block was put in eval mode (its dropout frozen) keeps it so."""
    model = _gpt(dropout=0.3)
    model.train()
    model.blocks[0].eval()
    modes = {name: m.training for name, m in model.named_modules()}
    generate(model, _ids(1, 3), 4, use_cache=use_cache)
    changed = sorted(name for name, m in model.named_modules() if m.training != modes[name])
    assert not changed, f"generate changed the train/eval mode of {changed}"


def test_with_dropout_in_train_mode_cached_equals_uncached_because_generate_turns_dropout_off():
    model = _gpt(dropout=0.5, pos_encoding="sinusoidal")
    prompt = _ids(3, 4, seed=10)
    expected = _naive_greedy(model.eval(), prompt, 10)         # eval: no dropout
    model.train()
    with torch.random.fork_rng():
        torch.manual_seed(0)
        cached = generate(model, prompt, 10, use_cache=True)
        uncached = generate(model, prompt, 10, use_cache=False)
    _assert_same_tokens(cached, uncached, "train mode with dropout, cached vs uncached")
    _assert_same_tokens(cached, expected, "train mode with dropout vs eval mode")
    assert model.training, "the model did not get its train mode back"


# ------------------------------------------------------------------------------------------
# errors
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("idx", "kwargs", "error", "match"), [
    (torch.zeros(2, 0, dtype=torch.long), {}, ValueError, r"the prompt is empty \(T = 0\)"),
    (torch.zeros(5, dtype=torch.long), {}, ValueError, r"idx must be a \(B, T\) tensor .*got \(5,\) \(add a batch dim with idx\[None\]\)"),
    ([[1, 2]], {}, ValueError, r"idx must be a \(B, T\) tensor of token ids, got list"),
    (None, {"temperature": 0}, ValueError, r"temperature must be a number > 0, got 0; .*strategy='greedy'"),
    (None, {"temperature": -1.0}, ValueError, r"temperature must be a number > 0, got -1.0; greedy decoding"),
    (None, {"strategy": "top-k"}, ValueError, r"strategy must be one of \('greedy', 'sample', 'beam'\), got 'top-k'"),
    (None, {"strategy": "beam"}, ValueError, r"strategy='beam' needs beam_width"),
    (None, {"strategy": "beam", "beam_width": 0}, ValueError, r"beam_width must be an integer >= 1"),
    (None, {"beam_width": 2}, ValueError, r"beam_width is for strategy='beam', not 'greedy'"),
    (None, {"strategy": "sample", "top_k": 0}, ValueError, r"top_k must be None or an integer >= 1"),
    (None, {"strategy": "sample", "top_p": 0.0}, ValueError, r"top_p must be None or a number in \(0, 1\], got 0.0"),
    (None, {"strategy": "sample", "top_p": 1.5}, ValueError, r"top_p must be None or a number in \(0, 1\], got 1.5"),
    (None, {"top_k": 5}, ValueError, r"greedy takes the argmax, which they do not change"),
    (None, {"eos_id": 29}, ValueError, r"eos_id must be a token id in 0..28, got 29"),
    (None, {"max_new_tokens": -1}, ValueError, r"max_new_tokens must be an integer >= 0, got -1"),
    (None, {"generator": 42}, TypeError, r"generator must be a torch.Generator, got int"),
], ids=["empty", "1-D", "list", "temperature-0", "temperature-negative", "strategy", "beam-no-width",
        "beam-width-0", "width-without-beam", "top-k-0", "top-p-0", "top-p-above-1", "greedy-top-k",
        "eos-out-of-vocab", "negative-max-new-tokens", "generator"])
def test_bad_arguments_are_refused_with_a_clear_message(idx, kwargs, error, match):
    idx = _ids(1, 3) if idx is None else idx
    kwargs = {"max_new_tokens": 4, **kwargs}
    with pytest.raises(error, match=match):
        generate(_gpt(), idx, **kwargs)


def test_a_model_that_is_not_a_course_gpt_is_refused():
    with pytest.raises(TypeError, match="model must be a course_lib.model.GPT, got Linear"):
        generate(torch.nn.Linear(2, 2), _ids(1, 3), 4)


# ------------------------------------------------------------------------------------------
# the attention layers alone
# ------------------------------------------------------------------------------------------

def _attention(cls, n_kv_head, seed=0):
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return cls(16, 4, n_kv_head).eval()


def _x(B=2, T=7, seed=0):
    return torch.randn(B, T, 16, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "explicit"])
@pytest.mark.parametrize("heads", ["MHA", "GQA"])
def test_multi_head_attention_fed_one_token_at_a_time_with_a_cache_equals_the_full_causal_forward(heads, need_weights):
    attn = _attention(MultiHeadAttention, HEADS[heads])
    x = _x()
    cache = KVCache(1, 2, HEADS[heads], 7, 4).layer(0)
    with torch.no_grad():
        full, _ = attn(x, is_causal=True)
        steps = [attn(x[:, t:t + 1], is_causal=True, need_weights=need_weights, cache=cache)[0]
                 for t in range(7)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, **TOL)
    assert cache.length == 7, f"the layer cache holds {cache.length} tokens after 7 steps"


@pytest.mark.parametrize("heads", ["MHA", "GQA"])
def test_multi_head_attention_fed_in_chunks_with_a_cache_equals_the_full_causal_forward(heads):
    attn = _attention(MultiHeadAttention, HEADS[heads])
    x = _x(T=9, seed=1)
    cache = KVCache(1, 2, HEADS[heads], 9, 4).layer(0)
    with torch.no_grad():
        full, _ = attn(x, is_causal=True)
        chunks = [attn(x[:, s:e], is_causal=True, cache=cache)[0] for s, e in ((0, 4), (4, 7), (7, 9))]
    torch.testing.assert_close(torch.cat(chunks, dim=1), full, **TOL)


@pytest.mark.parametrize("heads", ["MHA", "GQA"])
def test_rotary_attention_fed_one_token_at_a_time_at_its_position_equals_the_full_causal_forward(heads):
    attn = _attention(RotaryMultiHeadAttention, HEADS[heads])
    x = _x(seed=2)
    cache = KVCache(1, 2, HEADS[heads], 7, 4).layer(0)
    with torch.no_grad():
        full, _ = attn(x, is_causal=True)
        steps = [attn(x[:, t:t + 1], is_causal=True, positions=torch.tensor([t]), cache=cache)[0]
                 for t in range(7)]
        unrotated = KVCache(1, 2, HEADS[heads], 7, 4).layer(0)
        at_zero = [attn(x[:, t:t + 1], is_causal=True, cache=unrotated)[0] for t in range(7)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, **TOL)
    assert not torch.allclose(torch.cat(at_zero, dim=1), full, **TOL), \
        "without their positions the new tokens were still rotated correctly: positions are ignored"


def test_a_cache_with_cross_attention_is_refused():
    attn = _attention(MultiHeadAttention, 4)
    cache = KVCache(1, 2, 4, 8, 4).layer(0)
    with pytest.raises(ValueError, match=r"cache= is for self-attention \(kv=None\)"):
        attn(_x(T=1), kv=_x(T=5, seed=1), cache=cache)
    assert cache.length == 0, "the refused call wrote into the cache"
    rotary = _attention(RotaryMultiHeadAttention, 4)
    with pytest.raises(ValueError, match="self-attention only"):
        rotary(_x(T=1), kv=_x(T=5, seed=1), cache=cache)
