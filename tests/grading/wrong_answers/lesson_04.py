"""Lesson 04's wrong answers and right variants (see tests/grading/wrong_answers/__init__.py)."""

from tests.grading.wrong_answers._util import mutate

LESSON = "04_attention_variants"

# Right answers in a learner's style, to put single mistakes into.
_GQA_FOLD = """
    def grouped_query_attention(q, k, v, mask=None):
        B, H, Tq, d = q.shape
        G, Tk = k.shape[1], k.shape[2]
        if H % G != 0:
            raise ValueError("G must divide H")
        r = H // G
        scores = q.reshape(B, G, r * Tq, d) @ k.transpose(-2, -1) / math.sqrt(d)
        scores = scores.reshape(B, H, Tq, Tk)
        if mask is not None:
            if mask.dtype == torch.bool:
                scores = scores.masked_fill(~mask, float("-inf"))
            else:
                scores = scores + mask
        w = torch.softmax(scores, dim=-1)
        w = torch.where(torch.isneginf(scores).all(-1, keepdim=True), torch.zeros_like(w), w)
        w = w.reshape(B, G, r * Tq, Tk)
        return (w @ v).reshape(B, H, Tq, v.shape[-1])
"""

_KV = """
    def kv_cache_bytes(n_layer, n_kv_head, head_size, bytes_per_value=2, n_tokens=1):
        if n_layer < 1 or n_kv_head < 1 or head_size < 1 or n_tokens < 0:
            raise ValueError("bad arguments")
        return 2 * n_layer * n_kv_head * head_size * bytes_per_value * n_tokens
"""

_LOCAL = """
    def local_mask(T, c):
        if not isinstance(c, int) or c < 1 or c % 2 == 0:
            raise ValueError("c must be positive and odd")
        i = torch.arange(T)
        return (i[:, None] - i[None, :]).abs() <= (c - 1) // 2
"""

_COVER = """
    def head_block_masks(T, n_blocks, n_head):
        if n_blocks < 1 or T % n_blocks != 0:
            raise ValueError("n_blocks must divide T")
        if n_head < n_blocks:
            raise ValueError("too few heads")
        block = torch.arange(T) // (T // n_blocks)
        masks = []
        for h in range(n_head):
            perm = torch.tensor([(b + h) % n_blocks for b in range(n_blocks)])
            masks.append(perm[block][:, None] == block[None, :])
        return torch.stack(masks)
"""

_BANDED = """
    def banded_attention(q, k, v, c):
        T, d = q.shape[-2], q.shape[-1]
        r = (c - 1) // 2
        b = 32
        outs = []
        for s in range(0, T, b):
            e = min(s + b, T)
            lo, hi = max(s - r, 0), min(e + r, T)
            scores = q[..., s:e, :] @ k[..., lo:hi, :].transpose(-2, -1) / math.sqrt(d)
            i = torch.arange(s, e)[:, None]
            j = torch.arange(lo, hi)[None, :]
            scores = scores.masked_fill((i - j).abs() > r, float("-inf"))
            outs.append(torch.softmax(scores, dim=-1) @ v[..., lo:hi, :])
        return torch.cat(outs, dim=-2)
"""

_LINFORMER = """
    def linformer_attention(q, k, v, E, F):
        scores = q @ (E @ k).transpose(-2, -1) / math.sqrt(q.shape[-1])
        return torch.softmax(scores, dim=-1) @ (F @ v)
"""

# Plausible wrong answers: the mistakes learners make. The k-th wrong answer of every exercise
# of a lesson share one submission (exercises are graded independently), and each must lose at
# least one of its exercise's points.
# The round trip grades the first 5 wrong answers of each exercise (submissions wrong-1 to
# wrong-5); the rest are tried by tools/try_answers.py.
GRADED = 5

