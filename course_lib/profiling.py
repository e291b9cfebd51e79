"""Measure the memory a piece of PyTorch code allocates, exactly and on any device, and compare
the time of several calls like for like (`interleaved_seconds`).

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

import statistics
import time
import weakref
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

__all__ = ["MemoryRecord", "interleaved_seconds", "record_memory", "timed"]


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


def interleaved_seconds(calls: Mapping[str, Callable[[], object]], rounds: int = 5,
                        warmup: int = 1) -> dict[str, float]:
    """{name: the median seconds of one call} for calls compared with each other: every call once
    per round, in order, for `warmup` untimed rounds and then `rounds` timed ones. A change in the
    machine's load during the measurement (another process, a clock that slows) then falls on
    every call alike, which timing each call's repeats back to back does not ensure."""
    if not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"rounds must be an int >= 1, got {rounds!r}")
    if not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be an int >= 0, got {warmup!r}")
    if not calls:
        raise ValueError("interleaved_seconds needs at least one call to time")
    times: dict[str, list[float]] = {name: [] for name in calls}
    for round_ in range(warmup + rounds):
        for name, call in calls.items():
            start = time.perf_counter()
            call()
            elapsed = time.perf_counter() - start
            if round_ >= warmup:
                times[name].append(elapsed)
    return {name: statistics.median(values) for name, values in times.items()}
