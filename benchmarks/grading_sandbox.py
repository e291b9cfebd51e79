"""Measured (grading): the time to autograde one submission with and without the bubblewrap sandbox.

A temporary course directory holds one lesson, released, with the solution submitted as one
student. Rounds alternate `tools/autograde.py` with the sandbox and without it (the same
answer policy and staging in both), and the medians are compared. The target is at most 3 s
more per submission with the sandbox.

    python benchmarks/grading_sandbox.py                 # lesson 00, 5 rounds
    python benchmarks/grading_sandbox.py --lesson 03_attention --rounds 3
"""

from __future__ import annotations

import argparse
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tools import autograde as ag  # noqa: E402
from tools import sandbox  # noqa: E402


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
        shutil.copytree(ROOT / "solutions" / args.lesson, course / "solutions" / args.lesson)
        if ag.nbgrader(course, "generate_assignment", args.lesson, "--force").returncode != 0:
            sys.exit("generate_assignment failed")
        name = f"{args.lesson}.ipynb"
        (course / "submitted" / "student" / args.lesson).mkdir(parents=True)
        shutil.copy(course / "solutions" / args.lesson / name, course / "submitted" / "student" / args.lesson / name)
        seconds: dict[bool, list[float]] = {True: [], False: []}
        for _ in range(args.rounds):
            for use_sandbox in (True, False):
                start = time.perf_counter()
                (result,) = ag.autograde(course, [args.lesson], students=["student"], use_sandbox=use_sandbox)
                seconds[use_sandbox].append(time.perf_counter() - start)
                if result.status != "graded" or result.auto_score != result.auto_max:
                    sys.exit(f"the solution was not graded in full: {result}")
    with_sandbox, without = statistics.median(seconds[True]), statistics.median(seconds[False])
    print(f"machine: {platform.processor() or platform.machine()}, python {platform.python_version()}")
    print(f"{args.lesson}, {args.rounds} rounds, median seconds per submission (autograde row included):")
    print(f"  sandboxed   {with_sandbox:6.2f} s   {[round(s, 2) for s in seconds[True]]}")
    print(f"  unsandboxed {without:6.2f} s   {[round(s, 2) for s in seconds[False]]}")
    print(f"  difference {with_sandbox - without:+.2f} s (target: at most +3 s); ratio {with_sandbox / without:.2f}x")


if __name__ == "__main__":
    main()
