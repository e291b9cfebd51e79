"""Lesson 06's wrong answers and right variants (see tests/grading/wrong_answers/__init__.py)."""

from tests.grading.wrong_answers._util import mutate

LESSON = "06_transformer_block"

# Right answers in a learner's style, to put single mistakes into.
_LAYER_NORM = """
    def layer_norm(x, weight, bias=None, eps=1e-5):
        mean = x.mean(dim=-1, keepdim=True)
        var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
        out = (x - mean) / torch.sqrt(var + eps) * weight
        if bias is not None:
            out = out + bias
        return out
"""

_FFN = """
    class FeedForward(nn.Module):
        def __init__(self, n_embd, d_ff, activation="relu", bias=True):
            super().__init__()
            acts = {"relu": nn.ReLU(), "gelu": nn.GELU(), "gelu_tanh": nn.GELU(approximate="tanh")}
            if activation not in acts:
                raise ValueError(f"activation must be relu, gelu or gelu_tanh, not {activation!r}")
            self.fc = nn.Linear(n_embd, d_ff, bias=bias)
            self.act = acts[activation]
            self.proj = nn.Linear(d_ff, n_embd, bias=bias)

        def forward(self, x):
            return self.proj(self.act(self.fc(x)))
"""

_BLOCK = """
    def pre_ln_block(block, x):
        a, _ = block.attn(block.ln_1(x), is_causal=True)
        h = x + block.dropout(a)
        m = block.mlp(block.ln_2(h))
        return h + block.dropout(m)
"""

_GPT = """
    def gpt_forward(model, idx):
        if idx.ndim != 2:
            raise ValueError(f"idx must be (B, T), got shape {tuple(idx.shape)}")
        B, T = idx.shape
        if T > model.config.block_size:
            raise ValueError(f"T={T} is longer than block_size={model.config.block_size}")
        pos = torch.arange(T)
        x = model.wte(idx) + model.wpe(pos)
        x = model.drop(x)
        for block in model.blocks:
            x = pre_ln_block(block, x)
        x = model.ln_f(x)
        return model.lm_head(x)
"""

_PARAMS = """
    def count_gpt_params(config):
        D = config.n_embd
        kv = config.n_kv_head * (D // config.n_head)
        ln = 2 * D if config.bias else D
        attn = D * D + D * kv + D * kv + D * D
        mlp = D * config.d_ff + config.d_ff * D
        if config.bias:
            attn += D + kv + kv + D
            mlp += config.d_ff + D
        total = config.vocab_size * D + config.n_layer * (2 * ln + attn + mlp) + ln
        if config.pos_encoding == "learned":
            total += config.block_size * D
        if not config.tie_weights:
            total += config.vocab_size * D
        return total
"""

_ACCURACY = """
    def topk_accuracy(logits, targets, k=1, ignore_index=-100):
        keep = targets != ignore_index
        if keep.sum() == 0:
            raise ValueError("nothing to score")
        top = logits[keep].topk(k, dim=-1).indices
        hits = (top == targets[keep][:, None]).any(dim=-1)
        return hits.float().mean().item()
"""

_CLASSIFY = """
    def classify(hidden, lengths, head, labels):
        pooled = hidden[torch.arange(len(lengths)), lengths - 1]
        logits = head(pooled)
        return logits, F.cross_entropy(logits, labels)
"""

# Plausible wrong answers: the mistakes learners make, three or more per exercise. The k-th wrong
# answer of every exercise of a lesson share one submission (exercises are graded independently),
# and each must lose at least one of its exercise's points.
# The round trip grades the first 5 wrong answers of each exercise (submissions wrong-1 to
# wrong-5); the rest are tried by tools/try_answers.py.
GRADED = 5

