"""Lesson 08's wrong answers and right variants (see tests/grading/wrong_answers/__init__.py)."""

from tests.grading.wrong_answers._util import mutate

LESSON = "08_kv_cache"

# A right answer to each exercise in a learner's style, to put single mistakes into.
_APPEND = """
    def append_kv(k_buf, v_buf, length, k_new, v_new):
        B, H, max_len, d = k_buf.shape
        if k_new.shape != v_new.shape:
            raise ValueError("k_new and v_new differ")
        if k_new.shape[0] != B or k_new.shape[1] != H or k_new.shape[3] != d:
            raise ValueError("k_new does not match the buffers")
        end = length + k_new.shape[2]
        if end > max_len:
            raise ValueError("the cache is full")
        k_buf[:, :, length:end] = k_new
        v_buf[:, :, length:end] = v_new
        return k_buf[:, :, :end], v_buf[:, :, :end], end
"""

_NEWEST = """
    import math

    def attend_newest(q, k_buf, v_buf, lengths):
        B, H, _, d = q.shape
        H_kv, max_len = k_buf.shape[1], k_buf.shape[2]
        valid = torch.arange(max_len) < lengths[:, None]
        g = q.reshape(B, H_kv, H // H_kv, d)
        s = g @ k_buf.transpose(-2, -1) / math.sqrt(d)
        s = s.masked_fill(~valid[:, None, None, :], float("-inf"))
        w = torch.softmax(s, dim=-1)
        v = torch.where(valid[:, None, :, None], v_buf, 0.0)
        return (w @ v).reshape(B, H, 1, d)
"""

_ROPE = """
    import math

    def rope_scores_step(q_new, k_new, k_cache, base=10000.0):
        L, T, d = k_cache.shape[-2], q_new.shape[-2], q_new.shape[-1]
        pos = torch.arange(L, L + T)
        q = apply_rope(q_new, pos, base)
        k_all = torch.cat([k_cache, apply_rope(k_new, pos, base)], dim=-2)
        scores = q @ k_all.transpose(-2, -1) / math.sqrt(d)
        keep = torch.ones(T, L + T, dtype=torch.bool).tril(diagonal=L)
        return scores.masked_fill(~keep, float("-inf")), k_all
"""

_GENERATE = """
    def greedy_generate_cached(model, idx, max_new_tokens):
        B, T = idx.shape
        cache = KVCache.for_model(model, batch_size=B, max_len=T + max_new_tokens)
        out = idx
        feed = idx
        with torch.no_grad():
            for _ in range(max_new_tokens):
                logits, _ = model(feed, cache=cache)
                feed = logits[:, -1, :].argmax(dim=-1, keepdim=True)
                out = torch.cat([out, feed], dim=1)
        return out
"""

_BUDGET = """
    def max_cached_tokens(config, memory_bytes, batch_size=1, dtype=torch.float16):
        nbytes = torch.finfo(dtype).bits // 8
        per_token = 2 * config.n_layer * config.n_kv_head * config.head_size * nbytes
        return int(memory_bytes // (per_token * batch_size))
"""

# Plausible wrong answers: the mistakes learners make, at least three per exercise. The k-th
# wrong answer of every exercise of a lesson share one submission (exercises are graded
# independently), and each must lose at least one of its exercise's points.
# The round trip grades the first 4 wrong answers of each exercise (submissions wrong-1 to
# wrong-4); the rest are tried by tools/try_answers.py.
GRADED = 4