WRONG: dict[str, list[str]] = {
    "gqa_shared_answer": [
        """
        def grouped_query_attention(q, k, v, mask=None):  # right values, but copies K and V per head
            H, G = q.shape[-3], k.shape[-3]
            if H % G != 0:
                raise ValueError("G must divide H")
            k = k.repeat_interleave(H // G, dim=-3)
            v = v.repeat_interleave(H // G, dim=-3)
            scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
            if mask is not None:
                if mask.dtype == torch.bool:
                    scores = scores.masked_fill(~mask, float("-inf"))
                else:
                    scores = scores + mask
            return torch.softmax(scores, dim=-1) @ v
        """,
        """
        def grouped_query_attention(q, k, v, mask=None):  # broadcasting matmul: copies k per head
            B, H, Tq, d = q.shape
            G = k.shape[1]
            if H % G != 0:
                raise ValueError("G must divide H")
            q5 = q.reshape(B, G, H // G, Tq, d)
            scores = q5 @ k.unsqueeze(2).transpose(-2, -1) / math.sqrt(d)
            scores = scores.reshape(B, H, Tq, -1)
            if mask is not None:
                if mask.dtype == torch.bool:
                    scores = scores.masked_fill(~mask, float("-inf"))
                else:
                    scores = scores + mask
            w = torch.softmax(scores, dim=-1).reshape(B, G, H // G, Tq, -1)
            return (w @ v.unsqueeze(2)).reshape(B, H, Tq, -1)
        """,
        # groups the query heads as h % G (strided) instead of h // (H // G) (consecutive)
        mutate(_GQA_FOLD, "scores = q.reshape(B, G, r * Tq, d) @",
               "scores = q.reshape(B, r, G, Tq, d).transpose(1, 2).reshape(B, G, r * Tq, d) @"),
        # softmax alone: NaN for a row whose mask blocks every key (lesson 03 gives zeros)
        mutate(_GQA_FOLD, """        w = torch.where(torch.isneginf(scores).all(-1, keepdim=True), torch.zeros_like(w), w)
""", ""),
        # computes in float64 "for accuracy" and returns float64 for float32 inputs
        mutate(_GQA_FOLD, "B, H, Tq, d = q.shape\n", "B, H, Tq, d = q.shape\n        q, k, v = q.double(), k.double(), v.double()\n"),
        mutate(_GQA_FOLD, "/ math.sqrt(d)", "/ math.sqrt(v.shape[-1])"),  # scales by v's width
        mutate(_GQA_FOLD, """        if H % G != 0:
            raise ValueError("G must divide H")
""", ""),  # no ValueError: the reshape fails with a RuntimeError
        """
        def grouped_query_attention(q, k, v, mask=None):  # loops heads, but one mask for all heads
            H, G = q.shape[-3], k.shape[-3]
            if H % G != 0:
                raise ValueError("G must divide H")
            outs = []
            for h in range(H):
                g = h // (H // G)
                s = q[:, h] @ k[:, g].transpose(-2, -1) / math.sqrt(q.shape[-1])
                if mask is not None:
                    m = mask if mask.dim() <= 2 else mask.reshape(-1, *mask.shape[-2:])[0]
                    s = s.masked_fill(~m, float("-inf")) if m.dtype == torch.bool else s + m
                outs.append(torch.softmax(s, dim=-1) @ v[:, g])
            return torch.stack(outs, dim=1)
        """,
    ],
    "kv_bytes_answer": [
        mutate(_KV, "return 2 * n_layer", "return n_layer"),  # counts the keys only, not K and V
        mutate(_KV, "return 2 * n_layer * ", "return 2 * "),  # one layer's cache, not all layers
        mutate(_KV, "or n_tokens < 0", "or n_tokens < 1"),  # zero tokens raise instead of 0 bytes
        mutate(_KV, "if n_layer < 1 or n_kv_head < 1 or head_size < 1 or n_tokens < 0:",
               "if not (n_layer and n_kv_head and head_size) or n_tokens < 0:"),  # truthiness: -2 layers pass
        mutate(_KV, "bytes_per_value=2", "bytes_per_value=4"),  # float32 default, not bfloat16
        mutate(_KV, "* n_tokens\n", "* n_tokens / 1\n"),  # a float number of bytes
        mutate(_KV, " or n_tokens < 0", ""),  # a negative number of tokens is accepted
    ],
    "local_mask_answer": [
        mutate(_LOCAL, "<= (c - 1) // 2", "< (c - 1) // 2"),  # off by one: the window's ends left out
        mutate(_LOCAL, "(i[:, None] - i[None, :]).abs() <= (c - 1) // 2",
               "(i[:, None] >= i[None, :]) & (i[:, None] - i[None, :] <= (c - 1) // 2)"),  # causal
        mutate(_LOCAL, "c < 1 or c % 2 == 0", "c < 1"),  # an even window is accepted
        mutate(_LOCAL, "not isinstance(c, int) or ", ""),  # no type check: c = 3.0 accepted
        "\n    import functools\n\n\n    @functools.lru_cache(maxsize=None)  # one shared tensor per argument tuple" + _LOCAL,
        mutate(_LOCAL, "<= (c - 1) // 2", "<= c"),  # c read as the radius, not the width
        mutate(_LOCAL, "return (i[:, None] - i[None, :]).abs() <= (c - 1) // 2",
               "return ((i[:, None] - i[None, :]).abs() <= (c - 1) // 2).float()"),  # not bool
    ],
    "block_cover_answer": [
        """
        def head_block_masks(T, n_blocks, n_head):  # the notes' A, B, C: identity, then swaps
            if n_blocks < 1 or T % n_blocks != 0:
                raise ValueError("n_blocks must divide T")
            if n_head < n_blocks:
                raise ValueError("too few heads")
            block = torch.arange(T) // (T // n_blocks)
            masks = []
            for h in range(n_head):
                perm = list(range(n_blocks))
                if 0 < h < n_blocks:
                    perm[h - 1], perm[h] = perm[h], perm[h - 1]
                perm = torch.tensor(perm)
                masks.append(perm[block][:, None] == block[None, :])
            return torch.stack(masks)
        """,
        mutate(_COVER, "(b + h) % n_blocks", "b"),  # every head the same (identity) permutation
        mutate(_COVER, "(b + h) % n_blocks", "(b + h) % n_head"),  # shifts mod n_head: not a perm
        "\n    import functools\n\n\n    @functools.lru_cache(maxsize=None)  # one shared tensor per argument tuple" + _COVER,
        mutate(_COVER, "block = torch.arange(T) // (T // n_blocks)",
               "block = torch.arange(T) // T"),  # the notes' divisor T: every position in block 0
        mutate(_COVER, """        if n_head < n_blocks:
            raise ValueError("too few heads")
""", ""),  # too few heads return masks that do not cover everything
        mutate(_COVER, "return torch.stack(masks)", "return torch.stack(masks).float()"),  # not bool
    ],
    "banded_answer": [
        """
        def banded_attention(q, k, v, c):  # dense attention under the mask: T x T scores
            T = q.shape[-2]
            i = torch.arange(T)
            mask = (i[:, None] - i[None, :]).abs() <= (c - 1) // 2
            scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
            return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1) @ v
        """,
        """
        def banded_attention(q, k, v, c):  # blocks of queries against all the keys: still quadratic
            T, d = q.shape[-2], q.shape[-1]
            r = (c - 1) // 2
            j = torch.arange(T)[None, :]
            outs = []
            for s in range(0, T, 32):
                e = min(s + 32, T)
                scores = q[..., s:e, :] @ k.transpose(-2, -1) / math.sqrt(d)
                i = torch.arange(s, e)[:, None]
                scores = scores.masked_fill((i - j).abs() > r, float("-inf"))
                outs.append(torch.softmax(scores, dim=-1) @ v)
            return torch.cat(outs, dim=-2)
        """,
        mutate(_BANDED, "min(e + r, T)", "min(e + r - 1, T)"),  # the keys after a block cut one short
        # scales the caller's q in place, block by block, through views
        mutate(_BANDED, "scores = q[..., s:e, :] @", "q[..., s:e, :] /= math.sqrt(d)\n            scores = q[..., s:e, :] @")
        .replace(" / math.sqrt(d)\n            i =", "\n            i ="),
        # slices dim 1, the sequence only when there is one batch dim
        mutate(_BANDED, "q[..., s:e, :] @ k[..., lo:hi, :]", "q[:, s:e] @ k[:, lo:hi]")
        .replace("@ v[..., lo:hi, :]", "@ v[:, lo:hi]"),
        mutate(_BANDED, " / math.sqrt(d)", ""),  # no 1/sqrt(d) scale
        mutate(_BANDED, "lo, hi = max(s - r, 0), min(e + r, T)",
               "lo, hi = s - r, min(e + r, T)"),  # window not clipped at 0: slices wrap around
    ],
    "linformer_answer": [
        mutate(_LINFORMER, "(E @ k)", "(F @ k)").replace("(F @ v)", "(E @ v)"),  # E and F swapped
        mutate(_LINFORMER, "math.sqrt(q.shape[-1])", "math.sqrt(v.shape[-1])"),  # d_v, not d
        mutate(_LINFORMER, "torch.softmax(scores, dim=-1)", "torch.softmax(scores, dim=-2)"),  # dim
        # scales the caller's q in place
        mutate(_LINFORMER, "scores = q @", "q /= math.sqrt(q.shape[-1])\n        scores = q @")
        .replace(" / math.sqrt(q.shape[-1])\n        return", "\n        return"),
        # .T reverses every dim: right for 2-D inputs only
        mutate(_LINFORMER, "(E @ k).transpose(-2, -1)", "(E @ k).T"),
        mutate(_LINFORMER, "math.sqrt(q.shape[-1])", "math.sqrt(E.shape[0])"),  # scales by sqrt(k)
    ],
}

