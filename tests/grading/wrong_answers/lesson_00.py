"""Lesson 00's wrong answers and right variants (see tests/grading/wrong_answers/__init__.py)."""

from tests.grading.wrong_answers._util import mutate

LESSON = "00_setup"

# Right answers in a learner's style, to put single mistakes into.
_SOFTMAX = """
    def stable_softmax(x, dim=-1):
        shifted = x - x.amax(dim=dim, keepdim=True)
        exps = torch.exp(shifted)
        return exps / exps.sum(dim=dim, keepdim=True)
"""

_CROSS_ENTROPY = """
    def cross_entropy(logits, targets):
        m = logits.amax(dim=-1, keepdim=True)
        lse = m.squeeze(-1) + torch.log(torch.exp(logits - m).sum(dim=-1))
        correct = logits[torch.arange(logits.shape[0]), targets]
        return (lse - correct).mean()
"""

# Plausible wrong answers: the mistakes learners make, at least three per exercise. The k-th
# wrong answer of every exercise of a lesson share one submission (exercises are graded
# independently), and each must lose at least one of its exercise's points.
# The round trip grades the first 4 wrong answers of each exercise (submissions wrong-1 to
# wrong-4); the rest are tried by tools/try_answers.py.
GRADED = 4

WRONG: dict[str, list[str]] = {
    "softmax_answer": [
        """
        def stable_softmax(x, dim=-1):  # no shift: exp overflows for scores near 1000
            exps = torch.exp(x)
            return exps / exps.sum(dim=dim, keepdim=True)
        """,
        mutate(_SOFTMAX, "x.amax(dim=dim, keepdim=True)", "x.max()"),  # the max of the whole tensor
        mutate(_SOFTMAX, "exps.sum(dim=dim, keepdim=True)", "exps.sum(dim=-1, keepdim=True)"),  # sums the last dim
        mutate(_SOFTMAX, "return exps / exps.sum(dim=dim, keepdim=True)",
               "return (exps / exps.sum(dim=dim, keepdim=True)).squeeze()"),  # drops dims of size 1
        mutate(_SOFTMAX, "shifted = x - ", "x = x.float()\n        shifted = x - "),  # float32 for float64
        """
        def stable_softmax(x, dim=-1):  # shifts x in place: the caller's tensor changes
            x -= x.amax(dim=dim, keepdim=True)
            exps = x.exp()
            return exps / exps.sum(dim=dim, keepdim=True)
        """,
        """
        def stable_softmax(x, dim=-1):  # float64 instead of a shift: still overflows past 709
            exps = torch.exp(x.double())
            return (exps / exps.sum(dim=dim, keepdim=True)).to(x.dtype)
        """,
    ],
    "cross_entropy_answer": [
        """
        def cross_entropy(logits, targets):  # log of the softmax: log 0 = -inf for extreme logits
            probs = stable_softmax(logits, dim=-1)
            return -torch.log(probs[torch.arange(len(targets)), targets]).mean()
        """,
        mutate(_CROSS_ENTROPY, "(lse - correct).mean()", "(lse - correct).sum()"),  # sum, not mean
        """
        def cross_entropy(logits, targets):  # log-sum-exp without the max: overflows
            lse = torch.log(torch.exp(logits).sum(dim=-1))
            return (lse - logits[torch.arange(len(targets)), targets]).mean()
        """,
        mutate(_CROSS_ENTROPY, "m = logits.amax(dim=-1, keepdim=True)",
               "logits = logits.squeeze()\n        m = logits.amax(dim=-1, keepdim=True)"),  # (1, C) becomes (C,)
        mutate(_CROSS_ENTROPY, "m = logits.amax(dim=-1, keepdim=True)",
               "logits = logits.float()\n        m = logits.amax(dim=-1, keepdim=True)"),  # float32 result
        """
        def cross_entropy(logits, targets):  # subtracts the max in place: the caller's logits change
            m = logits.amax(dim=-1, keepdim=True)
            logits -= m
            lse = torch.log(torch.exp(logits).sum(dim=-1))
            return (lse - logits[torch.arange(len(targets)), targets]).mean()
        """,
        mutate(_CROSS_ENTROPY, "logits.amax(dim=-1, keepdim=True)", "logits.max()"),  # one max for all rows
    ],
}

# Right answers written differently from the solution: each must earn its exercise's full points.
RIGHT: dict[str, str] = {
    # idiom: a %timeit line left in, postponed annotations, a warning (stderr) in a hidden test
    "softmax_answer": """
        from __future__ import annotations
        import warnings

        def stable_softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
            if x.dtype == torch.float64:
                warnings.warn("stable_softmax: float64 input, float64 output", stacklevel=2)
            moved = torch.movedim(x, dim, -1)                   # the normalised axis last
            top = torch.max(moved, dim=-1, keepdim=True).values
            e = torch.exp(torch.sub(moved, top))
            return torch.movedim(e / torch.sum(e, dim=-1, keepdim=True), -1, dim)

        %timeit -n 1 -r 1 stable_softmax(torch.randn(4, 8))
    """,
    # idiom: typing.Final, type(x).__name__ in an error, a __main__ self-check, `import __main__`
    # in a helper, a log line and a print to stderr on every call
    "cross_entropy_answer": """
        import logging
        import sys
        from typing import Final

        import __main__

        log = logging.getLogger("my_cross_entropy")

        def _in_notebook() -> bool:
            return not hasattr(__main__, "__file__")

        def cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
            if not isinstance(logits, torch.Tensor):
                raise TypeError(f"logits must be a tensor, not {type(logits).__name__}")
            log.warning("cross_entropy on %d rows (notebook: %s)", logits.shape[0], _in_notebook())
            print(f"cross_entropy: logits of shape {tuple(logits.shape)}", file=sys.stderr)
            ROWS: Final = -1
            total = torch.zeros((), dtype=logits.dtype)
            for row, target in zip(logits, targets.tolist()):   # one row at a time
                top = torch.max(row)
                lse = top + torch.log(torch.sum(torch.exp(row - top), dim=ROWS))
                total = total + (lse - row[target])
            return total / logits.shape[0]

        if __name__ == "__main__":  # a quick self-check against PyTorch's loss
            _logits, _targets = torch.randn(3, 5), torch.tensor([0, 4, 2])
            assert torch.allclose(cross_entropy(_logits, _targets), F.cross_entropy(_logits, _targets))
    """,
}

# RIGHT answers written with an idiom careful people use: the answer policy must let each one
# through (tests/grader/test_answer_policy.py counts them).
IDIOMS: dict[str, str] = {
    "softmax_answer": "a %timeit line left in, postponed annotations, warnings.warn",
    "cross_entropy_answer": "typing.Final, type(x).__name__ in an error, a __main__ self-check, "
                            "import __main__ in a helper, logging and print to stderr",
}
