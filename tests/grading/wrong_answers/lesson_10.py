"""Lesson 10's wrong answers and right variants (see tests/grading/wrong_answers/__init__.py)."""

from tests.grading.wrong_answers._util import mutate

LESSON = "10_your_gpt"

# Right answers in a learner's style, to put single mistakes into.
_MINIGPT = """
class MiniGPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        if config.pos_encoding not in ("learned", "rope"):
            raise ValueError(f"MiniGPT supports pos_encoding 'learned' or 'rope', "
                             f"got {config.pos_encoding!r}")
        self.config = c = config
        kv_width = c.n_kv_head * c.head_size

        def layer_norm():
            return nn.LayerNorm(c.n_embd, eps=c.layer_norm_eps, bias=c.bias)

        def block():
            attn = nn.ModuleDict({
                "q_proj": nn.Linear(c.n_embd, c.n_embd, bias=c.bias),
                "k_proj": nn.Linear(c.n_embd, kv_width, bias=c.bias),
                "v_proj": nn.Linear(c.n_embd, kv_width, bias=c.bias),
                "out_proj": nn.Linear(c.n_embd, c.n_embd, bias=c.bias),
            })
            mlp = nn.ModuleDict({"fc": nn.Linear(c.n_embd, c.d_ff, bias=c.bias),
                                 "proj": nn.Linear(c.d_ff, c.n_embd, bias=c.bias)})
            return nn.ModuleDict({"ln_1": layer_norm(), "attn": attn, "ln_2": layer_norm(),
                                  "mlp": mlp})

        self.wte = nn.Embedding(c.vocab_size, c.n_embd)
        self.wpe = nn.Embedding(c.block_size, c.n_embd) if c.pos_encoding == "learned" else None
        self.blocks = nn.ModuleList(block() for _ in range(c.n_layer))
        self.ln_f = layer_norm()
        self.lm_head = nn.Linear(c.n_embd, c.vocab_size, bias=False)
        self.drop = nn.Dropout(c.dropout)
        for name, p in self.named_parameters():  # GPT-2's initialisation
            if p.dim() >= 2:
                residual = name.endswith(("out_proj.weight", "mlp.proj.weight"))
                std = 0.02 / math.sqrt(2 * c.n_layer) if residual else 0.02
                nn.init.normal_(p, mean=0.0, std=std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)
        if c.tie_weights:
            self.lm_head.weight = self.wte.weight

    def new_cache(self):
        # per layer: keys (already rotated with RoPE) and values (B, n_kv_head, L, head_size)
        return {"k": [None] * self.config.n_layer, "v": [None] * self.config.n_layer,
                "length": 0}

    def forward(self, idx, targets=None, cache=None):
        c = self.config
        B, T = idx.shape
        start = 0 if cache is None else cache["length"]
        positions = torch.arange(start, start + T, device=idx.device)
        x = self.wte(idx)
        if self.wpe is not None:
            if start + T > c.block_size:
                raise ValueError(f"positions up to {start + T - 1}, but learned positions stop "
                                 f"at block_size - 1 = {c.block_size - 1}")
            x = x + self.wpe(positions)
        x = self.drop(x)
        group = c.n_head // c.n_kv_head
        p_drop = c.dropout if self.training else 0.0
        for i, blk in enumerate(self.blocks):
            attn, h = blk["attn"], blk["ln_1"](x)
            q = attn["q_proj"](h).view(B, T, c.n_head, c.head_size).transpose(1, 2)
            k = attn["k_proj"](h).view(B, T, c.n_kv_head, c.head_size).transpose(1, 2)
            v = attn["v_proj"](h).view(B, T, c.n_kv_head, c.head_size).transpose(1, 2)
            if c.pos_encoding == "rope":
                q = apply_rope(q, positions, c.rope_base)
                k = apply_rope(k, positions, c.rope_base)
            if cache is not None:
                if cache["k"][i] is not None:
                    k = torch.cat([cache["k"][i], k], dim=2)
                    v = torch.cat([cache["v"][i], v], dim=2)
                cache["k"][i], cache["v"][i] = k, v
            if group > 1:  # KV head g serves query heads g * group ... (g + 1) * group - 1
                k = k.repeat_interleave(group, dim=1)
                v = v.repeat_interleave(group, dim=1)
            Tk = k.shape[2]
            scale = 1.0 / math.sqrt(c.head_size)
            if Tk == T:  # no cached keys: the fused kernel's causal mask (it skips the zeros)
                y = F.scaled_dot_product_attention(q, k, v, dropout_p=p_drop, is_causal=True,
                                                   scale=scale)
            else:  # query t sits at position Tk - T + t and sees keys 0 ... Tk - T + t
                mask = torch.ones(T, Tk, dtype=torch.bool, device=idx.device).tril(Tk - T)
                y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p_drop,
                                                   scale=scale)
            y = attn["out_proj"](y.transpose(1, 2).reshape(B, T, c.n_embd))
            x = x + self.drop(y)
            mlp = blk["mlp"]
            hidden = mlp["fc"](blk["ln_2"](x))
            if c.activation == "relu":
                hidden = F.relu(hidden)
            else:
                approximate = "tanh" if c.activation == "gelu_tanh" else "none"
                hidden = F.gelu(hidden, approximate=approximate)
            x = x + self.drop(mlp["proj"](hidden))
        if cache is not None:
            cache["length"] = start + T
        logits = self.lm_head(self.ln_f(x))
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), ignore_index=-100)
        return logits, loss
"""

