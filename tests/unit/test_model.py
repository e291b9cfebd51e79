"""Spec of lesson 06's GPT (course_lib.model): LayerNorm, MLP, the pre-LN Block, GPT and
GPTClassifier.

References are written out by hand, in float64 and eval mode (dropout 0):
- LayerNorm as w * (x - mean) / sqrt(var + eps) + b with the biased variance, over the last axis;
- attention as q, k, v projections, scores / sqrt(d_h), an explicit causal mask, softmax and the
  output projection, with GQA's key/value heads repeated, ALiBi's -m_h (i - j) added to the
  scores and RoPE's pair rotations applied to queries and keys;
- the Block as x1 = x + attn(ln_1(x)); x2 = x1 + mlp(ln_2(x1)), and the GPT as the token table
  (+ the position table or the sin/cos vectors) -> Blocks -> ln_f -> lm_head.
Parity with `transformers`' GPT-2 lives in tests/interop/test_model_transformers.py.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from course_lib.attention import MultiHeadAttention
from course_lib.metrics import topk_accuracy
from course_lib.model import (
    ACTIVATIONS,
    GPT,
    MLP,
    POS_ENCODINGS,
    Block,
    GPTClassifier,
    GPTConfig,
    LayerNorm,
    PostLNBlock,
    count_parameters,
)
from course_lib.positional import RotaryMultiHeadAttention

F64 = torch.float64
TIGHT = {"atol": 1e-10, "rtol": 1e-10}
GPT2_SMALL_PARAMS = 124_439_808
TINY = {"vocab_size": 23, "block_size": 8, "n_layer": 2, "n_head": 4, "n_embd": 16}


pytestmark = pytest.mark.usefixtures("one_thread")


def _randn(*shape, seed=0, dtype=F64):
    return torch.randn(*shape, dtype=dtype, generator=torch.Generator().manual_seed(seed))


def _ids(B, T, vocab_size=TINY["vocab_size"], seed=0):
    return torch.randint(0, vocab_size, (B, T), generator=torch.Generator().manual_seed(seed))


def _config(**overrides):
    return GPTConfig(**{**TINY, **overrides})


def _seeded(build, seed=0):
    """build() under torch.manual_seed(seed), without touching the global RNG of other tests."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return build()


def _gpt(seed=0, dtype=F64, **overrides):
    """A tiny GPT in eval mode; the LayerNorms get random affine weights (they start at 1 and 0,
    which would hide a missing w or b) and so do the biases (they start at 0)."""
    model = _seeded(lambda: GPT(_config(**overrides)), seed).to(dtype).eval()
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or ".ln_" in name or name.startswith("ln_f"):
                p.add_(0.1 * torch.randn(p.shape, dtype=p.dtype, generator=g))
    return model


# ------------------------------------------------------------------------------------------
# hand-written references
# ------------------------------------------------------------------------------------------

def _layer_norm_by_hand(x, w, b, eps):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)          # biased: divide by D
    out = (x - mean) / torch.sqrt(var + eps) * w
    return out if b is None else out + b


def _rope_by_hand(x, base):
    """x (B, H, T, d): pair (2i, 2i+1) at position m turned by the angle m * base^(-2i/d)."""
    T, d = x.shape[-2:]
    angle = torch.arange(T, dtype=F64)[:, None] * base ** (-torch.arange(0, d, 2, dtype=F64) / d)
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    a, b = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2], out[..., 1::2] = a * cos - b * sin, a * sin + b * cos
    return out


def _alibi_by_hand(H, T):
    """-m_h (i - j) with the paper's slopes m_h = 2^(-8 (h + 1) / H) (H a power of two)."""
    assert H & (H - 1) == 0, "this reference only knows the power-of-two slopes"
    m = torch.tensor([2.0 ** (-8 * (h + 1) / H) for h in range(H)], dtype=F64)
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    return -m[:, None, None] * (i - j).to(F64)


