"""Fail loudly before grading: can a sandboxed kernel import the course's own course_lib?

An environment slightly off (a venv whose editable install points at another checkout, a
symlinked .venv, a missing package) makes every kernel fail the same way, and every submission
would score 0 with nothing flagged. So before a batch, one sandboxed interpreter, with exactly
the binds and environment a grading kernel gets, imports `course_lib` and the kernel's own
modules; if that fails, or finds a course_lib other than the course's, grading stops with one
message and grades nothing.

    python -m grader check [--root DIR] [--no-sandbox]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from grader import sandbox
from grader.course import Course

PROBE = ("import json, os, course_lib, course_lib.grading, ipykernel, torch; "
         "print(json.dumps({'course_lib': os.path.dirname(os.path.realpath(course_lib.__file__))}), flush=True); "
         "from course_lib.data import CORPORA, data_path; "
         "[data_path(name, download=False) for name in CORPORA]; print(json.dumps({'data': 'ok'}))")


class GradingSetupError(RuntimeError):
    """The grading environment cannot grade this course; nothing was graded."""


def check(root: Path, use_sandbox: bool = True) -> str:
    """Import course_lib as a grading kernel would; returns the folder it came from, or raises
    GradingSetupError with the cause."""
    root = root.resolve()
    if not (Course(root).course_lib / "__init__.py").is_file():
        raise GradingSetupError(f"{root} has no course_lib/: point the grader at the course directory (the one that "
                                "holds nbgrader_config.py, course_lib/ and solutions/). Nothing was graded.")
    if use_sandbox:
        done = sandbox.probe(root, PROBE)
        expected = sandbox.COURSE_LIB_MOUNT
        where = "in the grading sandbox"
    else:
        done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, check=False,
                              cwd=root, env={**os.environ, "PYTHONPATH": str(root)})
        expected = Course(root).course_lib.resolve()
        where = "with this interpreter"
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    imported = [line["course_lib"] for line in lines if "course_lib" in line]
    if not imported:
        cause = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        raise GradingSetupError(
            f"a grading kernel cannot start {where}: `import course_lib` failed with: {cause[:300]}. "
            f"Interpreter: {sys.executable} (sys.prefix {sys.prefix}). Nothing was graded. Run `make setup` "
            "in this course directory, or point the grader at a venv that has this course's dependencies.")
    found = Path(imported[0])
    if found != expected:
        raise GradingSetupError(f"a grading kernel {where} imports course_lib from {found}, not from this course "
                                f"({root / 'course_lib'}). Nothing was graded.")
    if not any(line.get("data") == "ok" for line in lines):
        cause = " ".join((done.stderr.strip().splitlines() or ["no data set found"])[-3:])
        folder = sandbox.data_dir(root) if use_sandbox else "the places course_lib.data looks"
        raise GradingSetupError(
            f"a grading kernel {where} cannot read the data sets the lessons load (it has no network): {cause[:400]}. "
            f"It reads them from {folder}. Put the files in {Course(root).root / 'data'} (`python -c \"from "
            "course_lib.data import data_path; data_path()\"` downloads them into your cache, which works too) or set "
            "COURSE_DATA_DIR to their folder. Nothing was graded.")
    return str(found)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="course directory (default: here)")
    parser.add_argument("--no-sandbox", action="store_true")
    args = parser.parse_args(argv)
    if not args.no_sandbox and sandbox.bwrap_path() is None:
        print("bubblewrap (bwrap) is missing or cannot create namespaces here (apt install bubblewrap)")
        return 1
    try:
        found = check(args.root, use_sandbox=not args.no_sandbox)
    except GradingSetupError as error:
        print(f"grader check FAILED: {error}")
        return 1
    print(f"grader check: a grading kernel imports the course's course_lib ({found} inside the sandbox)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
