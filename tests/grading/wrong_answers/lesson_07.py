"""Lesson 07's wrong answers and right variants (see tests/grading/wrong_answers/__init__.py)."""

from tests.grading.wrong_answers._util import mutate

LESSON = "07_training"

# Right answers in a learner's style, to put single mistakes into.
_GET_BATCH = """
    def get_batch(data, batch_size, block_size, generator=None):
        if len(data) <= block_size:
            raise ValueError(f"data has {len(data)} tokens, not more than block_size={block_size}")
        starts = torch.randint(len(data) - block_size, (batch_size,), generator=generator)
        idx = starts[:, None] + torch.arange(block_size)[None, :]
        return data[idx].long(), data[idx + 1].long()
"""

_LR = """
    def lr_at(step, max_lr, min_lr, warmup_iters, decay_iters):
        if step < 0:
            raise ValueError("negative step")
        if step < warmup_iters:
            return max_lr * (step + 1) / (warmup_iters + 1)
        if step > decay_iters:
            return min_lr
        if decay_iters == warmup_iters:
            return max_lr
        r = (step - warmup_iters) / (decay_iters - warmup_iters)
        return min_lr + 0.5 * (1 + math.cos(math.pi * r)) * (max_lr - min_lr)
"""

_CLIP = """
    def clip_grad_norm(parameters, max_norm):
        if max_norm <= 0:
            raise ValueError("max_norm must be positive")
        grads = [p.grad for p in parameters if p.grad is not None]
        if len(grads) == 0:
            return 0.0
        total = sum((g.double() ** 2).sum() for g in grads).sqrt().item()
        if total > max_norm:
            for g in grads:
                g.mul_(max_norm / (total + 1e-6))
        return total
"""

_ACCUM = """
    def accumulated_step(model, micro_batches, optimizer):
        optimizer.zero_grad()
        n_total = sum(y.numel() for _, y in micro_batches)
        mean_loss = 0.0
        for x, y in micro_batches:
            _, loss = model(x, y)
            weight = y.numel() / n_total
            (loss * weight).backward()
            mean_loss += loss.item() * weight
        optimizer.step()
        return mean_loss
"""

_FLOPS = """
    def flops_per_token(config):
        n = count_parameters(config)
        if config.pos_encoding == "learned":
            n -= config.block_size * config.n_embd
        if not config.tie_weights:
            n -= config.vocab_size * config.n_embd
        L, H, Q, T = config.n_layer, config.n_head, config.n_embd // config.n_head, config.block_size
        return 6 * n + 12 * L * H * Q * T


    def mfu(config, tokens_per_second, peak_flops):
        return flops_per_token(config) * tokens_per_second / peak_flops
"""

# Plausible wrong answers: the mistakes learners make, three or more per exercise. The k-th wrong
# answer of every exercise of a lesson share one submission (exercises are graded independently),
# and each must lose at least one of its exercise's points.
WRONG: dict[str, list[str]] = {
    "get_batch_answer": [
        mutate(_GET_BATCH, "return data[idx].long(), data[idx + 1].long()",
               "return data[idx], data[idx + 1]"),  # keeps data's dtype: uint16 ids for uint16 data
        mutate(_GET_BATCH, "torch.randint(len(data) - block_size,",
               "torch.randint(len(data) - block_size - 1,"),  # never draws the last offset
        mutate(_GET_BATCH, "if len(data) <= block_size:", "if len(data) < block_size:"),  # no error at =
        mutate(_GET_BATCH, "torch.randint(len(data) - block_size,",
               "torch.randint(len(data) - block_size + 1,"),  # the last window's y runs past the end
        mutate(_GET_BATCH, "return data[idx].long(), data[idx + 1].long()",
               "return data[idx].to(torch.int16).long(), data[idx + 1].to(torch.int16).long()"),  # wraps
    ],
    "lr_answer": [
        mutate(_LR, "max_lr * (step + 1) / (warmup_iters + 1)", "max_lr * step / warmup_iters"),  # 0 at 0
        mutate(_LR, "        if decay_iters == warmup_iters:\n            return max_lr\n",
               ""),  # divides by zero when decay_iters == warmup_iters
        mutate(_LR, '        if step < 0:\n            raise ValueError("negative step")\n',
               ""),  # no error for a negative step
        mutate(_LR, "        if step > decay_iters:\n            return min_lr\n",
               ""),  # the cosine rises again after decay_iters
    ],
    "clip_answer": [
        """
        def clip_grad_norm(parameters, max_norm):  # goes through a generator twice
            if max_norm <= 0:
                raise ValueError("max_norm must be positive")
            squares = [float((p.grad.double() ** 2).sum()) for p in parameters if p.grad is not None]
            if not squares:
                return 0.0
            total = math.sqrt(sum(squares))
            if total > max_norm:
                for p in parameters:
                    if p.grad is not None:
                        p.grad.mul_(max_norm / (total + 1e-6))
            return total
        """,
        mutate(_CLIP, "total = sum((g.double() ** 2).sum() for g in grads).sqrt().item()",
               "total = math.sqrt(sum(torch.linalg.vector_norm(g).item() ** 2 for g in grads))"),
        # ^ uses PyTorch's vector norm, which the exercise forbids
        mutate(_CLIP, '        if max_norm <= 0:\n            raise ValueError("max_norm must be positive")\n',
               ""),  # no error for max_norm = 0
        """
        def clip_grad_norm(parameters, max_norm):  # clips each parameter on its own norm
            if max_norm <= 0:
                raise ValueError("max_norm must be positive")
            norms = []
            for p in parameters:
                if p.grad is None:
                    continue
                n = float((p.grad.double() ** 2).sum()) ** 0.5
                norms.append(n)
                if n > max_norm:
                    p.grad.mul_(max_norm / (n + 1e-6))
            return math.sqrt(sum(n * n for n in norms))
        """,
    ],
    "accum_answer": [
        mutate(_ACCUM, "weight = y.numel() / n_total", "weight = 1 / len(micro_batches)"),  # equal weights
        mutate(_ACCUM, "        optimizer.zero_grad()\n", ""),  # keeps the stale gradients
        mutate(_ACCUM, "mean_loss += loss.item() * weight",
               "mean_loss += loss.item() / len(micro_batches)"),  # right gradients, unweighted loss
        mutate(_ACCUM, "            mean_loss += loss.item() * weight\n        optimizer.step()\n",
               "            mean_loss += loss.item() * weight\n"
               "            optimizer.step()\n"),  # a step per micro-batch
    ],
    "flops_answer": [
        mutate(_FLOPS, "        if not config.tie_weights:\n            n -= config.vocab_size * config.n_embd\n",
               ""),  # counts an untied input token table, which is only looked up
        mutate(_FLOPS, "L, H, Q, T = config.n_layer, config.n_head,",
               "L, H, Q, T = config.n_layer, config.n_kv_head,"),  # attention over the kv heads only
        mutate(_FLOPS, '        if config.pos_encoding == "learned":\n            n -=',
               "        if True:\n            n -="),  # subtracts a position table rope/alibi lack
        mutate(_FLOPS, "return flops_per_token(config) * tokens_per_second / peak_flops",
               "return 100 * flops_per_token(config) * tokens_per_second / peak_flops"),  # a percentage
    ],
}