def _causal_attention_by_hand(attn, x, *, alibi=False, rope_base=None):
    B, T, _ = x.shape
    H, Hkv, dh = attn.n_head, attn.n_kv_head, attn.head_size
    q = attn.q_proj(x).view(B, T, H, dh).transpose(1, 2)
    k = attn.k_proj(x).view(B, T, Hkv, dh).transpose(1, 2)
    v = attn.v_proj(x).view(B, T, Hkv, dh).transpose(1, 2)
    if rope_base is not None:
        q, k = _rope_by_hand(q, rope_base), _rope_by_hand(k, rope_base)
    k, v = k.repeat_interleave(H // Hkv, dim=1), v.repeat_interleave(H // Hkv, dim=1)  # head h reads group h // (H / Hkv)
    scores = q @ k.transpose(-2, -1) / math.sqrt(dh)
    if alibi:
        scores = scores + _alibi_by_hand(H, T).to(x.dtype)
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    weights = scores.masked_fill(future, float("-inf")).softmax(-1)
    return attn.out_proj((weights @ v).transpose(1, 2).reshape(B, T, H * dh))


def _block_by_hand(block, x, **attention):
    x1 = x + _causal_attention_by_hand(block.attn, block.ln_1(x), **attention)
    return x1 + block.mlp(block.ln_2(x1))


def _sinusoids_by_hand(T, d):
    p = torch.arange(T, dtype=F64)[:, None]
    c = torch.arange(d)[None, :]
    angle = p * 10000.0 ** (-2 * torch.div(c, 2, rounding_mode="floor").to(F64) / d)
    return torch.where(c % 2 == 0, angle.sin(), angle.cos())


def _gpt_logits_by_hand(model, idx):
    c, T = model.config, idx.shape[1]
    x = model.wte.weight[idx]
    if c.pos_encoding == "learned":
        x = x + model.wpe.weight[:T]
    elif c.pos_encoding == "sinusoidal":
        x = x + _sinusoids_by_hand(T, c.n_embd).to(x.dtype)
    attention = {"alibi": c.pos_encoding == "alibi",
                 "rope_base": c.rope_base if c.pos_encoding == "rope" else None}
    for block in model.blocks:
        x = _block_by_hand(block, x, **attention)
    return model.ln_f(x) @ model.lm_head.weight.T


# ------------------------------------------------------------------------------------------
# GPTConfig
# ------------------------------------------------------------------------------------------

def test_config_defaults_are_gpt2_small_with_mha_and_a_4x_mlp():
    c = GPTConfig()
    assert (c.vocab_size, c.block_size, c.n_layer, c.n_head, c.n_embd) == (50257, 1024, 12, 12, 768)
    assert c.n_kv_head == c.n_head, "n_kv_head=None should mean MHA (n_kv_head = n_head)"
    assert c.d_ff == 4 * c.n_embd, "d_ff=None should mean 4 * n_embd"
    assert c.head_size == 64
    assert (c.pos_encoding, c.tie_weights, c.bias) == ("learned", True, True)


CONFIG_ERRORS = [
    ({"n_embd": 18, "n_head": 4}, "n_embd=18 is not divisible by n_head=4"),
    ({"n_head": 4, "n_kv_head": 3}, "n_head=4 is not divisible by n_kv_head=3"),
    ({"n_embd": 12, "n_head": 4, "pos_encoding": "rope"}, "must be even"),
    ({"pos_encoding": "absolute"}, "pos_encoding must be one of"),
    ({"activation": "swish"}, "activation must be one of"),
    ({"dropout": 1.0}, r"dropout must be in \[0, 1\)"),
    ({"dropout": -0.1}, r"dropout must be in \[0, 1\)"),
    ({"layer_norm_eps": 0.0}, "layer_norm_eps must be > 0"),
    ({"n_layer": 0}, "n_layer must be an integer >= 1"),
    ({"vocab_size": 2.5}, "vocab_size must be an integer >= 1"),
    ({"n_kv_head": 0}, "n_kv_head must be an integer >= 1"),
    ({"d_ff": 0}, "d_ff must be an integer >= 1"),
]


@pytest.mark.parametrize(("overrides", "match"), CONFIG_ERRORS)
def test_bad_configs_are_refused_with_a_message_that_says_why(overrides, match):
    with pytest.raises(ValueError, match=match):
        _config(**overrides)


def test_gpt_refuses_anything_but_a_gptconfig():
    with pytest.raises(TypeError, match="GPT needs a GPTConfig, got dict"):
        GPT(dict(TINY))


# ------------------------------------------------------------------------------------------
# LayerNorm
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("eps", [1e-5, 0.1])
def test_layer_norm_is_the_formula_with_the_biased_variance_over_the_last_axis(eps):
    ln = LayerNorm(6, eps=eps).double()
    with torch.no_grad():
        ln.weight.copy_(_randn(6, seed=1))
        ln.bias.copy_(_randn(6, seed=2))
    x = 3 * _randn(2, 5, 6) + 1
    torch.testing.assert_close(ln(x), _layer_norm_by_hand(x, ln.weight, ln.bias, eps), **TIGHT)
    unbiased = ((x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True) + eps)
                * ln.weight + ln.bias)
    assert not torch.allclose(ln(x), unbiased, **TIGHT), "LayerNorm must divide by D, not D - 1"


def test_layer_norm_normalises_each_token_on_its_own():
    ln = LayerNorm(6).double()
    x = _randn(3, 4, 6)
    y = x.clone()
    y[1, 2] = 100 * y[1, 2] + 7          # one token changes: only its own output may change
    same = torch.ones(3, 4, dtype=torch.bool)
    same[1, 2] = False
    torch.testing.assert_close(ln(y)[same], ln(x)[same], **TIGHT)
    out = ln(x)
    torch.testing.assert_close(out.mean(-1), torch.zeros(3, 4, dtype=F64), atol=1e-12, rtol=0)
    torch.testing.assert_close(out.var(-1, unbiased=False), torch.full((3, 4), 1.0, dtype=F64),
                               atol=1e-4, rtol=0)


