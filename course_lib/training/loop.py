"""`train(config)`: the training loop, on one device or under torchrun (DDP).

One optimizer step:
    for each of grad_accum_steps micro-batches:  loss / grad_accum_steps -> backward
    clip the global gradient norm to grad_clip;  AdamW step;  learning rate for the next step
Every eval_interval steps both splits are evaluated on eval_iters fixed batches and the record
goes to the history, to out_dir/log.jsonl and to the callback; every checkpoint_interval steps
(and at the end) a checkpoint is written atomically.

Distributed: under torchrun each of the W processes computes the loss of batch_size / W rows
of the same global batch (every rank draws the global batch with the same generator and keeps
its slice), DDP averages the gradients, so W processes take the same steps as one process with
the whole batch, up to float rounding.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn
from tqdm.auto import tqdm

from course_lib.data import CharVocab, load_text, train_val_split
from course_lib.device import pick_device
from course_lib.model import GPT
from course_lib.training.checkpoint import FORMAT, CheckpointError, load_checkpoint, save_checkpoint
from course_lib.training.config import TRAJECTORY_FIELDS, TrainConfig
from course_lib.training.flops import estimate_mfu, flops_per_token
from course_lib.training.optim import WarmupCosineLR, make_optimizer

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class TrainResult:
    """What a run leaves behind. history: one dict per evaluation (step, train_loss, val_loss,
    lr, tokens, elapsed seconds, tokens_per_second); train_losses: the loss of every step."""

    config: TrainConfig
    model: nn.Module                      # a course_lib GPT, or the model passed to train()
    vocab: CharVocab
    history: list[dict] = field(default_factory=list)
    train_losses: list[float] = field(default_factory=list)
    step: int = 0
    checkpoint_path: Path | None = None
    elapsed: float = 0.0
    first_step_seconds: float = 0.0       # includes torch.compile's compilation
    target_reached_at: float | None = None  # seconds to the first val loss <= target_loss
    device: str = "cpu"

    @property
    def best_val_loss(self) -> float:
        return min((r["val_loss"] for r in self.history), default=math.inf)

    @property
    def tokens_per_second(self) -> float:
        """Median training throughput over the evaluation intervals (compilation excluded)."""
        rates = [r["tokens_per_second"] for r in self.history if r.get("tokens_per_second")]
        return statistics.median(rates[1:] if len(rates) > 1 else rates) if rates else 0.0

    @property
    def mfu(self) -> float | None:
        return estimate_mfu(flops_per_token(self.config.model_config(len(self.vocab))),
                            self.tokens_per_second, self.device)


class BatchSampler:
    """Random windows of the token stream, the data position being one torch.Generator.

    Draws the same global batch on every rank (the same seed) and returns this rank's rows;
    with one process it equals course_lib.data.get_batch with the same generator.
    """

    def __init__(self, data: torch.Tensor, batch_size: int, block_size: int, seed: int,
                 device: torch.device, rank: int = 0, world_size: int = 1) -> None:
        if batch_size % world_size:
            raise ValueError(f"batch_size={batch_size} must be divisible by the number of "
                             f"processes {world_size} (each takes batch_size / {world_size} rows).")
        if len(data) <= block_size:
            raise ValueError(f"the split has {len(data)} tokens, fewer than block_size + 1 = "
                             f"{block_size + 1}: use a shorter block_size or a smaller val_fraction.")
        self.data, self.batch_size, self.block_size = data, batch_size, block_size
        self.device = device
        self.generator = torch.Generator().manual_seed(seed)
        per_rank = batch_size // world_size
        self.rows = slice(rank * per_rank, (rank + 1) * per_rank)
        self.offsets = torch.arange(block_size + 1)

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        starts = torch.randint(len(self.data) - self.block_size, (self.batch_size,),
                               generator=self.generator)[self.rows]
        index = (starts[:, None] + self.offsets).to(self.data.device, non_blocking=True)
        window = self.data[index]
        if window.device.type != self.device.type:
            if self.device.type == "cuda":
                window = window.pin_memory()
            window = window.to(self.device, non_blocking=True)
        return window[:, :-1], window[:, 1:]


@torch.no_grad()
def estimate_loss(model: nn.Module, splits: dict[str, torch.Tensor], *, batch_size: int,
                  block_size: int, eval_iters: int, seed: int, device: torch.device,
                  autocast=nullcontext) -> dict[str, float]:
    """The mean loss of each split on eval_iters batches, the same batches at every call."""
    was_training = model.training
    model.eval()
    out = {}
    for name, data in splits.items():
        sampler = BatchSampler(data, batch_size, block_size, seed, device)
        losses = torch.zeros(eval_iters, device=device)
        for i in range(eval_iters):
            x, y = sampler.next()
            with autocast():
                losses[i] = model(x, y)[1]
        out[name] = losses.mean().item()
    model.train(was_training)
    return out


def _resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    if name == "auto":
        bf16 = device.type == "cuda" and torch.cuda.is_bf16_supported()
        return torch.bfloat16 if bf16 else torch.float32
    if name == "float16" and device.type != "cuda":
        raise ValueError("dtype='float16' needs a CUDA device (it uses a gradient scaler); "
                         "use 'bfloat16' or 'float32' here.")
    return _DTYPES[name]


def _setup_distributed(config: TrainConfig) -> tuple[int, int, torch.device]:
    """(rank, world_size, device); initialises the process group under torchrun."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size > 1:
        local_rank = int(os.environ["LOCAL_RANK"])
        use_cuda = config.device in ("auto", "cuda") and torch.cuda.is_available()
        if not dist.is_initialized():
            dist.init_process_group("nccl" if use_cuda else "gloo")
        if use_cuda:
            torch.cuda.set_device(local_rank)
        device = torch.device(f"cuda:{local_rank}") if use_cuda else torch.device("cpu")
        return dist.get_rank(), world_size, device
    device = pick_device() if config.device == "auto" else torch.device(config.device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return 0, 1, device


def _rng_state(device: torch.device) -> dict:
    state = {"torch": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def _set_rng_state(state: dict, device: torch.device) -> None:
    torch.set_rng_state(state["torch"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


def _trajectory(config: TrainConfig) -> dict:
    """The fields a resumed run must keep, as plain data (the model's, without vocab_size)."""
    values = {name: getattr(config, name) for name in TRAJECTORY_FIELDS if name != "model"}
    model = asdict(config.model)
    model.pop("vocab_size")
    values.update({f"model.{k}": v for k, v in model.items()})
    return values


def _check_resumable(saved: dict, config: TrainConfig, path: Path) -> None:
    before, now = _trajectory(TrainConfig.from_dict(saved)), _trajectory(config)
    changed = [f"{name}: {before[name]!r} -> {now[name]!r}" for name in now if before[name] != now[name]]
    if changed:
        raise CheckpointError(
            f"{path}: cannot resume with a different run; these fields differ from the "
            f"checkpoint's: {'; '.join(changed)}. Resume with the checkpoint's values (pass "
            "only --resume) or start a new run.")


def _write_log(path: Path, history: list[dict]) -> None:
    tmp = path.with_suffix(".jsonl.tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in history))
    os.replace(tmp, path)


def config_from_checkpoint(path: str | os.PathLike, **overrides) -> TrainConfig:
    """The TrainConfig a checkpoint was written with, with some fields changed."""
    return TrainConfig.from_dict(load_checkpoint(path)["train_config"]).replace(**overrides)


class _Run:
    """One run between its steps: what `train` sets up, restores, steps, evaluates and
    checkpoints. Each method is one part of the loop that lesson 07 has the learner write."""

    def __init__(self, config: TrainConfig, data, model: nn.Module | None, callback) -> None:
        """Setup: the device, the data, the model, the optimizer, the schedule and the batches."""
        self.config, self.callback = config, callback
        self.rank, self.world_size, self.device = _setup_distributed(config)
        self.is_main = self.rank == 0
        self.amp_dtype = _resolve_dtype(config.dtype, self.device)
        if data is None:
            text = load_text(config.dataset)
            vocab = CharVocab(text)
            train_data, val_data = train_val_split(
                torch.tensor(vocab.encode(text), dtype=torch.long), config.val_fraction)
        else:
            train_data, val_data, vocab = data
        if config.data_on_device:
            train_data, val_data = train_data.to(self.device), val_data.to(self.device)
        self.splits = {"train": train_data, "val": val_data}
        self.model_config = config.model_config(len(vocab))
        if model is None:
            torch.manual_seed(config.seed)      # the same initial weights on every rank
            model = GPT(self.model_config)
        elif not isinstance(model, nn.Module):
            raise TypeError(f"model must be an nn.Module whose forward(x, y) returns (logits, "
                            f"loss), got {type(model).__name__}.")
        self.model = model.to(self.device)
        self.optimizer = make_optimizer(self.model, learning_rate=config.learning_rate,
                                        weight_decay=config.weight_decay,
                                        betas=(config.beta1, config.beta2),
                                        device_type=self.device.type)
        decay_iters = config.lr_decay_iters or config.max_iters
        self.scheduler = WarmupCosineLR(self.optimizer, min_lr=config.min_lr,
                                        warmup_iters=min(config.warmup_iters, decay_iters),
                                        decay_iters=decay_iters)
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.amp_dtype == torch.float16)
        self.sampler = BatchSampler(train_data, config.batch_size, config.model.block_size,
                                    config.seed, self.device, self.rank, self.world_size)
        torch.manual_seed(config.seed + 1 + self.rank)   # dropout differs across ranks
        self.result = TrainResult(config=config, model=self.model, vocab=vocab,
                                  device=str(self.device))
        self.pending: list[torch.Tensor] = []   # step losses not yet copied to the host
        self.out_dir = Path(config.out_dir)
        self.log_path = self.out_dir / "log.jsonl"
        self.interval_steps = 0     # steps since the last evaluation (tokens/s)

    def restore(self, state: dict, path: Path) -> None:
        """Continue an interrupted run from its checkpoint `state`, read from `path`."""
        _check_resumable(state["train_config"], self.config, path)
        if state["vocab"] != self.result.vocab.chars:
            raise CheckpointError(f"{path}: the checkpoint's vocabulary differs from the data's "
                                  f"({len(state['vocab'])} vs {len(self.result.vocab.chars)} "
                                  "characters): resume on the same dataset.")
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        if "scaler" in state:
            self.scaler.load_state_dict(state["scaler"])
        self.sampler.generator.set_state(state["sampler"])
        rng = state["rng"]
        _set_rng_state(rng[self.rank] if isinstance(rng, list) and self.rank < len(rng) else rng,
                       self.device)
        result = self.result
        result.step = state["step"]
        result.history = list(state["history"])
        result.train_losses = list(state["train_losses"])
        result.elapsed = state.get("elapsed", 0.0)
        result.target_reached_at = state.get("target_reached_at")

    def start(self) -> None:
        """Wrap the model (compile, DDP) and open the log (on resume: drop the records past the
        checkpoint)."""
        self.eval_model: nn.Module = torch.compile(self.model) if self.config.compile else self.model
        self.step_model = self.eval_model
        if self.world_size > 1:
            from torch.nn.parallel import DistributedDataParallel
            self.step_model = DistributedDataParallel(
                self.eval_model,
                device_ids=[self.device.index] if self.device.type == "cuda" else None)
        if self.is_main:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            _write_log(self.log_path, self.result.history)
        self.step_model.train()
        self.interval_start = self.clock_start = time.perf_counter()

    def autocast(self):
        if self.amp_dtype == torch.float32:
            return nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.amp_dtype)

    def step(self) -> None:
        """One optimizer step: grad_accum_steps micro-batches, clipping, AdamW, the schedule."""
        config, scaler = self.config, self.scaler
        step_loss = torch.zeros((), device=self.device)
        for micro in range(config.grad_accum_steps):
            x, y = self.sampler.next()
            last = micro == config.grad_accum_steps - 1
            sync = self.step_model.no_sync() if self.world_size > 1 and not last else nullcontext()
            with sync:
                with self.autocast():
                    loss = self.step_model(x, y)[1] / config.grad_accum_steps
                scaler.scale(loss).backward()
            step_loss += loss.detach()
        if config.grad_clip > 0:
            scaler.unscale_(self.optimizer)
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), config.grad_clip)
        scaler.step(self.optimizer)
        scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        self.scheduler.step()
        self.pending.append(step_loss)
        self.result.step += 1
        self.interval_steps += 1

    def flush_losses(self) -> None:
        """Copy the pending step losses to the host (averaged over the ranks)."""
        if not self.pending:
            return
        losses = torch.stack(self.pending)
        if self.world_size > 1:
            dist.all_reduce(losses)
            losses /= self.world_size
        self.result.train_losses.extend(losses.tolist())
        self.pending.clear()

    def now(self) -> float:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter()

    def evaluate(self) -> bool:
        """Evaluate, record, report; True when the target loss is reached."""
        config, result = self.config, self.result
        self.flush_losses()
        interval = self.now() - self.interval_start
        losses = estimate_loss(self.eval_model, self.splits, batch_size=config.batch_size,
                               block_size=config.model.block_size, eval_iters=config.eval_iters,
                               seed=config.seed + 10_000, device=self.device,
                               autocast=self.autocast)
        result.elapsed += self.now() - self.clock_start
        self.clock_start = self.interval_start = time.perf_counter()
        tokens_per_step = config.tokens_per_step
        record = {"step": result.step, "train_loss": round(losses["train"], 6),
                  "val_loss": round(losses["val"], 6),
                  "lr": self.scheduler.get_last_lr()[0], "tokens": result.step * tokens_per_step,
                  "elapsed": round(result.elapsed, 3),
                  "tokens_per_second": round(self.interval_steps * tokens_per_step / interval, 1)
                  if self.interval_steps else None}
        self.interval_steps = 0
        result.history.append(record)
        reached = config.target_loss > 0 and losses["val"] <= config.target_loss
        if reached and result.target_reached_at is None:
            result.target_reached_at = result.elapsed
        if self.is_main:
            with self.log_path.open("a") as f:
                f.write(json.dumps(record) + "\n")
            if self.callback is not None:
                self.callback(record, result)
        return reached

    def checkpoint(self, name: str) -> Path:
        """Write everything a resumed run needs, atomically (every rank's random state)."""
        self.flush_losses()
        rngs = [_rng_state(self.device)]
        if self.world_size > 1:
            rngs = [None] * self.world_size
            dist.all_gather_object(rngs, _rng_state(self.device))
            rngs = [{k: v.cpu() for k, v in r.items()} for r in rngs]
        path = self.out_dir / name
        if self.is_main:
            result = self.result
            save_checkpoint({
                "format": FORMAT, "step": result.step, "train_config": self.config.to_dict(),
                "model_config": asdict(self.model_config), "vocab": result.vocab.chars,
                "model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(), "scaler": self.scaler.state_dict(),
                "sampler": self.sampler.generator.get_state(), "rng": rngs,
                "history": result.history, "train_losses": result.train_losses,
                "elapsed": result.elapsed, "target_reached_at": result.target_reached_at,
            }, path)
            result.checkpoint_path = path
        return path

    def plot(self) -> None:
        """loss.png in out_dir."""
        from course_lib.viz.plots import loss_curve
        fig = loss_curve(self.result.history, self.result.train_losses).figure
        fig.savefig(self.out_dir / "loss.png", dpi=100, bbox_inches="tight")
        import matplotlib.pyplot as plt
        plt.close(fig)


def train(config: TrainConfig, *, resume: str | os.PathLike | None = None,
          callback: Callable[[dict, TrainResult], None] | None = None,
          data: tuple[torch.Tensor, torch.Tensor, CharVocab] | None = None,
          model: nn.Module | None = None) -> TrainResult:
    """Train a GPT on a character-level corpus as `config` says; see the module docstring.

    resume: a checkpoint written by an earlier run with the same trajectory fields; the run
        continues from its step and ends exactly where the uninterrupted run would have.
    callback(record, result): called on rank 0 after every evaluation (live plots).
    data: (train tokens, val tokens, vocabulary) instead of loading config.dataset.
    model: train this module instead of a new GPT(config.model) (its forward(x, y) must return
        (logits, loss): the learner's own model, lesson 10). Its weights are used as they are:
        the seed then only drives the batches (and dropout).
    """
    if not isinstance(config, TrainConfig):
        raise TypeError(f"train needs a TrainConfig (course_lib.training.CONFIGS has presets), "
                        f"got {type(config).__name__}.")
    state = load_checkpoint(resume) if resume is not None else None
    run = _Run(config, data, model, callback)
    if state is not None:
        run.restore(state, Path(resume))
    run.start()
    result = run.result
    stop = run.evaluate() if state is None else False
    bar = tqdm(total=config.max_iters, initial=result.step, desc="train", unit="step",
               disable=not (config.progress and run.is_main), mininterval=1.0, dynamic_ncols=True)
    start_step = result.step
    while result.step < config.max_iters and not stop:
        t0 = time.perf_counter()
        run.step()
        if result.step == start_step + 1:
            result.first_step_seconds = run.now() - t0
        bar.update(1)
        if len(run.pending) >= 10:
            run.flush_losses()
            rate = (run.interval_steps * config.tokens_per_step
                    / (time.perf_counter() - run.interval_start))
            bar.set_postfix(loss=f"{result.train_losses[-1]:.4f}", tok_s=f"{rate:,.0f}",
                            refresh=False)
        if result.step % config.eval_interval == 0 or result.step == config.max_iters:
            stop = run.evaluate()
        if config.checkpoint_interval and result.step % config.checkpoint_interval == 0:
            run.checkpoint(f"ckpt_{result.step:06d}.pt")
    bar.close()
    run.flush_losses()
    if result.history[-1]["step"] != result.step:
        run.evaluate()
    run.checkpoint("final.pt")
    if run.is_main and config.plot:
        run.plot()
    return result
