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

_STEP = """
    def train_step(model, optimizer, micro_batches, lr, grad_clip):
        for g in optimizer.param_groups:
            g["lr"] = lr
        optimizer.zero_grad()
        n = len(micro_batches)
        total = 0.0
        for x, y in micro_batches:
            logits, loss = model(x, y)
            loss = loss / n
            loss.backward()
            total += loss.item()
        if grad_clip > 0:
            clip_grad_norm(model.parameters(), grad_clip)
        optimizer.step()
        return total
"""

_LOOP = """
    def train_loop(config, train_data, val_data, vocab_size):
        torch.manual_seed(config.seed)
        model = GPT(config.model_config(vocab_size))
        torch.manual_seed(config.seed + 1)
        optimizer = torch.optim.AdamW(ref.parameter_groups(model, config.weight_decay),
                                      lr=config.learning_rate, betas=(config.beta1, config.beta2))
        D = config.lr_decay_iters if config.lr_decay_iters > 0 else config.max_iters
        W = min(config.warmup_iters, D)
        gen = torch.Generator().manual_seed(config.seed)
        losses = []
        history = []

        def estimate():
            model.eval()
            rec = {"step": len(losses)}
            with torch.no_grad():
                for split, d in [("train", train_data), ("val", val_data)]:
                    g = torch.Generator().manual_seed(config.seed + 10000)
                    ls = []
                    for i in range(config.eval_iters):
                        xb, yb = get_batch(d, config.batch_size, config.model.block_size, g)
                        ls.append(model(xb, yb)[1].item())
                    rec[split + "_loss"] = sum(ls) / len(ls)
            model.train()
            history.append(rec)

        estimate()
        for it in range(config.max_iters):
            lr = lr_at(it, config.learning_rate, config.min_lr, W, D)
            batches = []
            for k in range(config.grad_accum_steps):
                batches.append(get_batch(train_data, config.batch_size, config.model.block_size, gen))
            losses.append(train_step(model, optimizer, batches, lr, config.grad_clip))
            if (it + 1) % config.eval_interval == 0 or it + 1 == config.max_iters:
                estimate()
        return model, losses, history
"""

