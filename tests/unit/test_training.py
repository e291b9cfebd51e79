"""Spec of lesson 07's training package (course_lib.training), rule by rule, plus the two helpers
it uses (course_lib.metrics.corpus_loss and course_lib.viz.plots.loss_curve).

References are written out in the tests: nanoGPT's learning rate schedule as three branches,
nanoGPT's FLOPs formula for GPT-2 small from its layer sizes, a gradient global norm as the
square root of a sum of squares, and the corpus loss one predicted token at a time. The runs
use a 1-layer, 32-wide GPT on the first 20,000 characters of Tiny Shakespeare, so that each
takes well under a second on one CPU thread. The real processes (SIGKILL and resume, torchrun)
are in test_training_resume.py and test_training_ddp.py.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
import torch
import torch.nn as nn

from course_lib.data import CharVocab, get_batch, train_val_split
from course_lib.metrics import corpus_loss
from course_lib.model import GPT, GPTConfig, LayerNorm
from course_lib.training import (
    CONFIGS,
    GPU_PEAK_FLOPS,
    BatchSampler,
    CheckpointError,
    TrainConfig,
    WarmupCosineLR,
    config_from_checkpoint,
    estimate_mfu,
    flops_per_token,
    load_checkpoint,
    make_optimizer,
    parameter_groups,
    peak_flops,
    preset,
    save_checkpoint,
    train,
    warmup_cosine_lr,
)
from course_lib.training import __main__ as cli
from course_lib.training.checkpoint import FORMAT, REQUIRED_KEYS
from course_lib.training.config import replace_model
from course_lib.training.flops import gpu_table_entry
from course_lib.viz.plots import loss_curve

TIMING = ("elapsed", "tokens_per_second")
RECORD_KEYS = {"step", "train_loss", "val_loss", "lr", "tokens", "elapsed", "tokens_per_second"}
TINY_GPT = {"vocab_size": 23, "block_size": 16, "n_layer": 2, "n_head": 2, "n_embd": 32}


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tensors this small run faster on one thread (the machine may have 2 busy cores)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def corpus(shakespeare):
    """(train tokens, val tokens, vocabulary) of the first 20,000 characters."""
    text = shakespeare[:20_000]
    vocab = CharVocab(text)
    train_tokens, val_tokens = train_val_split(torch.tensor(vocab.encode(text)), 0.1)
    return train_tokens, val_tokens, vocab


MODEL_FIELDS = set(GPTConfig.__dataclass_fields__)


def _changed(config: TrainConfig, **changes) -> TrainConfig:
    """config.replace for run fields and model fields (n_layer, dropout, ...) alike."""
    model = {k: changes.pop(k) for k in list(changes) if k in MODEL_FIELDS}
    if model:
        changes["model"] = replace_model(config.model, **model)
    return config.replace(**changes)


def _tiny(out_dir, **overrides) -> TrainConfig:
    config = TrainConfig(model=GPTConfig(block_size=16, n_layer=1, n_head=2, n_embd=32,
                                         dropout=0.0, bias=False),
                         batch_size=8, max_iters=30, eval_interval=10, eval_iters=2,
                         learning_rate=1e-2, min_lr=1e-3, warmup_iters=5, checkpoint_interval=0,
                         progress=False, plot=False, device="cpu", out_dir=str(out_dir))
    return _changed(config, **overrides)


def _train(config, corpus, **kwargs):
    """train(config) on the small corpus without touching the global RNG of other tests."""
    with torch.random.fork_rng():
        return train(config, data=corpus, **kwargs)


def _without_timing(history):
    return [{k: v for k, v in r.items() if k not in TIMING} for r in history]


def _log(out_dir):
    return [json.loads(line) for line in (out_dir / "log.jsonl").read_text().splitlines()]


def _assert_same_tensors(a: dict, b: dict, what: str) -> None:
    assert a.keys() == b.keys(), f"{what}: different parameter names"
    for name in a:
        assert torch.equal(a[name], b[name]), f"{what}: {name} differs"


BASE_RUN = {"max_iters": 40, "eval_iters": 4, "checkpoint_interval": 10, "dropout": 0.1,
            "plot": True}


@pytest.fixture(scope="module")
def base_run(corpus, tmp_path_factory):
    """One 40-step run, evaluated every 10 steps, checkpointed every 10, with its plot."""
    out_dir = tmp_path_factory.mktemp("base_run")
    return _train(_tiny(out_dir, **BASE_RUN), corpus), out_dir


# --- the learning rate schedule ----------------------------------------------------------------

def naive_lr(step, max_lr, min_lr, warmup, decay):
    """nanoGPT's get_lr, written as three branches."""
    if step < warmup:
        return max_lr * (step + 1) / (warmup + 1)
    if step > decay:
        return min_lr
    if decay == warmup:
        return max_lr
    progress = (step - warmup) / (decay - warmup)
    return min_lr + (max_lr - min_lr) * 0.5 * (1 + math.cos(math.pi * progress))


SCHEDULES = [(1e-3, 1e-4, 10, 100), (6e-4, 6e-5, 0, 50), (1.0, 0.0, 20, 20), (4e-3, 4e-4, 50, 600),
             (1e-2, 1e-2, 3, 9)]


@pytest.mark.parametrize(("max_lr", "min_lr", "warmup", "decay"), SCHEDULES)
def test_the_schedule_equals_nanogpts_formula_at_every_step(max_lr, min_lr, warmup, decay):
    for step in range(decay + 30):
        got = warmup_cosine_lr(step, max_lr=max_lr, min_lr=min_lr, warmup_iters=warmup,
                               decay_iters=decay)
        assert got == pytest.approx(naive_lr(step, max_lr, min_lr, warmup, decay), rel=1e-12,
                                    abs=1e-15), f"step {step}"


@pytest.mark.parametrize(("max_lr", "min_lr", "warmup", "decay"), SCHEDULES[:4])
def test_the_schedule_rises_to_max_lr_at_the_end_of_warmup_then_falls_to_min_lr(max_lr, min_lr,
                                                                              warmup, decay):
    lrs = [warmup_cosine_lr(s, max_lr=max_lr, min_lr=min_lr, warmup_iters=warmup,
                            decay_iters=decay) for s in range(decay + 30)]
    rising, falling = lrs[:warmup + 1], lrs[warmup:decay + 1]
    assert all(a < b for a, b in zip(rising, rising[1:], strict=False)), "strictly up in warmup"
    assert all(a >= b for a, b in zip(falling, falling[1:], strict=False)), "never up after warmup"
    assert lrs[warmup] == max_lr, "the peak is at step warmup_iters"
    assert max(lrs) == max_lr
    if decay > warmup:
        assert lrs[decay] == pytest.approx(min_lr, abs=1e-15), "min_lr at decay_iters"
    assert all(lr == min_lr for lr in lrs[decay + 1:]), "the floor after decay_iters"


