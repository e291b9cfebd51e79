"""nbgrader configuration for the course. Run nbgrader from the repository root.

The preprocessors named here live in grader/nbgrader_plugins.py.
"""

from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor
from nbgrader.converters import Autograde, GenerateAssignment
from nbgrader.preprocessors import ClearHiddenTests, Execute, GetGrades

from grader.nbgrader_plugins import ExecuteAnnouncingTestCells, RedactFeedback, TagTestCellsRaisesException

c = get_config()  # noqa: F821 (provided by traitlets)

c.CourseDirectory.course_id = "llm-internals"
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "notebooks"

# Per-cell limit while autograding. grader/autograde.py adds a hard wall-clock limit per
# submission, because a loop that catches BaseException survives nbgrader's interrupt.
c.Execute.timeout = 120
c.Execute.interrupt_on_timeout = True

c.Autograde.autograde_preprocessors = [ExecuteAnnouncingTestCells if p is Execute else p
                                      for p in Autograde.class_traits()["autograde_preprocessors"].default()]
c.GenerateAssignment.preprocessors = [*GenerateAssignment.class_traits()["preprocessors"].default(),
                                      TagTestCellsRaisesException]

# Feedback never shows hidden-test code, in the cells or in their outputs.
c.GenerateFeedback.preprocessors = [GetGrades, RedactFeedback, ClearHiddenTests, CSSHTMLHeaderPreprocessor]