_GENERATE = """
def generate(model, idx, max_new_tokens, *, temperature=1.0, top_k=None, top_p=None,
             use_cache=True, generator=None):
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0 (0 is greedy), got {temperature}")
    window = model.config.block_size if model.config.pos_encoding == "learned" else None
    was_training = model.training
    model.eval()
    out = idx
    cache, feed = None, None
    with torch.no_grad():
        for _ in range(max_new_tokens):
            context = out if window is None else out[:, -window:]
            if not use_cache:
                logits = model(context)[0][:, -1]
            else:
                if cache is None or (window is not None and cache["length"] + 1 > window):
                    cache, feed = model.new_cache(), context  # (re)start from the window
                logits = model(feed, cache=cache)[0][:, -1]
            logits = logits.float()
            if temperature == 0:
                token = logits.argmax(dim=-1, keepdim=True)
            else:
                logits = logits / temperature
                if top_k is not None:
                    logits = top_k_filter(logits, top_k)
                if top_p is not None:
                    logits = top_p_filter(logits, top_p)
                probs = torch.softmax(logits, dim=-1)
                token = torch.multinomial(probs, 1, generator=generator)
            out = torch.cat([out, token], dim=1)
            feed = token
    model.train(was_training)
    return out
"""

_TRAIN = """
def train(model, config, train_data, val_data, *, resume=None):
    device = pick_device() if config.device == "auto" else torch.device(config.device)
    model.to(device)
    bf16 = config.dtype == "bfloat16" or (
        config.dtype == "auto" and device.type == "cuda" and torch.cuda.is_bf16_supported())

    def autocast():
        if bf16:
            return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    groups = parameter_groups(model, config.weight_decay)
    fused = {"fused": True} if device.type == "cuda" else {}
    optimizer = torch.optim.AdamW(groups, lr=config.learning_rate,
                                  betas=(config.beta1, config.beta2), **fused)
    decay_iters = config.lr_decay_iters or config.max_iters
    warmup = min(config.warmup_iters, decay_iters)
    step_model = torch.compile(model) if config.compile else model
    g = torch.Generator().manual_seed(config.seed)
    step, train_losses, history = 0, [], []
    torch.manual_seed(config.seed + 1)  # dropout's generator; a resumed run restores it below
    if resume is not None:
        state = torch.load(resume, map_location="cpu", weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        g.set_state(state["generator"])
        torch.set_rng_state(state["rng"])
        step = state["step"]
        train_losses, history = list(state["train_losses"]), list(state["history"])
    splits = {"train": train_data, "val": val_data}

    def evaluate():
        step_model.eval()
        out = {}
        with torch.no_grad():
            for name, data in splits.items():
                eval_g = torch.Generator().manual_seed(config.seed + 10_000)
                losses = torch.zeros(config.eval_iters)
                for i in range(config.eval_iters):
                    x, y = get_batch(data, config.batch_size, config.model.block_size,
                                     generator=eval_g, device=device)
                    with autocast():
                        losses[i] = step_model(x, y)[1].item()
                out[name] = losses.mean().item()
        step_model.train()
        return out

    def record():
        losses = evaluate()
        history.append({"step": step, "train_loss": losses["train"], "val_loss": losses["val"]})

    if resume is None:
        record()
    tokens_per_step = config.batch_size * config.model.block_size * config.grad_accum_steps
    bar = tqdm(total=config.max_iters, initial=step, desc="train", disable=not config.progress)
    model.train()
    t0, start_step = time.perf_counter(), step
    while step < config.max_iters:
        lr = warmup_cosine_lr(step, max_lr=config.learning_rate, min_lr=config.min_lr,
                              warmup_iters=warmup, decay_iters=decay_iters)
        for group in optimizer.param_groups:
            group["lr"] = lr
        step_loss = torch.zeros((), device=device)
        for _ in range(config.grad_accum_steps):
            x, y = get_batch(train_data, config.batch_size, config.model.block_size, generator=g,
                             device=device)
            with autocast():
                loss = step_model(x, y)[1] / config.grad_accum_steps
            loss.backward()
            step_loss += loss.detach()
        if config.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        train_losses.append(step_loss.item())
        step += 1
        bar.update(1)
        if step % 10 == 0:
            bar.set_postfix(loss=f"{train_losses[-1]:.4f}", refresh=False)
        if step % config.eval_interval == 0 or step == config.max_iters:
            record()
        if config.checkpoint_interval and step % config.checkpoint_interval == 0:
            state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                     "generator": g.get_state(), "rng": torch.get_rng_state(), "step": step,
                     "train_losses": train_losses, "history": history}
            os.makedirs(config.out_dir, exist_ok=True)
            path = os.path.join(config.out_dir, f"ckpt_{step:06d}.pt")
            torch.save(state, path + ".tmp")
            os.replace(path + ".tmp", path)  # atomic: the old file or the new one, never half
    bar.close()
    seconds = time.perf_counter() - t0
    tokens_per_second = (step - start_step) * tokens_per_step / max(seconds, 1e-9)
    return {"train_losses": train_losses, "history": history, "step": step,
            "tokens_per_second": tokens_per_second}
"""