def test_the_schedule_refuses_negative_steps_and_decay_before_warmup():
    with pytest.raises(ValueError, match="step"):
        warmup_cosine_lr(-1, max_lr=1, min_lr=0, warmup_iters=1, decay_iters=2)
    with pytest.raises(ValueError, match="decay_iters"):
        warmup_cosine_lr(0, max_lr=1, min_lr=0, warmup_iters=5, decay_iters=4)


def _optimizer_and_scheduler(lrs=(1e-3, 3e-4), **schedule):
    params = [nn.Parameter(torch.zeros(2)) for _ in lrs]
    optimizer = torch.optim.AdamW([{"params": [p], "lr": lr} for p, lr in zip(params, lrs,
                                                                               strict=True)])
    return optimizer, WarmupCosineLR(optimizer, **schedule)


def _lrs_over(optimizer, scheduler, steps):
    """The learning rate of each group at each of `steps` optimizer steps."""
    seen = []
    for _ in range(steps):
        seen.append([group["lr"] for group in optimizer.param_groups])
        optimizer.step()
        scheduler.step()
    return seen


def test_the_scheduler_sets_each_groups_lr_to_the_schedule_of_its_base_lr():
    schedule = {"min_lr": 1e-5, "warmup_iters": 4, "decay_iters": 20}
    optimizer, scheduler = _optimizer_and_scheduler(**schedule)
    seen = _lrs_over(optimizer, scheduler, 30)
    for step, lrs in enumerate(seen):
        expected = [warmup_cosine_lr(step, max_lr=base, **schedule) for base in (1e-3, 3e-4)]
        assert lrs == pytest.approx(expected, rel=1e-12), f"step {step}"


def test_the_scheduler_state_dict_round_trips_and_continues_the_same_sequence():
    schedule = {"min_lr": 1e-5, "warmup_iters": 4, "decay_iters": 20}
    optimizer, scheduler = _optimizer_and_scheduler(**schedule)
    _lrs_over(optimizer, scheduler, 7)
    saved_opt, saved_sched = optimizer.state_dict(), scheduler.state_dict()
    rest = _lrs_over(optimizer, scheduler, 20)

    optimizer2, scheduler2 = _optimizer_and_scheduler(**{**schedule, "min_lr": 0.5,
                                                         "decay_iters": 99})
    optimizer2.load_state_dict(saved_opt)
    scheduler2.load_state_dict(saved_sched)
    assert scheduler2.state_dict() == saved_sched
    assert (scheduler2.min_lr, scheduler2.decay_iters) == (1e-5, 20), "the saved schedule wins"
    assert _lrs_over(optimizer2, scheduler2, 20) == rest


# --- weight decay groups and the optimizer -----------------------------------------------------

def _should_decay(model: nn.Module) -> dict[int, bool]:
    """id(parameter) -> decayed? Linear and Embedding weights yes; biases and LayerNorms no."""
    verdict = {}
    for module in model.modules():
        for name, p in module.named_parameters(recurse=False):
            assert isinstance(module, (nn.Linear, nn.Embedding, LayerNorm)), \
                f"a {type(module).__name__} parameter: extend this reference"
            verdict.setdefault(id(p), not isinstance(module, LayerNorm) and name == "weight")
    return verdict


@pytest.mark.parametrize("overrides", [
    {}, {"tie_weights": False}, {"bias": False}, {"pos_encoding": "rope", "tie_weights": False},
    {"pos_encoding": "alibi", "n_kv_head": 1},
], ids=["tied", "untied", "no-bias", "rope-untied", "alibi-mqa"])
def test_matrices_are_decayed_vectors_are_not_and_every_parameter_appears_once(overrides):
    model = GPT(GPTConfig(**{**TINY_GPT, **overrides}))
    decay, no_decay = parameter_groups(model, 0.1)
    assert (decay["weight_decay"], no_decay["weight_decay"]) == (0.1, 0.0)
    grouped = [id(p) for p in decay["params"] + no_decay["params"]]
    assert len(grouped) == len(set(grouped)), "a parameter is in two groups (or twice in one)"
    assert set(grouped) == {id(p) for p in model.parameters()}, "every parameter, once"
    expected = _should_decay(model)
    assert {id(p) for p in decay["params"]} == {i for i, d in expected.items() if d}
    assert {id(p) for p in no_decay["params"]} == {i for i, d in expected.items() if not d}
    if model.config.tie_weights:
        assert grouped.count(id(model.wte.weight)) == 1, "the tied table is one parameter"


def test_make_optimizer_is_adamw_over_the_decay_groups():
    model = GPT(GPTConfig(**TINY_GPT))
    optimizer = make_optimizer(model, learning_rate=3e-3, weight_decay=0.05, betas=(0.9, 0.95),
                               device_type="cpu")
    assert type(optimizer) is torch.optim.AdamW
    expected = parameter_groups(model, 0.05)
    assert len(optimizer.param_groups) == 2
    for group, want in zip(optimizer.param_groups, expected, strict=True):
        assert [id(p) for p in group["params"]] == [id(p) for p in want["params"]]
        assert group["weight_decay"] == want["weight_decay"]
        assert group["lr"] == 3e-3
        assert group["betas"] == (0.9, 0.95)
        assert not group.get("fused"), "the fused kernel is CUDA only"


# --- FLOPs and MFU -----------------------------------------------------------------------------

