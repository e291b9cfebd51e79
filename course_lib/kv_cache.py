"""The KV cache (lesson 08): keys and values of past tokens, kept instead of recomputed.

A decoder generates one token at a time. Without a cache, step t runs the whole prefix
x_1 ... x_t through the model again, so the key and value of token 1 are computed t times.
They never change (the causal mask stops token 1 from seeing anything after it), so the model
can compute each token's K and V once, store them, and at step t project only the newest token:

    q_t, k_t, v_t = x_t W_Q, x_t W_K, x_t W_V             one token, not t
    K = [K_cache; k_t],  V = [V_cache; v_t]               append
    a_t = softmax(q_t K^T / sqrt(d_h)) V                  one query row: no mask needed

`KVCache` preallocates, for every layer, room for `max_len` positions of `n_kv_head` heads:

    k, v: (n_layer, batch_size, n_kv_head, max_len, head_size)

so appending writes into memory that already exists (no torch.cat, no reallocation), and a
model with grouped-query (GQA) or multi-query (MQA) attention stores only its n_kv_head
heads: its cache really is n_head / n_kv_head times smaller. Its size is the notes' formula,

    nbytes = batch_size x 2 x n_layer x (n_kv_head x head_size) x bytes per value x max_len
           = batch_size x kv_cache_bytes(n_layer, n_kv_head, head_size, bytes, max_len).

Keys are stored as the attention uses them: with RoPE, already rotated to their positions.
The sizes have the names of GPTConfig (n_layer, n_kv_head, head_size). `KVCache` implements the interface the model talks
to (course_lib.model.DecoderCache), so the model never reads its fields.
"""

from __future__ import annotations

import torch

from course_lib.attention._checks import check_int
from course_lib.attention.grouped import kv_cache_bytes
from course_lib.vocabulary import accepts_older_names

__all__ = ["KVCache", "KVCacheFullError", "LayerKVCache"]


class KVCacheFullError(ValueError):
    """Raised when an append would go past the cache's max_len."""