def test_layer_norm_equals_torch_layer_norm_with_the_same_weights():
    ours, torch_ln = LayerNorm(8, eps=1e-6), nn.LayerNorm(8, eps=1e-6)
    with torch.no_grad():
        ours.weight.copy_(_randn(8, seed=1, dtype=torch.float32))
        ours.bias.copy_(_randn(8, seed=2, dtype=torch.float32))
        torch_ln.weight.copy_(ours.weight)
        torch_ln.bias.copy_(ours.bias)
    x = _randn(2, 3, 8, seed=5, dtype=torch.float32)
    torch.testing.assert_close(ours(x), torch_ln(x))
    assert [n for n, _ in ours.named_parameters()] == ["weight", "bias"]
    fresh = LayerNorm(8)
    assert torch.equal(fresh.weight, torch.ones(8)), "LayerNorm's weight must start at 1"
    assert torch.equal(fresh.bias, torch.zeros(8)), "LayerNorm's bias must start at 0"


def test_layer_norm_without_bias_has_no_bias_parameter_and_adds_nothing():
    ln = LayerNorm(6, bias=False).double()
    assert ln.bias is None
    assert [n for n, _ in ln.named_parameters()] == ["weight"]
    with torch.no_grad():
        ln.weight.copy_(_randn(6, seed=3))
    x = _randn(4, 6)
    torch.testing.assert_close(ln(x), _layer_norm_by_hand(x, ln.weight, None, 1e-5), **TIGHT)


def test_layer_norm_eps_keeps_a_constant_vector_finite():
    ln = LayerNorm(5, eps=1e-5).double()
    out = ln(torch.full((2, 5), 3.0, dtype=F64))
    assert torch.isfinite(out).all(), "var = 0: eps must keep 1 / sqrt(var + eps) finite"
    torch.testing.assert_close(out, torch.zeros(2, 5, dtype=F64), **TIGHT)


# ------------------------------------------------------------------------------------------
# MLP
# ------------------------------------------------------------------------------------------

ACTIVATION_FUNCTIONS = {"relu": F.relu, "gelu": F.gelu,
                        "gelu_tanh": lambda x: F.gelu(x, approximate="tanh")}


def test_activation_table_is_relu_gelu_and_gelu_tanh():
    assert set(ACTIVATIONS) == set(ACTIVATION_FUNCTIONS)


@pytest.mark.parametrize("activation", sorted(ACTIVATION_FUNCTIONS))
def test_mlp_is_fc_then_the_activation_then_proj(activation):
    mlp = _seeded(lambda: MLP(_config(activation=activation, d_ff=24))).double()
    x = _randn(2, 5, 16)
    expected = mlp.proj(ACTIVATION_FUNCTIONS[activation](mlp.fc(x)))
    torch.testing.assert_close(mlp(x), expected, **TIGHT)
    assert mlp(x).shape == (2, 5, 16)
    assert (mlp.fc.in_features, mlp.fc.out_features, mlp.proj.out_features) == (16, 24, 16)
    others = [a for a in ACTIVATION_FUNCTIONS if a != activation]
    for other in others:
        wrong = mlp.proj(ACTIVATION_FUNCTIONS[other](mlp.fc(x)))
        assert not torch.allclose(mlp(x), wrong, **TIGHT), f"{activation} acts like {other}"


def test_mlp_is_position_wise_so_permuting_positions_permutes_the_output():
    mlp = _seeded(lambda: MLP(_config())).double()
    x = _randn(2, 7, 16)
    perm = torch.tensor([3, 0, 6, 1, 5, 2, 4])
    torch.testing.assert_close(mlp(x[:, perm]), mlp(x)[:, perm], **TIGHT)
    torch.testing.assert_close(mlp(x[:, 2:3]), mlp(x)[:, 2:3], **TIGHT)


def test_mlp_without_bias_has_no_biases():
    mlp = MLP(_config(bias=False))
    assert mlp.fc.bias is None
    assert mlp.proj.bias is None


# ------------------------------------------------------------------------------------------
# Block
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n_kv_head", [4, 2, 1])
def test_block_is_pre_ln_attention_then_mlp_each_added_to_the_residual(n_kv_head):
    model = _gpt(n_kv_head=n_kv_head)
    block = model.blocks[0]
    assert isinstance(block, Block)
    assert isinstance(block.attn, MultiHeadAttention)
    x = _randn(2, 6, 16, seed=7)
    torch.testing.assert_close(block(x), _block_by_hand(block, x), **TIGHT)
    post_ln = block.ln_2(x + _causal_attention_by_hand(block.attn, x))
    post_ln = block.ln_2(post_ln + block.mlp(post_ln))
    assert not torch.allclose(block(x), post_ln, **TIGHT), "the Block behaves like post-LN"


