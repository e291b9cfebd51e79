"""Lesson 09's wrong answers and right variants (see tests/grading/wrong_answers/__init__.py)."""

from tests.grading.wrong_answers._util import mutate

LESSON = "09_decoding"

# Right answers in a learner's style, to put single mistakes into.
_GREEDY = """
    def greedy_decode(model, idx, max_new_tokens):
        out = idx
        with torch.no_grad():
            for _ in range(max_new_tokens):
                logits, _ = model(out[:, -model.config.block_size:])
                nxt = logits[:, -1, :].argmax(dim=-1)
                out = torch.cat([out, nxt[:, None]], dim=1)
        return out
"""

_BEAM = """
    def beam_decode(model, idx, max_new_tokens, beam_width):
        if beam_width < 1:
            raise ValueError("beam_width must be >= 1")
        beams = idx
        scores = torch.zeros(1, dtype=torch.float64)
        with torch.no_grad():
            for _ in range(max_new_tokens):
                logits, _ = model(beams[:, -model.config.block_size:])
                logp = torch.log_softmax(logits[:, -1, :].double(), dim=-1)
                V = logp.shape[-1]
                total = (scores[:, None] + logp).reshape(-1)
                scores, flat = total.topk(min(beam_width, total.numel()))
                beams = torch.cat([beams[flat // V], (flat % V)[:, None]], dim=1)
        return beams[:1], float(scores[0])
"""

_TOP_K = """
    def keep_top_k(logits, k):
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError("k must be an integer >= 1")
        k = min(k, logits.shape[-1])
        kth = logits.sort(dim=-1, descending=True).values[..., k - 1:k]
        return torch.where(logits >= kth, logits, torch.full_like(logits, float("-inf")))
"""

_TOP_P = """
    def keep_top_p(logits, p):
        if not 0 < p <= 1:
            raise ValueError("p must be in (0, 1]")
        probs, order = logits.softmax(dim=-1).sort(dim=-1, descending=True)
        before = probs.cumsum(dim=-1) - probs
        drop_sorted = before >= p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        return logits.masked_fill(drop, float("-inf"))
"""

_SAMPLE = """
    def sample_next(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
        if temperature <= 0:
            raise ValueError("temperature must be > 0; T -> 0 is greedy decoding")
        logits = logits / temperature
        if top_k is not None:
            logits = top_k_filter(logits, top_k)
        if top_p is not None:
            logits = top_p_filter(logits, top_p)
        probs = logits.double().softmax(dim=-1)
        u = torch.rand(logits.shape[0], generator=generator, dtype=torch.float64)
        upper = probs.cumsum(dim=-1)
        token = (upper <= u[:, None]).sum(dim=-1)
        last = probs.shape[-1] - 1 - (probs > 0).flip(-1).long().argmax(dim=-1)
        return torch.minimum(token, last)
"""

# Plausible wrong answers: the mistakes learners make. The k-th wrong answer of every exercise
# of a lesson share one submission (exercises are graded independently), and each must lose at
# least one of its exercise's points.
# The round trip grades the first 7 wrong answers of each exercise (submissions wrong-1 to
# wrong-7); the rest are tried by tools/try_answers.py.
GRADED = 7

