"""Generating text with a decoder (lesson 08; lesson 09 adds the search and filtering strategies).

Autoregressive generation repeats one step: run the model, take the logits of the last position,
choose the next token, append it, and feed the longer sequence back in.

    uncached   step t runs the whole prefix x_1 ... x_t (t tokens: K, V of x_1 recomputed t times)
    cached     a prefill runs the prompt once and fills a `KVCache`; every later step runs only the
               newest token at its true position, attending to the cached keys and values

Both give the same logits (up to float rounding), hence the same greedy tokens. The uncached
model with learned positions has no vector past block_size, so the context is cropped to its
last block_size tokens (nanoGPT's rule); the cached path then starts again from that window,
which gives the same tokens (once a sliding window slides, every position changes, and a
cache of old positions is of no use).
"""

from __future__ import annotations

import contextlib

import torch

from course_lib.attention._checks import check_int
from course_lib.kv_cache import KVCache

__all__ = ["STRATEGIES", "generate", "next_token"]

STRATEGIES = ("greedy", "sample")


def next_token(logits: torch.Tensor, strategy: str = "greedy", *, temperature: float = 1.0,
               generator: torch.Generator | None = None) -> torch.Tensor:
    """The next token (B, 1) from the last position's logits (B, V).

    greedy: argmax (the first index among equal maxima, like torch.argmax and `transformers`).
    sample: a draw from softmax(logits / temperature), from `generator` when one is given.
    """
    if strategy == "greedy":
        return logits.argmax(dim=-1, keepdim=True)
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    return torch.multinomial(probs, 1, generator=generator)


def _check_arguments(model, idx, max_new_tokens, strategy, temperature, generator) -> None:
    if not isinstance(model, torch.nn.Module) or not hasattr(model, "config"):
        raise TypeError(f"model must be a course_lib.model.GPT, got {type(model).__name__}.")
    if not isinstance(idx, torch.Tensor) or idx.dim() != 2:
        shape = tuple(idx.shape) if isinstance(idx, torch.Tensor) else type(idx).__name__
        hint = " (add a batch dim with idx[None])" if isinstance(idx, torch.Tensor) and idx.dim() == 1 else ""
        raise ValueError(f"idx must be a (B, T) tensor of token ids, got {shape}{hint}.")
    if idx.shape[1] == 0:
        raise ValueError("the prompt is empty (T = 0): give at least one token, such as a "
                         "newline or a <bos> token.")
    check_int("max_new_tokens", max_new_tokens, 0)
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}.")
    if not (isinstance(temperature, (int, float)) and not isinstance(temperature, bool)) or not temperature > 0:
        raise ValueError(f"temperature must be a number > 0, got {temperature!r}; greedy decoding "
                         "is the limit T -> 0: use strategy='greedy'.")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}.")


@contextlib.contextmanager
def _eval_mode(model: torch.nn.Module):
    """Dropout off while generating (both paths must see the same network); afterwards every
    submodule gets its own mode back (model.train(True) would also switch on a frozen part)."""
    modes = [(module, module.training) for module in model.modules()]
    model.eval()
    try:
        with torch.inference_mode():
            yield
    finally:
        for module, training in modes:
            module.training = training


def generate(model, idx: torch.Tensor, max_new_tokens: int, *, strategy: str = "greedy",
             temperature: float = 1.0, use_cache: bool = True,
             generator: torch.Generator | None = None) -> torch.Tensor:
    """idx (B, T) followed by max_new_tokens generated tokens: (B, T + max_new_tokens).

    strategy "greedy" takes the most probable token; "sample" draws from softmax(logits / T)
    (`generator` makes the draws reproducible).
    use_cache=True runs the prompt once into a `KVCache`, then one token per step;
    use_cache=False runs the whole (cropped) context at every step. The model runs in eval mode
    (dropout off) and gets its mode back afterwards.
    """
    _check_arguments(model, idx, max_new_tokens, strategy, temperature, generator)
    config = model.config
    window = config.block_size if config.pos_encoding == "learned" else None
    B, T = idx.shape
    out = idx.new_empty(B, T + max_new_tokens)
    out[:, :T] = idx

    def choose(logits: torch.Tensor) -> torch.Tensor:
        return next_token(logits, strategy, temperature=temperature, generator=generator)

    with _eval_mode(model):
        run = _generate_cached if use_cache else _generate_uncached
        run(model, out, T, max_new_tokens, window, choose)
    return out


def _generate_uncached(model, out: torch.Tensor, T: int, n: int, window: int | None, choose) -> None:
    for t in range(T, T + n):
        context = out[:, :t] if window is None else out[:, max(0, t - window):t]
        logits, _ = model(context)
        out[:, t:t + 1] = choose(logits[:, -1])


def _generate_cached(model, out: torch.Tensor, T: int, n: int, window: int | None, choose) -> None:
    if n == 0:
        return
    max_len = T + n if window is None else min(T + n, window)
    cache = KVCache.for_model(model, out.shape[0], max_len)
    feed = out[:, :T] if window is None else out[:, max(0, T - window):T]    # the prefill
    for t in range(T, T + n):
        if cache.length + feed.shape[1] > max_len:      # learned positions ran out: start again
            cache.reset()
            feed = out[:, t - window:t]
        logits, _ = model(feed, cache=cache)
        out[:, t:t + 1] = choose(logits[:, -1])
        feed = out[:, t:t + 1]
