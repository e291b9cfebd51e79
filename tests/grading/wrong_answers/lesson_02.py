"""Lesson 02's wrong answers and right variants (see tests/grading/wrong_answers/__init__.py)."""

from tests.grading.wrong_answers._util import mutate

LESSON = "02_embeddings"

# Right answers in a learner's style, to put single mistakes into.
_ONE_HOT = """
    def one_hot_embed(ids, E):
        V = E.shape[0]
        O = (ids.unsqueeze(-1) == torch.arange(V)).to(E.dtype)
        return O @ E
"""

_TOKEN_POSITION = """
    class TokenPositionEmbedding(nn.Module):
        def __init__(self, vocab_size, n_embd, max_len):
            super().__init__()
            self.max_len = max_len
            self.token_emb = nn.Embedding(vocab_size, n_embd)
            self.pos_emb = nn.Embedding(max_len, n_embd)

        def forward(self, ids):
            T = ids.shape[-1]
            if T > self.max_len:
                raise ValueError(f"sequence of {T} tokens is too long (max_len={self.max_len})")
            return self.token_emb(ids) + self.pos_emb(torch.arange(T))
"""

_SINUSOIDAL = """
    def sinusoidal_pe(seq_len, n_embd, base=10000.0):
        p = torch.arange(seq_len, dtype=torch.float32)[:, None]
        omega = base ** (-torch.arange(0, n_embd, 2, dtype=torch.float32) / n_embd)
        pe = torch.zeros(seq_len, n_embd)
        pe[:, 0::2] = torch.sin(p * omega)
        pe[:, 1::2] = torch.cos(p * omega)
        return pe
"""

_COSINE = """
    def cosine_similarity(a, b, dim=-1, eps=1e-8):
        na = a.norm(dim=dim, keepdim=True).clamp_min(eps)
        nb = b.norm(dim=dim, keepdim=True).clamp_min(eps)
        return (a * b).sum(dim=dim) / (na * nb).squeeze(dim)
"""

# Plausible wrong answers: the mistakes learners make, three or more per exercise.
# The round trip grades the first 5 wrong answers of each exercise (submissions wrong-1 to
# wrong-5); the rest are tried by tools/try_answers.py.
GRADED = 5

WRONG: dict[str, list[str]] = {
    "one_hot_answer": [
        mutate(_ONE_HOT, ".to(E.dtype)", ".float()"),  # a float32 one-hot matrix whatever E's dtype
        mutate(_ONE_HOT, "torch.arange(V)", "torch.arange(V - 1)"),  # no column for the last id
        mutate(_ONE_HOT, "return O @ E", "return O.sum(-1, keepdim=True) * E[ids]"),  # indexes E
        mutate(_ONE_HOT, "return O @ E", "return (O @ E).squeeze()"),  # drops a batch of one
        """
        def one_hot_embed(ids, E):  # flattens the ids and never restores their shape
            O = (ids.reshape(-1, 1) == torch.arange(E.shape[0])).to(E.dtype)
            return O @ E
        """,
        """
        def one_hot_embed(ids, E):  # the built-in one-hot the exercise asks you to build
            return F.one_hot(ids, E.shape[0]).to(E.dtype) @ E
        """,
    ],
    "token_position_answer": [
        mutate(_TOKEN_POSITION, "torch.arange(T)", "torch.arange(1, T + 1)"),  # positions from 1
        mutate(_TOKEN_POSITION, "if T > self.max_len", "if T >= self.max_len"),  # refuses T == max_len
        mutate(_TOKEN_POSITION,  # no check: nn.Embedding raises IndexError
               "            if T > self.max_len:\n                raise ValueError"
               "(f\"sequence of {T} tokens is too long (max_len={self.max_len})\")\n", ""),
        mutate(_TOKEN_POSITION, "T = ids.shape[-1]", "T = ids.shape[1]"),  # only batched ids work
        mutate(_TOKEN_POSITION, "if T > self.max_len", "if len(ids) > self.max_len"),  # the batch size
        mutate(_TOKEN_POSITION,  # an assert, not the ValueError the exercise asks for
               "if T > self.max_len:\n                raise ValueError(",
               "assert T <= self.max_len, (",),
    ],
    "sinusoidal_answer": [
        mutate(_SINUSOIDAL, "torch.arange(0, n_embd, 2, dtype=torch.float32) / n_embd",
               "torch.arange(n_embd // 2, dtype=torch.float32) / n_embd"),  # i/D, not 2i/D
        mutate(_SINUSOIDAL, "base ** (", "10000.0 ** ("),  # ignores the base argument
        mutate(_SINUSOIDAL, "return pe", "return pe.double()"),  # float64, not float32
        "\n    import functools\n\n\n    @functools.lru_cache(maxsize=None)  # one shared table per argument tuple"
        + _SINUSOIDAL.replace("\n    def sinusoidal_pe", "\n    def sinusoidal_pe", 1),
        mutate(_SINUSOIDAL, "torch.arange(seq_len, dtype=torch.float32)",
               "torch.arange(1, seq_len + 1, dtype=torch.float32)"),  # positions from 1, as the notes
        """
        def sinusoidal_pe(seq_len, n_embd, base=10000.0):  # sines in the first half, cosines after
            p = torch.arange(seq_len, dtype=torch.float32)[:, None]
            omega = base ** (-torch.arange(0, n_embd, 2, dtype=torch.float32) / n_embd)
            return torch.cat([torch.sin(p * omega), torch.cos(p * omega)], dim=-1)
        """,
    ],
    "cosine_answer": [
        mutate(_COSINE, "nb = b.norm(dim=dim, keepdim=True).clamp_min(eps)",
               "nb = b.norm(dim=dim, keepdim=True)"),  # only a's norm is clamped
        mutate(_COSINE, "(na * nb).squeeze(dim)",
               "(a.norm(dim=dim) * b.norm(dim=dim)).clamp_min(eps)"),  # clamps the product of norms
        mutate(_COSINE, "(a * b).sum(dim=dim)", "(a * b).sum(dim=-1)"),  # dim ignored in the dot
        """
        def cosine_similarity(a, b, dim=-1, eps=1e-8):  # normalises the caller's tensors in place
            a /= a.norm(dim=dim, keepdim=True).clamp_min(eps)
            b /= b.norm(dim=dim, keepdim=True).clamp_min(eps)
            return (a * b).sum(dim=dim)
        """,
        _COSINE.replace(".clamp_min(eps)", ".clamp_min(1e-8)"),  # always the default eps
        mutate(_COSINE, "na = a.norm", "a, b = a.double(), b.double()\n        na = a.norm"),  # float64 out
        """
        def cosine_similarity(a, b, dim=-1, eps=1e-8):  # no eps: 0 / 0 for a zero vector
            return (a * b).sum(dim) / (a.norm(dim=dim) * b.norm(dim=dim))
        """,
        """
        def cosine_similarity(a, b, dim=-1, eps=1e-8):  # the cosine distance, 1 - cos
            na = a.norm(dim=dim, keepdim=True).clamp_min(eps)
            nb = b.norm(dim=dim, keepdim=True).clamp_min(eps)
            return 1 - ((a / na) * (b / nb)).sum(dim=dim)
        """,
    ],
}

