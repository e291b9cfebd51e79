"""Lesson 11's wrong answers and right variants (see tests/grading/wrong_answers/__init__.py)."""

from tests.grading.wrong_answers._util import mutate

LESSON = "11_flash_attention"

# A right answer to lesson 11's tiled forward, in a learner's style, to put single mistakes into.
_TILED = """
    def tiled_attention(q, k, v, block_size=64, causal=False):
        Tq, Tk = q.shape[-2], k.shape[-2]
        outs, lses = [], []
        for qs in range(0, Tq, block_size):
            qt = q[..., qs:qs + block_size, :] / math.sqrt(q.shape[-1])
            m = torch.full(qt.shape[:-1], float("-inf"), dtype=q.dtype)
            l = torch.zeros(qt.shape[:-1], dtype=q.dtype)
            acc = torch.zeros(*qt.shape[:-1], v.shape[-1], dtype=q.dtype)
            for ks in range(0, Tk, block_size):
                s = qt @ k[..., ks:ks + block_size, :].transpose(-2, -1)
                if causal:
                    i = torch.arange(qs, qs + s.shape[-2])[:, None]
                    j = torch.arange(ks, ks + s.shape[-1])[None, :]
                    s = s.masked_fill(j > i + Tk - Tq, float("-inf"))
                m_new = torch.maximum(m, s.amax(-1))
                shift = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
                p = torch.exp(s - shift[..., None])
                alpha = torch.exp(m - shift)
                l = alpha * l + p.sum(-1)
                acc = alpha[..., None] * acc + p @ v[..., ks:ks + block_size, :]
                m = m_new
            safe = torch.where(l > 0, l, torch.ones_like(l))
            outs.append(acc / safe[..., None])
            lses.append(torch.where(l > 0, m + torch.log(safe), torch.full_like(m, float("-inf"))))
        return torch.cat(outs, -2), torch.cat(lses, -1)
"""

# Plausible wrong answers: the mistakes learners make, three per exercise. The k-th wrong answer
# of every exercise of a lesson share one submission (exercises are graded independently), and
# each must lose at least one of its exercise's points.
# The round trip grades the first 6 wrong answers of each exercise (submissions wrong-1 to
# wrong-6); the rest are tried by tools/try_answers.py.
GRADED = 6