# Plausible wrong answers: the mistakes learners make, three or more per exercise. The k-th wrong
# answer of every exercise of a lesson share one submission (exercises are graded independently),
# and each must lose at least one of its exercise's points.
# The round trip grades the first 4 wrong answers of each exercise (submissions wrong-1 to
# wrong-4); the rest are tried by tools/try_answers.py.
GRADED = 4

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
        mutate(_LR, "math.cos(math.pi * r)", "torch.cos(torch.tensor(math.pi * r))"),  # a 0-d tensor
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
        mutate(_CLIP, "sum((g.double() ** 2).sum() for g in grads).sqrt().item()",
               "sum((g.double() ** 2).sum() for g in grads).sqrt()"),  # returns a 0-d tensor
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
        mutate(_ACCUM, "mean_loss += loss.item() * weight", "mean_loss = mean_loss + loss.detach() * weight"),  # a tensor
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
        mutate(_FLOPS, "Q, T = config.n_layer, config.n_head, config.n_embd // config.n_head",
               "Q, T = config.n_layer, config.n_head, config.n_embd / config.n_head"),  # a float count
        mutate(_FLOPS, "return flops_per_token(config) * tokens_per_second / peak_flops",
               "return 100 * flops_per_token(config) * tokens_per_second / peak_flops"),  # a percentage
    ],
    "train_step_answer": [
        mutate(_STEP, """        for g in optimizer.param_groups:
            g["lr"] = lr
        optimizer.zero_grad()
""", """        optimizer.zero_grad()
""").replace("        optimizer.step()\n", "        optimizer.step()\n"
                     "        for g in optimizer.param_groups:\n            g[\"lr\"] = lr\n"),
        # ^ sets the rate after the update: the step runs at the previous step's rate
        mutate(_STEP, "            loss = loss / n\n            loss.backward()\n            total += loss.item()",
               "            loss.backward()\n            total += loss.item() / n"),
        # ^ the mean loss is right, but the gradients of the micro-batches are summed (A times too large)
        mutate(_STEP, """        if grad_clip > 0:
            clip_grad_norm(model.parameters(), grad_clip)
        optimizer.step()
""", """        optimizer.step()
        if grad_clip > 0:
            clip_grad_norm(model.parameters(), grad_clip)
"""),  # clips after the update, which has already used the raw gradients
        # ^ returns the last micro-batch's loss
        mutate(_STEP, "total += loss.item()", "total = total + loss.detach()"),  # returns a tensor
        mutate(_STEP, "        optimizer.zero_grad()\n", ""),  # adds to whatever .grad held before
        mutate(_STEP, "            total += loss.item()", "            total = loss.item() * n"),
    ],
    "train_loop_answer": [
        mutate(_LOOP, "lr = lr_at(it, config.learning_rate", "lr = lr_at(it + 1, config.learning_rate"),
        # ^ the schedule one step ahead (a scheduler stepped before the optimizer)
        mutate(_LOOP, "torch.optim.AdamW(ref.parameter_groups(model, config.weight_decay),",
               "torch.optim.AdamW(model.parameters(), weight_decay=config.weight_decay,"),
        # ^ weight decay on every parameter, LayerNorm gains and biases too
        mutate(_LOOP, "betas=(config.beta1, config.beta2)", "betas=(0.9, 0.99)"),
        # ^ the betas of the course's configs written out, not read from the config
        mutate(_LOOP, "                    g = torch.Generator().manual_seed(config.seed + 10000)\n", ""
               ).replace("get_batch(d, config.batch_size, config.model.block_size, g)",
                         "get_batch(d, config.batch_size, config.model.block_size, gen)"),
        # ^ evaluates on batches of the training generator: other batches, and it moves the data
        mutate(_LOOP, "            model.eval()\n", ""),  # evaluates with dropout on
        mutate(_LOOP, "        W = min(config.warmup_iters, D)\n", "        W = config.warmup_iters\n"),
        # ^ a warmup longer than the decay is not cut to it
        mutate(_LOOP, "if (it + 1) % config.eval_interval == 0 or it + 1 == config.max_iters:",
               "if (it + 1) % config.eval_interval == 0:"),  # no evaluation after the last step
        mutate(_LOOP, "            model.train()\n", ""),  # stays in eval mode: trains without dropout
        mutate(_LOOP, "config.lr_decay_iters if config.lr_decay_iters > 0 else config.max_iters",
               "config.lr_decay_iters"),  # lr_decay_iters 0 (tiny_run's) is not read as max_iters
    ],
}

# Right answers written differently; they must keep full marks.
RIGHT: dict[str, str] = {
    # idiom: postponed annotations
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
    # idiom: operator
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
    "train_step_answer": """
        def train_step(model, optimizer, micro_batches, lr, grad_clip):
            params = [p for group in optimizer.param_groups for p in group["params"]]
            for p in params:
                p.grad = None
            parts = []
            for x, y in micro_batches:
                part = model(x, y)[1] * (1.0 / len(micro_batches))
                part.backward()
                parts.append(part.detach())
            if grad_clip:
                torch.nn.utils.clip_grad_norm_(params, max_norm=grad_clip)
            for group in optimizer.param_groups:
                group.update(lr=lr)
            optimizer.step()
            return float(sum(parts))
    """,
    "train_loop_answer": """
        def train_loop(config, train_data, val_data, vocab_size):
            torch.manual_seed(config.seed)
            net = GPT(config.model_config(vocab_size))
            torch.manual_seed(config.seed + 1)
            matrices = [p for p in net.parameters() if p.ndim >= 2]
            vectors = [p for p in net.parameters() if p.ndim < 2]
            opt = torch.optim.AdamW([{"params": matrices, "weight_decay": config.weight_decay},
                                     {"params": vectors, "weight_decay": 0.0}],
                                    lr=config.learning_rate, betas=(config.beta1, config.beta2))
            decay = config.max_iters if config.lr_decay_iters == 0 else config.lr_decay_iters
            warm = min(decay, config.warmup_iters)
            schedule = torch.optim.lr_scheduler.LambdaLR(
                opt, lambda s: ref.warmup_cosine_lr(s, max_lr=config.learning_rate,
                                                    min_lr=config.min_lr, warmup_iters=warm,
                                                    decay_iters=decay) / config.learning_rate)
            stream = torch.Generator().manual_seed(config.seed)
            losses, history = [], []

            def evaluation(step):
                net.train(False)
                row = {"step": step}
                with torch.no_grad():
                    for split, tokens in {"train": train_data, "val": val_data}.items():
                        fixed = torch.Generator().manual_seed(config.seed + 10_000)
                        values = []
                        for _ in range(config.eval_iters):
                            x, y = get_batch_ref(tokens, config.batch_size, config.model.block_size,
                                                 generator=fixed)
                            values.append(net(x, y)[1].item())
                        row[split + "_loss"] = sum(values) / len(values)
                net.train(True)
                history.append(row)

            evaluation(0)
            for step in range(1, config.max_iters + 1):
                opt.zero_grad(set_to_none=True)
                step_loss = 0.0
                for _ in range(config.grad_accum_steps):
                    x, y = get_batch_ref(train_data, config.batch_size, config.model.block_size,
                                         generator=stream)
                    loss = net(x, y)[1] / config.grad_accum_steps
                    loss.backward()
                    step_loss += loss.item()
                if config.grad_clip > 0:
                    torch.nn.utils.clip_grad_norm_(net.parameters(), config.grad_clip)
                opt.step()
                schedule.step()
                losses.append(step_loss)
                if step % config.eval_interval == 0 or step == config.max_iters:
                    evaluation(step)
            return net, losses, history
    """,
}

