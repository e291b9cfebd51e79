"""course_lib.training, rule by rule (the processes are in test_training_process.py)."""

import math

import pytest
import torch

from course_lib.model import GPT, GPTConfig
from course_lib.training import (
    CONFIGS,
    BatchSampler,
    CheckpointError,
    TrainConfig,
    estimate_mfu,
    flops_per_token,
    load_checkpoint,
    parameter_groups,
    preset,
    save_checkpoint,
    warmup_cosine_lr,
)


def naive_lr(step, max_lr, min_lr, warmup, decay):
    if step < warmup:
        return max_lr * (step + 1) / (warmup + 1)
    if step > decay:
        return min_lr
    return min_lr + (max_lr - min_lr) * (1 + math.cos(math.pi * (step - warmup) / max(1, decay - warmup))) / 2


@pytest.mark.parametrize(("warmup", "decay"), [(0, 50), (10, 100), (20, 20)])
def test_the_schedule_is_linear_warmup_then_half_cosine_then_the_floor(warmup, decay):
    for step in range(decay + 20):
        got = warmup_cosine_lr(step, max_lr=1e-3, min_lr=1e-4, warmup_iters=warmup, decay_iters=decay)
        assert got == pytest.approx(naive_lr(step, 1e-3, 1e-4, warmup, decay), abs=1e-15), step


def test_the_schedule_refuses_negative_steps_and_decay_before_warmup():
    with pytest.raises(ValueError, match="step"):
        warmup_cosine_lr(-1, max_lr=1, min_lr=0, warmup_iters=1, decay_iters=2)
    with pytest.raises(ValueError, match="decay_iters"):
        warmup_cosine_lr(0, max_lr=1, min_lr=0, warmup_iters=5, decay_iters=2)


def test_weight_decay_applies_to_matrices_only_and_every_parameter_appears_once():
    model = GPT(GPTConfig(vocab_size=65, block_size=16, n_layer=2, n_head=2, n_embd=32))
    decay, no_decay = parameter_groups(model, 0.1)
    assert decay["weight_decay"] == 0.1
    assert no_decay["weight_decay"] == 0.0
    assert all(p.dim() >= 2 for p in decay["params"])
    assert all(p.dim() < 2 for p in no_decay["params"])
    ids = [id(p) for p in decay["params"] + no_decay["params"]]
    assert len(ids) == len(set(ids)) == len(list(model.parameters()))


@pytest.mark.parametrize("config", [
    GPTConfig(vocab_size=65, block_size=64, n_layer=4, n_head=4, n_embd=128),
    GPTConfig(vocab_size=100, block_size=32, n_layer=2, n_head=4, n_embd=64, tie_weights=False),
    GPTConfig(vocab_size=50, block_size=128, n_layer=3, n_head=8, n_kv_head=2, n_embd=64,
              pos_encoding="rope"),
])
def test_flops_per_token_is_6n_plus_attention_with_nanogpts_parameter_count(config):
    n = GPT(config).num_params(non_embedding=True)
    L, H, Q, T = config.n_layer, config.n_head, config.head_size, config.block_size
    assert flops_per_token(config) == 6 * n + 12 * L * H * Q * T


def test_mfu_is_achieved_over_peak_and_none_without_a_known_peak():
    assert estimate_mfu(1e6, 1e5, peak=1e12) == pytest.approx(0.1)
    assert estimate_mfu(1e6, 1e5, "cpu") is None
    with pytest.raises(ValueError):
        estimate_mfu(0, 1e5, peak=1e12)
    with pytest.raises(TypeError, match="GPTConfig"):
        flops_per_token(TrainConfig())


def test_the_reference_recipe_is_nanogpts_and_unknown_presets_are_listed():
    ref = CONFIGS["nanogpt_shakespeare_char"]
    assert (ref.n_layer, ref.n_head, ref.n_embd, ref.block_size, ref.batch_size,
            ref.learning_rate, ref.max_iters, ref.dropout) == (6, 6, 384, 256, 64, 1e-3, 5000, 0.2)
    with pytest.raises(ValueError, match="shakespeare_char_cpu"):
        preset("nope")
    with pytest.raises(ValueError, match="n_head"):
        TrainConfig(n_embd=100, n_head=3)
    with pytest.raises(ValueError, match="unknown TrainConfig field"):
        TrainConfig().replace(lerning_rate=1)


def test_one_process_sampler_equals_get_batch_and_two_ranks_split_its_rows():
    from course_lib.data import get_batch
    data = torch.arange(1000)
    x, y = BatchSampler(data, 8, 16, 3, torch.device("cpu")).next()
    ex, ey = get_batch(data, 8, 16, generator=torch.Generator().manual_seed(3))
    assert torch.equal(x, ex)
    assert torch.equal(y, ey)
    halves = [BatchSampler(data, 8, 16, 3, torch.device("cpu"), rank, 2).next()[0] for rank in (0, 1)]
    assert torch.equal(torch.cat(halves), x)
    with pytest.raises(ValueError, match="divisible"):
        BatchSampler(data, 7, 16, 3, torch.device("cpu"), 0, 2)


def test_truncated_foreign_and_missing_checkpoints_are_refused_by_name(tmp_path):
    good = save_checkpoint({"format": "x"}, tmp_path / "foreign.pt")
    assert not list(tmp_path.glob("*.tmp")), "the temporary file was renamed away"
    with pytest.raises(CheckpointError, match="foreign.pt: not a course_lib.training checkpoint"):
        load_checkpoint(good)
    (tmp_path / "cut.pt").write_bytes(good.read_bytes()[:100])
    with pytest.raises(CheckpointError, match="cut.pt: not a readable checkpoint"):
        load_checkpoint(tmp_path / "cut.pt")
    with pytest.raises(CheckpointError, match="nothere.pt: no such checkpoint"):
        load_checkpoint(tmp_path / "nothere.pt")


def test_a_failed_write_leaves_the_old_checkpoint_intact(tmp_path, monkeypatch):
    path = save_checkpoint({"format": "old"}, tmp_path / "c.pt")

    def crash(obj, f):
        f.write(b"partial")
        raise OSError("disk full")
    monkeypatch.setattr(torch, "save", crash)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint({"format": "new"}, path)
    monkeypatch.undo()
    assert torch.load(path, weights_only=True) == {"format": "old"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.pt"]