# Right answers written differently: they must keep full marks.
RIGHT: dict[str, str] = {
    "gqa_shared_answer": """
        def grouped_query_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                                    mask: torch.Tensor | None = None) -> torch.Tensor:
            # one query head at a time; k[:, g] is a view, so nothing is copied
            H, G = q.shape[-3], k.shape[-3]
            if H % G:
                raise ValueError(f"G = {G} does not divide H = {H}")
            if mask is not None:
                full = torch.broadcast_shapes(mask.shape, (q.shape[0], H, q.shape[-2], k.shape[-2]))
                mask = mask.expand(full)                     # a view
            heads = []
            for h in range(H):
                g = h // (H // G)
                s = torch.einsum("bqd,bkd->bqk", q[:, h], k[:, g]) * q.shape[-1] ** -0.5
                if mask is not None:
                    m = mask[:, h]
                    s = torch.where(m, s, torch.tensor(float("-inf"), dtype=s.dtype)) \\
                        if m.dtype == torch.bool else s + m
                p = torch.softmax(s, -1).nan_to_num(0.0)         # a fully blocked row: zeros
                heads.append(torch.einsum("bqk,bkd->bqd", p, v[:, g]))
            return torch.stack(heads, dim=1)
    """,
    # idiom: postponed annotations, operator, functools.reduce
    "kv_bytes_answer": """
        from __future__ import annotations
        import operator
        from functools import reduce

        def kv_cache_bytes(n_layer: int, n_kv_head: int, head_size: int, bytes_per_value: int = 2,
                           n_tokens: int = 1) -> int:
            for what, value, least in (("n_layer", n_layer, 1), ("n_kv_head", n_kv_head, 1),
                                       ("head_size", head_size, 1), ("n_tokens", n_tokens, 0)):
                if value < least:
                    raise ValueError(f"{what} must be >= {least}, got {value}")
            k_and_v = 2
            return reduce(operator.mul, (k_and_v, n_layer, n_kv_head, head_size, bytes_per_value,
                                         n_tokens), 1)
    """,
    "local_mask_answer": """
        def local_mask(T: int, c: int) -> torch.Tensor:
            if type(c) is not int or c <= 0 or c % 2 != 1:
                raise ValueError(f"c = {c!r} is not a positive odd int")
            half = c // 2
            rows = [[abs(i - j) <= half for j in range(T)] for i in range(T)]
            return torch.tensor(rows, dtype=torch.bool).reshape(T, T)
    """,
    "block_cover_answer": """
        def head_block_masks(T, n_blocks, n_head):
            # a Latin square by reflection: head h sends query block b to key block (h - b) mod n
            if n_blocks < 1 or T % n_blocks:
                raise ValueError("T must split into n_blocks equal blocks")
            if n_head < n_blocks:
                raise ValueError(f"{n_head} heads cover at most {n_head}/{n_blocks} of the pairs")
            size = T // n_blocks
            out = torch.zeros(n_head, T, T, dtype=torch.bool)
            for h in range(n_head):
                for b in range(n_blocks):
                    key = (h - b) % n_blocks
                    out[h, b * size:(b + 1) * size, key * size:(key + 1) * size] = True
            return out
    """,
    "banded_answer": """
        def banded_attention(q, k, v, c):
            # zero-pad the sequence, then a sliding-window view: one row of c keys per query
            T, d = q.shape[-2], q.shape[-1]
            r = c // 2
            k_win = torch.nn.functional.pad(k, (0, 0, r, r)).unfold(-2, c, 1)    # (..., T, d, c)
            v_win = torch.nn.functional.pad(v, (0, 0, r, r)).unfold(-2, c, 1)    # (..., T, d_v, c)
            s = torch.einsum("...td,...tdw->...tw", q, k_win) / math.sqrt(d)
            key = torch.arange(T)[:, None] + torch.arange(-r, r + 1)[None, :]
            s = s.masked_fill((key < 0) | (key >= T), float("-inf"))
            return torch.einsum("...tw,...tdw->...td", s.softmax(-1), v_win)
    """,
    "linformer_answer": """
        def linformer_attention(q, k, v, E, F):
            keys = torch.einsum("rt,...td->...rd", E, k)
            values = torch.einsum("rt,...td->...rd", F, v)
            logits = torch.einsum("...qd,...rd->...qr", q, keys) / q.shape[-1] ** 0.5
            return torch.einsum("...qr,...rd->...qd", logits.softmax(dim=-1), values)
    """,
}

