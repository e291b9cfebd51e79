"""Lesson 03's wrong answers and right variants (see tests/grading/wrong_answers/__init__.py)."""

from tests.grading.wrong_answers._util import mutate

LESSON = "03_attention"

# Right answers in a learner's style, to put single mistakes into.
_SCORES = """
    def attention_scores(q, k):
        d = q.shape[-1]
        return q @ k.transpose(-2, -1) / math.sqrt(d)
"""

_MASK = """
    def apply_mask(scores, mask):
        if mask.dtype == torch.bool:
            return scores.masked_fill(~mask, float("-inf"))
        return scores + mask
"""

_SOFTMAX = """
    def stable_softmax(x, dim=-1):
        m = x.amax(dim=dim, keepdim=True)
        m = torch.where(m == float("-inf"), torch.zeros_like(m), m)
        e = torch.exp(x - m)
        total = e.sum(dim=dim, keepdim=True)
        return e / torch.where(total == 0, torch.ones_like(total), total)
"""

_ATTENTION = """
    def attention(q, k, v, mask=None, is_causal=False):
        scores = attention_scores(q, k)
        Tq, Tk = scores.shape[-2], scores.shape[-1]
        if is_causal:
            if Tk < Tq:
                raise ValueError(f"is_causal needs Tk >= Tq, got Tq={Tq}, Tk={Tk}")
            allowed = torch.ones(Tq, Tk, dtype=torch.bool).tril(diagonal=Tk - Tq)
            scores = apply_mask(scores, allowed)
        if mask is not None:
            scores = apply_mask(scores, mask)
        weights = stable_softmax(scores, dim=-1)
        return weights @ v, weights
"""

_HEADS = """
    def split_heads(x, n_head):
        B, T, D = x.shape
        return x.reshape(B, T, n_head, D // n_head).transpose(1, 2)


    def merge_heads(x):
        B, H, T, d_h = x.shape
        return x.transpose(1, 2).reshape(B, T, H * d_h)
"""

# Plausible wrong answers: the mistakes learners make, three or more per exercise.
# The round trip grades the first 5 wrong answers of each exercise (submissions wrong-1 to
# wrong-5); the rest are tried by tools/try_answers.py.
GRADED = 5

