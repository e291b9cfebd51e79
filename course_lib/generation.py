"""Generating text with a decoder: the loop (lesson 08) and the decoding strategies (lesson 09).

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

How the next token is chosen (lesson 09):

    greedy       argmax_v p(v | x)                          deterministic, one decoder call a step
    beam         keep the b prefixes with the highest sum of log-probabilities; b = 1 is greedy
    exhaustive   every one of |V|^L continuations, scored; only for tiny |V| and L
    sample       draw v ~ softmax(filter(logits / T)), where filter is top-k and/or top-p

Temperature T divides the logits (T -> 0 tends to greedy, T = 1 leaves them, T > 1 flattens).
`top_k_filter` keeps the k largest logits (ties with the k-th kept), `top_p_filter` the
smallest set of most probable tokens whose probability reaches p (at least one token); both set
the rest to -inf. The order (temperature, then top-k, then top-p) and both rules are those of
`transformers`' TemperatureLogitsWarper, TopKLogitsWarper and TopPLogitsWarper.
"""

from __future__ import annotations

import contextlib
import inspect

import torch

from course_lib.attention._checks import check_int
from course_lib.kv_cache import KVCache

__all__ = [
    "EXHAUSTIVE_LIMIT",
    "STRATEGIES",
    "beam_search",
    "check_sampling",
    "exhaustive_search",
    "filter_logits",
    "generate",
    "greedy_search",
    "next_token",
    "sequence_log_prob",
    "top_k_filter",
    "top_p_filter",
]

STRATEGIES = ("greedy", "sample", "beam")
EXHAUSTIVE_LIMIT = 1_000_000      # the most sequences exhaustive_search scores by default


# ------------------------------------------------------------------------------------------
# filters
# ------------------------------------------------------------------------------------------

def _check_logits(logits: torch.Tensor) -> None:
    if not isinstance(logits, torch.Tensor) or not logits.is_floating_point() or logits.dim() == 0:
        got = f"{logits.dtype} of shape {tuple(logits.shape)}" if isinstance(logits, torch.Tensor) \
            else type(logits).__name__
        raise ValueError(f"logits must be a floating tensor (..., vocab_size), got {got}.")


def top_k_filter(logits: torch.Tensor, k: int) -> torch.Tensor:
    """logits (..., V) with every entry below the k-th largest set to -inf (ties with it kept).

    k >= V keeps everything. Equal to `transformers`' TopKLogitsWarper(k).
    """
    _check_logits(logits)
    check_int("k", k, 1, "an integer >= 1 (the number of most probable tokens to keep)")
    k = min(k, logits.shape[-1])
    kth = torch.topk(logits, k, dim=-1).values[..., -1:]
    return logits.masked_fill(logits < kth, float("-inf"))


def top_p_filter(logits: torch.Tensor, p: float) -> torch.Tensor:
    """logits (..., V) keeping the smallest set of most probable tokens whose probability sum is
    >= p (and always the most probable one); the rest become -inf.

    The rule: sort ascending, drop a token while the probability of it and everything less probable
    is <= 1 - p. Equal to `transformers`' TopPLogitsWarper(p), ties included. p = 1 keeps every
    token. (The course notes keep tokens *while* the cumulative sum is below p, one fewer in their
    example: lesson 09 compares the two.)
    """
    _check_logits(logits)
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 < p <= 1:
        raise ValueError(f"p must be a number in (0, 1], got {p!r}: the share of probability to "
                         "keep (p = 1 keeps every token).")
    sorted_logits, order = torch.sort(logits, descending=False)
    tail = sorted_logits.softmax(dim=-1).cumsum(dim=-1) <= 1 - p
    tail[..., -1:] = False                      # the most probable token always stays
    remove = tail.scatter(-1, order, tail)
    return logits.masked_fill(remove, float("-inf"))


