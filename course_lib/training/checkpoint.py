"""Checkpoints that survive a crash: written atomically, read back or refused with a reason.

A checkpoint is one `.pt` file holding a dict with FORMAT under "format" and everything a run
needs to continue as if it had never stopped: the model, the optimizer (AdamW's moments), the
scheduler, the step, the loss history, the RNG states (dropout) and the data position (the
batch sampler's generator).

Atomic write: the bytes go to a temporary file in the same folder, are fsync'ed to disk, and
the file is renamed over the target (a rename within a filesystem is atomic on POSIX). A kill
at any moment leaves either the old checkpoint or the new one, never half of one.
"""

from __future__ import annotations

import os
import pickle
import tempfile
import zipfile
from pathlib import Path

import torch

FORMAT = "course_lib.training/1"
REQUIRED_KEYS = ("format", "step", "train_config", "model_config", "vocab", "model",
                 "optimizer", "scheduler", "rng", "history")


class CheckpointError(RuntimeError):
    """A file that is not a usable checkpoint; the message names the file and the fix."""


def save_checkpoint(state: dict, path: str | os.PathLike) -> Path:
    """torch.save(state) to `path` atomically (temporary file, fsync, rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)       # make the rename itself durable
    finally:
        os.close(dir_fd)
    return path


def load_checkpoint(path: str | os.PathLike, map_location="cpu") -> dict:
    """The state dict saved by `save_checkpoint`, or CheckpointError saying what is wrong."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such checkpoint file; check the path (checkpoints "
                              "are ckpt_<step>.pt and final.pt in the run's out_dir).")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except (RuntimeError, EOFError, pickle.UnpicklingError, zipfile.BadZipFile, ValueError,
            OSError) as error:
        raise CheckpointError(
            f"{path}: not a readable checkpoint, it is truncated or corrupt "
            f"({type(error).__name__}: {_first_line(error)}). Resume from an "
            "earlier checkpoint or start the run again without --resume.") from error
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        found = state.get("format") if isinstance(state, dict) else type(state).__name__
        raise CheckpointError(
            f"{path}: not a course_lib.training checkpoint (format {found!r}, expected "
            f"{FORMAT!r}). Resume only from a file that `python -m course_lib.training` wrote; "
            "to load bare weights use model.load_state_dict.")
    missing = [k for k in REQUIRED_KEYS if k not in state]
    if missing:
        raise CheckpointError(f"{path}: checkpoint lacks {missing}; it was not written by this "
                              "version of course_lib.training. Start the run again.")
    return state


def _first_line(error: BaseException) -> str:
    """The first line of an error's message, at most 120 characters ('empty file' when a 0-byte
    file leaves torch.load's EOFError without a message)."""
    lines = str(error).strip().splitlines()
    return lines[0][:120] if lines else "empty file"
