"""The train-short, test-long experiment's model and helpers (course_lib.positional.extrapolation)."""

from __future__ import annotations

import pytest
import torch

from course_lib.positional.extrapolation import (
    SCHEMES,
    LMConfig,
    PositionalLM,
    evaluate_loss,
    score_terms,
    term_statistics,
    train_lm,
)

VOCAB = 11


def _model(scheme: str, block_size: int = 8, seed: int = 0) -> PositionalLM:
    torch.manual_seed(seed)
    return PositionalLM(LMConfig(VOCAB, scheme, block_size=block_size, n_layer=2, n_head=2, n_embd=16))


def _text(n: int = 4000, seed: int = 0) -> torch.Tensor:
    # a repeating pattern with noise: learnable, so training must lower the loss
    g = torch.Generator().manual_seed(seed)
    base = torch.arange(n) % 7
    noise = torch.randint(0, VOCAB, (n,), generator=g)
    return torch.where(torch.rand(n, generator=g) < 0.1, noise, base)


def test_unknown_scheme_is_refused_by_name():
    with pytest.raises(ValueError, match="pos_encoding must be one of"):
        LMConfig(VOCAB, "relative")


@pytest.mark.parametrize("scheme", SCHEMES)
def test_every_scheme_gives_next_token_logits(scheme):
    logits = _model(scheme)(torch.randint(0, VOCAB, (3, 8)))
    assert logits.shape == (3, 8, VOCAB)
    assert torch.isfinite(logits).all()


@pytest.mark.parametrize("scheme", SCHEMES)
def test_the_model_is_causal(scheme):
    model = _model(scheme).eval()
    ids = torch.randint(0, VOCAB, (1, 8))
    changed = ids.clone()
    changed[0, 5:] = (changed[0, 5:] + 1) % VOCAB
    torch.testing.assert_close(model(ids)[:, :5], model(changed)[:, :5])


@pytest.mark.parametrize("scheme", ["sinusoidal", "rope", "alibi", "t5", "none"])
def test_schemes_without_a_table_read_longer_inputs(scheme):
    assert _model(scheme, block_size=8)(torch.randint(0, VOCAB, (1, 40))).shape == (1, 40, VOCAB)


def test_a_learned_table_cannot_read_past_its_length():
    model = _model("learned", block_size=8)
    with pytest.raises(ValueError, match="do not fit max_len=8"):
        model(torch.randint(0, VOCAB, (1, 9)))
    assert evaluate_loss(model, _text(), 16, n_tokens=64) is None
    assert evaluate_loss(model, _text(), 8, n_tokens=64) is not None


def test_evaluate_loss_reads_the_same_characters_at_every_length():
    """Every length covers val[:n_tokens + 1] exactly; a model without positions that sees only
    the current token (no attention to the past matters for a unigram model) scores the same."""
    model = _model("none").eval()
    with torch.no_grad():
        for block in model.blocks:                  # attention output 0: each position sees only its token
            block.attn.out_proj.weight.zero_()
    val = _text(3000, seed=1)
    losses = [evaluate_loss(model, val, T, n_tokens=512) for T in (8, 16, 64)]
    assert max(losses) - min(losses) < 1e-5, losses


def test_evaluate_loss_rejects_more_tokens_than_the_validation_set_has():
    with pytest.raises(ValueError, match="must be at least T=8 and fit"):
        evaluate_loss(_model("rope"), _text(100), 8, n_tokens=4096)


def test_training_lowers_the_loss_and_uses_the_same_batches_for_every_scheme():
    data = _text()
    losses = train_lm(_model("rope"), data, steps=40, batch_size=8, lr=1e-2, desc="")
    assert len(losses) == 40
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 0.3
    again = train_lm(_model("rope"), data, steps=40, batch_size=8, lr=1e-2, desc="")
    assert losses == again, "same seed, same model init and same batches must give the same losses"


@pytest.mark.parametrize("scheme", ["learned", "sinusoidal"])
def test_the_four_terms_add_up_to_the_first_layers_scores(scheme):
    model = _model(scheme).eval()
    ids = torch.randint(0, VOCAB, (2, 8))
    terms = score_terms(model, ids)
    assert list(terms) == ["word-word", "word-position", "position-word", "position-position"]
    block = model.blocks[0]
    n, p = model.token_and_position(ids)
    with torch.no_grad():
        q, k, _ = block.attn.project_qkv(block.ln_attn(n + p))
    torch.testing.assert_close(sum(terms.values()), q @ k.mT / block.attn.head_size ** 0.5, atol=1e-5, rtol=1e-5)


def test_the_four_terms_need_a_model_that_adds_positions():
    with pytest.raises(ValueError, match="adds no position vector"):
        score_terms(_model("rope"), torch.randint(0, VOCAB, (1, 8)))
    with pytest.raises(ValueError, match="layer=0"):
        score_terms(_model("learned"), torch.randint(0, VOCAB, (1, 8)), layer=1)


def test_term_statistics_on_terms_built_by_hand():
    """A term constant along every row moves no weight and has no spread; a term that alone
    decides the weights moves them."""
    T = 4
    decisive = torch.zeros(1, 1, T, T)
    decisive[..., 0] = 50.0                           # every query looks only at key 0
    constant = torch.full((1, 1, T, T), 3.0)
    stats = term_statistics({"constant": constant, "decisive": decisive})
    size, spread, moved = stats["constant"]
    assert size == pytest.approx(3.0)
    assert spread == pytest.approx(0.0, abs=1e-6)
    assert moved == pytest.approx(0.0, abs=1e-6)
    _, spread, moved = stats["decisive"]
    assert spread > 1.0
    # without it, query i spreads uniformly over its i + 1 keys: TV = 1 - 1/(i + 1), averaged
    expected = sum(1 - 1 / (i + 1) for i in range(T)) / T
    assert moved == pytest.approx(expected, abs=1e-6)
