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
    rank, world_size, device = _setup_distributed(config)
    is_main = rank == 0
    amp_dtype = _resolve_dtype(config.dtype, device)

    if data is None:
        text = load_text(config.dataset)
        vocab = CharVocab(text)
        train_data, val_data = train_val_split(torch.tensor(vocab.encode(text), dtype=torch.long),
                                               config.val_fraction)
    else:
        train_data, val_data, vocab = data
    if config.data_on_device:
        train_data, val_data = train_data.to(device), val_data.to(device)

    state = load_checkpoint(resume) if resume is not None else None
    if state is not None:
        _check_resumable(state["train_config"], config, Path(resume))
        if state["vocab"] != vocab.chars:
            raise CheckpointError(f"{resume}: the checkpoint's vocabulary differs from the "
                                  f"data's ({len(state['vocab'])} vs {len(vocab.chars)} "
                                  "characters): resume on the same dataset.")

    model_config = config.model_config(len(vocab))
    if model is None:
        torch.manual_seed(config.seed)      # the same initial weights on every rank
        model = GPT(model_config)
    elif not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module whose forward(x, y) returns (logits, loss), "
                        f"got {type(model).__name__}.")
    model = model.to(device)
    optimizer = make_optimizer(model, learning_rate=config.learning_rate,
                               weight_decay=config.weight_decay,
                               betas=(config.beta1, config.beta2), device_type=device.type)
    decay_iters = config.lr_decay_iters or config.max_iters
    scheduler = WarmupCosineLR(optimizer, min_lr=config.min_lr,
                               warmup_iters=min(config.warmup_iters, decay_iters),
                               decay_iters=decay_iters)
    scaler = torch.amp.GradScaler("cuda", enabled=amp_dtype == torch.float16)
    sampler = BatchSampler(train_data, config.batch_size, config.block_size, config.seed, device,
                           rank, world_size)
    torch.manual_seed(config.seed + 1 + rank)   # dropout differs across ranks
    result = TrainResult(config=config, model=model, vocab=vocab, device=str(device))

    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        if "scaler" in state:
            scaler.load_state_dict(state["scaler"])
        sampler.generator.set_state(state["sampler"])
        rng = state["rng"]
        _set_rng_state(rng[rank] if isinstance(rng, list) and rank < len(rng) else rng, device)
        result.step = state["step"]
        result.history = list(state["history"])
        result.train_losses = list(state["train_losses"])
        result.elapsed = state.get("elapsed", 0.0)
        result.target_reached_at = state.get("target_reached_at")

    eval_model: nn.Module = torch.compile(model) if config.compile else model
    step_model = eval_model
    if world_size > 1:
        from torch.nn.parallel import DistributedDataParallel
        step_model = DistributedDataParallel(
            eval_model, device_ids=[device.index] if device.type == "cuda" else None)

    def autocast():
        if amp_dtype == torch.float32:
            return nullcontext()
        return torch.autocast(device_type=device.type, dtype=amp_dtype)

    out_dir = Path(config.out_dir)
    log_path = out_dir / "log.jsonl"
    if is_main:
        out_dir.mkdir(parents=True, exist_ok=True)
        _write_log(log_path, result.history)   # on resume: drop records past the checkpoint

    def checkpoint(name: str) -> Path:
        flush_losses()
        rngs = [_rng_state(device)]
        if world_size > 1:
            rngs = [None] * world_size
            dist.all_gather_object(rngs, _rng_state(device))
            rngs = [{k: v.cpu() for k, v in r.items()} for r in rngs]
        path = out_dir / name
        if is_main:
            save_checkpoint({
                "format": FORMAT, "step": result.step, "train_config": config.to_dict(),
                "model_config": asdict(model_config), "vocab": vocab.chars,
                "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(), "scaler": scaler.state_dict(),
                "sampler": sampler.generator.get_state(), "rng": rngs,
                "history": result.history, "train_losses": result.train_losses,
                "elapsed": result.elapsed, "target_reached_at": result.target_reached_at,
            }, path)
            result.checkpoint_path = path
        return path

    splits = {"train": train_data, "val": val_data}
    tokens_per_step = config.tokens_per_step
    pending: list[torch.Tensor] = []

    def flush_losses() -> None:
        if not pending:
            return
        losses = torch.stack(pending)
        if world_size > 1:
            dist.all_reduce(losses)
            losses /= world_size
        result.train_losses.extend(losses.tolist())
        pending.clear()

    clock = {"start": time.perf_counter(), "interval": time.perf_counter(), "steps": 0}

    def now() -> float:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter()

    def evaluate() -> bool:
        """Evaluate, record, report; True when the target loss is reached."""
        flush_losses()
        interval = now() - clock["interval"]
        losses = estimate_loss(eval_model, splits, batch_size=config.batch_size,
                               block_size=config.block_size, eval_iters=config.eval_iters,
                               seed=config.seed + 10_000, device=device, autocast=autocast)
        result.elapsed += now() - clock["start"]
        clock["start"] = clock["interval"] = time.perf_counter()
        record = {"step": result.step, "train_loss": round(losses["train"], 6),
                  "val_loss": round(losses["val"], 6),
                  "lr": scheduler.get_last_lr()[0], "tokens": result.step * tokens_per_step,
                  "elapsed": round(result.elapsed, 3),
                  "tokens_per_second": round(clock["steps"] * tokens_per_step / interval, 1)
                  if clock["steps"] else None}
        clock["steps"] = 0
        result.history.append(record)
        reached = config.target_loss > 0 and losses["val"] <= config.target_loss
        if reached and result.target_reached_at is None:
            result.target_reached_at = result.elapsed
        if is_main:
            with log_path.open("a") as f:
                f.write(json.dumps(record) + "\n")
            if callback is not None:
                callback(record, result)
        return reached

    stop = False
    if state is None:
        stop = evaluate()
    bar = tqdm(total=config.max_iters, initial=result.step, desc="train", unit="step",
               disable=not (config.progress and is_main), mininterval=1.0, dynamic_ncols=True)
    step_model.train()
    start_step = result.step
    while result.step < config.max_iters and not stop:
        t0 = time.perf_counter()
        step_loss = torch.zeros((), device=device)
        for micro in range(config.grad_accum_steps):
            x, y = sampler.next()
            last = micro == config.grad_accum_steps - 1
            sync = step_model.no_sync() if world_size > 1 and not last else nullcontext()
            with sync:
                with autocast():
                    loss = step_model(x, y)[1] / config.grad_accum_steps
                scaler.scale(loss).backward()
            step_loss += loss.detach()
        if config.grad_clip > 0:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        scheduler.step()
        pending.append(step_loss)
        result.step += 1
        clock["steps"] += 1
        if result.step == start_step + 1:
            result.first_step_seconds = now() - t0
        bar.update(1)
        if len(pending) >= 10:
            flush_losses()
            rate = clock["steps"] * tokens_per_step / (time.perf_counter() - clock["interval"])
            bar.set_postfix(loss=f"{result.train_losses[-1]:.4f}", tok_s=f"{rate:,.0f}",
                            refresh=False)
        if result.step % config.eval_interval == 0 or result.step == config.max_iters:
            stop = evaluate()
        if config.checkpoint_interval and result.step % config.checkpoint_interval == 0:
            checkpoint(f"ckpt_{result.step:06d}.pt")
    bar.close()
    flush_losses()
    if result.history[-1]["step"] != result.step:
        evaluate()
    checkpoint("final.pt")
    if is_main and config.plot:
        from course_lib.viz.plots import loss_curve
        fig = loss_curve(result.history, result.train_losses).figure
        fig.savefig(out_dir / "loss.png", dpi=100, bbox_inches="tight")
        import matplotlib.pyplot as plt
        plt.close(fig)
    return result
