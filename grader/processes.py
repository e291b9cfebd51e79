"""nbgrader's processes: one submission's `nbgrader autograde` in its own process tree under a hard
wall-clock deadline (a loop that catches BaseException survives nbgrader's interrupt), and the
watch on what the submission started inside it."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

import psutil

from course_lib.grading_env import GRADING_ENV, RECORD_ENV, SEED_ENV, WITHHOLD_ENV
from grader import forkserver, gradebook, sandbox
from grader.course import STAGING, Course
from grader.nbgrader_plugins import GRADER_RUN_ENV


def folder_bytes(folder: Path) -> int:
    """The bytes of the files under `folder` (links not followed; unreadable entries count 0)."""
    total = 0
    for directory, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(directory, name)).st_size
            except OSError:
                pass
    return total


def kill_tree(process: subprocess.Popen | forkserver.Child) -> None:
    kill_tree_pid(process.pid)


def kill_tree_pid(pid: int) -> None:
    """Kill nbgrader and every descendant, including kernels started in their own sessions."""
    try:
        parent = psutil.Process(pid)
        family = parent.children(recursive=True) + [parent]
    except psutil.NoSuchProcess:
        return
    for p in family:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(family, timeout=10)


class ProcessWatch(threading.Thread):
    """Samples the process tree of one grading run, to see what the submission started.

    Only nbgrader starts processes directly below itself: its kernels or, with the sandbox,
    their launchers (bwrap, whose oldest child is bwrap again, the PID namespace's first
    process, whose oldest child is the kernel). A submission's code can start processes only
    below those, and only after its kernel exists, so position in the tree, not a name, tells
    them apart. Anything else was started by the submission: forked workers, a double-forked
    daemon (which the namespace's first process adopts). `left_running` holds those alive in
    the last sample in which a kernel was, that is, still running when the notebook finished;
    the sandbox kills them with the kernel, and the grader reports them. Short-lived helpers
    (matplotlib's `fc-list`, say) are gone by then. Without the sandbox a double-forked daemon
    leaves nbgrader's tree at once, so it is neither seen nor killed."""

    def __init__(self, pid: int, interval: float = 0.2, runtime: Path | None = None, runtime_bytes: int | None = None):
        super().__init__(daemon=True)
        self.pid, self.interval = pid, interval
        self.runtime, self.runtime_bytes = runtime, runtime_bytes
        self.left_running: list[str] = []
        self.runtime_overflow = False  # the runtime folder grew past its bound: the tree was killed
        self._finished = threading.Event()

    def run(self) -> None:
        while not self._finished.wait(self.interval):
            try:
                root = psutil.Process(self.pid)
            except psutil.Error:
                return
            kernels, others = self.classify(root)
            if kernels:
                self.left_running = others
            if self.runtime is not None and self.runtime_bytes is not None and folder_bytes(self.runtime) > self.runtime_bytes:
                self.runtime_overflow = True
                kill_tree_pid(self.pid)
                return

    @staticmethod
    def classify(root: psutil.Process) -> tuple[list[str], list[str]]:
        """(kernels, the submission's processes) below `root` (nbgrader), as "pid N: command"."""
        try:
            tree = root.children(recursive=True)
        except psutil.Error:
            return [], []
        info = {}
        for p in tree:
            try:
                with p.oneshot():
                    info[p.pid] = (p.ppid(), p.create_time(), p.name(), " ".join(p.cmdline()))
            except psutil.Error:  # gone, a zombie, or not ours to read
                continue
        children: dict[int, list[tuple[float, int]]] = defaultdict(list)
        for pid, (ppid, created, _, _) in info.items():
            children[ppid].append((created, pid))
        machinery, kernels = set(), []
        for _, pid in children[root.pid]:
            machinery.add(pid)
            while pid in info and info[pid][2] == "bwrap":  # a launcher: follow the oldest child
                pid = min(children[pid])[1] if children[pid] else None
                machinery.add(pid)
            if pid in info:
                kernels.append(pid)

        def describe(pid: int) -> str:
            command = info[pid][3]
            return f"pid {pid}: " + ("a fork of the kernel" if "ipykernel_launcher" in command
                                     else " ".join(command.split())[:80])

        return ([f"pid {pid}: the kernel" for pid in kernels],
                [describe(pid) for pid in info if pid not in machinery])

    def stop(self) -> None:
        self._finished.set()
        self.join()


def nbgrader_env() -> dict[str, str]:
    env = dict(os.environ)
    env[GRADER_RUN_ENV] = "1"  # nbgrader's autograde refuses without it (nbgrader_plugins.RequireCourseGrader)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"  # nbgrader calls `alembic`
    return env


def start_nbgrader(argv: list[str], root: Path, env: dict[str, str], log_file) -> forkserver.Child | subprocess.Popen:
    """`nbgrader ARGV` started in `root` in a session of its own, its output to `log_file` (a named
    file): forked from grader/forkserver.py where it can be (no import cost), else a process."""
    if forkserver.enabled():
        with contextlib.suppress(forkserver.ServerGone, OSError):  # else a plain process
            return forkserver.spawn(argv, str(root), env, log_file.name)
    return subprocess.Popen([sys.executable, "-m", "nbgrader", *argv], cwd=root, env=env, stdout=log_file,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def nbgrader(root: Path, *args: str, timeout: float | None = None) -> subprocess.CompletedProcess:
    """`nbgrader ARGS` in `root`; its output (stdout and stderr) in `stdout`."""
    argv = [*args, "--log-level=WARN"]
    with tempfile.NamedTemporaryFile(mode="w+", prefix="nbgrader-log-") as log:
        process = start_nbgrader(argv, root, nbgrader_env(), log)
        try:
            code = process.wait(timeout)
        except subprocess.TimeoutExpired:
            kill_tree(process)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(60)
            raise
        log.seek(0)
        return subprocess.CompletedProcess([sys.executable, "-m", "nbgrader", *argv], code, log.read(), "")


def run_autograde(root: Path, lesson: str, student: str, deadline: float, cell_timeout: float | None,
                  use_sandbox: bool, runtime: Path, db: Path | None = None, seed: int = 0) -> tuple[str, float, str, list[str]]:
    """Run nbgrader autograde on one staged submission; the kernel records its checks in
    <runtime>/checks (`runtime` is a fresh folder from sandbox.short_runtime_dir()). Returns the
    status, the seconds, nbgrader's log and the processes the submission left running."""
    args = ["autograde", lesson, "--student", student, "--force",
            f"--CourseDirectory.submitted_directory={STAGING}"]
    if cell_timeout is not None:
        args.append(f"--Execute.timeout={int(cell_timeout)}")
    if db is not None:  # this submission's own copy of the gradebook (grader/gradebook.py)
        args.append(f"--CourseDirectory.db_url={gradebook.url(db)}")
    env = nbgrader_env()
    env[RECORD_ENV] = str(runtime / "checks")  # the checks' records (grader/verdicts.py)
    env[WITHHOLD_ENV] = "1"  # no expected value is computed in the submission's kernel
    env[SEED_ENV] = str(seed)  # the hidden inputs of this batch
    env[GRADING_ENV] = "1"  # the sandbox sets it too; this is for --no-sandbox
    if use_sandbox:
        kernels = sandbox.write_kernel_spec(Course(root).grading / "jupyter", course=root)
        env["JUPYTER_PATH"] = os.pathsep.join(p for p in (str(kernels), env.get("JUPYTER_PATH")) if p)
        env["TMPDIR"] = str(runtime)  # the connection file goes there, and only there is writable
        args += sandbox.nbgrader_options(runtime)
    start = time.perf_counter()
    # nbgrader's output goes to a file: a process the kernel left behind cannot hold a pipe open
    with tempfile.NamedTemporaryFile(mode="w+", prefix="nbgrader-log-") as log_file:
        process = start_nbgrader(args, root, env, log_file)
        watch = ProcessWatch(process.pid, runtime=runtime, runtime_bytes=sandbox.limit("RUNTIME_BYTES"))
        watch.start()
        try:
            process.wait(timeout=deadline)
            status = "graded"
        except subprocess.TimeoutExpired:
            status = "did not finish"
        watch.stop()
        kill_tree(process)  # the kernel too, and whatever it started
        try:
            process.wait(timeout=60)  # reaped: its exit status is known
        except subprocess.TimeoutExpired:
            forkserver.discard()
        log_file.seek(0)
        log = log_file.read()
    if watch.runtime_overflow:
        status = "wrote too much"
    elif status == "graded" and (process.returncode != 0 or "There was an error processing" in log):
        status = "autograde error"
    return status, time.perf_counter() - start, log, watch.left_running
