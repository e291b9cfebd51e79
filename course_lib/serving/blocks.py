"""Fixed-size blocks of KV memory and who holds them (lesson 12): the allocator behind the paged cache.

A paged KV cache (vLLM's PagedAttention) keeps keys and values in one preallocated pool of
`num_blocks` blocks of `block_size` token slots each, and gives each sequence a *block table*: the
list of the blocks that hold its tokens, in order. Token p of a sequence lives in block
table[p // block_size], slot p % block_size. A sequence holding L tokens owns ceil(L / block_size)
blocks, so at most one block is partly empty: the memory allocated per sequence is within one
block of what it holds, whatever its final length (a contiguous cache reserves max_len up front).

Blocks are reference-counted so that sequences can share them: `fork` (a second sample of the same
prompt, a beam) copies the block table, not the memory, and adds one to every block's count. A
write into a shared block must not change the other sequence's tokens, so the cache copies that
block first (copy-on-write) and the writer's table points to the copy.
"""

from __future__ import annotations

__all__ = ["BlockAllocator", "BlockPoolFullError", "BlockTables"]


class BlockPoolFullError(RuntimeError):
    """Every block of the pool is in use: free a sequence, preempt one, or make the pool larger."""


class BlockAllocator:
    """A free list of block ids 0 .. num_blocks-1 with a reference count per block.

    allocate() -> id (count 1); share(id) adds a holder; release(id) removes one and returns the
    block to the free list when nobody holds it. Freed blocks are reused last-freed first.
    """

    def __init__(self, num_blocks: int) -> None:
        if isinstance(num_blocks, bool) or not isinstance(num_blocks, int) or num_blocks < 1:
            raise ValueError(f"num_blocks must be an integer >= 1 (the blocks in the pool), got {num_blocks!r}.")
        self.num_blocks = num_blocks
        self._free = list(range(num_blocks - 1, -1, -1))   # pop() hands out block 0 first
        self._refs = [0] * num_blocks

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_used(self) -> int:
        return self.num_blocks - len(self._free)

    def refcount(self, block: int) -> int:
        self._check(block)
        return self._refs[block]

    def allocate(self) -> int:
        if not self._free:
            raise BlockPoolFullError(
                f"the KV block pool is full: all {self.num_blocks} blocks are in use. Free or preempt a "
                "sequence first, or build the cache with more blocks (num_blocks).")
        block = self._free.pop()
        self._refs[block] = 1
        return block

    def share(self, block: int) -> None:
        self._check(block, held=True)
        self._refs[block] += 1

    def release(self, block: int) -> None:
        self._check(block, held=True)
        self._refs[block] -= 1
        if self._refs[block] == 0:
            self._free.append(block)

    def _check(self, block: int, held: bool = False) -> None:
        if isinstance(block, bool) or not isinstance(block, int) or not 0 <= block < self.num_blocks:
            raise ValueError(f"block must be an id in 0..{self.num_blocks - 1}, got {block!r}.")
        if held and self._refs[block] == 0:
            raise ValueError(f"block {block} is free: it was released more often than it was allocated "
                             "or shared (a sequence freed twice?).")