WRONG: dict[str, list[str]] = {
    "merge_answer": [
        """
        def merge_partials(m1, l1, o1, m2, l2, o2):  # rescales the caller's l1 and l2 in place
            m = torch.maximum(m1, m2)
            base = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
            l1.mul_(torch.exp(m1 - base))
            l2.mul_(torch.exp(m2 - base))
            l = l1 + l2
            num = l1[..., None] * torch.nan_to_num(o1) + l2[..., None] * torch.nan_to_num(o2)
            return m, l, num / torch.where(l == 0, torch.ones_like(l), l)[..., None]
        """,
        """
        def merge_partials(m1, l1, o1, m2, l2, o2):  # adds the sums without rescaling them to the new max
            m = torch.maximum(m1, m2)
            l = l1 + l2
            return m, l, (l1[..., None] * o1 + l2[..., None] * o2) / l[..., None]
        """,
        """
        def merge_partials(m1, l1, o1, m2, l2, o2):  # exponentiates the maxima themselves: overflows
            m = torch.maximum(m1, m2)
            w1, w2 = torch.exp(m1) * l1, torch.exp(m2) * l2
            o = (w1[..., None] * o1 + w2[..., None] * o2) / (w1 + w2)[..., None]
            return m, (w1 + w2) / torch.exp(m), o
        """,
        """
        def merge_partials(m1, l1, o1, m2, l2, o2):  # right m and l, but averages the two outputs
            m = torch.maximum(m1, m2)
            l = torch.exp(m1 - m) * l1 + torch.exp(m2 - m) * l2
            return m, l, (o1 + o2) / 2
        """,
        """
        def merge_partials(m1, l1, o1, m2, l2, o2):  # computes in float64 and returns float64
            m1, l1, o1, m2, l2, o2 = (t.double() for t in (m1, l1, o1, m2, l2, o2))
            m = torch.maximum(m1, m2)
            base = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
            w1, w2 = torch.exp(m1 - base) * l1, torch.exp(m2 - base) * l2
            l = w1 + w2
            num = w1[..., None] * torch.nan_to_num(o1) + w2[..., None] * torch.nan_to_num(o2)
            return m, l, num / torch.where(l == 0, torch.ones_like(l), l)[..., None]
        """,
        """
        def merge_partials(m1, l1, o1, m2, l2, o2):  # two leading dims written out: (B, T) only
            m = torch.maximum(m1, m2)
            base = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
            w1, w2 = torch.exp(m1 - base) * l1, torch.exp(m2 - base) * l2
            l = w1 + w2
            num = w1[:, :, None] * torch.nan_to_num(o1) + w2[:, :, None] * torch.nan_to_num(o2)
            return m, l, num / torch.where(l == 0, torch.ones_like(l), l)[:, :, None]
        """,
    ],
    "tiled_answer": [
        mutate(_TILED, "acc = alpha[..., None] * acc + ", "acc = acc + "),  # rescales l, not the accumulator
        """
        def tiled_attention(q, k, v, block_size=64, causal=False):  # a query tile against all keys at once
            Tq, Tk = q.shape[-2], k.shape[-2]
            outs, lses = [], []
            for qs in range(0, Tq, block_size):
                s = q[..., qs:qs + block_size, :] @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
                if causal:
                    i = torch.arange(qs, qs + s.shape[-2])[:, None]
                    s = s.masked_fill(torch.arange(Tk)[None, :] > i + Tk - Tq, float("-inf"))
                m = s.amax(-1, keepdim=True)
                m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
                e = torch.exp(s - m)
                l = e.sum(-1, keepdim=True)
                outs.append(e @ v / torch.where(l > 0, l, torch.ones_like(l)))
                lses.append((m + torch.log(l))[..., 0])
            return torch.cat(outs, -2), torch.cat(lses, -1)
        """,
        mutate(_TILED, "j > i + Tk - Tq", "j > i"),  # the causal mask aligned to the start
        """
        def tiled_attention(q, k, v, block_size=64, causal=False):  # no running max: exp of the raw scores
            Tq, Tk = q.shape[-2], k.shape[-2]
            outs, lses = [], []
            for qs in range(0, Tq, block_size):
                qt = q[..., qs:qs + block_size, :] / math.sqrt(q.shape[-1])
                l = torch.zeros(qt.shape[:-1], dtype=q.dtype)
                acc = torch.zeros(*qt.shape[:-1], v.shape[-1], dtype=q.dtype)
                for ks in range(0, Tk, block_size):
                    s = qt @ k[..., ks:ks + block_size, :].transpose(-2, -1)
                    if causal:
                        i = torch.arange(qs, qs + s.shape[-2])[:, None]
                        j = torch.arange(ks, ks + s.shape[-1])[None, :]
                        s = s.masked_fill(j > i + Tk - Tq, float("-inf"))
                    p = torch.exp(s)
                    l = l + p.sum(-1)
                    acc = acc + p @ v[..., ks:ks + block_size, :]
                outs.append(acc / torch.where(l > 0, l, torch.ones_like(l))[..., None])
                lses.append(torch.log(l))
            return torch.cat(outs, -2), torch.cat(lses, -1)
        """,
        mutate(  # scales the caller's q through the view of its tile
            _TILED,
            "qt = q[..., qs:qs + block_size, :] / math.sqrt(q.shape[-1])",
            "qt = q[..., qs:qs + block_size, :]\n            qt *= 1 / math.sqrt(q.shape[-1])",
        ),
        mutate(  # works in float64 for accuracy: out cast back to q's dtype, lse left in float64
            mutate(_TILED, "def tiled_attention(q, k, v, block_size=64, causal=False):\n",
                   "def tiled_attention(q, k, v, block_size=64, causal=False):\n"
                   "        dtype = q.dtype\n        q, k, v = q.double(), k.double(), v.double()\n"),
            "return torch.cat(outs, -2), torch.cat(lses, -1)", "return torch.cat(outs, -2).to(dtype), torch.cat(lses, -1)",
        ),
    ],
    "score_grad_answer": [
        """
        def tile_score_grad(p, dp, out, grad_out):  # the row sum over the tile's own keys only
            return p * (dp - (p * dp).sum(-1, keepdim=True))
        """,
        """
        def tile_score_grad(p, dp, out, grad_out):  # forgets the factor P
            return dp - (grad_out * out).sum(-1, keepdim=True)
        """,
        """
        def tile_score_grad(p, dp, out, grad_out):  # D without keepdim: broadcast along the wrong axis
            return p * (dp - (grad_out * out).sum(-1))
        """,
        """
        def tile_score_grad(p, dp, out, grad_out):  # subtracts D from the caller's dp tile in place
            dp -= (grad_out * out).sum(-1, keepdim=True)
            return p * dp
        """,
        """
        def tile_score_grad(p, dp, out, grad_out):  # D summed in float64 "for accuracy": float64 out
            D = (grad_out * out).sum(-1, keepdim=True, dtype=torch.float64)
            return p * (dp - D)
        """,
    ],
    "triton_answer": [
        """
        @triton_jit
        def tile_step(q, k, v, m_i, l_i, acc, allowed, scale):  # ignores `allowed`
            s = tl.dot(q, tl.trans(k)) * scale
            m_new = tl.maximum(m_i, tl.max(s, 1))
            p = tl.exp(s - m_new[:, None])
            alpha = tl.exp(m_i - m_new)
            return m_new, l_i * alpha + tl.sum(p, 1), acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        """,
        """
        @triton_jit
        def tile_step(q, k, v, m_i, l_i, acc, allowed, scale):  # rescales l_i but not acc
            s = tl.where(allowed, tl.dot(q, tl.trans(k)) * scale, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            base = tl.where(m_new == float("-inf"), 0.0, m_new)
            p = tl.exp(s - base[:, None])
            return m_new, l_i * tl.exp(m_i - base) + tl.sum(p, 1), acc + tl.dot(p.to(v.dtype), v)
        """,
        """
        @triton_jit
        def tile_step(q, k, v, m_i, l_i, acc, allowed, scale):  # NaN for a row that has seen no key yet
            s = tl.where(allowed, tl.dot(q, tl.trans(k)) * scale, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            p = tl.exp(s - m_new[:, None])
            alpha = tl.exp(m_i - m_new)
            return m_new, l_i * alpha + tl.sum(p, 1), acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        """,
        """
        @triton_jit
        def tile_step(q, k, v, m_i, l_i, acc, allowed, scale):  # no running max: exp of the raw scores
            s = tl.where(allowed, tl.dot(q, tl.trans(k)) * scale, float("-inf"))
            p = tl.exp(s)
            return tl.maximum(m_i, tl.max(s, 1)), l_i + tl.sum(p, 1), acc + tl.dot(p.to(v.dtype), v)
        """,
    ],
}

