"""Data parallel training: `torchrun --nproc_per_node=2 -m course_lib.training` on gloo (CPU)
takes the same steps as one process with the whole batch, and only rank 0 writes files.

Each rank draws the same global batch and keeps its half; DDP averages the two halves'
gradients, which is the gradient of the whole batch's mean loss. Gradient accumulation is on
(2 micro-steps), so the no_sync micro-step is exercised too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from course_lib.training import load_checkpoint

TINY = ["--config", "shakespeare_char_cpu", "--n_layer", "1", "--n_embd", "32", "--n_head", "2",
        "--block_size", "32", "--batch_size", "8", "--grad_accum_steps", "2", "--max_iters", "20",
        "--eval_interval", "10", "--eval_iters", "2", "--checkpoint_interval", "0",
        "--dropout", "0.0", "--progress", "false", "--plot", "false"]


def _env():
    return dict(os.environ, OMP_NUM_THREADS="1")


def test_two_gloo_processes_take_the_same_steps_as_one_process_with_the_whole_batch(shakespeare,
                                                                                   tmp_path):
    if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
        pytest.skip("this torch build has no torch.distributed with the gloo backend")
    single, ddp = tmp_path / "single", tmp_path / "ddp"
    with open(tmp_path / "single.err", "w") as err:     # the two runs go on side by side
        one = subprocess.Popen([sys.executable, "-m", "course_lib.training", *TINY,
                                "--out_dir", str(single)], env=_env(),
                               stdout=subprocess.DEVNULL, stderr=err)
    try:
        two = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                              "--nproc_per_node=2", "-m", "course_lib.training", *TINY,
                              "--out_dir", str(ddp)], env=_env(), capture_output=True,
                             text=True, timeout=180)
    finally:
        one.wait(timeout=120)
    assert one.returncode == 0, (tmp_path / "single.err").read_text()[-2000:]
    assert two.returncode == 0, two.stderr[-3000:]

    a, b = load_checkpoint(single / "final.pt"), load_checkpoint(ddp / "final.pt")
    assert a["step"] == b["step"] == 20
    # The all-reduce adds the two halves' gradients in another order than one backward pass
    # over the whole batch does: equal up to float32 rounding (~1e-7 relative), which 20 AdamW
    # steps amplify a little (Adam divides by sqrt(v), small for rarely-seen characters' rows).
    assert a["model"].keys() == b["model"].keys()
    for name, tensor in a["model"].items():
        torch.testing.assert_close(b["model"][name], tensor, atol=1e-5, rtol=1e-4,
                                   msg=lambda m, name=name: f"{name}: {m}")
    # the mean of the ranks' losses is the whole batch's loss, step by step
    assert b["train_losses"] == pytest.approx(a["train_losses"], abs=1e-5)
    assert [r["step"] for r in b["history"]] == [r["step"] for r in a["history"]] == [0, 10, 20]
    for ra, rb in zip(a["history"], b["history"], strict=True):
        assert abs(ra["val_loss"] - rb["val_loss"]) < 1e-4, (ra, rb)
        assert ra["tokens"] == rb["tokens"] == ra["step"] * 8 * 2 * 32, "global batch tokens"

    # rank 0 alone writes: one checkpoint, one log with one line per evaluation
    assert sorted(p.name for p in ddp.iterdir()) == ["final.pt", "log.jsonl"]
    logged = [json.loads(line) for line in (ddp / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in logged] == [0, 10, 20], "log.jsonl lines duplicated by rank 1?"
    assert logged == b["history"]
    # the checkpoint keeps each rank's RNG state (dropout differs across ranks)
    assert len(b["rng"]) == 2
    assert not torch.equal(b["rng"][0]["torch"], b["rng"][1]["torch"])
