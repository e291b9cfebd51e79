"""grader/report.py: a row per submission as soon as it is graded; grading again keeps other lessons' rows."""

from __future__ import annotations

from grader import report


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


def test_grading_one_student_again_replaces_only_that_students_row(tmp_path):
    path = tmp_path / "autograded" / "report.csv"
    for student in ("ada", "bob"):
        report.append_row(path, report.Result("00_setup", student, "graded", 8.0, 8.0, 9.0, []))
    report.forget_rows(path, ["00_setup"], ["bob"])
    assert report.reported(path) == {("00_setup", "ada")}