def _check_temperature(temperature) -> None:
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature > 0:
        raise ValueError(f"temperature must be a number > 0, got {temperature!r}; greedy decoding "
                         "is the limit T -> 0: use strategy='greedy'.")


def check_sampling(strategy: str, temperature: float = 1.0, top_k: int | None = None,
                   top_p: float | None = None, *, strategies: tuple[str, ...] = ("greedy", "sample")) -> None:
    """The decoding arguments of `generate` (and of lesson 12's engine and speculative decoding),
    checked before any token: a strategy of `strategies`, temperature > 0, top_k >= 1, top_p in
    (0, 1], and no temperature, top_k or top_p with greedy decoding (they would do nothing)."""
    if strategy not in strategies:
        raise ValueError(f"strategy must be one of {strategies}, got {strategy!r}.")
    _check_temperature(temperature)
    if top_k is not None:
        check_int("top_k", top_k, 1, "None or an integer >= 1 (the number of tokens to keep)")
    if top_p is not None and (isinstance(top_p, bool) or not isinstance(top_p, (int, float))
                              or not 0 < top_p <= 1):
        raise ValueError(f"top_p must be None or a number in (0, 1], got {top_p!r}.")
    if strategy == "greedy" and (top_k is not None or top_p is not None or temperature != 1):
        raise ValueError("temperature, top_k and top_p are for strategy='sample' (they shape the "
                         "distribution it draws from); greedy takes the argmax, which they do not change.")


def filter_logits(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
                  top_p: float | None = None) -> torch.Tensor:
    """logits / temperature, then top_k_filter, then top_p_filter (each optional)."""
    _check_temperature(temperature)
    logits = logits / temperature if temperature != 1 else logits
    if top_k is not None:
        logits = top_k_filter(logits, top_k)
    if top_p is not None:
        logits = top_p_filter(logits, top_p)
    return logits


def next_token(logits: torch.Tensor, strategy: str = "greedy", *, temperature: float = 1.0,
               top_k: int | None = None, top_p: float | None = None,
               generator: torch.Generator | None = None) -> torch.Tensor:
    """The next token (B, 1) from the last position's logits (B, V).

    greedy: argmax (the first index among equal maxima, like torch.argmax and `transformers`).
    sample: a draw from softmax(filter_logits(logits, temperature, top_k, top_p)), from
    `generator` when one is given, else from torch's global generator.
    """
    if strategy == "greedy":
        return logits.argmax(dim=-1, keepdim=True)
    probs = torch.softmax(filter_logits(logits.float(), temperature, top_k, top_p), dim=-1)
    return torch.multinomial(probs, 1, generator=generator)


# ------------------------------------------------------------------------------------------
# checks shared by the searches
# ------------------------------------------------------------------------------------------

def _check_model_and_prompt(model, idx) -> None:
    if not isinstance(model, torch.nn.Module) or not hasattr(model, "config"):
        raise TypeError(f"model must be a course_lib.model.GPT, got {type(model).__name__}.")
    if not isinstance(idx, torch.Tensor) or idx.dim() != 2:
        shape = tuple(idx.shape) if isinstance(idx, torch.Tensor) else type(idx).__name__
        hint = " (add a batch dim with idx[None])" if isinstance(idx, torch.Tensor) and idx.dim() == 1 else ""
        raise ValueError(f"idx must be a (B, T) tensor of token ids, got {shape}{hint}.")
    if idx.shape[1] == 0:
        raise ValueError("the prompt is empty (T = 0): give at least one token, such as a "
                         "newline or a <bos> token.")


def _check_eos(eos_id, vocab_size: int) -> None:
    if eos_id is not None:
        check_int("eos_id", eos_id, 0, f"None or a token id in 0..{vocab_size - 1}")
        if eos_id >= vocab_size:
            raise ValueError(f"eos_id must be a token id in 0..{vocab_size - 1}, got {eos_id}.")


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


