"""Run a lesson's solution as the reference and as a graded submission, and compare: every test
cell must pass the grader's replay, and the graded run must compute no expected value.

    python tools/check_observing.py 00_setup [--seed N] [--sandbox]

Prints one line per test cell that fails, and exits non-zero if any does.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from course_lib.grading_env import SEED_ENV, WITHHOLD_ENV  # noqa: E402
from grader import reference, verdicts  # noqa: E402
from grader.records import read_records  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def check(lesson: str, seed: int = 0, use_sandbox: bool = False) -> list[str]:
    solution = ROOT / "solutions" / lesson / f"{lesson}.ipynb"
    problems = []
    with tempfile.TemporaryDirectory() as folder:
        runs = {}
        for name, env in (("reference", {SEED_ENV: str(seed)}), ("graded", {SEED_ENV: str(seed), WITHHOLD_ENV: "1"})):
            errors = reference.run_reference(solution, Path(folder) / name, use_sandbox=use_sandbox, env=env)
            problems += [f"{name} run: {e}" for e in errors]
            runs[name] = read_records(Path(folder) / name / "checks")
    for cell, (failure, notes) in verdicts.compare(runs["reference"], runs["graded"]).items():
        problems += [f"graded run: {cell}: {note}" for note in notes]  # expected values in the kernel, say
        if failure is not None:
            problems.append(f"{cell}: {failure[:300]}")
    return problems


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("lessons", nargs="+")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sandbox", action="store_true")
    args = parser.parse_args(argv)
    failed = False
    for lesson in args.lessons:
        problems = check(lesson, args.seed, args.sandbox)
        print(f"{lesson}: " + ("every test cell passes the replay with no expected value in the kernel" if not problems
                               else f"{len(problems)} problem(s)"), flush=True)
        for problem in problems:
            print(f"  {problem}")
        failed |= bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
