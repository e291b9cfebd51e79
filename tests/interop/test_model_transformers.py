"""Parity of course_lib.model's GPT with `transformers`' GPT-2 (configs built in code, random
weights, no downloads):

- `GPT.from_hf_gpt2(GPT2LMHeadModel(config))` gives HF's logits (float32, atol 1e-5; float64 to
  1e-10) at full block length and shorter, for 1-3 layers, several head counts and widths, n_inner
  set and unset, the activations gelu_new / gelu_pytorch_tanh / gelu / relu and tied or untied
  heads; every HF parameter is randomised first (HF starts biases at 0 and LayerNorms at 1,
  which would hide a bias or LayerNorm copied to the wrong place);
- the loss equals HF's with HF's label shifting (ours is given idx[:, :-1] and targets idx[:, 1:]),
  -100 labels included, and the parameter counts agree;
- a `GPT2Model` (no head) converts too: hidden_states equal its last_hidden_state;
- GPT-2 variants the course GPT does not implement, and other architectures, are refused;
- real GPT-2 weights, only if they are already in the local Hugging Face cache (never
  downloaded: the test runs offline and fails if anything opens a socket).
"""

from __future__ import annotations

import socket

import pytest
import torch
import torch.nn as nn

from course_lib.model import GPT, LayerNorm, count_parameters
from tests.interop.hf_weights import randomize

pytest.importorskip("transformers")
from transformers import GPT2Config, GPT2LMHeadModel, GPT2Model  # noqa: E402

F32_TOL = {"atol": 1e-5, "rtol": 1e-5}
GPT2_SMALL_PARAMS = 124_439_808
# "The quick brown fox jumps over the lazy dog." in GPT-2's tokenizer
QUICK_BROWN_FOX = [464, 2068, 7586, 21831, 18045, 625, 262, 16931, 3290, 13]


pytestmark = pytest.mark.usefixtures("one_thread")


CASES = {
    "1-layer-defaults": {"n_layer": 1, "n_head": 2, "n_embd": 16, "n_positions": 8, "vocab_size": 37},
    "2-layer-relu-n_inner": {"n_layer": 2, "n_head": 4, "n_embd": 32, "n_positions": 12,
                             "vocab_size": 50, "n_inner": 48, "activation_function": "relu"},
    "3-layer-gelu-untied": {"n_layer": 3, "n_head": 3, "n_embd": 24, "n_positions": 10,
                            "vocab_size": 61, "activation_function": "gelu",
                            "tie_word_embeddings": False, "layer_norm_epsilon": 1e-6},
    "2-layer-1-head-tiny-mlp-untied": {"n_layer": 2, "n_head": 1, "n_embd": 8, "n_positions": 6,
                                       "vocab_size": 17, "n_inner": 5,
                                       "activation_function": "gelu_pytorch_tanh",
                                       "tie_word_embeddings": False},
}


def _hf_config(**kwargs):
    return GPT2Config(bos_token_id=0, eos_token_id=0, **kwargs)


def _hf_lm(case, seed=0, cls=GPT2LMHeadModel):
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = cls(_hf_config(**CASES[case]))
    return randomize(model, seed).eval()


def _ids(B, T, vocab_size, seed=0):
    return torch.randint(0, vocab_size, (B, T), generator=torch.Generator().manual_seed(seed))


# ------------------------------------------------------------------------------------------
# logits, loss and parameter counts of GPT2LMHeadModel
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("length", ["full", "short"])
def test_logits_equal_gpt2lmheadmodel(case, length):
    hf = _hf_lm(case)
    ours = GPT.from_hf_gpt2(hf).eval()
    cfg = CASES[case]
    T = cfg["n_positions"] if length == "full" else 3
    idx = _ids(2, T, cfg["vocab_size"], seed=1)
    with torch.no_grad():
        expected = hf(idx).logits
        got, _ = ours(idx)
    assert got.shape == expected.shape == (2, T, cfg["vocab_size"])
    torch.testing.assert_close(got, expected, **F32_TOL)


