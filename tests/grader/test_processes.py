"""grader/processes.py: the hard kill of a grading run's whole tree, and the watch on what it started."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil

from grader import processes


def test_kill_tree_reaches_children_in_their_own_session():
    """Kernels run in a session of their own; killing nbgrader's group alone would miss them."""
    script = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], start_new_session=True)\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    child_pid = int(parent.stdout.readline())
    processes.kill_tree(parent)
    parent.wait(timeout=10)
    deadline = time.monotonic() + 10
    while psutil.pid_exists(child_pid) and psutil.Process(child_pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the grandchild in its own session survived"
        time.sleep(0.05)
    assert parent.returncode is not None


def test_process_watch_sees_what_the_kernel_left_running_but_not_the_kernel():
    """A stand-in for nbgrader starts a stand-in kernel, which forks a child that keeps running."""
    kernel = ("import os, sys, time\n"
              "child = os.fork()\n"
              "if child == 0:\n"
              "    time.sleep(60)\n"
              "print(os.getpid(), child, flush=True)\n"
              "time.sleep(60)\n")
    nbgrader = ("import subprocess, sys\n"
                f"subprocess.run([sys.executable, '-c', {kernel!r}, 'ipykernel_launcher'])\n")
    parent = subprocess.Popen([sys.executable, "-c", nbgrader], stdout=subprocess.PIPE, text=True)
    try:
        kernel_pid, child_pid = map(int, parent.stdout.readline().split())
        watch = processes.ProcessWatch(parent.pid, interval=0.05)
        watch.start()
        time.sleep(0.5)
        kernels, others = processes.ProcessWatch.classify(psutil.Process(parent.pid))
        watch.stop()
    finally:
        processes.kill_tree(parent)
        parent.wait(timeout=10)
    assert kernels == [f"pid {kernel_pid}: the kernel"], f"the kernel is pid {kernel_pid}, got {kernels}"
    assert others == [f"pid {child_pid}: a fork of the kernel"], f"the forked child is pid {child_pid}, got {others}"
    assert [o.split(":")[0] for o in watch.left_running] == [f"pid {child_pid}"], \
        f"the watch should report the forked child, pid {child_pid}, as left running: {watch.left_running}"
