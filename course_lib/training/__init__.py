"""Lesson 07: training the mini-GPT (`train`, presets, checkpoints, FLOPs and MFU).

    python -m course_lib.training --config shakespeare_char_cpu [--max_iters 500 ...]
    torchrun --standalone --nproc_per_node=2 -m course_lib.training --config shakespeare_char_gpu
"""

from course_lib.training.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from course_lib.training.config import CONFIGS, TrainConfig, preset, replace_model
from course_lib.training.flops import GPU_PEAK_FLOPS, estimate_mfu, flops_per_token, peak_flops
from course_lib.training.loop import (
                                      BatchSampler,
                                      TrainResult,
                                      config_from_checkpoint,
                                      estimate_loss,
                                      train,
)
from course_lib.training.optim import (
                                      WarmupCosineLR,
                                      make_optimizer,
                                      parameter_groups,
                                      warmup_cosine_lr,
)

__all__ = ["CONFIGS", "GPU_PEAK_FLOPS", "BatchSampler", "CheckpointError", "TrainConfig",
           "TrainResult", "WarmupCosineLR", "config_from_checkpoint", "estimate_loss",
           "estimate_mfu", "flops_per_token", "load_checkpoint", "make_optimizer",
           "parameter_groups", "peak_flops", "preset", "replace_model", "save_checkpoint", "train",
           "warmup_cosine_lr"]
