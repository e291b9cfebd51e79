"""Lesson 05's wrong answers and right variants (see tests/grading/wrong_answers/__init__.py)."""

from tests.grading.wrong_answers._util import mutate

LESSON = "05_positional_encodings"

# Right answers in a learner's style, to put single mistakes into.
_RELPOS = """
    def relative_positions(T, k=None):
        if not isinstance(T, int) or T < 1:
            raise ValueError(f"T must be a positive integer, got {T!r}")
        if k is not None and k < 0:
            raise ValueError(f"k must be >= 0, got {k!r}")
        i = torch.arange(T)
        d = i[None, :] - i[:, None]
        if k is not None:
            d = d.clamp(-k, k)
        return d
"""

_SHAW = """
    def shaw_scores(q, k, rel_k, max_rel):
        T, d = q.shape[-2], q.shape[-1]
        i = torch.arange(T)
        idx = (i[None, :] - i[:, None]).clamp(-max_rel, max_rel) + max_rel
        per = q @ rel_k.T
        pos = per.gather(-1, idx.expand(*q.shape[:-1], T))
        return (q @ k.transpose(-2, -1) + pos) / math.sqrt(d)
"""

_ROPE = """
    def apply_rope(x, positions=None, base=10000.0):
        T, d = x.shape[-2], x.shape[-1]
        if d % 2:
            raise ValueError("d must be even")
        if positions is None:
            positions = torch.arange(T)
        theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
        ang = positions.double()[:, None] * theta
        c, s = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
        a, b = x[..., 0::2], x[..., 1::2]
        return torch.stack([a * c - b * s, a * s + b * c], dim=-1).flatten(-2)
"""

_ALIBI = """
    def alibi_slopes(n_head):
        def pow2(n):
            start = 2.0 ** (-8.0 / n)
            return [start ** (h + 1) for h in range(n)]

        below = 2 ** int(math.floor(math.log2(n_head)))
        slopes = pow2(below)
        if below < n_head:
            slopes += pow2(2 * below)[0::2][: n_head - below]
        return torch.tensor(slopes)

    def alibi_bias(n_head, T):
        p = torch.arange(T)
        dist = (p[None, :] - p[:, None]).abs().float()
        return -alibi_slopes(n_head)[:, None, None] * dist
"""

_T5 = """
    def t5_attention(q, k, v, bias_table, bidirectional=False, max_distance=128):
        T, d = q.shape[-2], q.shape[-1]
        pos = torch.arange(T)
        rel = pos[None, :] - pos[:, None]
        buckets = ref.t5_relative_bucket(rel, bidirectional, bias_table.shape[0], max_distance)
        bias = bias_table[buckets].permute(2, 0, 1)
        scores = q @ k.transpose(-2, -1) / math.sqrt(d) + bias
        if not bidirectional:
            scores = scores.masked_fill(rel > 0, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        return weights @ v, weights
"""

# Plausible wrong answers: the mistakes learners make, three or more per exercise. The k-th
# wrong answer of every exercise of a lesson share one submission (exercises are graded
# independently), and each must lose at least one of its exercise's points.
# The round trip grades the first 6 wrong answers of each exercise (submissions wrong-1 to
# wrong-6); the rest are tried by tools/try_answers.py.
GRADED = 6