def test_block_is_causal():
    block = _gpt().blocks[1]
    x = _randn(2, 7, 16, seed=1)
    y = x.clone()
    y[:, 4:] = _randn(2, 3, 16, seed=2)
    torch.testing.assert_close(block(y)[:, :4], block(x)[:, :4], **TIGHT)
    assert not torch.allclose(block(y)[:, 4], block(x)[:, 4]), "position 4 ignores its own input"


def test_rope_blocks_use_rotary_attention_with_the_configured_base():
    model = _gpt(pos_encoding="rope", rope_base=500.0)
    assert all(isinstance(b.attn, RotaryMultiHeadAttention) for b in model.blocks)
    assert {b.attn.base for b in model.blocks} == {500.0}


# ------------------------------------------------------------------------------------------
# GPT forward
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("pos_encoding", POS_ENCODINGS)
@pytest.mark.parametrize("n_kv_head", [4, 1])
def test_gpt_logits_are_the_whole_pipeline_written_out(pos_encoding, n_kv_head):
    model = _gpt(pos_encoding=pos_encoding, n_kv_head=n_kv_head)
    idx = _ids(3, 8)
    logits, loss = model(idx)
    assert logits.shape == (3, 8, TINY["vocab_size"])
    assert loss is None
    torch.testing.assert_close(logits, _gpt_logits_by_hand(model, idx), **TIGHT)


@pytest.mark.parametrize("pos_encoding", POS_ENCODINGS)
@pytest.mark.parametrize("n_kv_head", [4, 2, 1])
def test_gpt_is_causal_for_every_position_encoding_and_kv_head_count(pos_encoding, n_kv_head):
    model = _gpt(pos_encoding=pos_encoding, n_kv_head=n_kv_head)
    idx = _ids(2, 8, seed=1)
    changed = idx.clone()
    changed[:, 5:] = (changed[:, 5:] + 1) % TINY["vocab_size"]
    before, after = model(idx)[0], model(changed)[0]
    torch.testing.assert_close(after[:, :5], before[:, :5], **TIGHT)
    assert not torch.allclose(after[:, 5], before[:, 5]), \
        "the logits at a changed position did not change"


def test_sinusoidal_gpt_adds_the_sin_cos_vectors_to_the_token_vectors():
    model = _gpt(pos_encoding="sinusoidal")
    seen = []
    model.drop.register_forward_hook(lambda module, args, out: seen.append(args[0]))
    idx = _ids(2, 13)                        # longer than block_size = 8: still defined
    model(idx)
    expected = model.wte.weight[idx] + _sinusoids_by_hand(13, 16)
    torch.testing.assert_close(seen[0], expected, **TIGHT)
    assert model.wpe is None


def test_learned_positions_refuse_sequences_longer_than_block_size_and_say_how_to_crop():
    model = _gpt(pos_encoding="learned")
    assert model(_ids(1, 8))[0].shape == (1, 8, TINY["vocab_size"]), "T = block_size must run"
    with pytest.raises(ValueError, match=r"9 tokens is longer than block_size=8") as error:
        model(_ids(1, 9))
    assert "idx[:, -8:]" in str(error.value), f"no crop hint in: {error.value}"


@pytest.mark.parametrize("pos_encoding", [p for p in POS_ENCODINGS if p != "learned"])
def test_other_encodings_run_past_block_size_and_the_prefix_is_unchanged(pos_encoding):
    model = _gpt(pos_encoding=pos_encoding)
    idx = _ids(2, 20, seed=3)
    long_logits = model(idx)[0]
    assert long_logits.shape == (2, 20, TINY["vocab_size"])
    assert torch.isfinite(long_logits).all()
    torch.testing.assert_close(long_logits[:, :8], model(idx[:, :8])[0], **TIGHT)


def test_without_positions_one_layer_cannot_see_the_order_of_the_context():
    """With pos_encoding="none" and a single layer, the last token attends to the *set* of
    tokens before it, so shuffling them leaves its logits unchanged; a second layer sees the
    order through the causal mask (token t's first-layer vector depends on tokens 0..t)."""
    idx = _ids(1, 8, seed=4)
    shuffled = torch.cat([idx[:, [5, 2, 0, 6, 1, 4, 3]], idx[:, 7:]], dim=1)
    assert not torch.equal(shuffled, idx)
    one_layer = _gpt(pos_encoding="none", n_layer=1)
    torch.testing.assert_close(one_layer(shuffled)[0][:, -1], one_layer(idx)[0][:, -1], **TIGHT)
    for leaky in (_gpt(pos_encoding="none", n_layer=2), _gpt(pos_encoding="learned", n_layer=1),
                  _gpt(pos_encoding="alibi", n_layer=1), _gpt(pos_encoding="rope", n_layer=1)):
        assert not torch.allclose(leaky(shuffled)[0][:, -1], leaky(idx)[0][:, -1]), \
            f"{leaky.config.pos_encoding}, {leaky.config.n_layer} layers: blind to the order"