WRONG: dict[str, list[str]] = {
    "append_answer": [
        mutate(_APPEND, "if end > max_len:", "if end >= max_len:"),  # refuses to fill the last slot
        # checks only k_new against the buffers: a v_new of fewer tokens (or one head) is broadcast
        mutate(_APPEND, 'if k_new.shape != v_new.shape:\n            raise ValueError("k_new and v_new differ")\n        ', ""),
        """
        def append_kv(k_buf, v_buf, length, k_new, v_new):  # checks heads and head size, not batch
            B, H, max_len, d = k_buf.shape
            end = length + k_new.shape[2]
            if end > max_len:
                raise ValueError("the cache is full")
            for new in (k_new, v_new):
                if new.shape[1] != H or new.shape[3] != d or new.shape[2] != k_new.shape[2]:
                    raise ValueError("shape mismatch")
            k_buf[:, :, length:end] = k_new
            v_buf[:, :, length:end] = v_new
            return k_buf[:, :, :end], v_buf[:, :, :end], end
        """,
        """
        def append_kv(k_buf, v_buf, length, k_new, v_new):  # writes k before checking v_new
            B, H, max_len, d = k_buf.shape
            end = length + k_new.shape[2]
            if end > max_len:
                raise ValueError("the cache is full")
            if k_new.shape[:2] != (B, H) or k_new.shape[3] != d:
                raise ValueError("k_new does not match the buffers")
            k_buf[:, :, length:end] = k_new
            if v_new.shape != k_new.shape:
                raise ValueError("v_new does not match k_new")
            v_buf[:, :, length:end] = v_new
            return k_buf[:, :, :end], v_buf[:, :, :end], end
        """,
        """
        def append_kv(k_buf, v_buf, length, k_new, v_new):  # returns new tensors, not views
            end = length + k_new.shape[2]
            if end > k_buf.shape[2] or k_new.shape != v_new.shape or k_new.shape[:2] != k_buf.shape[:2] \\
                    or k_new.shape[3] != k_buf.shape[3]:
                raise ValueError("does not fit")
            k_buf[:, :, length:end] = k_new
            v_buf[:, :, length:end] = v_new
            return k_buf[:, :, :end].clone(), v_buf[:, :, :end].clone(), end
        """,
        mutate(_APPEND, "return k_buf[:, :, :end], v_buf[:, :, :end], end",
               "return k_buf[:, :, :end], v_buf[:, :, :end], length + 1"),  # counts one token per call
    ],
    "newest_answer": [
        mutate(_NEWEST, "valid = torch.arange(max_len) < lengths[:, None]",
               "valid = torch.ones(B, max_len, dtype=torch.bool)"),  # ignores the lengths
        mutate(_NEWEST, "v = torch.where(valid[:, None, :, None], v_buf, 0.0)",
               "v = v_buf"),  # masks the scores only: weight 0 times a nan value is nan
        mutate(_NEWEST, "valid = torch.arange(max_len) < lengths[:, None]",
               "valid = torch.arange(max_len) <= lengths[:, None]"),  # one leftover slot too many
        mutate(_NEWEST, "v = torch.where(valid[:, None, :, None], v_buf, 0.0)",
               "v = v_buf.masked_fill_(~valid[:, None, :, None], 0.0)"),  # cleans the caller's buffer in place
        mutate(_NEWEST, "valid = torch.arange(max_len) < lengths[:, None]",
               "valid = torch.arange(max_len) < lengths[:, None] - 1"),  # drops the newest token
        mutate(mutate(_NEWEST, "~valid[:, None, None, :]", "~valid[:, None, :]"),
               "valid[:, None, :, None]", "valid[:, :, None]"),  # rows matched to the KV heads
        mutate(_NEWEST, "w = torch.softmax(s, dim=-1)",
               "w = s.exp() / s.exp().sum(dim=-1, keepdim=True)"),  # overflows for large scores
        """
        def attend_newest(q, k_buf, v_buf, lengths):  # repeats the keys for every query head
            import math
            B, H, _, d = q.shape
            n_rep = H // k_buf.shape[1]
            k = k_buf.repeat_interleave(n_rep, dim=1).nan_to_num(0.0, 0.0, 0.0)
            v = v_buf.repeat_interleave(n_rep, dim=1).nan_to_num(0.0, 0.0, 0.0)
            valid = torch.arange(k.shape[2]) < lengths[:, None]
            s = (q @ k.transpose(-2, -1) / math.sqrt(d)).masked_fill(~valid[:, None, None], -math.inf)
            return torch.softmax(s, dim=-1) @ torch.where(valid[:, None, :, None], v, 0.0)
        """,
        """
        def attend_newest(q, k_buf, v_buf, lengths):  # expands the keys: matmul copies them
            import math
            B, H, _, d = q.shape
            H_kv, max_len = k_buf.shape[1], k_buf.shape[2]
            valid = (torch.arange(max_len) < lengths[:, None])[:, None, :, None]
            k = torch.where(valid, k_buf, 0.0)[:, :, None].expand(-1, -1, H // H_kv, -1, -1)
            v = torch.where(valid, v_buf, 0.0)
            s = q.reshape(B, H_kv, H // H_kv, 1, d) @ k.transpose(-2, -1) / math.sqrt(d)
            s = s.squeeze(-2).masked_fill(~valid[..., 0][:, :, None], -math.inf)
            return (torch.softmax(s, dim=-1) @ v).reshape(B, H, 1, d)
        """,
    ],
    "rope_answer": [
        mutate(_ROPE, "pos = torch.arange(L, L + T)", "pos = torch.arange(T)"),  # new tokens at 0 .. T-1
        mutate(_ROPE, "tril(diagonal=L)", "tril()"),  # the causal mask aligned to the start
        mutate(_ROPE, "k_all = torch.cat([k_cache, apply_rope(k_new, pos, base)], dim=-2)",
               "k_all = apply_rope(torch.cat([k_cache, k_new], dim=-2), torch.arange(L + T), base)"),
        mutate(_ROPE, "L, T, d = k_cache.shape[-2], q_new.shape[-2], q_new.shape[-1]",  # float64 "for accuracy"
               "L, T, d = k_cache.shape[-2], q_new.shape[-2], q_new.shape[-1]\n"
               "        q_new, k_new, k_cache = q_new.double(), k_new.double(), k_cache.double()"),
        # (above: rotates the already-rotated cached keys a second time)
        mutate(_ROPE, "L, T, d = k_cache.shape[-2], q_new.shape[-2], q_new.shape[-1]",
               "L, T, d = k_cache.shape[1], q_new.shape[1], q_new.shape[2]"),  # assumes (B, T, d) inputs
        mutate(_ROPE, " / math.sqrt(d)", ""),  # no 1/sqrt(d)
    ],
    "generate_answer": [
        """
        def greedy_generate_cached(model, idx, max_new_tokens):  # no cache: the whole text each step
            out = idx
            with torch.no_grad():
                for _ in range(max_new_tokens):
                    logits, _ = model(out)
                    out = torch.cat([out, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
            return out
        """,
        mutate(_GENERATE, "logits[:, -1, :].argmax", "logits[:, 0, :].argmax"),  # the first position
        """
        def greedy_generate_cached(model, idx, max_new_tokens):  # one step too many for 0 new tokens
            B, T = idx.shape
            cache = KVCache.for_model(model, batch_size=B)
            out = idx
            with torch.no_grad():
                logits, _ = model(idx, cache=cache)
                out = torch.cat([out, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
                for _ in range(max_new_tokens - 1):
                    logits, _ = model(out[:, -1:], cache=cache)
                    out = torch.cat([out, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
            return out
        """,
        mutate(_GENERATE, "logits[:, -1, :].argmax(dim=-1, keepdim=True)",
               "logits[:, -1, :].topk(1, dim=-1).indices"),  # a tie may go to a higher id
        mutate(_GENERATE, "cache = KVCache.for_model(model, batch_size=B, max_len=T + max_new_tokens)",
               "cache = KVCache.for_model(model, batch_size=1, max_len=T + max_new_tokens)"),  # batch 1
        """
        def greedy_generate_cached(model, idx, max_new_tokens):  # refeeds the prompt with the cache
            B, T = idx.shape
            out = idx
            with torch.no_grad():
                for _ in range(max_new_tokens):
                    cache = KVCache.for_model(model, batch_size=B, max_len=T + max_new_tokens)
                    logits, _ = model(out, cache=cache)
                    out = torch.cat([out, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
            return out
        """,
    ],
    "budget_answer": [
        mutate(_BUDGET, "config.n_kv_head", "config.n_head"),  # ignores GQA/MQA
        mutate(_BUDGET, "2 * config.n_layer", "config.n_layer"),  # keys only, no values
        mutate(_BUDGET, "nbytes = torch.finfo(dtype).bits // 8", "nbytes = 2"),  # float16 whatever dtype
        mutate(_BUDGET, "return int(memory_bytes // (per_token * batch_size))",
               "return round(memory_bytes / (per_token * batch_size))"),  # rounds up half the time
        mutate(_BUDGET, "return int(memory_bytes // (per_token * batch_size))",
               "return memory_bytes // per_token // batch_size"),  # a float for a float budget
        mutate(_BUDGET, "config.head_size", "config.n_embd"),  # the whole width for each KV head
    ],
}

