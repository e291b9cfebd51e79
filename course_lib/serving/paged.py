"""A paged KV cache (lesson 12): keys and values in fixed-size blocks, read through block tables.

    pool k, v:      (n_layer, num_blocks, block_size, n_kv_head, head_size), allocated once
    block table:    sequence s -> [b_0, b_1, ...]; token p of s is in block b_{p // block_size},
                    slot p % block_size (the same block id in every layer's pool)

Many sequences of different lengths decode in one forward pass. `select(ids)` chooses the rows of
the next pass; `GPT` then asks the cache (`course_lib.model.RaggedDecoderCache`) for each row's
positions and for the mask of the keys each query may see, and every layer's `update(k, v)` writes
the new tokens into their slots and reads the keys and values of every row back through the block
tables, padded to the longest row:

    K_b = pool[table_b].reshape(-1, n_kv_head, head_size)[:L_b + T]      row b's keys, in order
    query t of row b (position L_b + t) may attend to keys j <= L_b + t; the padding never

Memory: a sequence of L tokens holds ceil(L / block_size) blocks, at most one block more than its
tokens need; a padded batch or a cache preallocated to max_len holds max_len per sequence. A full
pool raises `BlockPoolFullError` (the engine preempts before that happens); nothing is overwritten.
`fork(s)` shares s's blocks (copy-on-write on the first divergent write), `truncate(s, L)` rolls a
sequence back (speculative decoding), `free(s)` returns its blocks.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch

from course_lib.attention._checks import check_int
from course_lib.serving.blocks import BlockAllocator, BlockPoolFullError, BlockTables

__all__ = ["PagedKVCache", "paged_decode_attention"]


class PagedKVCache:
    """Keys and values of many sequences in one pool of blocks; implements GPT's cache Protocol.

    PagedKVCache(n_layer, n_kv_head, head_size, num_blocks, block_size=16, dtype=torch.float32,
    device=None), or PagedKVCache.for_model(model, num_blocks, block_size=16).

    add_sequence() -> id; fork(id) -> id; free(id); truncate(id, length); length_of(id);
    reserve(id, T) (take the blocks of T more tokens now);
    select(ids) before each forward (the rows of the batch, in order); blocks_of(id) (its table).
    nbytes: the pool's bytes; bytes_allocated / bytes_used: the blocks held / the tokens they hold.
    """

    def __init__(self, n_layer: int, n_kv_head: int, head_size: int, num_blocks: int,
                 block_size: int = 16, dtype: torch.dtype = torch.float32,
                 device: torch.device | str | None = None) -> None:
        self.n_layer = check_int("n_layer", n_layer, 1)
        self.n_kv_head = check_int("n_kv_head", n_kv_head, 1)
        self.head_size = check_int("head_size", head_size, 1)
        self.block_size = check_int("block_size", block_size, 1, "an integer >= 1 (token slots per block)")
        num_blocks = check_int("num_blocks", num_blocks, 1, "an integer >= 1 (blocks in each layer's pool)")
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise TypeError(f"dtype must be a floating torch.dtype (the model's), got {dtype!r}.")
        shape = (self.n_layer, num_blocks, self.block_size, self.n_kv_head, self.head_size)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.tables = BlockTables(num_blocks, self.block_size)
        self._ids = itertools.count()
        self._rows: list[int] = []
        self._written = 0          # layers written in the current forward pass
        self._pass: _Pass | None = None   # where that pass writes and reads, found by layer 0

    @classmethod
    def for_model(cls, model, num_blocks: int, block_size: int = 16, *, dtype: torch.dtype | None = None,
                  device: torch.device | str | None = None) -> PagedKVCache:
        """A pool sized for `model` (a course GPT): its layers, KV heads, head size, dtype and device."""
        config = getattr(model, "config", None)
        if config is None or not hasattr(config, "n_kv_head"):
            raise TypeError(f"PagedKVCache.for_model needs a course_lib.model.GPT, got {type(model).__name__}.")
        weight = next(model.parameters())
        return cls(config.n_layer, config.n_kv_head, config.head_size, num_blocks, block_size,
                   dtype=weight.dtype if dtype is None else dtype,
                   device=weight.device if device is None else device)

    # --- sequences ---------------------------------------------------------------------------
    @property
    def allocator(self) -> BlockAllocator:
        return self.tables.allocator

    @property
    def num_blocks(self) -> int:
        return self.allocator.num_blocks

    @property
    def sequences(self) -> tuple[int, ...]:
        return self.tables.sequences()

    def add_sequence(self) -> int:
        """A new, empty sequence; its id."""
        seq = next(self._ids)
        self.tables.add_sequence(seq)
        return seq

    def fork(self, seq: int) -> int:
        """A new sequence holding the same tokens as `seq`, sharing its blocks (no copy until one of
        the two writes into a shared block)."""
        child = next(self._ids)
        self.tables.fork(seq, child)
        return child

    def free(self, seq: int) -> None:
        """Forget `seq` and release its blocks."""
        self.tables.free(seq)
        if seq in self._rows:
            self._rows = []

    def truncate(self, seq: int, length: int) -> None:
        """Keep the first `length` tokens of `seq` (a rollback); blocks past them are released."""
        self.tables.truncate(seq, length)

    def length_of(self, seq: int) -> int:
        return self.tables.length(seq)

    def blocks_of(self, seq: int) -> tuple[int, ...]:
        return tuple(self.tables.blocks(seq))

    def blocks_needed(self, seq: int | None, new_tokens: int) -> int:
        """Blocks that appending new_tokens to seq (None: a new sequence) takes from the pool,
        copy-on-write included."""
        return self.tables.blocks_needed(seq, new_tokens)

    def reserve(self, seq: int, T: int) -> None:
        """Take from the pool now the blocks that T more tokens of `seq` need (copying a shared,
        partly filled last block first): a scheduler reserves a step's blocks before it admits more."""
        for src, dst in self.tables.reserve(seq, T):                # copy-on-write, every layer
            self.k[:, dst] = self.k[:, src]
            self.v[:, dst] = self.v[:, src]

    def select(self, seqs) -> None:
        """The sequences of the next forward pass, one row each, in this order."""
        seqs = [int(s) for s in seqs]
        if not seqs:
            raise ValueError("select needs at least one sequence id (the rows of the next forward).")
        if len(set(seqs)) != len(seqs):
            raise ValueError(f"select got a sequence twice ({seqs}): fork it to decode two continuations.")
        for s in seqs:
            self._check_seq(s)
        self._rows, self._written, self._pass = seqs, 0, None

    # --- the model's cache Protocol (course_lib.model.RaggedDecoderCache) ---------------------
    @property
    def batch_size(self) -> int:
        """The rows of the next forward pass (an error before select(): the model asks first)."""
        self._check_rows()
        return len(self._rows)

    @property
    def length(self) -> int:
        """The fewest tokens a selected row holds (rows differ: see positions())."""
        return min(self.tables.length(s) for s in self._rows) if self._rows else 0

    @property
    def layer_lengths(self) -> tuple[int, ...]:
        done = self.length + (self._pass.T if self._pass is not None else 0)
        return tuple(done if i < self._written else self.length for i in range(self.n_layer))

    def positions(self, T: int) -> torch.Tensor:
        """(B, T): row b's T new tokens sit at positions L_b .. L_b + T - 1."""
        self._check_rows()
        start = torch.tensor([self.tables.length(s) for s in self._rows], device=self.k.device)
        return start[:, None] + torch.arange(T, device=self.k.device)

    def attention_mask(self, T: int) -> torch.Tensor:
        """(B, 1, T, Tk) bool, Tk = max_b L_b + T: query t of row b sees keys 0 .. L_b + t."""
        positions = self.positions(T)
        keys = torch.arange(int(positions[:, -1].max()) + 1, device=self.k.device)
        return (keys <= positions[:, :, None])[:, None]

    def layer(self, index: int) -> _PagedLayer:
        check_int("layer", index, 0, f"an integer in 0..{self.n_layer - 1}")
        if index >= self.n_layer:
            raise ValueError(f"layer must be in 0..{self.n_layer - 1}, got {index}.")
        return _PagedLayer(self, index)

    # --- writing and reading ----------------------------------------------------------------
    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write k, v (B, n_kv_head, T, head_size) at each row's next T slots of `layer`; return every
        row's keys and values (B, n_kv_head, Tk, head_size), padded to the longest row."""
        self._check_rows()
        B, H, T, d = k.shape
        if (B, H, d) != (len(self._rows), self.n_kv_head, self.head_size) or v.shape != k.shape:
            raise ValueError(f"k and v must have shape (B={len(self._rows)}, n_kv_head={self.n_kv_head}, T, "
                             f"head_size={self.head_size}), got {tuple(k.shape)} and {tuple(v.shape)}.")
        if layer != self._written:
            raise ValueError(f"layer {layer} written out of order: the layers of a forward pass write 0, 1, ...; "
                             f"expected layer {self._written}. Call select() before a new forward pass.")
        if layer == 0:
            self._reserve(T)
            self._pass = self._plan_pass(T)
        p = self._pass
        if T != p.T:
            raise ValueError(f"layer {layer} got {T} new tokens per row and layer 0 got {p.T}: the layers of "
                             "one forward pass write the same tokens.")
        self.k[layer, p.blocks, p.slots] = k.permute(0, 2, 1, 3).reshape(B * T, H, d).to(self.k.dtype)
        self.v[layer, p.blocks, p.slots] = v.permute(0, 2, 1, 3).reshape(B * T, H, d).to(self.v.dtype)
        self._written += 1
        if self._written == self.n_layer:          # the pass is complete: the rows hold T more
            for s in self._rows:
                self.tables.advance(s, T)
            self._written, self._pass = 0, None

        def read(pool: torch.Tensor) -> torch.Tensor:                             # (B, H, Tk, d)
            blocks = pool[layer].view(self.num_blocks, -1).index_select(0, p.tables)
            return blocks.view(B, -1, self.n_kv_head, self.head_size)[:, :p.Tk].transpose(1, 2)

        return read(self.k), read(self.v)

    def _reserve(self, T: int) -> None:
        """Blocks for T more tokens in every selected row, or an error before any is taken."""
        need = sum(self.blocks_needed(s, T) for s in self._rows)
        if need > self.allocator.num_free:
            raise BlockPoolFullError(
                f"the KV block pool cannot hold {T} more token(s) for {len(self._rows)} sequence(s): they need "
                f"{need} more blocks and {self.allocator.num_free} of {self.num_blocks} are free. Free or preempt "
                "a sequence, or build the cache with more blocks.")
        for s in self._rows:
            self.reserve(s, T)

    def _plan_pass(self, T: int) -> _Pass:
        """Where a pass of T new tokens per row writes (block and slot of each) and what it reads
        (every row's blocks, padded with block 0 to the longest row): the same for every layer."""
        lengths = torch.tensor([self.tables.length(s) for s in self._rows])
        held = lengths + T
        width = int((held.max() + self.block_size - 1) // self.block_size)
        tables = [self.tables.blocks(s)[:width] for s in self._rows]
        tables = torch.tensor([t + [0] * (width - len(t)) for t in tables], dtype=torch.long)   # (B, width)
        positions = lengths[:, None] + torch.arange(T)                                          # (B, T)
        device = self.k.device
        return _Pass(T=T, Tk=int(held.max()),
                     blocks=tables.gather(1, positions // self.block_size).reshape(-1).to(device),
                     slots=(positions % self.block_size).reshape(-1).to(device),
                     tables=tables.reshape(-1).to(device))

    # --- memory ---------------------------------------------------------------------------
    @property
    def nbytes(self) -> int:
        """Bytes of the whole pool (keys and values, every layer)."""
        return self.k.nbytes + self.v.nbytes

    @property
    def bytes_per_block(self) -> int:
        return self.nbytes // self.num_blocks

    @property
    def bytes_allocated(self) -> int:
        """Bytes of the blocks sequences hold (a shared block counted once)."""
        return self.allocator.num_used * self.bytes_per_block

    @property
    def bytes_used(self) -> int:
        """Bytes of the tokens the sequences hold (a token in a shared block counted once)."""
        held: dict[int, int] = {}
        for seq in self.tables.sequences():
            length = self.tables.length(seq)
            for i, block in enumerate(self.tables.blocks(seq)):
                held[block] = max(held.get(block, 0), min(self.block_size, length - i * self.block_size))
        return sum(held.values()) * self.bytes_per_block // self.block_size

    # --- checks ---------------------------------------------------------------------------
    def _check_seq(self, seq: int) -> None:
        if seq not in self.tables:
            raise KeyError(f"no sequence {seq!r} in this cache (add_sequence() or fork() makes one; "
                           "free() forgets it).")

    def _check_rows(self) -> None:
        if not self._rows:
            raise ValueError("no sequences selected: call cache.select(ids) before each forward pass.")


@dataclass(frozen=True)
class _Pass:
    """One forward pass over the selected rows: T new tokens each, the keys read padded to Tk."""

    T: int
    Tk: int
    blocks: torch.Tensor     # (B * T,) the block of each new token
    slots: torch.Tensor      # (B * T,) its slot in that block
    tables: torch.Tensor     # (B * width,) every row's blocks, padded with block 0


class _PagedLayer:
    """One layer of a PagedKVCache, as an attention module sees it (course_lib.model.LayerCache)."""

    __slots__ = ("cache", "index")

    def __init__(self, cache: PagedKVCache, index: int) -> None:
        self.cache, self.index = cache, index

    def update(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.cache.update(self.index, k, v)


def paged_decode_attention(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor,
                           block_tables, lengths) -> torch.Tensor:
    """One decoding step's attention read through block tables, one sequence at a time.

    q (B, n_head, head_size): each row's newest query; k_pool, v_pool (num_blocks, block_size,
    n_kv_head, head_size): one layer's pool, the newest keys and values already written;
    block_tables: B lists of block ids; lengths: the tokens each row holds (its newest included).
    Returns (B, n_head, head_size): softmax(q K_b^T / sqrt(head_size)) V_b over row b's L_b keys,
    query head h reading KV head h // (n_head / n_kv_head). No tensor padded to the longest row.
    """
    B, H, d = q.shape
    block_size, H_kv = k_pool.shape[1], k_pool.shape[2]
    out = torch.empty_like(q)
    for b in range(B):
        L = int(lengths[b])
        blocks = torch.as_tensor(list(block_tables[b])[:-(-L // block_size)], dtype=torch.long, device=q.device)
        k = k_pool.index_select(0, blocks).reshape(-1, H_kv, d)[:L]            # (L, H_kv, d)
        v = v_pool.index_select(0, blocks).reshape(-1, H_kv, d)[:L]
        groups = H // H_kv
        scores = torch.einsum("hgd,lhd->hgl", q[b].view(H_kv, groups, d), k) / d ** 0.5
        out[b] = torch.einsum("hgl,lhd->hgd", scores.softmax(-1), v).reshape(H, d)
    return out
