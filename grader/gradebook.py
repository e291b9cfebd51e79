"""The gradebook, for a batch graded in parallel or in shards: one writer, submissions merged.

nbgrader keeps grades in one SQLite file, which concurrent nbgrader processes would write at
once. So a parallel batch gives each submission its own copy of the batch's gradebook
(`job_copy`); nbgrader and the replay of verdicts write that copy; and the one process that
runs the batch copies the submission back (`merge_submission`). Shard runs keep a gradebook of
their own (`shard_folder`), merged the same way by `python -m grader merge`.

`merge_submission` goes through nbgrader's API by names (assignment, notebook, cell, student),
not by row ids, so it merges gradebooks created apart (on other machines) as well as copies.
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

MAIN = "gradebook.db"
SHARDS = Path(".grading") / "shards"  # <root>/.grading/shards/<I>-of-<N>/{gradebook.db, report}
JOBS = Path(".grading") / "jobs"  # <root>/.grading/jobs/<lesson>/<student>.db while it is graded


def url(db: Path) -> str:
    return f"sqlite:///{Path(db).resolve()}"


def main_db(root: Path) -> Path:
    return root / MAIN


def shard_students(students: list[str], shard: tuple[int, int]) -> set[str]:
    """The students of shard I of N (1-based): every N-th of the ids in sorted order, from the
    I-th. Shards differ in size by at most one submission, and N shard runs over the same
    submitted/ grade every submission exactly once (`python -m grader merge` checks that none was
    missed, in case submitted/ changed between the runs)."""
    index, count = shard
    return set(sorted(students)[index - 1::count])


def parse_shard(text: str) -> tuple[int, int]:
    try:
        index, count = (int(part) for part in text.split("/"))
    except ValueError:
        raise ValueError(f"--shard takes I/N, as in 1/4 (got {text!r})") from None
    if not 1 <= index <= count:
        raise ValueError(f"--shard {text}: I must be between 1 and N")
    return index, count


def shard_folder(root: Path, shard: tuple[int, int]) -> Path:
    return root / SHARDS / f"{shard[0]}-of-{shard[1]}"


def job_copy(batch_db: Path, root: Path, lesson: str, student: str) -> Path:
    """A fresh copy of the batch's gradebook for one submission (taken by the batch's one writer,
    so it is never read half-written)."""
    path = root / JOBS / lesson / f"{student}.db"
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(batch_db, path)
    return path


def merge_submission(source: Path, destination: Path, lesson: str, student: str) -> bool:
    """Make `destination`'s record of `student`'s `lesson` exactly `source`'s: its grades, comments,
    flags, timestamp and extension, or no submission where `source` has none (a submission whose
    grading failed is removed). The assignment must exist in both. Returns whether one was copied."""
    from nbgrader.api import Gradebook, MissingEntry
    from sqlalchemy.exc import SAWarning

    with Gradebook(url(source)) as src, Gradebook(url(destination)) as dst, warnings.catch_warnings():
        # nbgrader's add_submission builds its rows before adding them to the session, which
        # SQLAlchemy 2 warns about; `nbgrader autograde` does the same, silenced by its logging
        warnings.simplefilter("ignore", SAWarning)
        try:
            dst.remove_submission(lesson, student)
        except MissingEntry:
            pass
        try:
            theirs = src.find_submission(lesson, student)
        except MissingEntry:
            dst.db.commit()
            return False
        try:
            dst.find_student(student)
        except MissingEntry:
            person = theirs.student
            dst.add_student(student, first_name=person.first_name, last_name=person.last_name,
                            email=person.email, lms_user_id=person.lms_user_id)
        ours = dst.add_submission(lesson, student)
        ours.timestamp, ours.extension = theirs.timestamp, theirs.extension
        for notebook in theirs.notebooks:
            mine = dst.find_submission_notebook(notebook.name, lesson, student)
            mine.flagged, mine.late_submission_penalty = notebook.flagged, notebook.late_submission_penalty
            for grade in notebook.grades:
                target = dst.find_grade(grade.name, notebook.name, lesson, student)
                for column in ("auto_score", "manual_score", "extra_credit", "needs_manual_grade"):
                    setattr(target, column, getattr(grade, column))
            for comment in notebook.comments:
                target = dst.find_comment(comment.name, notebook.name, lesson, student)
                target.auto_comment, target.manual_comment = comment.auto_comment, comment.manual_comment
        dst.db.commit()
    return True


def has_assignment(db: Path, lesson: str) -> bool:
    """Whether the gradebook at `db` has the lesson as `nbgrader generate_assignment` leaves it, with
    its notebooks. `nbgrader db assignment add LESSON --duedate=...` adds the assignment alone (its
    due date), which autograde cannot grade against until generate_assignment (which keeps the due
    date) adds the notebooks."""
    from nbgrader.api import Gradebook, MissingEntry

    if not Path(db).exists():
        return False
    with Gradebook(url(db)) as gb:
        try:
            return bool(gb.find_assignment(lesson).notebooks)
        except MissingEntry:
            return False


def lesson_scores(root: Path, lesson: str, db: Path | None = None) -> tuple[dict[str, float], float]:
    """({student: autograded score}, autograded maximum) of a lesson, read from the gradebook
    (`db`, default the course's) in one session."""
    from nbgrader.api import Gradebook

    with Gradebook(url(db or main_db(root))) as gb:
        assignment = gb.find_assignment(lesson)
        auto_max = sum(gc.max_score for nb in assignment.notebooks for gc in nb.grade_cells if gc.cell_type == "code")
        scores = {
            submission.student.id: float(sum(g.score for nb in submission.notebooks for g in nb.grades
                                              if g.cell.cell_type == "code"))
            for submission in assignment.submissions
        }
    return scores, float(auto_max)


def mark_flagged(db: Path, lesson: str, student: str) -> None:
    """Flag every notebook of a submission in the gradebook at `db`, so the Formgrader lists it as
    flagged (the grader's reasons are in the report: `python -m grader flags`). A flag is never
    cleared here: one the instructor set by hand stays."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(url(db)) as gb:
        try:
            submission = gb.find_submission(lesson, student)
        except MissingEntry:  # nothing was graded (no notebook, or a failed run it forgot)
            return
        for notebook in submission.notebooks:
            notebook.flagged = True
        gb.db.commit()


def has_lesson(root: Path, lesson: str) -> bool:
    return has_assignment(main_db(root), lesson)


def forget(root: Path, lesson: str, student: str, db: Path | None = None) -> None:
    """Drop what a failed run left behind, so feedback and exports never show partial grades."""
    from nbgrader.api import Gradebook, MissingEntry

    from grader.course import Course

    shutil.rmtree(Course(root).autograded(student, lesson), ignore_errors=True)
    with Gradebook(url(db or main_db(root))) as gb:
        try:
            gb.remove_submission(lesson, student)
        except MissingEntry:
            pass