@pytest.mark.parametrize("config", [
    GPTConfig(vocab_size=65, block_size=64, n_layer=4, n_head=4, n_embd=128),
    GPTConfig(vocab_size=100, block_size=32, n_layer=2, n_head=4, n_embd=64, tie_weights=False),
    GPTConfig(vocab_size=50, block_size=128, n_layer=3, n_head=8, n_kv_head=2, n_embd=64,
              pos_encoding="rope"),
    GPTConfig(vocab_size=70, block_size=48, n_layer=2, n_head=2, n_embd=32, pos_encoding="rope",
              tie_weights=False, bias=False),
    GPTConfig(vocab_size=65, block_size=256, n_layer=6, n_head=6, n_embd=384, bias=False),
], ids=["learned-tied", "learned-untied", "rope-gqa", "rope-untied-nobias", "nanogpt-char"])
def test_flops_per_token_is_6n_plus_attention_with_the_non_embedding_count(config):
    n = GPT(config).num_params(non_embedding=True)
    L, H, Q, T = config.n_layer, config.n_head, config.head_size, config.block_size
    assert flops_per_token(config) == 6 * n + 12 * L * H * Q * T


def test_flops_per_token_of_gpt2_small_is_nanogpts_value():
    # nanoGPT's estimate_mfu: N = get_num_params() (the tied token table stays, the position
    # table goes), L, H, Q, T = 12, 12, 64, 1024; flops per token = 6 N + 12 L H Q T.
    V, T, D, L, H = 50257, 1024, 768, 12, 12
    per_layer = (2 * D                     # ln_1
                 + D * 3 * D + 3 * D       # c_attn
                 + D * D + D               # attn c_proj
                 + 2 * D                   # ln_2
                 + D * 4 * D + 4 * D       # c_fc
                 + 4 * D * D + D)          # mlp c_proj
    n = V * D + L * per_layer + 2 * D      # wte (tied to lm_head) + blocks + ln_f
    assert n == 123_653_376
    assert flops_per_token(GPTConfig()) == 6 * n + 12 * L * H * (D // H) * T == 855_166_464


def test_flops_per_token_needs_a_gptconfig():
    with pytest.raises(TypeError, match="GPTConfig"):
        flops_per_token(TrainConfig())


def test_mfu_is_the_achieved_flops_over_the_given_peak():
    assert estimate_mfu(6e6, 2e4, peak=1e12) == pytest.approx(6e6 * 2e4 / 1e12)
    assert estimate_mfu(6e6, 0.0, peak=1e12) == 0.0
    assert estimate_mfu(6e6, 2e4, "cpu", peak=1e12) == pytest.approx(0.12), "peak wins"


def test_mfu_is_none_without_a_known_peak():
    assert estimate_mfu(6e6, 2e4, "cpu") is None
    assert estimate_mfu(6e6, 2e4) is None
    assert peak_flops("cpu") is None
    assert peak_flops(torch.device("meta")) is None


@pytest.mark.parametrize(("fpt", "tps"), [(0, 1e4), (-1.0, 1e4), (1e6, -1.0)])
def test_mfu_refuses_non_positive_flops_and_negative_throughput(fpt, tps):
    with pytest.raises(ValueError, match="flops_per_token"):
        estimate_mfu(fpt, tps, peak=1e12)


@pytest.mark.parametrize("peak", [0.0, -1e12])
def test_mfu_refuses_a_non_positive_peak(peak):
    with pytest.raises(ValueError, match="peak"):
        estimate_mfu(1e6, 1e4, peak=peak)


@pytest.fixture
def gpu_named(monkeypatch):
    """peak_flops('cuda') sees a GPU with the given name (no GPU needed)."""
    def name_it(name):
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
        return peak_flops("cuda:0")
    return name_it


@pytest.mark.parametrize(("name", "expected"), [
    ("NVIDIA H100 PCIe", 756e12), ("NVIDIA H100 NVL", 835e12), ("NVIDIA H100 80GB HBM3", 989e12),
    ("NVIDIA A100-SXM4-80GB", 312e12), ("NVIDIA A10G", 70e12), ("NVIDIA A10", 125e12),
    ("NVIDIA L40S", 362e12), ("NVIDIA L4", 121e12), ("Tesla T4", 65e12),
    ("NVIDIA GeForce RTX 4090", 165e12), ("NVIDIA RTX 6000 Ada Generation", None),
])
def test_peak_flops_matches_the_most_specific_name_first(gpu_named, name, expected):
    assert gpu_named(name) == expected, name


def test_the_table_puts_h100_pcie_and_nvl_before_h100():
    order = list(GPU_PEAK_FLOPS)
    assert order.index("H100 PCIe") < order.index("H100")
    assert order.index("H100 NVL") < order.index("H100")
    assert order.index("A10G") < order.index("A10")


def test_every_table_entry_is_reached_by_its_own_name():
    for key in GPU_PEAK_FLOPS:
        first = gpu_table_entry(f"NVIDIA {key}")
        assert first == key, f"a GPU named {key!r} gets the {first!r} entry"


def test_a_gpu_whose_name_only_contains_a_table_name_is_not_matched(gpu_named):
    assert gpu_named("NVIDIA L40") is None


# --- TrainConfig and the presets ---------------------------------------------------------------

@pytest.mark.parametrize(("overrides", "field"), [
    ({"n_head": 5}, "n_head"), ({"dtype": "fp8"}, "dtype"), ({"max_iters": 0}, "max_iters"),
    ({"min_lr": 2e-3}, "min_lr"), ({"learning_rate": 0.0}, "learning_rate"),
    ({"dropout": 1.0}, "dropout"), ({"block_size": True}, "block_size"),
    ({"batch_size": 8.0}, "batch_size"), ({"warmup_iters": -1}, "warmup_iters"),
    ({"eval_iters": 0}, "eval_iters"),
])
def test_an_invalid_config_is_refused_naming_the_field(overrides, field):
    with pytest.raises(ValueError, match=field):
        _changed(TrainConfig(), **overrides)


@pytest.mark.parametrize("model", [{"n_layer": 2}, None, "gpt2"])
def test_the_model_must_be_a_gptconfig(model):
    with pytest.raises(TypeError, match="GPTConfig"):
        TrainConfig(model=model)


def test_replace_changes_a_copy_and_an_unknown_field_lists_the_fields():
    config = TrainConfig()
    changed = config.replace(max_iters=7)
    assert (changed.max_iters, config.max_iters) == (7, 5000)
    with pytest.raises(ValueError, match="lerning_rate") as error:
        config.replace(lerning_rate=1.0)
    for name in ("learning_rate", "max_iters", "n_embd", "out_dir", "target_loss"):
        assert repr(name) in str(error.value), f"the fields listed should include {name}"


def test_a_model_field_given_to_replace_says_where_it_belongs():
    with pytest.raises(ValueError, match=r"belong to the model.*replace_model\(config\.model, "
                                         r"n_layer=2\)"):
        TrainConfig().replace(n_layer=2)


def test_replace_validates_the_new_values():
    with pytest.raises(ValueError, match="max_iters"):
        TrainConfig().replace(max_iters=0)
    with pytest.raises(ValueError, match="n_head"):
        replace_model(TrainConfig().model, n_head=7)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_every_preset_is_a_valid_config_that_builds_a_model_config(name):
    config = preset(name)
    assert config == CONFIGS[name]
    assert config is not CONFIGS[name], "preset returns a copy"
    assert TrainConfig(**{f: getattr(config, f) for f in config.__dataclass_fields__}) == config
    model_config = config.model_config(65)
    assert model_config == replace_model(config.model, vocab_size=65)
    assert config.out_dir.endswith(name), "each preset writes to its own folder"


def test_preset_overrides_do_not_change_the_table():
    before = CONFIGS["shakespeare_char_cpu"].max_iters
    assert preset("shakespeare_char_cpu", max_iters=3).max_iters == 3
    assert CONFIGS["shakespeare_char_cpu"].max_iters == before


def test_an_unknown_preset_lists_the_presets():
    with pytest.raises(ValueError, match="nope") as error:
        preset("nope")
    for name in CONFIGS:
        assert name in str(error.value)


def test_the_reference_preset_is_nanogpts_train_shakespeare_char():
    c = CONFIGS["nanogpt_shakespeare_char"]
    assert (c.model.n_layer, c.model.n_head, c.model.n_embd, c.model.block_size) == (6, 6, 384, 256)
    assert (c.batch_size, c.grad_accum_steps, c.model.dropout, c.model.bias) == (64, 1, 0.2, False)
    assert (c.learning_rate, c.max_iters, c.min_lr, c.warmup_iters) == (1e-3, 5000, 1e-4, 100)
    assert (c.lr_decay_iters or c.max_iters) == 5000
    assert (c.beta1, c.beta2, c.weight_decay, c.grad_clip) == (0.9, 0.99, 0.1, 1.0)
    assert (c.eval_interval, c.eval_iters) == (250, 200)


# --- batches -----------------------------------------------------------------------------------

DATA = torch.arange(1000) * 7 % 65


def test_one_process_draws_exactly_get_batchs_batches():
    sampler = BatchSampler(DATA, 8, 16, 3, torch.device("cpu"))
    generator = torch.Generator().manual_seed(3)
    for i in range(4):
        x, y = sampler.next()
        ex, ey = get_batch(DATA, 8, 16, generator=generator)
        assert torch.equal(x, ex), f"batch {i}: inputs"
        assert torch.equal(y, ey), f"batch {i}: targets"
        assert x.shape == y.shape == (8, 16)
        assert torch.equal(y[:, :-1], x[:, 1:]), "y is x shifted by one"


@pytest.mark.parametrize("world_size", [2, 4])
def test_the_ranks_rows_concatenated_are_the_one_process_batch(world_size):
    whole = BatchSampler(DATA, 8, 16, 5, torch.device("cpu"))
    ranks = [BatchSampler(DATA, 8, 16, 5, torch.device("cpu"), rank, world_size)
             for rank in range(world_size)]
    for i in range(3):
        x, y = whole.next()
        parts = [r.next() for r in ranks]
        assert all(p[0].shape == (8 // world_size, 16) for p in parts)
        assert torch.equal(torch.cat([p[0] for p in parts]), x), f"batch {i}: inputs"
        assert torch.equal(torch.cat([p[1] for p in parts]), y), f"batch {i}: targets"


def test_the_batch_must_split_evenly_and_the_split_must_be_longer_than_the_context():
    with pytest.raises(ValueError, match="divisible"):
        BatchSampler(DATA, 7, 16, 3, torch.device("cpu"), 0, 2)
    with pytest.raises(ValueError, match="block_size"):
        BatchSampler(DATA[:16], 8, 16, 3, torch.device("cpu"))


# --- gradient accumulation and clipping --------------------------------------------------------

def _grads(model):
    return {n: p.grad.clone() for n, p in model.named_parameters()}


def test_the_gradient_of_a_batch_is_the_sum_of_its_micro_batches_halved_losses():
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = GPT(GPTConfig(**TINY_GPT))
        x = torch.randint(0, TINY_GPT["vocab_size"], (8, 16))
        y = torch.randint(0, TINY_GPT["vocab_size"], (8, 16))
    model(x, y)[1].backward()
    whole = _grads(model)
    model.zero_grad(set_to_none=True)
    for rows in (slice(0, 4), slice(4, 8)):
        (model(x[rows], y[rows])[1] / 2).backward()
    for name, g in _grads(model).items():
        torch.testing.assert_close(g, whole[name], atol=1e-6, rtol=0, msg=name)


def test_a_run_with_accumulation_counts_every_micro_batchs_tokens(corpus, tmp_path):
    config = _tiny(tmp_path, grad_accum_steps=2, max_iters=10, eval_interval=5)
    result = _train(config, corpus)
    assert [r["step"] for r in result.history] == [0, 5, 10]
    assert [r["tokens"] for r in result.history] == [s * 8 * 2 * 16 for s in (0, 5, 10)]
    assert len(result.train_losses) == 10


def test_two_micro_batches_of_4_take_the_steps_of_one_batch_of_8(corpus, tmp_path):
    # BatchSampler draws one randint per micro-step; two draws of 4 are one draw of 8 (the CPU
    # generator draws element by element), so both runs see the same 8 windows at each step.
    draws = BatchSampler(corpus[0], 4, 16, 1337, torch.device("cpu"))
    halves = torch.cat([draws.next()[0], draws.next()[0]])
    assert torch.equal(halves, BatchSampler(corpus[0], 8, 16, 1337, torch.device("cpu")).next()[0])
    whole = _train(_tiny(tmp_path / "whole", max_iters=10), corpus)
    micro = _train(_tiny(tmp_path / "micro", max_iters=10, batch_size=4, grad_accum_steps=2),
                   corpus)
    # float32 sums in another order: equal to rounding, amplified a little by 10 AdamW steps
    for (name, a), b in zip(whole.model.named_parameters(), micro.model.parameters(), strict=True):
        torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-4, msg=name)
    assert micro.train_losses == pytest.approx(whole.train_losses, abs=1e-5)


def test_clip_grad_norm_scales_all_gradients_by_the_global_norm():
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = GPT(GPTConfig(**TINY_GPT))
        for p in model.parameters():
            p.grad = torch.randn_like(p)
    before = _grads(model)
    total = math.sqrt(sum((g.double() ** 2).sum().item() for g in before.values()))
    returned = torch.nn.utils.clip_grad_norm_(model.parameters(), total / 3)
    assert returned.item() == pytest.approx(total, rel=1e-5), "it returns the norm before"
    scale = (total / 3) / (total + 1e-6)
    for name, g in _grads(model).items():
        torch.testing.assert_close(g, before[name] * scale, rtol=1e-5, atol=1e-7, msg=name)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 10 * total)
    for name, g in _grads(model).items():
        torch.testing.assert_close(g, before[name] * scale, rtol=1e-5, atol=1e-7,
                                   msg=f"{name}: a norm under max_norm is left alone")


@pytest.fixture
def clip_calls(monkeypatch):
    """Every clip_grad_norm_ call of the loop: (max_norm, norm before, norm after)."""
    calls = []
    original = torch.nn.utils.clip_grad_norm_

    def recording(parameters, max_norm, *args, **kwargs):
        parameters = list(parameters)
        before = original(parameters, max_norm, *args, **kwargs)
        after = math.sqrt(sum((p.grad.double() ** 2).sum().item() for p in parameters
                              if p.grad is not None))
        calls.append((max_norm, before.item(), after))
        return before
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", recording)
    return calls


def test_every_step_clips_the_global_gradient_norm_to_grad_clip(corpus, tmp_path, clip_calls):
    clipped = _train(_tiny(tmp_path / "clipped", max_iters=3, grad_clip=1e-3), corpus)
    assert len(clip_calls) == 3, "one clip per optimizer step"
    for max_norm, before, after in clip_calls:
        assert max_norm == 1e-3
        assert before > 1e-3, "the test needs gradients bigger than the clip"
        assert after <= 1e-3 * (1 + 1e-5), f"norm {after} after clipping to 1e-3"
    clip_calls.clear()
    free = _train(_tiny(tmp_path / "free", max_iters=3, grad_clip=0.0), corpus)
    assert clip_calls == [], "grad_clip=0 switches clipping off"
    gap = max((a - b).abs().max().item()
              for a, b in zip(clipped.model.parameters(), free.model.parameters(), strict=True))
    assert gap > 1e-4, f"clipping to 1e-3 should change the update (max difference {gap})"


# --- train(): the run and what it leaves behind ------------------------------------------------

def test_the_loss_falls_from_about_log_vocab(base_run, corpus):
    result, _ = base_run
    first, last = result.history[0], result.history[-1]
    assert first["val_loss"] == pytest.approx(math.log(len(corpus[2])), abs=0.3), "loss at init"
    assert last["val_loss"] < first["val_loss"] - 0.3, result.history
    assert last["train_loss"] < first["train_loss"] - 0.3, result.history
    assert sum(result.train_losses[-5:]) < sum(result.train_losses[:5]) - 1.5
    assert result.best_val_loss == min(r["val_loss"] for r in result.history)


def test_the_history_has_one_record_per_evaluation_with_the_documented_keys(base_run):
    result, _ = base_run
    assert [r["step"] for r in result.history] == [0, 10, 20, 30, 40]
    for record in result.history:
        assert set(record) == RECORD_KEYS, record
        step = record["step"]
        assert record["tokens"] == step * 8 * 1 * 16
        assert record["lr"] == pytest.approx(warmup_cosine_lr(
            step, max_lr=1e-2, min_lr=1e-3, warmup_iters=5, decay_iters=40)), \
            f"step {step}: the lr of the next step"
    assert result.history[0]["tokens_per_second"] is None, "no steps yet at step 0"
    assert all(r["tokens_per_second"] > 0 for r in result.history[1:])
    assert result.step == 40
    assert len(result.train_losses) == 40
    assert all(math.isfinite(x) for x in result.train_losses)


def test_the_history_stops_at_max_iters_when_it_is_not_a_multiple_of_eval_interval(corpus,
                                                                                  tmp_path):
    result = _train(_tiny(tmp_path, max_iters=25), corpus)
    assert [r["step"] for r in result.history] == [0, 10, 20, 25]


def test_log_jsonl_holds_the_history(base_run):
    result, out_dir = base_run
    assert _log(out_dir) == result.history


def test_the_plot_is_written_only_when_asked(base_run, corpus, tmp_path):
    _, out_dir = base_run
    assert (out_dir / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    _train(_tiny(tmp_path, max_iters=2, eval_interval=2), corpus)
    assert not (tmp_path / "loss.png").exists()


def test_checkpoints_are_written_every_checkpoint_interval_and_at_the_end(base_run):
    result, out_dir = base_run
    names = sorted(p.name for p in out_dir.glob("*.pt"))
    assert names == [f"ckpt_{s:06d}.pt" for s in (10, 20, 30, 40)] + ["final.pt"]
    assert not list(out_dir.glob("*.tmp")), "temporary files left"
    assert not list(out_dir.glob(".*")), "temporary files left"
    for name in names:
        state = load_checkpoint(out_dir / name)
        assert state["step"] == (40 if name == "final.pt" else int(name[5:11])), name
        assert [r["step"] for r in state["history"]] == list(range(0, state["step"] + 1, 10))
        assert len(state["train_losses"]) == state["step"]
    assert result.checkpoint_path == out_dir / "final.pt"
    final = load_checkpoint(out_dir / "final.pt")
    _assert_same_tensors(final["model"], result.model.state_dict(), "final.pt vs the result")
    assert final["train_losses"] == result.train_losses
    assert final["vocab"] == result.vocab.chars


def test_only_the_final_checkpoint_without_checkpoint_interval(corpus, tmp_path):
    _train(_tiny(tmp_path, max_iters=4, eval_interval=2), corpus)
    assert sorted(p.name for p in tmp_path.glob("*.pt")) == ["final.pt"]


def test_config_from_checkpoint_gives_back_the_runs_config(base_run, tmp_path):
    result, out_dir = base_run
    assert config_from_checkpoint(out_dir / "final.pt") == result.config
    assert config_from_checkpoint(out_dir / "final.pt", max_iters=80).max_iters == 80


def test_target_loss_stops_at_the_first_evaluation_that_reaches_it(base_run, corpus, tmp_path):
    reference, _ = base_run
    assert reference.target_reached_at is None, "no target, nothing reached"
    val = [r["val_loss"] for r in reference.history]
    # the first evaluation after step 0 that beats every earlier one by a margin over rounding
    k = next(i for i in range(1, len(val)) if val[i] < min(val[:i]) - 1e-5)
    stop_step = reference.history[k]["step"]
    assert stop_step < 40, "the test needs a target reached before the end"
    config = _tiny(tmp_path, **{**BASE_RUN, "target_loss": val[k] + 1e-6, "plot": False})
    result = _train(config, corpus)
    assert result.step == stop_step
    assert [r["step"] for r in result.history] == [r["step"] for r in reference.history[:k + 1]]
    assert result.train_losses == reference.train_losses[:stop_step], "the same run, cut short"
    assert result.target_reached_at is not None
    assert result.target_reached_at >= 0
    assert load_checkpoint(tmp_path / "final.pt")["step"] == stop_step


@pytest.mark.parametrize("config", [GPTConfig(), {"max_iters": 3}, None])
def test_train_needs_a_trainconfig(config):
    with pytest.raises(TypeError, match="TrainConfig"):
        train(config)


class _Crash(Exception):
    """Stands for the process dying in the middle of a run."""


def test_a_run_resumed_from_its_last_checkpoint_equals_the_uninterrupted_run(corpus, tmp_path):
    # dropout > 0: the resumed run must also restore the dropout RNG, not only the weights.
    config = _tiny(tmp_path / "full", max_iters=30, checkpoint_interval=5, dropout=0.1)
    full = _train(config, corpus)

    def crash_at_step_20(record, result):
        if record["step"] == 20:
            raise _Crash
    cut_dir = tmp_path / "cut"
    with pytest.raises(_Crash):
        _train(config.replace(out_dir=str(cut_dir)), corpus, callback=crash_at_step_20)
    assert sorted(p.name for p in cut_dir.glob("*.pt")) == [f"ckpt_{s:06d}.pt" for s in (5, 10, 15)]
    assert [r["step"] for r in _log(cut_dir)] == [0, 10, 20], "the crash was after logging 20"

    resumed = _train(config.replace(out_dir=str(cut_dir)), corpus,
                     resume=cut_dir / "ckpt_000015.pt")
    assert resumed.step == 30
    _assert_same_tensors(resumed.model.state_dict(), full.model.state_dict(), "resumed vs full")
    assert resumed.train_losses == full.train_losses
    assert _without_timing(resumed.history) == _without_timing(full.history)
    assert [r["step"] for r in _log(cut_dir)] == [0, 10, 20, 30], "no duplicated records"
    a, b = load_checkpoint(tmp_path / "full" / "final.pt"), load_checkpoint(cut_dir / "final.pt")
    for (i, sa), sb in zip(a["optimizer"]["state"].items(), b["optimizer"]["state"].values(),
                           strict=True):
        _assert_same_tensors(sa, sb, f"AdamW state of parameter {i}")


@pytest.mark.parametrize("change", [{"n_layer": 2}, {"learning_rate": 2e-2}, {"dropout": 0.2},
                                    {"batch_size": 4}, {"seed": 1}, {"grad_accum_steps": 2}])
def test_resuming_with_a_different_trajectory_is_refused_naming_the_field(base_run, corpus,
                                                                          tmp_path, change):
    _, out_dir = base_run
    config = _tiny(tmp_path, **{**BASE_RUN, **change})
    (field,) = change
    with pytest.raises(CheckpointError, match=rf"ckpt_000020\.pt: cannot resume.*{field}"):
        _train(config, corpus, resume=out_dir / "ckpt_000020.pt")
    assert not list(tmp_path.iterdir()), "nothing written for a refused resume"


def test_resuming_on_another_vocabulary_is_refused(base_run, tmp_path):
    _, out_dir = base_run
    text = "abcdefgh " * 500
    vocab = CharVocab(text)
    other = (*train_val_split(torch.tensor(vocab.encode(text)), 0.1), vocab)
    with pytest.raises(CheckpointError, match="vocabulary"):
        _train(_tiny(tmp_path, **BASE_RUN), other, resume=out_dir / "ckpt_000020.pt")


# --- checkpoint files --------------------------------------------------------------------------

def test_save_checkpoint_writes_the_file_and_leaves_no_temporary_file(tmp_path):
    state = {"format": FORMAT, "weights": torch.arange(6.0).reshape(2, 3), "step": 3}
    path = save_checkpoint(state, tmp_path / "deep" / "er" / "c.pt")
    assert path == tmp_path / "deep" / "er" / "c.pt"
    assert sorted(p.name for p in path.parent.iterdir()) == ["c.pt"]
    loaded = torch.load(path, weights_only=True)
    assert loaded["step"] == 3
    assert torch.equal(loaded["weights"], state["weights"])


def test_a_failed_write_leaves_the_old_checkpoint_intact(tmp_path, monkeypatch):
    path = save_checkpoint({"format": "old", "x": torch.ones(3)}, tmp_path / "c.pt")
    old_bytes = path.read_bytes()

    def crash(obj, f, *args, **kwargs):
        f.write(b"half a checkpoint")
        raise OSError("disk full")
    monkeypatch.setattr(torch, "save", crash)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint({"format": "new"}, path)
    monkeypatch.undo()
    assert path.read_bytes() == old_bytes
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.pt"], "the .tmp file is removed"


def _real_checkpoint(base_run):
    return (base_run[1] / "ckpt_000010.pt").read_bytes()


CORRUPT = {
    "truncated": (lambda real: real[: len(real) // 2], "not a readable checkpoint"),
    "cut-short": (lambda real: real[:100], "not a readable checkpoint"),
    "random-bytes": (lambda real: bytes(range(256)) * 8, "not a readable checkpoint"),
    "empty": (lambda real: b"", "not a readable checkpoint"),
}


@pytest.mark.parametrize("kind", [
    "truncated", "cut-short", "random-bytes",
    "empty",
])
def test_an_unreadable_checkpoint_is_refused_naming_the_file(base_run, tmp_path, kind):
    corrupt, message = CORRUPT[kind]
    path = tmp_path / f"{kind}.pt"
    path.write_bytes(corrupt(_real_checkpoint(base_run)))
    with pytest.raises(CheckpointError, match=rf"{kind}\.pt: {message}"):
        load_checkpoint(path)


def test_a_foreign_file_is_refused_naming_the_file(tmp_path):
    torch.save({"model": {"w": torch.ones(2)}, "step": 3}, tmp_path / "foreign.pt")
    with pytest.raises(CheckpointError, match=r"foreign\.pt: not a course_lib.training checkpoint"):
        load_checkpoint(tmp_path / "foreign.pt")
    torch.save([torch.ones(2)], tmp_path / "alist.pt")
    with pytest.raises(CheckpointError, match=r"alist\.pt: not a course_lib.training checkpoint"):
        load_checkpoint(tmp_path / "alist.pt")


def test_a_checkpoint_missing_keys_is_refused_listing_them(tmp_path):
    torch.save({"format": FORMAT, "step": 3, "model": {}}, tmp_path / "partial.pt")
    with pytest.raises(CheckpointError, match=r"partial\.pt: checkpoint lacks") as error:
        load_checkpoint(tmp_path / "partial.pt")
    for key in set(REQUIRED_KEYS) - {"format", "step", "model"}:
        assert repr(key) in str(error.value), key


def test_a_missing_checkpoint_is_refused_naming_the_file(tmp_path):
    with pytest.raises(CheckpointError, match=r"nothere\.pt: no such checkpoint"):
        load_checkpoint(tmp_path / "nothere.pt")
    with pytest.raises(CheckpointError, match="no such checkpoint"):
        load_checkpoint(tmp_path)


# --- corpus_loss and loss_curve ----------------------------------------------------------------

def _eval_gpt(dropout=0.0):
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return GPT(GPTConfig(vocab_size=11, block_size=8, n_layer=1, n_head=2, n_embd=16,
                             dropout=dropout)).double()


@torch.no_grad()
def naive_corpus_loss(model, data, block_size):
    """Token t (t >= 1) predicted from its window's tokens before it; windows start at
    0, block_size, 2 block_size, ..."""
    model.eval()
    total = 0.0
    for t in range(1, len(data)):
        start = (t - 1) // block_size * block_size
        logits = model(data[start:t][None])[0][0, -1]
        total -= torch.log_softmax(logits, dim=-1)[data[t]].item()
    return total / (len(data) - 1)


@pytest.mark.parametrize(("n", "batch_size"), [(2, 4), (9, 1), (17, 2), (20, 2), (40, 3), (57, 32)])
def test_corpus_loss_is_the_mean_loss_of_every_token_after_the_first(n, batch_size):
    model = _eval_gpt()
    data = torch.randint(0, 11, (n,), generator=torch.Generator().manual_seed(n))
    expected = naive_corpus_loss(model, data, 8)
    assert corpus_loss(model, data, 8, batch_size) == pytest.approx(expected, rel=1e-6)


def test_corpus_loss_is_deterministic_and_restores_the_training_mode():
    model = _eval_gpt(dropout=0.5).train()
    data = torch.randint(0, 11, (50,), generator=torch.Generator().manual_seed(1))
    first = corpus_loss(model, data, 8)
    assert model.training, "train mode restored"
    assert corpus_loss(model, data, 8) == first
    assert first == pytest.approx(naive_corpus_loss(model, data, 8), rel=1e-6), "no dropout"
    model.eval()
    corpus_loss(model, data, 8)
    assert not model.training, "eval mode kept"


@pytest.mark.parametrize("data", [torch.zeros(2, 5, dtype=torch.long),
                                  torch.zeros(1, dtype=torch.long),
                                  torch.zeros(0, dtype=torch.long)])
def test_corpus_loss_needs_a_1d_stream_of_at_least_two_tokens(data):
    with pytest.raises(ValueError, match="1-D"):
        corpus_loss(_eval_gpt(), data, 8)


def test_loss_curve_draws_each_step_and_the_evaluations():
    import matplotlib.pyplot as plt
    history = [{"step": 0, "train_loss": 4.2, "val_loss": 4.3},
               {"step": 5, "train_loss": 3.0, "val_loss": 3.2}]
    ax = loss_curve(history, [4.0, 3.8, 3.5, 3.3, 3.1])
    try:
        lines = {line.get_label(): line for line in ax.get_lines()}
        assert list(lines) == ["train (each step)", "train (evaluated)", "validation"]
        assert list(lines["train (each step)"].get_xdata()) == [1, 2, 3, 4, 5]
        assert list(lines["train (each step)"].get_ydata()) == [4.0, 3.8, 3.5, 3.3, 3.1]
        assert list(lines["train (evaluated)"].get_xdata()) == [0, 5]
        assert list(lines["train (evaluated)"].get_ydata()) == [4.2, 3.0]
        assert list(lines["validation"].get_ydata()) == [4.3, 3.2]
        assert [t.get_text() for t in ax.get_legend().get_texts()] == list(lines)
        assert ax.get_xlabel() == "optimizer step"
    finally:
        plt.close(ax.figure)


def test_loss_curve_draws_on_the_given_axes_and_without_per_step_losses():
    import matplotlib.pyplot as plt
    fig, given = plt.subplots()
    try:
        ax = loss_curve([{"step": 0, "train_loss": 4.2, "val_loss": 4.3}], ax=given)
        assert ax is given
        assert [line.get_label() for line in ax.get_lines()] == ["train (evaluated)",
                                                                  "validation"]
    finally:
        plt.close(fig)


# --- the command line --------------------------------------------------------------------------

def test_help_lists_every_preset_and_every_field():
    from dataclasses import fields
    run = subprocess.run([sys.executable, "-m", "course_lib.training", "--help"],
                         capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert run.returncode == 0, run.stderr[-2000:]
    for name in CONFIGS:
        assert name in run.stdout, f"--help should list the preset {name}"
    for field in fields(TrainConfig):
        assert f"--{field.name}" in run.stdout, f"--help should list --{field.name}"


def test_a_corrupt_checkpoint_on_resume_is_one_error_line_and_exit_code_2(base_run, tmp_path,
                                                                          capsys):
    cut = tmp_path / "cut.pt"
    cut.write_bytes(_real_checkpoint(base_run)[:1000])
    assert cli.main(["--resume", str(cut)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"error: {cut}: not a readable checkpoint"), err


def test_an_empty_checkpoint_on_resume_is_one_error_line_and_exit_code_2(tmp_path, capsys):
    empty = tmp_path / "empty.pt"
    empty.write_bytes(b"")
    assert cli.main(["--resume", str(empty)]) == 2
    assert capsys.readouterr().err.startswith(f"error: {empty}: "), "one error line"


def test_an_invalid_override_is_one_error_line_and_exit_code_2(capsys):
    assert cli.main(["--config", "shakespeare_char_cpu", "--n_head", "5"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("error: "), err
    assert "n_head" in err, err


@pytest.mark.parametrize("argv", [["--config", "nope"], [], ["--config", "shakespeare_char_cpu",
                                                             "--plot", "maybe"],
                                  ["--config", "shakespeare_char_cpu", "--max_iters", "ten"]],
                         ids=["unknown-preset", "no-config", "bad-bool", "bad-int"])
def test_bad_arguments_are_argparse_errors(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_command_line_overrides_reach_the_run(shakespeare, tmp_path, capsys):
    argv = ["--config", "shakespeare_char_cpu", "--n_layer", "1", "--n_embd", "32", "--n_head",
            "2", "--block_size", "16", "--batch_size", "8", "--max_iters", "5",
            "--eval_interval", "5", "--eval_iters", "2", "--progress", "false", "--plot", "no",
            "--out_dir", str(tmp_path)]
    with torch.random.fork_rng():
        assert cli.main(argv) == 0
    assert f"checkpoint: {tmp_path / 'final.pt'}" in capsys.readouterr().out
    assert [r["step"] for r in _log(tmp_path)] == [0, 5]
    assert [r["tokens"] for r in _log(tmp_path)] == [0, 5 * 8 * 16]
    saved = load_checkpoint(tmp_path / "final.pt")["train_config"]
    preset_cpu = CONFIGS["shakespeare_char_cpu"]
    model = saved["model"]
    assert (model["n_layer"], model["n_embd"], model["n_head"], model["block_size"],
            saved["batch_size"], saved["max_iters"], saved["progress"], saved["plot"]) == \
        (1, 32, 2, 16, 8, 5, False, False)
    assert (saved["learning_rate"], saved["warmup_iters"], saved["device"]) == \
        (preset_cpu.learning_rate, preset_cpu.warmup_iters, "cpu"), "the rest is the preset's"
    assert not (tmp_path / "loss.png").exists()


# --- TrainConfig.model: every model the course teaches ---------------------------------------

def test_the_model_is_a_gptconfig_and_the_config_has_no_flat_model_names():
    config = TrainConfig(model=GPTConfig(block_size=32, n_layer=2, n_head=4, n_embd=64))
    assert (config.model.n_layer, config.model.n_head, config.model.n_embd,
            config.model.block_size) == (2, 4, 64, 32)
    for name in ("n_layer", "n_head", "n_embd", "block_size", "dropout"):
        assert not hasattr(config, name), f"config.{name}: one door per field (config.model.{name})"
    with pytest.raises(TypeError):
        TrainConfig(n_layer=2)


def test_replace_model_keeps_derived_defaults():
    model = CONFIGS["shakespeare_char_cpu"].model
    mqa = replace_model(model, n_kv_head=1, pos_encoding="rope")
    assert (mqa.n_kv_head, mqa.pos_encoding) == (1, "rope")
    assert (model.n_kv_head, model.pos_encoding) == (4, "learned"), "a copy"
    assert replace_model(model, n_head=8).n_kv_head == 8, "an MHA model stays MHA"
    assert replace_model(model, n_head=8, n_kv_head=2).n_kv_head == 2
    assert replace_model(model, n_embd=64).d_ff == 256, "d_ff follows the new width (4 n_embd)"
    assert replace_model(replace_model(model, d_ff=100), n_embd=64).d_ff == 100, \
        "an explicit d_ff stays"
    with pytest.raises(ValueError, match="n_kv_heads"):
        replace_model(model, n_kv_heads=1)
    with pytest.raises(ValueError, match="n_kv_head"):
        replace_model(model, n_kv_head=3)


def test_a_config_round_trips_through_plain_data_and_reads_the_old_flat_format():
    config = _changed(CONFIGS["shakespeare_char_cpu"], n_kv_head=2)
    assert TrainConfig.from_dict(config.to_dict()) == config
    flat = {k: v for k, v in config.to_dict().items() if k != "model"}
    flat.update(n_layer=4, n_head=4, n_embd=128, block_size=64, dropout=0.0, bias=False,
                pos_encoding="learned", activation="gelu")
    assert TrainConfig.from_dict(flat) == CONFIGS["shakespeare_char_cpu"]


def test_the_command_line_sets_any_model_field(shakespeare, tmp_path, capsys):
    argv = ["--config", "shakespeare_char_cpu", "--model.n_kv_head", "1", "--model.pos_encoding",
            "rope", "--n_layer", "1", "--n_embd", "32", "--n_head", "2", "--block_size", "16",
            "--batch_size", "4", "--max_iters", "2", "--eval_interval", "2", "--eval_iters", "1",
            "--progress", "false", "--plot", "no", "--out_dir", str(tmp_path)]
    with torch.random.fork_rng():
        assert cli.main(argv) == 0
    state = load_checkpoint(tmp_path / "final.pt")
    model = state["train_config"]["model"]
    assert (model["n_kv_head"], model["pos_encoding"], model["n_head"], model["n_layer"]) == \
        (1, "rope", 2, 1)
    assert state["model_config"]["n_kv_head"] == 1, "the checkpoint stores the whole model config"
    assert state["model"]["blocks.0.attn.k_proj.weight"].shape == (16, 32), "one KV head of 16"
    assert cli.main(["--resume", str(tmp_path / "final.pt"), "--model.n_kv_head", "2"]) == 2
    assert "model.n_kv_head: 1 -> 2" in capsys.readouterr().err


def test_train_trains_a_given_model_exactly_as_it_trains_its_own_gpt(corpus, tmp_path):
    config = _tiny(tmp_path / "own", max_iters=6, eval_interval=3, grad_accum_steps=2,
                   n_kv_head=1, pos_encoding="rope")
    own = _train(config, corpus)
    with torch.random.fork_rng():
        torch.manual_seed(config.seed)
        given = GPT(config.model_config(len(corpus[2])))
    result = _train(config.replace(out_dir=str(tmp_path / "given")), corpus, model=given)
    assert result.model is given
    assert result.train_losses == own.train_losses
    assert _without_timing(result.history) == _without_timing(own.history)
    with pytest.raises(TypeError, match="nn.Module"):
        train(config, data=corpus, model="gpt")