IDX_ERRORS = [
    (lambda: _ids(2, 5) * 0 + 23, ValueError, r"must lie in \[0, 22\] \(vocab_size=23\), got 23"),
    (lambda: _ids(2, 5) * 0 - 1, ValueError, r"must lie in \[0, 22\].*got -1"),
    (lambda: _ids(2, 5).float(), TypeError, "integer dtype"),
    (lambda: _ids(2, 5).tolist(), TypeError, "torch.Tensor"),
    (lambda: _ids(1, 5)[0], ValueError, r"idx must have shape \(B, T\), got \(5,\).*idx\[None\]"),
    (lambda: _ids(1, 5)[None], ValueError, r"idx must have shape \(B, T\), got \(1, 1, 5\)"),
    (lambda: torch.zeros(2, 0, dtype=torch.long), ValueError, "no tokens"),
]


@pytest.mark.parametrize(("make_idx", "error", "match"), IDX_ERRORS)
def test_bad_token_ids_are_refused_with_a_clear_message(make_idx, error, match):
    model = _gpt()
    with pytest.raises(error, match=match):
        model(make_idx())


# ------------------------------------------------------------------------------------------
# loss
# ------------------------------------------------------------------------------------------

def test_loss_is_the_mean_cross_entropy_over_all_positions():
    model = _gpt(dtype=torch.float32)
    idx, targets = _ids(3, 8, seed=1), _ids(3, 8, seed=2)
    logits, loss = model(idx, targets)
    expected = F.cross_entropy(logits.reshape(-1, TINY["vocab_size"]), targets.reshape(-1))
    torch.testing.assert_close(loss, expected)
    assert loss.dim() == 0
    assert loss.dtype == torch.float32
    by_hand = -logits.log_softmax(-1).gather(-1, targets[..., None]).mean()
    torch.testing.assert_close(loss, by_hand)


def test_targets_of_minus_100_are_ignored_by_the_loss():
    model = _gpt()
    idx, targets = _ids(2, 8, seed=1), _ids(2, 8, seed=2)
    padded = targets.clone()
    padded[0, 5:] = -100
    padded[1, :2] = -100
    logits, loss = model(idx, padded)
    keep = padded != -100
    expected = F.cross_entropy(logits[keep], targets[keep])
    torch.testing.assert_close(loss, expected)
    assert not torch.allclose(loss, model(idx, targets)[1]), "-100 targets changed nothing"


def test_a_float64_gpt_computes_its_loss_in_float64():
    _, loss = _gpt(dtype=F64)(_ids(2, 8), _ids(2, 8, seed=1))
    assert loss.dtype == F64, f"a float64 model's loss is {loss.dtype}"


def test_a_float64_classifier_computes_its_loss_in_float64():
    _, loss = _classifier()(_ids(2, 8), torch.tensor([0, 2]))
    assert loss.dtype == F64, f"a float64 classifier's loss is {loss.dtype}"


def test_a_half_precision_loss_is_computed_in_float32():
    model = _gpt(dtype=torch.bfloat16)
    logits, loss = model(_ids(2, 8), _ids(2, 8, seed=1))
    assert logits.dtype == torch.bfloat16
    assert loss.dtype == torch.float32


@pytest.mark.parametrize("shape", [(2, 7), (8,), (2, 8, 1), (1, 8)])
def test_targets_of_another_shape_than_idx_are_refused(shape):
    with pytest.raises(ValueError, match=r"targets must have the shape of idx \(2, 8\)"):
        _gpt()(_ids(2, 8), torch.zeros(shape, dtype=torch.long))


# ------------------------------------------------------------------------------------------
# weights: tying, initialisation, parameter counts
# ------------------------------------------------------------------------------------------

def test_the_output_head_is_the_token_table_when_tied_and_its_own_matrix_otherwise():
    tied, untied = _gpt(tie_weights=True), _gpt(tie_weights=False)
    assert tied.lm_head.weight is tied.wte.weight, "tie_weights=True: lm_head must reuse wte"
    assert untied.lm_head.weight is not untied.wte.weight
    assert not torch.equal(untied.lm_head.weight, untied.wte.weight)
    assert tied.lm_head.bias is None
    assert untied.lm_head.bias is None