# Right answers written differently from the solution (other idioms, another order of
# operations): each must earn its exercise's full points.
RIGHT: dict[str, str] = {
    # idiom: postponed annotations, tuple[...] hints
    "append_answer": """
        from __future__ import annotations

        def append_kv(k_buf: torch.Tensor, v_buf: torch.Tensor, length: int,
                      k_new: torch.Tensor, v_new: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
            B, H, max_len, d = k_buf.shape
            T = k_new.size(2)
            problems = [
                k_new.dim() != 4,
                tuple(k_new.shape) != tuple(v_new.shape),
                (k_new.size(0), k_new.size(1), k_new.size(3)) != (B, H, d),
                length + T > max_len,
            ]
            if any(problems):
                raise ValueError(f"cannot append {tuple(k_new.shape)} after {length} tokens")
            k_buf.narrow(2, length, T).copy_(k_new)
            v_buf.narrow(2, length, T).copy_(v_new)
            return k_buf.narrow(2, 0, length + T), v_buf.narrow(2, 0, length + T), length + T
    """,
    # idiom: postponed annotations, einsum
    "newest_answer": """
        from __future__ import annotations

        def attend_newest(q: torch.Tensor, k_buf: torch.Tensor, v_buf: torch.Tensor,
                          lengths: torch.Tensor) -> torch.Tensor:
            B, H, _, d = q.shape
            G = k_buf.shape[1]
            outputs = []
            for b in range(B):  # one row at a time: slice its valid tokens
                n = int(lengths[b])
                keys, values = k_buf[b, :, :n], v_buf[b, :, :n]  # (G, n, d)
                grouped = q[b].view(G, H // G, d)
                scores = torch.einsum("grd,gnd->grn", grouped, keys) * d ** -0.5
                scores = scores - scores.amax(dim=-1, keepdim=True)
                weights = scores.exp()
                weights = weights / weights.sum(dim=-1, keepdim=True)
                outputs.append(torch.einsum("grn,gnd->grd", weights, values).reshape(H, 1, d))
            return torch.stack(outputs)
    """,
    # idiom: torch.where instead of masked_fill
    "rope_answer": """
        def rope_scores_step(q_new, k_new, k_cache, base=10000.0):
            L, T, d = k_cache.size(-2), q_new.size(-2), q_new.size(-1)
            where = torch.arange(T) + L
            k_all = torch.cat((k_cache, apply_rope(k_new, where, base)), -2)
            scores = torch.matmul(apply_rope(q_new, where, base), k_all.mT) / d ** 0.5
            query_pos = where[:, None]
            key_pos = torch.arange(L + T)[None, :]
            return torch.where(key_pos > query_pos, float("-inf"), scores), k_all
    """,
    "generate_answer": """
        @torch.no_grad()
        def greedy_generate_cached(model, idx, max_new_tokens):
            if max_new_tokens == 0:
                return idx
            cache = KVCache.for_model(model, idx.size(0), idx.size(1) + max_new_tokens)
            tokens = [idx]
            logits, _ = model(idx, cache=cache)
            while True:
                tokens.append(torch.argmax(logits[:, -1], dim=-1).unsqueeze(1))
                if len(tokens) == max_new_tokens + 1:
                    return torch.cat(tokens, dim=1)
                logits, _ = model(tokens[-1], cache=cache)
    """,
    # idiom: operator, functools.reduce
    "budget_answer": """
        import operator
        from functools import reduce

        def max_cached_tokens(config, memory_bytes, batch_size=1, dtype=torch.float16):
            factors = (2, config.n_layer, config.n_kv_head, config.head_size, dtype.itemsize, batch_size)
            per_step = reduce(operator.mul, factors, 1)
            return int(memory_bytes // per_step)
    """,
}

