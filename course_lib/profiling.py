"""Measure the memory a piece of PyTorch code allocates, exactly and on any device.

    with record_memory() as mem:
        out = local_attention(q, k, v, 129)
    mem.peak_bytes, mem.largest_numel

A `TorchDispatchMode` sees every ATen operator that runs inside the block. Each output that
does not share storage with an input (a fresh allocation, not a view or an in-place result)
is counted as live until its storage is freed (when the last tensor or view using it is
gone). `peak_bytes` is the largest total of live tensors created in the block;
`largest_bytes` the biggest single allocation; `largest_numel` / `largest_shape` the new
tensor with the most elements.
Allocator caching, fragmentation and tensors made outside the block are not counted, so the
figures are deterministic: the same code gives the same numbers on every machine.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

__all__ = ["MemoryRecord", "record_memory", "timed"]


@dataclass
class MemoryRecord:
    peak_bytes: int = 0
    largest_bytes: int = 0
    largest_numel: int = 0
    largest_shape: tuple[int, ...] = ()
    n_allocations: int = 0
    live_bytes: int = 0
    _live: dict[int, int] = field(default_factory=dict, repr=False)

    def _release(self, ptr: int) -> None:
        self.live_bytes -= self._live.pop(ptr, 0)


class _Recorder(TorchDispatchMode):
    def __init__(self, record: MemoryRecord):
        super().__init__()
        self.record = record

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        record = self.record
        inputs = {t.untyped_storage().data_ptr() for t in tree_flatten((args, kwargs))[0]
                  if isinstance(t, torch.Tensor)}
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor):
                continue
            storage = t.untyped_storage()
            ptr, nbytes = storage.data_ptr(), storage.nbytes()
            if nbytes == 0 or ptr in inputs or ptr in record._live:
                continue
            record._live[ptr] = nbytes
            record.live_bytes += nbytes
            record.n_allocations += 1
            record.peak_bytes = max(record.peak_bytes, record.live_bytes)
            record.largest_bytes = max(record.largest_bytes, nbytes)
            if t.numel() > record.largest_numel:
                record.largest_numel, record.largest_shape = t.numel(), tuple(t.shape)
            # PyTorch keeps one Python object per storage for as long as the storage lives, so
            # this fires when the last view or alias of the allocation is gone
            weakref.finalize(storage, record._release, ptr)
        return out


@contextmanager
def record_memory() -> Iterator[MemoryRecord]:
    """Record the tensors allocated inside the block (see the module docstring)."""
    record = MemoryRecord()
    with _Recorder(record):
        yield record


def timed(fn, device: torch.device | str = "cpu"):
    """(seconds, fn()) for one call; on CUDA the clock waits for the GPU before and after."""
    cuda = torch.device(device).type == "cuda"
    if cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    out = fn()
    if cuda:
        torch.cuda.synchronize()
    return time.perf_counter() - start, out