def test_gpt2_init_normal_002_and_residual_projections_scaled_by_one_over_sqrt_2_n_layer():
    n_layer = 4
    model = _seeded(lambda: GPT(GPTConfig(vocab_size=512, block_size=256, n_layer=n_layer,
                                          n_head=4, n_embd=256, tie_weights=False)))
    residual_std = 0.02 / math.sqrt(2 * n_layer)
    checked = {"residual": 0, "other": 0}
    for name, p in model.named_parameters():
        if ".ln_" in name or name.startswith("ln_f"):
            expected = torch.ones_like(p) if name.endswith("weight") else torch.zeros_like(p)
            assert torch.equal(p, expected), f"{name} should start at {expected[0].item()}"
        elif name.endswith("bias"):
            assert torch.equal(p, torch.zeros_like(p)), f"{name} should start at 0"
        else:
            residual = name.endswith(("attn.out_proj.weight", "mlp.proj.weight"))
            expected = residual_std if residual else 0.02
            std = p.detach().std().item()
            assert abs(std - expected) < 0.1 * expected, f"{name}: std {std:.5f}, want {expected:.5f}"
            assert abs(p.detach().mean().item()) < 0.1 * expected, f"{name}: mean is not 0"
            checked["residual" if residual else "other"] += 1
    # per layer: out_proj, mlp.proj | q, k, v, fc; plus wte, wpe, lm_head
    assert checked == {"residual": 2 * n_layer, "other": 4 * n_layer + 3}, checked


@pytest.mark.parametrize("tie_weights", [True, False])
def test_widening_weights_are_stored_input_major_and_narrowing_ones_as_they_are(tie_weights):
    """Generation reads each weight with one matrix-vector product per token; the layout is the
    one BLAS reads faster (benchmarks/RESULTS.md). Only strides change, never values or shapes."""
    model = _seeded(lambda: GPT(_config(n_kv_head=2, tie_weights=tie_weights)))
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            w = module.weight
            widening = module.out_features >= module.in_features
            assert w.shape == (module.out_features, module.in_features), name
            assert w.t().is_contiguous() == widening, (
                f"{name} ({module.in_features} -> {module.out_features}): W^T contiguous should be "
                f"{widening}, strides {w.stride()}")
    assert (model.lm_head.weight is model.wte.weight) == tie_weights, "the layout must keep the tie"


def test_the_weight_layout_changes_no_value_no_gradient_and_survives_save_load_and_to():
    model = _gpt()
    dense = _gpt().use_plain_layout()   # the same values, every weight contiguous (out, in)
    assert all(p.is_contiguous() for p in dense.parameters()), "use_plain_layout left a strided weight"
    assert dense.lm_head.weight is dense.wte.weight
    idx = _ids(2, 8)
    logits, loss = model(idx, _ids(2, 8, seed=1))
    dense_logits, dense_loss = dense(idx, _ids(2, 8, seed=1))
    torch.testing.assert_close(logits, dense_logits, **TIGHT)
    loss.backward()
    dense_loss.backward()
    for (name, p), q in zip(model.named_parameters(), dense.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, **TIGHT, msg=f"gradient of {name}")
    copy = GPT(model.config).to(F64)
    copy.load_state_dict(model.state_dict())
    assert copy.lm_head.weight.t().is_contiguous(), "load_state_dict keeps the layout"
    assert copy.lm_head.weight is copy.wte.weight, "load_state_dict keeps the tie"
    torch.testing.assert_close(copy.eval()(idx)[0], logits.detach(), **TIGHT)
    half = copy.to(torch.float32)
    assert half.blocks[0].mlp.fc.weight.t().is_contiguous(), ".to(dtype) keeps the layout"


PARAM_GRID = [
    {},
    {"bias": False},
    {"tie_weights": False},
    {"bias": False, "tie_weights": False},
    *({"pos_encoding": p} for p in POS_ENCODINGS),
    {"n_kv_head": 2},
    {"n_kv_head": 1, "bias": False},
    {"d_ff": 24},
    {"d_ff": 7, "n_layer": 3, "tie_weights": False, "pos_encoding": "rope", "n_kv_head": 2},
    {"n_embd": 24, "n_head": 6, "n_kv_head": 3, "pos_encoding": "alibi", "block_size": 5,
     "vocab_size": 101, "bias": False, "d_ff": 40},
]


@pytest.mark.parametrize("overrides", PARAM_GRID, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "tiny")
def test_count_parameters_in_closed_form_equals_num_params(overrides):
    config = _config(**overrides)
    model = GPT(config)
    assert count_parameters(config) == model.num_params(), overrides
    assert model.num_params() == sum(p.numel() for p in model.parameters())


def test_num_params_counts_tied_weights_once():
    tied, untied = GPT(_config()), GPT(_config(tie_weights=False))
    V, D = TINY["vocab_size"], TINY["n_embd"]
    assert untied.num_params() - tied.num_params() == V * D
    assert tied.num_params() == len(torch.cat([p.flatten() for p in tied.parameters()]))


def test_gpt2_small_has_124_439_808_parameters_in_closed_form():
    assert count_parameters(GPTConfig()) == GPT2_SMALL_PARAMS
    # by hand: tables V D + 1024 D; 12 layers of 12 D^2 + 13 D; the final LayerNorm 2 D
    V, D = 50257, 768
    assert V * D + 1024 * D + 12 * (12 * D * D + 13 * D) + 2 * D == GPT2_SMALL_PARAMS
    assert count_parameters(GPTConfig(tie_weights=False)) == GPT2_SMALL_PARAMS + V * D


