"""Speculative decoding (lesson 12; Leviathan et al. 2023, Chen et al. 2023).

A small draft model q proposes k tokens, one cheap step each; the target p scores all of them in
one forward pass (k + 1 positions, the cost of about one decoding step, which is bound by reading
the weights); then, for i = 1 .. k, draft token x_i is accepted with probability

    min(1, p_i(x_i) / q_i(x_i))

and at the first rejection the token is drawn instead from the residual distribution

    r_i(x) = max(0, p_i(x) - q_i(x)) / sum_y max(0, p_i(y) - q_i(y)).

If all k are accepted, one more token is drawn from p_{k+1}. Why the output has exactly p's
distribution: P(x_i = x) = q(x) min(1, p(x)/q(x)) + P(reject) r(x) = min(q(x), p(x)) +
(1 - sum_y min(q(y), p(y))) r(x), and 1 - sum_y min(q, p) = sum_y max(0, p - q), so the second term
is max(0, p(x) - q(x)): the sum is min(q, p) + max(0, p - q) = p(x). Greedy decoding is the limit
where p and q put all their mass on their argmax: a draft token is kept iff it is the target's
argmax, so the tokens are exactly the target's greedy tokens.

With acceptance rate a (each draft token accepted independently with probability a), one round
yields (1 - a^(k+1)) / (1 - a) tokens for one target pass and k draft steps.

Both models keep their keys and values in lesson 08's contiguous cache (one sequence each: the
paged cache's bookkeeping would cost more than it saves); after a round the rejected tokens are
rolled back by shortening the cache.
"""

from __future__ import annotations

import torch

from course_lib.attention._checks import check_int
from course_lib.generation import check_sampling, filter_logits
from course_lib.kv_cache import KVCache

__all__ = ["accept_draft", "expected_tokens_per_pass", "speculative_generate"]


def expected_tokens_per_pass(acceptance_rate: float, k: int) -> float:
    """Tokens one round yields on average, (1 - a^(k+1)) / (1 - a), for an acceptance rate a."""
    a = float(acceptance_rate)
    if not 0 <= a <= 1:
        raise ValueError(f"acceptance_rate must be in [0, 1], got {acceptance_rate!r}.")
    check_int("k", k, 1)
    return float(k + 1) if a == 1 else (1 - a ** (k + 1)) / (1 - a)


def accept_draft(p: torch.Tensor, q: torch.Tensor, draft: torch.Tensor,
                 u: torch.Tensor) -> tuple[int, torch.Tensor]:
    """The acceptance step: (number of draft tokens accepted, the distribution of the next token).

    p (k + 1, V): the target's probabilities at the k draft positions and the one after them;
    q (k, V): the draft's; draft (k,): the proposed tokens; u (k,): uniforms in [0, 1). Token i is
    accepted while u_i q_i(x_i) < p_i(x_i) (u_i < p/q without dividing by zero); at the first rejection
    the next token comes from max(0, p_i - q_i) normalised; when all k are accepted, from p_k.
    """
    k = draft.shape[0]
    for i in range(k):
        x = int(draft[i])
        if not u[i] * q[i, x] < p[i, x]:
            residual = (p[i] - q[i]).clamp_min(0)
            return i, residual / residual.sum()
    return k, p[k]