# post-LN: normalise after adding (the original Transformer's order), not before the branch
_POST_LN = mutate(
    mutate(
        _MINIGPT,
        "attn, h = blk[\"attn\"], blk[\"ln_1\"](x)",
        "attn, h = blk[\"attn\"], x",
    ),
    "            x = x + self.drop(y)\n            mlp = blk[\"mlp\"]\n"
    "            hidden = mlp[\"fc\"](blk[\"ln_2\"](x))",
    "            x = blk[\"ln_1\"](x + self.drop(y))\n            mlp = blk[\"mlp\"]\n"
    "            hidden = mlp[\"fc\"](x)",
)
_POST_LN = mutate(
    _POST_LN,
    "            x = x + self.drop(mlp[\"proj\"](hidden))",
    "            x = blk[\"ln_2\"](x + self.drop(mlp[\"proj\"](hidden)))",
)

# The round trip grades the first 5 wrong answers of each exercise (submissions wrong-1 to
# wrong-5); the rest are tried by tools/try_answers.py.
GRADED = 5

WRONG: dict[str, list[str]] = {
    "minigpt_answer": [
        mutate(
            _MINIGPT,
            'approximate = "tanh" if c.activation == "gelu_tanh" else "none"',
            'approximate = "none"',
        ) + "  # gelu_tanh computed as the exact GELU",
        mutate(
            _MINIGPT,
            "            return nn.LayerNorm(c.n_embd, eps=c.layer_norm_eps, bias=c.bias)",
            "            return nn.LayerNorm(c.n_embd, bias=c.bias)",
        ) + "  # layer_norm_eps ignored (LayerNorm's default 1e-5)",
        mutate(
            mutate(
                _MINIGPT,
                "                q = apply_rope(q, positions, c.rope_base)",
                "                q = apply_rope(q, positions)",
            ),
            "                k = apply_rope(k, positions, c.rope_base)",
            "                k = apply_rope(k, positions)",
        ) + "  # rope_base ignored (apply_rope's default base)",
        mutate(_MINIGPT, """        if config.pos_encoding not in ("learned", "rope"):
            raise ValueError(f"MiniGPT supports pos_encoding 'learned' or 'rope', "
                             f"got {config.pos_encoding!r}")
""", ""),  # no check: every pos_encoding but 'rope' runs as learned positions
        _MINIGPT.replace("dropout_p=p_drop,", "dropout_p=0.0,") + "  # no dropout on the attention weights",
        _POST_LN + "  # post-LN blocks instead of pre-LN",
        mutate(
            _MINIGPT,
            "scale = 1.0 / math.sqrt(c.head_size)",
            "scale = 1.0",
        ) + "  # no 1/sqrt(head_size) scale",
        mutate(
            mutate(
                _MINIGPT,
                "k = k.repeat_interleave(group, dim=1)",
                "k = k.repeat(1, group, 1, 1)",
            ),
            "v = v.repeat_interleave(group, dim=1)",
            "v = v.repeat(1, group, 1, 1)",
        ) + "  # GQA: KV heads tiled (repeat) instead of each repeated for its group",
        mutate(
            _MINIGPT,
            "                k = apply_rope(k, positions, c.rope_base)",
            "                k = apply_rope(k, positions, c.rope_base)\n"
            "                v = apply_rope(v, positions, c.rope_base)",
        ) + "  # RoPE rotates the values too",
        mutate(_MINIGPT, "        if c.tie_weights:\n", "        if True:\n")
        + "  # the head is always tied, also when tie_weights is False",
        mutate(
            _MINIGPT,
            "        if c.tie_weights:\n            self.lm_head.weight = self.wte.weight\n",
            "",
        ) + "  # forgot to tie the head to the token table",
        mutate(
            _MINIGPT,
            "positions = torch.arange(start, start + T, device=idx.device)",
            "positions = torch.arange(T, device=idx.device)",
        ) + "  # with a cache the new tokens get positions 0 ... T-1 again",
        mutate(
            _MINIGPT,
            "mask = torch.ones(T, Tk, dtype=torch.bool, device=idx.device).tril(Tk - T)",
            "mask = torch.ones(T, Tk, dtype=torch.bool, device=idx.device).tril()",
        ) + "  # causal mask aligned to the start: wrong once keys are cached",
        mutate(
            _MINIGPT,
            "            return nn.LayerNorm(c.n_embd, eps=c.layer_norm_eps, bias=c.bias)",
            "            return nn.LayerNorm(c.n_embd, eps=c.layer_norm_eps)",
        ) + "  # LayerNorm biases also when bias=False",
    ],
    "generate_answer": [
        mutate(_GENERATE, "    model.train(was_training)\n", "") + "  # the model left in eval mode",
        mutate(
            _GENERATE,
            "                    cache, feed = model.new_cache(), context  # (re)start from the window",
            "                    cache, feed = model.new_cache(), (out if cache is None else context)",
        ) + "  # the first cache fill takes the whole prompt, not the last block_size tokens",
        mutate(
            mutate(
                _GENERATE,
                "                logits = logits / temperature\n",
                "",
            ),
            "                probs = torch.softmax(logits, dim=-1)",
            "                probs = torch.softmax(logits / temperature, dim=-1)",
        ) + "  # top-k/top-p before the temperature",
        mutate(
            _GENERATE,
            "                if top_k is not None:\n"
            "                    logits = top_k_filter(logits, top_k)\n"
            "                if top_p is not None:\n"
            "                    logits = top_p_filter(logits, top_p)\n",
            "                if top_p is not None:\n"
            "                    logits = top_p_filter(logits, top_p)\n"
            "                if top_k is not None:\n"
            "                    logits = top_k_filter(logits, top_k)\n",
        ) + "  # top-p before top-k",
        mutate(
            _GENERATE,
            "token = logits.argmax(dim=-1, keepdim=True)",
            "token = logits.topk(1, dim=-1).indices",
        ) + "  # greedy as topk(1): a tie may go to a higher id",
        mutate(
            _GENERATE,
            "                logits = logits / temperature\n",
            "                logits = logits * temperature\n",
        ) + "  # the logits multiplied by the temperature",
        mutate(
            _GENERATE,
            "                if cache is None or (window is not None and cache[\"length\"] + 1 > window):",
            "                if cache is None:",
        ) + "  # the cache is never restarted once learned positions run out",
        mutate(
            _GENERATE,
            "                if cache is None or (window is not None and cache[\"length\"] + 1 > window):\n"
            "                    cache, feed = model.new_cache(), context  # (re)start from the window\n",
            "                if cache is None:\n"
            "                    cache, feed = model.new_cache(), context\n"
            "                elif window is not None and cache[\"length\"] + 1 > window:\n"
            "                    cache = model.new_cache()  # the newest token goes in alone\n",
        ) + "  # a restarted cache is not refilled with the window",
        mutate(
            _GENERATE,
            "                logits = model(context)[0][:, -1]",
            "                logits = model(out)[0][:, -1]",
        ) + "  # the uncached context is not cropped to block_size",
    ],
    "train_answer": [
        mutate(_TRAIN, "        torch.set_rng_state(state[\"rng\"])\n", "")
        + "  # a resumed run does not restore torch's random state (dropout)",
        mutate(_TRAIN, "        step_model.train()\n        return out", "        return out")
        + "  # the model stays in eval mode after an evaluation",
        mutate(
            _TRAIN,
            "        if step % config.eval_interval == 0 or step == config.max_iters:\n"
            "            record()\n",
            "",
        ).replace(
            "            os.replace(path + \".tmp\", path)  # atomic: the old file or the new one, never half\n",
            "            os.replace(path + \".tmp\", path)  # atomic: the old file or the new one, never half\n"
            "        if step % config.eval_interval == 0 or step == config.max_iters:\n"
            "            record()\n",
        ) + "  # the checkpoint written before that step's evaluation",
        mutate(
            _TRAIN,
            "            torch.save(state, path + \".tmp\")\n"
            "            os.replace(path + \".tmp\", path)  # atomic: the old file or the new one, never half\n",
            "            torch.save(state, path)\n",
        ) + "  # the checkpoint written in place, not atomically",
        mutate(_TRAIN, "    torch.manual_seed(config.seed + 1)  # dropout's generator; a resumed run restores it below\n", "")
        + "  # dropout's generator not seeded (the run depends on what ran before it)",
        mutate(
            _TRAIN,
            "    groups = parameter_groups(model, config.weight_decay)",
            "    groups = [{\"params\": list(model.parameters()), \"weight_decay\": config.weight_decay}]",
        ) + "  # weight decay on every parameter (biases and LayerNorm gains too)",
        mutate(
            _TRAIN,
            "        lr = warmup_cosine_lr(step, max_lr",
            "        lr = warmup_cosine_lr(step + 1, max_lr",
        ) + "  # the schedule one step ahead",
        mutate(
            _TRAIN,
            "                loss = step_model(x, y)[1] / config.grad_accum_steps",
            "                loss = step_model(x, y)[1]",
        ) + "  # the loss is not divided by the accumulation steps",
        mutate(
            _TRAIN,
            "        if config.grad_clip > 0:\n"
            "            torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)\n"
            "        optimizer.step()\n",
            "        optimizer.step()\n"
            "        if config.grad_clip > 0:\n"
            "            torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)\n",
        ) + "  # gradients clipped after the optimizer step",
        mutate(
            _TRAIN,
            "        g.set_state(state[\"generator\"])\n",
            "",
        ) + "  # a resumed run restarts the batch generator",
        mutate(
            _TRAIN,
            "                eval_g = torch.Generator().manual_seed(config.seed + 10_000)\n",
            "",
        ).replace("generator=eval_g,", "generator=g,") + "  # evaluation draws from the training generator",
        mutate(
            _TRAIN,
            "            step_loss += loss.detach()",
            "            step_loss = loss.detach() * config.grad_accum_steps",
        ) + "  # the step's loss is the last micro-batch's",
    ],
}