WRONG: dict[str, list[str]] = {
    "relpos_answer": [
        # query minus key: i - j instead of j - i
        mutate(_RELPOS, "d = i[None, :] - i[:, None]", "d = i[:, None] - i[None, :]"),
        # `if k:` treats k = 0 as "no clipping"
        mutate(_RELPOS, "if k is not None:\n", "if k:\n"),
        # no check of k: a negative k clamps silently instead of raising
        mutate(_RELPOS, '        if k is not None and k < 0:\n            raise ValueError(f"k must be '
               '>= 0, got {k!r}")\n', ""),
        mutate(_RELPOS, "if not isinstance(T, int) or T < 1:", "if T < 1:"),  # accepts T = 4.0
        "\n    import functools\n\n\n    @functools.lru_cache(maxsize=None)  # one shared tensor per argument tuple" + _RELPOS,
        # float distances
        mutate(_RELPOS, "i = torch.arange(T)", "i = torch.arange(T, dtype=torch.float32)"),
        # accepts T = 0 (an empty matrix) instead of raising
        mutate(_RELPOS, "T < 1", "T < 0"),
    ],
    "shaw_answer": [
        # key minus query flipped: the rows of rel_k are read backwards
        mutate(_SHAW, "(i[None, :] - i[:, None])", "(i[:, None] - i[None, :])"),
        # only the word-word term is scaled by 1/sqrt(d)
        mutate(_SHAW, "return (q @ k.transpose(-2, -1) + pos) / math.sqrt(d)",
               "return q @ k.transpose(-2, -1) / math.sqrt(d) + pos"),
        # the direct way: one d-vector per (i, j) pair, a (T, T, d) tensor
        """
        def shaw_scores(q, k, rel_k, max_rel):
            T, d = q.shape[-2], q.shape[-1]
            i = torch.arange(T)
            idx = (i[None, :] - i[:, None]).clamp(-max_rel, max_rel) + max_rel
            a = rel_k[idx]  # (T, T, d)
            pos = torch.einsum("...id,ijd->...ij", q, a)
            return (q @ k.transpose(-2, -1) + pos) / math.sqrt(d)
        """,
        mutate(_SHAW, "per = q @ rel_k.T", "q /= math.sqrt(d)\n        per = q @ rel_k.T")
        .replace(" + pos) / math.sqrt(d)", " + pos)"),  # scales the caller's q in place
        mutate(_SHAW, "T, d = q.shape[-2], q.shape[-1]",  # float64 "for accuracy", returned as float64
               "T, d = q.shape[-2], q.shape[-1]\n        q, k, rel_k = q.double(), k.double(), rel_k.double()"),
        mutate(_SHAW, "idx.expand(*q.shape[:-1], T)", "idx.expand(q.shape[0], T, T)"),  # one batch dim only
        # clips to [-max_rel, max_rel - 1]: the last row is never used
        mutate(_SHAW, ".clamp(-max_rel, max_rel)", ".clamp(-max_rel, max(max_rel - 1, 0))"),
    ],
    "t5_attention_answer": [
        # i - j instead of j - i: every past key falls in bucket 0
        mutate(_T5, "rel = pos[None, :] - pos[:, None]\n        buckets = ref.t5_relative_bucket(rel,",
               "rel = pos[None, :] - pos[:, None]\n        buckets = ref.t5_relative_bucket(-rel,"),
        # the bias is scaled by 1/sqrt(d) with the scores
        mutate(_T5, "scores = q @ k.transpose(-2, -1) / math.sqrt(d) + bias",
               "scores = (q @ k.transpose(-2, -1) + bias) / math.sqrt(d)"),
        # the (T, T, H) lookup transposed the wrong way: head h gets the bias of (j, i)
        mutate(_T5, ".permute(2, 0, 1)", ".permute(2, 1, 0)"),
        mutate(_T5, "T, d = q.shape[-2], q.shape[-1]",  # float64 "for accuracy", returned as float64
               "T, d = q.shape[-2], q.shape[-1]\n        q, k, v, bias_table = q.double(), k.double(), v.double(), bias_table.double()"),
        # the future is zeroed after the softmax: the rows no longer sum to 1
        """
        def t5_attention(q, k, v, bias_table, bidirectional=False, max_distance=128):
            T, d = q.shape[-2], q.shape[-1]
            rel = ref.relative_positions(T)
            b = ref.t5_relative_bucket(rel, bidirectional, bias_table.shape[0], max_distance)
            scores = q @ k.transpose(-2, -1) / math.sqrt(d) + bias_table[b].permute(2, 0, 1)
            weights = torch.softmax(scores, dim=-1)
            if not bidirectional:
                weights = weights * (rel <= 0)
            return weights @ v, weights
        """,
        # always causal, even for a bidirectional encoder
        mutate(_T5, "if not bidirectional:\n", "if True:\n"),
        # num_buckets and max_distance left at T5's defaults
        mutate(_T5, "ref.t5_relative_bucket(rel, bidirectional, bias_table.shape[0], max_distance)",
               "ref.t5_relative_bucket(rel, bidirectional)"),
        # the future masked with 0 instead of -inf
        mutate(_T5, 'float("-inf")', "0.0"),
        # max_distance left at 128: the log-spaced buckets end in the wrong place
        mutate(_T5, "bias_table.shape[0], max_distance)", "bias_table.shape[0])"),
    ],
    "rope_answer": [
        # GPT-NeoX's "half" layout: pairs channel i with i + d/2
        mutate(_ROPE, "a, b = x[..., 0::2], x[..., 1::2]\n        return torch.stack("
               "[a * c - b * s, a * s + b * c], dim=-1).flatten(-2)",
               "a, b = x[..., : d // 2], x[..., d // 2 :]\n        return torch.cat("
               "[a * c - b * s, a * s + b * c], dim=-1)"),
        # the notes' exponent: theta_i = base^(-i/d)
        mutate(_ROPE, "-torch.arange(0, d, 2, dtype=torch.float64) / d",
               "-torch.arange(0, d // 2, dtype=torch.float64) / d"),
        # the angles in float32
        mutate(_ROPE, "ang = positions.double()[:, None] * theta",
               "ang = positions.float()[:, None] * theta.float()"),
        mutate(_ROPE, "return torch.stack([a * c - b * s, a * s + b * c], dim=-1).flatten(-2)",
               "x[..., 0::2], x[..., 1::2] = a * c - b * s, a * s + b * c\n        return x"),  # rotates x in place
        # ignores the positions argument: always 0 ... T - 1
        mutate(_ROPE, "if positions is None:\n            positions = torch.arange(T)",
               "positions = torch.arange(T)"),
        # no ValueError for an odd d (fails later with another error)
        mutate(_ROPE, '        if d % 2:\n            raise ValueError("d must be even")\n', ""),
        # cos and sin not cast: a float32 input comes back float64
        mutate(_ROPE, "c, s = ang.cos().to(x.dtype), ang.sin().to(x.dtype)",
               "c, s = ang.cos(), ang.sin()"),
    ],
    "alibi_answer": [
        # the power-of-two rule for every head count
        mutate(_ALIBI, "slopes = pow2(below)\n        if below < n_head:\n"
               "            slopes += pow2(2 * below)[0::2][: n_head - below]",
               "slopes = pow2(n_head)"),
        # every other slope of 2n', starting from the second
        mutate(_ALIBI, "[0::2]", "[1::2]"),
        # the notes' 1/2^(h+1) for every head count
        """
        def alibi_slopes(n_head):
            return torch.tensor([2.0 ** -(h + 1) for h in range(n_head)])

        def alibi_bias(n_head, T):
            p = torch.arange(T)
            dist = (p[None, :] - p[:, None]).abs().float()
            return -alibi_slopes(n_head)[:, None, None] * dist
        """,
        "\n    import functools\n\n\n    @functools.lru_cache(maxsize=None)  # one shared tensor per argument tuple" + _ALIBI,
        # a reward, not a penalty: +m |i - j|
        mutate(_ALIBI, "return -alibi_slopes(n_head)[:, None, None] * dist",
               "return alibi_slopes(n_head)[:, None, None] * dist"),
        # signed distance j - i: not symmetric
        mutate(_ALIBI, "(p[None, :] - p[:, None]).abs().float()", "(p[:, None] - p[None, :]).float()"),
    ],
}

