"""Static checks on every lesson: what nbval compares, and what the student version may contain.

nbval itself runs in `make test` (`pytest solutions --nbval`); these checks make sure that run
means something: every cell has stored outputs, most cells are compared, nothing leaks.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grader import reference
from grader.cells import (
    cell_source,
    is_answer_cell,
    is_hidden_test_cell,
    is_test_cell,
    is_written_answer,
    lesson_names,
    nbgrader_meta,
)

ROOT = Path(__file__).resolve().parents[2]
LESSONS = lesson_names(ROOT)
MAX_IGNORED_FRACTION = 0.34


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text())["cells"]


@pytest.fixture(params=LESSONS)
def lesson(request) -> str:
    return request.param


def test_every_solution_cell_was_executed_without_errors(lesson):
    code = [c for c in _cells(ROOT / "solutions" / lesson / f"{lesson}.ipynb") if c["cell_type"] == "code"]
    not_run = [i for i, c in enumerate(code) if c.get("execution_count") is None]
    errors = [i for i, c in enumerate(code) if any(o.get("output_type") == "error" for o in c.get("outputs", []))]
    assert not_run == [], f"code cells {not_run} have no stored outputs: run `make execute-solutions`"
    assert errors == [], f"code cells {errors} stored an error"


def test_most_cells_have_their_outputs_compared(lesson):
    code = [c for c in _cells(ROOT / "solutions" / lesson / f"{lesson}.ipynb") if c["cell_type"] == "code"]
    ignored = [c for c in code if "NBVAL_IGNORE_OUTPUT" in cell_source(c) or "NBVAL_SKIP" in cell_source(c)]
    assert len(ignored) <= MAX_IGNORED_FRACTION * len(code), (
        f"{len(ignored)} of {len(code)} code cells skip nbval's comparison; round printed values instead"
    )


def test_every_exercise_has_a_visible_and_a_hidden_test(lesson):
    cells = _cells(ROOT / "solutions" / lesson / f"{lesson}.ipynb")
    answers = [i for i, c in enumerate(cells) if is_answer_cell(c)]
    assert answers, "a lesson needs autograded exercises"
    for i in answers:
        following = []
        for c in cells[i + 1:]:
            if not is_test_cell(c):
                break
            following.append(c)
        hidden = [c for c in following if is_hidden_test_cell(c)]
        visible = [c for c in following if not is_hidden_test_cell(c)]
        grade_id = nbgrader_meta(cells[i])["grade_id"]
        assert visible, f"answer {grade_id} has no visible test cell right after it"
        assert hidden, f"answer {grade_id} has no hidden test cell right after it"
        assert all("forbid(" in cell_source(c) for c in hidden), f"the hidden tests of {grade_id} do not forbid a shortcut"


def test_every_exercise_has_three_wrong_answers_and_hidden_tests_that_name_the_case(lesson):
    """Checked here in milliseconds; the round trip then grades the wrong answers for real."""
    from tests.grading.wrong_answers import RIGHT_VARIANTS, WRONG_ANSWERS

    cells = _cells(ROOT / "solutions" / lesson / f"{lesson}.ipynb")
    exercises = {nbgrader_meta(c)["grade_id"] for c in cells if is_answer_cell(c)}
    wrong = WRONG_ANSWERS.get(lesson, {})
    short = {e: len(wrong.get(e, [])) for e in sorted(exercises) if len(wrong.get(e, [])) < 3}
    assert short == {}, f"exercises with fewer than 3 wrong answers in tests/grading/wrong_answers/: {short}"
    unknown = sorted((set(wrong) | set(RIGHT_VARIANTS.get(lesson, {}))) - exercises)
    assert unknown == [], f"wrong or right answers for exercises {lesson} does not have: {unknown}"
    silent = [nbgrader_meta(c)["grade_id"] for c in cells if is_hidden_test_cell(c)
              and "reports_errors(" not in cell_source(c) and "case(" not in cell_source(c)]
    assert silent == [], (f"hidden tests {silent} do not name the case when the learner's code raises: "
                          "rebind the learner's functions with course_lib.grading.reports_errors, or use case()")


def test_each_lesson_has_a_written_answer(lesson):
    cells = _cells(ROOT / "solutions" / lesson / f"{lesson}.ipynb")
    written = [c for c in cells if is_written_answer(c)]
    assert written, "each lesson has at least one written answer graded by hand"


def test_student_version_leaks_nothing_and_has_no_outputs(lesson):
    cells = _cells(ROOT / "notebooks" / lesson / f"{lesson}.ipynb")
    text = "".join(cell_source(c) for c in cells)
    assert "### BEGIN SOLUTION" not in text
    assert "### BEGIN HIDDEN TESTS" not in text
    with_outputs = [i for i, c in enumerate(cells) if c.get("outputs")]
    assert with_outputs == [], f"cells {with_outputs} of the student version have outputs: run `make release`"


def test_run_all_goes_past_unanswered_exercises_in_the_student_version_only(lesson):
    """JupyterLab's Run All stops at the first failing cell unless it is tagged
    `raises-exception`. The release tags every test cell (nbgrader_config.py), so an unanswered
    exercise does not hide the demos below it; the solutions stay untagged, so that nbval, which
    accepts an error in a tagged cell, still fails on any error there."""
    student = _cells(ROOT / "notebooks" / lesson / f"{lesson}.ipynb")
    untagged = [nbgrader_meta(c)["grade_id"] for c in student
                if is_test_cell(c) and "raises-exception" not in c.get("metadata", {}).get("tags", [])]
    assert untagged == [], f"test cells without the raises-exception tag: {untagged}; run `make release`"
    solution = _cells(ROOT / "solutions" / lesson / f"{lesson}.ipynb")
    tagged = [i for i, c in enumerate(solution) if "raises-exception" in c.get("metadata", {}).get("tags", [])]
    assert tagged == [], f"solution cells {tagged} are tagged raises-exception: nbval would accept their errors"


def test_solution_widgets_have_their_saved_state_and_the_release_has_none(lesson):
    """A widget output is only a model id; without the notebook's saved widget state JupyterLab
    shows "Error displaying widget: model not found" when the solution is opened.
    tools/execute_solutions.py stores the state; the release drops it (no outputs to belong to)."""
    solution = json.loads((ROOT / "solutions" / lesson / f"{lesson}.ipynb").read_text())
    shown = {out["data"]["application/vnd.jupyter.widget-view+json"]["model_id"]
             for cell in solution["cells"] for out in cell.get("outputs", [])
             if "application/vnd.jupyter.widget-view+json" in out.get("data", {})}
    saved = solution["metadata"].get("widgets", {}).get(
        "application/vnd.jupyter.widget-state+json", {}).get("state", {})
    missing = sorted(shown - saved.keys())
    assert not missing, (f"{len(missing)} widget outputs have no saved state; run "
                         f"`python tools/execute_solutions.py {lesson}`")
    student = json.loads((ROOT / "notebooks" / lesson / f"{lesson}.ipynb").read_text())
    assert "widgets" not in student["metadata"], "the student version carries widget state: run `make release`"


def test_the_stored_reference_checks_are_current(lesson):
    """Grading replays every submission's checks against the solution's, stored by
    `make execute-solutions` with a key of the solution's code and the course_lib modules it imports; a stale key means
    grading would run the solution itself first (slower, same verdicts)."""
    from grader.records import read_records

    solution = ROOT / "solutions" / lesson / f"{lesson}.ipynb"
    key_file = reference.stored_reference(ROOT, lesson, solution.name) / "key"
    assert key_file.exists(), f"no stored reference checks for {lesson}: run `make execute-solutions LESSONS={lesson}`"
    assert key_file.read_text().strip() == reference.reference_key(solution), (
        f"the stored reference checks of {lesson} are older than its solution or course_lib: "
        f"run `make execute-solutions LESSONS={lesson}` and commit {reference.STORED}/{lesson}"
    )
    machine = key_file.parent / "machine"
    assert machine.exists(), f"{machine} is missing: run `make execute-solutions LESSONS={lesson}`"
    assert machine.read_text().strip(), (
        f"the stored reference checks of {lesson} do not say which machine made them: "
        f"run `make execute-solutions LESSONS={lesson}`")
    records = read_records(key_file.parent)
    cells = {r["cell"] for r in records}
    hidden = {nbgrader_meta(c)["grade_id"] for c in _cells(solution) if is_hidden_test_cell(c)}
    assert hidden <= cells, f"hidden test cells that record no check (the grader cannot replay them): {sorted(hidden - cells)}"