# RIGHT answers written with an idiom careful people use: the answer policy must let each one
# through (tests/grader/test_answer_policy.py counts them).
IDIOMS: dict[str, str] = {
    "get_batch_answer": "postponed annotations",
    "lr_answer": "operator",
}

# The lesson's entry of tests/grading/submissions.py FORBIDDEN_ANSWERS (it replaces it): answers
# that call what an exercise forbids; each must earn exactly its exercise's visible points.
FORBIDDEN: dict[str, str] = {
    "get_batch_answer": """
        def get_batch(data, batch_size, block_size, generator=None):
            return get_batch_ref(data, batch_size, block_size, generator=generator)
    """,
    "lr_answer": """
        def lr_at(step, max_lr, min_lr, warmup_iters, decay_iters):
            return ref.warmup_cosine_lr(step, max_lr=max_lr, min_lr=min_lr,
                                        warmup_iters=warmup_iters, decay_iters=decay_iters)
    """,
    "clip_answer": """
        def clip_grad_norm(parameters, max_norm):
            params = [p for p in parameters if p.grad is not None]
            if max_norm <= 0:
                raise ValueError("max_norm must be positive")
            return float(torch.nn.utils.clip_grad_norm_(params, max_norm)) if params else 0.0
    """,
    "accum_answer": """
        def accumulated_step(model, micro_batches, optimizer):
            optimizer.zero_grad(set_to_none=True)
            x = torch.cat([x for x, _ in micro_batches])
            y = torch.cat([y for _, y in micro_batches])
            _, loss = model(x, y)
            loss.backward()
            optimizer.step()
            return loss.item()
    """,
    "flops_answer": """
        def flops_per_token(config):
            return ref.flops_per_token(config)

        def mfu(config, tokens_per_second, peak_flops):
            return ref.estimate_mfu(ref.flops_per_token(config), tokens_per_second, peak=peak_flops)
    """,
    "train_step_answer": """
        def train_step(model, optimizer, micro_batches, lr, grad_clip):
            for group in optimizer.param_groups:
                group["lr"] = lr
            optimizer.zero_grad(set_to_none=True)
            x = torch.cat([x for x, _ in micro_batches])
            y = torch.cat([y for _, y in micro_batches])
            _, loss = model(x, y)
            loss.backward()
            if grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
            optimizer.step()
            return loss.item()
    """,
    "train_loop_answer": """
        def train_loop(config, train_data, val_data, vocab_size):
            run = ref.train(config, data=(train_data, val_data, vocab))
            return run.model, run.train_losses, run.history
    """,
}