# Right answers written differently: they must keep full marks.
RIGHT: dict[str, str] = {
    # idiom: numbers, typing.Optional
    "relpos_answer": """
        from __future__ import annotations

        import numbers
        from typing import Optional


        def relative_positions(T: int, k: Optional[int] = None) -> torch.Tensor:
            if isinstance(T, bool) or not isinstance(T, numbers.Integral) or T <= 0:
                raise ValueError(f"T must be a positive integer, not {T!r}")
            if k is not None and (not isinstance(k, numbers.Integral) or k < 0):
                raise ValueError(f"k must be None or >= 0, not {k!r}")
            rows = []
            for i in range(T):
                row = [j - i for j in range(T)]
                if k is not None:
                    row = [max(-k, min(k, r)) for r in row]
                rows.append(row)
            return torch.tensor(rows, dtype=torch.int64)
    """,
    # idiom: a @torch.jit.script helper
    "shaw_answer": """
        @torch.jit.script
        def _clipped_offsets(T: int, max_rel: int) -> torch.Tensor:
            steps = torch.arange(T)
            return (steps[None, :] - steps[:, None]).clamp(-max_rel, max_rel) + max_rel


        def shaw_scores(q, k, rel_k, max_rel):
            T, d = q.shape[-2], q.shape[-1]
            content = torch.einsum("...id,...jd->...ij", q, k)
            per = torch.einsum("...id,rd->...ir", q, rel_k)  # (..., T, 2k + 1)
            index = _clipped_offsets(T, int(max_rel))  # (T, T)
            pos = per.gather(-1, index.expand(*per.shape[:-1], T))  # q_i . a_{clip(j - i)}
            return (content + pos) * d ** -0.5
    """,
    # idiom: postponed annotations, torch.where
    "t5_attention_answer": """
        from __future__ import annotations


        def t5_attention(q, k, v, bias_table, bidirectional: bool = False, max_distance: int = 128):
            T = q.shape[-2]
            rel = ref.relative_positions(T)
            buckets = ref.t5_relative_bucket(
                rel, bidirectional=bidirectional, num_buckets=len(bias_table),
                max_distance=max_distance,
            )
            heads = [bias_table[:, h][buckets] for h in range(bias_table.shape[1])]
            scores = torch.einsum("...id,...jd->...ij", q, k) * q.shape[-1] ** -0.5
            scores = scores + torch.stack(heads)
            if not bidirectional:
                scores = torch.where(rel <= 0, scores, torch.full_like(scores, -math.inf))
            scores = scores - scores.amax(-1, keepdim=True)
            e = scores.exp()
            weights = e / e.sum(-1, keepdim=True)
            return torch.einsum("...ij,...jd->...id", weights, v), weights
    """,
    # idiom: type(x).__name__ in an error
    "rope_answer": """
        def apply_rope(x, positions=None, base=10000.0):
            if not isinstance(x, torch.Tensor):
                raise TypeError(f"apply_rope rotates a tensor, not a {type(x).__name__}")
            *_, T, d = x.shape
            if d % 2 == 1:
                raise ValueError(f"odd d = {d}")
            m = torch.arange(T, dtype=torch.float64) if positions is None else positions.double()
            theta = torch.tensor([base ** (-2 * i / d) for i in range(d // 2)], dtype=torch.float64)
            z = torch.view_as_complex(x.double().reshape(*x.shape[:-1], d // 2, 2).contiguous())
            rotated = torch.view_as_real(z * torch.polar(torch.ones_like(theta), m[:, None] * theta))
            return rotated.flatten(-2).to(x.dtype)
    """,
    "alibi_answer": """
        import math as _math


        def alibi_slopes(n_head: int) -> torch.Tensor:
            n = 1 << (n_head.bit_length() - 1)
            ratio = 2.0 ** (-8.0 / n)
            slopes = [ratio ** h for h in range(1, n + 1)]
            finer = 2.0 ** (-8.0 / (2 * n))
            slopes += [finer ** h for h in range(1, 2 * n + 1, 2)][: n_head - n]
            return torch.tensor(slopes, dtype=torch.float32)


        def alibi_bias(n_head: int, T: int) -> torch.Tensor:
            i = torch.arange(T).view(T, 1)
            j = torch.arange(T).view(1, T)
            return torch.stack([-m * (i - j).abs().float() for m in alibi_slopes(n_head).tolist()])
    """,
}