WRONG: dict[str, list[str]] = {
    "scores_answer": [
        mutate(_SCORES, "/ math.sqrt(d)", "/ d"),  # divides by d, not sqrt(d)
        mutate(_SCORES, "q @ k.transpose(-2, -1)",
               "q.float() @ k.float().transpose(-2, -1)"),  # float32 whatever q's dtype
        mutate(_SCORES, "d = q.shape[-1]", "d = k.shape[-2]"),  # scales by sqrt(Tk), not sqrt(d)
        mutate(_SCORES, "return q @ k.transpose(-2, -1) / math.sqrt(d)",
               "return (q @ k.transpose(-2, -1) / math.sqrt(d)).squeeze()"),  # drops the dims of size 1
        """
        def attention_scores(q, k):  # scales q in place: the caller's q changes
            q /= math.sqrt(q.shape[-1])
            return q @ k.transpose(-2, -1)
        """,
        mutate(_SCORES, "d = q.shape[-1]", "d = q.shape[1]"),  # dim 1 is d only without batch dims
    ],
    "mask_answer": [
        mutate(_MASK, "masked_fill(~mask", "masked_fill(mask"),  # True read as "blocked"
        mutate(_MASK, "scores.masked_fill(~mask", "scores.masked_fill_(~mask"),  # changes scores in place
        mutate(_MASK, 'float("-inf"))', "-1e9)"),  # -1e9, as the notes' module, not -inf
        # a mask that blocks nothing returns the caller's scores tensor itself
        mutate(_MASK, "    if mask.dtype == torch.bool:\n",
               "    if mask.dtype == torch.bool and bool(mask.all()):\n            return scores\n"
               "        if mask.dtype == torch.bool:\n"),
        mutate(_MASK, "mask.dtype == torch.bool", "mask.dtype != torch.float32"),  # float64 masks
        """
        def apply_mask(scores, mask):  # a float mask only blocks where it is -inf, ignores the rest
            if mask.dtype != torch.bool:
                mask = mask != float("-inf")
            return scores.masked_fill(~mask, float("-inf"))
        """,
    ],
    "softmax_answer": [
        """
        def stable_softmax(x, dim=-1):  # no shift: exp(1000) overflows
            e = torch.exp(x)
            total = e.sum(dim=dim, keepdim=True)
            return e / torch.where(total == 0, torch.ones_like(total), total)
        """,
        mutate(_SOFTMAX, '        m = torch.where(m == float("-inf"), torch.zeros_like(m), m)\n',
               ""),  # a fully masked row: -inf - (-inf) = NaN
        """
        def stable_softmax(x, dim=-1):  # log-sum-exp: NaN for a fully masked row
            return torch.exp(x - torch.logsumexp(x, dim=dim, keepdim=True))
        """,
        mutate(_SOFTMAX, "e = torch.exp(x - m)", "e = x.sub_(m).exp_()"),  # shifts the caller's x in place
        mutate(_SOFTMAX, "e = torch.exp(x - m)",  # shifts only when exp could overflow: all-negative rows give 0/0
               "e = torch.exp(x - m) if bool((m > 80).any()) else torch.exp(x)"),
        mutate(_SOFTMAX, "m = x.amax(dim=dim, keepdim=True)", "m = x.amax()"),  # one max for the tensor
        mutate(_SOFTMAX, "m = x.amax(dim=dim, keepdim=True)",
               "x = x.float()\n        m = x.amax(dim=dim, keepdim=True)"),  # float32 output
        """
        def stable_softmax(x, dim=-1):  # -inf replaced by -1e9: a masked row becomes uniform
            x = x.clamp_min(-1e9)
            e = torch.exp(x - x.amax(dim=dim, keepdim=True))
            return e / e.sum(dim=dim, keepdim=True)
        """,
    ],
    "attention_answer": [
        mutate(_ATTENTION, "tril(diagonal=Tk - Tq)", "tril()"),  # causal pattern aligned to the start
        mutate(_ATTENTION, "if mask is not None:", "elif mask is not None:"),  # is_causal drops mask
        mutate(_ATTENTION,  # no error for fewer keys than queries
               '            if Tk < Tq:\n                raise ValueError(f"is_causal needs Tk >= Tq, '
               'got Tq={Tq}, Tk={Tk}")\n', ""),
        mutate(_ATTENTION, "return weights @ v, weights",  # one query comes back without its dim
               "out = weights @ v\n        return (out.squeeze(-2) if Tq == 1 else out), weights"),
        mutate(_ATTENTION,  # folds the causal pattern into the caller's boolean mask
               "            scores = apply_mask(scores, allowed)\n",
               "            if mask is not None and mask.dtype == torch.bool:\n"
               "                mask &= allowed\n"
               "            else:\n"
               "                scores = apply_mask(scores, allowed)\n"),
        mutate(_ATTENTION, "        scores = attention_scores(q, k)\n",  # float32 out for float64 in
               "        q, k, v = q.float(), k.float(), v.float()\n        scores = attention_scores(q, k)\n"),
        mutate(_ATTENTION, "stable_softmax(scores, dim=-1)", "stable_softmax(scores, dim=-2)"),
        mutate(_ATTENTION, "return weights @ v, weights", "return weights @ v / math.sqrt(v.shape[-1]), "
               "weights"),  # scales the output too
        mutate(_ATTENTION,  # mask & causal: fails for a float mask
               "            scores = apply_mask(scores, allowed)\n        if mask is not None:\n",
               "            mask = allowed if mask is None else mask & allowed\n        if mask is not None:\n"),
    ],
    "heads_answer": [
        mutate(_HEADS, "x.reshape(B, T, n_head, D // n_head).transpose(1, 2)",
               "x.reshape(B, n_head, T, D // n_head)"),  # a plain reshape mixes positions
        mutate(_HEADS, "x.transpose(1, 2).reshape(B, T, H * d_h)",
               "x.reshape(B, T, H * d_h)"),  # merge without the transpose
        mutate(_HEADS, "x.reshape(B, T, n_head, D // n_head).transpose(1, 2)",
               "x.reshape(B, T, D // n_head, n_head).permute(0, 3, 1, 2)"),  # every H-th column
        mutate(_HEADS, "x.transpose(1, 2).reshape(B, T, H * d_h)",
               "x.permute(0, 2, 3, 1).reshape(B, T, H * d_h)"),  # interleaves the heads' columns
        """
        def split_heads(x, n_head):  # the notebook's T (5, from the first cell), not x's
            return x.reshape(x.shape[0], T, n_head, -1).transpose(1, 2)


        def merge_heads(x):
            H, d_h = x.shape[1], x.shape[3]
            return x.transpose(1, 2).reshape(x.shape[0], T, H * d_h)
        """,
    ],
}