# Right answers written differently from the solution: each must earn full points.
RIGHT: dict[str, str] = {
    # idiom: postponed annotations, einsum
    "one_hot_answer": """
        from __future__ import annotations

        def one_hot_embed(ids: torch.Tensor, E: torch.Tensor) -> torch.Tensor:
            eye = torch.eye(E.shape[0], dtype=E.dtype)      # row v of the identity is v's one-hot
            return torch.einsum("...v,vd->...d", eye[ids], E)
    """,
    # idiom: typing.Final, a forward parameter named input
    "token_position_answer": """
        from typing import Final

        class TokenPositionEmbedding(nn.Module):
            TOO_LONG: Final = "the sequence is too long: {} tokens, max_len is {}"

            def __init__(self, vocab_size: int, n_embd: int, max_len: int) -> None:
                super().__init__()
                self.max_len = max_len
                self.token_emb = nn.Embedding(vocab_size, n_embd)
                self.pos_emb = nn.Embedding(max_len, n_embd)

            def forward(self, input: torch.Tensor) -> torch.Tensor:  # PyTorch's name for it
                *_, T = input.shape
                if not T <= self.max_len:
                    raise ValueError(self.TOO_LONG.format(T, self.max_len))
                return self.token_emb.weight[input] + self.pos_emb.weight[:T]
    """,
    # idiom: functools.lru_cache on a private helper
    "sinusoidal_answer": """
        from functools import lru_cache


        @lru_cache(maxsize=None)
        def _inverse_frequency(i: int, n_embd: int, base: float) -> float:
            return base ** (-2 * i / n_embd)


        def sinusoidal_pe(seq_len, n_embd, base=10000.0):
            rows = []
            for p in range(seq_len):
                row = []
                for i in range(n_embd // 2):
                    angle = p * _inverse_frequency(i, n_embd, base)  # Python floats: float64
                    row += [math.sin(angle), math.cos(angle)]
                rows.append(row)
            return torch.tensor(rows, dtype=torch.float32)
    """,
    # idiom: import torch.linalg as LA, operator
    "cosine_answer": """
        import operator

        import torch.linalg as LA

        def cosine_similarity(a, b, dim=-1, eps=1e-8):
            def length(x):
                return LA.vector_norm(x, dim=dim, keepdim=True).clamp(min=eps)
            return operator.mul(a / length(a), b / length(b)).sum(dim)
    """,
}

# RIGHT answers written with an idiom careful people use: the answer policy must let each one
# through (tests/grader/test_answer_policy.py counts them).
IDIOMS: dict[str, str] = {
    "one_hot_answer": "postponed annotations, einsum",
    "token_position_answer": "typing.Final, a forward parameter named input",
    "sinusoidal_answer": "functools.lru_cache on a private helper",
    "cosine_answer": "import torch.linalg as LA, operator",
}
