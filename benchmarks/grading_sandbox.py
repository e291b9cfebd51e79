"""Measured (grading): the time to autograde one submission, with every protection and without.

A temporary course directory holds one lesson, released, with the solution submitted as one
student. Rounds alternate three graders on it:

- `grader/autograde.py` as `make autograde` runs it: the pre-check (once per batch; here every
  batch is one submission), answer policy, staging, the bubblewrap sandbox with its memory
  cgroup where there is one, the replay of the recorded checks against the instructor's run,
  and the sanitising of the graded notebook;
- the same without the sandbox;
- plain `nbgrader autograde` (none of the above): the peer.

The medians are compared; the target is at most 3 s more per submission than the peer. The
instructor's run of the solution (once per lesson, then cached) is timed on its own.

    python benchmarks/grading_sandbox.py                 # lesson 00, 5 rounds
    python benchmarks/grading_sandbox.py --lesson 03_attention --rounds 3
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from grader import autograde as ag  # noqa: E402
from grader import forkserver, precheck, processes, reference, sandbox  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lesson", default="00_setup")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if sandbox.bwrap_path() is None:
        sys.exit(ag.NO_SANDBOX)
    with tempfile.TemporaryDirectory() as tmp:
        course = Path(tmp)
        shutil.copy(ROOT / "nbgrader_config.py", course)
        (course / "course_lib").symlink_to(ROOT / "course_lib")
        shutil.copytree(ROOT / "solutions" / args.lesson, course / "solutions" / args.lesson)
        if processes.nbgrader(course, "generate_assignment", args.lesson, "--force").returncode != 0:
            sys.exit("generate_assignment failed")
        name = f"{args.lesson}.ipynb"
        (course / "submitted" / "student" / args.lesson).mkdir(parents=True)
        shutil.copy(course / "solutions" / args.lesson / name, course / "submitted" / "student" / args.lesson / name)
        graders = {
            # each round starts its own fork server (grader/forkserver.py), as each command does
            "autograde.py (sandbox, policy, replay)": lambda: (forkserver.discard(), _graded(
                ag.autograde(course, [args.lesson], students=["student"]))),
            "autograde.py without the sandbox": lambda: (forkserver.discard(), _graded(
                ag.autograde(course, [args.lesson], students=["student"], use_sandbox=False))),
            # a process of its own, as an instructor runs it (processes.nbgrader would fork it)
            "plain nbgrader autograde": lambda: subprocess.run(
                [sys.executable, "-m", "nbgrader", "autograde", args.lesson, "--student", "student", "--force",
                 "--log-level=WARN"], cwd=course, env=processes.nbgrader_env(), capture_output=True, check=False),
        }
        start = time.perf_counter()
        reference.reference_records(course, args.lesson)
        reference_seconds = time.perf_counter() - start
        start = time.perf_counter()
        precheck.check(course)
        precheck_seconds = time.perf_counter() - start
        seconds: dict[str, list[float]] = {name: [] for name in graders}
        for _ in range(args.rounds):
            for name, grade in graders.items():
                start = time.perf_counter()
                grade()
                seconds[name].append(time.perf_counter() - start)
    medians = {name: statistics.median(values) for name, values in seconds.items()}
    peer = medians["plain nbgrader autograde"]
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, python {platform.python_version()}")
    print(f"{args.lesson}: the instructor's reference run took {reference_seconds:.2f} s (once per lesson, then cached)")
    print(f"the pre-check (a sandboxed `import course_lib`, once per batch, included below) took {precheck_seconds:.2f} s")
    print(f"{args.rounds} rounds of one submission each, median seconds:")
    for name, median in medians.items():
        print(f"  {name:<42} {median:6.2f} s  {median - peer:+6.2f} s vs plain  {[round(v, 2) for v in seconds[name]]}")
    print("target: at most +3 s per submission")


def _graded(results) -> None:
    (result,) = results
    if result.status != "graded" or result.auto_score != result.auto_max or result.flags:
        sys.exit(f"the solution was not graded in full, without flags: {result}")


if __name__ == "__main__":
    main()