# RIGHT answers written with an idiom careful people use: the answer policy must let each one
# through (tests/grader/test_answer_policy.py counts them).
IDIOMS: dict[str, str] = {
    "append_answer": "postponed annotations, tuple[...] hints",
    "newest_answer": "postponed annotations, einsum",
    "rope_answer": "torch.where instead of masked_fill",
    "budget_answer": "operator, functools.reduce",
}

# The lesson's entry of tests/grading/submissions.py FORBIDDEN_ANSWERS (it replaces it): answers
# that call what an exercise forbids; each must earn exactly its exercise's visible points.
FORBIDDEN: dict[str, str] = {
    "append_answer": """
        def append_kv(k_buf, v_buf, length, k_new, v_new):
            B, H, max_len, d = k_buf.shape
            end = length + k_new.shape[2]
            if end > max_len or k_new.shape != v_new.shape or k_new.shape[1] != H or k_new.shape[3] != d:
                raise ValueError("does not fit")
            k_buf[:, :, :end] = torch.cat([k_buf[:, :, :length], k_new], dim=2)
            v_buf[:, :, :end] = torch.cat([v_buf[:, :, :length], v_new], dim=2)
            return k_buf[:, :, :end], v_buf[:, :, :end], end
    """,
    "newest_answer": """
        def attend_newest(q, k_buf, v_buf, lengths):
            valid = torch.arange(k_buf.shape[2]) < lengths[:, None]
            k = torch.where(valid[:, None, :, None], k_buf, 0.0)
            v = torch.where(valid[:, None, :, None], v_buf, 0.0)
            return F.scaled_dot_product_attention(
                q, k, v, attn_mask=valid[:, None, None, :], enable_gqa=True
            )
    """,
    "rope_answer": """
        def rope_scores_step(q_new, k_new, k_cache, base=10000.0):
            from course_lib.positional.self_attention import masked_scores
            L, T = k_cache.shape[-2], q_new.shape[-2]
            positions = torch.arange(L, L + T)
            k_all = torch.cat([k_cache, apply_rope(k_new, positions, base)], dim=-2)
            scores = apply_rope(q_new, positions, base) @ k_all.transpose(-2, -1) / q_new.shape[-1] ** 0.5
            return masked_scores(scores, None, is_causal=True), k_all
    """,
    "generate_answer": """
        def greedy_generate_cached(model, idx, max_new_tokens):
            return generate(model, idx, max_new_tokens, use_cache=True)
    """,
    "budget_answer": """
        def max_cached_tokens(config, memory_bytes, batch_size=1, dtype=torch.float16):
            per_token = kv_cache_bytes(config.n_layer, config.n_kv_head, config.head_size,
                                       torch.finfo(dtype).bits // 8)
            return int(memory_bytes // (per_token * batch_size))
    """,
}
