"""Spec of lesson 08's KV cache (course_lib.kv_cache): KVCache, LayerKVCache, KVCacheFullError,
and how GPT.forward(idx, cache=...) checks the cache it is given.

Pinned here:
- memory: k and v are preallocated buffers of shape (n_layer, batch_size, n_kv_head, max_len,
  head_size) in the requested dtype; `nbytes` is batch_size x kv_cache_bytes(n_layer, n_kv_head,
  head_size, element size, max_len) for float32 / float16 / bfloat16 and MHA / GQA / MQA; a GQA or
  MQA model's cache (KVCache.for_model) is n_head / n_kv_head times smaller than the MHA one;
  `bytes_used` grows linearly with the number of tokens held;
- `update(layer, k, v)` writes at the layer's next positions, into the preallocated storage (no
  copy, no reallocation), and returns views of that storage; `length` is the minimum over the
  layers, so it advances only once every layer has appended; `layer(i)` is that layer's view;
- `reorder(indices)` selects, repeats and permutes batch rows (batch 1 -> 3 beams included) and
  keeps the length; `reset()` forgets the tokens and keeps the memory;
- clear errors, whose messages name the problem: a full cache (KVCacheFullError, a ValueError,
  which leaves the cache as it was), a wrong head count (with the GQA hint), a wrong head_size, a
  3-D k, k and v of different shapes, a wrong dtype, a wrong device, a bad layer index, bad
  reorder indices and bad constructor arguments;
- GPT.forward refuses a cache made for another model, for another batch size, an object that is
  not a KVCache, a cache whose layers hold different lengths, and learned positions that would
  go past block_size.
Generation with the cache (and parity of cached and uncached logits) is in test_generation.py.
"""

from __future__ import annotations

import pytest
import torch

from course_lib.attention import kv_cache_bytes
from course_lib.kv_cache import KVCache, KVCacheFullError, LayerKVCache
from course_lib.model import GPT, GPTConfig

TINY = {"vocab_size": 23, "block_size": 8, "n_layer": 2, "n_head": 4, "n_embd": 16}
# (n_layer, batch_size, n_kv_head, max_len, head_size)
SIZES = (2, 3, 4, 6, 8)


pytestmark = pytest.mark.usefixtures("one_thread")


def _gpt(seed=0, **overrides):
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return GPT(GPTConfig(**{**TINY, **overrides})).eval()


