"""Serving a GPT to many requests at once (lesson 12): a paged KV cache, continuous batching,
speculative decoding and an OpenAI-compatible endpoint (python -m course_lib.serving)."""

from course_lib.serving.blocks import BlockAllocator, BlockPoolFullError, BlockTables
from course_lib.serving.engine import Engine, Event
from course_lib.serving.paged import PagedKVCache, paged_decode_attention
from course_lib.serving.scheduler import Request, Scheduler, plan_step
from course_lib.serving.speculative import (
           accept_draft,
           expected_tokens_per_pass,
           speculative_generate,
)

__all__ = ["BlockAllocator", "BlockPoolFullError", "BlockTables", "Engine", "Event", "PagedKVCache", "paged_decode_attention", "Request", "Scheduler", "plan_step",
           "accept_draft", "expected_tokens_per_pass", "speculative_generate"]