WRONG: dict[str, list[str]] = {
    "greedy_answer": [
        mutate(_GREEDY, "out[:, -model.config.block_size:]", "out"),  # never crops the context
        """
        def greedy_decode(model, idx, max_new_tokens):  # ties go to the LARGEST id (>= in the loop)
            out = idx
            with torch.no_grad():
                for _ in range(max_new_tokens):
                    logits, _ = model(out[:, -model.config.block_size:])
                    picks = []
                    for row in logits[:, -1, :]:
                        best = 0
                        for v in range(row.shape[0]):
                            if row[v] >= row[best]:
                                best = v
                        picks.append(best)
                    out = torch.cat([out, torch.tensor(picks)[:, None]], dim=1)
            return out
        """,
        mutate(_GREEDY, "-model.config.block_size:", "-model.config.block_size + 1:"),  # crops 1 too many
        mutate(_GREEDY, "range(max_new_tokens)", "range(max(max_new_tokens, 1))"),  # 0 -> 1 token
        mutate(_GREEDY, "logits[:, -1, :].argmax(dim=-1)", "logits[:, -1, :].argmin(dim=-1)"),  # argmin
    ],
    "beam_answer": [
        """
        def beam_decode(model, idx, max_new_tokens, beam_width):  # b parallel greedy searches
            if beam_width < 1:
                raise ValueError("beam_width must be >= 1")
            beams, scores = idx, torch.zeros(1, dtype=torch.float64)
            with torch.no_grad():
                for step in range(max_new_tokens):
                    logits, _ = model(beams[:, -model.config.block_size:])
                    logp = torch.log_softmax(logits[:, -1, :].double(), dim=-1)
                    if step == 0:  # the b best first tokens, then each beam its best next token
                        scores, tok = logp[0].topk(min(beam_width, logp.shape[-1]))
                        beams = beams.expand(len(tok), -1)
                    else:
                        best, tok = logp.max(dim=-1)
                        scores = scores + best
                    beams = torch.cat([beams, tok[:, None]], dim=1)
            best = int(scores.argmax())
            return beams[best:best + 1], float(scores[best])
        """,
        mutate(_BEAM, "logits[:, -1, :].double()", "logits[:, -1, :].float()").replace(
            "scores = torch.zeros(1, dtype=torch.float64)", "scores = torch.zeros(1)"
        ),  # float32 scores, the contract asks float64
        mutate(_BEAM, "total.topk(min(beam_width, total.numel()))", "total.topk(beam_width)"),  # width > V
        mutate(_BEAM, "beams[:, -model.config.block_size:]", "beams"),  # never crops the context
        mutate(_BEAM, "scores[:, None] + logp", "logp"),  # scores only the new token, not the prefix
        mutate(_BEAM, "        if beam_width < 1:\n            raise ValueError(\"beam_width must be >= 1\")\n",
               ""),  # no check of the width
    ],
    "top_k_answer": [
        mutate(
            _TOP_K,
            "kth = logits.sort(dim=-1, descending=True).values[..., k - 1:k]\n"
            "        return torch.where(logits >= kth, logits, torch.full_like(logits, float(\"-inf\")))",
            "idx = logits.topk(k, dim=-1).indices\n"
            "        keep = torch.zeros_like(logits, dtype=torch.bool).scatter(-1, idx, True)\n"
            "        return logits.masked_fill(~keep, float(\"-inf\"))",
        ),  # exactly k tokens: drops logits tied with the k-th largest
        mutate(
            _TOP_K,
            "return torch.where(logits >= kth, logits, torch.full_like(logits, float(\"-inf\")))",
            "logits[logits < kth] = float(\"-inf\")\n        return logits",
        ),  # modifies the input in place
        mutate(_TOP_K, "torch.full_like(logits, float(\"-inf\"))",
               "torch.full(logits.shape, float(\"-inf\"))").replace(
            "torch.where(logits >= kth, logits,", "torch.where(logits >= kth, logits.float(),"
        ),  # float32 output whatever the input dtype
        mutate(_TOP_K, "        k = min(k, logits.shape[-1])\n",
               "        if k >= logits.shape[-1]:\n            return logits  # nothing to filter\n"),
        mutate(_TOP_K, "        k = min(k, logits.shape[-1])\n", ""),  # k >= V raises
        mutate(_TOP_K, "isinstance(k, bool) or not isinstance(k, int) or k < 1",
               "k < 1"),  # k = 2.5 is not refused
    ],
    "top_p_answer": [
        mutate(_TOP_P, "before >= p", "before > p"),  # at exactly p keeps one token too many
        """
        def keep_top_p(logits, p):  # keeps every token tied with the last one needed
            if not 0 < p <= 1:
                raise ValueError("p must be in (0, 1]")
            probs = logits.softmax(dim=-1)
            sorted_p = probs.sort(dim=-1, descending=True).values
            need = ((sorted_p.cumsum(dim=-1) - sorted_p) < p).sum(dim=-1, keepdim=True)
            threshold = sorted_p.gather(-1, need - 1)
            return logits.masked_fill(probs < threshold, float("-inf"))
        """,
        mutate(_TOP_P, "return logits.masked_fill(drop, float(\"-inf\"))",
               "logits[drop] = float(\"-inf\")\n        return logits"),  # modifies the input
        mutate(_TOP_P, '            raise ValueError("p must be in (0, 1]")\n',
               '            raise ValueError("p must be in (0, 1]")\n        if p == 1:\n            return logits  # keeps everything\n'),
        mutate(_TOP_P, "return logits.masked_fill(drop", "return logits.float().masked_fill(drop"),  # float32 whatever the input
        mutate(_TOP_P, "before >= p", "probs.cumsum(dim=-1) > p"),  # the notes' rule (below p only)
        mutate(_TOP_P, "if not 0 < p <= 1:", "if not 0 <= p <= 1:"),  # p = 0 accepted
    ],
    "sample_answer": [
        mutate(_SAMPLE, "probs = logits.double().softmax(dim=-1)",
               "probs = logits.softmax(dim=-1).double()"),  # the softmax in float32
        """
        def sample_next(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
            if temperature <= 0:  # torch.multinomial: the right distribution, not the intervals
                raise ValueError("temperature must be > 0; T -> 0 is greedy decoding")
            logits = logits / temperature
            if top_k is not None:
                logits = top_k_filter(logits, top_k)
            if top_p is not None:
                logits = top_p_filter(logits, top_p)
            probs = logits.double().softmax(dim=-1)
            return torch.multinomial(probs, 1, generator=generator)[:, 0]
        """,
        mutate(
            mutate(_SAMPLE, "        logits = logits / temperature\n", ""),
            "probs = logits.double().softmax(dim=-1)",
            "probs = (logits / temperature).double().softmax(dim=-1)",
        ),  # the temperature after the filters
        mutate(_SAMPLE, "if temperature <= 0:", "if temperature < 0:"),  # T = 0 divides by zero
        mutate(_SAMPLE, "return torch.minimum(token, last)", "return torch.minimum(token, last).int()"),  # int32 ids
        mutate(_SAMPLE, "logits = logits / temperature", "logits /= temperature"),  # divides the caller's logits
        mutate(_SAMPLE, "return torch.minimum(token, last)", "return torch.minimum(token, last).squeeze()"),  # () for B = 1
        mutate(
            _SAMPLE,
            "        upper = probs.cumsum(dim=-1)\n"
            "        token = (upper <= u[:, None]).sum(dim=-1)\n"
            "        last = probs.shape[-1] - 1 - (probs > 0).flip(-1).long().argmax(dim=-1)\n"
            "        return torch.minimum(token, last)",
            "        sorted_p, order = probs.sort(dim=-1, descending=True)\n"
            "        pos = (sorted_p.cumsum(dim=-1) <= u[:, None]).sum(dim=-1)\n"
            "        pos = pos.clamp_max(probs.shape[-1] - 1)\n"
            "        return order.gather(-1, pos[:, None])[:, 0]",
        ),  # intervals in order of probability, not of token id
        mutate(
            _SAMPLE,
            "        if top_k is not None:\n"
            "            logits = top_k_filter(logits, top_k)\n"
            "        if top_p is not None:\n"
            "            logits = top_p_filter(logits, top_p)\n",
            "        if top_p is not None:\n"
            "            logits = top_p_filter(logits, top_p)\n"
            "        if top_k is not None:\n"
            "            logits = top_k_filter(logits, top_k)\n",
        ),  # top-p before top-k
        mutate(_SAMPLE, "u = torch.rand(logits.shape[0], generator=generator, dtype=torch.float64)",
               "u = torch.rand(logits.shape[0], dtype=torch.float64)"),  # ignores the generator
    ],
}

