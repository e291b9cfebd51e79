"""grader/intake.py: deleted and edited graded cells, answers that reach for the machinery, the staged copy."""

from __future__ import annotations

from grader import intake
from grader.course import Course
from tools import nbtools as nbt

HIDDEN = "assert f(1) == 2\n### BEGIN HIDDEN TESTS\nassert f(2) == 3\n### END HIDDEN TESTS"


def _release(path, hidden_source="assert f(1) == 2"):
    return nbt.write_notebook(path, [
        nbt.code("x = 1"),
        nbt.answer("f_answer", "def f(x):\n    ### BEGIN SOLUTION\n    return x + 1\n    ### END SOLUTION"),
        nbt.tests("f_visible", 1, "assert f(0) == 1"),
        nbt.tests("f_hidden", 1, hidden_source),
    ])


def test_untouched_submission_has_no_flags(tmp_path):
    released = _release(tmp_path / "release.ipynb")
    assert intake.integrity_flags(released, released) == []


def test_solution_with_hidden_tests_is_not_an_edit(tmp_path):
    released = _release(tmp_path / "release.ipynb")
    source = _release(tmp_path / "source.ipynb", HIDDEN)
    assert intake.integrity_flags(released, source, source) == []


def test_deleted_and_edited_cells_are_named(tmp_path):
    released = _release(tmp_path / "release.ipynb")
    submitted = nbt.write_notebook(tmp_path / "submitted.ipynb", [
        nbt.answer("f_answer", "def f(x):\n    ### BEGIN SOLUTION\n    return x + 1\n    ### END SOLUTION"),
        nbt.tests("f_visible", 1, "pass"),
    ])
    flags = intake.integrity_flags(released, submitted)
    assert flags == [
        "deleted test cell(s) f_hidden (they score 0; review by hand)",
        "edited test cell(s) f_visible (restored from the release before grading)",
    ]


def test_answers_that_touch_the_grading_machinery_are_flagged(tmp_path):
    released = _release(tmp_path / "release.ipynb")
    submitted = nbt.write_notebook(tmp_path / "submitted.ipynb", [
        nbt.code("x = 1"),
        nbt.answer("f_answer", "import course_lib.grading as g\ng.assert_tensor_close = print\ndef f(x):\n    ### BEGIN SOLUTION\n    return x + 1\n    ### END SOLUTION"),
        nbt.tests("f_visible", 1, "assert f(0) == 1"),
        nbt.tests("f_hidden", 1, "assert f(1) == 2"),
    ])
    assert intake.integrity_flags(released, submitted) == ["answer cell(s) f_answer touch the grading machinery (review by hand)"]


def test_unreadable_notebook_is_reported_not_raised(tmp_path):
    released = _release(tmp_path / "release.ipynb")
    broken = tmp_path / "broken.ipynb"
    broken.write_text("{ not json")
    (flag,) = intake.integrity_flags(released, broken)
    assert flag.startswith("unreadable notebook")


def test_staged_copy_withholds_a_violating_answer_and_leaves_submitted_unchanged(tmp_path):
    lesson = "00_x"
    _release(tmp_path / "notebooks" / lesson / f"{lesson}.ipynb")
    submitted = tmp_path / "submitted" / "eve" / lesson / f"{lesson}.ipynb"
    nbt.write_notebook(submitted, [
        nbt.code("x = 1"),
        nbt.answer("f_answer", "import importlib\ndef f(x):\n    ### BEGIN SOLUTION\n    return x + 1\n    ### END SOLUTION"),
        nbt.tests("f_visible", 1, "assert f(0) == 1"),
        nbt.tests("f_hidden", 1, "assert f(1) == 2"),
    ])
    original = submitted.read_bytes()
    flags = intake.stage_submission(tmp_path, lesson, "eve")
    assert len(flags) == 1
    assert "f_answer" in flags[0]
    assert "reaches the import system (import importlib)" in flags[0]
    staged = Course(tmp_path).staged("eve", lesson) / f"{lesson}.ipynb"
    assert "withheld by the grading policy" in staged.read_text()
    assert not staged.stat().st_mode & 0o222, "the staged copy must be read-only"
    assert submitted.read_bytes() == original, "submitted/ is never changed"
    intake.make_writable(Course(tmp_path).grading)
