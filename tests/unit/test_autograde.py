"""grader/autograde.py: integrity checks and the hard kill, without running nbgrader."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil

from grader import autograde as ag
from grader import flags, intake, processes, report
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
    processes.kill_tree(parent)
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


def test_grading_a_lesson_again_keeps_the_other_lessons_rows_in_the_report(tmp_path):
    path = tmp_path / "autograded" / "report.csv"
    report.append_row(path, report.Result("00_setup", "ada", "graded", 8.0, 8.0, 9.0, []))
    report.append_row(path, report.Result("01_tokenization", "ada", "graded", 14.0, 14.0, 30.0, []))
    report.forget_rows(path, ["01_tokenization"])
    assert report.reported(path) == {("00_setup", "ada")}, "the other lesson's row was lost"
    report.forget_rows(tmp_path / "none.csv", ["00_setup"])  # no report yet: nothing to forget
    assert not (tmp_path / "none.csv").exists()


def test_report_rows_are_appended_one_by_one_and_resume_skips_them(tmp_path):
    path = tmp_path / "autograded" / "report.csv"
    first = report.Result("00_setup", "ada", "graded", 8.0, 8.0, 1.0)
    report.append_row(path, first)
    report.append_row(path, report.Result("00_setup", "bob", "did not finish", 0.0, 8.0, 600.0, ["killed"]))
    lines = path.read_text().splitlines()
    assert lines[0].startswith("lesson,student,status")
    assert len(lines) == 3, "one header, then one row per submission as soon as it is graded"
    assert report.reported(path) == {("00_setup", "ada"), ("00_setup", "bob")}


def test_course_fingerprint_sees_a_changed_course_file(tmp_path):
    (tmp_path / "course_lib").mkdir()
    (tmp_path / "course_lib" / "grading.py").write_text("x = 1\n")
    (tmp_path / "nbgrader_config.py").write_text("c = 1\n")
    before = ag.course_fingerprint(tmp_path)
    (tmp_path / "course_lib" / "grading.py").write_text("x = 2\n")
    assert ag.changed_files(before, ag.course_fingerprint(tmp_path)) == ["course_lib/grading.py"]


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


def _graded(path, outputs_by_cell):
    """A graded notebook whose code cells carry the given outputs."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    for source, outputs in outputs_by_cell:
        cell = nbformat.v4.new_code_cell(source)
        cell.outputs = [nbformat.from_dict(o) for o in outputs]
        nb.cells.append(cell)
    nbformat.write(nb, path)
    return path


def _error(ename, evalue):
    return {"output_type": "error", "ename": ename, "evalue": evalue, "traceback": []}


def test_what_the_sandbox_stopped_is_flagged_by_kind(tmp_path):
    graded = _graded(tmp_path / "graded.ipynb", [
        ("hoard = torch.empty(18 * 2**30)", [_error(
            "RuntimeError", "[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory")]),
        ("x = bytearray(10**12)", [_error("MemoryError", "")]),
        ("np.array([1]).tofile('/course/pwned')", [_error("FileNotFoundError",
                                                          "[Errno 2] No such file or directory: '/course/pwned'")]),
        ("np.zeros(10**8).tofile('big')", [_error("OSError", "800000000 requested and 67108864 written")]),
        ("socket.create_connection(('example.org', 80))", [_error("gaierror",
                                                                 "[Errno -3] Temporary failure in name resolution")]),
        ("print('x' * 10**9)", [{"output_type": "stream", "name": "stdout",
                                  "text": "xxxx\n[output cut by the grader after 16,777,216 characters]\n"}]),
    ])
    found = flags.contained_flags(graded, ["pid 4321: a fork of the kernel"])
    assert len(found) == 6, f"expected one flag per kind (memory, files, limits, network, output, processes): {found}"
    memory, files, limits, network, output, left = found
    assert memory.startswith("ran out of memory"), memory
    assert all(f"cell {i}" in memory for i in (0, 1)), f"both out-of-memory cells should be named: {memory}"
    assert files.startswith("reached for a file"), files
    assert "cell 2" in files, files
    assert "FileNotFoundError" in files, files
    assert limits.startswith("hit the sandbox's limit"), limits
    assert "cell 3" in limits, limits
    assert network.startswith("tried to use the network"), network
    assert "cell 4" in network, network
    assert output.startswith("printed more than"), output
    assert "cell 5" in output, output
    assert left.startswith("left 1 process(es) running"), left
    assert "4321" in left, left
    unsandboxed = flags.contained_flags(graded, ["pid 4321: a fork of the kernel"], sandboxed=False)
    assert "graded without the sandbox" in unsandboxed[0], unsandboxed[0]
    assert "the grader killed" in unsandboxed[-1], unsandboxed[-1]