WRONG: dict[str, list[str]] = {
    "layer_norm_answer": [
        mutate(_LAYER_NORM, "var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)",
               "var = x.var(dim=-1, keepdim=True)"),  # the unbiased variance (divides by D - 1)
        mutate(_LAYER_NORM, "torch.sqrt(var + eps)", "(torch.sqrt(var) + eps)"),  # eps outside the root
        mutate(_LAYER_NORM, "var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)",
               "var = (x ** 2).mean(dim=-1, keepdim=True) - mean ** 2"),  # E[x^2] - E[x]^2: cancels
        """
        def layer_norm(x, weight, bias=None, eps=1e-5):  # centres the caller's x in place
            x -= x.mean(dim=-1, keepdim=True)
            out = x / torch.sqrt((x ** 2).mean(dim=-1, keepdim=True) + eps) * weight
            return out if bias is None else out + bias
        """,
        mutate(_LAYER_NORM, "mean = x.mean(dim=-1, keepdim=True)",
               "x = x.float()\n        mean = x.mean(dim=-1, keepdim=True)"),  # float32 for float64 input
        """
        def layer_norm(x, weight, bias=None, eps=1e-5):  # statistics over the whole tensor
            mean = x.mean()
            var = ((x - mean) ** 2).mean()
            out = (x - mean) / torch.sqrt(var + eps) * weight
            return out if bias is None else out + bias
        """,
    ],
    "ffn_answer": [
        mutate(_FFN, '"gelu": nn.GELU(), ', '"gelu": nn.GELU(approximate="tanh"), '),  # GPT-2's for both
        mutate(_FFN, "nn.Linear(n_embd, d_ff, bias=bias)", "nn.Linear(n_embd, d_ff)"),  # fc keeps a bias
        mutate(_FFN, """            if activation not in acts:
                raise ValueError(f"activation must be relu, gelu or gelu_tanh, not {activation!r}")
            """, "            "),  # no ValueError: a KeyError for an unknown activation
        mutate(_FFN, "return self.proj(self.act(self.fc(x)))",
               "return x + self.proj(self.act(self.fc(x)))"),  # adds the residual inside the FFN
        mutate(_FFN, "return self.proj(self.act(self.fc(x)))",
               "return self.proj(self.act(self.fc(x))).squeeze()"),  # a (1, 1, D) input comes back (D,)
    ],
    "block_answer": [
        mutate(_BLOCK, "m = block.mlp(block.ln_2(h))", "m = block.mlp(block.ln_2(x))"),  # parallel branches
        mutate(_BLOCK, "h = x + block.dropout(a)", "h = block.dropout(x + a)"),  # dropout on the bypass too
        mutate(_BLOCK, "block.ln_2(h)", "block.ln_1(h)"),  # one LayerNorm for both branches
        mutate(_BLOCK, "h = x + block.dropout(a)", "x += block.dropout(a)\n        h = x"),  # adds into the caller's x
        mutate(_BLOCK, "is_causal=True", "is_causal=False"),  # attention sees the future
    ],
    "gpt_answer": [
        mutate(_GPT, "x = model.wte(idx) + model.wpe(pos)", "x = model.wte(idx)"),  # no positions
        mutate(_GPT, "        x = model.drop(x)\n", ""),  # no dropout on the embeddings (eval mode hides it)
        mutate(_GPT, "        x = model.ln_f(x)\n", ""),  # no final LayerNorm
        mutate(_GPT, "return model.lm_head(x)",
               "return x @ model.wte.weight.T"),  # assumes a tied head: wrong for an untied one
        mutate(_GPT, "pos = torch.arange(T)", "pos = torch.arange(1, T + 1)"),  # positions from 1
        mutate(_GPT, "x = pre_ln_block(block, x)", "x = block(x)"),  # calls Block.forward
        mutate(_GPT, "if T > model.config.block_size:",
               "if T >= model.config.block_size:"),  # off by one: refuses T = block_size
        mutate(_GPT, """        if T > model.config.block_size:
            raise ValueError(f"T={T} is longer than block_size={model.config.block_size}")
""", ""),  # no length check: the position table raises IndexError
        mutate(_GPT, "x = model.wte(idx) + model.wpe(pos)",
               "x = model.wte(idx) + model.wpe.weight"),  # the whole table: right for T = block_size only
        """
        def gpt_forward(model, idx):  # the LayerNorm before the blocks instead of after them
            T = idx.shape[1]
            if idx.dim() != 2 or T > model.config.block_size:
                raise ValueError("idx must be (B, T) with T <= block_size")
            x = model.ln_f(model.wte(idx) + model.wpe(torch.arange(T)))
            for block in model.blocks:
                x = pre_ln_block(block, x)
            return model.lm_head(x)
        """,
        mutate(_GPT, "return model.lm_head(x)",
               "return model.lm_head(x).softmax(dim=-1)"),  # probabilities, not logits
    ],
    "params_answer": [
        """
        def count_gpt_params(config):  # builds a block to count it, which the exercise rules out
            D = config.n_embd
            per_block = sum(p.numel() for p in ref.Block(config).parameters())
            total = config.vocab_size * D + config.n_layer * per_block + (2 * D if config.bias else D)
            if config.pos_encoding == "learned":
                total += config.block_size * D
            if not config.tie_weights:
                total += config.vocab_size * D
            return total
        """,
        mutate(_PARAMS, "kv = config.n_kv_head * (D // config.n_head)", "kv = D"),  # ignores n_kv_head
        mutate(_PARAMS, "ln = 2 * D if config.bias else D", "ln = 2 * D"),  # bias=False keeps LN biases
        mutate(_PARAMS, "mlp = D * config.d_ff + config.d_ff * D", "mlp = 8 * D * D"),  # d_ff = 4D fixed
        mutate(_PARAMS, "        if not config.tie_weights:\n            total += config.vocab_size * D\n",
               ""),  # forgets the untied head
    ],
    "accuracy_answer": [
        """
        def topk_accuracy(logits, targets, k=1, ignore_index=-100):  # padding counts in the total
            keep = targets != ignore_index
            if not keep.any():
                raise ValueError("nothing to score")
            top = logits.topk(k, dim=-1).indices
            hits = (top == targets[..., None]).any(dim=-1) & keep
            return hits.sum().item() / targets.numel()
        """,
        mutate(_ACCURACY, '        if keep.sum() == 0:\n            raise ValueError("nothing to score")\n',
               ""),  # no error when every position is ignored: returns nan
        mutate(_ACCURACY, "keep = targets != ignore_index", "keep = targets != -100"),  # -100 hard-coded
        """
        def topk_accuracy(logits, targets, k=1, ignore_index=-100):  # overwrites the caller's ignored targets
            keep = targets != ignore_index
            if not keep.any():
                raise ValueError("nothing to score")
            targets[~keep] = 0
            hits = (logits.topk(k, dim=-1).indices == targets[..., None]).any(dim=-1) & keep
            return hits.sum().item() / keep.sum().item()
        """,
        mutate(_ACCURACY, "return hits.float().mean().item()", "return hits.float().mean()"),  # a tensor, not a float
        mutate(_ACCURACY, "top = logits[keep].topk(k, dim=-1).indices",
               "top = logits[keep].argmax(dim=-1, keepdim=True)"),  # ignores k
    ],
    "classify_answer": [
        mutate(_CLASSIFY, "hidden[torch.arange(len(lengths)), lengths - 1]",
               "hidden[:, lengths - 1]"),  # indexes every sequence at every length: (B, B, D)
        """
        def classify(hidden, lengths, head, labels):  # averages the real tokens instead of the last
            T = hidden.shape[1]
            real = (torch.arange(T)[None, :] < lengths[:, None]).float()
            pooled = (hidden * real[..., None]).sum(1) / lengths[:, None]
            logits = head(pooled)
            return logits, F.cross_entropy(logits, labels)
        """,
        mutate(_CLASSIFY, "F.cross_entropy(logits, labels)",
               "F.cross_entropy(logits, labels, reduction='sum')"),  # sums the loss over the batch
        mutate(_CLASSIFY, "hidden[torch.arange(len(lengths)), lengths - 1]",
               "hidden[:, -1]"),  # the last column, padding for the shorter sequences
    ],
}

