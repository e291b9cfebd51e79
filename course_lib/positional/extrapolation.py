"""Train short, test long: tiny character models that differ only in how they encode position.

`PositionalLM` is a small pre-LN decoder (n_layer blocks of causal self-attention and a GELU
MLP, no biases) whose position scheme is one argument:

    "learned"     a trained table of block_size rows added to the input (GPT-2); it has no row
                  for position block_size, so it cannot run on longer inputs
    "sinusoidal"  the fixed table of lesson 02 added to the input (any length)
    "rope"        queries and keys rotated in every layer (`apply_rope`)
    "alibi"       fixed per-head penalties -m_h |i - j| added to the scores (`alibi_bias`)
    "t5"          learned per-bucket scalars added to the scores, shared by all layers
                  (`T5RelativeBias`, causal buckets)
    "none"        no position information beyond the causal mask

`run_experiment` trains one model per scheme with the same seed, batches and budget at one
context length, then measures the validation loss at longer ones. The lesson runs a small
version live; `benchmarks/positional_extrapolation.py` runs the full one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from tqdm.auto import tqdm

from course_lib.attention import MultiHeadAttention, split_heads
from course_lib.data import get_batch
from course_lib.embeddings import TokenAndPositionEmbedding, sinusoidal_encoding
from course_lib.positional.alibi import alibi_bias
from course_lib.positional.rope import RotaryMultiHeadAttention
from course_lib.positional.t5 import T5RelativeBias

__all__ = ["SCHEMES", "LMConfig", "PositionalLM", "evaluate_loss", "run_experiment", "score_terms",
           "term_statistics", "train_lm"]

SCHEMES = ("learned", "sinusoidal", "rope", "alibi", "t5", "none")


@dataclass
class LMConfig:
    vocab_size: int
    pos_encoding: str = "rope"
    block_size: int = 64          # the training context (the learned table's length)
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 64

    def __post_init__(self) -> None:
        if self.pos_encoding not in SCHEMES:
            raise ValueError(f"pos_encoding must be one of {SCHEMES}, got {self.pos_encoding!r}.")


class Block(nn.Module):
    """x + attn(LN(x)), then x + MLP(LN(x)); attention is rotary when the scheme is RoPE."""

    def __init__(self, config: LMConfig) -> None:
        super().__init__()
        d = config.n_embd
        attention = RotaryMultiHeadAttention if config.pos_encoding == "rope" else MultiHeadAttention
        self.ln_attn = nn.LayerNorm(d, bias=False)
        self.attn = attention(d, config.n_head, bias=False)
        self.ln_mlp = nn.LayerNorm(d, bias=False)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d, bias=False), nn.GELU(),
                                 nn.Linear(4 * d, d, bias=False))

    def forward(self, x: torch.Tensor, score_bias: torch.Tensor | None) -> torch.Tensor:
        a, _ = self.attn(self.ln_attn(x), mask=score_bias, is_causal=True)
        x = x + a
        return x + self.mlp(self.ln_mlp(x))


class PositionalLM(nn.Module):
    """A character language model; forward(ids (B, T)) -> logits (B, T, vocab_size)."""

    def __init__(self, config: LMConfig) -> None:
        super().__init__()
        self.config = config
        scheme = config.pos_encoding
        if scheme == "learned":
            self.embed = TokenAndPositionEmbedding(config.vocab_size, config.n_embd, config.block_size)
        else:
            self.embed = nn.Embedding(config.vocab_size, config.n_embd)
        self.t5_bias = T5RelativeBias(config.n_head, bidirectional=False) if scheme == "t5" else None
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_out = nn.LayerNorm(config.n_embd, bias=False)
        self.head = nn.Linear(config.n_embd, config.vocab_size, bias=False)

    def token_and_position(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The token vectors n and the added position vectors p (None for schemes that add none)."""
        scheme = self.config.pos_encoding
        if scheme == "learned":   # position_vectors refuses lengths beyond its table
            return self.embed.token_emb(ids), self.embed.position_vectors(ids.shape[-1])
        n = self.embed(ids)
        if scheme == "sinusoidal":
            positions = torch.arange(ids.shape[-1], device=ids.device)
            return n, sinusoidal_encoding(positions, self.config.n_embd, dtype=n.dtype)
        return n, None

    def score_bias(self, T: int, device) -> torch.Tensor | None:
        if self.config.pos_encoding == "alibi":
            return alibi_bias(self.config.n_head, T, device=device)
        if self.config.pos_encoding == "t5":
            return self.t5_bias(T)
        return None

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        n, p = self.token_and_position(ids)
        x = n if p is None else n + p
        bias = self.score_bias(ids.shape[-1], ids.device)
        for block in self.blocks:
            x = block(x, bias)
        return self.head(self.ln_out(x))


