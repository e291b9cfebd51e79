"""grader/autograde.py: the batch (release up to date, course files unchanged, one failure costs one submission)."""

from __future__ import annotations

from grader import autograde as ag
from grader import gradebook, precheck, reference


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


def test_course_fingerprint_sees_a_changed_course_file(tmp_path):
    (tmp_path / "course_lib").mkdir()
    (tmp_path / "course_lib" / "grading.py").write_text("x = 1\n")
    (tmp_path / "nbgrader_config.py").write_text("c = 1\n")
    before = ag.course_fingerprint(tmp_path)
    (tmp_path / "course_lib" / "grading.py").write_text("x = 2\n")
    assert ag.changed_files(before, ag.course_fingerprint(tmp_path)) == ["course_lib/grading.py"]


def test_one_submission_that_makes_the_grader_itself_fail_is_zeroed_and_the_batch_goes_on(tmp_path, monkeypatch):
    """grade_submission raising (a bug, or hostile data) costs that submission only."""
    from grader import submission

    for student in ("a-breaks-the-grader", "b-next"):
        folder = tmp_path / "submitted" / student / "00_setup"
        folder.mkdir(parents=True)
        (folder / "00_setup.ipynb").write_text("{}")
    monkeypatch.setattr(precheck, "check", lambda root, use_sandbox: "ok")
    monkeypatch.setattr(ag, "course_fingerprint", lambda root: {})
    monkeypatch.setattr(reference, "reference_records", lambda *a, **k: {})
    monkeypatch.setattr(gradebook, "has_lesson", lambda root, lesson: True)
    monkeypatch.setattr(gradebook, "lesson_scores", lambda root, lesson, db=None: ({"b-next": 4.0}, 8.0))
    monkeypatch.setattr(gradebook, "forget", lambda root, lesson, student, db=None: None)
    flagged = []
    monkeypatch.setattr(gradebook, "mark_flagged", lambda db, lesson, student: flagged.append(student))
    (tmp_path / "notebooks" / "00_setup").mkdir(parents=True)
    (tmp_path / "notebooks" / "00_setup" / "00_setup.ipynb").write_text("{}")

    def grade(job):
        if job.student.startswith("a-"):
            raise ValueError("a tensor subclass with an odd shape")
        return "graded", 1.0, []

    monkeypatch.setattr(submission, "grade_submission", grade)
    monkeypatch.setattr(ag, "protected_names", lambda nb: {})
    results = ag.autograde(tmp_path, ["00_setup"], use_sandbox=False)
    assert [(r.student, r.status, r.auto_score) for r in results] == [
        ("a-breaks-the-grader", "grader error", 0.0), ("b-next", "graded", 4.0)]
    assert "the grader failed on this submission (ValueError: a tensor subclass with an odd shape)" in results[0].flags[0]
    assert flagged == ["a-breaks-the-grader"], "a flagged submission is marked flagged in the gradebook (the Formgrader)"


def test_a_lost_worker_costs_its_submission_only_and_nothing_it_half_wrote_is_merged(tmp_path, monkeypatch):
    """--jobs: a worker that dies (killed, out of memory) gives its submission 0 and a flag, its
    gradebook copy is dropped unmerged, and the other submissions are graded and merged."""
    import contextlib
    from concurrent.futures import Future

    for student in ("a-worker-dies", "b-next"):
        folder = tmp_path / "submitted" / student / "00_setup"
        folder.mkdir(parents=True)
        (folder / "00_setup.ipynb").write_text("{}")
    (tmp_path / "notebooks" / "00_setup").mkdir(parents=True)
    (tmp_path / "notebooks" / "00_setup" / "00_setup.ipynb").write_text("{}")
    (tmp_path / "gradebook.db").write_text("")
    monkeypatch.setattr(precheck, "check", lambda root, use_sandbox: "ok")
    monkeypatch.setattr(ag, "course_fingerprint", lambda root: {})
    monkeypatch.setattr(reference, "reference_records", lambda *a, **k: {})
    monkeypatch.setattr(gradebook, "has_lesson", lambda root, lesson: True)
    monkeypatch.setattr(ag, "protected_names", lambda nb: {})
    monkeypatch.setattr(gradebook, "lesson_scores", lambda root, lesson, db=None: ({"b-next": 4.0}, 8.0))
    forgotten, merged = [], []
    monkeypatch.setattr(gradebook, "forget", lambda root, lesson, student, db=None: forgotten.append(student))
    monkeypatch.setattr(gradebook, "merge_submission", lambda src, dst, lesson, student: merged.append(student))
    monkeypatch.setattr(gradebook, "mark_flagged", lambda db, lesson, student: None)

    class Pool:
        def submit(self, fn, job):
            future = Future()
            if job.student.startswith("a-"):
                future.set_exception(RuntimeError("A process in the process pool was terminated abruptly"))
            else:
                future.set_result(("graded", 1.0, []))
            return future

    monkeypatch.setattr(ag, "engine_pool", lambda engine, jobs, scheduler: contextlib.nullcontext(Pool()))
    results = ag.autograde(tmp_path, ["00_setup"], use_sandbox=False, jobs=2, progress=False)
    assert [(r.student, r.status, r.auto_score) for r in results] == [
        ("a-worker-dies", "grader error", 0.0), ("b-next", "graded", 4.0)]
    assert "its worker failed (RuntimeError" in results[0].flags[0]
    assert merged == ["b-next"], "the lost worker's gradebook copy was merged"
    assert forgotten == ["a-worker-dies"]
    assert not list((tmp_path / gradebook.JOBS).rglob("*.db")), "a gradebook copy was left behind"