# Right answers in other styles: each must keep full marks.
RIGHT: dict[str, str] = {
    # idiom: postponed annotations, torch.inference_mode
    "greedy_answer": """
        from __future__ import annotations


        def greedy_decode(model, idx: torch.Tensor, max_new_tokens: int) -> torch.Tensor:
            rows = [list(map(int, r)) for r in idx]  # plain lists; the smallest id wins ties
            window = model.config.block_size
            with torch.inference_mode():
                for _ in range(max_new_tokens):
                    x = torch.tensor([r[-window:] for r in rows], dtype=idx.dtype)
                    last = model(x)[0][:, -1, :].tolist()
                    for r, scores in zip(rows, last):
                        r.append(min(range(len(scores)), key=lambda v: (-scores[v], v)))
            return torch.tensor(rows, dtype=idx.dtype).reshape(idx.shape[0], -1)
    """,
    # idiom: a frozen dataclass, heapq, a generator
    "beam_answer": """
        import heapq
        from dataclasses import dataclass


        @dataclass(frozen=True)
        class Beam:
            score: float
            tokens: tuple


        def beam_decode(model, idx, max_new_tokens, beam_width):
            if not beam_width >= 1:
                raise ValueError(f"beam_width must be >= 1, got {beam_width}")
            beams = [Beam(0.0, tuple(idx[0].tolist()))]
            window = model.config.block_size
            for _ in range(max_new_tokens):
                x = torch.tensor([b.tokens[-window:] for b in beams])
                with torch.no_grad():
                    logp = torch.log_softmax(model(x)[0][:, -1].to(torch.float64), dim=-1)
                candidates = (
                    Beam(b.score + float(lp), b.tokens + (v,))
                    for b, row in zip(beams, logp)
                    for v, lp in enumerate(row)
                )
                beams = heapq.nlargest(beam_width, candidates, key=lambda b: b.score)
            return torch.tensor([beams[0].tokens], dtype=idx.dtype), beams[0].score
    """,
    # idiom: numbers
    "top_k_answer": """
        import numbers


        def keep_top_k(logits, k):
            if not isinstance(k, numbers.Integral) or isinstance(k, bool) or k < 1:
                raise ValueError(f"k must be an integer >= 1, got {k!r}")
            if k >= logits.shape[-1]:
                return logits.clone()
            kth = logits.kthvalue(logits.shape[-1] - k + 1, dim=-1, keepdim=True).values
            out = logits.clone()
            out[out < kth] = -math.inf
            return out
    """,
    "top_p_answer": """
        def keep_top_p(logits, p):  # HF style: drop from the least probable end while <= 1 - p
            if not (0 < p <= 1):
                raise ValueError(f"p must be in (0, 1], got {p}")
            flat = logits.reshape(-1, logits.shape[-1])
            out = flat.clone()
            for r in range(flat.shape[0]):
                probs = flat[r].softmax(-1)
                ascending = probs.argsort()
                tail = 0.0
                for j in ascending[:-1].tolist():
                    tail += float(probs[j])
                    if tail > 1 - p + 1e-12:
                        break
                    out[r, j] = -math.inf
            return out.reshape(logits.shape)
    """,
    # idiom: typing.Optional, postponed annotations
    "sample_answer": """
        from __future__ import annotations

        from typing import Optional


        def sample_next(
            logits: torch.Tensor,
            temperature: float = 1.0,
            top_k: Optional[int] = None,
            top_p: Optional[float] = None,
            generator: Optional[torch.Generator] = None,
        ) -> torch.Tensor:
            if not temperature > 0:
                raise ValueError("temperature must be positive (greedy decoding is T -> 0)")
            z = logits / temperature
            z = z if top_k is None else top_k_filter(z, top_k)
            z = z if top_p is None else top_p_filter(z, top_p)
            probs = torch.softmax(z.to(torch.float64), dim=-1)
            u = torch.rand(z.shape[0], generator=generator, dtype=torch.float64)
            cdf = probs.cumsum(-1)
            token = torch.searchsorted(cdf, u[:, None], right=True)[:, 0]
            last = torch.stack([row.nonzero().max() for row in probs])
            return torch.minimum(token, last)
    """,
}

# RIGHT answers written with an idiom careful people use: the answer policy must let each one
# through (tests/grader/test_answer_policy.py counts them).
IDIOMS: dict[str, str] = {
    "greedy_answer": "postponed annotations, torch.inference_mode",
    "beam_answer": "a frozen dataclass, heapq, a generator",
    "top_k_answer": "numbers",
    "sample_answer": "typing.Optional, postponed annotations",
}
