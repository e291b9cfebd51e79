"""How much arithmetic a training step needs, and what fraction of the device's peak it used.

    flops per token = 6 N + 12 L H Q T          (PaLM appendix B; nanoGPT's estimate_mfu)

N counts the non-embedding parameters (each is used in one multiply-add forward, two
backward: 2 + 4 = 6 FLOPs per token); the second term is attention's two T-long products
(QK^T and AV) per layer and head, also times 6 / 2 = 3 for the backward pass. MFU (model FLOPs
utilisation) = achieved FLOP/s / the device's peak. nanoGPT divides by an A100's 312 TFLOP/s on
any machine; here the peak is the actual device's, from the table below.
"""

from __future__ import annotations

import re

import torch

from course_lib.model import GPTConfig, count_parameters

# Dense bf16 tensor-core peaks, FLOP/s, from the vendors' datasheets (no sparsity).
# Matched as whole words against torch.cuda.get_device_name, in order, so specific names come
# first ("H100 PCIe" before "H100"); "L4" does not match an L40, nor "H200" a GH200.
GPU_PEAK_FLOPS: dict[str, float] = {
    "H100 PCIe": 756e12,
    "H100 NVL": 835e12,
    "H100": 989e12,       # SXM
    "H200": 989e12,
    "GH200": 989e12,
    "B200": 2250e12,
    "A100": 312e12,
    "A10G": 70e12,
    "A10": 125e12,
    "L40S": 362e12,
    "L4": 121e12,
    "RTX 4090": 165e12,
    "RTX 3090": 71e12,
    "V100": 125e12,       # fp16 (no bf16)
    "T4": 65e12,          # fp16 (no bf16)
}


def flops_per_token(config: GPTConfig) -> int:
    """Training FLOPs per token (forward + backward) of a GPT with this config, context T =
    config.block_size: 6 N + 12 L H Q T, N = parameters without the position table (and without
    an untied token table, which is only looked up)."""
    if not isinstance(config, GPTConfig):
        raise TypeError(f"flops_per_token needs a GPTConfig, got {type(config).__name__} "
                        "(a TrainConfig gives one with .model_config(vocab_size)).")
    n = count_parameters(config)
    if config.pos_encoding == "learned":
        n -= config.block_size * config.n_embd
    if not config.tie_weights:
        n -= config.vocab_size * config.n_embd
    L, H, Q, T = config.n_layer, config.n_head, config.head_size, config.block_size
    return 6 * n + 12 * L * H * Q * T


def peak_flops(device: torch.device | str) -> float | None:
    """The device's dense bf16 peak in FLOP/s, or None (CPU, MPS, a GPU not in the table)."""
    device = torch.device(device)
    if device.type != "cuda":
        return None
    entry = gpu_table_entry(torch.cuda.get_device_name(device))
    return None if entry is None else GPU_PEAK_FLOPS[entry]


def gpu_table_entry(device_name: str) -> str | None:
    """The first GPU_PEAK_FLOPS key found in device_name as a whole word, or None."""
    for key in GPU_PEAK_FLOPS:
        if re.search(rf"(?<![A-Za-z0-9]){re.escape(key)}(?![A-Za-z0-9])", device_name):
            return key
    return None


def estimate_mfu(flops_per_token: float, tokens_per_second: float,
                 device: torch.device | str | None = None, *,
                 peak: float | None = None) -> float | None:
    """Achieved FLOP/s over the peak: `peak` if given, else the device's (`peak_flops`).

    Returns None where there is no known peak (on a CPU report tokens/s instead)."""
    if flops_per_token <= 0 or tokens_per_second < 0:
        raise ValueError(f"need flops_per_token > 0 and tokens_per_second >= 0, got "
                         f"{flops_per_token}, {tokens_per_second}.")
    if peak is not None and not peak > 0:
        raise ValueError(f"peak must be the device's peak FLOP/s, a number > 0, got {peak}.")
    if peak is None:
        peak = peak_flops(device) if device is not None else None
    if peak is None:
        return None
    return flops_per_token * tokens_per_second / peak