def _window(model) -> int | None:
    """The most tokens the model can see: block_size with learned positions, else no limit."""
    return model.config.block_size if model.config.pos_encoding == "learned" else None


def _takes_cache(model) -> bool:
    """Whether model.forward accepts a KVCache (GPT does; a `course_lib.toy_lm.TableLM` does not:
    use_cache then falls back to running the whole context, with the same tokens)."""
    return "cache" in inspect.signature(model.forward).parameters


# ------------------------------------------------------------------------------------------
# greedy and sampling: one token per sequence and step
# ------------------------------------------------------------------------------------------

def generate(model, idx: torch.Tensor, max_new_tokens: int, *, strategy: str = "greedy",
             temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
             beam_width: int | None = None, use_cache: bool = True,
             generator: torch.Generator | None = None, eos_id: int | None = None) -> torch.Tensor:
    """idx (B, T) followed by up to max_new_tokens generated tokens: (B, T + n).

    strategy "greedy" takes the most probable token; "sample" draws from
    softmax(filter_logits(logits, temperature, top_k, top_p)) (`generator` makes the draws
    reproducible); "beam" is `beam_search` with `beam_width`.
    use_cache=True runs the prompt once into a `KVCache`, then one token per step;
    use_cache=False runs the whole (cropped) context at every step. With eos_id, a sequence that
    has produced it is finished: it gets eos_id at every later step, and generation stops early
    once every sequence is finished (n < max_new_tokens). The model runs in eval mode (dropout
    off) and gets its mode back afterwards.
    """
    _check_model_and_prompt(model, idx)
    check_int("max_new_tokens", max_new_tokens, 0)
    check_sampling(strategy, temperature, top_k, top_p, strategies=STRATEGIES)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}.")
    _check_eos(eos_id, model.config.vocab_size)
    if strategy == "beam":
        if beam_width is None:
            raise ValueError("strategy='beam' needs beam_width (the number of beams, >= 1).")
        return beam_search(model, idx, max_new_tokens, beam_width, use_cache=use_cache, eos_id=eos_id)
    if beam_width is not None:
        raise ValueError(f"beam_width is for strategy='beam', not {strategy!r}.")

    def choose(logits: torch.Tensor) -> torch.Tensor:
        return next_token(logits, strategy, temperature=temperature, top_k=top_k, top_p=top_p,
                          generator=generator)

    with _eval_mode(model):
        return _one_token_per_step(model, idx, max_new_tokens, choose, use_cache, eos_id)


def greedy_search(model, idx: torch.Tensor, max_new_tokens: int, *, use_cache: bool = True,
                  eos_id: int | None = None) -> torch.Tensor:
    """The most probable next token at every step: generate(..., strategy='greedy')."""
    return generate(model, idx, max_new_tokens, strategy="greedy", use_cache=use_cache, eos_id=eos_id)


def _one_token_per_step(model, idx: torch.Tensor, n: int, choose, use_cache: bool,
                        eos_id: int | None) -> torch.Tensor:
    B, T = idx.shape
    window = _window(model)
    out = idx.new_empty(B, T + n)
    out[:, :T] = idx
    finished = torch.zeros(B, dtype=torch.bool, device=idx.device)
    cached = use_cache and _takes_cache(model)
    steps = _cached_logits(model, out, T, n, window) if cached else _uncached_logits(model, out, T, n, window)
    t = T
    for t, logits in steps:
        token = choose(logits)
        if eos_id is not None:
            token = token.masked_fill(finished[:, None], eos_id)
            finished |= token[:, 0] == eos_id
        out[:, t:t + 1] = token
        if eos_id is not None and bool(finished.all()):
            return out[:, :t + 1]
    return out


def _uncached_logits(model, out: torch.Tensor, T: int, n: int, window: int | None):
    """(t, logits of the last position (B, V)) for t = T .. T+n-1, the whole context each time;
    out[:, t] must be written before the next item is asked for."""
    for t in range(T, T + n):
        context = out[:, :t] if window is None else out[:, max(0, t - window):t]
        yield t, model(context)[0][:, -1]


