"""nbgrader configuration for the course. Run nbgrader from the repository root."""

from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor
from nbgrader.converters import GenerateAssignment
from nbgrader.preprocessors import ClearHiddenTests, GetGrades, NbGraderPreprocessor

c = get_config()  # noqa: F821 (provided by traitlets)


class TagTestCellsRaisesException(NbGraderPreprocessor):
    """Released notebooks only: test cells get JupyterLab's `raises-exception` tag, so that
    "Run All" goes on past the visible test of an unanswered exercise and the demos and widgets
    below it still run. The solutions stay untagged, so nbval still fails on any error there;
    autograde runs every cell whatever the tags, and the tag is not part of nbgrader's checksum.
    The solutions' saved widget state (the rendered widgets of the last execution) is dropped:
    a fresh student notebook has no outputs for it to belong to."""

    def preprocess(self, nb, resources):
        nb.metadata.pop("widgets", None)
        return super().preprocess(nb, resources)

    def preprocess_cell(self, cell, resources, index):
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("grade") and not meta.get("solution"):
            tags = cell.metadata.setdefault("tags", [])
            if "raises-exception" not in tags:
                tags.append("raises-exception")
        return cell, resources

c.CourseDirectory.course_id = "llm-internals"
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "notebooks"

# Per-cell limit while autograding. tools/autograde.py adds a hard wall-clock limit per
# submission, because a loop that catches BaseException survives nbgrader's interrupt.
c.Execute.timeout = 120
c.Execute.interrupt_on_timeout = True

c.GenerateAssignment.preprocessors = [*GenerateAssignment.class_traits()["preprocessors"].default(),
                                      TagTestCellsRaisesException]

# Feedback never shows hidden-test code.
c.GenerateFeedback.preprocessors = [GetGrades, ClearHiddenTests, CSSHTMLHeaderPreprocessor]