# Right answers written differently; they must keep full marks.
RIGHT: dict[str, str] = {
    "get_batch_answer": """
        from __future__ import annotations

        def get_batch(data: torch.Tensor, batch_size: int, block_size: int,
                      generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
            n_offsets = data.numel() - block_size
            if n_offsets < 1:
                raise ValueError("the data is not longer than one block")
            starts = torch.randint(high=n_offsets, size=(batch_size,), generator=generator)
            ids = data.to(torch.int64)
            rows = [ids[s:s + block_size + 1] for s in starts.tolist()]
            x = torch.stack([r[:-1] for r in rows])
            y = torch.stack([r[1:] for r in rows])
            return x, y
    """,
    "lr_answer": """
        import operator

        def lr_at(step, max_lr, min_lr, warmup_iters, decay_iters):
            if operator.lt(step, 0):
                raise ValueError(f"step {step} < 0")
            if step >= warmup_iters:
                span = decay_iters - warmup_iters
                progress = 1.0 if span <= 0 and step > warmup_iters else (
                    0.0 if span <= 0 else min(1.0, (step - warmup_iters) / span))
                return float(min_lr + (max_lr - min_lr) * (math.cos(math.pi * progress) + 1) / 2)
            return float(max_lr * (step + 1) / (warmup_iters + 1))
    """,
    "clip_answer": """
        def clip_grad_norm(parameters, max_norm):
            if not max_norm > 0:
                raise ValueError(f"max_norm must be positive, not {max_norm}")
            with_grad = [p for p in parameters if p.grad is not None]
            squared = 0.0
            for p in with_grad:
                flat = p.grad.detach().reshape(-1).double()
                squared += torch.dot(flat, flat).item()
            norm = squared ** 0.5
            factor = min(1.0, max_norm / (norm + 1e-6))
            if factor < 1.0:
                for p in with_grad:
                    p.grad.detach().mul_(factor)
            return float(norm)
    """,
    "accum_answer": """
        def accumulated_step(model, micro_batches, optimizer):
            for p in model.parameters():
                p.grad = None
            rows = [len(y) for _, y in micro_batches]
            weighted = 0.0
            for (x, y), n in zip(micro_batches, rows):
                loss = model(x, y)[1] * (n / sum(rows))
                loss.backward()
                weighted += loss.item()
            optimizer.step()
            return weighted
    """,
    "flops_answer": """
        def flops_per_token(config):
            with torch.device("meta"):
                model = GPT(config)
            looked_up = {"wpe.weight"} | (set() if config.tie_weights else {"wte.weight"})
            n = sum(p.numel() for name, p in model.named_parameters() if name not in looked_up)
            attention = 12 * config.n_layer * config.n_head * config.head_size * config.block_size
            return int(6 * n + attention)

        def mfu(config, tokens_per_second, peak_flops):
            achieved = flops_per_token(config) * tokens_per_second
            return float(achieved / peak_flops)
    """,
}