RIGHT: dict[str, str] = {
    # modules of its own, the attention written out (softmax of masked scores), GQA by expand
    "minigpt_answer": """
class KV:
    def __init__(self, n_layer):
        self.layers = [None] * n_layer
        self.seen = 0

    def advance(self, n):
        self.seen += n


class SelfAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        kv = c.n_kv_head * c.head_size
        self.q_proj = nn.Linear(c.n_embd, c.n_embd, bias=c.bias)
        self.k_proj = nn.Linear(c.n_embd, kv, bias=c.bias)
        self.v_proj = nn.Linear(c.n_embd, kv, bias=c.bias)
        self.out_proj = nn.Linear(c.n_embd, c.n_embd, bias=c.bias)
        self.attn_drop = nn.Dropout(c.dropout)

    def forward(self, x, pos, kv=None, i=0):
        c = self.c
        B, T, _ = x.shape
        q = self.q_proj(x).reshape(B, T, c.n_head, c.head_size).permute(0, 2, 1, 3)
        k = self.k_proj(x).reshape(B, T, c.n_kv_head, c.head_size).permute(0, 2, 1, 3)
        v = self.v_proj(x).reshape(B, T, c.n_kv_head, c.head_size).permute(0, 2, 1, 3)
        if c.pos_encoding == "rope":
            q, k = apply_rope(q, pos, c.rope_base), apply_rope(k, pos, c.rope_base)
        if kv is not None:
            if kv.layers[i] is not None:
                k = torch.cat((kv.layers[i][0], k), 2)
                v = torch.cat((kv.layers[i][1], v), 2)
            kv.layers[i] = (k, v)
        S = k.shape[2]
        rep = c.n_head // c.n_kv_head
        k = k[:, :, None].expand(B, c.n_kv_head, rep, S, c.head_size).reshape(B, c.n_head, S, -1)
        v = v[:, :, None].expand(B, c.n_kv_head, rep, S, c.head_size).reshape(B, c.n_head, S, -1)
        scores = q @ k.transpose(2, 3) / math.sqrt(c.head_size)
        future = torch.arange(S)[None, :] > (torch.arange(T)[:, None] + S - T)
        scores = scores.masked_fill(future, float("-inf"))
        w = self.attn_drop(scores.softmax(-1))
        return self.out_proj((w @ v).permute(0, 2, 1, 3).reshape(B, T, c.n_embd))


class FFN(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.fc = nn.Linear(c.n_embd, c.d_ff, bias=c.bias)
        self.proj = nn.Linear(c.d_ff, c.n_embd, bias=c.bias)
        self.act = {"gelu": nn.GELU(), "gelu_tanh": nn.GELU("tanh"), "relu": nn.ReLU()}[
            c.activation]

    def forward(self, x):
        return self.proj(self.act(self.fc(x)))


class DecoderBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln_1 = nn.LayerNorm(c.n_embd, eps=c.layer_norm_eps, bias=c.bias)
        self.attn = SelfAttention(c)
        self.ln_2 = nn.LayerNorm(c.n_embd, eps=c.layer_norm_eps, bias=c.bias)
        self.mlp = FFN(c)
        self.drop = nn.Dropout(c.dropout)

    def forward(self, x, pos, kv, i):
        x = x + self.drop(self.attn(self.ln_1(x), pos, kv, i))
        return x + self.drop(self.mlp(self.ln_2(x)))


class MiniGPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        if config.pos_encoding != "learned" and config.pos_encoding != "rope":
            raise ValueError("pos_encoding: only learned and rope, not " + config.pos_encoding)
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        if config.pos_encoding == "learned":
            self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList([DecoderBlock(config) for _ in range(config.n_layer)])
        self.ln_f = nn.LayerNorm(config.n_embd, eps=config.layer_norm_eps, bias=config.bias)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        if config.tie_weights:
            self.lm_head.weight = self.wte.weight

    def new_cache(self):
        return KV(self.config.n_layer)

    def forward(self, idx, targets=None, cache=None):
        first = cache.seen if cache is not None else 0
        pos = torch.arange(first, first + idx.shape[1])
        h = self.wte(idx)
        if self.config.pos_encoding == "learned":
            h = h + self.wpe(pos)
        h = self.drop(h)
        for i, block in enumerate(self.blocks):
            h = block(h, pos, cache, i)
        if cache is not None:
            cache.advance(idx.shape[1])
        logits = self.lm_head(self.ln_f(h))
        if targets is None:
            return logits, None
        keep = targets.reshape(-1) != -100
        logp = logits.reshape(-1, logits.shape[-1])[keep].log_softmax(-1)
        loss = -logp.gather(1, targets.reshape(-1)[keep][:, None]).mean()
        return logits, loss
""",
    # the uncached context always cropped first; the cache restarted by counting tokens
    "generate_answer": """
def generate(model, idx, max_new_tokens, *, temperature=1.0, top_k=None, top_p=None,
             use_cache=True, generator=None):
    limit = model.config.block_size if model.config.pos_encoding == "learned" else 10**9
    mode = model.training
    model.eval()
    seq = idx.clone()
    cache, cached = None, 0  # the cache is opaque: count the tokens it holds here
    with torch.no_grad():
        for _ in range(max_new_tokens):
            if use_cache and cache is not None and cached < limit:
                logits, _ = model(seq[:, -1:], cache=cache)
                cached += 1
            elif use_cache:
                cache = model.new_cache()
                logits, _ = model(seq[:, -limit:], cache=cache)
                cached = min(seq.shape[1], limit)
            else:
                logits, _ = model(seq[:, -limit:])
            last = logits[:, -1, :].float()
            if temperature == 0:
                nxt = torch.argmax(last, dim=-1)[:, None]
            else:
                last = last / temperature
                last = last if top_k is None else top_k_filter(last, top_k)
                last = last if top_p is None else top_p_filter(last, top_p)
                nxt = torch.multinomial(F.softmax(last, dim=-1), 1, generator=generator)
            seq = torch.cat((seq, nxt), dim=1)
    model.train(mode)
    return seq
""",
    # a LambdaLR schedule, evaluation as a separate function, a checkpoint of its own layout
    "train_answer": """
def estimate(model, data, config, device):
    gen = torch.Generator().manual_seed(config.seed + 10_000)
    total = torch.zeros(config.eval_iters)
    for i in range(config.eval_iters):
        xb, yb = get_batch(data, config.batch_size, config.model.block_size, generator=gen,
                           device=device)
        total[i] = model(xb, yb)[1]
    return total.mean().item()


def train(model, config, train_data, val_data, *, resume=None):
    device = torch.device("cpu") if config.device == "cpu" else pick_device()
    if config.device not in ("auto", "cpu"):
        device = torch.device(config.device)
    model = model.to(device)
    opt = torch.optim.AdamW(parameter_groups(model, config.weight_decay),
                            lr=config.learning_rate, betas=(config.beta1, config.beta2))
    D = config.lr_decay_iters if config.lr_decay_iters > 0 else config.max_iters
    W = min(config.warmup_iters, D)

    def factor(s):
        return warmup_cosine_lr(s, max_lr=config.learning_rate, min_lr=config.min_lr,
                                warmup_iters=W, decay_iters=D) / config.learning_rate

    sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
    batches = torch.Generator()
    batches.manual_seed(config.seed)
    log = {"train_losses": [], "history": [], "step": 0}
    torch.manual_seed(config.seed + 1)
    if resume:
        saved = torch.load(resume, weights_only=True)
        model.load_state_dict(saved["weights"])
        opt.load_state_dict(saved["adamw"])
        sched.load_state_dict(saved["schedule"])
        batches.set_state(saved["batches"])
        torch.set_rng_state(saved["dropout"])
        log = saved["log"]

    def evaluate_now():
        model.eval()
        with torch.no_grad():
            tl = estimate(model, train_data, config, device)
            vl = estimate(model, val_data, config, device)
        model.train()
        log["history"].append({"step": log["step"], "train_loss": tl, "val_loss": vl})

    if not resume:
        evaluate_now()
    model.train()
    start = time.time()
    done = 0
    while log["step"] < config.max_iters:
        total = 0.0
        for _ in range(config.grad_accum_steps):
            xb, yb = get_batch(train_data, config.batch_size, config.model.block_size,
                               generator=batches, device=device)
            part = model(xb, yb)[1] / config.grad_accum_steps
            part.backward()
            total += part.item()
        if config.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        opt.step()
        opt.zero_grad()
        sched.step()
        log["step"] += 1
        done += 1
        log["train_losses"].append(total)
        s = log["step"]
        if s % config.eval_interval == 0 or s == config.max_iters:
            evaluate_now()
        if config.checkpoint_interval > 0 and s % config.checkpoint_interval == 0:
            os.makedirs(config.out_dir, exist_ok=True)
            final = os.path.join(config.out_dir, "ckpt_%06d.pt" % s)
            torch.save({"weights": model.state_dict(), "adamw": opt.state_dict(),
                        "schedule": sched.state_dict(), "batches": batches.get_state(),
                        "dropout": torch.get_rng_state(), "log": log}, final + ".partial")
            os.replace(final + ".partial", final)
    rate = done * config.batch_size * config.model.block_size * config.grad_accum_steps
    log["tokens_per_second"] = rate / max(time.time() - start, 1e-9)
    return log
""",
}