class _Runner:
    """One model with its own cache of one sequence: feed(tokens) -> logits of every new position."""

    def __init__(self, model, capacity: int) -> None:
        self.model = model
        self.cache = KVCache.for_model(model, 1, capacity)

    @property
    def length(self) -> int:
        return self.cache.length

    def feed(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.model(tokens[None].to(self.cache.device), cache=self.cache)[0][0].float()     # (T, V)

    def rollback(self, length: int) -> None:
        self.cache.truncate(length)


def speculative_generate(target, draft, idx: torch.Tensor, max_new_tokens: int, *, k: int = 4,
                         strategy: str = "greedy", temperature: float = 1.0, top_k: int | None = None,
                         top_p: float | None = None,
                         generator: torch.Generator | None = None) -> tuple[torch.Tensor, dict]:
    """idx (1, T) followed by max_new_tokens tokens of the target's distribution, drafted k at a time.

    Returns (tokens (1, T + n), stats): "proposed" (draft tokens), "checked" (those the rule looked at:
    the accepted ones and each round's first rejection), "accepted", "acceptance_rate" (accepted /
    checked: the per-token probability a of expected_tokens_per_pass), "target_passes", "draft_steps",
    "tokens_per_pass" (new tokens / target passes). strategy "greedy" gives
    exactly the target's greedy tokens; "sample" draws from softmax(filter_logits(logits, temperature,
    top_k, top_p)) of the target (the draft's proposals are filtered the same way).
    """
    for name, model in (("target", target), ("draft", draft)):
        if not hasattr(getattr(model, "config", None), "n_kv_head"):
            raise TypeError(f"{name} must be a course_lib.model.GPT, got {type(model).__name__}.")
    if target.config.vocab_size != draft.config.vocab_size:
        raise ValueError(f"target and draft must share a vocabulary: {target.config.vocab_size} vs "
                         f"{draft.config.vocab_size} tokens.")
    if not isinstance(idx, torch.Tensor) or idx.dim() != 2 or idx.shape[0] != 1 or idx.shape[1] == 0:
        raise ValueError(f"idx must have shape (1, T) with T >= 1 (one prompt), got "
                         f"{tuple(idx.shape) if isinstance(idx, torch.Tensor) else type(idx).__name__}.")
    check_int("max_new_tokens", max_new_tokens, 0)
    check_int("k", k, 1, "an integer >= 1 (draft tokens per round)")
    check_sampling(strategy, temperature, top_k, top_p)
    T = idx.shape[1]
    for name, model in (("target", target), ("draft", draft)):
        c = model.config
        if c.pos_encoding == "learned" and T + max_new_tokens > c.block_size:
            raise ValueError(f"the {name} has learned positions up to {c.block_size - 1}, and {T} + "
                             f"{max_new_tokens} tokens go past them: speculative decoding verifies k tokens at "
                             "fixed positions, so keep T + max_new_tokens <= block_size (crop the prompt).")

    def dist(logits: torch.Tensor) -> torch.Tensor:
        return torch.softmax(filter_logits(logits, temperature, top_k, top_p), dim=-1)

    out = idx[0].detach().cpu().tolist()
    stats = {"proposed": 0, "checked": 0, "accepted": 0, "target_passes": 0, "draft_steps": 0}
    was = (target.training, draft.training)
    target.eval()
    draft.eval()
    try:
        with torch.no_grad():
            tgt, drf = _Runner(target, T + max_new_tokens), _Runner(draft, T + max_new_tokens)
            while len(out) < T + max_new_tokens:
                n = min(k, T + max_new_tokens - len(out) - 1)     # the last token needs no draft
                proposal, q = [], []
                for _ in range(n):                                # the draft proposes n tokens
                    logits = drf.feed(torch.tensor((out + proposal)[drf.length:]))[-1]
                    stats["draft_steps"] += 1
                    if strategy == "greedy":
                        token = int(logits.argmax())
                    else:
                        q.append(dist(logits))
                        token = int(torch.multinomial(q[-1], 1, generator=generator))
                    proposal.append(token)
                start = tgt.length                                # the target checks them at once
                logits = tgt.feed(torch.tensor((out + proposal)[start:]))[len(out) - start - 1:]   # (n + 1, V)
                stats["target_passes"] += 1
                stats["proposed"] += n
                if strategy == "greedy":       # p and q put all their mass on their argmax
                    best = logits.argmax(dim=-1).tolist()
                    accepted = next((i for i, t in enumerate(proposal) if t != best[i]), n)
                    extra = best[accepted]
                else:
                    u = torch.rand(n, generator=generator)
                    accepted, nxt = accept_draft(dist(logits), torch.stack(q) if q else logits[:0],
                                                 torch.tensor(proposal, dtype=torch.long), u)
                    extra = int(torch.multinomial(nxt, 1, generator=generator))
                stats["accepted"] += accepted
                stats["checked"] += accepted + (accepted < n)
                out += proposal[:accepted] + [extra]
                tgt.rollback(min(tgt.length, len(out) - 1))       # keep what the accepted tokens left
                drf.rollback(min(drf.length, len(out) - 1))
    finally:
        target.train(was[0])
        draft.train(was[1])
    stats["acceptance_rate"] = stats["accepted"] / stats["checked"] if stats["checked"] else float("nan")
    stats["tokens_per_pass"] = max_new_tokens / stats["target_passes"] if stats["target_passes"] else float("nan")
    return torch.tensor(out, dtype=idx.dtype)[None].to(idx.device), stats