def _cached_logits(model, out: torch.Tensor, T: int, n: int, window: int | None):
    """As _uncached_logits, with a prefill into a KVCache and then one token per step."""
    if n == 0:
        return
    max_len = T + n if window is None else min(T + n, window)
    cache = KVCache.for_model(model, out.shape[0], max_len)
    feed = out[:, :T] if window is None else out[:, max(0, T - window):T]    # the prefill
    for t in range(T, T + n):
        if cache.length + feed.shape[1] > max_len:      # learned positions ran out: start again
            cache.reset()
            feed = out[:, t - window:t]
        yield t, model(feed, cache=cache)[0][:, -1]
        feed = out[:, t:t + 1]


# ------------------------------------------------------------------------------------------
# beam search
# ------------------------------------------------------------------------------------------

def beam_search(model, idx: torch.Tensor, max_new_tokens: int, beam_width: int, *,
                use_cache: bool = True, eos_id: int | None = None) -> torch.Tensor:
    """The beam with the highest sum of log-probabilities after max_new_tokens steps (no length
    penalty), for each prompt row: (B, T + max_new_tokens).

    Step 1 expands the prompt into its beam_width most probable tokens (one decoder call); every
    later step scores all beam_width x |V| one-token extensions of the live beams and keeps the
    beam_width best (torch.topk over the flattened scores: ties go to the lower beam, then the
    lower token id). With the cache, the rows of the `KVCache` follow their beams
    (`KVCache.reorder`). beam_width = 1 is greedy search. With eos_id a beam that produced it is
    finished: it keeps its score and is extended only by eos_id.

    Equal to `transformers`' GPT2LMHeadModel.generate(num_beams=beam_width, do_sample=False,
    length_penalty=0.0, early_stopping=True) when no eos stops a beam (tests/interop).
    """
    _check_model_and_prompt(model, idx)
    check_int("max_new_tokens", max_new_tokens, 0)
    check_int("beam_width", beam_width, 1, "an integer >= 1 (the number of beams; 1 is greedy)")
    _check_eos(eos_id, model.config.vocab_size)
    with _eval_mode(model):
        return torch.cat([_beam_search_one(model, row[None], max_new_tokens, beam_width,
                                           use_cache, eos_id) for row in idx])


def _beam_search_one(model, prompt: torch.Tensor, n: int, width: int, use_cache: bool,
                     eos_id: int | None) -> torch.Tensor:
    T, V = prompt.shape[1], model.config.vocab_size
    if n == 0:
        return prompt.clone()
    window = _window(model)
    beams = prompt.clone()                              # (live beams, T + t)
    scores = torch.zeros(1, device=prompt.device)       # their summed log-probabilities
    cache = None
    if use_cache and _takes_cache(model) and (window is None or T + n <= window):
        cache = KVCache.for_model(model, 1, T + n)
    for step in range(n):
        if cache is not None:
            feed = beams if step == 0 else beams[:, -1:]
            logits = model(feed, cache=cache)[0][:, -1]
        else:
            context = beams if window is None else beams[:, -window:]
            logits = model(context)[0][:, -1]
        log_probs = torch.log_softmax(logits.float(), dim=-1)          # (beams, V)
        if eos_id is not None and step > 0:
            done = beams[:, -1] == eos_id
            log_probs[done] = float("-inf")
            log_probs[done, eos_id] = 0.0
        candidates = (scores[:, None] + log_probs).flatten()           # beam-major, then token
        k = min(width, candidates.numel())
        scores, flat = torch.topk(candidates, k)
        parent, token = flat // V, flat % V
        beams = torch.cat([beams[parent], token[:, None]], dim=1)
        if cache is not None:
            cache.reorder(parent)
    return beams[:1]


# ------------------------------------------------------------------------------------------
# exhaustive search, and scoring a sequence
# ------------------------------------------------------------------------------------------

