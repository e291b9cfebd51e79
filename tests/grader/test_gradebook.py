"""grader/gradebook.py: shards that split a class exactly, and submissions merged between gradebooks
made apart (the one-writer merge behind --jobs, --shard and `python -m grader merge`)."""

from __future__ import annotations

import datetime
import os
import sys
from pathlib import Path

import pytest
from nbgrader.api import Gradebook, MissingEntry

from grader import gradebook
from grader.engines import default_jobs


@pytest.fixture(autouse=True)
def _alembic_on_path(monkeypatch):
    """A new gradebook runs `alembic` (installed beside this Python) to stamp its schema."""
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")


@pytest.mark.parametrize("count", [1, 2, 3, 7])
def test_shards_grade_every_student_exactly_once_in_shards_of_equal_size(count):
    students = [f"student-{i:03d}" for i in range(12)] + ["ada", "bob", "Zoë", "s p a c e"]
    shards = [gradebook.shard_students(students, (i, count)) for i in range(1, count + 1)]
    assert sorted(s for shard in shards for s in shard) == sorted(students), "a student in no shard or in two"
    sizes = [len(shard) for shard in shards]
    assert max(sizes) - min(sizes) <= 1, f"unbalanced shards {sizes}"
    assert gradebook.shard_students(list(reversed(students)), (1, count)) == shards[0], \
        "the listing order changed a shard"


def test_a_shard_is_written_i_of_n():
    assert gradebook.parse_shard("2/4") == (2, 4)
    for bad in ("0/4", "5/4", "2-4", "a/b", "2"):
        with pytest.raises(ValueError, match="--shard"):
            gradebook.parse_shard(bad)


def test_default_jobs_is_at_least_one_and_at_most_the_cores():
    import os

    assert 1 <= default_jobs() <= (os.cpu_count() or 1)


def _course_gradebook(path, cells=("a_visible", "a_hidden", "written")):
    """A gradebook as nbgrader's generate_assignment leaves it, made on its own: its row ids
    differ from every other gradebook's."""
    with Gradebook(gradebook.url(path)) as gb:
        gb.add_assignment("00_setup")
        gb.add_notebook("00_setup", "00_setup")
        for cell in cells:
            gb.add_grade_cell(cell, "00_setup", "00_setup", max_score=2.0,
                              cell_type="markdown" if cell == "written" else "code")
        gb.add_solution_cell("answer", "00_setup", "00_setup")
    return path


def _grades(path, student):
    with Gradebook(gradebook.url(path)) as gb:
        submission = gb.find_submission("00_setup", student)
        return {
            "timestamp": submission.timestamp,
            "grades": {g.name: (g.auto_score, g.manual_score, g.extra_credit, g.needs_manual_grade)
                       for nb in submission.notebooks for g in nb.grades},
            "comments": {c.name: (c.auto_comment, c.manual_comment) for nb in submission.notebooks for c in nb.comments},
            "flagged": [nb.flagged for nb in submission.notebooks],
        }


def test_a_submission_is_merged_exactly_between_gradebooks_made_apart(tmp_path):
    shard = _course_gradebook(tmp_path / "shard.db")
    main = _course_gradebook(tmp_path / "main.db")
    with Gradebook(gradebook.url(shard)) as gb:
        gb.add_student("ada", first_name="Ada", last_name="Lovelace")
        gb.add_submission("00_setup", "ada", timestamp=datetime.datetime(2026, 11, 20, 12, 0))
        for name, score in (("a_visible", 2.0), ("a_hidden", 0.0)):
            grade = gb.find_grade(name, "00_setup", "00_setup", "ada")
            grade.auto_score, grade.needs_manual_grade = score, False
        gb.find_grade("written", "00_setup", "00_setup", "ada").needs_manual_grade = True
        gb.find_comment("answer", "00_setup", "00_setup", "ada").auto_comment = "No response."
        gb.find_submission_notebook("00_setup", "00_setup", "ada").flagged = True
        gb.db.commit()
    with Gradebook(gradebook.url(main)) as gb:  # an older grading of the same submission is replaced
        gb.add_student("ada")
        gb.add_submission("00_setup", "ada")
        gb.find_grade("a_hidden", "00_setup", "00_setup", "ada").auto_score = 2.0
        gb.db.commit()

    assert gradebook.merge_submission(shard, main, "00_setup", "ada")
    assert _grades(main, "ada") == _grades(shard, "ada")
    assert _grades(main, "ada")["grades"]["a_hidden"][0] == 0.0, "the older grade survived the merge"