# Right answers written differently; they must keep full marks.
RIGHT: dict[str, str] = {
    # idiom: postponed annotations, a variable named vars
    "layer_norm_answer": """
        from __future__ import annotations

        def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                       eps: float = 1e-5) -> torch.Tensor:
            D = x.shape[-1]
            centred = x - x.sum(-1, keepdim=True) / D
            vars = torch.einsum("...d,...d->...", centred, centred)[..., None] / D  # per row
            y = centred * (vars + eps).rsqrt()
            y = y * weight
            return y if bias is None else y + bias
    """,
    # idiom: getattr(nn, name), self.modules(), a private attribute
    "ffn_answer": """
        _ACTIVATIONS = {  # torch.nn's layer by name, and its options
            "relu": ("ReLU", {}),
            "gelu": ("GELU", {}),
            "gelu_tanh": ("GELU", {"approximate": "tanh"}),
        }

        class FeedForward(nn.Module):
            def __init__(self, n_embd, d_ff, activation="relu", bias=True):
                super().__init__()
                try:
                    layer, options = _ACTIVATIONS[activation]
                except KeyError:
                    raise ValueError(f"unknown activation {activation!r}: use one of "
                                     f"{', '.join(_ACTIVATIONS)}") from None
                self.activation = getattr(nn, layer)(**options)
                self.fc = nn.Linear(n_embd, d_ff, bias)
                self.proj = nn.Linear(d_ff, n_embd, bias)
                self._n_linear = sum(isinstance(m, nn.Linear) for m in self.modules())

            def forward(self, x):
                hidden = self.activation(self.fc(x))
                return self.proj(hidden)
    """,
    "block_answer": """
        def pre_ln_block(block, x):
            def residual(stream, norm, branch):
                return stream + block.dropout(branch(norm(stream)))

            def attend(h):
                out, _weights = block.attn(h, is_causal=True)
                return out

            return residual(residual(x, block.ln_1, attend), block.ln_2, block.mlp)
    """,
    "gpt_answer": """
        def gpt_forward(model, idx):
            if len(idx.shape) != 2:
                raise ValueError(f"expected token ids of shape (batch, time), got {list(idx.shape)}")
            n_positions = model.wpe.weight.shape[0]
            if idx.shape[-1] > n_positions:
                raise ValueError(f"{idx.shape[-1]} tokens, but only {n_positions} positions exist")
            positions = torch.arange(idx.shape[-1], device=idx.device)
            hidden = model.wte.weight[idx] + model.wpe.weight[positions][None]
            hidden = model.drop(hidden)
            for layer in range(len(model.blocks)):
                hidden = pre_ln_block(model.blocks[layer], hidden)
            hidden = model.ln_f(hidden)
            return torch.einsum("btd,vd->btv", hidden, model.lm_head.weight)
    """,
    # idiom: a private typing.NamedTuple
    "params_answer": """
        from typing import NamedTuple

        class _Part(NamedTuple):
            weights: int
            biases: int

        def count_gpt_params(config) -> int:
            D, H = config.n_embd, config.n_head
            kv_width = config.n_kv_head * D // H
            parts = [
                _Part(D, D),                                   # ln_1
                _Part(D, D),                                   # ln_2
                _Part(D * D, D), _Part(D * D, D),              # W_Q, W_O
                _Part(D * kv_width, kv_width), _Part(D * kv_width, kv_width),  # W_K, W_V
                _Part(D * config.d_ff, config.d_ff), _Part(config.d_ff * D, D),  # fc, proj
            ]
            per_layer = sum(w + (b if config.bias else 0) for w, b in parts)
            final_norm = D + (D if config.bias else 0)
            tables = config.vocab_size * D * (1 if config.tie_weights else 2)
            positions = config.block_size * D if config.pos_encoding == "learned" else 0
            return tables + positions + config.n_layer * per_layer + final_norm
    """,
    "accuracy_answer": """
        def topk_accuracy(logits, targets, k=1, ignore_index=-100):
            flat_logits = logits.reshape(-1, logits.shape[-1])
            hits = total = 0
            for row, target in zip(flat_logits, targets.reshape(-1).tolist()):
                if target == ignore_index:
                    continue
                total += 1
                hits += int(target in row.topk(k).indices.tolist())
            if total == 0:
                raise ValueError("every target is ignored")
            return hits / total
    """,
    "classify_answer": """
        def classify(hidden, lengths, head, labels):
            index = (lengths - 1).view(-1, 1, 1).expand(-1, 1, hidden.shape[-1])
            last = hidden.gather(1, index).squeeze(1)
            logits = last @ head.weight.T + head.bias
            log_probs = logits.log_softmax(-1)
            return logits, -log_probs[torch.arange(len(labels)), labels].mean()
    """,
}