# Right answers written differently from the solution (other idioms, another order of
# operations): each must earn its exercise's full points. Graded as one submission per lesson,
# beside the wrong answers.
RIGHT: dict[str, str] = {
    "merge_answer": """
        def merge_partials(m1, l1, o1, m2, l2, o2):
            m = torch.maximum(m1, m2)
            base = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
            a1, a2 = torch.exp(m1 - base) * l1, torch.exp(m2 - base) * l2
            l = a1 + a2
            num = a1.unsqueeze(-1) * torch.nan_to_num(o1) + a2.unsqueeze(-1) * torch.nan_to_num(o2)
            return m, l, num / torch.where(l == 0, torch.ones_like(l), l).unsqueeze(-1)
    """,
    "tiled_answer": _TILED,
    "score_grad_answer": """
        def tile_score_grad(p, dp, out, grad_out):
            D = torch.einsum("...rd,...rd->...r", grad_out, out)   # dO_i . O_i
            return p * (dp - D.unsqueeze(-1))
    """,
    "triton_answer": """
        @triton_jit
        def tile_step(q, k, v, m_i, l_i, acc, allowed, scale):
            s = tl.sum(q[:, None, :] * k[None, :, :], axis=2) * scale      # no tl.dot
            s = tl.where(allowed, s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, axis=1))
            safe = tl.where(m_new > float("-inf"), m_new, 0.0)
            p = tl.exp(s - safe[:, None])
            correction = tl.exp(m_i - safe)
            acc = acc * correction[:, None] + tl.sum(p[:, :, None] * v[None, :, :], axis=1)
            return m_new, l_i * correction + tl.sum(p, axis=1), acc
    """,
}
