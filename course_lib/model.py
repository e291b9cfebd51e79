"""A GPT in one file (lesson 06): LayerNorm, MLP, pre-LN Block, GPT, GPTClassifier.

The forward pipeline of the course notes (003's table of contents):

    ids (B, T) -> token embedding (+ position embedding) -> n_layer Blocks -> LN -> head

    Block (pre-LN; 001 l.1-35, with the notes' bracket slip corrected):
        X1 = X  + Dropout(MHA(LN(X), causal mask))     "communication" between tokens
        X2 = X1 + Dropout(MLP(LN(X1)))                  per-token "feature mixing"

    language-model head:   logits = LN(X_L) W_E^T   (weights tied with the token table)
    classification head:   logits = pool(LN(X_L)) W_C + b_C

Where the position information enters depends on `pos_encoding`:
    "learned"     a table of block_size vectors added to the token vectors (GPT-2); it has no
                  row past block_size, so longer inputs are refused
    "sinusoidal"  the fixed sin/cos vectors of lesson 02 added to the token vectors
    "rope"        queries and keys rotated inside every attention (lesson 05)
    "alibi"       -m_h |i - j| added to every head's scores (lesson 05)
    "none"        only the causal mask (which still leaks some order)
All but "learned" run on sequences longer than block_size (how well is lesson 05's question).

The weights follow GPT-2: N(0, 0.02) everywhere, the two projections that write into the
residual stream (attention's W_O and the MLP's second layer) scaled by 1/sqrt(2 n_layer) so the
stream's variance does not grow with depth, and the output head tied to the token table.
`GPT.from_hf_gpt2` loads a `transformers` GPT2LMHeadModel and gives the same logits.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import NamedTuple, Protocol, runtime_checkable

import torch
import torch.nn as nn
import torch.nn.functional as F

from course_lib.attention import MultiHeadAttention
from course_lib.attention._checks import check_int
from course_lib.data import CharVocab
from course_lib.embeddings import _check_ids, sinusoidal_encoding
from course_lib.positional import RotaryMultiHeadAttention, alibi_bias, alibi_slopes

__all__ = ["ACTIVATIONS", "POS_ENCODINGS", "Block", "DecoderCache", "GPT", "GPTClassifier", "GPTConfig",
           "LayerCache", "LayerNorm", "MLP", "PostLNBlock", "RaggedDecoderCache", "count_parameters",
           "load_pretrained"]

POS_ENCODINGS = ("learned", "sinusoidal", "rope", "alibi", "none")
ACTIVATIONS = {
    "gelu": nn.GELU,                                  # exact, x * Phi(x)
    "gelu_tanh": partial(nn.GELU, approximate="tanh"),  # GPT-2's "gelu_new"
    "relu": nn.ReLU,                                  # the notes' FFN and the original Transformer
}
POOLINGS = ("last", "mean")
# transformers' GPT2Config.activation_function -> ours
_HF_ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu",
                   "relu": "relu"}


@dataclass
class GPTConfig:
    """Hyperparameters; the defaults are GPT-2 small (124,439,808 parameters)."""

    vocab_size: int = 50257
    block_size: int = 1024          # the longest context (the learned position table's rows)
    n_layer: int = 12
    n_head: int = 12
    n_kv_head: int | None = None    # None: n_head (MHA); 1: MQA; a divisor of n_head: GQA
    n_embd: int = 768
    d_ff: int | None = None         # the MLP's hidden width; None: 4 * n_embd
    dropout: float = 0.0
    bias: bool = True               # biases in the Linear layers and LayerNorms
    pos_encoding: str = "learned"
    activation: str = "gelu"
    tie_weights: bool = True        # the output head reuses the token embedding table
    layer_norm_eps: float = 1e-5
    rope_base: float = 10000.0

    def __post_init__(self) -> None:
        for name in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd"):
            check_int(name, getattr(self, name), 1)
        if self.n_kv_head is None:
            self.n_kv_head = self.n_head
        check_int("n_kv_head", self.n_kv_head, 1)
        if self.d_ff is None:
            self.d_ff = 4 * self.n_embd
        check_int("d_ff", self.d_ff, 1)
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd={self.n_embd} is not divisible by n_head={self.n_head}: each "
                             "head gets n_embd / n_head dims; pick n_head that divides n_embd.")
        if self.n_head % self.n_kv_head:
            raise ValueError(f"n_head={self.n_head} is not divisible by n_kv_head={self.n_kv_head}: "
                             "each key/value head serves n_head / n_kv_head query heads; pick "
                             "n_kv_head that divides n_head (n_head for MHA, 1 for MQA).")
        if self.pos_encoding not in POS_ENCODINGS:
            raise ValueError(f"pos_encoding must be one of {POS_ENCODINGS}, got {self.pos_encoding!r}.")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {tuple(ACTIVATIONS)}, got {self.activation!r}.")
        if self.pos_encoding == "rope" and (self.n_embd // self.n_head) % 2:
            raise ValueError(f"rope rotates pairs of channels, so the head size n_embd / n_head = "
                             f"{self.n_embd // self.n_head} must be even.")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout!r}.")
        if not self.layer_norm_eps > 0:
            raise ValueError(f"layer_norm_eps must be > 0 (it keeps 1/sqrt(var + eps) finite for a "
                             f"constant vector), got {self.layer_norm_eps!r}.")

    @property
    def head_size(self) -> int:
        return self.n_embd // self.n_head


@runtime_checkable
class LayerCache(Protocol):
    """What one attention layer needs from a KV cache: append the new tokens' keys and values,
    (B, n_kv_head, T, head_size), and get back every position the layer holds."""

    def update(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]: ...


@runtime_checkable
class DecoderCache(Protocol):
    """The interface between GPT and a KV cache (course_lib.kv_cache.KVCache is one; lesson 10's
    learners write their own). GPT reads the sizes to check the cache fits it, `length` for the
    new tokens' positions, `layer_lengths` to refuse a cache left half-written by a failed
    forward, and hands `layer(i)` to block i."""

    n_layer: int
    n_kv_head: int
    head_size: int
    batch_size: int

    @property
    def length(self) -> int: ...

    @property
    def layer_lengths(self) -> tuple[int, ...]: ...

    def layer(self, index: int) -> LayerCache: ...


@runtime_checkable
class RaggedDecoderCache(DecoderCache, Protocol):
    """A cache whose rows hold different numbers of tokens (lesson 12's paged cache, which serves
    many requests at once). Row b's new tokens sit at its own positions, and the keys a layer
    returns are padded to the longest row, so GPT asks the cache where the tokens are and which
    keys each query may see, instead of assuming `length` and a causal mask aligned to the end:

        positions(T)        (B, T) int64: the positions of each row's T new tokens
        attention_mask(T)   (B, 1, T, Tk) bool: query t of row b may attend to key j
    """

    def positions(self, T: int) -> torch.Tensor: ...

    def attention_mask(self, T: int) -> torch.Tensor: ...


_DECODER_CACHE_TYPES: set[type] = set()   # the types GPT has found to implement DecoderCache
_RAGGED_CACHE_TYPES: set[type] = set()    # ... and RaggedDecoderCache


def count_parameters(config: GPTConfig) -> int:
    """The number of parameters of GPT(config), in closed form (tied weights counted once).

        embeddings   V D  (+ block_size D for learned positions)
        per layer    2 LayerNorms        2 D            (+ 2 D biases)
                     W_Q, W_O            2 D^2          (+ 2 D)
                     W_K, W_V            2 D (H_kv d_h) (+ 2 H_kv d_h)
                     MLP                 2 D d_ff       (+ d_ff + D)
        final LN     D (+ D);   untied head  V D
    """
    c = config
    D, kv = c.n_embd, c.n_kv_head * c.head_size
    ln = D * (2 if c.bias else 1)
    attn = 2 * D * D + 2 * D * kv + ((2 * D + 2 * kv) if c.bias else 0)
    mlp = 2 * D * c.d_ff + ((c.d_ff + D) if c.bias else 0)
    embeddings = c.vocab_size * D + (c.block_size * D if c.pos_encoding == "learned" else 0)
    head = 0 if c.tie_weights else c.vocab_size * D
    return embeddings + c.n_layer * (2 * ln + attn + mlp) + ln + head


def _at_least_float32(x: torch.Tensor) -> torch.Tensor:
    """Half-precision logits are upcast for the loss (its log-sum-exp needs the range); float64 stays."""
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


class LayerNorm(nn.Module):
    """LN(x) = w * (x - mean) / sqrt(var + eps) + b over the last dim (each token's D features).

    mean and var (the biased variance, dividing by D) are per token, so a token is normalised
    on its own, whatever the batch or the other positions. eps keeps the division finite for a
    constant vector (var = 0). w and b ("re-scale it with learnt parameters") start at 1 and 0.
    Unlike nn.LayerNorm, the bias can be switched off. Computed by F.layer_norm (one fused
    kernel); the lesson writes it out and checks the two agree.
    """

    def __init__(self, n_embd: int, bias: bool = True, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n_embd))
        self.bias = nn.Parameter(torch.zeros(n_embd)) if bias else None
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, bias={self.bias is not None}, eps={self.eps}"


class MLP(nn.Module):
    """The position-wise feed-forward network: Linear(D, d_ff) -> activation -> Linear(d_ff, D).

    It sees one token's vector at a time (the same weights at every position), so permuting
    the positions of its input permutes its output the same way.
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.fc = nn.Linear(config.n_embd, config.d_ff, bias=config.bias)
        self.act = ACTIVATIONS[config.activation]()
        self.proj = nn.Linear(config.d_ff, config.n_embd, bias=config.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(self.act(self.fc(x)))


class Block(nn.Module):
    """One pre-LN decoder block: X1 = X + Dropout(MHA(LN(X), mask)); X2 = X1 + Dropout(MLP(LN(X1))).

    One (masked) self-attention: a GPT has no encoder, so the encoder-decoder Transformer's
    second, cross-attention layer has nothing to attend to. `score_bias` (H, T, T) is added to
    the scores (ALiBi); `positions` rotate queries and keys (RoPE).
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        c = config
        self.ln_1 = LayerNorm(c.n_embd, c.bias, c.layer_norm_eps)
        if c.pos_encoding == "rope":
            self.attn = RotaryMultiHeadAttention(c.n_embd, c.n_head, c.n_kv_head, c.dropout, c.bias,
                                                 base=c.rope_base)
        else:
            self.attn = MultiHeadAttention(c.n_embd, c.n_head, c.n_kv_head, c.dropout, c.bias)
        self.ln_2 = LayerNorm(c.n_embd, c.bias, c.layer_norm_eps)
        self.mlp = MLP(c)
        self.dropout = nn.Dropout(c.dropout)

    def attend(self, h: torch.Tensor, score_bias: torch.Tensor | None,
               positions: torch.Tensor | None, cache=None, is_causal: bool = True) -> torch.Tensor:
        """Causal self-attention of h; only rotary attention takes positions. With a layer cache
        (lesson 08), h holds the new tokens only and they attend to every cached one too. With a
        ragged cache (lesson 12) score_bias already holds the causal pattern: is_causal=False."""
        extra = {} if positions is None else {"positions": positions}
        if cache is not None:
            extra["cache"] = cache
        return self.attn(h, mask=score_bias, is_causal=is_causal, **extra)[0]

    def forward(self, x: torch.Tensor, score_bias: torch.Tensor | None = None,
                positions: torch.Tensor | None = None, cache=None, is_causal: bool = True) -> torch.Tensor:
        x = x + self.dropout(self.attend(self.ln_1(x), score_bias, positions, cache, is_causal))
        return x + self.dropout(self.mlp(self.ln_2(x)))


class PostLNBlock(Block):
    """The original Transformer's (and BERT's) order, for comparison: normalise after adding.

        X1 = LN(X + Dropout(MHA(X, mask)));   X2 = LN(X1 + Dropout(MLP(X1)))

    Same parameters as `Block` (its state_dict loads into one), so the two can be compared on the
    same weights. Every path from the loss to a lower layer crosses the LayerNorms above it; in
    the pre-LN block the sum X + ... leaves an identity path. GPT uses `Block`.
    """

    def forward(self, x: torch.Tensor, score_bias: torch.Tensor | None = None,
                positions: torch.Tensor | None = None, cache=None, is_causal: bool = True) -> torch.Tensor:
        x = self.ln_1(x + self.dropout(self.attend(x, score_bias, positions, cache, is_causal)))
        return self.ln_2(x + self.dropout(self.mlp(x)))

class GPT(nn.Module):
    """The decoder-only language model. forward(idx (B, T), targets=None) -> (logits, loss).

    logits (B, T, vocab_size) predict token t+1 from tokens 0..t; with targets (B, T) the loss
    is the mean cross-entropy over the positions whose target is not -100 (the padding
    convention of PyTorch and `transformers`: a <pad> target is ignored by the loss).
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        if not isinstance(config, GPTConfig):
            raise TypeError(f"GPT needs a GPTConfig, got {type(config).__name__}.")
        self.config = c = config
        self.wte = nn.Embedding(c.vocab_size, c.n_embd)
        self.wpe = nn.Embedding(c.block_size, c.n_embd) if c.pos_encoding == "learned" else None
        self.drop = nn.Dropout(c.dropout)
        self.blocks = nn.ModuleList(Block(c) for _ in range(c.n_layer))
        self.ln_f = LayerNorm(c.n_embd, c.bias, c.layer_norm_eps)
        self.lm_head = nn.Linear(c.n_embd, c.vocab_size, bias=False)
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith(("attn.out_proj.weight", "mlp.proj.weight")):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * c.n_layer))
        if c.tie_weights:
            self.lm_head.weight = self.wte.weight
        self._store_widening_weights_input_major()

    def _store_widening_weights_input_major(self) -> None:
        """Store each widening layer's weight W (out, in) as W^T's contiguous memory: the same
        tensor, values and shape, only its strides change.

        A cached generation step multiplies one token's vector by every weight: matrix-vector
        products whose time is spent reading the weights from memory. On CPU, BLAS reads a
        layer that widens (out >= in: the LM head, the MLP's fc, square projections) up to 1.8
        times faster in this input-major layout (GPT-2's Conv1D layout), and a narrowing one
        faster as it is (benchmarks/RESULTS.md, lesson 08). Products of many rows (training,
        a prefill) run at the same speed either way. The token table tied to the head is stored the head's
        way; looking up a row then reads strided memory, which costs little.
        """
        self._relayout(lambda module: module.out_features >= module.in_features, input_major=True)

    def use_plain_layout(self) -> GPT:
        """Every weight contiguous (out, in), as nn.Linear stores it (benchmarks compare layouts)."""
        self._relayout(lambda module: True, input_major=False)
        return self

    def _relayout(self, chosen, input_major: bool) -> None:
        """Re-store the weights of the chosen Linear layers, keeping values, shapes and the tie."""
        for module in self.modules():
            if isinstance(module, nn.Linear) and chosen(module):
                weight = module.weight
                if weight.t().is_contiguous() != input_major:
                    data = weight.detach()
                    relaid = nn.Parameter(data.t().contiguous().t() if input_major else data.contiguous())
                    module.weight = relaid
                    if weight is self.wte.weight:
                        self.wte.weight = relaid

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def num_params(self, non_embedding: bool = False) -> int:
        """Parameters counted once each (a tied head is not counted twice).

        non_embedding=True leaves out the tables that are only looked up (nanoGPT's convention):
        the position table, and the token table unless it is tied to the head, where it also
        does a matrix product at every position.
        """
        n = sum(p.numel() for p in self.parameters())
        if non_embedding:
            n -= self.wpe.weight.numel() if self.wpe is not None else 0
            n -= 0 if self.config.tie_weights else self.wte.weight.numel()
        return n

    def _check_idx(self, idx: torch.Tensor, start: int = 0) -> None:
        _check_ids(idx, self.config.vocab_size)
        if idx.dim() != 2:
            hint = " (add a batch dim with idx[None])" if idx.dim() == 1 else ""
            raise ValueError(f"idx must have shape (B, T), got {tuple(idx.shape)}{hint}.")
        T, block_size = idx.shape[1], self.config.block_size
        if T == 0:
            raise ValueError("idx has no tokens (T = 0): give the model at least one token.")
        if start and start + T > block_size and self.config.pos_encoding == "learned":
            raise ValueError(
                f"the cache holds {start} tokens and {T} more would reach position {start + T - 1}, "
                f"but learned positions stop at {block_size - 1} (block_size={block_size}): start "
                f"again without the cache from the last {block_size} tokens, or use a model with "
                "pos_encoding 'sinusoidal', 'rope', 'alibi' or 'none'.")
        if T > block_size and self.config.pos_encoding == "learned":
            raise ValueError(
                f"a sequence of {T} tokens is longer than block_size={block_size}, and learned "
                f"positions have a vector for positions 0..{block_size - 1} only: crop the input to "
                f"its last {block_size} tokens (idx[:, -{block_size}:]). Models with pos_encoding "
                "'sinusoidal', 'rope', 'alibi' or 'none' run on longer inputs.")

    def hidden_states(self, idx: torch.Tensor, *, cache=None) -> torch.Tensor:
        """The final, normalised token vectors LN(X_L), (B, T, n_embd): what the heads read.

        With a `KVCache` holding L tokens, idx holds the next T tokens: they sit at positions
        L ... L+T-1 (the position table, the sinusoids, RoPE's angles and ALiBi's distances all
        use these), their keys and values are appended to the cache, and they attend to all L+T.
        """
        start = 0 if cache is None else self._check_cache(cache, idx)
        ragged = cache is not None and type(cache) in _RAGGED_CACHE_TYPES
        if ragged:                      # each row at its own positions (lesson 12)
            self._check_idx(idx)
            positions = cache.positions(idx.shape[1]).to(idx.device)               # (B, T)
            start = int(positions[:, 0].max())
        self._check_idx(idx, start)
        c, T = self.config, idx.shape[1]
        if not ragged:
            positions = torch.arange(start, start + T, device=idx.device)
        x = self.wte(idx)
        if c.pos_encoding == "learned":
            x = x + self.wpe(positions)
        elif c.pos_encoding == "sinusoidal":
            x = x + sinusoidal_encoding(positions, c.n_embd, dtype=x.dtype)
        x = self.drop(x)
        if ragged:
            score_bias = self._ragged_bias(cache.attention_mask(T).to(idx.device), positions, x.dtype)
        else:
            score_bias = (alibi_bias(c.n_head, T, Tk=start + T, device=idx.device).to(x.dtype)
                          if c.pos_encoding == "alibi" else None)
        rope_positions = positions if cache is not None and c.pos_encoding == "rope" else None
        for i, block in enumerate(self.blocks):
            x = block(x, score_bias, rope_positions, None if cache is None else cache.layer(i),
                      is_causal=not ragged)
        return self.ln_f(x)

    def _ragged_bias(self, allowed: torch.Tensor, positions: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """A ragged cache's mask (B, 1, T, Tk) as the attention takes it: the boolean mask itself,
        or, with ALiBi, -m_h |i - j| from each row's own positions, -inf where a key is hidden."""
        if self.config.pos_encoding != "alibi":
            return allowed
        keys = torch.arange(allowed.shape[-1], device=allowed.device)
        distance = (positions[:, None, :, None] - keys).abs().to(torch.float32)   # (B, 1, T, Tk)
        slopes = alibi_slopes(self.config.n_head).to(allowed.device)[:, None, None]
        return (0.0 - slopes * distance).masked_fill(~allowed, float("-inf")).to(dtype)

    def _check_cache(self, cache: DecoderCache, idx: torch.Tensor) -> int:
        """The number of tokens the cache holds, after checking that it was made for this model."""
        if type(cache) not in _DECODER_CACHE_TYPES:     # a Protocol isinstance costs ~20 us:
            if not isinstance(cache, DecoderCache):     # check each cache type once, not per step
                raise TypeError(f"cache must be a KV cache (course_lib.model.DecoderCache: "
                                f"course_lib.kv_cache.KVCache is one), got {type(cache).__name__}; "
                                "create one with KVCache.for_model(model, batch_size).")
            _DECODER_CACHE_TYPES.add(type(cache))
            if isinstance(cache, RaggedDecoderCache):
                _RAGGED_CACHE_TYPES.add(type(cache))
        c = self.config
        got = (cache.n_layer, cache.n_kv_head, cache.head_size)
        if got != (c.n_layer, c.n_kv_head, c.head_size):
            raise ValueError(f"this cache has (n_layer, n_kv_head, head_size) = {got}, the model needs "
                             f"{(c.n_layer, c.n_kv_head, c.head_size)}: create it with "
                             "KVCache.for_model(model, batch_size).")
        if isinstance(idx, torch.Tensor) and idx.dim() == 2 and idx.shape[0] != cache.batch_size:
            raise ValueError(f"idx has batch size {idx.shape[0]}, the cache {cache.batch_size}: one "
                             "cache row per sequence (cache.reorder(indices) selects or repeats rows).")
        if len(set(cache.layer_lengths)) > 1:
            raise ValueError(f"the cache's layers hold different numbers of tokens {list(cache.layer_lengths)} "
                             "(an earlier forward failed half-way): call cache.reset() and start again.")
        return cache.length

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None, *,
                cache=None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(logits, loss). cache: a `DecoderCache` (course_lib.kv_cache.KVCache); idx then holds only the tokens
        that follow the cached ones, and the logits are theirs (B, T_new, vocab_size)."""
        logits = self.lm_head(self.hidden_states(idx, cache=cache))
        if targets is None:
            return logits, None
        if targets.shape != idx.shape:
            raise ValueError(f"targets must have the shape of idx {tuple(idx.shape)} (the next token "
                             f"at every position), got {tuple(targets.shape)}.")
        loss = F.cross_entropy(_at_least_float32(logits).flatten(0, 1), targets.flatten(), ignore_index=-100)
        return logits, loss

    @classmethod
    def from_hf_gpt2(cls, hf_model) -> GPT:
        """A course GPT with the weights of a `transformers` GPT2LMHeadModel (or GPT2Model).

        GPT-2 stores its linear layers as Conv1D, weight (in, out), the transpose of
        nn.Linear's, and fuses W_Q, W_K, W_V into one c_attn of width 3 D: split and transpose.
        """
        hf = hf_model.config
        if getattr(hf, "model_type", None) != "gpt2":
            raise TypeError(f"from_hf_gpt2 needs a transformers GPT-2 model, got model_type="
                            f"{getattr(hf, 'model_type', None)!r}.")
        unsupported = [name for name, default in (("scale_attn_weights", True), ("scale_attn_by_inverse_layer_idx", False),
                                                  ("reorder_and_upcast_attn", False), ("add_cross_attention", False))
                       if getattr(hf, name, default) != default]
        if unsupported or hf.activation_function not in _HF_ACTIVATIONS:
            raise ValueError(f"this GPT-2 variant is not supported (settings {unsupported}, activation "
                             f"{hf.activation_function!r}); the course GPT is the standard GPT-2.")
        config = GPTConfig(vocab_size=hf.vocab_size, block_size=hf.n_positions, n_layer=hf.n_layer,
                           n_head=hf.n_head, n_embd=hf.n_embd, d_ff=hf.n_inner, bias=True,
                           activation=_HF_ACTIVATIONS[hf.activation_function],
                           tie_weights=getattr(hf, "tie_word_embeddings", True),
                           layer_norm_eps=hf.layer_norm_epsilon)
        body = hf_model.transformer if hasattr(hf_model, "transformer") else hf_model
        src = body.state_dict()
        D = config.n_embd
        ours = {"wte.weight": src["wte.weight"], "wpe.weight": src["wpe.weight"],
                "ln_f.weight": src["ln_f.weight"], "ln_f.bias": src["ln_f.bias"]}
        for i in range(config.n_layer):
            h, b = f"h.{i}.", f"blocks.{i}."
            for ln in ("ln_1", "ln_2"):
                ours[f"{b}{ln}.weight"], ours[f"{b}{ln}.bias"] = src[f"{h}{ln}.weight"], src[f"{h}{ln}.bias"]
            qkv_w, qkv_b = src[f"{h}attn.c_attn.weight"], src[f"{h}attn.c_attn.bias"]
            for j, name in enumerate(("q_proj", "k_proj", "v_proj")):
                ours[f"{b}attn.{name}.weight"] = qkv_w[:, j * D:(j + 1) * D].t()
                ours[f"{b}attn.{name}.bias"] = qkv_b[j * D:(j + 1) * D]
            for theirs, mine in (("attn.c_proj", "attn.out_proj"), ("mlp.c_fc", "mlp.fc"), ("mlp.c_proj", "mlp.proj")):
                ours[f"{b}{mine}.weight"] = src[f"{h}{theirs}.weight"].t()
                ours[f"{b}{mine}.bias"] = src[f"{h}{theirs}.bias"]
        head = getattr(hf_model, "lm_head", None)
        ours["lm_head.weight"] = head.weight if head is not None else src["wte.weight"]
        model = cls(config)
        model.load_state_dict({k: v.detach().clone() for k, v in ours.items()})
        dtype = next(hf_model.parameters()).dtype
        return model.to(dtype=dtype, device=src["wte.weight"].device)

    def extra_repr(self) -> str:
        c = self.config
        return (f"n_layer={c.n_layer}, n_head={c.n_head}, n_kv_head={c.n_kv_head}, n_embd={c.n_embd}, "
                f"pos_encoding={c.pos_encoding!r}, params={self.num_params():,}")


class GPTClassifier(nn.Module):
    """The GPT backbone plus a classification head: pool the final token vectors, then a Linear
    layer to n_classes scores (softmax them for probabilities).

    forward(idx (B, T), labels=None, *, lengths=None) -> (logits (B, n_classes), loss).
    Sequences are right-padded; lengths (B,) gives each one's real length (default T).
    pooling "last" reads the vector of each sequence's last real token, the only one that has
    seen the whole text under the causal mask; "mean" averages the real tokens' vectors.
    The loss is the mean cross-entropy against labels (B,).
    """

    def __init__(self, config: GPTConfig, n_classes: int, pooling: str = "last") -> None:
        super().__init__()
        check_int("n_classes", n_classes, 2, "an integer >= 2 (the number of classes)")
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, got {pooling!r}.")
        self.n_classes, self.pooling = n_classes, pooling
        self.backbone = GPT(config)
        self.head = nn.Linear(config.n_embd, n_classes)
        nn.init.normal_(self.head.weight, std=0.02)
        nn.init.zeros_(self.head.bias)

    def pool(self, h: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        """(B, T, D) -> (B, D): the last real token's vector, or the mean of the real ones."""
        B, T, _ = h.shape
        if lengths is None:
            lengths = torch.full((B,), T, device=h.device)
        if not isinstance(lengths, torch.Tensor) or lengths.shape != (B,):
            raise ValueError(f"lengths must be a tensor of shape (B,) = ({B},), one length per sequence.")
        if lengths.dtype.is_floating_point or lengths.dtype == torch.bool or lengths.is_complex():
            raise TypeError(f"lengths must be integers (the number of real tokens), got {lengths.dtype}; "
                            "convert them with lengths.long().")
        if int(lengths.min()) < 1 or int(lengths.max()) > T:
            raise ValueError(f"lengths must lie in 1..T = 1..{T}, got {lengths.tolist()}.")
        lengths = lengths.to(h.device)
        if self.pooling == "last":
            return h[torch.arange(B, device=h.device), lengths - 1]
        real = (torch.arange(T, device=h.device)[None, :] < lengths[:, None]).to(h.dtype)   # (B, T)
        return (h * real[..., None]).sum(1) / lengths[:, None].to(h.dtype)

    def forward(self, idx: torch.Tensor, labels: torch.Tensor | None = None, *,
                lengths: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        logits = self.head(self.pool(self.backbone.hidden_states(idx), lengths))
        if labels is None:
            return logits, None
        return logits, F.cross_entropy(_at_least_float32(logits), labels)



# --- the shipped checkpoint (course_lib/pretrained: NAME.pt and NAME.json) ------------------

PRETRAINED_DIR = Path(__file__).resolve().parent / "pretrained"
PRETRAINED_FORMAT = "course_lib.pretrained/1"


class Pretrained(NamedTuple):
    model: GPT
    vocab: CharVocab
    info: dict


def available_pretrained() -> list[str]:
    return sorted(p.stem for p in PRETRAINED_DIR.glob("*.json"))


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _load_pretrained_file(path: Path, info: dict | None = None, device="cpu") -> Pretrained:
    payload = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(payload, dict) or payload.get("format") != PRETRAINED_FORMAT:
        raise ValueError(f"{path} is not a course_lib pretrained model (format {PRETRAINED_FORMAT!r}).")
    config = GPTConfig(**payload["model_config"])
    model = GPT(config)
    state = {k: v.float() for k, v in payload["state_dict"].items()}
    if config.tie_weights:
        state["lm_head.weight"] = state["wte.weight"]
    model.load_state_dict(state)
    model.to(device).eval()
    return Pretrained(model, CharVocab("".join(payload["vocab"])), info or {})


def load_pretrained(name: str = "shakespeare_char", device: str | torch.device = "cpu") -> Pretrained:
    """(model, vocab, info): the character-level GPT that ships with the package, in eval mode,
    float32, on `device` (trained by course_lib.training, lesson 07).

    info holds the validation loss, the training command and the sha256, which is checked.
    """
    names = available_pretrained()
    if name not in names:
        raise ValueError(f"no pretrained model {name!r}; the package ships {names}.")
    info = json.loads((PRETRAINED_DIR / f"{name}.json").read_text())
    path = PRETRAINED_DIR / info["file"]
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing; reinstall the package (or `git checkout "
                                f"course_lib/pretrained` in a clone).")
    digest = _sha256(path)
    if digest != info["sha256"]:
        raise ValueError(f"{path} has sha256 {digest[:12]}..., but {name}.json records "
                         f"{info['sha256'][:12]}...: the file is damaged or was replaced; "
                         "restore it (git checkout, or reinstall).")
    return _load_pretrained_file(path, info, device)
