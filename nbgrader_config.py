"""nbgrader configuration for the course. Run nbgrader from the repository root."""

from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor
from nbgrader.preprocessors import ClearHiddenTests, GetGrades

c = get_config()  # noqa: F821 (provided by traitlets)

c.CourseDirectory.course_id = "llm-internals"
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "notebooks"

# Per-cell limit while autograding. tools/autograde.py adds a hard wall-clock limit per
# submission, because a loop that catches BaseException survives nbgrader's interrupt.
c.Execute.timeout = 120
c.Execute.interrupt_on_timeout = True

# Feedback never shows hidden-test code.
c.GenerateFeedback.preprocessors = [GetGrades, ClearHiddenTests, CSSHTMLHeaderPreprocessor]
