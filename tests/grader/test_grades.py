"""grader/grades.py: the grade exports mark what is missing and what is not released, never 0."""

from __future__ import annotations

from grader import grades


def _row(lesson, student, status="submitted", auto="8", manual="2", score="10", max_score="10"):
    missing = status == grades.MISSING
    return {"assignment": lesson, "student_id": student, "last_name": "", "first_name": "", "email": "",
            "status": status, "autograded_score": "" if missing else auto, "manual_score": "" if missing else manual,
            "score": "" if missing else score, "max_score": max_score}


def test_one_row_per_student_one_column_per_lesson_with_missing_and_unreleased_lessons_named():
    table = [_row("00_setup", "ada"), _row("00_setup", "bob", grades.MISSING),
             _row("01_tokenization", "ada", auto="12", manual="0", score="11.5", max_score="14"),
             _row("01_tokenization", "bob", auto="3", manual="1", score="4", max_score="14")]
    columns, rows = grades.by_student(table, ["00_setup", "01_tokenization", "02_embeddings"])
    assert columns[4:7] == ["00_setup", "01_tokenization", "02_embeddings"]
    ada, bob = rows
    assert (ada["00_setup"], ada["01_tokenization"], ada["02_embeddings"]) == ("10", "11.5", grades.NOT_RELEASED)
    assert (ada["autograded_total"], ada["manual_total"], ada["total"], ada["max_total"]) == ("20", "2", "21.5", "24")
    assert bob["00_setup"] == grades.MISSING, "a missing submission must not read as 0"
    assert (bob["autograded_total"], bob["manual_total"], bob["total"], bob["max_total"]) == ("3", "1", "4", "24")


def test_an_assignment_that_is_not_a_lesson_folder_still_gets_its_column():
    columns, _ = grades.by_student([_row("extra_quiz", "ada")], ["00_setup"])
    assert columns[4:6] == ["00_setup", "extra_quiz"]
