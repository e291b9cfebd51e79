"""What a training run is: `TrainConfig` and the named presets in `CONFIGS`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, fields

from course_lib.model import GPTConfig

DTYPES = ("auto", "float32", "bfloat16", "float16")

def default_model() -> GPTConfig:
    """nanoGPT's Shakespeare-char model. vocab_size is a placeholder: `train` sets it from the
    data's vocabulary (`TrainConfig.model_config(vocab_size)`)."""
    return GPTConfig(vocab_size=256, block_size=256, n_layer=6, n_head=6, n_embd=384,
                     dropout=0.2, bias=False)


def replace_model(model: GPTConfig, **changes) -> GPTConfig:
    """dataclasses.replace for a GPTConfig whose derived defaults follow the change: an MHA
    model (n_kv_head == n_head) stays MHA with a new head count, and d_ff stays 4 * n_embd
    with a new width, unless the change sets them too."""
    unknown = sorted(set(changes) - {f.name for f in fields(GPTConfig)})
    if unknown:
        raise ValueError(f"unknown model field(s) {unknown}; GPTConfig's fields are "
                         f"{[f.name for f in fields(GPTConfig)]}.")
    if "n_head" in changes and "n_kv_head" not in changes and model.n_kv_head == model.n_head:
        changes["n_kv_head"] = None
    if "n_embd" in changes and "d_ff" not in changes and model.d_ff == 4 * model.n_embd:
        changes["d_ff"] = None
    return dataclasses.replace(model, **changes) if changes else model


@dataclass
class TrainConfig:
    """Every knob of a run. `model` is the whole `GPTConfig` of the model to train (every
    architecture the course teaches: learned/sinusoidal/RoPE/ALiBi positions, MHA/GQA/MQA, ...);
    the other fields are the run's. On the command line a field is `--FIELD VALUE` and a model
    field `--model.FIELD VALUE` (course_lib/training/__main__.py).
    """

    model: GPTConfig = field(default_factory=default_model)
    # data: a character-level corpus from course_lib.data
    dataset: str = "tinyshakespeare"
    val_fraction: float = 0.1
    # optimisation: AdamW, linear warmup then cosine decay to min_lr
    batch_size: int = 64            # sequences per micro-step, all ranks together
    grad_accum_steps: int = 1       # micro-steps per optimizer step
    max_iters: int = 5000           # optimizer steps
    learning_rate: float = 1e-3
    min_lr: float = 1e-4
    warmup_iters: int = 100
    lr_decay_iters: int = 0         # 0: decay over max_iters
    weight_decay: float = 0.1       # on matrices only (not biases, LayerNorms, embeddings' ...)
    beta1: float = 0.9
    beta2: float = 0.99
    grad_clip: float = 1.0          # the global gradient norm is clipped to this (0: off)
    # evaluation
    eval_interval: int = 250        # steps between evaluations (and one at the end)
    eval_iters: int = 200           # batches per split per evaluation
    target_loss: float = 0.0        # > 0: stop at the first evaluation with val loss <= this
    # run
    out_dir: str = "runs/shakespeare_char"
    checkpoint_interval: int = 0    # steps between checkpoints (0: only the final one)
    seed: int = 1337
    device: str = "auto"            # auto (course_lib.device.pick_device), cpu, cuda, cuda:N, mps
    dtype: str = "auto"             # auto: bfloat16 autocast on CUDA when supported, else float32
    compile: bool = False           # torch.compile the model
    data_on_device: bool = True     # keep the whole token tensor on the device
    progress: bool = True           # a tqdm bar with the loss and tokens/s
    plot: bool = True               # write loss.png in out_dir at the end

    def __post_init__(self) -> None:
        if not isinstance(self.model, GPTConfig):
            raise TypeError(f"TrainConfig.model must be a course_lib.model.GPTConfig (e.g. "
                            f"TrainConfig(model=GPTConfig(n_layer=4, ...))), got "
                            f"{type(self.model).__name__}; TrainConfig.from_dict reads plain data.")
        for name in ("batch_size", "grad_accum_steps", "max_iters", "eval_interval", "eval_iters"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"TrainConfig.{name} must be an integer >= 1, got {value!r}.")
        for name in ("warmup_iters", "lr_decay_iters", "checkpoint_interval", "seed"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"TrainConfig.{name} must be an integer >= 0, got {value!r}.")
        if not 0 < self.learning_rate or not 0 <= self.min_lr <= self.learning_rate:
            raise ValueError(f"need 0 < learning_rate and 0 <= min_lr <= learning_rate, got "
                             f"learning_rate={self.learning_rate}, min_lr={self.min_lr}.")
        if self.dtype not in DTYPES:
            raise ValueError(f"TrainConfig.dtype must be one of {DTYPES}, got {self.dtype!r}.")

    def model_config(self, vocab_size: int) -> GPTConfig:
        """`model` with the data's vocabulary size."""
        return dataclasses.replace(self.model, vocab_size=vocab_size)

    @property
    def tokens_per_step(self) -> int:
        return self.batch_size * self.grad_accum_steps * self.model.block_size

    def replace(self, **changes) -> TrainConfig:
        """A copy with some fields changed (dataclasses.replace, validated); a model field is
        changed through `model`: config.replace(model=replace_model(config.model, n_layer=2))."""
        names = [f.name for f in fields(self)]
        unknown = sorted(set(changes) - set(names))
        if unknown:
            model_fields = {f.name for f in fields(GPTConfig)}
            if set(unknown) <= model_fields:
                spelled = ", ".join(f"{name}={changes[name]!r}" for name in unknown)
                raise ValueError(f"{unknown} belong to the model (config.model, a GPTConfig), not "
                                 f"to TrainConfig: replace(model=replace_model(config.model, "
                                 f"{spelled})) (course_lib.training.replace_model).")
            raise ValueError(f"unknown TrainConfig field(s) {unknown}; the fields are {names}, "
                             f"the model's (config.model) {sorted(model_fields)}.")
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        """Plain data (the model config as a nested dict): what checkpoints store."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, saved: dict) -> TrainConfig:
        """The inverse of to_dict; also reads checkpoints of the earlier flat format, whose
        model fields (n_layer, ...) sat beside the run's."""
        saved = dict(saved)
        names = {f.name for f in fields(cls)} - {"model"}
        model_names = {f.name for f in fields(GPTConfig)}
        model = saved.pop("model", None)
        model = default_model() if model is None else GPTConfig(**model)
        flat = {k: saved[k] for k in saved if k in model_names and k not in names}
        return cls(model=replace_model(model, **flat),
                   **{k: v for k, v in saved.items() if k in names})