def test_a_submission_the_shard_does_not_hold_is_removed(tmp_path):
    """A submission whose grading failed has no gradebook entry in its run: after the merge the
    course's gradebook has none either, as after a serial run."""
    shard = _course_gradebook(tmp_path / "shard.db")
    main = _course_gradebook(tmp_path / "main.db")
    with Gradebook(gradebook.url(main)) as gb:
        gb.add_student("bob")
        gb.add_submission("00_setup", "bob")
    assert not gradebook.merge_submission(shard, main, "00_setup", "bob")
    with Gradebook(gradebook.url(main)) as gb, pytest.raises(MissingEntry):
        gb.find_submission("00_setup", "bob")


def test_a_student_new_to_the_course_gradebook_is_added(tmp_path):
    shard = _course_gradebook(tmp_path / "shard.db")
    main = _course_gradebook(tmp_path / "main.db")
    with Gradebook(gradebook.url(shard)) as gb:
        gb.add_student("cy", first_name="Cy", email="cy@example.org")
        gb.add_submission("00_setup", "cy")
    assert gradebook.merge_submission(shard, main, "00_setup", "cy")
    with Gradebook(gradebook.url(main)) as gb:
        student = gb.find_student("cy")
        assert (student.first_name, student.email) == ("Cy", "cy@example.org")


def test_an_assignment_added_only_for_its_due_date_is_not_yet_released(tmp_path):
    """`nbgrader db assignment add 00_setup --duedate=...` before `make release` (a fresh clone has
    no gradebook.db) adds the assignment without notebooks: the batch must still run
    generate_assignment (which keeps the due date), or every submission is an autograde error."""
    db = tmp_path / "gradebook.db"
    with Gradebook(gradebook.url(db)) as gb:
        gb.add_assignment("00_setup", duedate=datetime.datetime(2026, 12, 1, 12, 0))
    assert not gradebook.has_assignment(db, "00_setup")
    _course_gradebook(tmp_path / "released.db")
    assert gradebook.has_assignment(tmp_path / "released.db", "00_setup")
    assert not gradebook.has_assignment(tmp_path / "released.db", "01_tokenization")


def test_a_merge_keeps_the_students_names_and_copies_the_late_penalty(tmp_path):
    """Students added by `nbgrader db student add/import` keep their names and emails when a
    submission's gradebook (where nbgrader may have created the student bare) is merged back;
    the submission's timestamp, extension and late penalty come with its grades."""
    due = datetime.datetime(2026, 11, 20, 12, 0)
    job = _course_gradebook(tmp_path / "job.db")
    main = _course_gradebook(tmp_path / "main.db")
    for db in (job, main):
        with Gradebook(gradebook.url(db)) as gb:
            gb.update_or_create_assignment("00_setup", duedate=due)
    with Gradebook(gradebook.url(main)) as gb:
        gb.add_student("bob", first_name="Bob", last_name="Babbage", email="bob@example.org")
    with Gradebook(gradebook.url(job)) as gb:
        gb.add_student("bob")
        gb.add_submission("00_setup", "bob", timestamp=due + datetime.timedelta(hours=2),
                          extension=datetime.timedelta(hours=1))
        gb.find_grade("a_visible", "00_setup", "00_setup", "bob").auto_score = 2.0
        gb.find_submission_notebook("00_setup", "00_setup", "bob").late_submission_penalty = 2.0
        gb.db.commit()
    assert gradebook.merge_submission(job, main, "00_setup", "bob")
    with Gradebook(gradebook.url(main)) as gb:
        student = gb.find_student("bob")
        assert (student.first_name, student.last_name, student.email) == ("Bob", "Babbage", "bob@example.org")
        submission = gb.find_submission("00_setup", "bob")
        assert submission.total_seconds_late == 3600.0
        assert submission.late_submission_penalty == 2.0
