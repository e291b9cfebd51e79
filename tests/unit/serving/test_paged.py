"""course_lib.serving.paged: paged decoding equals contiguous decoding, and the block bookkeeping."""

from __future__ import annotations

import pytest
import torch

from course_lib.kv_cache import KVCache
from course_lib.model import GPT, GPTConfig
from course_lib.serving import BlockPoolFullError, PagedKVCache

POS = ("learned", "sinusoidal", "rope", "alibi", "none")


def _model(pos_encoding="learned", n_kv_head=4, **kw):
    torch.manual_seed(0)
    config = GPTConfig(vocab_size=30, block_size=64, n_layer=2, n_head=4, n_kv_head=n_kv_head, n_embd=32,
                       pos_encoding=pos_encoding, **kw)
    return GPT(config).eval()


@pytest.mark.parametrize("n_kv_head", [4, 2, 1], ids=["MHA", "GQA", "MQA"])
@pytest.mark.parametrize("pos_encoding", POS)
def test_a_ragged_batch_through_the_paged_cache_gives_each_rows_contiguous_logits(pos_encoding, n_kv_head):
    model = _model(pos_encoding, n_kv_head)
    cache = PagedKVCache.for_model(model, num_blocks=30, block_size=4)
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, 30, (n,), generator=g) for n in (5, 9, 3)]
    seqs = [cache.add_sequence() for _ in prompts]
    steps = torch.randint(0, 30, (3, 4), generator=g)
    with torch.no_grad():
        for s, p in zip(seqs, prompts, strict=True):          # prefills, one at a time
            cache.select([s])
            model(p[None], cache=cache)
        cache.select(seqs)
        one = model(steps[:, :1], cache=cache)[0]           # one ragged decoding step
        cache.select(seqs)
        three = model(steps[:, 1:], cache=cache)[0]         # three tokens per row at once
        for b, p in enumerate(prompts):
            full = torch.cat([p, steps[b]])[None]
            contiguous = KVCache.for_model(model, 1, len(p) + 4)
            model(p[None], cache=contiguous)
            want = model(steps[b:b + 1], cache=contiguous)[0]
            torch.testing.assert_close(torch.cat([one[b], three[b]]), want[0], rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(want[0], model(full)[0][0, len(p):], rtol=1e-5, atol=1e-5)
    assert [cache.length_of(s) for s in seqs] == [9, 13, 7]


def test_memory_held_is_within_one_block_of_the_tokens():
    model = _model()
    cache = PagedKVCache.for_model(model, num_blocks=20, block_size=4)
    seq = cache.add_sequence()
    with torch.no_grad():
        for n in range(1, 12):
            cache.select([seq])
            model(torch.tensor([[n % 30]]), cache=cache)
            assert len(cache.blocks_of(seq)) == -(-n // 4)
            assert cache.bytes_allocated - cache.bytes_used < cache.bytes_per_block
    assert cache.bytes_used == 11 * cache.bytes_per_block // 4


def test_fork_shares_blocks_and_copies_the_shared_last_block_on_the_first_divergent_write():
    model = _model()
    cache = PagedKVCache.for_model(model, num_blocks=10, block_size=4)
    parent = cache.add_sequence()
    prompt = torch.arange(6)[None]
    with torch.no_grad():
        cache.select([parent])
        model(prompt, cache=cache)
        child = cache.fork(parent)
        assert cache.blocks_of(child) == cache.blocks_of(parent)
        assert cache.allocator.num_used == 2               # shared, not copied
        before = cache.k[:, list(cache.blocks_of(parent))].clone()
        cache.select([parent, child])
        logits = model(torch.tensor([[7], [8]]), cache=cache)[0]
    assert cache.blocks_of(child)[0] == cache.blocks_of(parent)[0]     # full block still shared
    assert cache.blocks_of(child)[1] != cache.blocks_of(parent)[1]     # copy-on-write
    assert cache.allocator.num_used == 3
    # the parent's first 6 tokens are untouched by the child's write
    torch.testing.assert_close(cache.k[:, list(cache.blocks_of(parent))][:, :, :2], before[:, :, :2])
    for row, token in ((0, 7), (1, 8)):
        want = model(torch.cat([prompt, torch.tensor([[token]])], 1))[0][0, -1]
        torch.testing.assert_close(logits[row, -1], want, rtol=1e-5, atol=1e-5)
    cache.free(parent)
    cache.free(child)
    assert cache.allocator.num_used == 0


def test_truncate_rolls_back_and_releases_the_blocks_past_the_new_length():
    model = _model()
    cache = PagedKVCache.for_model(model, num_blocks=10, block_size=4)
    seq = cache.add_sequence()
    with torch.no_grad():
        cache.select([seq])
        model(torch.arange(10)[None], cache=cache)
        cache.truncate(seq, 5)
        assert cache.length_of(seq) == 5
        assert len(cache.blocks_of(seq)) == 2
        cache.select([seq])
        got = model(torch.tensor([[20, 21]]), cache=cache)[0][0]
    want = model(torch.tensor([[0, 1, 2, 3, 4, 20, 21]]))[0][0, 5:]
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="cannot be truncated to 9"):
        cache.truncate(seq, 9)


def test_a_full_pool_is_a_clear_error_and_nothing_is_overwritten():
    model = _model()
    cache = PagedKVCache.for_model(model, num_blocks=2, block_size=4)
    a, b = cache.add_sequence(), cache.add_sequence()
    with torch.no_grad():
        cache.select([a])
        model(torch.arange(8)[None], cache=cache)
        kept = cache.k.clone()
        cache.select([b])
        with pytest.raises(BlockPoolFullError, match="need 1 more blocks and 0 of 2 are free"):
            model(torch.arange(3)[None], cache=cache)
    assert torch.equal(cache.k, kept)
    assert cache.length_of(b) == 0
    assert cache.length_of(a) == 8


def test_misuse_names_the_fix():
    model = _model()
    cache = PagedKVCache.for_model(model, num_blocks=4)
    with pytest.raises(ValueError, match="call cache.select"):
        model(torch.arange(3)[None], cache=cache)
    s = cache.add_sequence()
    with pytest.raises(ValueError, match="fork it"):
        cache.select([s, s])
    with pytest.raises(KeyError, match="no sequence 99"):
        cache.select([99])
    with pytest.raises(ValueError, match="block_size must be"):
        PagedKVCache(2, 4, 8, num_blocks=4, block_size=0)


@pytest.mark.parametrize("n_kv_head", [4, 2, 1], ids=["MHA", "GQA", "MQA"])
def test_paged_decode_attention_equals_dense_attention_over_each_rows_keys(n_kv_head):
    from course_lib.profiling import record_memory
    from course_lib.serving import paged_decode_attention

    g = torch.Generator().manual_seed(0)
    k_pool, v_pool = torch.randn(2, 12, 4, n_kv_head, 8, generator=g).unbind(0)
    tables, lengths = [[3, 7, 1], [0], [5, 2, 9, 11]], [10, 2, 16]
    q = torch.randn(3, 4, 8, generator=g)
    with record_memory() as mem:
        out = paged_decode_attention(q, k_pool, v_pool, tables, lengths)
    for b, (table, L) in enumerate(zip(tables, lengths, strict=True)):
        k = k_pool[table].reshape(-1, n_kv_head, 8)[:L].transpose(0, 1)       # (H_kv, L, d)
        v = v_pool[table].reshape(-1, n_kv_head, 8)[:L].transpose(0, 1)
        want = torch.nn.functional.scaled_dot_product_attention(
            q[b][:, None], k.repeat_interleave(4 // n_kv_head, 0), v.repeat_interleave(4 // n_kv_head, 0))[:, 0]
        torch.testing.assert_close(out[b], want, rtol=1e-5, atol=1e-6)
    assert mem.largest_numel <= 16 * 4 * 8          # the longest row's blocks, every query head