def _kv(B=3, H=4, T=1, d=8, seed=0, dtype=torch.float32):
    """A pair (k, v) of shape (B, H, T, d) with distinct random values."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(B, H, T, d, generator=g).to(dtype),
            torch.randn(B, H, T, d, generator=g).to(dtype))


def _ids(B, T, seed=0):
    return torch.randint(0, TINY["vocab_size"], (B, T), generator=torch.Generator().manual_seed(seed))


def _fill(cache, T, seed=0):
    """Append T positions to every layer; returns the (k, v) appended to each layer."""
    pairs = [_kv(cache.batch_size, cache.n_kv_head, T, cache.head_size, seed=seed + i, dtype=cache.dtype)
             for i in range(cache.n_layer)]
    for i, (k, v) in enumerate(pairs):
        cache.update(i, k, v)
    return pairs


# ------------------------------------------------------------------------------------------
# buffers and sizes
# ------------------------------------------------------------------------------------------

def test_buffers_are_preallocated_with_shape_layers_batch_heads_max_len_d_head():
    cache = KVCache(*SIZES)
    assert cache.k.shape == SIZES, f"k has shape {tuple(cache.k.shape)}, expected {SIZES}"
    assert cache.v.shape == SIZES, f"v has shape {tuple(cache.v.shape)}, expected {SIZES}"
    assert cache.k.dtype == cache.v.dtype == torch.float32, "the default dtype is float32"
    assert cache.k.data_ptr() != cache.v.data_ptr(), "k and v share their storage"
    assert (cache.n_layer, cache.batch_size, cache.n_kv_head, cache.max_len, cache.head_size) == SIZES, \
        f"the size attributes of {cache!r}"
    assert cache.length == len(cache) == 0, "a new cache holds no tokens"
    assert cache.bytes_used == 0, "a new cache uses no bytes"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("n_kv_head", [4, 2, 1], ids=["MHA", "GQA", "MQA"])
def test_nbytes_is_batch_size_times_kv_cache_bytes(dtype, n_kv_head):
    n_layer, B, max_len, head_size = 3, 2, 5, 8
    cache = KVCache(n_layer, B, n_kv_head, max_len, head_size, dtype=dtype)
    element_size = torch.tensor([], dtype=dtype).element_size()
    expected = B * kv_cache_bytes(n_layer, n_kv_head, head_size, element_size, max_len)
    assert cache.dtype == cache.k.dtype == cache.v.dtype == dtype, f"buffers are {cache.k.dtype}, not {dtype}"
    assert cache.nbytes == expected, f"nbytes {cache.nbytes:,}, formula {expected:,}"
    assert cache.nbytes == cache.k.nbytes + cache.v.nbytes, "nbytes is not what the buffers hold"


def test_for_model_reads_the_sizes_dtype_and_device_from_the_model():
    model = _gpt(n_kv_head=2).double()
    cache = KVCache.for_model(model, batch_size=3)
    c = model.config
    assert (cache.n_layer, cache.batch_size, cache.n_kv_head, cache.max_len, cache.head_size) == (
        c.n_layer, 3, c.n_kv_head, c.block_size, c.head_size), f"sizes of {cache!r}"
    assert cache.dtype == torch.float64, f"the cache has dtype {cache.dtype}, the model float64"
    assert cache.device == next(model.parameters()).device, f"the cache is on {cache.device}"
    assert KVCache.for_model(model, 1, 5).max_len == 5, "an explicit max_len is ignored"
    assert KVCache.for_model(model, 1, dtype=torch.float16).dtype == torch.float16, "an explicit dtype is ignored"


def test_for_model_refuses_something_that_is_not_a_course_gpt():
    with pytest.raises(TypeError, match="KVCache.for_model needs a course_lib.model.GPT, got Linear"):
        KVCache.for_model(torch.nn.Linear(2, 2), 1)


def test_gqa_and_mqa_caches_are_n_head_over_n_kv_head_times_smaller_than_the_mha_cache():
    mha = KVCache.for_model(_gpt(n_kv_head=4), batch_size=2)
    for n_kv_head in (2, 1):
        smaller = KVCache.for_model(_gpt(n_kv_head=n_kv_head), batch_size=2)
        ratio = TINY["n_head"] // n_kv_head
        assert smaller.nbytes * ratio == mha.nbytes, \
            f"n_kv_head={n_kv_head}: {smaller.nbytes:,} B x {ratio} != MHA's {mha.nbytes:,} B"
        assert smaller.k.shape[2] == n_kv_head, "the cache stores the query heads, not the KV heads"


def test_bytes_used_grows_linearly_with_the_number_of_tokens_held():
    cache = KVCache(*SIZES)
    n_layer, B, H, max_len, d = SIZES
    per_token = B * kv_cache_bytes(n_layer, H, d, 4, 1)
    for t in range(1, max_len + 1):
        _fill(cache, 1, seed=t)
        assert cache.bytes_used == t * per_token, f"after {t} tokens: {cache.bytes_used:,} B"
    assert cache.bytes_used == cache.nbytes, "a full cache uses every byte it allocated"


# ------------------------------------------------------------------------------------------
# update: in place, at the right positions
# ------------------------------------------------------------------------------------------

def test_update_returns_views_of_the_preallocated_storage_without_copying():
    cache = KVCache(*SIZES)
    k_ptr, v_ptr = cache.k.data_ptr(), cache.v.data_ptr()
    k, v = _kv(T=2)
    k_all, v_all = cache.update(1, k, v)
    assert k_all.data_ptr() == cache.k[1].data_ptr(), "the keys returned are not the cache's memory"
    assert v_all.data_ptr() == cache.v[1].data_ptr(), "the values returned are not the cache's memory"
    cache.k[1, 0, 0, 0, 0] = 123.0
    cache.v[1, 2, 3, 1, 7] = -7.0
    assert k_all[0, 0, 0, 0] == 123.0, "writing into the buffer is not seen through the keys returned"
    assert v_all[2, 3, 1, 7] == -7.0, "writing into the buffer is not seen through the values returned"
    _fill(cache, 3)
    assert (cache.k.data_ptr(), cache.v.data_ptr()) == (k_ptr, v_ptr), "appending reallocated the buffers"


def test_update_appends_at_the_layers_next_positions_and_returns_everything_it_holds():
    cache = KVCache(*SIZES)
    k1, v1 = _kv(T=2, seed=1)
    k2, v2 = _kv(T=3, seed=2)
    cache.update(0, k1, v1)
    k_all, v_all = cache.update(0, k2, v2)
    assert k_all.shape == v_all.shape == (3, 4, 5, 8), f"returned shape {tuple(k_all.shape)}"
    assert torch.equal(k_all, torch.cat([k1, k2], dim=2)), "the keys are not k1 followed by k2"
    assert torch.equal(v_all, torch.cat([v1, v2], dim=2)), "the values are not v1 followed by v2"
    assert torch.equal(cache.k[0, :, :, 2:5], k2), "k2 is not at positions 2..4 of layer 0"
    assert not cache.k[0, :, :, 5:].any(), "positions past the ones written were touched"
    assert not cache.k[1].any(), "layer 1's keys were written by an update of layer 0"
    assert not cache.v[1].any(), "layer 1's values were written by an update of layer 0"


def test_length_is_the_minimum_over_layers_and_advances_once_every_layer_has_appended():
    cache = KVCache(3, 1, 2, 8, 4)
    k, v = _kv(B=1, H=2, T=2, d=4)
    cache.update(0, k, v)
    assert cache.length == 0, "length advanced when only layer 0 had appended"
    cache.update(1, k, v)
    assert cache.length == 0, "length advanced before the last layer appended"
    cache.update(2, k, v)
    assert cache.length == 2, f"every layer holds 2 tokens, length is {cache.length}"
    cache.update(2, k, v)
    assert cache.length == 2, "length followed the longest layer, not the shortest"


def test_layer_gives_one_layers_view_that_appends_to_that_layer():
    cache = KVCache(*SIZES)
    layer = cache.layer(1)
    assert isinstance(layer, LayerKVCache), f"layer(1) returned a {type(layer).__name__}"
    k, v = _kv(T=2)
    k_all, _ = layer.update(k, v)
    assert layer.length == 2, f"the layer holds {layer.length} tokens after appending 2"
    assert cache.layer(0).length == 0, "another layer's length changed"
    assert torch.equal(cache.k[1, :, :, :2], k), "the layer view wrote somewhere else"
    assert k_all.data_ptr() == cache.k[1].data_ptr(), "the layer view returned a copy"


# ------------------------------------------------------------------------------------------
# reorder and reset
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("rows", [[2, 0, 1], [1, 1, 0], [2], [0, 1, 2, 2, 1]],
                         ids=["permute", "repeat", "select", "grow"])
def test_reorder_keeps_the_rows_given_in_that_order_and_the_length(rows):
    cache = KVCache(*SIZES)
    _fill(cache, 2)
    k_before, v_before = cache.k.clone(), cache.v.clone()
    cache.reorder(torch.tensor(rows))
    assert cache.batch_size == len(rows), f"batch size {cache.batch_size}, expected {len(rows)}"
    assert cache.length == 2, f"reorder changed the length to {cache.length}"
    assert torch.equal(cache.k, k_before[:, rows]), f"keys are not rows {rows}"
    assert torch.equal(cache.v, v_before[:, rows]), f"values are not rows {rows}"


def test_reorder_copies_one_prompt_to_three_beams_which_then_decode_independently():
    cache = KVCache(2, 1, 2, 6, 4)
    _fill(cache, 3)
    prompt_k = cache.k[:, 0, :, :3].clone()
    cache.reorder(torch.tensor([0, 0, 0]))
    assert cache.batch_size == 3, f"batch size {cache.batch_size} after copying row 0 three times"
    assert cache.length == 3, f"reorder changed the length to {cache.length}"
    for row in range(3):
        assert torch.equal(cache.k[:, row, :, :3], prompt_k), f"beam {row} does not hold the prompt"
    k, v = _kv(B=3, H=2, T=1, d=4, seed=9)
    k_all, _ = cache.update(0, k, v)
    assert k_all.shape == (3, 2, 4, 4), f"after appending to 3 beams: {tuple(k_all.shape)}"
    assert not torch.equal(k_all[0], k_all[1]), "the beams share their storage"


def test_reset_forgets_every_token_and_keeps_the_memory():
    cache = KVCache(*SIZES)
    _fill(cache, 4)
    nbytes, ptr = cache.nbytes, cache.k.data_ptr()
    cache.reset()
    assert cache.length == 0, f"after reset the cache holds {cache.length} tokens"
    assert cache.bytes_used == 0, f"after reset {cache.bytes_used:,} bytes are used"
    assert cache.nbytes == nbytes, "reset changed the memory allocated"
    assert cache.k.data_ptr() == ptr, "reset moved the buffers"
    k, v = _kv(T=1, seed=5)
    k_all, _ = cache.update(0, k, v)
    assert k_all.shape[2] == 1, f"after reset the layer returns {k_all.shape[2]} positions, not 1"
    assert torch.equal(k_all, k), "after reset, appending does not write position 0"



def test_truncate_keeps_the_first_tokens_and_the_next_append_overwrites_the_rest():
    cache = KVCache(*SIZES)
    _fill(cache, 4)
    kept = cache.k[:, :, :, :2].clone()
    cache.truncate(2)
    assert cache.length == 2, f"after truncate(2) the cache holds {cache.length} tokens"
    assert cache.layer_lengths == (2,) * cache.n_layer, f"layer lengths {cache.layer_lengths}"
    k, v = _kv(T=1, seed=7)
    k_all, _ = cache.update(0, k, v)
    assert torch.equal(k_all[:, :, :2], kept[0]), "truncate changed the tokens it keeps"
    assert torch.equal(k_all[:, :, 2:], k), "the append after truncate(2) does not write position 2"
    with pytest.raises(ValueError, match="cannot be truncated to 9"):
        cache.truncate(9)

# ------------------------------------------------------------------------------------------
# errors
# ------------------------------------------------------------------------------------------

def test_a_full_cache_raises_kv_cache_full_error_and_stays_as_it_was():
    assert issubclass(KVCacheFullError, ValueError), "KVCacheFullError must be a ValueError"
    cache = KVCache(1, 3, 4, 4, 8)
    cache.update(0, *_kv(T=3))
    before = cache.k.clone()
    with pytest.raises(KVCacheFullError, match=r"the KV cache is full: it holds max_len=4 positions, 3 are used") as error:
        cache.update(0, *_kv(T=2, seed=1))
    assert "max_len >= 5" in str(error.value), f"the message does not say what fits: {error.value}"
    assert cache.length == 3, "a refused update changed the length"
    assert torch.equal(cache.k, before), "a refused update wrote into the cache"
    cache.update(0, *_kv(T=1, seed=2))
    assert cache.length == 4, "the last free position could not be used after the error"


def _bad_kv():
    k, v = _kv()                       # (3, 4, 1, 8): right for KVCache(*SIZES)
    return {
        "head-count": (_kv(H=2)[0], _kv(H=2)[1], ValueError,
                       r"n_kv_head=4.*got \(3, 2, 1, 8\)\. .*before they are repeated .*\(GQA/MQA\)"),
        "head_size": (_kv(d=6)[0], _kv(d=6)[1], ValueError, r"head_size=8\) with T >= 1, got \(3, 4, 1, 6\)"),
        "batch": (_kv(B=2)[0], _kv(B=2)[1], ValueError, r"batch_size=3.*got \(2, 4, 1, 8\)"),
        "3-D": (k.flatten(1, 2), v.flatten(1, 2), ValueError, r"Split the heads first: \(B, T, H\*d\)"),
        "empty": (k[:, :, :0], v[:, :, :0], ValueError, r"T >= 1, got \(3, 4, 0, 8\)"),
        "k-v-shapes": (k, _kv(T=2)[1], ValueError, r"k and v must have the same shape"),
        "dtype": (k.double(), v.double(), TypeError, r"the cache's dtype torch.float32, got torch.float64"),
        "not-a-tensor": (k.tolist(), v, TypeError, r"k must be a torch.Tensor, got list"),
    }


@pytest.mark.parametrize("case", list(_bad_kv()))
def test_keys_and_values_of_the_wrong_shape_or_dtype_are_refused_with_a_clear_message(case):
    k, v, error, match = _bad_kv()[case]
    cache = KVCache(*SIZES)
    with pytest.raises(error, match=match):
        cache.update(0, k, v)
    assert cache.layer(0).length == 0, "a refused update changed the layer's length"


def test_keys_on_another_device_than_the_cache_are_refused():
    cache = KVCache(1, 1, 1, 4, 2, device="meta")
    k, v = _kv(B=1, H=1, T=1, d=2)
    with pytest.raises(ValueError, match="the cache on meta: create the cache on the model's device"):
        cache.update(0, k, v)


@pytest.mark.parametrize("layer", [-1, 2, 1.0, True])
def test_a_bad_layer_index_is_refused(layer):
    cache = KVCache(*SIZES)
    with pytest.raises(ValueError, match=r"layer must be (an integer )?in 0\.\.1"):
        cache.update(layer, *_kv())
    with pytest.raises(ValueError, match=r"layer must be (an integer )?in 0\.\.1"):
        cache.layer(layer)


@pytest.mark.parametrize(("indices", "error", "match"), [
    (torch.tensor([], dtype=torch.long), ValueError, "non-empty 1-D tensor of batch rows"),
    (torch.tensor([[0, 1]]), ValueError, "non-empty 1-D tensor of batch rows"),
    ([0, 1], ValueError, "non-empty 1-D tensor of batch rows"),
    (torch.tensor([0.0, 1.0]), TypeError, r"indices must be integers, got torch.float32; use indices.long\(\)"),
    (torch.tensor([True, False, True]), TypeError, "indices must be integers, got torch.bool"),
    (torch.tensor([0, 3]), ValueError, r"indices must lie in 0\.\.2 \(the cache's batch rows\), got 3"),
    (torch.tensor([-1, 0]), ValueError, r"indices must lie in 0\.\.2 \(the cache's batch rows\), got -1"),
], ids=["empty", "2-D", "list", "float", "bool", "too-large", "negative"])
def test_bad_reorder_indices_are_refused_and_leave_the_cache_alone(indices, error, match):
    cache = KVCache(*SIZES)
    _fill(cache, 2)
    before = cache.k.clone()
    with pytest.raises(error, match=match):
        cache.reorder(indices)
    assert cache.batch_size == 3, f"a refused reorder changed the batch size to {cache.batch_size}"
    assert torch.equal(cache.k, before), "a refused reorder changed the keys"


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"max_len": 0}, ValueError, r"max_len must be an integer >= 1 \(the most tokens the cache holds\), got 0"),
    ({"n_layer": 0}, ValueError, "n_layer must be an integer >= 1, got 0"),
    ({"batch_size": 2.0}, ValueError, "batch_size must be an integer >= 1, got 2.0"),
    ({"n_kv_head": True}, ValueError, "n_kv_head must be an integer >= 1, got True"),
    ({"head_size": -4}, ValueError, "head_size must be an integer >= 1, got -4"),
    ({"dtype": torch.int64}, TypeError, r"dtype must be a floating torch.dtype \(the model's\), got torch.int64"),
    ({"dtype": "float32"}, TypeError, "dtype must be a floating torch.dtype"),
])
def test_bad_constructor_arguments_are_refused_with_a_message_naming_them(kwargs, error, match):
    sizes = dict(zip(("n_layer", "batch_size", "n_kv_head", "max_len", "head_size"), SIZES, strict=True))
    with pytest.raises(error, match=match):
        KVCache(**{**sizes, **kwargs})


# ------------------------------------------------------------------------------------------
# GPT.forward(idx, cache=...): the checks
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("other", [{"n_layer": 3}, {"n_kv_head": 2}, {"n_embd": 32}],
                         ids=["layers", "kv-heads", "head_size"])
def test_a_cache_made_for_another_model_is_refused(other):
    model = _gpt()
    cache = KVCache.for_model(_gpt(**other), batch_size=1)
    with pytest.raises(ValueError, match=r"this cache has \(n_layer, n_kv_head, head_size\) = .*KVCache.for_model"):
        model(_ids(1, 3), cache=cache)
    assert cache.length == 0, "a refused cache was written to"


def test_a_cache_for_another_batch_size_is_refused():
    model = _gpt()
    cache = KVCache.for_model(model, batch_size=2)
    with pytest.raises(ValueError, match=r"idx has batch size 3, the cache 2: one cache row per sequence"):
        model(_ids(3, 3), cache=cache)


@pytest.mark.parametrize("cache", [object(), {"k": None}, KVCache(2, 1, 4, 8, 4).layer(0)],
                         ids=["object", "dict", "layer-view"])
def test_a_cache_that_is_not_a_kv_cache_is_refused(cache):
    with pytest.raises(TypeError, match=r"cache must be a KV cache .*KVCache.for_model"):
        _gpt()(_ids(1, 3), cache=cache)


def test_a_cache_whose_layers_hold_different_lengths_is_refused():
    model = _gpt()
    cache = KVCache.for_model(model, batch_size=1)
    cache.update(0, *_kv(B=1, H=4, T=2, d=4))
    with pytest.raises(ValueError, match=r"hold different numbers of tokens \[2, 0\].*cache.reset\(\)"):
        model(_ids(1, 1), cache=cache)


def test_a_forward_into_a_full_cache_raises_and_leaves_every_layer_as_it_was():
    model = _gpt(pos_encoding="rope")
    cache = KVCache.for_model(model, batch_size=1, max_len=4)
    model(_ids(1, 3), cache=cache)
    with pytest.raises(KVCacheFullError, match="the KV cache is full"):
        model(_ids(1, 2, seed=1), cache=cache)
    assert cache._lengths == [3, 3], f"the layers hold {cache._lengths} after the refused forward"
    logits, _ = model(_ids(1, 1, seed=2), cache=cache)
    assert logits.shape == (1, 1, TINY["vocab_size"]), f"logits of shape {tuple(logits.shape)}"
    assert cache.length == 4, f"the last free position was not used: length {cache.length}"


def test_learned_positions_past_block_size_under_a_cache_are_refused_naming_block_size():
    model = _gpt()                                      # learned positions, block_size 8
    cache = KVCache.for_model(model, batch_size=1, max_len=16)
    model(_ids(1, 6), cache=cache)
    model(_ids(1, 2, seed=1), cache=cache)              # positions 6, 7: the last ones there are
    assert cache.length == 8, f"the cache holds {cache.length} tokens, expected 8"
    with pytest.raises(ValueError, match=r"learned positions stop at 7 \(block_size=8\)") as error:
        model(_ids(1, 1, seed=2), cache=cache)
    assert "the cache holds 8 tokens" in str(error.value), f"the message does not say why: {error.value}"
    assert cache.length == 8, "the refused forward changed the cache"


def test_a_cache_in_another_dtype_than_the_model_is_refused():
    model = _gpt()
    cache = KVCache.for_model(model, batch_size=1, dtype=torch.float64)
    with pytest.raises(TypeError, match="create the cache with the model's dtype"):
        model(_ids(1, 2), cache=cache)


# --- one vocabulary, and the interface between the model and its cache ----------------------

def test_the_model_talks_to_any_cache_with_the_decoder_cache_interface():
    """A cache of another design (here: one that concatenates) works with GPT through
    course_lib.model.DecoderCache alone; the model never reads KVCache's own fields."""
    from course_lib.model import DecoderCache

    class ConcatCache:
        def __init__(self, n_layer, n_kv_head, head_size, batch_size):
            self.n_layer, self.n_kv_head, self.head_size = n_layer, n_kv_head, head_size
            self.batch_size, self.kv = batch_size, [None] * n_layer

        @property
        def layer_lengths(self):
            return tuple(0 if kv is None else kv[0].shape[-2] for kv in self.kv)

        @property
        def length(self):
            return min(self.layer_lengths)

        def layer(self, index):
            cache = self

            class Layer:
                def update(self, k, v):
                    old = cache.kv[index]
                    cache.kv[index] = (k, v) if old is None else (torch.cat([old[0], k], -2),
                                                                    torch.cat([old[1], v], -2))
                    return cache.kv[index]
            return Layer()

    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=11, block_size=16, n_layer=2, n_head=4, n_kv_head=2, n_embd=16,
                          pos_encoding="rope")).eval()
    idx = torch.randint(11, (2, 9))
    cache = ConcatCache(2, 2, 4, batch_size=2)
    assert isinstance(cache, DecoderCache)
    assert isinstance(KVCache.for_model(model, 2), DecoderCache)
    with torch.no_grad():
        full = model(idx)[0]
        steps = [model(idx[:, :5], cache=cache)[0]] + [model(idx[:, t:t + 1], cache=cache)[0]
                                                      for t in range(5, 9)]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)