@pytest.mark.parametrize("case", ["2-layer-relu-n_inner", "3-layer-gelu-untied"])
def test_logits_equal_gpt2lmheadmodel_in_float64_to_1e_10(case):
    hf = _hf_lm(case).double()
    ours = GPT.from_hf_gpt2(hf).eval()
    assert next(ours.parameters()).dtype == torch.float64, "the converted model should keep HF's dtype"
    idx = _ids(3, CASES[case]["n_positions"], CASES[case]["vocab_size"], seed=2)
    with torch.no_grad():
        torch.testing.assert_close(ours(idx)[0], hf(idx).logits, atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize("case", CASES)
def test_loss_equals_hf_loss_with_its_label_shifting(case):
    hf = _hf_lm(case)
    ours = GPT.from_hf_gpt2(hf).eval()
    cfg = CASES[case]
    idx = _ids(3, cfg["n_positions"], cfg["vocab_size"], seed=3)
    labels = idx.clone()
    labels[0, -3:] = -100          # padding: ignored by both
    labels[2, :2] = -100
    with torch.no_grad():
        hf_loss = hf(idx, labels=labels).loss                 # HF shifts: logits[:, :-1] vs labels[:, 1:]
        _, loss = ours(idx[:, :-1], labels[:, 1:])
        _, unpadded = ours(idx[:, :-1], idx[:, 1:])
    torch.testing.assert_close(loss, hf_loss, **F32_TOL)
    assert not torch.allclose(unpadded, hf_loss, **F32_TOL), "-100 labels made no difference"


@pytest.mark.parametrize("case", CASES)
def test_parameter_counts_and_config_agree_with_hf(case):
    hf = _hf_lm(case)
    ours = GPT.from_hf_gpt2(hf)
    hf_count = sum(p.numel() for p in hf.parameters())
    assert ours.num_params() == hf_count, f"ours {ours.num_params():,}, HF {hf_count:,}"
    assert count_parameters(ours.config) == hf_count
    cfg, c = CASES[case], ours.config
    assert (c.vocab_size, c.block_size, c.n_layer, c.n_head, c.n_embd) == (
        cfg["vocab_size"], cfg["n_positions"], cfg["n_layer"], cfg["n_head"], cfg["n_embd"])
    assert c.d_ff == cfg.get("n_inner", 4 * cfg["n_embd"])
    assert c.layer_norm_eps == cfg.get("layer_norm_epsilon", 1e-5)
    assert (c.pos_encoding, c.n_kv_head, c.bias, c.dropout) == ("learned", c.n_head, True, 0.0)
    tied = cfg.get("tie_word_embeddings", True)
    assert c.tie_weights is tied
    assert (ours.lm_head.weight is ours.wte.weight) is tied, \
        f"tie_word_embeddings={tied}, but lm_head is wte: {ours.lm_head.weight is ours.wte.weight}"


def test_the_converted_model_owns_its_weights():
    hf = _hf_lm("1-layer-defaults")
    ours = GPT.from_hf_gpt2(hf).eval()
    idx = _ids(1, 8, 37)
    before = ours(idx)[0].detach().clone()
    with torch.no_grad():
        for p in hf.parameters():
            p.mul_(2)
    torch.testing.assert_close(ours(idx)[0], before, atol=0, rtol=0)
    assert not torch.allclose(hf(idx).logits, before), "scaling HF's weights did nothing"


@pytest.mark.parametrize("case", ["1-layer-defaults", "3-layer-gelu-untied"])
def test_a_gpt2model_without_head_converts_and_gives_its_hidden_states(case):
    hf = _hf_lm(case, cls=GPT2Model)
    ours = GPT.from_hf_gpt2(hf).eval()
    cfg = CASES[case]
    idx = _ids(2, cfg["n_positions"], cfg["vocab_size"], seed=4)
    with torch.no_grad():
        hidden = hf(idx).last_hidden_state
        torch.testing.assert_close(ours.hidden_states(idx), hidden, **F32_TOL)
        # with no head to copy, the output head is the token table
        torch.testing.assert_close(ours(idx)[0], hidden @ hf.wte.weight.T, **F32_TOL)


# ------------------------------------------------------------------------------------------
# what is refused
# ------------------------------------------------------------------------------------------

UNSUPPORTED = [
    ({"scale_attn_by_inverse_layer_idx": True}, "scale_attn_by_inverse_layer_idx"),
    ({"reorder_and_upcast_attn": True}, "reorder_and_upcast_attn"),
    ({"scale_attn_weights": False}, "scale_attn_weights"),
    ({"add_cross_attention": True}, "add_cross_attention"),
    ({"activation_function": "silu"}, "activation 'silu'"),
]


@pytest.mark.parametrize(("setting", "named"), UNSUPPORTED)
def test_gpt2_variants_the_course_gpt_does_not_implement_are_refused(setting, named):
    hf = GPT2LMHeadModel(_hf_config(**CASES["1-layer-defaults"], **setting))
    with pytest.raises(ValueError, match="this GPT-2 variant is not supported") as error:
        GPT.from_hf_gpt2(hf)
    assert named in str(error.value), f"the message does not name {named!r}: {error.value}"


def test_models_other_than_gpt2_are_refused():
    from transformers import LlamaConfig, LlamaForCausalLM

    llama = LlamaForCausalLM(LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32,
                                         num_hidden_layers=1, num_attention_heads=2,
                                         num_key_value_heads=2, bos_token_id=0, eos_token_id=0,
                                         pad_token_id=0))
    with pytest.raises(TypeError, match="needs a transformers GPT-2 model, got model_type='llama'"):
        GPT.from_hf_gpt2(llama)