# Right answers written differently from the solution: each must earn full points.
RIGHT: dict[str, str] = {
    # idiom: postponed annotations, einsum
    "scores_answer": """
        from __future__ import annotations

        def attention_scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
            scale = q.size(-1) ** -0.5
            return torch.einsum("...id,...jd->...ij", q * scale, k)
    """,
    # idiom: a match statement, torch.where instead of masked_fill
    "mask_answer": """
        def apply_mask(scores, mask):
            match mask.dtype:
                case torch.bool:
                    blocked = torch.full_like(scores, -math.inf)
                    return torch.where(mask, scores, blocked)
                case _:
                    return torch.add(scores, mask)
    """,
    # idiom: a __main__ self-check
    "softmax_answer": """
        def stable_softmax(x, dim=-1):
            x = x.movedim(dim, -1)
            m = x.max(dim=-1, keepdim=True).values
            m = m.nan_to_num(neginf=0.0)
            e = (x - m).exp()
            out = e / e.sum(-1, keepdim=True).clamp_min(torch.finfo(x.dtype).tiny)
            return out.movedim(-1, dim)

        if __name__ == "__main__":  # rows of huge scores still sum to one
            _x = torch.tensor([[1000.0, 0.0], [-1000.0, 0.0]])
            assert torch.allclose(stable_softmax(_x).sum(-1), torch.ones(2))
    """,
    # idiom: typing.Optional, einsum
    "attention_answer": """
        from typing import Optional

        def attention(q, k, v, mask: Optional[torch.Tensor] = None, is_causal: bool = False):
            s = attention_scores(q, k)
            Tq, Tk = s.shape[-2:]
            if is_causal:
                if Tq > Tk:
                    raise ValueError("is_causal: more queries than keys")
                i = torch.arange(Tq)[:, None] + (Tk - Tq)        # query i's position among keys
                j = torch.arange(Tk)[None, :]
                s = apply_mask(s, torch.zeros(Tq, Tk).masked_fill(j > i, -math.inf))
            if mask is not None:
                s = apply_mask(s, mask)
            w = stable_softmax(s)
            return torch.einsum("...qk,...kd->...qd", w, v), w
    """,
    # idiom: a %%time cell magic
    "heads_answer": """
        %%time
        def split_heads(x, n_head):
            return torch.stack(x.chunk(n_head, dim=-1), dim=1)


        def merge_heads(x):
            return torch.cat(x.unbind(dim=1), dim=-1)
    """,
}

# RIGHT answers written with an idiom careful people use: the answer policy must let each one
# through (tests/grader/test_answer_policy.py counts them).
IDIOMS: dict[str, str] = {
    "scores_answer": "postponed annotations, einsum",
    "mask_answer": "a match statement, torch.where instead of masked_fill",
    "softmax_answer": "a __main__ self-check",
    "attention_answer": "typing.Optional, einsum",
    "heads_answer": "a %%time cell magic",
}
