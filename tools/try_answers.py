"""Try answers against a lesson's tests quickly, in one kernel, without grading them.

    python tools/try_answers.py 09_decoding                 # every wrong answer of the lesson
    python tools/try_answers.py 09_decoding top_p_answer    # one exercise's

The solution notebook runs once (with COURSE_GRADING=1); then, for each answer to try, its
answer cell is re-run with that answer and the exercise's test cells (visible and hidden) are
re-run after it; the right answer is restored before the next one. The table says which test
cells failed and how. This is for writing wrong answers and tests: the round trip
(tests/grading/test_round_trip.py) grades them for real.
"""

from __future__ import annotations

import copy
import os
import sys
import textwrap
from pathlib import Path

import nbformat

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from nbclient import NotebookClient  # noqa: E402

from course_lib.grading_env import GRADING_ENV  # noqa: E402
from grader.cells import is_answer_cell, is_test_cell  # noqa: E402
from grader.cells import nbgrader_meta as meta  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SHARED_DATA = ROOT.parent / "shared" / "data"


def _error(cell) -> str | None:
    for out in cell.outputs:
        if out.output_type == "error":
            return f"{out.ename}: {out.evalue}"
        if out.output_type == "stream" and "Unexpected exception formatting exception" in out.text:
            return "an exception whose traceback IPython could not format (the grader's replay fails it)"
    return None


def try_answers(lesson: str, answers: dict[str, list[str]]) -> list[tuple]:
    """[(exercise, index, {test cell: error or None})] for each answer in `answers`."""
    os.environ.setdefault("COURSE_DATA_DIR", str(SHARED_DATA))
    os.environ[GRADING_ENV] = "1"
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    path = ROOT / "solutions" / lesson / f"{lesson}.ipynb"
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, kernel_name="llm-course", timeout=600, allow_errors=True,
                            resources={"metadata": {"path": str(path.parent)}})
    rows = []
    with client.setup_kernel():
        for index, cell in enumerate(nb.cells):
            if cell.cell_type == "code":
                client.execute_cell(cell, index)
                if is_test_cell(cell) and _error(cell):
                    raise RuntimeError(f"the solution fails {meta(cell)['grade_id']}: {_error(cell)}")
        where = {meta(c)["grade_id"]: i for i, c in enumerate(nb.cells) if is_answer_cell(c) or is_test_cell(c)}
        from tests.grading.submissions import exercise_tests

        tests_of = exercise_tests(nb)
        for exercise, sources in answers.items():
            if exercise not in tests_of:
                raise KeyError(f"{lesson} has no exercise {exercise!r}: {sorted(tests_of)}")
            right = nb.cells[where[exercise]]
            for k, source in enumerate(sources):
                trial = copy.deepcopy(right)
                trial.source = textwrap.dedent(source).strip()
                client.execute_cell(trial, where[exercise])
                failures = {}
                for test in tests_of[exercise]:
                    cell = copy.deepcopy(nb.cells[where[test]])
                    client.execute_cell(cell, where[test])
                    failures[test] = _error(cell)
                rows.append((exercise, k, failures))
                client.execute_cell(copy.deepcopy(right), where[exercise])
    return rows


def main(argv: list[str]) -> int:
    from tests.grading.submissions import RIGHT_VARIANTS, WRONG_ANSWERS

    lesson, only = argv[0], argv[1:]
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    wrong = {e: s for e, s in WRONG_ANSWERS.get(lesson, {}).items() if not only or e in only}
    right = {e: s for e, s in RIGHT_VARIANTS.get(lesson, {}).items() if not only or e in only}
    answers = {e: list(wrong.get(e, [])) + ([right[e]] if e in right else []) for e in {**wrong, **right}}
    bad = 0
    for exercise, k, failures in try_answers(lesson, answers):
        label = "wrong" if k < len(wrong.get(exercise, [])) else "right"
        failed = {t: e for t, e in failures.items() if e}
        ok = bool(failed) if label == "wrong" else not failed
        bad += not ok
        print(f"{'ok ' if ok else 'BAD'} {label} {exercise}[{k}]: "
              + ("; ".join(f"{t}: {e[:160]}" for t, e in failed.items()) or "passes every test"))
    print(f"{bad} answer(s) graded the wrong way" if bad else "every answer graded the right way")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
