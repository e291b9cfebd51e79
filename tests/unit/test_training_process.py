"""course_lib.training as real processes: killed and resumed, and data-parallel under torchrun."""

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from course_lib.training import load_checkpoint

TINY = ["--config", "shakespeare_char_cpu", "--n_layer", "1", "--n_embd", "32", "--n_head", "2",
        "--block_size", "32", "--batch_size", "8", "--max_iters", "60", "--eval_interval", "10",
        "--eval_iters", "2", "--checkpoint_interval", "5", "--progress", "false", "--plot", "false"]
TIMING = ("elapsed", "tokens_per_second")


def _env():
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.setdefault("COURSE_DATA_DIR", str(Path(__file__).resolve().parents[3] / "shared" / "data"))
    return env


def _cli(*args):
    return [sys.executable, "-m", "course_lib.training", *args]


def _without_timing(history):
    return [{k: v for k, v in r.items() if k not in TIMING} for r in history]


def test_a_run_killed_at_a_random_step_and_resumed_equals_the_uninterrupted_run(tmp_path):
    config = [*TINY, "--dropout", "0.1"]
    full_dir, killed_dir = tmp_path / "full", tmp_path / "killed"
    subprocess.run(_cli(*config, "--out_dir", str(full_dir)), env=_env(), check=True,
                   capture_output=True, timeout=120)

    kill_after = random.Random(0).randrange(10, 50, 5)      # a checkpoint step in the middle
    proc = subprocess.Popen(_cli(*config, "--out_dir", str(killed_dir)), env=_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    target = killed_dir / f"ckpt_{kill_after:06d}.pt"
    deadline = time.monotonic() + 120
    while not target.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (killed_dir / "final.pt").exists(), "the run finished before it could be killed"
    checkpoints = sorted(killed_dir.glob("ckpt_*.pt"))
    for path in checkpoints:                                 # atomic writes: none half-written
        load_checkpoint(path)
    latest = checkpoints[-1]
    resumed = subprocess.run(_cli("--resume", str(latest), "--out_dir", str(killed_dir)),
                             env=_env(), capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr[-2000:]

    a, b = load_checkpoint(full_dir / "final.pt"), load_checkpoint(killed_dir / "final.pt")
    assert a["step"] == b["step"] == 60
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), f"{name} differs after kill at step " \
            f"{latest.stem} and resume"
    assert a["train_losses"] == b["train_losses"]
    assert _without_timing(a["history"]) == _without_timing(b["history"])
    log_steps = [json.loads(line)["step"] for line in (killed_dir / "log.jsonl").read_text().splitlines()]
    assert log_steps == list(range(0, 61, 10)), f"log.jsonl of the resumed run: {log_steps}"


def test_two_gloo_processes_take_the_same_steps_as_one_process_with_the_whole_batch(tmp_path):
    if not torch.distributed.is_available():
        pytest.skip("this torch build has no torch.distributed")
    config = [*TINY, "--dropout", "0.0", "--max_iters", "20", "--checkpoint_interval", "0"]
    single, ddp = tmp_path / "single", tmp_path / "ddp"
    subprocess.run(_cli(*config, "--out_dir", str(single)), env=_env(), check=True,
                   capture_output=True, timeout=120)
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                          "--nproc_per_node=2", "-m", "course_lib.training", *config,
                          "--out_dir", str(ddp)], env=_env(), capture_output=True, text=True,
                         timeout=180)
    assert run.returncode == 0, run.stderr[-3000:]
    a, b = load_checkpoint(single / "final.pt"), load_checkpoint(ddp / "final.pt")
    # The all-reduce adds the two halves' gradients in another order than one backward pass
    # over the whole batch: equal up to float32 rounding, amplified a little by 20 AdamW steps.
    for name, tensor in a["model"].items():
        torch.testing.assert_close(b["model"][name], tensor, atol=1e-5, rtol=1e-4,
                                   msg=lambda m, name=name: f"{name}: {m}")
    for ra, rb in zip(a["history"], b["history"], strict=True):
        assert abs(ra["val_loss"] - rb["val_loss"]) < 1e-4, (ra, rb)
    lines = (ddp / "log.jsonl").read_text().splitlines()
    assert len(lines) == len(a["history"]), "only rank 0 writes the log"
    assert sorted(p.name for p in ddp.glob("*.pt")) == ["final.pt"]