class BlockTables:
    """The block tables of many sequences over one `BlockAllocator`: bookkeeping only, no tensors
    (`PagedKVCache` adds the pools of keys and values).

        add_sequence(seq)        a new, empty sequence (seq: any hashable id)
        append_slot(seq)         (block, slot) where seq's next token goes, and (src, dst) when the
                                 partly filled last block was shared and had to be copied first
                                 (copy-on-write), else None; a new block when the last one is full
        fork(parent, child)      child holds the parent's tokens, sharing its blocks
        free(seq)                release its blocks; truncate(seq, n) keeps its first n tokens
        blocks(seq), length(seq), num_free

    A full pool raises BlockPoolFullError and leaves everything as it was.
    """

    def __init__(self, num_blocks: int, block_size: int) -> None:
        if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
            raise ValueError(f"block_size must be an integer >= 1 (token slots per block), got {block_size!r}.")
        self.allocator = BlockAllocator(num_blocks)
        self.block_size = block_size
        self._tables: dict = {}
        self._lengths: dict = {}

    @property
    def num_free(self) -> int:
        return self.allocator.num_free

    def __contains__(self, seq) -> bool:
        return seq in self._tables

    def sequences(self) -> tuple:
        return tuple(self._tables)

    def add_sequence(self, seq) -> None:
        if seq in self._tables:
            raise ValueError(f"sequence {seq!r} exists already: free it first, or pick another id.")
        self._tables[seq], self._lengths[seq] = [], 0

    def blocks(self, seq) -> list[int]:
        return list(self._table(seq))

    def length(self, seq) -> int:
        self._table(seq)
        return self._lengths[seq]

    def blocks_needed(self, seq, new_tokens: int) -> int:
        """Blocks that appending new_tokens to seq (None: a new sequence) takes from the pool."""
        length = 0 if seq is None else self.length(seq)
        table = [] if seq is None else self._tables[seq]
        need = -(-(length + new_tokens) // self.block_size) - len(table)
        if length % self.block_size and new_tokens and self.allocator.refcount(table[-1]) > 1:
            need += 1          # the partly filled last block is shared: it is copied first
        return max(need, 0)

    def reserve(self, seq, new_tokens: int) -> list[tuple[int, int]]:
        """Take the blocks that new_tokens more tokens of seq need; the (src, dst) copies to make."""
        table, length = self._table(seq), self._lengths[seq]
        need = self.blocks_needed(seq, new_tokens)
        if need > self.allocator.num_free:
            raise BlockPoolFullError(
                f"the KV block pool cannot hold {new_tokens} more token(s) of sequence {seq!r}: it needs {need} "
                f"more blocks and {self.allocator.num_free} of {self.allocator.num_blocks} are free. Free or "
                "preempt a sequence, or make the pool larger.")
        copies = []
        if length % self.block_size and new_tokens and self.allocator.refcount(table[-1]) > 1:
            copy = self.allocator.allocate()
            copies.append((table[-1], copy))
            self.allocator.release(table[-1])
            table[-1] = copy
        while len(table) * self.block_size < length + new_tokens:
            table.append(self.allocator.allocate())
        return copies

    def append_slot(self, seq) -> tuple[int, int, tuple[int, int] | None]:
        copies = self.reserve(seq, 1)
        position = self._lengths[seq]
        self._lengths[seq] += 1
        return self._tables[seq][position // self.block_size], position % self.block_size, (copies[0] if copies else None)

    def advance(self, seq, new_tokens: int) -> None:
        """Count new_tokens more tokens in seq (their blocks reserved already)."""
        if self._lengths[seq] + new_tokens > len(self._table(seq)) * self.block_size:
            raise ValueError(f"sequence {seq!r} has no slots reserved for {new_tokens} more token(s): reserve() first.")
        self._lengths[seq] += new_tokens

    def fork(self, parent, child) -> None:
        table = self._table(parent)
        if child in self._tables:
            raise ValueError(f"sequence {child!r} exists already: fork into a new id.")
        for block in table:
            self.allocator.share(block)
        self._tables[child], self._lengths[child] = list(table), self._lengths[parent]

    def free(self, seq) -> None:
        for block in self._table(seq):
            self.allocator.release(block)
        del self._tables[seq], self._lengths[seq]

    def truncate(self, seq, length: int) -> None:
        table = self._table(seq)
        if isinstance(length, bool) or not isinstance(length, int) or not 0 <= length <= self._lengths[seq]:
            raise ValueError(f"sequence {seq!r} holds {self._lengths[seq]} tokens; it cannot be truncated to {length!r}.")
        keep = -(-length // self.block_size)
        for block in table[keep:]:
            self.allocator.release(block)
        del table[keep:]
        self._lengths[seq] = length

    def _table(self, seq) -> list[int]:
        if seq not in self._tables:
            raise KeyError(f"no sequence {seq!r} (add_sequence() or fork() makes one; free() forgets it).")
        return self._tables[seq]
