"""course_lib.serving.engine and .scheduler: continuous batching gives every request the tokens it
gets alone, at any pool size; requests join and leave; memory comes back."""

from __future__ import annotations

import pytest
import torch

from course_lib.generation import generate
from course_lib.model import GPT, GPTConfig
from course_lib.serving import Engine


def _model(pos_encoding="learned", block_size=32, **kw):
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=40, block_size=block_size, n_layer=2, n_head=4, n_kv_head=2, n_embd=32,
                         pos_encoding=pos_encoding, **kw)).eval()


def _mix(n=10, seed=0, longest=20):
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(0, 40, (int(torch.randint(1, longest, (), generator=g)),), generator=g) for _ in range(n)]
    news = [int(torch.randint(0, 25, (), generator=g)) for _ in range(n)]
    return prompts, news


def _alone(model, prompts, news, **kw):
    out = []
    for i, (p, n) in enumerate(zip(prompts, news, strict=True)):
        g = None if kw.get("strategy", "greedy") == "greedy" else torch.Generator().manual_seed(100 + i)
        out.append(generate(model, p[None], n, generator=g, **kw)[0, len(p):])
    return out


@pytest.mark.parametrize("num_blocks", [None, 16, 11], ids=["roomy", "tight", "preempting"])
@pytest.mark.parametrize("pos_encoding", ["learned", "rope"])
def test_every_request_gets_the_tokens_it_gets_alone(pos_encoding, num_blocks):
    model = _model(pos_encoding)        # block_size 32: learned positions restart their window
    prompts, news = _mix()
    engine = Engine(model, block_size=4, num_blocks=num_blocks, max_batch_tokens=24)
    for kw in (dict(strategy="greedy"), dict(strategy="sample", temperature=0.8, top_k=10, top_p=0.9)):
        seeds = None if kw["strategy"] == "greedy" else [100 + i for i in range(len(prompts))]
        got = engine.generate(prompts, news, seeds=seeds, **kw)
        for i, (a, b) in enumerate(zip(got, _alone(model, prompts, news, **kw), strict=True)):
            assert torch.equal(a, b), f"request {i} ({kw['strategy']}): {a.tolist()} != {b.tolist()}"
    assert engine.cache.allocator.num_used == 0
    assert not engine.has_work
    assert not engine.requests
    if num_blocks == 11:
        assert engine.preemptions > 0


def test_requests_join_while_others_run_and_leave_when_done():
    model = _model("rope")
    engine = Engine(model, block_size=4, num_blocks=40)
    prompts, news = _mix(4, seed=3)
    first = engine.submit(prompts[0], 20)
    engine.step()
    engine.step()
    later = [engine.submit(p, n) for p, n in zip(prompts[1:], news[1:], strict=True)]
    batch_sizes = []
    while engine.has_work:
        events = engine.step()
        batch_sizes.append(len(events))
    assert max(batch_sizes) > 1                      # they ran together
    for rid, p, n in zip([first, *later], prompts, [20, *news[1:]], strict=True):
        assert engine.tokens(rid) == generate(model, p[None], n)[0, len(p):].tolist()


def test_kv_memory_allocated_stays_within_one_block_per_request_of_what_the_tokens_need():
    model = _model("rope")
    engine = Engine(model, block_size=4, num_blocks=64)
    prompts, news = _mix(8, seed=5)
    ids = [engine.submit(p, n) for p, n in zip(prompts, news, strict=True)]
    while engine.has_work:
        engine.step()
        running = len(engine.scheduler.running)
        allocated, used = engine.kv_samples[-1]
        assert allocated - used <= running * engine.cache.bytes_per_block
    assert all(engine.done(i) for i in ids)


def test_stream_yields_the_tokens_and_cancel_frees_the_blocks():
    model = _model("rope")
    engine = Engine(model, block_size=4, num_blocks=40)
    prompt = torch.arange(6)
    assert list(engine.stream(prompt, 9)) == generate(model, prompt[None], 9)[0, 6:].tolist()
    rid = engine.submit(prompt, 30)
    engine.step()
    assert engine.cache.allocator.num_used > 0
    engine.cancel(rid)
    assert engine.cache.allocator.num_used == 0
    assert not engine.has_work


def test_a_token_budget_smaller_than_a_prompt_still_serves_it():
    model = _model("rope")
    engine = Engine(model, block_size=4, num_blocks=40, max_batch_tokens=3)
    prompts, news = _mix(5, seed=7)
    got = engine.generate(prompts, news)
    assert all(torch.equal(a, b) for a, b in zip(got, _alone(model, prompts, news), strict=True))


def test_bad_requests_are_refused_with_the_fix():
    model = _model()
    engine = Engine(model, block_size=4, num_blocks=4)
    with pytest.raises(TypeError, match="list of 1-D token tensors"):
        engine.generate(torch.arange(3), 2)
    with pytest.raises(ValueError, match="outside 0..39"):
        engine.generate([torch.tensor([1, 40])], 2)
    with pytest.raises(ValueError, match="one seed per prompt"):
        engine.generate([torch.arange(3)], 2, strategy="sample", seeds=[1, 2])
    with pytest.raises(ValueError, match="one per prompt"):
        engine.generate([torch.arange(3)], [2, 3])
    with pytest.raises(ValueError, match="needs up to 5 blocks"):
        engine.generate([torch.arange(10)], 10)
    assert not engine.requests, "a request the pool can never hold left a record behind"
    with pytest.raises(ValueError, match="for strategy='sample'"):
        engine.generate([torch.arange(3)], 2, temperature=0.5)
    assert engine.generate([torch.arange(3)], 0)[0].numel() == 0