# ------------------------------------------------------------------------------------------
# LayerNorm against torch's (which is what GPT-2 uses)
# ------------------------------------------------------------------------------------------

def test_layer_norm_equals_torch_layer_norm_and_gpt2s_ln_1():
    hf = _hf_lm("2-layer-relu-n_inner")
    theirs = hf.transformer.h[1].ln_1
    assert isinstance(theirs, nn.LayerNorm)
    ours = LayerNorm(32, eps=theirs.eps)
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(2, 5, 32, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(ours(x), theirs(x))
    torch.testing.assert_close(ours(x), nn.functional.layer_norm(x, (32,), theirs.weight,
                                                                 theirs.bias, theirs.eps))


# ------------------------------------------------------------------------------------------
# real GPT-2 weights (only from the local cache)
# ------------------------------------------------------------------------------------------

def test_real_gpt2_small_weights_give_the_same_logits(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    import huggingface_hub.constants as hub_constants

    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True, raising=False)
    attempts = []

    def no_network(sock, address, *args, **kwargs):
        attempts.append(address)
        raise OSError(f"this test must not use the network (tried {address!r})")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    try:
        hf = GPT2LMHeadModel.from_pretrained("gpt2", local_files_only=True)
    except OSError as error:
        assert not attempts, f"loading from the local cache tried the network: {attempts}"
        pytest.skip("GPT-2's weights are not in the local Hugging Face cache (~/.cache/huggingface "
                    "or $HF_HOME), and this test never downloads. Fetch them once while online: "
                    "`huggingface-cli download gpt2` (or `hf download gpt2`, or "
                    f"GPT2LMHeadModel.from_pretrained('gpt2')). ({type(error).__name__})")
    assert not attempts, f"loading from the local cache tried the network: {attempts}"
    hf.eval()
    ours = GPT.from_hf_gpt2(hf).eval()
    assert ours.num_params() == GPT2_SMALL_PARAMS == count_parameters(ours.config)
    assert sum(p.numel() for p in hf.parameters()) == GPT2_SMALL_PARAMS
    idx = torch.tensor([QUICK_BROWN_FOX])
    with torch.no_grad():
        expected = hf(idx).logits
        torch.testing.assert_close(ours(idx)[0], expected, atol=1e-4, rtol=1e-4)