# RIGHT answers written with an idiom careful people use: the answer policy must let each one
# through (tests/grader/test_answer_policy.py counts them).
IDIOMS: dict[str, str] = {
    "kv_bytes_answer": "postponed annotations, operator, functools.reduce",
}

# Answers that call the forbidden reference: they must earn exactly the visible points.
FORBIDDEN: dict[str, str] = {
    "gqa_shared_answer": """
        def grouped_query_attention(q, k, v, mask=None):
            H, G = q.shape[-3], k.shape[-3]
            if mask is not None:
                mask = mask.expand(torch.broadcast_shapes(mask.shape, (q.shape[0], H, q.shape[-2],
                                                                        k.shape[-2])))
            outs = [ref.scaled_dot_product_attention(q[:, h], k[:, h // (H // G)], v[:, h // (H // G)],
                                                     None if mask is None else mask[:, h])[0]
                    for h in range(H)]
            return torch.stack(outs, dim=1)
    """,
    "kv_bytes_answer": """
        def kv_cache_bytes(n_layer, n_kv_head, head_size, bytes_per_value=2, n_tokens=1):
            return ref.kv_cache_bytes(n_layer, n_kv_head, head_size, bytes_per_value, n_tokens)
    """,
    "local_mask_answer": """
        def local_mask(T, c):
            return ref.local_mask(T, c)
    """,
    "block_cover_answer": """
        def head_block_masks(T, n_blocks, n_head):
            return torch.stack([ref.block_mask(T, n_blocks, [(b + h) % n_blocks for b in range(n_blocks)])
                                for h in range(n_head)])
    """,
    "banded_answer": """
        def banded_attention(q, k, v, c):
            return ref.local_attention(q, k, v, c)
    """,
    "linformer_answer": """
        def linformer_attention(q, k, v, E, F):
            return ref.linformer_attention(q, k, v, E, F)
    """,
}
