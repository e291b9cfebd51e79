"""A real `python -m course_lib.training` process, SIGKILLed at a random step and resumed with
--resume, ends bit for bit where the same run left alone ends.

The kill is SIGKILL (no handler, no cleanup, possibly in the middle of writing a checkpoint):
what it leaves must be complete checkpoints only, and resuming from the latest one must give
the same weights, AdamW state, per-step losses and evaluation history, and a log.jsonl without
the records the killed run wrote after that checkpoint. Dropout is on, so the RNG state must be
restored as well as the weights and the data position.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time

import torch

from course_lib.training import load_checkpoint

MAX_ITERS = 120
TINY = ["--config", "shakespeare_char_cpu", "--n_layer", "1", "--n_embd", "32", "--n_head", "2",
        "--block_size", "32", "--batch_size", "8", "--max_iters", str(MAX_ITERS),
        "--eval_interval", "10", "--eval_iters", "2", "--checkpoint_interval", "5",
        "--dropout", "0.1", "--progress", "false", "--plot", "false"]
TIMING = ("elapsed", "tokens_per_second")
SEED = 20240607


def _env():
    # the corpus comes from COURSE_DATA_DIR (or the repo's data/, or the cache), as in the parent
    return dict(os.environ, OMP_NUM_THREADS="1")


def _cli(*args):
    return [sys.executable, "-m", "course_lib.training", *args]


def _without_timing(history):
    return [{k: v for k, v in r.items() if k not in TIMING} for r in history]


def _log_steps(out_dir):
    return [json.loads(line)["step"] for line in (out_dir / "log.jsonl").read_text().splitlines()]


def _checkpoint_steps(out_dir):
    return sorted(int(p.stem[5:]) for p in out_dir.glob("ckpt_*.pt"))


def _kill_at_or_after(command, out_dir, step, stderr_path):
    """Start the run and SIGKILL it as soon as a checkpoint at `step` or later exists."""
    with open(stderr_path, "w") as stderr:
        proc = subprocess.Popen(command, env=_env(), stdout=subprocess.DEVNULL, stderr=stderr)
    deadline = time.monotonic() + 120
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            if out_dir.is_dir() and any(s >= step for s in _checkpoint_steps(out_dir)):
                proc.send_signal(signal.SIGKILL)
                break
            time.sleep(0.002)
    finally:
        if proc.poll() is None and time.monotonic() >= deadline:
            proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL, (
        f"the run was not killed (exit code {proc.returncode}): it finished or failed before a "
        f"checkpoint at step >= {step} appeared\n{stderr_path.read_text()[-2000:]}")


def test_a_run_killed_at_a_random_step_and_resumed_equals_the_uninterrupted_run(shakespeare,
                                                                               tmp_path):
    full_dir, killed_dir = tmp_path / "full", tmp_path / "killed"
    # the uninterrupted run goes on beside the one that gets killed
    with open(tmp_path / "full.err", "w") as full_err:
        full = subprocess.Popen(_cli(*TINY, "--out_dir", str(full_dir)), env=_env(),
                                stdout=subprocess.DEVNULL, stderr=full_err)
    try:
        kill_step = random.Random(SEED).randrange(1, MAX_ITERS // 2)
        _kill_at_or_after(_cli(*TINY, "--out_dir", str(killed_dir)), killed_dir, kill_step,
                          tmp_path / "killed.err")
    finally:
        full.wait(timeout=120)
    assert full.returncode == 0, (tmp_path / "full.err").read_text()[-2000:]

    assert not (killed_dir / "final.pt").exists()
    steps = _checkpoint_steps(killed_dir)
    assert steps == list(range(5, steps[-1] + 1, 5)), f"checkpoints of the killed run: {steps}"
    assert steps[-1] >= kill_step
    for path in killed_dir.glob("*.pt"):              # atomic writes: nothing half-written
        assert load_checkpoint(path)["step"] == int(path.stem[5:]), path.name
    latest = killed_dir / f"ckpt_{steps[-1]:06d}.pt"

    # only --resume: the checkpoint holds the config, out_dir included
    resumed = subprocess.run(_cli("--resume", str(latest)), env=_env(), capture_output=True,
                             text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert f"checkpoint: {killed_dir / 'final.pt'}" in resumed.stdout

    a, b = load_checkpoint(full_dir / "final.pt"), load_checkpoint(killed_dir / "final.pt")
    where = f"killed at step >= {kill_step}, resumed from {latest.name}"
    assert a["step"] == b["step"] == MAX_ITERS
    assert a["model"].keys() == b["model"].keys()
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), f"{name} differs ({where})"
    for index, state in a["optimizer"]["state"].items():
        for key, tensor in state.items():
            assert torch.equal(tensor, b["optimizer"]["state"][index][key]), \
                f"AdamW {key} of parameter {index} differs ({where})"
    assert a["train_losses"] == b["train_losses"], where
    assert _without_timing(a["history"]) == _without_timing(b["history"]), where
    assert _log_steps(killed_dir) == _log_steps(full_dir) == list(range(0, MAX_ITERS + 1, 10)), \
        f"log.jsonl of the resumed run has {_log_steps(killed_dir)} ({where})"
    for path in killed_dir.glob("*.pt"):              # and every file after the resumption
        expected = MAX_ITERS if path.name == "final.pt" else int(path.stem[5:])
        assert load_checkpoint(path)["step"] == expected, path.name
