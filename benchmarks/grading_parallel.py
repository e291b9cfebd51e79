"""Measured (issue 29): grading a class serially, with --jobs, and in shards merged.

Twelve submissions of lesson 00 (half the solution, half the untouched student notebook) are
graded three ways, each in a fresh copy of one course folder, through the command an instructor
runs (`python -m grader ...`, sandboxed where bubblewrap works):

  serial      python -m grader autograde 00_setup --jobs 1
  --jobs N    python -m grader autograde 00_setup --jobs N
  shards      python -m grader autograde 00_setup --shard I/N  for I = 1..N, all at once (as a
              batch system would start them), then python -m grader merge

Each clock covers the whole command, its fixed costs included (the release check, the sandbox's
pre-check, reading the stored reference). The scores of the three must be equal (asserted).
Prints the wall times, the ratios to serial (>= 1.7x on 2 cores is the goal) and the machine's
busy CPU time during each run (all processes, from /proc/stat: a killed kernel is reaped by no
one we wait for, so our children's own accounting misses it), whose ratio to the wall time is how
many cores the run kept busy on average. Run it on an otherwise idle machine.

Two ceilings on the ratio are printed with it. The machine's: a fixed single-thread job (torch's
matmuls and plain Python, as a kernel runs them) timed alone and as N copies at once, so N x alone /
together is the most any N-way parallel run can gain here. And the serial run's: a ratio is at
most the cores / the cores the serial run already kept busy (the grader, nbgrader and the kernel
overlap even at --jobs 1), unless the parallel run does less work in all than the serial one.

    python benchmarks/grading_parallel.py [--jobs 2] [--submissions 12]
"""

from __future__ import annotations

import argparse
import csv
import datetime
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LESSON = "00_setup"
NAME = f"{LESSON}.ipynb"


def make_course(folder: Path, submissions: int) -> Path:
    folder.mkdir(parents=True)
    shutil.copy(ROOT / "nbgrader_config.py", folder)
    (folder / "course_lib").symlink_to(ROOT / "course_lib")
    shutil.copytree(ROOT / "solutions" / LESSON, folder / "solutions" / LESSON)
    shutil.copytree(ROOT / "reference-checks" / LESSON, folder / "reference-checks" / LESSON)
    shutil.copytree(ROOT / "notebooks" / LESSON, folder / "notebooks" / LESSON)
    for i in range(submissions):
        source = ROOT / ("solutions" if i % 2 == 0 else "notebooks") / LESSON / NAME
        target = folder / "submitted" / f"student-{i:02d}" / LESSON
        target.mkdir(parents=True)
        shutil.copy(source, target / NAME)
    return folder


def grader(*args: str, root: Path) -> subprocess.Popen:
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    flags = [] if shutil.which("bwrap") else ["--no-sandbox"]
    return subprocess.Popen([sys.executable, "-m", "grader", *args, "--root", str(root), *flags],
                            cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(*processes: subprocess.Popen) -> None:
    for process in processes:
        out, _ = process.communicate()
        if process.returncode != 0:
            raise SystemExit(f"{' '.join(process.args[2:5])} failed:\n{out}")


def cpu_seconds() -> float:
    """Busy CPU seconds of the whole machine so far (every core; idle and I/O wait excluded)."""
    import psutil

    times = psutil.cpu_times()
    return sum(times) - times.idle - getattr(times, "iowait", 0.0)


CEILING_JOB = """
import torch
torch.set_num_threads(1)
x = torch.randn(192, 192)
sum(range(3_000_000))
for _ in range(4000):
    x = torch.tanh(x @ x)
"""


def machine_ceiling(n: int) -> tuple[float, float]:
    """Seconds of CEILING_JOB alone, and of n copies started at once (until the last ends)."""
    def run(copies: int) -> float:
        start = time.perf_counter()
        finish(*[subprocess.Popen([sys.executable, "-c", CEILING_JOB], stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True) for _ in range(copies)])
        return time.perf_counter() - start

    run(1)  # warm the page cache
    return min(run(1) for _ in range(2)), min(run(n) for _ in range(2))


def scores(root: Path) -> dict[str, tuple[str, str]]:
    with open(root / "autograded" / "autograde-report.csv", newline="") as f:
        return {r["student"]: (r["status"], r["autograded_score"]) for r in csv.DictReader(f)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--submissions", type=int, default=12)
    args = parser.parse_args()
    n = args.jobs
    alone, together = machine_ceiling(n)
    print(f"the machine: one single-thread job {alone:.1f} s alone, {n} at once {together:.1f} s: "
          f"at most {n * alone / together:.2f}x from {n} jobs")
    print(f"{datetime.date.today()} {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; "
          f"{args.submissions} submissions of {LESSON}, {'sandboxed' if shutil.which('bwrap') else 'NOT sandboxed'}")
    results = {}
    with tempfile.TemporaryDirectory(prefix="grading-parallel-") as tmp:
        runs = {
            "serial (--jobs 1)": ["autograde", LESSON, "--jobs", "1", "--no-progress"],
            f"--jobs {n}": ["autograde", LESSON, "--jobs", str(n), "--no-progress"],
        }
        for label, command in runs.items():
            root = make_course(Path(tmp) / label.split()[0].strip("-"), args.submissions)
            start, cpu = time.perf_counter(), cpu_seconds()
            finish(grader(*command, root=root))
            results[label] = (time.perf_counter() - start, scores(root), cpu_seconds() - cpu)
            print(f"{label}: {results[label][0]:.1f} s", flush=True)
        root = make_course(Path(tmp) / "shards", args.submissions)
        start, cpu = time.perf_counter(), cpu_seconds()
        finish(*[grader("autograde", LESSON, "--shard", f"{i}/{n}", "--jobs", "1", "--no-progress", root=root)
                 for i in range(1, n + 1)])
        finish(grader("merge", root=root))
        label = f"{n} shards at once + merge"
        results[label] = (time.perf_counter() - start, scores(root), cpu_seconds() - cpu)
        print(f"{label}: {results[label][0]:.1f} s", flush=True)

    serial_seconds, serial_scores, _ = results["serial (--jobs 1)"]
    for label, (_, got, _) in results.items():
        assert got == serial_scores, f"{label} scored differently from the serial run: {got} vs {serial_scores}"
    print(f"\nscores equal in all three runs ({sum(1 for s in serial_scores.values() if s[1] == '8.0')} full marks)")
    print("| run | wall (s) | s / submission | vs serial | CPU (s) | cores busy |")
    print("|---|---:|---:|---:|---:|---:|")
    for label, (seconds, _, cpu) in results.items():
        print(f"| {label} | {seconds:.1f} | {seconds / args.submissions:.1f} | {serial_seconds / seconds:.2f}× "
              f"| {cpu:.0f} | {cpu / seconds:.2f} |")
    busy = results["serial (--jobs 1)"][2] / serial_seconds
    cores = min(n, os.cpu_count() or n)
    print(f"\nceilings on --jobs {n} / serial: the machine's {n * alone / together:.2f}x; the serial run's "
          f"{cores} cores / {busy:.2f} busy = {cores / busy:.2f}x; both together, roughly, "
          f"{cores / busy * alone / together:.2f}x (each of {n} jobs runs {together / alone:.2f}x slower)")


if __name__ == "__main__":
    main()
