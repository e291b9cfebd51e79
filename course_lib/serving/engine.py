"""The serving engine (lesson 12): continuous batching over a paged KV cache.

    engine = Engine(model, block_size=16, num_blocks=None)
    outs = engine.generate(prompts, max_new_tokens, strategy="sample", temperature=0.8, seeds=[1, 2, 3])

Every request gets exactly the tokens that generating it alone gives,

    course_lib.generation.generate(model, prompts[i][None], n_i, strategy=..., temperature=...,
        generator=torch.Generator().manual_seed(seeds[i]))[0, len(prompts[i]):]

(on a GPU, with a generator of the model's device), whatever else is running and whatever the
pool's size (a small pool queues or preempts requests;
it never changes their tokens): each request draws from its own generator, in order, and a
preempted request is recomputed from its tokens. Why batch at all: a decoding step reads every
weight and every cached key and value once (lesson 08: it is bound by memory bandwidth), so B
requests in one step cost little more than one.

Streaming: `submit(...)` queues a request and returns its id; each `step()` runs one forward pass
(prefills and one batched decode) and returns the tokens it produced, as `Event`s; `cancel(id)`
frees a request's blocks at once. `stream(...)` is the single-request iterator on top of them.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterator, Sequence
from typing import NamedTuple

import torch

from course_lib.attention._checks import check_int
from course_lib.generation import check_sampling, next_token
from course_lib.serving.paged import PagedKVCache
from course_lib.serving.scheduler import Request, Scheduler

__all__ = ["DEFAULT_KV_MEMORY", "Engine", "Event"]

#: The pool's size when num_blocks is None: this many bytes of keys and values (all layers).
DEFAULT_KV_MEMORY = 256 * 2**20
#: Prefills run together when their padding to the longest is at most this fraction of their tokens.
PREFILL_PADDING = 0.25
#: Steps whose KV memory `Engine.kv_samples` keeps (a server runs for ever).
KV_SAMPLES = 100_000


class Event(NamedTuple):
    """A token produced by `Engine.step` for request `request`; `finished` after its last one."""

    request: int
    token: int
    finished: bool


class Engine:
    """Continuous batching of many requests on one model (see the module's docstring).

    model: a course GPT (eval mode is set while it runs and restored after each step).
    block_size: token slots per block; num_blocks: blocks in each layer's pool (None: as many as
    kv_memory bytes hold). max_batch_size: requests decoded together; max_batch_tokens: tokens
    one step may run (decodes and prefills together).
    """

    def __init__(self, model, *, block_size: int = 16, num_blocks: int | None = None,
                 max_batch_size: int = 64, max_batch_tokens: int = 512,
                 kv_memory: int = DEFAULT_KV_MEMORY) -> None:
        config = getattr(model, "config", None)
        if config is None or not hasattr(config, "n_kv_head"):
            raise TypeError(f"Engine needs a course_lib.model.GPT, got {type(model).__name__}.")
        check_int("block_size", block_size, 1, "an integer >= 1 (token slots per block)")
        self.model = model
        if num_blocks is None:
            weight = next(model.parameters())
            per_block = 2 * config.n_layer * block_size * config.n_kv_head * config.head_size * weight.element_size()
            num_blocks = max(1, check_int("kv_memory", kv_memory, 1) // per_block)
        check_int("num_blocks", num_blocks, 1, "an integer >= 1 (blocks in each layer's pool), or None")
        self.cache = PagedKVCache.for_model(model, num_blocks, block_size)
        window = config.block_size if config.pos_encoding == "learned" else None
        self.scheduler = Scheduler(self.cache, window=window,
                                   max_batch_size=check_int("max_batch_size", max_batch_size, 1),
                                   max_batch_tokens=check_int("max_batch_tokens", max_batch_tokens, 1))
        self.window = window
        self.requests: dict[int, Request] = {}
        self._ids = itertools.count()
        self.steps = 0
        self.peak_bytes_allocated = 0
        # (bytes allocated, bytes used) after each of the last KV_SAMPLES steps
        self.kv_samples: deque[tuple[int, int]] = deque(maxlen=KV_SAMPLES)
        self.preemptions = 0

    # --- requests ------------------------------------------------------------------------------
    def submit(self, prompt: torch.Tensor, max_new_tokens: int, *, strategy: str = "greedy",
               temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
               seed: int | None = None, generator: torch.Generator | None = None) -> int:
        """Queue one request; its id. prompt: a 1-D tensor of token ids."""
        self._check_prompt(prompt, "prompt")
        check_int("max_new_tokens", max_new_tokens, 0)
        check_sampling(strategy, temperature, top_k, top_p)
        if seed is not None and generator is not None:
            raise ValueError("give seed or generator, not both.")
        if seed is not None:
            check_int("seed", seed, 0)
            # on the model's device, where the draws happen: on a CPU this is generate's
            # torch.Generator().manual_seed(seed)
            generator = torch.Generator(device=self.cache.k.device).manual_seed(seed)
        request = Request(next(self._ids), prompt.detach().to(torch.long).cpu(), max_new_tokens, strategy,
                          temperature, top_k, top_p, generator)
        if max_new_tokens > 0:
            self.scheduler.add(request)           # refuses a request the pool can never hold
        self.requests[request.id] = request
        return request.id

    def cancel(self, request: int) -> None:
        """Stop a request now and free its blocks (a client that went away)."""
        r = self._request(request)
        r.cancelled = True
        self.scheduler.release(r)

    def tokens(self, request: int) -> list[int]:
        """The tokens generated so far for a request."""
        return list(self._request(request).tokens)

    def done(self, request: int) -> bool:
        return self._request(request).finished

    def forget(self, request: int) -> None:
        """Drop a finished request's record."""
        r = self._request(request)
        if not r.finished:
            raise ValueError(f"request {request} is still running: cancel it first.")
        del self.requests[request]

    @property
    def has_work(self) -> bool:
        return self.scheduler.has_work

    # --- one step ------------------------------------------------------------------------------
    @torch.no_grad()
    def step(self) -> list[Event]:
        """One iteration: schedule, prefill the admitted requests, decode the running ones together."""
        plan = self.scheduler.schedule()
        self.preemptions += len(plan.preempted)
        events: list[Event] = []
        was_training = self.model.training
        if was_training:
            self.model.eval()
        try:
            device = self.cache.k.device
            for group in self._prefill_groups(plan.prefill):           # prompts, several per pass
                logits = self._prefill(group)
                for r, token in zip(group, self._choose(group, logits), strict=True):
                    events.append(self._emit(r, token))
            if plan.decode:                                            # one batched step
                self.cache.select([r.seq for r in plan.decode])
                last = torch.tensor([[r.tokens[-1]] for r in plan.decode], device=device)
                logits = self.model(last, cache=self.cache)[0][:, -1]
                for r, token in zip(plan.decode, self._choose(plan.decode, logits), strict=True):
                    events.append(self._emit(r, token))
        finally:
            if was_training:
                self.model.train()
        self.steps += 1
        sample = (self.cache.bytes_allocated, self.cache.bytes_used)
        self.kv_samples.append(sample)
        self.peak_bytes_allocated = max(self.peak_bytes_allocated, sample[0])
        return events

    def _prefill_groups(self, requests: list[Request]) -> list[list[Request]]:
        """The prefills of a step in groups of similar lengths (shortest first), each group's padding
        at most PREFILL_PADDING of its tokens, and its padding's blocks free in the pool."""
        groups: list[list[Request]] = []
        free = self.cache.allocator.num_free
        for r in sorted(requests, key=lambda r: r.prefill_len):
            group = groups[-1] if groups else None
            if group is not None:
                longest = r.prefill_len                                     # sorted: the newest is longest
                real = sum(x.prefill_len for x in group) + longest
                extra = sum(self.cache.blocks_needed(x.seq, longest) for x in group)
                if (len(group) + 1) * longest <= (1 + PREFILL_PADDING) * real and extra <= free:
                    group.append(r)
                    continue
            groups.append([r])
        return groups

    def _prefill(self, group: list[Request]) -> torch.Tensor:
        """The last-position logits (B, V) of several prompts run in one pass. Each is padded on the
        right to the longest: a query never sees a later position, so the padding changes no real
        token's logits; each sequence is then cut back to its own length, which forgets the
        padding's keys and values."""
        contexts = [r.context(self.window) for r in group]
        T = max(len(c) for c in contexts)
        idx = torch.zeros(len(group), T, dtype=torch.long)
        for row, context in enumerate(contexts):
            idx[row, :len(context)] = context
        self.cache.select([r.seq for r in group])
        logits = self.model(idx.to(self.cache.k.device), cache=self.cache)[0]
        for r, context in zip(group, contexts, strict=True):
            self.cache.truncate(r.seq, len(context))
        return logits[torch.arange(len(group)), torch.tensor([len(c) - 1 for c in contexts])]

    def _choose(self, batch: list[Request], logits: torch.Tensor) -> list[int]:
        """Each request's next token from its row of logits, with its own generator."""
        if all(r.strategy == "greedy" for r in batch):
            return logits.argmax(dim=-1).tolist()
        return [int(next_token(logits[i:i + 1], r.strategy, temperature=r.temperature, top_k=r.top_k,
                               top_p=r.top_p, generator=r.generator)[0, 0]) if r.strategy == "sample"
                else int(logits[i].argmax()) for i, r in enumerate(batch)]

    def _emit(self, r: Request, token: int) -> Event:
        r.tokens.append(int(token))
        if r.finished:
            self.scheduler.release(r)
        return Event(r.id, int(token), r.finished)

    # --- whole generations -----------------------------------------------------------------------
    def generate(self, prompts: Sequence[torch.Tensor], max_new_tokens: int | Sequence[int], *,
                 strategy: str = "greedy", temperature: float = 1.0, top_k: int | None = None,
                 top_p: float | None = None, seeds: Sequence[int] | None = None) -> list[torch.Tensor]:
        """The new tokens of every prompt (a list of 1-D int64 tensors), all requests batched."""
        if isinstance(prompts, torch.Tensor) or not isinstance(prompts, Sequence) or not prompts:
            raise TypeError("prompts must be a non-empty list of 1-D token tensors (one per request); "
                            "for one (T,) prompt pass [prompt].")
        for i, p in enumerate(prompts):
            self._check_prompt(p, f"prompts[{i}]")
        counts = [max_new_tokens] * len(prompts) if isinstance(max_new_tokens, int) else list(max_new_tokens)
        if len(counts) != len(prompts):
            raise ValueError(f"max_new_tokens has {len(counts)} entries for {len(prompts)} prompts: give one int, "
                             "or one per prompt.")
        if seeds is not None and len(seeds) != len(prompts):
            raise ValueError(f"seeds has {len(seeds)} entries for {len(prompts)} prompts: one seed per prompt.")
        ids = [self.submit(p, n, strategy=strategy, temperature=temperature, top_k=top_k, top_p=top_p,
                           seed=None if seeds is None else seeds[i])
               for i, (p, n) in enumerate(zip(prompts, counts, strict=True))]
        while any(not self.requests[i].finished for i in ids):
            self.step()
        out = [torch.tensor(self.requests[i].tokens, dtype=torch.long) for i in ids]
        for i in ids:
            self.forget(i)
        return out

    def stream(self, prompt: torch.Tensor, max_new_tokens: int, **sampling) -> Iterator[int]:
        """Submit one request and yield its tokens as they come (other queued requests run too)."""
        rid = self.submit(prompt, max_new_tokens, **sampling)
        try:
            while not self.requests[rid].finished:
                for event in self.step():
                    if event.request == rid:
                        yield event.token
        finally:
            if not self.requests[rid].finished:
                self.cancel(rid)
            self.forget(rid)

    # --- checks ------------------------------------------------------------------------------
    def _request(self, request: int) -> Request:
        if request not in self.requests:
            raise KeyError(f"no request {request!r} (submit() returns the ids).")
        return self.requests[request]

    def _check_prompt(self, prompt, name: str) -> None:
        if not isinstance(prompt, torch.Tensor) or prompt.dim() != 1 or prompt.numel() == 0:
            raise ValueError(f"{name} must be a non-empty 1-D tensor of token ids, got "
                             f"{tuple(prompt.shape) if isinstance(prompt, torch.Tensor) else type(prompt).__name__}.")
        if prompt.dtype.is_floating_point or prompt.dtype == torch.bool:
            raise TypeError(f"{name} must hold integer token ids, got {prompt.dtype}.")
        V = self.model.config.vocab_size
        if int(prompt.min()) < 0 or int(prompt.max()) >= V:
            raise ValueError(f"{name} holds ids outside 0..{V - 1} (the model's vocabulary).")
