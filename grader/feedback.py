"""Feedback HTML for every autograded submission, then grades.csv; one bad notebook stops nothing.

    python grader/feedback.py [LESSON ...] [--root DIR]

`nbgrader generate_feedback LESSON` stops at the first notebook it cannot convert, and a
Makefile loop around it then never reaches the grade export. Here every submission is handled
on its own, failures are listed at the end, and `grades.csv` is written whatever happened.
What feedback may show is decided in nbgrader_config.py (RedactFeedback).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from grader.cells import lesson_names
from grader.course import Course
from grader.sanitize import add_content_security_policy, content_security_policy

ROOT = Path(__file__).resolve().parent.parent


def course_config(root: Path):
    """The course's nbgrader configuration (`root`/nbgrader_config.py), as nbgrader loads it."""
    import runpy

    from traitlets.config import Config

    config = Config()
    runpy.run_path(str(Course(root).config), init_globals={"get_config": lambda: config})
    return config


def course_directory(root: Path):
    """nbgrader's CourseDirectory of the course at `root`, configured by its nbgrader_config.py."""
    from nbgrader.coursedir import CourseDirectory

    return CourseDirectory(config=course_config(root), root=str(root.resolve()))


def feedback_policy(root: Path) -> str:
    """The Content-Security-Policy of the feedback pages: only what nbgrader's feedback template
    runs for a notebook with no cells (grader/sanitize.py)."""
    import nbformat
    import nbgrader
    from nbconvert.exporters import HTMLExporter

    config = course_config(root)
    formgrader = Path(nbgrader.__file__).parent / "server_extensions" / "formgrader"
    config.HTMLExporter.template_name = "feedback"  # as nbgrader's GenerateFeedback sets them
    config.HTMLExporter.extra_template_basedirs = [str(formgrader / "templates")]
    config.HTMLExporter.extra_template_paths = [str(formgrader / "static" / "node_modules" / "bootstrap" / "dist" / "css")]
    page, _ = HTMLExporter(config=config).from_notebook_node(
        nbformat.v4.new_notebook(), resources={"nbgrader": {"notebook": "", "score": 0, "max_score": 0, "late_penalty": 0}})
    return content_security_policy(page)


def generate_feedback(root: Path, lessons: list[str], students: list[str] | None = None) -> tuple[list[str], list[str]]:
    """(written, failed) as 'lesson/student' strings, for every graded student or only `students`.
    Each submission is converted on its own (one that fails stops nothing), all in this process:
    nbgrader's import costs 5 s, a page well under one, and feedback runs no submission code.
    Each page carries the feedback policy (no script but the template's own runs in it), besides
    what it renders being sanitised."""
    from nbgrader.apps import NbGraderAPI

    coursedir = course_directory(root)
    api = NbGraderAPI(coursedir, config=coursedir.config)
    written, failed = [], []
    policy = feedback_policy(root)
    for lesson in lessons:
        for graded in Course(root).graded(lesson):
            student = graded.parent.name
            if students is not None and student not in students:
                continue
            done = api.generate_feedback(lesson, student, force=True)
            if done["success"]:
                for page in Course(root).feedback(student, lesson).glob("*.html"):
                    page.write_text(add_content_security_policy(page.read_text(), policy))
                written.append(f"{lesson}/{student}")
            else:
                lines = [line for line in (done.get("error") or done.get("log") or "").splitlines() if line.strip()]
                failed.append(f"{lesson}/{student}: " + (lines[-1][:200] if lines else "nbgrader generate_feedback failed"))
    return written, failed


def awaiting_manual_grades(root: Path, lessons: list[str]) -> list[str]:
    """'lesson/student' of every graded submission with a written answer no one has graded yet:
    its feedback shows that answer as 0 until the Formgrader's manual grading is done."""
    from nbgrader.api import Gradebook, MissingEntry

    coursedir = course_directory(root)
    waiting = []
    with Gradebook(coursedir.db_url, coursedir.course_id) as gb:
        for lesson in lessons:
            try:
                submissions = gb.find_assignment(lesson).submissions
            except MissingEntry:
                continue
            waiting += [f"{lesson}/{s.student.id}" for s in submissions if s.needs_manual_grade]
    return sorted(waiting)


def export_grades(root: Path) -> str | None:
    """Write grades.csv and grades-by-student.csv (grader/grades.py); None, or what went wrong."""
    from grader import grades

    coursedir = course_directory(root)
    try:
        grades.export(root, coursedir.db_url, coursedir.course_id)
    except Exception as error:  # noqa: BLE001 (reported; feedback pages are written regardless)
        return f"{type(error).__name__}: {error}"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("lessons", nargs="*", help="assignments (default: every folder in solutions/)")
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="course directory (holds nbgrader_config.py; default: here)")
    parser.add_argument("--student", action="append", default=None, metavar="ID",
                        help="feedback for this student only (repeat for more); grades are exported for everyone")
    args = parser.parse_args(argv)
    written, failed = generate_feedback(args.root, args.lessons or lesson_names(args.root), args.student)
    error = export_grades(args.root)
    print(f"feedback/ written for {len(written)} submission(s) (hidden tests stripped)")
    waiting = [w for w in awaiting_manual_grades(args.root, args.lessons or lesson_names(args.root)) if w in written]
    if waiting:
        print(f"WARNING: {len(waiting)} of them have written answers not graded by hand yet, shown as 0 "
              f"({', '.join(waiting[:5])}{', ...' if len(waiting) > 5 else ''}): grade them in the Formgrader "
              "(make formgrader), then run make feedback again")
    for failure in failed:
        print(f"  no feedback for {failure}")
    print("grades.csv and grades-by-student.csv written" if error is None else f"grades NOT exported: {error[:300]}")
    return 0 if error is None and not failed else 1


if __name__ == "__main__":
    sys.exit(main())