def train_lm(model: PositionalLM, train_data: torch.Tensor, *, steps: int, batch_size: int,
             lr: float = 3e-3, seed: int = 0, desc: str | None = None) -> list[float]:
    """AdamW with a cosine decay on random windows of block_size tokens; returns the losses.

    The windows depend only on `seed`, so every scheme sees the same batches.
    """
    block_size = model.config.block_size
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / steps)))
    batches = torch.Generator().manual_seed(seed)
    losses = []
    model.train()
    for _ in tqdm(range(steps), desc=desc or model.config.pos_encoding, mininterval=1.0,
                  disable=desc == ""):
        xb, yb = get_batch(train_data, batch_size, block_size, generator=batches)
        loss = F.cross_entropy(model(xb).flatten(0, 1), yb.flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
    return losses


@torch.no_grad()
def evaluate_loss(model: PositionalLM, val_data: torch.Tensor, T: int, *,
                  n_tokens: int = 16384) -> float | None:
    """Mean next-token loss on the first n_tokens of val_data, cut into windows of T tokens, or
    None when the model cannot read T tokens (learned positions beyond their table).

    Every length reads the same characters (n_tokens a multiple of the lengths compared); only
    how much context each position gets differs.
    """
    if model.config.pos_encoding == "learned" and T > model.config.block_size:
        return None
    n_seqs = n_tokens // T
    if n_seqs < 1 or n_seqs * T + 1 > len(val_data):
        raise ValueError(f"n_tokens={n_tokens} must be at least T={T} and fit in the "
                         f"{len(val_data):,} validation tokens.")
    model.eval()
    x = val_data[: n_seqs * T].view(n_seqs, T)
    y = val_data[1: n_seqs * T + 1].view(n_seqs, T)
    total = 0.0
    for start in range(0, n_seqs, 16):
        logits = model(x[start:start + 16])
        total += F.cross_entropy(logits.flatten(0, 1), y[start:start + 16].flatten(),
                                 reduction="sum").item()
    return total / (n_seqs * T)


def run_experiment(train_data: torch.Tensor, val_data: torch.Tensor, vocab_size: int, *,
                   schemes=SCHEMES[:5], train_len: int = 64, eval_lens=(64, 128, 256, 512),
                   steps: int = 300, batch_size: int = 16, seed: int = 0, lr: float = 3e-3,
                   n_layer: int = 2, n_head: int = 4, n_embd: int = 64,
                   n_eval_tokens: int = 16384) -> tuple[dict, dict]:
    """Train one model per scheme (same seed, batches, budget); returns ({scheme: {T: loss or
    None}}, {scheme: model})."""
    table, models = {}, {}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # matrices this small train faster on one thread than on several
    try:
        for scheme in schemes:
            torch.manual_seed(seed)
            config = LMConfig(vocab_size, scheme, train_len, n_layer, n_head, n_embd)
            model = PositionalLM(config)
            train_lm(model, train_data, steps=steps, batch_size=batch_size, lr=lr, seed=seed)
            table[scheme] = {T: evaluate_loss(model, val_data, T, n_tokens=n_eval_tokens) for T in eval_lens}
            models[scheme] = model
    finally:
        torch.set_num_threads(threads)
    return table, models


@torch.no_grad()
def score_terms(model: PositionalLM, ids: torch.Tensor, layer: int = 0) -> dict[str, torch.Tensor]:
    """The four terms of the first attention's scores for a model that adds positions to its input.

    With x = n + p and a LayerNorm without bias, LN(x) = gamma (n - mean n) / sigma +
    gamma (p - mean p) / sigma exactly (sigma is the spread of x), so

        q_i . k_j / sqrt(d_h) = word-word + word-position + position-word + position-position

    Returns those four (B, H, T, T) tensors; their sum is the layer's scores before the mask.
    Only layer 0 sees n and p separately.
    """
    if layer != 0:
        raise ValueError("only the first layer's input is a sum of token and position vectors; use layer=0.")
    n, p = model.token_and_position(ids)
    if p is None:
        raise ValueError(f"a {model.config.pos_encoding!r} model adds no position vector to its input, "
                         "so its scores have no four-term split; use a 'learned' or 'sinusoidal' model.")
    block = model.blocks[layer]
    x = n + p
    sigma = (x.var(-1, unbiased=False, keepdim=True) + block.ln_attn.eps).sqrt()
    gamma = block.ln_attn.weight
    parts = {"word": gamma * (n - n.mean(-1, keepdim=True)) / sigma,
             "position": gamma * (p - p.mean(-1, keepdim=True)) / sigma}
    attn = block.attn
    q = {name: split_heads(attn.q_proj(z), attn.n_head) for name, z in parts.items()}
    k = {name: split_heads(attn.k_proj(z), attn.n_kv_head) for name, z in parts.items()}
    scale = 1 / math.sqrt(attn.head_size)
    return {f"{a}-{b}": q[a] @ k[b].transpose(-2, -1) * scale for a in parts for b in parts}


def term_statistics(terms: dict[str, torch.Tensor]) -> dict[str, tuple[float, float, float]]:
    """For each term over the causal pairs: (mean |term|, spread over keys, weights moved).

    spread over keys: the standard deviation over keys j <= i of each query (what the softmax
    sees; a constant along a row cancels), averaged; weights moved: the total variation distance
    between each query's attention weights with and without the term, averaged.
    """
    scores = sum(terms.values())
    T = scores.shape[-1]
    past = torch.ones(T, T, dtype=torch.bool, device=scores.device).tril()
    blocked = torch.zeros(T, T, device=scores.device).masked_fill(~past, float("-inf"))
    keys_seen = past.sum(-1)
    weights = torch.softmax(scores + blocked, dim=-1)
    stats = {}
    for name, term in terms.items():
        mean = (term * past).sum(-1) / keys_seen
        spread = ((((term - mean[..., None]) * past) ** 2).sum(-1) / keys_seen).sqrt().mean()
        without = torch.softmax(scores - term + blocked, dim=-1)
        moved = 0.5 * (weights - without).abs().sum(-1).mean()
        stats[name] = (term[..., past].abs().mean().item(), spread.item(), moved.item())
    return stats
