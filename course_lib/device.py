"""Choosing where tensors live."""

from __future__ import annotations

import os
import platform

import torch

_VALID = ("cuda", "mps", "cpu")


def pick_device() -> torch.device:
    """cuda > mps > cpu. `COURSE_DEVICE=cpu` (or cuda, cuda:1, mps) overrides the choice."""
    override = os.environ.get("COURSE_DEVICE", "").strip()
    if override:
        kind = override.split(":")[0]
        if kind not in _VALID:
            raise ValueError(f"COURSE_DEVICE={override!r} is not one of {_VALID} (optionally cuda:N)")
        if kind == "cuda" and not torch.cuda.is_available():
            raise RuntimeError("COURSE_DEVICE asks for cuda, but torch.cuda.is_available() is False")
        if kind == "mps" and not _mps_available():
            raise RuntimeError("COURSE_DEVICE asks for mps, but torch.backends.mps.is_available() is False")
        return torch.device(override)
    if torch.cuda.is_available():
        return torch.device("cuda")
    if _mps_available():
        return torch.device("mps")
    return torch.device("cpu")


def _mps_available() -> bool:
    mps = getattr(torch.backends, "mps", None)
    return bool(mps and mps.is_available())


def device_report(device: torch.device | None = None) -> dict[str, str]:
    """What a learner (or an instructor debugging a learner's setup) needs to know."""
    device = device or pick_device()
    report = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "device": str(device),
        "cpu threads": str(torch.get_num_threads()),
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        report["gpu"] = props.name
        report["gpu memory"] = f"{props.total_memory / 2**30:.1f} GiB"
        report["bf16 supported"] = str(torch.cuda.is_bf16_supported())
    return report