def exhaustive_search(model, idx: torch.Tensor, max_new_tokens: int, *,
                      limit: int = EXHAUSTIVE_LIMIT,
                      use_cache: bool = True) -> tuple[torch.Tensor, float, int]:
    """The most probable continuation of length max_new_tokens of a one-row prompt idx (1, T),
    found by scoring all |V|^L of them: (tokens (1, T + L), its log-probability, decoder calls).

    The continuations form a tree: step t runs the decoder once for each of the |V|^t prefixes
    (1, |V|, |V|^2, ... calls: the notes' 1, 3, 9 for |V| = 3), sum_{t<L} |V|^t calls in all. It
    refuses when |V|^L > limit. Ties go to the lexicographically smallest sequence. With the
    cache (the default, for a GPT whose context holds T + L tokens) the prompt runs once and each
    prefix's row of the cache is repeated for its |V| children: same calls, same result, each call
    one token long.
    """
    _check_model_and_prompt(model, idx)
    if idx.shape[0] != 1:
        raise ValueError(f"exhaustive_search takes one prompt (1, T), got batch {idx.shape[0]}: "
                         "search each row on its own.")
    L = check_int("max_new_tokens", max_new_tokens, 1)
    V = model.config.vocab_size
    if V ** L > limit:
        raise ValueError(
            f"exhaustive search over |V|^L = {V}^{L} = {V ** L:.3g} sequences is beyond "
            f"limit={limit:,}: it grows exponentially (the notes' 40,000^5 = 1.0e23). Use a "
            "smaller vocabulary or length, beam_search, or raise limit if you mean it.")
    T, window = idx.shape[1], _window(model)
    cache = None
    if use_cache and _takes_cache(model) and (window is None or T + L - 1 <= window):
        cache = KVCache.for_model(model, 1, T + L - 1)
    with _eval_mode(model):
        prefixes = idx.clone()                                          # (|V|^t, T + t)
        scores = torch.zeros(1, device=idx.device, dtype=torch.float64)
        calls = 0
        for step in range(L):
            if cache is not None:
                feed = prefixes if step == 0 else prefixes[:, -1:]
                logits = model(feed, cache=cache)[0][:, -1]
            else:
                logits = model(prefixes if window is None else prefixes[:, -window:])[0][:, -1]
            log_probs = torch.log_softmax(logits.double(), dim=-1)
            calls += prefixes.shape[0]
            scores = (scores[:, None] + log_probs).flatten()            # prefix-major
            parents = torch.arange(prefixes.shape[0], device=idx.device).repeat_interleave(V)
            tokens = torch.arange(V, device=idx.device).repeat(prefixes.shape[0])
            prefixes = torch.cat([prefixes[parents], tokens[:, None]], dim=1)
            if cache is not None and step < L - 1:
                cache.reorder(parents)
        best = int(torch.argmax(scores))
    return prefixes[best:best + 1], float(scores[best]), calls


def sequence_log_prob(model, tokens: torch.Tensor, prompt_len: int) -> torch.Tensor:
    """sum over t >= prompt_len of log p(tokens[:, t] | tokens[:, :t]), per row (B,), in float64:
    the score that greedy, beam and exhaustive search compare. One full forward (the sequence
    must fit the model's context)."""
    _check_model_and_prompt(model, tokens)
    check_int("prompt_len", prompt_len, 1, f"an integer in 1..{tokens.shape[1]}")
    if prompt_len > tokens.shape[1]:
        raise ValueError(f"prompt_len={prompt_len} is longer than the sequence ({tokens.shape[1]}).")
    with _eval_mode(model):
        log_probs = torch.log_softmax(model(tokens)[0].double(), dim=-1)
    picked = log_probs[:, prompt_len - 1:-1].gather(-1, tokens[:, prompt_len:, None])[..., 0]
    return picked.sum(dim=-1)