@pytest.mark.parametrize("overrides", [{}, {"tie_weights": False}, {"pos_encoding": "rope"}])
def test_non_embedding_params_leave_out_the_tables_that_are_only_looked_up(overrides):
    """nanoGPT's convention: the position table always, the token table only when it is not also
    the (tied) output head."""
    model = GPT(_config(**overrides))
    V, D, T = TINY["vocab_size"], TINY["n_embd"], TINY["block_size"]
    lookup_only = (T * D if model.config.pos_encoding == "learned" else 0) + (0 if model.config.tie_weights else V * D)
    assert model.num_params(non_embedding=True) == model.num_params() - lookup_only
    excluded = {"wpe.weight"} | (set() if model.config.tie_weights else {"wte.weight"})
    assert model.num_params(non_embedding=True) == sum(
        p.numel() for n, p in model.named_parameters() if n not in excluded)


# ------------------------------------------------------------------------------------------
# dropout
# ------------------------------------------------------------------------------------------

def test_dropout_is_random_in_train_mode_and_off_in_eval_mode():
    model = _gpt(dropout=0.3, dtype=torch.float32)
    idx = _ids(2, 8)
    model.train()
    a, b = model(idx)[0], model(idx)[0]
    assert not torch.allclose(a, b), "train mode with dropout > 0: two calls should differ"
    model.eval()
    torch.testing.assert_close(model(idx)[0], model(idx)[0], atol=0, rtol=0)
    no_dropout = GPT(_config(dropout=0.0)).eval()
    no_dropout.load_state_dict(model.state_dict())
    torch.testing.assert_close(model(idx)[0], no_dropout(idx)[0], atol=0, rtol=0)


# ------------------------------------------------------------------------------------------
# GPTClassifier
# ------------------------------------------------------------------------------------------

def _classifier(pooling="last", n_classes=3, **overrides):
    clf = _seeded(lambda: GPTClassifier(_config(**overrides), n_classes, pooling)).double().eval()
    with torch.no_grad():                         # a non-zero head, so pooling differences show
        clf.head.weight.copy_(_randn(n_classes, TINY["n_embd"], seed=9))
        clf.head.bias.copy_(_randn(n_classes, seed=10))
    return clf


def test_last_pooling_reads_each_sequences_last_real_token():
    clf = _classifier("last")
    idx, lengths = _ids(3, 8), torch.tensor([8, 3, 1])
    logits, loss = clf(idx, lengths=lengths)
    h = clf.backbone.hidden_states(idx)
    expected = clf.head(torch.stack([h[0, 7], h[1, 2], h[2, 0]]))
    assert logits.shape == (3, 3)
    assert loss is None
    torch.testing.assert_close(logits, expected, **TIGHT)
    torch.testing.assert_close(clf(idx)[0], clf.head(h[:, -1]), **TIGHT)   # default: length T


def test_mean_pooling_averages_only_the_real_tokens():
    clf = _classifier("mean")
    idx, lengths = _ids(3, 8), torch.tensor([8, 3, 1])
    h = clf.backbone.hidden_states(idx)
    expected = clf.head(torch.stack([h[0].mean(0), h[1, :3].mean(0), h[2, 0]]))
    torch.testing.assert_close(clf(idx, lengths=lengths)[0], expected, **TIGHT)
    torch.testing.assert_close(clf(idx)[0], clf.head(h.mean(1)), **TIGHT)


@pytest.mark.parametrize("pooling", ["last", "mean"])
def test_right_padding_does_not_change_the_classification(pooling):
    clf = _classifier(pooling)
    idx, lengths = _ids(3, 8), torch.tensor([8, 5, 2])
    other_pads = idx.clone()
    for b, n in enumerate(lengths.tolist()):
        other_pads[b, n:] = (other_pads[b, n:] + 7) % TINY["vocab_size"]
    torch.testing.assert_close(clf(other_pads, lengths=lengths)[0], clf(idx, lengths=lengths)[0],
                               **TIGHT)
    assert not torch.allclose(clf(other_pads)[0][1:], clf(idx)[0][1:]), \
        "without lengths the pads are real tokens and should matter"


def test_classifier_loss_is_the_cross_entropy_of_the_logits():
    clf = _classifier("mean", n_classes=4)
    idx, labels = _ids(5, 6), torch.tensor([0, 3, 1, 1, 2])
    logits, loss = clf(idx, labels, lengths=torch.tensor([6, 2, 4, 1, 5]))
    assert logits.shape == (5, 4)
    torch.testing.assert_close(loss, F.cross_entropy(logits, labels))