# RIGHT answers written with an idiom careful people use: the answer policy must let each one
# through (tests/grader/test_answer_policy.py counts them).
IDIOMS: dict[str, str] = {
    "layer_norm_answer": "postponed annotations, a variable named vars",
    "ffn_answer": "getattr(nn, name), self.modules(), a private attribute",
    "params_answer": "a private typing.NamedTuple",
}

# Answers that call the forbidden reference: the whole lesson's entry of tests/grading/submissions.py
# FORBIDDEN_ANSWERS, which this replaces. Each must earn exactly its visible points.
FORBIDDEN: dict[str, str] = {
    "layer_norm_answer": """
        def layer_norm(x, weight, bias=None, eps=1e-5):
            return F.layer_norm(x, x.shape[-1:], weight, bias, eps)
    """,
    "ffn_answer": """
        class FeedForward(ref.MLP):
            def __init__(self, n_embd, d_ff, activation="relu", bias=True):
                super().__init__(GPTConfig(vocab_size=1, n_embd=n_embd, n_head=1, d_ff=d_ff,
                                           activation=activation, bias=bias))
    """,
    "block_answer": """
        def pre_ln_block(block, x):
            return block(x)
    """,
    "gpt_answer": """
        def gpt_forward(model, idx):
            return model(idx)[0]
    """,
    "params_answer": """
        def count_gpt_params(config):
            return ref.count_parameters(config)
    """,
    "accuracy_answer": """
        def topk_accuracy(logits, targets, k=1, ignore_index=-100):
            return topk_accuracy_ref(logits, targets, k, ignore_index)
    """,
    "classify_answer": """
        class LastPooling:  # stands in for a classifier: pool() only reads .pooling
            pooling = "last"
        def classify(hidden, lengths, head, labels):
            logits = head(GPTClassifier.pool(LastPooling(), hidden, lengths))
            return logits, F.cross_entropy(logits, labels)
    """,
}
