"""The course's grade exports, read from the gradebook; a submission that does not exist is "missing", never 0.

- `grades.csv`: one row per lesson and student, nbgrader's columns (`nbgrader export`) plus
  `status` (submitted or missing) and the autograded and manual parts of the score apart; a
  missing submission has no score.
- `grades-by-student.csv`, for an LMS: one row per student, one column per lesson (its score,
  `missing`, or `not released` for a lesson of solutions/ that is not in the gradebook yet),
  then the autograded, manual and total sums over what was submitted.
"""

from __future__ import annotations

import csv
from pathlib import Path

from grader.course import Course

BY_LESSON = "grades.csv"
BY_STUDENT = "grades-by-student.csv"
MISSING, NOT_RELEASED = "missing", "not released"
COLUMNS = ["assignment", "duedate", "timestamp", "student_id", "last_name", "first_name", "email", "status",
           "autograded_score", "manual_score", "raw_score", "late_submission_penalty", "score", "max_score"]


def _number(x) -> str:
    return f"{float(x):g}"


def rows(gb) -> list[dict[str, str]]:
    """One row per (assignment, student) of the gradebook `gb`, as written to grades.csv."""
    from nbgrader.api import MissingEntry

    table = []
    for assignment in gb.assignments:
        for student in gb.students:
            row = {"assignment": assignment.name, "duedate": str(assignment.duedate or ""), "student_id": student.id,
                   "last_name": student.last_name or "", "first_name": student.first_name or "",
                   "email": student.email or "", "max_score": _number(assignment.max_score)}
            try:
                submission = gb.find_submission(assignment.name, student.id)
            except MissingEntry:
                row.update(status=MISSING, timestamp="", autograded_score="", manual_score="", raw_score="",
                           late_submission_penalty="", score="")
            else:
                penalty = submission.late_submission_penalty or 0.0
                row.update(status="submitted", timestamp=str(submission.timestamp or ""),
                           autograded_score=_number(submission.code_score),
                           manual_score=_number(submission.written_score + submission.task_score),
                           raw_score=_number(submission.score), late_submission_penalty=_number(penalty),
                           score=_number(max(0.0, submission.score - penalty)))
            table.append(row)
    return table


def by_student(table: list[dict[str, str]], lessons: list[str]) -> tuple[list[str], list[dict[str, str]]]:
    """(columns, rows) of grades-by-student.csv from the rows of grades.csv and the course's lessons."""
    order = [*lessons, *dict.fromkeys(r["assignment"] for r in table if r["assignment"] not in lessons)]
    students: dict[str, dict[str, str]] = {}
    for r in table:
        row = students.setdefault(r["student_id"], {
            "student_id": r["student_id"], "last_name": r["last_name"], "first_name": r["first_name"],
            "email": r["email"], **{lesson: NOT_RELEASED for lesson in order},
            "autograded_total": 0.0, "manual_total": 0.0, "total": 0.0, "max_total": 0.0})
        row["max_total"] += float(r["max_score"])
        if r["status"] == MISSING:
            row[r["assignment"]] = MISSING
            continue
        row[r["assignment"]] = r["score"]
        for total, column in (("autograded_total", "autograded_score"), ("manual_total", "manual_score"), ("total", "score")):
            row[total] += float(r[column])
    for row in students.values():
        for total in ("autograded_total", "manual_total", "total", "max_total"):
            row[total] = _number(row[total])
    columns = ["student_id", "last_name", "first_name", "email", *order,
               "autograded_total", "manual_total", "total", "max_total"]
    return columns, [students[s] for s in sorted(students)]


def export(root: Path, db_url: str, course_id: str) -> list[Path]:
    """Write both files into `root`; returns their paths."""
    from nbgrader.api import Gradebook

    with Gradebook(db_url, course_id) as gb:
        table = rows(gb)
    columns, students = by_student(table, Course(root).lessons())
    written = []
    for name, fields, data in ((BY_LESSON, COLUMNS, table), (BY_STUDENT, columns, students)):
        with open(root / name, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=fields)
            writer.writeheader()
            writer.writerows(data)
        written.append(root / name)
    return written
