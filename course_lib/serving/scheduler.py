"""Continuous batching (lesson 12): which requests run in the next forward pass.

A static batch starts B requests together and runs until the longest is done: a request that
finishes early leaves its row idle, and a request that arrives waits for the whole batch. Orca's
iteration-level scheduling decides again at every step (one forward pass): finished requests leave
at once and waiting ones join as soon as there is room, so the batch stays full.

Each step the scheduler
1. keeps the running requests that can append one token; when the pool has too few free blocks
   for all of them it *preempts* the most recently admitted ones (their blocks are freed and they go
   back to the front of the queue; on readmission their prompt and generated tokens are recomputed
   in one prefill, which gives the same logits, so the same tokens);
2. admits waiting requests, oldest first, while the batch has rows left (`max_batch_size`), the
   step's token budget (`max_batch_tokens`: one per decoding request plus every prompt token to
   prefill) allows it, and the pool has the blocks for the prompt. The oldest waiting request is
   admitted even over the budget when nothing else would run, so a long prompt never starves.

A request whose model has learned positions and whose cache reaches `block_size` tokens is
prefilled again from its last `block_size` tokens, as `course_lib.generation.generate` restarts
its cache (every position moves once the window slides).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import torch

from course_lib.serving.paged import PagedKVCache

__all__ = ["Plan", "Request", "Scheduler", "plan_step"]


def plan_step(running, waiting, free_blocks: int, block_size: int, *, max_batch_size: int,
              max_batch_tokens: int) -> tuple[list, list, list]:
    """One step's decisions: (decode, admit, preempt), lists of request ids.

    running: [(id, cached_tokens)] in admission order, each about to append one token (a new block
    when cached_tokens is a multiple of block_size); waiting: [(id, prefill_tokens)] oldest first;
    free_blocks: the pool's free blocks. Rules, in order:
    1. while the running requests need more new blocks than are free, preempt the most recently
       admitted one: its ceil(cached / block_size) blocks are freed, and it joins the front of the
       waiting queue with cached + 1 tokens to prefill (its last token is not cached yet);
    2. decode every running request left (their new blocks are taken);
    3. admit waiting requests in order while the batch holds fewer than max_batch_size, stopping at
       the first whose prefill does not fit in the free blocks (ceil(n / block_size)) or in the token
       budget (max_batch_tokens minus one per decoding request minus the prefills admitted), except
       that a request is admitted over the budget when nothing else runs in the step.
    """
    running, waiting = list(running), list(waiting)
    preempt = []
    while running and sum(n % block_size == 0 for _, n in running) > free_blocks:
        rid, n = running.pop()
        free_blocks += -(-n // block_size)
        preempt.insert(0, rid)
        waiting.insert(0, (rid, n + 1))
    free_blocks -= sum(n % block_size == 0 for _, n in running)
    decode = [rid for rid, _ in running]
    budget, admit = max_batch_tokens - len(decode), []
    for rid, n in waiting:
        need = -(-n // block_size)
        if len(decode) + len(admit) >= max_batch_size or need > free_blocks:
            break
        if n > budget and (decode or admit):
            break
        admit.append(rid)
        free_blocks -= need
        budget -= n
    return decode, admit, preempt


@dataclass(eq=False)
class Request:
    """One generation request and its progress."""

    id: int
    prompt: torch.Tensor                      # (T,) int64
    max_new_tokens: int
    strategy: str = "greedy"
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    generator: torch.Generator | None = None
    tokens: list[int] = field(default_factory=list)
    seq: int | None = None                    # its sequence in the paged cache, while it has one
    prefill_len: int = 0                      # tokens its last prefill ran
    preemptions: int = 0
    cancelled: bool = False

    @property
    def finished(self) -> bool:
        return self.cancelled or len(self.tokens) >= self.max_new_tokens

    def context_len(self, window: int | None) -> int:
        """len(self.context(window)), without building it (the scheduler asks every step)."""
        n = len(self.prompt) + len(self.tokens)
        return n if window is None else min(n, window)

    def context(self, window: int | None) -> torch.Tensor:
        """Prompt and generated tokens, cropped to the last `window` (learned positions)."""
        ctx = torch.cat([self.prompt, torch.tensor(self.tokens, dtype=self.prompt.dtype)]) if self.tokens else self.prompt
        return ctx if window is None else ctx[-window:]


@dataclass
class Plan:
    """One step's work: requests to prefill (each alone) and requests to decode (one batch)."""

    prefill: list[Request]
    decode: list[Request]
    preempted: list[Request]


class Scheduler:
    """Admission, preemption and the token budget over one `PagedKVCache` (see the module's docstring)."""

    def __init__(self, cache: PagedKVCache, *, window: int | None, max_batch_size: int = 64,
                 max_batch_tokens: int = 512) -> None:
        self.cache, self.window = cache, window
        self.max_batch_size, self.max_batch_tokens = max_batch_size, max_batch_tokens
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []       # in admission order

    def add(self, request: Request) -> None:
        need = -(-min(len(request.prompt) + request.max_new_tokens, self.window or 10**12)
                 // self.cache.block_size)
        if need > self.cache.num_blocks:
            raise ValueError(f"request {request.id} needs up to {need} blocks of {self.cache.block_size} tokens "
                             f"and the pool has {self.cache.num_blocks}: shorten it or build the engine with "
                             "more blocks (num_blocks).")
        self.waiting.append(request)

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def release(self, request: Request) -> None:
        """A finished or cancelled request leaves: its blocks go back to the pool."""
        if request.seq is not None:
            self.cache.free(request.seq)
            request.seq = None
        if request in self.running:
            self.running.remove(request)
        if request in self.waiting:
            self.waiting.remove(request)

    def schedule(self) -> Plan:
        # requests whose learned-position window is full start again from it: a new prefill
        for r in reversed([r for r in self.running if self.window is not None
                           and self.cache.length_of(r.seq) + 1 > self.window]):
            self.cache.free(r.seq)
            r.seq = None
            self.running.remove(r)
            self.waiting.appendleft(r)
        decode_ids, admit_ids, preempt_ids = plan_step(
            [(r.id, self.cache.length_of(r.seq)) for r in self.running],
            [(r.id, r.context_len(self.window)) for r in self.waiting],
            self.cache.allocator.num_free, self.cache.block_size,
            max_batch_size=self.max_batch_size, max_batch_tokens=self.max_batch_tokens)
        by_id = {r.id: r for r in (*self.running, *self.waiting)}
        preempted = [by_id[i] for i in preempt_ids]
        for r in reversed(preempted):            # newest first out, so the oldest ends up in front
            self._preempt(r)
        decode = [by_id[i] for i in decode_ids]
        for r in decode:                                           # this step's blocks, taken now
            self.cache.reserve(r.seq, 1)
        prefill = []
        for i in admit_ids:
            r = by_id[i]
            self.waiting.remove(r)
            self.running.append(r)
            self._start(r, r.context_len(self.window))
            prefill.append(r)
        return Plan(prefill, decode, preempted)

    def _start(self, r: Request, n: int) -> None:
        """A new sequence for r, with the blocks of its n-token prefill taken now."""
        r.seq, r.prefill_len = self.cache.add_sequence(), n
        self.cache.reserve(r.seq, n)

    def _preempt(self, r: Request) -> None:
        """Free r's blocks and put it back at the front of the queue (recomputed when readmitted)."""
        self.cache.free(r.seq)
        r.seq = None
        self.running.remove(r)
        r.preemptions += 1
        self.waiting.appendleft(r)
