"""tools/autograde.py: integrity checks and the hard kill, without running nbgrader."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil

from tools import autograde as ag
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
    assert ag.integrity_flags(released, released) == []


def test_solution_with_hidden_tests_is_not_an_edit(tmp_path):
    released = _release(tmp_path / "release.ipynb")
    source = _release(tmp_path / "source.ipynb", HIDDEN)
    assert ag.integrity_flags(released, source, source) == []


def test_deleted_and_edited_cells_are_named(tmp_path):
    released = _release(tmp_path / "release.ipynb")
    submitted = nbt.write_notebook(tmp_path / "submitted.ipynb", [
        nbt.answer("f_answer", "def f(x):\n    ### BEGIN SOLUTION\n    return x + 1\n    ### END SOLUTION"),
        nbt.tests("f_visible", 1, "pass"),
    ])
    flags = ag.integrity_flags(released, submitted)
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
    assert ag.integrity_flags(released, submitted) == ["answer cell(s) f_answer touch the grading machinery (review by hand)"]


def test_unreadable_notebook_is_reported_not_raised(tmp_path):
    released = _release(tmp_path / "release.ipynb")
    broken = tmp_path / "broken.ipynb"
    broken.write_text("{ not json")
    (flag,) = ag.integrity_flags(released, broken)
    assert flag.startswith("unreadable notebook")


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
    ag._kill_tree(parent)
    parent.wait(timeout=10)
    deadline = time.monotonic() + 10
    while psutil.pid_exists(child_pid) and psutil.Process(child_pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the grandchild in its own session survived"
        time.sleep(0.05)
    assert parent.returncode is not None


def test_release_is_current_notices_edited_solutions(tmp_path):
    import shutil as sh

    from tests.grading.test_round_trip import ROOT

    sh.copy(ROOT / "nbgrader_config.py", tmp_path)
    sh.copytree(ROOT / "solutions" / "00_setup", tmp_path / "solutions" / "00_setup")
    sh.copytree(ROOT / "notebooks" / "00_setup", tmp_path / "notebooks" / "00_setup")
    assert ag.release_is_current(tmp_path, "00_setup")
    source = tmp_path / "solutions" / "00_setup" / "00_setup.ipynb"
    source.write_text(source.read_text().replace("visible tests passed", "visible tests passed!"))
    assert not ag.release_is_current(tmp_path, "00_setup")


def test_report_rows_are_appended_one_by_one_and_resume_skips_them(tmp_path):
    report = tmp_path / "autograded" / "report.csv"
    first = ag.Result("00_setup", "ada", "graded", 8.0, 8.0, 1.0)
    ag._append_row(report, first)
    ag._append_row(report, ag.Result("00_setup", "bob", "did not finish", 0.0, 8.0, 600.0, ["killed"]))
    lines = report.read_text().splitlines()
    assert lines[0].startswith("lesson,student,status")
    assert len(lines) == 3, "one header, then one row per submission as soon as it is graded"
    assert ag._reported(report) == {("00_setup", "ada"), ("00_setup", "bob")}


def test_course_fingerprint_sees_a_changed_course_file(tmp_path):
    (tmp_path / "course_lib").mkdir()
    (tmp_path / "course_lib" / "grading.py").write_text("x = 1\n")
    (tmp_path / "nbgrader_config.py").write_text("c = 1\n")
    before = ag.course_fingerprint(tmp_path)
    (tmp_path / "course_lib" / "grading.py").write_text("x = 2\n")
    assert ag._changed(before, ag.course_fingerprint(tmp_path)) == ["course_lib/grading.py"]


def test_staged_copy_withholds_a_violating_answer_and_leaves_submitted_unchanged(tmp_path):
    lesson = "00_x"
    _release(tmp_path / "notebooks" / lesson / f"{lesson}.ipynb")
    submitted = tmp_path / "submitted" / "eve" / lesson / f"{lesson}.ipynb"
    nbt.write_notebook(submitted, [
        nbt.code("x = 1"),
        nbt.answer("f_answer", "import os\ndef f(x):\n    ### BEGIN SOLUTION\n    return x + 1\n    ### END SOLUTION"),
        nbt.tests("f_visible", 1, "assert f(0) == 1"),
        nbt.tests("f_hidden", 1, "assert f(1) == 2"),
    ])
    original = submitted.read_bytes()
    flags = ag.stage_submission(tmp_path, lesson, "eve")
    assert len(flags) == 1
    assert "f_answer" in flags[0]
    assert "import not allowed (os)" in flags[0]
    staged = tmp_path / ag.STAGING / "eve" / lesson / f"{lesson}.ipynb"
    assert "withheld by the grading policy" in staged.read_text()
    assert not staged.stat().st_mode & 0o222, "the staged copy must be read-only"
    assert submitted.read_bytes() == original, "submitted/ is never changed"
    ag._make_writable(tmp_path / ag.STAGING)
