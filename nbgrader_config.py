"""nbgrader configuration for the course. Run nbgrader from the repository root.

The preprocessors named here live in grader/nbgrader_plugins.py.
"""

import os

from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor
from nbgrader.converters import Autograde, GenerateAssignment
from nbgrader.preprocessors import ClearHiddenTests, ClearSolutions, Execute, GetGrades, SaveAutoGrades

from grader.nbgrader_plugins import (
    ExecuteAnnouncingTestCells,
    NameUnwrittenExercises,
    RedactFeedback,
    RequireCourseGrader,
    ScoreTestCellsByErrors,
    TagTestCellsRaisesException,
)

c = get_config()  # noqa: F821 (provided by traitlets)

c.CourseDirectory.course_id = "llm-internals"
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "notebooks"

# nbgrader's exchange (release_assignment, fetch_assignment, submit, collect, release_feedback,
# fetch_feedback, the learners' Assignments tab): COURSE_EXCHANGE names its folder, for the
# instructor and every learner alike (README, "With nbgrader's exchange"). No default of ours:
# a class that collects submissions by hand into submitted/ needs none, and unset leaves
# nbgrader's own (/usr/local/share/nbgrader/exchange, or what /etc/jupyter/nbgrader_config.py
# says on a shared server), which an administrator creates once, writable by everyone.
if os.environ.get("COURSE_EXCHANGE"):
    c.Exchange.root = os.path.abspath(os.environ["COURSE_EXCHANGE"])

# Per-cell limit while autograding. grader/autograde.py adds a hard wall-clock limit per
# submission, because a loop that catches BaseException survives nbgrader's interrupt.
c.Execute.timeout = 120
c.Execute.interrupt_on_timeout = True

# Grading runs only under `make autograde` (grader/autograde.py): plain `nbgrader autograde` and the
# Formgrader's button refuse before any cell runs. A test cell scores 0 only if it raised (a
# warning on stderr costs nothing); grader/verdicts.py then replays its checks outside the kernel.
_own = {Execute: ExecuteAnnouncingTestCells, SaveAutoGrades: ScoreTestCellsByErrors}
c.Autograde.autograde_preprocessors = [RequireCourseGrader] + [
    _own.get(p, p) for p in Autograde.class_traits()["autograde_preprocessors"].default()]
# The stubs name their exercise before nbgrader checksums and saves the cells.
_release = GenerateAssignment.class_traits()["preprocessors"].default()
_release.insert(_release.index(ClearSolutions) + 1, NameUnwrittenExercises)
c.GenerateAssignment.preprocessors = [*_release, TagTestCellsRaisesException]

# Feedback never shows hidden-test code, in the cells or in their outputs.
c.GenerateFeedback.preprocessors = [GetGrades, RedactFeedback, ClearHiddenTests, CSSHTMLHeaderPreprocessor]

# Every page nbgrader renders for this course (the Formgrader, feedback) sanitises what it renders,
# whatever the graded notebook holds (grader/sanitize.py; the grader also cleans the notebook).
c.HTMLExporter.sanitize_html = True
c.HTMLExporter.filters = {"markdown2html": "grader.sanitize.render_markdown",
                          "clean_html": "grader.sanitize.clean_html",
                          "get_metadata": "grader.sanitize.numeric_metadata"}