class KVCache:
    """Preallocated keys and values for every layer of a decoder.

    KVCache(n_layer, batch_size, n_kv_head, max_len, head_size, dtype=torch.float32, device="cpu")

    - `update(layer, k, v)` writes k, v (batch_size, n_kv_head, T, head_size) at the layer's next
      T positions and returns views of everything that layer holds, (batch_size, n_kv_head,
      L + T, head_size). Layers are filled one after the other during a forward pass.
    - `length`: the positions every layer holds (the number of tokens the cache has seen);
      `layer_lengths`: each layer's.
    - `nbytes`: the bytes allocated for keys and values; `bytes_used` those holding tokens.
    - `reorder(indices)`: keep batch rows `indices` (beam search), in that order; the batch size
      becomes len(indices), so one prompt's cache can be copied to every beam.
    - `reset()`: forget every token (the memory stays allocated); `truncate(length)`: keep the
      first `length`.
    - `KVCache.for_model(model, batch_size, max_len)` reads the sizes from a GPT's config.
    """

    @accepts_older_names
    def __init__(self, n_layer: int, batch_size: int, n_kv_head: int, max_len: int, head_size: int,
                 dtype: torch.dtype = torch.float32, device: torch.device | str | None = None) -> None:
        self.n_layer = check_int("n_layer", n_layer, 1)
        batch_size = check_int("batch_size", batch_size, 1)
        self.n_kv_head = check_int("n_kv_head", n_kv_head, 1)
        self.max_len = check_int("max_len", max_len, 1, "an integer >= 1 (the most tokens the cache holds)")
        self.head_size = check_int("head_size", head_size, 1)
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise TypeError(f"dtype must be a floating torch.dtype (the model's), got {dtype!r}.")
        shape = (self.n_layer, batch_size, self.n_kv_head, self.max_len, self.head_size)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self._lengths = [0] * self.n_layer

    @classmethod
    def for_model(cls, model, batch_size: int, max_len: int | None = None, *,
                  dtype: torch.dtype | None = None, device: torch.device | str | None = None) -> KVCache:
        """A cache sized for `model` (a course GPT): its layers, KV heads and head size, and by
        default its parameters' dtype and device. max_len defaults to config.block_size."""
        config = getattr(model, "config", None)
        if config is None or not hasattr(config, "n_kv_head"):
            raise TypeError(f"KVCache.for_model needs a course_lib.model.GPT, got {type(model).__name__}.")
        weight = next(model.parameters())
        return cls(config.n_layer, batch_size, config.n_kv_head,
                   config.block_size if max_len is None else max_len, config.head_size,
                   dtype=weight.dtype if dtype is None else dtype,
                   device=weight.device if device is None else device)

    # --- sizes -----------------------------------------------------------------------------
    @property
    def batch_size(self) -> int:
        return self.k.shape[1]

    @property
    def dtype(self) -> torch.dtype:
        return self.k.dtype

    @property
    def device(self) -> torch.device:
        return self.k.device

    @property
    def length(self) -> int:
        """Tokens held by every layer: the position of the next token."""
        return min(self._lengths)

    @property
    def layer_lengths(self) -> tuple[int, ...]:
        """The positions each layer holds; they differ only inside a forward pass (or after one
        that failed half-way)."""
        return tuple(self._lengths)

    @property
    def nbytes(self) -> int:
        """Bytes allocated for keys and values (all max_len positions)."""
        return self.k.nbytes + self.v.nbytes

    @property
    def bytes_used(self) -> int:
        """Bytes holding the `length` tokens seen so far."""
        return self.batch_size * kv_cache_bytes(self.n_layer, self.n_kv_head, self.head_size,
                                                self.k.element_size(), self.length)

    def __len__(self) -> int:
        return self.length

    # --- writing ---------------------------------------------------------------------------
    def layer(self, index: int) -> LayerKVCache:
        """The cache of one layer, which an attention module updates without knowing its index."""
        self._check_layer(index)
        return LayerKVCache(self, index)

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append k, v (batch_size, n_kv_head, T, head_size) to `layer`; return all its keys and values."""
        self._check_layer(layer)
        self._check_kv(k, v)
        start = self._lengths[layer]
        stop = start + k.shape[-2]
        if stop > self.max_len:
            raise KVCacheFullError(
                f"the KV cache is full: it holds max_len={self.max_len} positions, {start} are used, "
                f"and {k.shape[-2]} more do not fit. Allocate a larger cache (max_len >= {stop}), "
                "or start again from a shorter context.")
        self.k[layer, :, :, start:stop] = k
        self.v[layer, :, :, start:stop] = v
        self._lengths[layer] = stop
        return self.k[layer, :, :, :stop], self.v[layer, :, :, :stop]

    def reorder(self, indices: torch.Tensor) -> None:
        """Keep the batch rows `indices` (1-D integer tensor), in that order: beam search calls this
        when beams are re-ranked. Repeating an index copies that row (one prompt to many beams)."""
        if not isinstance(indices, torch.Tensor) or indices.dim() != 1 or indices.numel() == 0:
            raise ValueError("indices must be a non-empty 1-D tensor of batch rows, e.g. "
                             "torch.tensor([0, 0, 1]) keeps row 0 twice and row 1 once.")
        if indices.dtype.is_floating_point or indices.dtype == torch.bool or indices.is_complex():
            raise TypeError(f"indices must be integers, got {indices.dtype}; use indices.long().")
        lo, hi = int(indices.min()), int(indices.max())
        if lo < 0 or hi >= self.batch_size:
            raise ValueError(f"indices must lie in 0..{self.batch_size - 1} (the cache's batch rows), "
                             f"got {lo if lo < 0 else hi}.")
        indices = indices.to(self.device)
        used = max(self._lengths)
        if len(indices) == self.batch_size:     # beams re-ranked: move only the rows that change,
            moved = indices != torch.arange(len(indices), device=self.device)   # and positions in use
            if bool(moved.any()):
                rows = moved.nonzero()[:, 0]
                self.k[:, rows, :, :used] = self.k[:, indices[rows], :, :used]
                self.v[:, rows, :, :used] = self.v[:, indices[rows], :, :used]
        else:                                   # a new batch size: new buffers
            self.k = self.k.index_select(1, indices)
            self.v = self.v.index_select(1, indices)

    def reset(self) -> None:
        """Forget every token; the buffers stay allocated."""
        self._lengths = [0] * self.n_layer

    def truncate(self, length: int) -> None:
        """Keep the first `length` tokens and forget the newer ones (a rollback: speculative
        decoding drops the draft tokens its check rejected; timing one step again)."""
        check_int("length", length, 0, f"an integer in 0..{self.length} (the tokens the cache holds)")
        if length > self.length:
            raise ValueError(f"the cache holds {self.length} tokens; it cannot be truncated to {length}.")
        self._lengths = [length] * self.n_layer

    # --- checks ----------------------------------------------------------------------------
    def _check_layer(self, layer: int) -> None:
        check_int("layer", layer, 0, f"an integer in 0..{self.n_layer - 1}")
        if layer >= self.n_layer:
            raise ValueError(f"layer must be in 0..{self.n_layer - 1} (the cache has {self.n_layer} "
                             f"layers), got {layer}.")

    def _check_kv(self, k: torch.Tensor, v: torch.Tensor) -> None:
        for name, x in (("k", k), ("v", v)):
            if not isinstance(x, torch.Tensor):
                raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}.")
        expected = f"(batch_size={self.batch_size}, n_kv_head={self.n_kv_head}, T, head_size={self.head_size})"
        if k.shape != v.shape:
            raise ValueError(f"k and v must have the same shape {expected}, got {tuple(k.shape)} and "
                             f"{tuple(v.shape)}.")
        B, H, T, d = k.shape if k.dim() == 4 else (None,) * 4
        if (B, H, d) != (self.batch_size, self.n_kv_head, self.head_size) or T == 0:
            hint = ""
            if k.dim() == 4 and H != self.n_kv_head and d == self.head_size:
                hint = (" Cache the n_kv_head key/value heads before they are repeated for the "
                        "query heads (GQA/MQA).")
            elif k.dim() == 3:
                hint = " Split the heads first: (B, T, H*d) -> (B, H, T, d)."
            raise ValueError(f"k and v must have shape {expected} with T >= 1, got "
                             f"{tuple(k.shape)}.{hint}")
        if k.dtype != self.dtype or v.dtype != self.dtype:
            raise TypeError(f"k and v must have the cache's dtype {self.dtype}, got {k.dtype} and "
                            f"{v.dtype}; create the cache with the model's dtype.")
        if k.device != self.device or v.device != self.device:
            raise ValueError(f"k and v are on {k.device} and {v.device}, the cache on {self.device}: "
                             "create the cache on the model's device.")

    def __repr__(self) -> str:
        return (f"KVCache(n_layer={self.n_layer}, batch_size={self.batch_size}, n_kv_head="
                f"{self.n_kv_head}, max_len={self.max_len}, head_size={self.head_size}, dtype={self.dtype}, "
                f"length={self.length}, nbytes={self.nbytes:,})")


class LayerKVCache:
    """One layer's view of a `KVCache`: `update(k, v)` appends to that layer and returns its K, V."""

    def __init__(self, cache: KVCache, index: int) -> None:
        self.cache, self.index = cache, index

    @property
    def length(self) -> int:
        return self.cache.layer_lengths[self.index]

    def update(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.cache.update(self.index, k, v)