# Fields that change what is trained; a resumed run must keep them (the others, such as
# max_iters, device or progress, may change between the interrupted run and its resumption).
# "model" is the whole model config except vocab_size (which comes from the data).
TRAJECTORY_FIELDS = ("model", "dataset", "val_fraction", "batch_size", "grad_accum_steps",
                     "learning_rate", "min_lr", "warmup_iters", "lr_decay_iters", "weight_decay",
                     "beta1", "beta2", "grad_clip", "seed", "eval_iters")

CONFIGS: dict[str, TrainConfig] = {
    # nanoGPT's config/train_shakespeare_char.py, the reference recipe (bf16 and compile as in
    # nanoGPT's defaults on a GPU).
    "nanogpt_shakespeare_char": TrainConfig(
        out_dir="runs/nanogpt_shakespeare_char", compile=True),
    # nanoGPT's README "on a MacBook" CPU recipe: 4 x 4 x 128, context 64, batch 12, no dropout.
    "nanogpt_shakespeare_char_cpu": TrainConfig(
        model=replace_model(default_model(), block_size=64, n_layer=4, n_head=4, n_embd=128,
                            dropout=0.0),
        batch_size=12,
        max_iters=2000, lr_decay_iters=2000, eval_iters=20, eval_interval=250, device="cpu",
        out_dir="runs/nanogpt_shakespeare_char_cpu"),
    # The course's CPU preset (lesson 07 trains it live): the same small model, a larger
    # batch at a higher learning rate, so that it reaches the CPU recipe's loss in less time.
    "shakespeare_char_cpu": TrainConfig(
        model=replace_model(default_model(), block_size=64, n_layer=4, n_head=4, n_embd=128,
                            dropout=0.0),
        batch_size=32,
        max_iters=600, learning_rate=4e-3, min_lr=4e-4, warmup_iters=50, eval_iters=20,
        eval_interval=100, device="cpu", out_dir="runs/shakespeare_char_cpu"),
    # The course's GPU preset: bf16 autocast, fused attention, the data on the GPU, small
    # frequent evaluations, a higher learning rate; no torch.compile (on an H100 its ~30 s of
    # compilation cost more than it saved in a run this short: benchmarks/RESULTS.md).
    "shakespeare_char_gpu": TrainConfig(
        model=default_model(), batch_size=64,
        max_iters=4000, learning_rate=1.5e-3, min_lr=1.5e-4, warmup_iters=100, eval_iters=20,
        eval_interval=100, target_loss=1.47, compile=False, out_dir="runs/shakespeare_char_gpu"),
    # The checkpoint that ships in course_lib/pretrained (<= 5 MB as float16):
    #   python -m course_lib.training --config shakespeare_char_pretrained \
    #       --export course_lib/pretrained/shakespeare_char.pt
    "shakespeare_char_pretrained": TrainConfig(
        model=replace_model(default_model(), n_embd=144, dropout=0.1), batch_size=64,
        max_iters=6000, learning_rate=2e-3, min_lr=2e-4, warmup_iters=200, eval_iters=50,
        eval_interval=500, out_dir="runs/shakespeare_char_pretrained"),
}


def preset(name: str, **overrides) -> TrainConfig:
    """CONFIGS[name] with some fields changed; an unknown name lists the presets."""
    if name not in CONFIGS:
        raise ValueError(f"unknown preset {name!r}; the presets are {sorted(CONFIGS)}.")
    return CONFIGS[name].replace(**overrides)