@pytest.mark.parametrize(("lengths", "match"), [
    (torch.tensor([8, 0]), r"lengths must lie in 1..T = 1..8"),
    (torch.tensor([9, 3]), r"lengths must lie in 1..T = 1..8"),
    (torch.tensor([8, 3, 2]), r"lengths must be a tensor of shape \(B,\) = \(2,\)"),
    (torch.tensor([[8, 3]]), r"lengths must be a tensor of shape \(B,\)"),
    ([8, 3], r"lengths must be a tensor"),
])
def test_invalid_lengths_are_refused(lengths, match):
    with pytest.raises(ValueError, match=match):
        _classifier()(_ids(2, 8), lengths=lengths)


@pytest.mark.parametrize("lengths", [torch.tensor([8.0, 3.0]), torch.tensor([True, True])])
def test_lengths_that_are_not_integers_are_refused_with_the_fix(lengths):
    with pytest.raises(TypeError, match=r"lengths must be integers .*lengths.long\(\)"):
        _classifier()(_ids(2, 8), lengths=lengths)


def test_post_ln_block_normalises_after_each_sum_and_loads_a_pre_ln_blocks_weights():
    """PostLNBlock: X1 = LN1(X + MHA(X)), X2 = LN2(X1 + MLP(X1)), with Block's parameter names."""
    torch.manual_seed(0)
    pre = Block(_config()).eval()
    for p in pre.parameters():
        p.data.add_(0.1 * torch.randn_like(p))
    post = PostLNBlock(_config()).eval()
    post.load_state_dict(pre.state_dict())
    x = torch.randn(2, 5, TINY["n_embd"])
    with torch.no_grad():
        x1 = pre.ln_1(x + pre.attn(x, is_causal=True)[0])
        expected = pre.ln_2(x1 + pre.mlp(x1))
        got = post(x)
    torch.testing.assert_close(got, expected)
    assert not torch.allclose(got, pre(x), atol=1e-4), "PostLNBlock computes the same as the pre-LN Block"


def test_classifier_refuses_fewer_than_two_classes_and_unknown_poolings():
    with pytest.raises(ValueError, match="n_classes must be an integer >= 2"):
        GPTClassifier(_config(), 1)
    with pytest.raises(ValueError, match="pooling must be one of"):
        GPTClassifier(_config(), 3, pooling="max")


# ------------------------------------------------------------------------------------------
# training
# ------------------------------------------------------------------------------------------

def test_a_tiny_gpt_overfits_one_small_batch():
    model = _seeded(lambda: GPT(GPTConfig(vocab_size=16, block_size=16, n_layer=2, n_head=2,
                                          n_embd=32)))
    batch = _ids(4, 17, vocab_size=16, seed=0)
    x, y = batch[:, :-1], batch[:, 1:]
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(50):
        _, loss = model(x, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert abs(losses[0] - math.log(16)) < 0.3, f"initial loss {losses[0]:.3f}, expected ~ln 16"
    assert losses[-1] < 0.3, f"50 Adam steps on one batch: loss {losses[0]:.3f} -> {losses[-1]:.3f}"


# ------------------------------------------------------------------------------------------
# course_lib.metrics.topk_accuracy (lesson 06's top-k accuracy exercise)
# ------------------------------------------------------------------------------------------

def test_topk_accuracy_counts_targets_among_the_k_best_and_skips_ignored_positions():
    logits = torch.tensor([[2.0, 1.0, 0.0], [0.0, 3.0, 1.0], [1.0, 0.0, 2.0], [0.5, 2.0, 1.0]])
    targets = torch.tensor([0, 2, 2, -100])
    assert topk_accuracy(logits, targets) == pytest.approx(2 / 3)
    assert topk_accuracy(logits, targets, k=2) == pytest.approx(1.0)
    assert topk_accuracy(logits, torch.tensor([0, 2, 2, 1]), ignore_index=2) == pytest.approx(1.0)


def test_topk_accuracy_on_batched_logits_equals_a_loop_over_positions():
    torch.manual_seed(0)
    logits, targets = torch.randn(3, 7, 11), torch.randint(0, 11, (3, 7))
    targets[0, :2] = -100
    for k in (1, 4, 11):
        hits = [int(t) in logits[b, i].topk(k).indices.tolist()
                for b in range(3) for i in range(7) if (t := targets[b, i]) != -100]
        assert topk_accuracy(logits, targets, k) == pytest.approx(sum(hits) / len(hits))


@pytest.mark.parametrize(("targets", "k", "match"), [
    (torch.full((2,), -100), 1, "every target is ignore_index"),
    (torch.zeros(3, dtype=torch.long), 1, "targets must have the shape"),
    (torch.zeros(2, dtype=torch.long), 0, "k must be between 1 and the number of classes 5"),
    (torch.zeros(2, dtype=torch.long), 6, "k must be between 1"),
])
def test_topk_accuracy_refuses_what_it_cannot_score(targets, k, match):
    with pytest.raises(ValueError, match=match):
        topk_accuracy(torch.randn(2, 5), targets, k)
