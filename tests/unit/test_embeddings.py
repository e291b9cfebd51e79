"""Spec of course_lib.embeddings: lookups, positional encodings, cosine similarity."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.embeddings import (
    PretrainedNotCached,
    TokenAndPositionEmbedding,
    analogy,
    cosine_distance,
    cosine_similarity,
    load_gpt2_token_embeddings,
    nearest_rows,
    one_hot_embed,
    sinusoidal_positional_encoding,
)

FAST = settings(max_examples=25, deadline=None)


# ------------------------------------------------------------------------------------------
# one-hot @ E == lookup
# ------------------------------------------------------------------------------------------

def test_one_hot_times_E_equals_the_row_lookup_exactly():
    E = torch.randn(11, 6, generator=torch.Generator().manual_seed(0))
    ids = torch.tensor([[0, 3, 10], [7, 7, 1]])
    out = one_hot_embed(ids, E)
    assert out.shape == (2, 3, 6)
    assert torch.equal(out, E[ids])
    assert torch.equal(out, F.embedding(ids, E))


def test_one_hot_embed_gradient_reaches_only_the_used_rows():
    E = torch.randn(5, 3, requires_grad=True)
    one_hot_embed(torch.tensor([1, 1, 4]), E).sum().backward()
    assert E.grad[[0, 2, 3]].abs().sum() == 0
    assert torch.equal(E.grad[1], torch.full((3,), 2.0))   # row 1 is used twice
    assert torch.equal(E.grad[4], torch.ones(3))


def test_one_hot_embed_rejects_ids_outside_the_vocabulary_and_float_ids():
    E = torch.randn(5, 3)
    with pytest.raises(ValueError, match=r"\[0, 4\]"):
        one_hot_embed(torch.tensor([0, 5]), E)
    with pytest.raises(ValueError, match="-1"):
        one_hot_embed(torch.tensor([-1]), E)
    with pytest.raises(TypeError, match="integer dtype"):
        one_hot_embed(torch.tensor([0.0, 1.0]), E)
    with pytest.raises(ValueError, match="2-D"):
        one_hot_embed(torch.tensor([0]), torch.randn(5))


# ------------------------------------------------------------------------------------------
# Sinusoidal positional encoding
# ------------------------------------------------------------------------------------------

def _naive_pe(seq_len: int, d: int, base: float = 10000.0) -> torch.Tensor:
    """The formula, one entry at a time, in float64."""
    pe = torch.zeros(seq_len, d, dtype=torch.float64)
    for p in range(seq_len):
        for col in range(d):
            i = col // 2
            angle = p * base ** (-2 * i / d)
            pe[p, col] = math.sin(angle) if col % 2 == 0 else math.cos(angle)
    return pe


@FAST
@given(seq_len=st.integers(0, 40), d=st.integers(1, 24),
       base=st.sampled_from([10000.0, 100.0, 2.0]))
def test_sinusoidal_matches_the_formula_entry_by_entry(seq_len, d, base):
    pe = sinusoidal_positional_encoding(seq_len, d, base=base, dtype=torch.float64)
    assert pe.shape == (seq_len, d)
    torch.testing.assert_close(pe, _naive_pe(seq_len, d, base), rtol=0, atol=1e-12)


def test_sinusoidal_row_zero_is_sin0_cos0_and_default_dtype_is_float32():
    pe = sinusoidal_positional_encoding(4, 6)
    assert pe.dtype == torch.float32
    assert torch.equal(pe[0], torch.tensor([0.0, 1.0, 0.0, 1.0, 0.0, 1.0]))
    # column 0 has frequency 1: PE[p, 0] = sin(p)
    torch.testing.assert_close(pe[:, 0], torch.sin(torch.arange(4.0)))


def test_sinusoidal_with_odd_d_model_follows_the_formula_with_d_odd():
    odd = sinusoidal_positional_encoding(9, 7, dtype=torch.float64)
    # the frequencies depend on d, so this is the formula for d = 7, not the d = 8 table truncated
    torch.testing.assert_close(odd, _naive_pe(9, 7), rtol=0, atol=1e-12)
    assert odd.shape == (9, 7)


def test_sinusoidal_large_positions_stay_accurate_in_float32():
    pe = sinusoidal_positional_encoding(100_000, 4)
    p = 99_999   # in float32 arithmetic the angle p * w would be off by ~p * 6e-8 = 6e-3 rad
    expected = [math.sin(p), math.cos(p), math.sin(p / 100), math.cos(p / 100)]
    torch.testing.assert_close(pe[-1].double(), torch.tensor(expected, dtype=torch.float64),
                               rtol=0, atol=1e-6)


@FAST
@given(p=st.integers(0, 200), q=st.integers(0, 200), k=st.integers(0, 50))
def test_sinusoidal_dot_products_depend_only_on_the_offset(p, q, k):
    pe = sinusoidal_positional_encoding(260, 32, dtype=torch.float64)
    # PE[p] . PE[p+k] = sum_i cos(k w_i), whatever p is
    torch.testing.assert_close(pe[p] @ pe[p + k], pe[q] @ pe[q + k], rtol=0, atol=1e-10)
    freqs = 10000.0 ** (-torch.arange(0, 32, 2, dtype=torch.float64) / 32)
    torch.testing.assert_close(pe[p] @ pe[p + k], torch.cos(k * freqs).sum(), rtol=0, atol=1e-10)


def test_sinusoidal_every_row_has_norm_sqrt_d_over_2():
    pe = sinusoidal_positional_encoding(50, 16, dtype=torch.float64)
    torch.testing.assert_close(pe.norm(dim=-1), torch.full((50,), math.sqrt(8.0),
                                                           dtype=torch.float64))


@pytest.mark.parametrize(("args", "match"), [
    ((-1, 8), "seq_len"), ((4, 0), "n_embd"), ((4, 8, 0.0), "base"), ((4, 8, -2.0), "base"),
])
def test_sinusoidal_rejects_bad_arguments(args, match):
    with pytest.raises(ValueError, match=match):
        sinusoidal_positional_encoding(*args)


# ------------------------------------------------------------------------------------------
# TokenAndPositionEmbedding
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("positional", ["learned", "sinusoidal"])
def test_embedding_output_is_token_row_plus_position_row(positional):
    torch.manual_seed(0)
    emb = TokenAndPositionEmbedding(vocab_size=20, n_embd=8, max_len=10, positional=positional)
    ids = torch.tensor([[3, 3, 19, 0], [5, 6, 7, 8]])
    out = emb(ids)
    assert out.shape == (2, 4, 8)
    pos = (emb.pos_emb.weight[:4] if positional == "learned"
           else sinusoidal_positional_encoding(10, 8)[:4])
    torch.testing.assert_close(out, emb.token_emb.weight[ids] + pos)
    # the same token at two positions gets two different vectors
    assert not torch.allclose(out[0, 0], out[0, 1])


def test_learned_positions_are_parameters_and_sinusoidal_ones_are_not():
    learned = TokenAndPositionEmbedding(20, 8, 10, positional="learned")
    fixed = TokenAndPositionEmbedding(20, 8, 10, positional="sinusoidal")
    assert sum(p.numel() for p in learned.parameters()) == 20 * 8 + 10 * 8
    assert sum(p.numel() for p in fixed.parameters()) == 20 * 8
    assert "pe" not in fixed.state_dict()          # recomputed, not saved
    fixed(torch.tensor([[1, 2, 3]])).sum().backward()
    assert fixed.token_emb.weight.grad is not None


@pytest.mark.parametrize("positional", ["learned", "sinusoidal"])
def test_embedding_accepts_unbatched_ids_and_a_start_position(positional):
    emb = TokenAndPositionEmbedding(20, 8, 10, positional=positional)
    ids = torch.tensor([4, 5, 6])
    assert emb(ids).shape == (3, 8)
    torch.testing.assert_close(emb(ids[2:], start_pos=2), emb(ids[None])[0, 2:])


def test_embedding_rejects_sequences_longer_than_max_len():
    emb = TokenAndPositionEmbedding(20, 8, max_len=4)
    emb(torch.zeros(1, 4, dtype=torch.long))   # exactly max_len is fine
    with pytest.raises(ValueError, match="max_len=4"):
        emb(torch.zeros(1, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="max_len=4"):
        emb(torch.zeros(1, 2, dtype=torch.long), start_pos=3)


def test_embedding_rejects_ids_out_of_range_with_a_clear_message():
    emb = TokenAndPositionEmbedding(20, 8, max_len=4, positional="sinusoidal")
    with pytest.raises(ValueError, match=r"vocab_size=20.*got 20"):
        emb(torch.tensor([[0, 20]]))
    with pytest.raises(TypeError, match="integer"):
        emb(torch.tensor([[0.0, 1.0]]))


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"positional": "rope"}, "positional"), ({"dropout": 1.0}, "dropout"),
    ({"max_len": 0}, "max_len"), ({"vocab_size": 0}, "vocab_size"),
])
def test_embedding_rejects_bad_configuration(kwargs, match):
    config = {"vocab_size": 20, "n_embd": 8, "max_len": 4, **kwargs}
    with pytest.raises(ValueError, match=match):
        TokenAndPositionEmbedding(**config)


def test_embedding_dropout_is_active_only_in_training():
    torch.manual_seed(0)
    emb = TokenAndPositionEmbedding(20, 64, 8, dropout=0.5)
    ids = torch.randint(0, 20, (4, 8))
    emb.train()
    assert (emb(ids) == 0).float().mean() > 0.3
    emb.eval()
    assert (emb(ids) == 0).sum() == 0


# ------------------------------------------------------------------------------------------
# Cosine similarity and distance
# ------------------------------------------------------------------------------------------

@FAST
@given(shape=st.lists(st.integers(1, 5), min_size=1, max_size=3), seed=st.integers(0, 10**6))
def test_cosine_similarity_matches_torch(shape, seed):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(*shape, dtype=torch.float64, generator=g)
    b = torch.randn(*shape, dtype=torch.float64, generator=g)
    torch.testing.assert_close(cosine_similarity(a, b), F.cosine_similarity(a, b, dim=-1))
    torch.testing.assert_close(cosine_similarity(a, b, dim=0), F.cosine_similarity(a, b, dim=0))


def test_cosine_similarity_broadcasts_one_vector_against_a_table():
    table, v = torch.randn(7, 5), torch.randn(5)
    torch.testing.assert_close(cosine_similarity(table, v),
                               F.cosine_similarity(table, v[None], dim=-1))


def test_cosine_similarity_landmarks_and_zero_vector():
    a = torch.tensor([1.0, 2.0, 3.0])
    torch.testing.assert_close(cosine_similarity(a, 5 * a), torch.tensor(1.0))
    torch.testing.assert_close(cosine_similarity(a, -a), torch.tensor(-1.0))
    torch.testing.assert_close(cosine_similarity(torch.tensor([1.0, 0.0]),
                                                 torch.tensor([0.0, 3.0])), torch.tensor(0.0))
    assert cosine_similarity(a, torch.zeros(3)) == 0   # no NaN for a zero vector
    assert cosine_similarity(torch.zeros(3), a) == 0


def test_cosine_distance_is_one_minus_similarity_in_0_to_2():
    a, b = torch.randn(10, 4), torch.randn(10, 4)
    d = cosine_distance(a, b)
    torch.testing.assert_close(d, 1 - F.cosine_similarity(a, b, dim=-1))
    assert (d >= -1e-6).all()
    assert (d <= 2 + 1e-6).all()
    torch.testing.assert_close(cosine_distance(a, -a), torch.full((10,), 2.0))


# --- nearest rows and analogies (lesson 02, section 6) ---
def _brute_force_nearest(query, E, k, exclude=(), allowed=None):
    scored = []
    for v in range(E.shape[0]):
        if v in exclude or (allowed is not None and not allowed[v]):
            continue
        scored.append((float(F.cosine_similarity(query, E[v], dim=0)), v))
    scored.sort(key=lambda sv: (-sv[0], sv[1]))
    return [v for _, v in scored[:k]]


def test_nearest_rows_equal_a_brute_force_scan_with_exclusions_and_a_mask():
    g = torch.Generator().manual_seed(0)
    E = torch.randn(40, 6, generator=g, dtype=torch.float64)
    query = torch.randn(6, generator=g, dtype=torch.float64)
    allowed = torch.rand(40, generator=g) > 0.3
    sims, ids = nearest_rows(query, E, k=7, exclude=[3, 5], allowed=allowed)
    assert ids.tolist() == _brute_force_nearest(query, E, 7, exclude=(3, 5), allowed=allowed)
    torch.testing.assert_close(sims, F.cosine_similarity(query[None], E[ids], dim=-1))
    assert bool((sims[:-1] >= sims[1:]).all()), "similarities must come best first"


def test_analogy_recovers_a_planted_offset_and_excludes_its_three_inputs():
    # rows 0..3: man, king, woman, queen with queen - woman == king - man (a "royal" offset)
    g = torch.Generator().manual_seed(1)
    E = torch.randn(30, 16, generator=g, dtype=torch.float64)
    royal = 3 * torch.randn(16, generator=g, dtype=torch.float64)
    E[1] = E[0] + royal
    E[3] = E[2] + royal
    sims, ids = analogy(E, a=0, b=1, c=2, k=3)
    assert ids[0].item() == 3, f"king - man + woman should be queen (row 3), got {ids.tolist()}"
    assert sims[0].item() == pytest.approx(1.0)
    assert not {0, 1, 2} & set(ids.tolist()), "the analogy's own words must be excluded"


def test_nearest_rows_rejects_mismatched_shapes_and_impossible_k():
    E = torch.randn(5, 4)
    with pytest.raises(ValueError, match=r"query must be \(D,\)"):
        nearest_rows(torch.randn(3), E)
    with pytest.raises(ValueError, match="only 2 rows can be returned"):
        nearest_rows(torch.randn(4), E, k=3, exclude=[0, 1, 2])


def test_gpt2_embeddings_load_from_the_cache_or_say_how_to_fetch_them(monkeypatch):
    pytest.importorskip("transformers")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    try:
        wte, tokenizer = load_gpt2_token_embeddings()
    except PretrainedNotCached as error:
        message = str(error)
    else:
        message = None
    if message is not None:
        assert "hf download gpt2" in message
        return
    assert tuple(wte.shape) == (50257, 768)
    assert len(tokenizer.encode(" king")) == 1