# RIGHT answers written with an idiom careful people use: the answer policy must let each one
# through (tests/grader/test_answer_policy.py counts them).
IDIOMS: dict[str, str] = {
    "relpos_answer": "numbers, typing.Optional",
    "shaw_answer": "a @torch.jit.script helper",
    "t5_attention_answer": "postponed annotations, torch.where",
    "rope_answer": "type(x).__name__ in an error",
}

# Answers that call the forbidden references: they pass the visible tests and must earn exactly
# the visible points (this replaces the lesson's entry in tests/grading/submissions.py).
FORBIDDEN: dict[str, str] = {
    "relpos_answer": """
        def relative_positions(T, k=None):
            return ref.relative_positions(T, k)
    """,
    "shaw_answer": """
        def shaw_scores(q, k, rel_k, max_rel):
            return ref.shaw_scores(q, k, rel_k, max_rel)
    """,
    "t5_attention_answer": """
        def t5_attention(q, k, v, bias_table, bidirectional=False, max_distance=128):
            n_buckets, n_head = bias_table.shape
            t5 = ref.T5RelativeBias(n_head, bidirectional=bidirectional, num_buckets=n_buckets,
                                    max_distance=max_distance).to(bias_table.dtype)
            with torch.no_grad():
                t5.relative_attention_bias.weight.copy_(bias_table)
                bias = t5(q.shape[-2])
            return scaled_dot_product_attention(q, k, v, mask=bias, is_causal=not bidirectional)
    """,
    "rope_answer": """
        def apply_rope(x, positions=None, base=10000.0):
            return ref.apply_rope(x, positions, base)
    """,
    "alibi_answer": """
        def alibi_slopes(n_head):
            return ref.alibi_slopes(n_head)

        def alibi_bias(n_head, T):
            return ref.alibi_bias(n_head, T)
    """,
}