def test_failing_answers_and_tests_are_not_mistaken_for_contained_attacks(tmp_path):
    """An unanswered or wrong submission fails with ordinary errors, and a relative path that
    does not exist is a typo, not an attack: no flag."""
    graded = _graded(tmp_path / "graded.ipynb", [
        ("def f(x):\n    raise NotImplementedError()", []),
        ("f(1)", [_error("NotImplementedError", "")]),
        ("assert_equal(f(1), expect=lambda: 2)", [_error("AssertionError", "f(1): expected 2, got 3")]),
        ("open('dat.txt')", [_error("FileNotFoundError", "[Errno 2] No such file or directory: 'dat.txt'")]),
        ("print('done')", [{"output_type": "stream", "name": "stdout", "text": "done\n"}]),
    ])
    assert flags.contained_flags(graded, []) == []


def test_process_watch_sees_what_the_kernel_left_running_but_not_the_kernel():
    """A stand-in for nbgrader starts a stand-in kernel, which forks a child that keeps running."""
    kernel = ("import os, sys, time\n"
              "child = os.fork()\n"
              "if child == 0:\n"
              "    time.sleep(60)\n"
              "print(os.getpid(), child, flush=True)\n"
              "time.sleep(60)\n")
    nbgrader = ("import subprocess, sys\n"
                f"subprocess.run([sys.executable, '-c', {kernel!r}, 'ipykernel_launcher'])\n")
    parent = subprocess.Popen([sys.executable, "-c", nbgrader], stdout=subprocess.PIPE, text=True)
    try:
        kernel_pid, child_pid = map(int, parent.stdout.readline().split())
        watch = processes.ProcessWatch(parent.pid, interval=0.05)
        watch.start()
        time.sleep(0.5)
        kernels, others = processes.ProcessWatch.classify(psutil.Process(parent.pid))
        watch.stop()
    finally:
        processes.kill_tree(parent)
        parent.wait(timeout=10)
    assert kernels == [f"pid {kernel_pid}: the kernel"], f"the kernel is pid {kernel_pid}, got {kernels}"
    assert others == [f"pid {child_pid}: a fork of the kernel"], f"the forked child is pid {child_pid}, got {others}"
    assert [o.split(":")[0] for o in watch.left_running] == [f"pid {child_pid}"], \
        f"the watch should report the forked child, pid {child_pid}, as left running: {watch.left_running}"


def test_a_score_test_cells_by_its_error_never_by_what_the_answer_wrote_to_stderr():
    """nbgrader scores 0 for any stderr output; the course scores a warning, a log line or a print
    to stderr as nothing, an error as 0, and reads no partial credit from a cell's last value."""
    from nbformat.v4 import new_code_cell, new_output

    from grader.nbgrader_plugins import score_test_cell

    def cell(*outputs):
        return new_code_cell("...", metadata={"nbgrader": {"grade": True, "grade_id": "t", "points": 2}},
                             outputs=list(outputs))

    stderr = new_output("stream", name="stderr", text="UserWarning: float64 input\n")
    assert score_test_cell(cell(stderr, new_output("stream", name="stdout", text="passed\n"))) == 2.0
    assert score_test_cell(cell(new_output("execute_result", data={"text/plain": "0.5"}, execution_count=1))) == 2.0
    error = new_output("error", ename="AssertionError", evalue="wrong", traceback=[])
    assert score_test_cell(cell(stderr, error)) == 0.0
    assert score_test_cell(cell()) == 2.0