# Answers that hand the work to course_lib: they earn the visible points only.
FORBIDDEN: dict[str, str] = {
    "minigpt_answer": """
class MiniGPT(GPT):
    def __init__(self, config):
        if config.pos_encoding not in ("learned", "rope"):
            raise ValueError("pos_encoding must be 'learned' or 'rope'")
        super().__init__(config)

    def new_cache(self):
        return None

    def forward(self, idx, targets=None, cache=None):
        return super().forward(idx, targets)
""",
    "generate_answer": """
def generate(model, idx, max_new_tokens, *, temperature=1.0, top_k=None, top_p=None,
             use_cache=True, generator=None):
    if temperature == 0:
        return gen_ref.generate(model, idx, max_new_tokens, use_cache=False)
    return gen_ref.generate(model, idx, max_new_tokens, strategy="sample",
                            temperature=temperature, top_k=top_k, top_p=top_p,
                            use_cache=False, generator=generator)
""",
    "train_answer": """
def train(model, config, train_data, val_data, *, resume=None):
    run = ref.train(config, data=(train_data, val_data, vocab), resume=resume)
    model.load_state_dict(run.model.state_dict())
    return {"train_losses": run.train_losses, "history": run.history, "step": run.step,
            "tokens_per_second": run.tokens_per_second}
""",
}
